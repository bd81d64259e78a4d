"""Allocation-only solves of the zoo: status, bound == objective, wall time incl. front end, speed-up.

Target (issue: solve): every zoo model OPTIMAL with bound == objective within 10 s on a 2-core machine
including the front end, never worse than greedy. Placed runs (the default) also check the plan with
``wsealloc verify`` (column ``valid``). One child process per (model, solver). Usage::

    python benchmarks/solve.py [--arch wse2] [--solver cpsat] [models ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown, peak_rss_mib, run_child  # noqa: E402

ZOO = ["gpt2", "gpt2-xl", "bert-base", "bert-large", "resnet50", "vit-b16", "llama-7b"]


def measure(model: str, arch: str, solver: str, place: bool, time_limit: float) -> dict[str, object]:
    """Solve one model (in a child process) and report the figures."""
    import tempfile

    from wsealloc.api import solve
    from wsealloc.plan.verify import verify_plan

    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.json"
        t0 = time.perf_counter()
        out = solve(model, arch, solver=solver, time_limit=time_limit, place=place, output=plan_path)
        total = time.perf_counter() - t0
        report = verify_plan(plan_path)
    obj = out.plan.objective
    return {
        "model": Path(model).stem,
        "solver": solver,
        "kernels": len(out.plan.kernels),
        "status": obj.status,
        "valid": report.ok,
        "bottleneck": obj.bottleneck_cycles,
        "bound": obj.lower_bound_cycles,
        "bound_eq_obj": obj.lower_bound_cycles == obj.bottleneck_cycles,
        "vs_bound": round(obj.bottleneck_cycles / obj.lower_bound_cycles - 1, 4) if obj.lower_bound_cycles else None,
        # placed: the bound that counts communication (issue 37) and the gap to the larger bound
        "comm_bound": obj.comm_bound_cycles,
        "vs_best": round(obj.bottleneck_cycles / obj.best_bound - 1, 4) if obj.best_bound else None,
        "greedy": out.baseline.objective,
        "greedy_placed": out.plan.baseline.placed_bottleneck_cycles,
        "speedup": round(out.speedup or 0.0, 2),
        "solver_s": round(obj.wall_s, 2),
        "total_s": round(total, 2),
        "samples_per_s": round(obj.throughput_samples_per_s, 1),
        "peak_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=[str(ROOT / "models" / f"{m}.onnx") for m in ZOO])
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--solver", default="cpsat")
    parser.add_argument("--no-place", action="store_true", help="allocation only")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.models[0], args.arch, args.solver, not args.no_place, args.time_limit)))
        return
    extra = ["--no-place"] if args.no_place else []
    rows = [
        run_child(
            __file__, m, "--arch", args.arch, "--solver", args.solver, "--time-limit", str(args.time_limit), "--child", *extra
        )
        for m in args.models
    ]
    cols = ["model", "kernels", "status", "valid", "bottleneck", "bound", "vs_bound", "greedy"]
    cols += [] if args.no_place else ["comm_bound", "vs_best", "greedy_placed"]
    print(markdown(rows, [*cols, "speedup", "solver_s", "total_s", "samples_per_s", "peak_mib"]))


if __name__ == "__main__":
    main()
