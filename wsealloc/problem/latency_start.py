"""A start for the latency objective: every kernel on its own rectangle, a token's time with requests
in flight (``objective.Latency``), allocated by a cap on the slowest kernel and a Lagrangian price of
a core.

With N requests in flight each token takes ``max(path, N x slowest kernel)``: the cap M on every
kernel's latency prices the second term at N x M, and the path is least, for that cap, where the
cores left after each kernel's fewest cores meeting M buy the most latency per core. For a cap M:

* each kernel starts on its fewest cores meeting M (the min-max bisection's choice at M);
* a price ``lam`` of a core: each kernel class takes the point of its frontier's lower convex hull
  (among those meeting M) that minimizes ``latency + lam x cores``; ``lam`` is bisected so that the
  cores fit (Everett's theorem: at the price where they do, the allocation is the least sum of
  latencies for the cores it uses: exact for a chain of kernels on those cores);
* the cores still left buy single steps of the frontier, most latency saved per core first.

The caps tried run from the least bottleneck any allocation has (``optimal_bottleneck``) upwards: a
bisection for where the path stops being longer than N x the slowest kernel, then the caps beside it,
each valued by the objective itself (``problem.evaluate``: the longest path through the kernel graph,
not the sum). The best is a start (an exact backend's hint; the plan where the backend finds none in
its time) and, where it meets the objective's bound, the optimum. Llama-3-8B decode on wse3 at 64
requests (452 kernels, 95k Booleans that CP-SAT presolves for longer than its 20 s): the greedy
allocation 665,399 cycles, this start at the LP bound. Pure: no solver, numpy only.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from wsealloc.problem.allocation import AllocationProblem, Choices

NEIGHBOURS = 3  # caps valued on each side of the bisection's crossing (the path is not monotone in the cap)
RECLAIM_ROUNDS = 4  # rounds of cores moved from kernels beside the longest path to kernels on it (``_reclaim``)
OFF_CHAIN = (1.0, 0.6, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05, 0.0)  # weights of the kernels beside the chain tried


def lower_hull(cores: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the lower convex hull of a frontier's (cores ascending, latency descending) points."""
    hull: list[int] = []
    # (Python integers: latencies near 2**50 times a wafer's cores overflow int64, and a hull that drops
    # its points raised the LP bound above an optimum a review found by brute force)
    c, lat = [int(x) for x in cores], [int(x) for x in latency]
    for i in range(len(c)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b is above the segment a -> i: drop it
            if (lat[b] - lat[a]) * (c[i] - c[a]) >= (lat[i] - lat[a]) * (c[b] - c[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    return np.array(hull, dtype=np.int64)


class _Classes:
    """The kernel classes with kernels, split by a weight of their latency (1: it counts in the path, 0:
    it runs beside it), each frontier's hull and its edges' latency saved per core."""

    def __init__(self, problem: AllocationProblem, weight: np.ndarray):
        self.problem = problem
        self.weight = weight
        self.group = [(int(problem.kernel_class[k]), float(weight[k])) for k in range(problem.n_kernels)]
        self.mult: dict[tuple[int, float], int] = {}
        for g in self.group:
            self.mult[g] = self.mult.get(g, 0) + 1
        self.live = sorted(self.mult)
        self.hulls = {c: lower_hull(problem.classes[c].cores, problem.classes[c].latency) for c in {c for c, _ in self.live}}
        self.gains: dict[int, np.ndarray] = {}
        for c, h in self.hulls.items():
            ch = problem.classes[c]
            dc = np.diff(ch.cores[h]).astype(np.float64)
            dl = -np.diff(ch.latency[h]).astype(np.float64)
            self.gains[c] = dl / dc  # descending along a convex hull

    def at_price(self, cap: int, lam: float) -> dict[tuple[int, float], int] | None:
        """Each group's frontier index at core price ``lam`` under latency cap ``cap`` (None: a class
        meets no cap): a weighed group takes the hull point of least ``latency + lam x cores``, the
        others their fewest cores meeting the cap."""
        picks = {}
        for g in self.live:
            c, w = g
            ch, h = self.problem.classes[c], self.hulls[c]
            base = ch.fewest_cores_within(cap)
            if base < 0:
                return None
            pos = int(np.count_nonzero(w * self.gains[c] > lam))  # hull edges worth their cores at this price
            j = int(h[pos])
            picks[g] = j if ch.latency[j] <= cap and j >= base else base
        return picks

    def cores(self, picks: dict[tuple[int, float], int]) -> int:
        return sum(self.mult[g] * int(self.problem.classes[g[0]].cores[j]) for g, j in picks.items())

    def allocate(self, cap: int) -> list[int] | None:
        """Every kernel's frontier index under cap ``cap`` (see the module docstring), or None."""
        problem = self.problem
        budget = problem.total_cores
        fewest = self.at_price(cap, np.inf)
        if fewest is None or self.cores(fewest) > budget:
            return None
        prices = np.unique(np.concatenate([self.gains[c] for c in self.hulls] + [np.zeros(1)]))
        # the least price whose allocation fits: ``cores`` is non-increasing in the price
        lo, hi = 0, prices.size  # prices[hi] (inf past the end) fits
        while lo < hi:
            mid = (lo + hi) // 2
            picks = self.at_price(cap, float(prices[mid]))
            if picks is not None and self.cores(picks) <= budget:
                hi = mid
            else:
                lo = mid + 1
        picks = self.at_price(cap, float(prices[hi]) if hi < prices.size else np.inf)
        assert picks is not None
        choice = [picks[g] for g in self.group]
        left = budget - self.cores(picks)
        # the cores left: single frontier steps of weighed kernels, most latency saved per core first
        _buy_steps(problem, choice, {k: float(w) for k, w in enumerate(self.weight) if w > 0}, left)
        return choice


def _buy_steps(problem: AllocationProblem, choice: list[int], weight: dict[int, float], left: int) -> None:
    """``left`` cores spent on single frontier steps of the kernels of ``weight`` (in place), most
    weighed latency saved per core first; a step that does not fit is passed over."""
    heap = [(-w * _gain(problem.choices(k), choice[k]), k) for k, w in weight.items() if choice[k] + 1 < len(problem.choices(k))]
    heapq.heapify(heap)
    while heap and left > 0:
        _, k = heapq.heappop(heap)
        ch, j = problem.choices(k), choice[k]
        step = int(ch.cores[j + 1] - ch.cores[j])
        if step > left:
            continue
        choice[k], left = j + 1, left - step
        if j + 2 < len(ch):
            heapq.heappush(heap, (-weight[k] * _gain(ch, j + 1), k))


def _gain(ch: Choices, j: int) -> float:
    return float(ch.latency[j] - ch.latency[j + 1]) / float(max(1, ch.cores[j + 1] - ch.cores[j]))


def latency_start(
    problem: AllocationProblem, pace: int, least_bottleneck: int | None, chain: Sequence[int]
) -> tuple[int, ...] | None:
    """The best allocation of the weights and caps tried (module docstring), or None (the fewest cores
    do not fit, or the user's areas bound groups of kernels: the greedy's repair keeps those).
    ``chain``: kernels every token passes in order (``objective.critical_chain``)."""
    if problem.budgets or (pace > 1 and least_bottleneck is None) or problem.n_kernels == 0:
        return None
    # the chain's latencies weighed fully, the kernels beside it less (their latency counts only where
    # their branch is the longer): all of them alike is the sum of latencies, a chain's path; none of
    # them leaves them on their fewest cores, and their branch becomes the longest (Llama-3-8B decode
    # at 64 requests: 590,086 cycles with every kernel weighed, 606,400 with the chain alone, 566,176
    # with the kernels beside it at a fifth, against the LP bound 556,926)
    weights = (1.0,) if problem.is_chain() else OFF_CHAIN
    best: tuple[int, list[int]] | None = None
    for off in weights:
        weight = np.full(problem.n_kernels, off)
        weight[list(chain)] = 1.0
        found = _best_cap(problem, _Classes(problem, weight), pace, least_bottleneck)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        return None
    return tuple(_reclaim(problem, best[1], best[0], pace))


def _edges(problem: AllocationProblem) -> tuple[list[list[int]], list[list[int]]]:
    """Each kernel's kernels before it on a token's path (its producers, and the kernel run before it
    on the same cores) and after it."""
    n = problem.n_kernels
    if not problem.preds:  # (no graph: one after another)
        before = [[k - 1] if k else [] for k in range(n)]
    else:
        before = [
            list(problem.preds[k]) + ([problem.serial[k]] if problem.serial and problem.serial[k] >= 0 else []) for k in range(n)
        ]
    after: list[list[int]] = [[] for _ in range(n)]
    for k, ps in enumerate(before):
        for q in ps:
            after[q].append(k)
    return before, after


def slack(before: Sequence[Sequence[int]], lat: Sequence[int], after: Sequence[Sequence[int]] | None = None) -> list[int]:
    """How much longer each kernel may take before the longest path grows (kernels in a topological
    order, ``before[k]`` the kernels a token passes just before k; ``after``: the reverse, derived
    when not given). The latency start's slack step and the placement's path weights
    (``solvers.strips.path_weights``) read it."""
    n = len(lat)
    if after is None:
        rev: list[list[int]] = [[] for _ in range(n)]
        for k in range(n):
            for q in before[k]:
                rev[q].append(k)
        after = rev
    finish = [0] * n
    for k in range(n):
        finish[k] = int(lat[k]) + max((finish[q] for q in before[k]), default=0)
    tail = [0] * n  # the longest path after k
    for k in reversed(range(n)):
        tail[k] = max((int(lat[q]) + tail[q] for q in after[k]), default=0)
    path = max(finish, default=0)
    return [path - finish[k] - tail[k] for k in range(n)]


def _reclaim(problem: AllocationProblem, choice: list[int], value: int, pace: int) -> list[int]:
    """Cores moved from kernels beside the longest path to kernels on it: each kernel with slack steps
    down its frontier as far as its slack allows (largest slack first, the slacks recomputed after
    each), and the cores freed buy single steps of the kernels on the path, most latency saved per
    core first; kept while the value falls. A kernel's latency stays within value / pace (the pace
    term never grows). BERT-base on wse2: 676,500 -> 649,296 cycles against a bound of 638,087."""
    before, after = _edges(problem)
    budget = problem.total_cores
    for _ in range(RECLAIM_ROUNDS):
        trial = list(choice)
        lat = problem.latencies(trial)
        cap = value // pace if pace > 1 else None
        room = slack(before, lat, after)
        for k in sorted(range(problem.n_kernels), key=lambda i: -room[i]):
            if room[k] <= 0:
                break
            ch, j = problem.choices(k), trial[k]
            while j > 0 and ch.latency[j - 1] - lat[k] <= room[k] and (cap is None or ch.latency[j - 1] <= cap):
                j -= 1
            if j != trial[k]:
                trial[k], lat[k] = j, int(ch.latency[j])
                room = slack(before, lat, after)
        left = budget - problem.evaluate(trial)[1]
        _buy_steps(problem, trial, {k: 1.0 for k, sl in enumerate(slack(before, lat, after)) if sl == 0}, left)
        found = problem.evaluate(trial)[0]
        if found >= value:
            break
        choice, value = trial, found
    return choice


def _best_cap(problem: AllocationProblem, classes: _Classes, pace: int, least: int | None) -> tuple[int, list[int]] | None:
    """The best (value, allocation) over the caps tried (module docstring)."""
    lats = [problem.classes[c].latency for c in classes.hulls]
    top = max(int(x[0]) for x in lats)
    if pace <= 1 or least is None:
        caps = np.array([top], dtype=np.int64)  # one request: the path alone, no cap
    else:
        every = np.unique(np.concatenate(lats))
        caps = every[every >= least]
    valued: dict[int, tuple[int, list[int]]] = {}

    def value(i: int) -> tuple[int, list[int]] | None:
        if i not in valued:
            choice = classes.allocate(int(caps[i]))
            if choice is None:
                return None
            valued[i] = (problem.evaluate(choice)[0], choice)
        return valued[i]

    # where the path stops being longer than pace x the cap: below it the cap costs nothing in the
    # value but the path grows, above it the pace term grows
    lo, hi = 0, caps.size - 1
    while lo < hi:
        mid = (lo + hi) // 2
        found = value(mid)
        if found is not None and found[0] <= pace * int(caps[mid]):
            hi = mid
        else:
            lo = mid + 1
    for i in range(max(0, lo - NEIGHBOURS), min(caps.size, lo + NEIGHBOURS + 1)):
        value(i)
    return min(valued.values(), key=lambda v: v[0]) if valued else None
