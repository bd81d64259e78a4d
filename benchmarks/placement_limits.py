"""What a placement target asks of the wafer, from the op models and the communication model alone.

For a target bottleneck ``T = factor x allocation optimum`` (the issue's 10%: factor 1.1) it prints

* the share of the wafer the kernels' smallest legal rectangles meeting T cover (a packing needs
  more: rectangles are tile-quantized and must also leave room for traffic);
* the flows that *cannot* take a vertical leg: in the communication model (``wsealloc.cost.comm``) a
  flow between rectangles with disjoint row spans has a vertical leg as wide as the producer's or
  the consumer's columns, and its busy cycles (bytes / (link bandwidth x width)) may exceed the
  consumer's own busy time (latency - hop x (r + c)) by at most T - latency - hop x distance, i.e.
  busy <= T - hop x (1 + r + c) (distance >= 1). When even the widest legal rectangle of either
  kernel meeting T is too narrow, the two kernels must share rows: they sit side by side, so their
  widths add up along a row of the wafer;
* the chains of kernels tied that way, with their smallest heights and the width they need when
  laid out in one lane (an estimate for that layout, not a bound for every layout), and the area
  left to the other kernels.

With ``--pack SECONDS`` it also asks CP-SAT whether the legal rectangles at T pack on the wafer at
all with communication ignored (a relaxation: "no packing" proves T unreachable; a packing says the
area is not what stops a placement).

With ``--train`` (training plans) or ``--constraints FILE`` (the user's rules: fixed grids, corners,
keep-outs) it reads the problem the solve places: the cost table of an allocation-only solve of the
same request, its proven bound as the optimum, and the cores the keep-outs leave as the wafer.

Usage::

    python benchmarks/placement_limits.py models/resnet50.onnx [--arch wse2] [--factor 1.1] [--pack 120]
        [--train] [--constraints rules.yaml]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from wsealloc.budget import Deadline

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402


def smallest(problem, k: int, target: int) -> tuple[int, int, int, int]:  # type: ignore[no-untyped-def]
    """(least area, least rows, most columns, least rows + columns) of kernel k's legal rectangles
    meeting ``target``."""
    shape = problem.shape(k)
    area, r_min, c_max, half = 0, 0, 0, 0
    for h in range(shape.heights.size):
        fast = np.flatnonzero(shape.best[h] <= target)
        if fast.size == 0:
            continue
        c = int(fast[0])
        r = int(shape.best_r[h, c])
        area = r * c if area == 0 else min(area, r * c)
        r_min = r if r_min == 0 else min(r_min, r)
        half = r + c if half == 0 else min(half, r + c)
        c_max = max(c_max, int(fast[-1]))
    return area, r_min, c_max, half


def packing(problem, factors: list[float], seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Whether the kernels' legal rectangles at each target pack on the wafer at all, communication
    ignored (``cpsat_place.pack_ignoring_comm``; the user's corners and areas kept, with
    ``--constraints``); a packing found is checked here independently."""
    from wsealloc.solvers.base import SolveOptions, Status
    from wsealloc.solvers.cpsat_place import pack_ignoring_comm

    mesh = problem.mesh
    rows = []
    for factor in factors:
        t = int(factor * problem.lower_bound)
        start = time.perf_counter()
        status, rects = pack_ignoring_comm(problem, t, SolveOptions(deadline=Deadline.after(seconds), workers=2))
        wall = time.perf_counter() - start
        if rects is not None:
            grid = np.zeros((mesh.rows, mesh.cols), dtype=np.int32)
            for row, col, r, c in rects.tolist():
                assert row >= 0 and col >= 0 and row + r <= mesh.rows and col + c <= mesh.cols
                grid[row : row + r, col : col + c] += 1
            assert grid.max() <= 1 and not (grid.astype(bool) & problem.blocked).any(), "packing overlaps"
            for k, pin in enumerate(problem.pins):
                assert pin is None or tuple(rects[k, :2].tolist()) == tuple(pin), f"kernel {k} off its corner"
            used = f"{int(grid.sum()):,}"
        else:
            used = ""
        word = {Status.FEASIBLE: "packed", Status.INFEASIBLE: "no packing"}.get(status, "unknown")
        rows.append({"T": t, "x bound": factor, "packing (no communication)": word, "cores": used, "seconds": round(wall, 1)})
    print(markdown(rows, ["T", "x bound", "packing (no communication)", "cores", "seconds"]) + "\n")


