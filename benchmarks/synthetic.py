"""Large synthetic graphs: a 20k-kernel model planned within a stated memory bound.

Builds (in a temp dir, nothing downloaded) ``synthetic:chain:N`` (wsealloc/frontend/synthetic.py: N
MatMul+GELU kernels, weights as absent external data), then times the front end, the cost table and an
allocation-only solve (exact bound + CP-SAT) in a child process and reports its peak memory.

    python benchmarks/synthetic.py [--kernels 20000] [--arch wse2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import markdown, peak_rss_mib, run_child  # noqa: E402


def measure(kernels: int, arch: str) -> dict[str, object]:
    """Build, then time each stage in this (child) process."""
    from wsealloc.api import solve_costs
    from wsealloc.arch import load_arch
    from wsealloc.cost import CostOptions
    from wsealloc.frontend import import_onnx
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.frontend.synthetic import build_chain
    from wsealloc.graph.kernels import build_kernels
    from wsealloc.opmodels import build_cost_table
    from wsealloc.request import build_request

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chain.onnx"
        t0 = time.perf_counter()
        build_chain(path, kernels)
        t1 = time.perf_counter()
        graph = import_onnx(path)
        kgraph = build_kernels(graph)
        t2 = time.perf_counter()
        costs = build_cost_table(kgraph, load_arch(arch), CostOptions())
        t3 = time.perf_counter()
        request = build_request(OnnxSource(path=str(path)), costs.arch, solver="cpsat", place=False)
        out = solve_costs(costs, request)
        t4 = time.perf_counter()
        return {
            "kernels": len(kgraph.kernels),
            "onnx_nodes": graph.onnx_nodes,
            "build_s": round(t1 - t0, 1),
            "frontend_s": round(t2 - t1, 1),
            "cost_s": round(t3 - t2, 1),
            "solve_s": round(t4 - t3, 1),
            "status": out.plan.objective.status,
            "bottleneck": out.plan.objective.bottleneck_cycles,
            "peak_mib": round(peak_rss_mib(), 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=20000)
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.kernels, args.arch)))
        return
    row = run_child(__file__, "--kernels", str(args.kernels), "--arch", args.arch, "--child")
    print(markdown([row], list(row)))


if __name__ == "__main__":
    main()
