"""How fast the placement search's two heaviest steps run, and what they make: for changes that must
keep the layouts and only save time.

For a model (with the user's rules, optionally) it times

1. the strip construction of every style (``place.styles``) at a few targets (multiples of the
   allocation bound; a target the style cannot pack costs a full construction too), and
2. the relocation (``relocate.relocate``) from one style's layout at one target to its own end (it
   ends when no move improves the layout; ``--relocate-limit`` caps it),

and prints the seconds beside a digest of what each step made (md5 of every layout's rectangles and
latencies; "-" where a style packs nothing). Two versions of the code run on the same model and rules
(one with ``PYTHONPATH`` set to a worktree of the other) do identical work when their digests agree,
so their seconds compare the code alone. Under the user's rules the relocation runs to the time
limit of a solve (the constraints benchmark), so its speed is what those plans gain.

Usage::

    python benchmarks/search_speed.py models/bert-base.onnx [--constraints rules.yaml] [--arch wse2]
        [--targets 1.05,1.2,1.4,2] [--relocate 1.2] [--style 4] [--relocate-limit 600]

(``python benchmarks/constraints.py --write DIR`` writes the rules files of the constraints benchmark.)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import markdown  # noqa: E402

from wsealloc.arch import load_arch  # noqa: E402
from wsealloc.budget import Deadline  # noqa: E402
from wsealloc.constraints import read_constraints  # noqa: E402
from wsealloc.cost import CostOptions  # noqa: E402
from wsealloc.frontend.sources import OnnxSource  # noqa: E402
from wsealloc.pipeline import build_costs  # noqa: E402
from wsealloc.problem import build_problem  # noqa: E402
from wsealloc.problem.placement import build_placement_problem  # noqa: E402
from wsealloc.solvers import SolveOptions, get_solver  # noqa: E402
from wsealloc.solvers.place import styles  # noqa: E402
from wsealloc.solvers.relocate import relocate  # noqa: E402
from wsealloc.solvers.strips import Placed, construct, score  # noqa: E402


def digest(layouts: list[Placed | None]) -> str:
    """md5 of the layouts' rectangles and latencies ("-" for a missing one), first 10 hex digits."""
    md5 = hashlib.md5()
    for placed in layouts:
        md5.update(b"-" if placed is None else placed.rects.tobytes() + placed.latency.tobytes())
    return md5.hexdigest()[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--constraints", default=None, help="the user's rules (YAML)")
    parser.add_argument("--targets", default="1.05,1.2,1.4,2", help="construction targets, multiples of the allocation bound")
    parser.add_argument("--relocate", type=float, default=1.2, help="the target of the relocation's start")
    parser.add_argument("--style", type=int, default=4, help="the style (index into place.styles) of the relocation's start")
    parser.add_argument("--relocate-limit", type=float, default=600.0, help="seconds at most for the relocation")
    args = parser.parse_args()

    rules = read_constraints(Path(args.constraints)) if args.constraints else None
    costs = build_costs(OnnxSource(path=args.model), load_arch(args.arch), CostOptions(), constraints=rules)
    bound = int(get_solver("bisect")(build_problem(costs), SolveOptions()).objective or 0)
    problem = build_placement_problem(costs, lower_bound=bound)
    every = styles(problem)
    rows = []

    made: list[Placed | None] = []
    start = time.perf_counter()
    for factor in (float(f) for f in args.targets.split(",")):
        target = np.full(problem.n_kernels, int(factor * bound))
        made += [construct(problem, target, style) for style in every]
    rows.append(
        {
            "step": f"{len(made)} constructions ({len(every)} styles x targets {args.targets} x bound)",
            "seconds": round(time.perf_counter() - start, 2),
            "made": f"{sum(p is not None for p in made)} layouts",
            "digest": digest(made),
        }
    )

    first = construct(problem, np.full(problem.n_kernels, int(args.relocate * bound)), every[args.style % len(every)])
    if first is not None:
        start = time.perf_counter()
        moved = relocate(problem, first, Deadline.after(args.relocate_limit))
        rows.append(
            {
                "step": f"relocation from style {args.style % len(every)} at {args.relocate} x bound",
                "seconds": round(time.perf_counter() - start, 2),
                "made": f"{score(problem, first)[0]:,} -> {score(problem, moved)[0]:,} cycles",
                "digest": digest([moved]),
            }
        )
    ruled = f" with {args.constraints}" if args.constraints else ""
    print(f"{Path(args.model).stem} on {args.arch}{ruled}: bound {bound:,} cycles\n")
    print(markdown(rows, ["step", "seconds", "made", "digest"]))


if __name__ == "__main__":
    main()
