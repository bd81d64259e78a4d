"""Training on one wafer (issue 24's targets): which zoo models train as a layer pipeline, how fast the
exact allocation proves it, and streamed training beside the published CS-2 figures.

1. Layer pipeline (``--train``, Adam, ``--recompute auto``, allocation only): per zoo model whether it
   fits one ``wse2``, the status (OPTIMAL: bound = objective) and the solve's own wall time (target:
   30 s), training samples/s, how many kernels recompute, the deepest stash. ``--mode auto`` for the
   models that do not fit (it must choose streaming and say why).
2. Weight streaming beside the published logs of one CS-2 (ALCF AI-testbed tutorials): GPT-2 small at
   sequence 2048, batch 112 (about 494 samples/s) and BERT-large at sequence 128, batch 1024 (930-1,394
   samples/s). The zoo's exports have fixed sequence lengths, so both are built here with wsealloc's own
   synthetic GPT-style decoder (``frontend.synthetic.build_transformer``: GPT-2 small's 12 layers, d 768,
   12 heads, vocabulary 50,257; BERT-large's 24 layers, d 1024, 16 heads, vocabulary 30,522 as a decoder
   of the same shapes) into a temporary folder. The off-wafer bandwidth is the preset's
   ``cluster.offwafer_bytes_per_s`` (150 GB/s each way: the 1.2 Tb/s of I/O a CS-2 is published with).

Usage::

    python benchmarks/training.py [--models gpt2,bert-base,bert-large,resnet50,vit-b16,llama-7b]

Exits 1 when a target is missed (a model the vendor trains as a pipeline that does not fit, a status
that is not OPTIMAL, a solve over 30 s, or LLaMA-7B not streamed under ``--mode auto``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402

import wsealloc.api as ws  # noqa: E402
from wsealloc.arch import load_arch  # noqa: E402
from wsealloc.cost.model import CostOptions, TrainingOptions  # noqa: E402
from wsealloc.errors import InfeasibleError  # noqa: E402
from wsealloc.frontend.sources import OnnxSource  # noqa: E402
from wsealloc.frontend.synthetic import build_transformer  # noqa: E402
from wsealloc.opmodels.streaming import largest_batch  # noqa: E402
from wsealloc.pipeline import build_costs  # noqa: E402

MODELS = ("gpt2", "bert-base", "bert-large", "resnet50", "vit-b16", "llama-7b")
PIPELINED = {"gpt2", "bert-base", "bert-large", "resnet50", "vit-b16"}  # under ~1B parameters: the vendor trains them so
TARGET_S = 30.0
PUBLISHED = {  # (layers, d, heads, sequence, vocabulary, batch): published samples/s on one CS-2, weight streaming
    "gpt2-small-2048": ((12, 768, 12, 2048, 50257, 112), "494"),
    "bert-large-128": ((24, 1024, 16, 128, 30522, 1024), "930-1,394"),
}


def pipelined_rows(models: list[str]) -> tuple[list[dict[str, object]], bool]:
    """Section 1: each zoo model trained as a layer pipeline (or, when it does not fit, --mode auto)."""
    rows: list[dict[str, object]] = []
    failed = False
    for name in models:
        onnx = ROOT / "models" / f"{name}.onnx"
        try:
            out = ws.solve(onnx, "wse2", train=True, place=False, time_limit=60)
        except InfeasibleError as error:
            auto = ws.solve(onnx, "wse2", train=True, mode="auto", place=False)
            streamed = auto.plan.request is not None and auto.plan.request.mode.value == "streaming"
            failed |= name in PIPELINED or not streamed
            rows.append(
                {
                    "model": name,
                    "pipeline": "does not fit: " + str(error).split(": ", 2)[-1][:90],
                    "--mode auto": f"{auto.plan.request.mode.value if auto.plan.request else '?'}, "
                    f"{auto.plan.objective.throughput_samples_per_s:,.1f} samples/s",
                }
            )
            continue
        o = out.plan.objective
        recompute = sum(k.dataflow == "train-recompute" for k in out.plan.kernels)
        deepest = max(kc.work.in_flight for kc in out.costs.kernels)  # type: ignore[union-attr]
        ok = o.status.value == "OPTIMAL" and o.wall_s <= TARGET_S
        failed |= not ok or name not in PIPELINED
        rows.append(
            {
                "model": name,
                "pipeline": f"{o.status.value} in {o.wall_s:.2f} s",
                "samples/s": f"{o.throughput_samples_per_s:,.1f}",
                "recompute": f"{recompute} of {len(out.plan.kernels)}",
                "deepest stash": f"{deepest} samples",
            }
        )
    return rows, failed


def streamed_rows(folder: Path) -> list[dict[str, object]]:
    """Section 2: the published streamed runs, predicted."""
    rows: list[dict[str, object]] = []
    for name, ((layers, d, heads, seq, vocab, batch), published) in PUBLISHED.items():
        path = folder / f"{name}.onnx"
        build_transformer(path, layers, d=d, heads=heads, seq=seq, vocab=vocab)
        run = f"{name} (batch {batch})"
        try:
            out = ws.solve(path, "wse2", train=True, mode="streaming", stream_batch=batch)
        except InfeasibleError:
            # the published batch does not fit the model's SRAM: predict at the largest batch that does
            costs = build_costs(
                OnnxSource(path=str(path)), load_arch("wse2"), CostOptions(train=TrainingOptions()), check_feasible=False
            )
            fits = largest_batch(costs)
            out = ws.solve(path, "wse2", train=True, mode="streaming", stream_batch=fits)
            run = f"{name} (batch {batch} does not fit; the largest that does: {fits})"
        o = out.plan.objective
        streamed = [kc.work for kc in (out.costs.members.kernels if out.costs.members else ())]
        recompute = sum(bool(getattr(w, "recompute", False)) for w in streamed)
        rows.append(
            {
                "run": run,
                "predicted samples/s": f"{o.throughput_samples_per_s:,.1f}",
                "published": published,
                "recompute": f"{recompute} of {len(streamed)}",
                "SRAM/core": f"{out.plan.regions[0].sram_bytes_per_core:,} B",
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    rows, failed = pipelined_rows(args.models.split(","))
    print(markdown(rows, ["model", "pipeline", "samples/s", "recompute", "deepest stash", "--mode auto"]))
    print()
    with tempfile.TemporaryDirectory(prefix="wsealloc-training-") as tmp:
        print(markdown(streamed_rows(Path(tmp)), ["run", "predicted samples/s", "published", "recompute", "SRAM/core"]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
