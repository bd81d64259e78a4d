"""The seed notebook's greedy proportional allocator: the baseline and the solvers' warm start.

Rule (``../shared/seeds/000_*``): memory-bound kernels get the fewest cores their memory needs;
compute-bound kernels share the remaining cores in proportion to their compute.

* ``greedy`` (sound, the default): every kernel's share of the cores is proportional to its compute
  (single-core cycles: MACs / MAC rate + vector ops / vector rate). A kernel whose share is below
  the fewest cores its memory needs (its smallest legal op model) is memory-bound: it gets exactly
  that, and the others share what is left (repeated until no new kernel turns memory-bound). Each
  share is snapped down to the largest legal op model within it; if the total is over budget, it is
  repaired by stepping down the kernel whose latency grows least.
* ``greedy-seed`` (faithful): memory-bound = every op type but Gemm, given
  ``floor(output bytes / SRAM per core)`` cores (0 for small tensors), Gemm kernels share the rest
  in proportion to the notebook's compute estimate (MatMul is 0 there). Core counts are then mapped
  to the largest legal op model not above them; kernels left below their smallest legal op model
  make the plan INVALID, reported with their count.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from wsealloc.problem import AllocationProblem
from wsealloc.solvers.base import SolveOptions, SolverResult, Status, result_from_choice


def _largest_within(cores: np.ndarray, budget: float) -> int:
    """Index of the largest candidate with cores <= budget (0 if none: the smallest)."""
    idx = int(np.searchsorted(cores, budget, side="right")) - 1
    return max(idx, 0)


def _repair(
    problem: AllocationProblem, choice: list[int], kernels: tuple[int, ...] | None = None, cap: int | None = None
) -> None:
    """Step kernels (of ``kernels``; None: all) down to cheaper candidates until their cores fit
    ``cap`` (None: the total), least latency growth first."""
    members = range(problem.n_kernels) if kernels is None else kernels
    limit = problem.total_cores if cap is None else cap
    used = sum(int(problem.choices(i).cores[choice[i]]) for i in members)
    heap: list[tuple[int, int]] = []
    for i in members:
        j = choice[i]
        if j > 0:
            heapq.heappush(heap, (int(problem.choices(i).latency[j - 1]), i))
    while used > limit and heap:
        _, i = heapq.heappop(heap)
        ch = problem.choices(i)
        j = choice[i]
        used -= int(ch.cores[j] - ch.cores[j - 1])
        choice[i] = j - 1
        if j - 1 > 0:
            heapq.heappush(heap, (int(ch.latency[j - 2]), i))


def greedy_choice(problem: AllocationProblem) -> list[int]:
    """The sound greedy allocation (may exceed the budget only if even the minimum does)."""
    compute = np.asarray(problem.hints.compute, dtype=np.float64)
    floor = np.array([int(problem.choices(i).cores[0]) for i in range(problem.n_kernels)], dtype=np.float64)
    memory_bound = np.zeros(problem.n_kernels, dtype=bool)
    while True:
        remaining = problem.total_cores - floor[memory_bound].sum()
        weight = compute[~memory_bound].sum()
        share = np.where(memory_bound, floor, remaining * compute / weight if weight > 0 else floor)
        newly = (~memory_bound) & (share < floor)
        if not newly.any():
            break
        memory_bound |= newly
    choice = [_largest_within(problem.choices(i).cores, float(share[i])) for i in range(problem.n_kernels)]
    for budget in problem.budgets:  # the user's areas: their kernels give back cores as the total does
        _repair(problem, choice, budget.kernels, budget.cores)
    _repair(problem, choice)
    return choice


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """Sound greedy: FEASIBLE when it fits, INFEASIBLE when even the smallest op models do not."""
    start = time.perf_counter()
    choice = greedy_choice(problem)
    status = Status.FEASIBLE if problem.feasible(choice) else Status.INFEASIBLE
    return result_from_choice("greedy", problem, choice, status, None, time.perf_counter() - start)


def solve_seed(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """The notebook's faithful rule, mapped onto legal op models; INVALID when it leaves kernels short."""
    start = time.perf_counter()
    hints = problem.hints
    n = problem.n_kernels
    cores = np.zeros(n, dtype=np.float64)
    for i in range(n):
        if not hints.seed_compute_bound[i]:
            cores[i] = hints.seed_memory_bytes[i] // hints.sram_bytes_per_core
    remaining = problem.total_cores - cores.sum()
    total_compute = sum(hints.seed_compute[i] for i in range(n) if hints.seed_compute_bound[i])
    for i in range(n):
        if hints.seed_compute_bound[i] and total_compute > 0:
            cores[i] = int(hints.seed_compute[i] / total_compute * remaining)
    choice = []
    short = 0
    for i in range(n):
        ch = problem.choices(i)
        if cores[i] < ch.cores[0]:
            short += 1
        choice.append(_largest_within(ch.cores, cores[i]))
    result = result_from_choice("greedy-seed", problem, choice, Status.FEASIBLE, None, time.perf_counter() - start)
    if short or result.cores_used is None or result.cores_used > problem.total_cores:
        msg = f"{short} of {n} kernels got fewer cores than their smallest legal op model (the notebook floors memory)"
        return SolverResult(
            "greedy-seed", Status.INVALID, result.choice, result.objective, None, result.wall_s, result.cores_used, msg
        )
    return result
