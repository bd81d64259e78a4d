"""Placement driver: strip construction with communication feedback, then CP-SAT refinement.

1. ``strips.smallest_target`` with zero margins gives the least uniform latency target that packs.
2. The placement's communication cycles (distance, congestion, die crossings) become per-kernel
   margins (target = T - margin) and the construction is repeated; the best placement by
   (bottleneck stage, traffic x distance) is kept.
3. ``cpsat_place.refine`` (large-neighbourhood search with CP-SAT) improves it until the time limit.
Status OPTIMAL only when the bottleneck equals the allocation-only optimum (a proven lower bound).
"""

from __future__ import annotations

import time

import numpy as np

from wsealloc.problem.placement import PlacementProblem
from wsealloc.solvers.base import PlacementResult, SolveOptions, Status
from wsealloc.solvers.strips import Placed, smallest_target

FEEDBACK_ROUNDS = 4


def evaluate(problem: PlacementProblem, placed: Placed) -> tuple[int, float]:
    """(bottleneck stage cycles, traffic x distance) of a placement."""
    stage, comm = problem.evaluate(placed.rects, placed.latency, placed.noc)
    return int(stage.max()), comm.traffic_distance


def construct_best(problem: PlacementProblem, deadline: float) -> Placed | None:
    """Strip construction with communication margins fed back for a few rounds."""
    margins = np.zeros(problem.n_kernels, dtype=np.int64)
    best: tuple[tuple[int, float], Placed] | None = None
    for _ in range(FEEDBACK_ROUNDS):
        found = smallest_target(problem, margins, problem.lower_bound, deadline)
        if found is None:
            break
        placed = found[1]
        score = evaluate(problem, placed)
        if best is None or score < best[0]:
            best = (score, placed)
        _, comm = problem.evaluate(placed.rects, placed.latency, placed.noc)
        new = comm.comm_cycles.astype(np.int64)
        if np.array_equal(new, margins) or time.perf_counter() > deadline:
            break
        margins = new
    return None if best is None else best[1]


def solve(problem: PlacementProblem, options: SolveOptions, refine: bool = True) -> PlacementResult:
    """Place every kernel; best placement within the time limit with its status, bound and gap."""
    start = time.perf_counter()
    deadline = start + options.time_limit_s
    placed = construct_best(problem, deadline)
    if placed is None:
        return PlacementResult(
            "strips",
            Status.UNKNOWN,
            None,
            None,
            None,
            problem.lower_bound,
            time.perf_counter() - start,
            message="no placement found: too little room for the kernels (defects, die rule)",
        )
    solver = "strips"
    if refine and time.perf_counter() < deadline and not options.stop.stopped.is_set():
        from wsealloc.solvers.cpsat_place import refine as cp_refine

        improved = cp_refine(problem, placed, options, deadline)
        if improved is not None and evaluate(problem, improved) < evaluate(problem, placed):
            placed, solver = improved, "strips+cpsat"
    objective, traffic = evaluate(problem, placed)
    status = Status.OPTIMAL if objective <= problem.lower_bound else Status.FEASIBLE
    return PlacementResult(
        solver, status, placed.rects, placed.dataflow, objective, problem.lower_bound, time.perf_counter() - start, traffic
    )
