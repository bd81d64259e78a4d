"""The published training logs of Cerebras systems, run as the systems ran them (issue 34, deliverable 4).

Each row of the logs (ALCF AI-testbed user guide, ``example-programs.md`` of releases R1.7.1, R2.4.0 and
R2.9.0; samples/s read off the logs' ``Rate=`` lines, batch = samples / steps), planned by wsealloc:

- the model's shape as the Cerebras model zoo configures it (Cerebras/modelzoo: BERT-large 24 layers,
  d 1024, 16 heads, FFN 4096, vocabulary 30,522 at 128 tokens; GPT-J 6B ``params_gptj_6B.yaml``: 28
  layers, d 4096, 16 heads, FFN 16,384, vocabulary 50,257, 2,048 tokens; Llama2-7B
  ``params_llama2_7b.yaml``: 32 layers, d 4096, 32 heads, SwiGLU FFN 11,008, vocabulary 32,000, 4,096
  tokens), written as wsealloc's synthetic decoder (``frontend.synthetic.build_transformer``: LayerNorm,
  fused QKV, eager attention, a 4d GELU MLP; the SwiGLU FFN of Llama2-7B, 3 x 4096 x 11,008, has the
  MACs of a 4d MLP, 2 x 4096 x 16,384, within 1%) in a temporary folder;
- trained with Adam (the zoo's AdamW), ``--recompute auto``, the global batch of the log
  (``--train-batch``), the micro-batch chosen by the solver (``--micro-batch`` not given: the fastest
  size, proven);
- streamed with the memory forms the release ran (docs/cost-model.md, section 12, "Training as the vendor
  runs it"; by capacity alone: the logged batches' attention probabilities, and from R2.4.0 on their
  layer boundaries, exceed the wafer's SRAM): attention's probabilities recomputed (``--attention
  recomputed``) in every streamed row, checkpoints off the wafer (``--checkpoints offwafer``) in the
  R2.4.0 and R2.9.0 rows (R1.7.1's config ran 65 a box because more "doesn't fit on system yet": its
  checkpoints stayed on the wafer);
- in the mode the system ran (BERT-large pipelined, the rest weight streaming) on the wafer it ran on
  (CS-2: WSE-2, CS-3: WSE-3); two CS-2 run data-parallel, each its half of the batch with its own weight
  stream (SwarmX broadcasts the weights and reduces the gradients in the network: S. Lie, "Cerebras
  Architecture Deep Dive", Hot Chips 34, 2022), so their rate is twice one wafer's at the per-box batch.

Physical parameters only (the presets' sources; no factor per model): the off-wafer stream is the
presets' ``cluster.offwafer_bytes_per_s`` = 150 GB/s each way, the 1.2 Tb/s of I/O (12 x 100 GbE) Cerebras
publishes for a CS-2 and a CS-3. ``--arch-family`` picks the presets: ``measured`` (the default:
``wse2-measured``/``wse3-measured``, the only presets whose execution costs were measured on a wafer,
WaferLLM's WSE-2 runs, docs/cost-model.md section 9) or ``standard`` (``wse2``/``wse3``: full SIMD lanes,
section 3). docs/benchmarks.md, "Training as the vendor runs it", has both tables and what differs.

Usage::

    python benchmarks/cs2_training.py [--arch-family standard|measured] [--rows bert,gptj-2cs2,...] [--png PATH]

Exits 1 when a row is off by more than a factor of 2 or the CS-2 to CS-3 step goes the wrong way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import markdown  # noqa: E402

import wsealloc.api as ws  # noqa: E402
from wsealloc.errors import InfeasibleError  # noqa: E402
from wsealloc.frontend.synthetic import build_transformer  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """A decoder's shape as the model zoo configures it."""

    layers: int
    d: int
    heads: int
    seq: int
    vocab: int


BERT_LARGE = Shape(24, 1024, 16, 128, 30522)
GPTJ = Shape(28, 4096, 16, 2048, 50257)
LLAMA2_7B = Shape(32, 4096, 32, 4096, 32000)


