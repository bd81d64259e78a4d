"""Serving today's open models on CS-3 wafers beside Cerebras's published rates (issue 33, parts 2, 6, 7).

Each row is one proven plan: one token's time (``--objective latency``, regions chosen by the sharing
search) at a context of 4,096 tokens and one request in flight, on the fewest ``wse3-measured`` wafers
that hold the model and its KV cache (``--wafers auto``; one wafer for the 8B), allocation only unless
``--place``. ``wse3-measured`` is the WSE-3 with the execution costs fitted on WaferLLM's WSE-2 rows
carried over (its ``sources`` say which parameter is published and which carried over); nothing here is
fitted to the published rates, which are printed beside for comparison only (docs/sources.md: Cerebras's
launch blog of 2024-08-27, trade press for the later figures).

Usage::

    python benchmarks/serving.py [--models 8b,70b,405b,70b-prefill,405b-prefill,mixtral,qwen3-235b,maverick]
        [--time-limit 60] [--place] [--arch-family measured|standard]

Prints a Markdown table: wafers, the plan's tokens/s per request and its proven bound's, the gap, the
largest context at that request count, the time to first token (prefill rows: the prompt of 4,096
tokens through every wafer), the solve's wall time, and the published rates.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402

import wsealloc.api as ws  # noqa: E402
from wsealloc.frontend.hf_config import export_llm, read_hf_config  # noqa: E402
from wsealloc.plan.verify import verify_plan  # noqa: E402

CASES = {  # name: (zoo file, published tokens/s per user on CS-3 and where)
    "8b": ("llama3-8b-decode.onnx", "1,800 (Llama-3.1-8B, 1 CS-3, 2024-08)"),
    "70b": ("llama-3.1-70b-decode.onnx", "450 (2024-08), 2,100 (2024-10), 2,314 (3.3-70B, 2025); four CS-3"),
    "405b": ("llama-3.1-405b-decode.onnx", "969, first token 0.24 s (2024-11)"),
    # the prompt of the zoo's prefill exports: 4,096 tokens (the time to first token over the wafers)
    "70b-prefill": ("llama-3.1-70b-prefill.onnx", "-"),
    "405b-prefill": ("llama-3.1-405b-prefill.onnx", "first token 0.24 s (2024-11; prompt length not published)"),
    # mixtures of experts (issue 35): every expert resident, k of E at work per token, uniform routing
    "mixtral": ("mixtral-8x7b-decode.onnx", "- (not published)"),
    "qwen3-235b": ("qwen3-235b-a22b-decode.onnx", "about 1,500 (2025)"),
    # written from models/configs at run time into --out (no zoo file: 400B total, the configs allow it)
    "maverick": ("configs/llama-4-maverick-17b-128e.json", "2,522 (2025-05)"),
}
ARCHES = {"measured": "wse3-measured", "standard": "wse3"}


def _model(file: str, out_dir: Path) -> Path:
    """The zoo file, or the decode step written from a stored config (``export-llm``) into ``out_dir``."""
    if not file.endswith(".json"):
        return ROOT / "models" / file
    config = read_hf_config(ROOT / "models" / file)
    name = Path(file).stem
    export_llm(config, out_dir, name)
    return out_dir / f"{name}-decode.onnx"


def row(name: str, time_limit: float, place: bool, out_dir: Path, arch: str = "wse3-measured") -> dict[str, object]:
    """Plan one case and return its table row (the plan is written and verified)."""
    file, published = CASES[name]
    wafers: int | str = 1 if name == "8b" else "auto"
    plan_path = out_dir / f"{name}.plan.json"
    model = _model(file, out_dir)
    t0 = time.perf_counter()
    out = ws.solve(
        model,
        arch,
        objective="latency",
        context=4096 if "prefill" not in file else None,  # a prefill export carries its prompt
        wafers=wafers,
        place=place,
        time_limit=time_limit,
        output=plan_path,
    )
    wall = time.perf_counter() - t0
    plan = out.plan
    llm = plan.objective.llm
    assert llm is not None
    clock = plan.arch.clock_hz
    bound = plan.objective.bound_cycles
    report = verify_plan(plan_path)
    first = f"{llm.time_to_first_token_s:.3f} s" if llm.time_to_first_token_s is not None else "-"
    moe = plan.objective.experts
    return {
        "model": model.stem,
        "arch": arch,
        "wafers": len(plan.stages),
        "tokens/s per request": f"{llm.tokens_per_s_per_request:,.0f}",
        "bound (tokens/s at most)": f"{llm.tokens_per_request * clock / bound:,.0f}" if bound else "-",
        "gap": f"{plan.objective.gap:.1%}" if plan.objective.gap is not None else "-",
        "status": plan.objective.status.value,
        "largest context": f"{llm.largest_context:,}",
        "first token": first,
        "solve s": f"{wall:.1f}",
        "verified": "yes" if report.ok else f"no: {report.violations[0]}",
        "experts: share of time, worst routing tokens/s": (
            f"{moe.time_share:.0%}, {llm.tokens_per_request * clock / moe.worst_routing_value_cycles:,.0f}" if moe else "-"
        ),
        "published (tokens/s per user)": published,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="8b,70b,405b", help=f"of {', '.join(CASES)}")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--place", action="store_true", help="place every wafer (default: allocation only)")
    parser.add_argument("--out", type=Path, default=Path("/tmp"), help="where the plans are written")
    parser.add_argument(
        "--arch-family", choices=sorted(ARCHES), default="measured", help="wse3-measured (default) or the wse3 preset"
    )
    args = parser.parse_args()
    rows = [row(name, args.time_limit, args.place, args.out, ARCHES[args.arch_family]) for name in args.models.split(",")]
    columns = list(rows[0])
    print(markdown(rows, columns))
    return 0 if all(r["verified"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
