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

from wsealloc.problem import AllocationProblem
from wsealloc.problem.objective import cores_needed, optimal_bottleneck
from wsealloc.solvers.base import SolveOptions, SolverResult, Status, result_from_choice

__all__ = ["cores_needed", "optimal_bottleneck", "solve"]


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """Bisection: proven optimal (status OPTIMAL) or proven infeasible; refuses an objective it cannot
    solve exactly (it is exact for min-max only)."""
    problem.objective.check_backend("bisect")
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