@dataclass(frozen=True)
class Row:
    """One published log line: the system, the model, how it ran, the rate."""

    key: str
    system: str
    release: str
    model: str
    shape: Shape
    mode: str  # pipelined | streaming
    wafer: str  # wse2 | wse3
    systems: int
    batch: int  # global batch
    published: tuple[float, ...]  # samples/s (several releases of one system: each)
    differs: str
    # weight streaming's memory forms as the release ran them (docs/cost-model.md, section 12, "Training
    # as the vendor runs it"): attention's probabilities recomputed, checkpoints off the wafer
    attention: str = "stored"
    checkpoints: str = "wafer"


ROWS = (
    Row(
        "bert", "1 CS-2", "R1.7.1 (PyTorch / TF), R2.4.0", "BERT-large, 128 tokens", BERT_LARGE, "pipelined", "wse2", 1,
        1024, (7023.0, 6370.0, 4048.0),
        "a decoder of BERT-large's shapes (the MLM head on every token, not 15%; no pooler or NSP head)",
    ),
    Row(
        "gptj-2cs2", "2 CS-2", "R1.7.1", "GPT-J 6B, 2,048 tokens", GPTJ, "streaming", "wse2", 2, 130, (27.5,),
        "data-parallel: 65 samples a box; GPT-J's parallel attention and MLP as one residual chain; rotary not costed",
        "recomputed",
    ),
    Row(
        "gptj-cs2", "1 CS-2", "R2.4.0", "GPT-J 6B, 2,048 tokens", GPTJ, "streaming", "wse2", 1, 120, (43.7,),
        "GPT-J's parallel attention and MLP as one residual chain; rotary embeddings not costed",
        "recomputed", "offwafer",
    ),
    Row(
        "gptj-cs3", "1 CS-3", "R2.9.0", "GPT-J 6B, 2,048 tokens", GPTJ, "streaming", "wse3", 1, 120, (44.8,),
        "as on the CS-2",
        "recomputed", "offwafer",
    ),
    Row(
        "llama-cs2", "1 CS-2", "R2.4.0", "Llama2-7B, 4,096 tokens", LLAMA2_7B, "streaming", "wse2", 1, 99, (20.5,),
        "a 4d GELU MLP for SwiGLU (same MACs within 1%), LayerNorm for RMSNorm; the log ran 99 as one pass",
        "recomputed", "offwafer",
    ),
    Row(
        "llama-cs3", "1 CS-3", "R2.9.0", "Llama2-7B, 4,096 tokens", LLAMA2_7B, "streaming", "wse3", 1, 1024, (32.0,),
        "as on the CS-2",
        "recomputed", "offwafer",
    ),
)  # fmt: skip


def arch_of(row: Row, family: str) -> str:
    """The preset of the row's wafer in the chosen family."""
    return row.wafer if family == "standard" else f"{row.wafer}-measured"


