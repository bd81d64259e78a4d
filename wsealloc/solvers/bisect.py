"""Exact min-max allocation by bisection over candidate latencies (``--solver bisect``).

With only the total-core budget coupling kernels, the problem is separable for a fixed target T:
each kernel takes its fewest-core candidate with latency <= T, and T is feasible iff those cores
fit. Feasibility is monotone in T, so bisection over the sorted distinct candidate latencies finds
the smallest feasible T, which is the optimum; the per-kernel fewest-core choices at T also
minimize the cores used among optimal allocations. Cost: O(log L * classes * log candidates).
(Resource-allocation literature: Ibaraki & Katoh 1988; Frederickson & Johnson 1982.)
"""

from __future__ import annotations

import time

import numpy as np

from wsealloc.problem import AllocationProblem
from wsealloc.solvers.base import SolveOptions, SolverResult, Status, result_from_choice


def cores_needed(problem: AllocationProblem, target: int, mult: np.ndarray) -> int | None:
    """Fewest total cores meeting latency <= target (None if some kernel cannot meet it)."""
    total = 0
    for cls, m in zip(problem.classes, mult, strict=True):
        if m == 0:
            continue
        idx = cls.fewest_cores_within(target)
        if idx < 0:
            return None
        total += int(cls.cores[idx]) * int(m)
    return total


def optimal_bottleneck(problem: AllocationProblem) -> int | None:
    """The optimal bottleneck latency, or None when even the fewest cores do not fit."""
    mult = problem.multiplicity()
    values = np.unique(np.concatenate([c.latency for c, m in zip(problem.classes, mult, strict=True) if m > 0]))
    lo, hi = 0, len(values) - 1
    need = cores_needed(problem, int(values[hi]), mult)
    if need is None or need > problem.total_cores:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        need = cores_needed(problem, int(values[mid]), mult)
        if need is not None and need <= problem.total_cores:
            hi = mid
        else:
            lo = mid + 1
    return int(values[lo])


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """Bisection: proven optimal (status OPTIMAL) or proven infeasible."""
    start = time.perf_counter()
    target = optimal_bottleneck(problem)
    if target is None:
        return SolverResult(
            "bisect",
            Status.INFEASIBLE,
            None,
            None,
            None,
            time.perf_counter() - start,
            message=f"fewest cores {problem.min_cores():,} exceed the {problem.total_cores:,} available",
        )
    choice = [problem.choices(i).fewest_cores_within(target) for i in range(problem.n_kernels)]
    return result_from_choice("bisect", problem, choice, Status.OPTIMAL, target, time.perf_counter() - start)