def main() -> None:
    import wsealloc.api as ws
    from wsealloc.problem.placement import build_placement_problem

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", nargs="?", default=str(ROOT / "models" / "resnet50.onnx"))
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--factor", type=float, default=1.1)
    parser.add_argument(
        "--pack",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also try to pack the wafer at each target with communication ignored (CP-SAT, per target)",
    )
    parser.add_argument("--train", action="store_true", help="the training plan's problem (forward, backward, update)")
    parser.add_argument("--constraints", default=None, metavar="FILE", help="the user's rules (grids, corners, keep-outs)")
    args = parser.parse_args()

    # the table and bound the solve places (training's, or under the rules: no second cost path here)
    free = ws.solve(args.model, args.arch, place=False, train=args.train, constraints=args.constraints)
    bound = free.plan.objective.bound_cycles
    problem = build_placement_problem(free.costs, lower_bound=int(bound or 0))
    mesh = problem.mesh
    wafer = mesh.rows * mesh.cols - int(problem.blocked.sum())  # the working cores (keep-outs, defects)
    target = int(args.factor * problem.lower_bound)
    n = problem.n_kernels
    print(f"{Path(args.model).stem} on {args.arch}: allocation optimum {problem.lower_bound:,} cycles, target T = {target:,}\n")

    rows = []
    for factor in sorted({1.0, 1.05, args.factor, 1.15, 1.2, 1.25}):
        t = int(factor * problem.lower_bound)
        need = sum(smallest(problem, k, t)[0] for k in range(n))
        rows.append({"T": t, "x bound": factor, "smallest rectangles": f"{need:,}", "of the wafer": f"{need / wafer:.1%}"})
    print(markdown(rows, ["T", "x bound", "smallest rectangles", "of the wafer"]) + "\n")
    if args.pack > 0:
        packing(problem, sorted({1.0, 1.05, args.factor}), args.pack)

    info = [smallest(problem, k, target) for k in range(n)]
    fl = problem.flows
    pairs: dict[tuple[int, int], float] = {}
    for s, t, b in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), strict=True):
        pairs[(s, t)] = pairs.get((s, t), 0.0) + b
    tied: list[dict[str, object]] = []
    parent = list(range(n))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for (s, t), b in sorted(pairs.items()):
        widest = max(info[s][2], info[t][2])
        busy = b / (mesh.link_bytes_per_cycle * widest) if widest else float("inf")
        # stage = latency + max(0, busy - (latency - hop (r + c))) + hop dist <= T with dist >= 1
        allowed = target - mesh.hop_latency * (1 + info[t][3])
        if busy > allowed:
            parent[find(s)] = find(t)
            tied.append(
                {
                    "producer": f"{s} {problem.names[s]}",
                    "consumer": f"{t} {problem.names[t]}",
                    "MB": round(b / 1e6, 2),
                    "widest leg": widest,
                    "vertical busy": int(busy),
                    "allowed": allowed,
                }
            )
    print(f"flows that cannot run vertically within T ({len(tied)}): producer and consumer must share rows\n")
    print(markdown(tied, ["producer", "consumer", "MB", "widest leg", "vertical busy", "allowed"]) + "\n")

    chains: dict[int, list[int]] = {}
    for k in range(n):
        chains.setdefault(find(k), []).append(k)
    out = []
    for members in chains.values():
        if len(members) < 2:
            continue
        lane = max(info[k][1] for k in members)  # the tallest "least rows" of the chain
        width = 0
        for k in members:
            shape = problem.shape(k)
            width += shape.width_for(shape.height_index(lane), target) or mesh.cols + 1
        rest = sum(info[k][0] for k in range(n) if k not in members)
        left = wafer - lane * width
        out.append(
            {
                "kernels": ", ".join(str(k) for k in members),
                "lane rows": lane,
                "one-lane width": width,
                "of wafer width": f"{width / mesh.cols:.0%}",
                "others need": f"{rest:,}",
                "area left": f"{left:,}",
                "others / left": f"{rest / left:.0%}",
            }
        )
    print("chains of kernels tied side by side, laid out in one lane as tall as their tallest least height\n")
    columns = ["kernels", "lane rows", "one-lane width", "of wafer width", "others need", "area left", "others / left"]
    print(markdown(out, columns))


if __name__ == "__main__":
    main()