def predict(row: Row, family: str, folder: Path) -> dict[str, object]:
    """Plan one row as the system ran it; the predicted samples/s against the published."""
    s = row.shape
    path = folder / f"{s.layers}x{s.d}x{s.heads}x{s.seq}x{s.vocab}.onnx"
    if not path.exists():
        build_transformer(path, s.layers, d=s.d, heads=s.heads, seq=s.seq, vocab=s.vocab)
    per_box = -(-row.batch // row.systems)
    t0 = time.perf_counter()
    base: dict[str, object] = {
        "row": row.key,
        "system": f"{row.system}, {row.release}",
        "model": row.model,
        "mode": row.mode,
        "batch": f"{row.batch:,}" + (f" ({per_box} a box)" if row.systems > 1 else ""),
        "attention, checkpoints": f"{row.attention}, {row.checkpoints}" if row.mode == "streaming" else "-",
        "published": " / ".join(f"{p:,.1f}" for p in row.published),
        "what differs": row.differs,
    }
    try:
        forms = {"attention": row.attention, "checkpoints": row.checkpoints} if row.mode == "streaming" else {}
        out = ws.solve(
            path, arch_of(row, family), train=True, train_batch=per_box, mode=row.mode, place=False, time_limit=600, **forms
        )
    except InfeasibleError as error:  # not even one sample a micro-batch fits: a miss, said why
        why = str(error).split(": ", 1)[-1]
        return base | {
            "micro-batch": "-",
            "predicted samples/s": "does not fit",
            "predicted / published": "-",
            "what differs": f"{row.differs}; {why[:160]}",
            "solve": f"{time.perf_counter() - t0:.0f} s",
            "_rate": 0.0,
            "_errors": [0.0],
        }
    wall = time.perf_counter() - t0
    print(f"{row.key}: {out.plan.decision.reason}", file=sys.stderr)
    rate = out.plan.objective.throughput_samples_per_s * row.systems
    decision = out.plan.decision
    micro = getattr(decision, "micro_batch", None) or getattr(decision, "batch", None)
    errors = [rate / p for p in row.published]
    return base | {
        "micro-batch": micro,
        "predicted samples/s": f"{rate:,.1f}",
        "predicted / published": " / ".join(f"{e:.2f}" for e in errors),
        "solve": f"{out.plan.objective.status.value}, {wall:.0f} s",
        "_rate": rate,
        "_errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch-family", choices=("standard", "measured"), default="measured")
    parser.add_argument("--rows", default=",".join(r.key for r in ROWS))
    parser.add_argument("--png", type=Path, default=None, help="write the predicted-vs-published picture here")
    args = parser.parse_args()
    wanted = set(args.rows.split(","))
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="wsealloc-cs2-") as tmp:
        for row in ROWS:
            if row.key in wanted:
                rows.append(predict(row, args.arch_family, Path(tmp)))
                print(f"{row.key}: {rows[-1]['predicted samples/s']} samples/s", file=sys.stderr)
    columns = ["system", "model", "mode", "batch", "attention, checkpoints", "micro-batch", "predicted samples/s", "published"]
    columns += ["predicted / published", "what differs", "solve"]
    print(markdown(rows, columns))
    failed = any(not 0.5 <= e <= 2.0 for r in rows for e in r["_errors"])  # type: ignore[attr-defined]
    rate = {r["row"]: r["_rate"] for r in rows}
    for cs2, cs3 in (("gptj-cs2", "gptj-cs3"), ("llama-cs2", "llama-cs3")):
        if cs2 in rate and cs3 in rate and rate[cs3] <= rate[cs2]:  # type: ignore[operator]
            print(f"{cs3} is not faster than {cs2}, as the logs are", file=sys.stderr)
            failed = True
    if args.png is not None:
        picture(rows, args.png, args.arch_family)
    return 1 if failed else 0


def picture(rows: list[dict[str, object]], path: Path, family: str) -> None:
    """Predicted against published samples/s, log-log, with the factor-of-2 band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    points = []
    for r in rows:
        if not float(r["_rate"]):  # type: ignore[arg-type]
            continue  # (does not fit: no point)
        for p in str(r["published"]).replace(",", "").split(" / "):
            points.append((float(p), float(r["_rate"])))  # type: ignore[arg-type]
            ax.scatter(float(p), float(r["_rate"]), s=28)  # type: ignore[arg-type]
        ax.annotate(str(r["row"]), (float(p), float(r["_rate"])), fontsize=8, xytext=(4, 4), textcoords="offset points")  # type: ignore[arg-type]
    lo = min(min(a, b) for a, b in points) / 2.5
    hi = max(max(a, b) for a, b in points) * 2.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="predicted = published")
    ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=1, label="factor of 2")
    ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published samples/s (Cerebras logs)")
    ax.set_ylabel(f"predicted samples/s (wsealloc, {family} presets)")
    ax.set_title("Training on CS-2 / CS-3: the published logs reproduced")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
