"""Exact pipeline-stage partition over several wafers (``--wafers N|auto``).

For a target T, kernel k needs m_k(T) cores (its fewest-core candidate with latency <= T; infinite
if none). A contiguous stage [i, j) fits one wafer at T iff sum m_k(T) <= wafer cores, and a cut c is
usable iff its transfer cycles <= T. Since m_k is fixed for a given T, prefix sums make every stage
test O(1), the admissible first kernels of a stage ending at j form a window [lo(j), j) (two pointers),
and the fewest stages covering [0, j) is a sliding-window minimum: g(j) = 1 + min g(i) over usable
cuts i in the window. T is feasible with W wafers iff g(n) <= W; feasibility is monotone in T, so
bisection over the candidate values (every kernel latency and every cut's transfer cycles) gives the
exact optimum of max over stages of max(stage bottleneck, transfers): the dynamic program over cut
points with the per-stage exact bound inside. Each stage is then solved on its own (bisection:
OPTIMAL per stage), so stages below the overall bottleneck also use their fewest cores.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from wsealloc.errors import UsageError
from wsealloc.problem.objective import Aggregate
from wsealloc.problem.stages import StageProblem
from wsealloc.solvers.base import Status

INF = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class StagePartition:
    """Cut points and the resulting load of each stage."""

    status: Status
    wafers: int  # stages used
    cuts: tuple[int, ...]  # stage s covers kernels [cuts[s], cuts[s + 1])
    objective: int | None  # slowest stage load (cycles per sample)
    wall_s: float
    message: str = ""

    def stages(self) -> list[tuple[int, int]]:
        """(first, end) kernel index of each stage."""
        return list(zip(self.cuts[:-1], self.cuts[1:], strict=True))


def min_cores(problem: StageProblem, target: int) -> np.ndarray:
    """[n] fewest cores of each kernel meeting ``target`` (INF when it cannot)."""
    out = np.empty(problem.n_kernels, dtype=np.int64)
    alloc = problem.alloc
    cache: dict[int, int] = {}
    for k in range(problem.n_kernels):
        c = alloc.kernel_class[k]
        if c not in cache:
            ch = alloc.classes[c]
            idx = ch.fewest_cores_within(target)
            cache[c] = INF if idx < 0 else int(ch.cores[idx])
        out[k] = cache[c]
    return out


def fewest_stages(problem: StageProblem, target: int, transfer: np.ndarray) -> tuple[int, list[int]] | None:
    """(fewest stages, cut points) meeting ``target``, or None when no partition does."""
    n = problem.n_kernels
    cores = min_cores(problem, target)
    if (cores >= INF).any() or (cores > problem.alloc.total_cores).any():
        return None
    prefix = np.concatenate(([0], np.cumsum(cores)))
    usable = transfer <= target
    if problem.cut_allowed is not None:  # the user's cut rules: a cut only where allowed, ...
        usable &= problem.cut_allowed
    usable[0] = usable[n] = True
    # ... and a stage [i, j) never spans a required cut p (i < p < j): its start is at the last one before j
    required = problem.cut_required if problem.cut_required is not None else np.zeros(n + 1, dtype=bool)
    last_required = np.maximum.accumulate(np.where(required, np.arange(n + 1), 0))
    g = np.full(n + 1, INF, dtype=np.int64)
    back = np.zeros(n + 1, dtype=np.int64)
    g[0] = 0
    window: deque[int] = deque()  # candidate stage starts i (usable cuts), g increasing
    lo = 0
    for j in range(1, n + 1):
        i = j - 1
        if usable[i] and g[i] < INF:
            while window and g[window[-1]] >= g[i]:
                window.pop()
            window.append(i)
        lo = max(lo, int(last_required[j - 1]))
        while prefix[j] - prefix[lo] > problem.alloc.total_cores:
            lo += 1
        while window and window[0] < lo:
            window.popleft()
        if usable[j] and window:
            g[j], back[j] = g[window[0]] + 1, window[0]
    if g[n] >= INF:
        return None
    cuts = [n]
    while cuts[-1] > 0:
        cuts.append(int(back[cuts[-1]]))
    return int(g[n]), cuts[::-1]


def solve(sp: StageProblem, wafers: int | None) -> StagePartition:
    """Optimal partition on ``wafers`` wafers (None: the fewest wafers that fit, at their optimum).
    Exact for min-max only (the stage load is the slowest kernel or cut): another objective is
    refused by name."""
    if sp.alloc.objective.aggregate is not Aggregate.MAX:
        raise UsageError(
            f"--wafers: the exact stage cut minimizes the slowest stage (throughput); --objective "
            f"{sp.alloc.objective.kind.value} is planned on one wafer (use --wafers 1)"
        )
    start = time.perf_counter()
    transfer = sp.transfer_cycles()
    values = np.unique(np.concatenate([c.latency for c in sp.alloc.classes] + [transfer[1:-1], np.array([0])]))
    loosest = fewest_stages(sp, int(values[-1]), transfer)
    if loosest is None:
        return StagePartition(
            Status.INFEASIBLE,
            0,
            (),
            None,
            time.perf_counter() - start,
            "a kernel fits no wafer even alone, or a cut's transfer cannot be met"
            + (", or the cut rules leave no partition" if sp.cut_allowed is not None else ""),
        )
    need = loosest[0]
    budget = need if wafers is None else wafers
    if budget < need:
        return StagePartition(
            Status.INFEASIBLE, need, (), None, time.perf_counter() - start, f"needs at least {need} wafers, {wafers} given"
        )
    lo, hi = 0, len(values) - 1
    best = loosest
    while lo < hi:
        mid = (lo + hi) // 2
        found = fewest_stages(sp, int(values[mid]), transfer)
        if found is not None and found[0] <= budget:
            hi, best = mid, found
        else:
            lo = mid + 1
    final = fewest_stages(sp, int(values[lo]), transfer)
    if final is not None and final[0] <= budget:
        best = final
    stages, cuts = best
    return StagePartition(Status.OPTIMAL, stages, tuple(cuts), int(values[lo]), time.perf_counter() - start)
