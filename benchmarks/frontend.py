"""Front-end speed and memory: load + shapes + kernels + cost tables, one model per child process.

Target (issue: foundation): the llama-7b-shaped export (~5k ONNX nodes) in under 10 s on a 2-core
machine with peak memory under 1 GB. Usage::

    python benchmarks/frontend.py [models/llama-7b.onnx ...] [--arch wse2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import markdown, peak_rss_mib, run_child  # noqa: E402


def measure(model: str, arch: str) -> dict[str, object]:
    """Time each stage in this process (called in a child)."""
    from wsealloc.arch import load_arch
    from wsealloc.cost import CostOptions
    from wsealloc.frontend import import_onnx
    from wsealloc.graph.kernels import build_kernels
    from wsealloc.opmodels import build_cost_table

    t0 = time.perf_counter()
    graph = import_onnx(model)
    t1 = time.perf_counter()
    kgraph = build_kernels(graph)
    t2 = time.perf_counter()
    costs = build_cost_table(kgraph, load_arch(arch), CostOptions())
    t3 = time.perf_counter()
    return {
        "model": Path(model).name,
        "onnx_nodes": graph.onnx_nodes,
        "kernels": len(kgraph.kernels),
        "op_models": sum(len(kc.table) for kc in {kc.signature: kc for kc in costs.kernels}.values()),
        "load_shapes_s": round(t1 - t0, 2),
        "kernels_s": round(t2 - t1, 2),
        "cost_s": round(t3 - t2, 2),
        "total_s": round(t3 - t0, 2),
        "peak_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=["models/llama-7b.onnx"])
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.models[0], args.arch)))
        return
    rows = [run_child(__file__, m, "--arch", args.arch, "--child") for m in args.models]
    print(
        markdown(
            rows, ["model", "onnx_nodes", "kernels", "op_models", "load_shapes_s", "kernels_s", "cost_s", "total_s", "peak_mib"]
        )
    )


if __name__ == "__main__":
    main()
