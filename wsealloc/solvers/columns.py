"""Regions chosen exactly by a knapsack over whole columns: when every region grid's cores are a
multiple of one unit, a wafer's least time for each budget of units is one dynamic program.

The stacked family (``--share auto``'s default) charges every region grid whole columns of the wafer
(a column of 1-4 regions, ``rows x w`` cores), and the ``columns`` and ``shelves`` families charge
``rows x w`` or ``rows // 2 x w``: every grid's cores are a multiple of ``unit = gcd(cores)``, so the
runs of a wafer fit its budget C exactly when their units fit ``K = C // unit`` (a sum of multiples of
the unit is at most C iff it is at most ``unit * (C // unit)``). The least time of the kernels [a, b)
on one wafer within k units is then, for every b and k at once, one program from a (``program``;
indices relative to a)::

    D[0, k] = 0,   D[b, k] = min over runs [i, b) on grid g fitting its SRAM of D[i, k - units[g]] + latency[i:b, g]

Exact: no price of a core and no gap. The Lagrangian bound ``solvers.share_wafers`` takes otherwise
prices cores it cannot split into the lumps a region takes; where a wafer holds a few large regions
(Qwen3-235B-A22B on 14 wafers: 7-8 regions of ~110,000 cores each, every wafer SRAM-tight) pricing
leaves 0.2% between bound and optimum, and the Pareto labels within it did not close in minutes; the
programs here prove the optimum in seconds (docs/benchmarks.md).

Cost: every run end b tries every fitting run [i, b) (a *triple* (i, b, g)); of a start's grids only
those whose latency falls as their units grow can be best (the Pareto front per start: about 7 of 688
on Qwen3), each a vector minimum over the budgets at least the start's fewest units. So a program costs
about its triples (``triples``) plus fronts x K; where a repeating stretch makes few programs and the
runs are short, it is cheap (Qwen3-235B: 20 programs, 1.75 M triples each, about 0.5 s each), where
wafers hold long segments of small kernels it is not (Llama-3.1-70B: 10.9 M triples a program), and
``share_wafers`` keeps its priced bounds there. Where both apply the searches order them by cost:
``share_wafers`` runs the knapsack first while its programs keep a quick pace, ``share`` while its
one program is ``quick``; else the priced search first, for ``PRICED_SHARE`` of the time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.problem.sharing import SharingProblem

MAX_UNITS = 4096  # budgets of units a program tracks (a stacked wse3 wafer: 1,176 columns)
MAX_WORK = 60_000_000  # fitting runs the programs of one search may try (0.3-0.6 us each: 20-35 s at most)
QUICK_WORK = 15_000_000  # fitting runs below which the knapsack goes first (Llama-3.1-405B: 14 M, 9 s)
MAX_CELLS = 64_000_000  # values the programs of one search keep (8 bytes each: 512 MB)
PRICED_SHARE = 0.3  # of the time: the priced search (bounds and labels) before a knapsack, where both apply
NONE = np.iinfo(np.int64).max // 4  # no partition within the budget


@dataclass(frozen=True)
class Units:
    """Every grid's cores are ``units[g]`` times ``unit``; a wafer holds ``budget`` units."""

    unit: int
    budget: int
    units: np.ndarray  # [G]
    work: int = 0  # fitting runs the programs of a search try (``small_units``)

    @property
    def quick(self) -> bool:
        """Programs cheap enough to run before the priced search (a few seconds)."""
        return self.work <= QUICK_WORK


def column_units(sp: SharingProblem) -> Units | None:
    """The unit every grid's cores are a multiple of, when a wafer's budget is at most ``MAX_UNITS``
    of it (None: the grids share no unit large enough for the program to be small)."""
    cores = sp.cores().astype(np.int64)
    if cores.size == 0:
        return None
    unit = int(np.gcd.reduce(cores))
    budget = int(sp.total_cores) // unit if unit > 0 else 0
    if unit <= 0 or not 0 < budget <= MAX_UNITS:
        return None
    return Units(unit, budget, cores // unit)


@dataclass(frozen=True)
class Program:
    """``least[l, k]``: the least time of the part's first l kernels within k units (``NONE``: no
    partition fits), with what it was computed from (to find the runs of a least partition again)."""

    least: np.ndarray  # [n + 1, K + 1]
    windows: np.ndarray  # [G, n + 1] the part's
    prefix: np.ndarray  # [G, n + 1] a run [i, j) takes prefix[g, j] - before[g, i] (``SharingProblem.prefixes``)
    units: Units
    before: np.ndarray  # [G, n + 1]

    def runs(self, length: int) -> list[tuple[int, int, int]]:
        """The runs (i, j, g) of a least partition of the first ``length`` kernels within the whole
        budget: from the end, a run whose start's value at the units left makes up the value (the
        program's own recurrence, evaluated again at one budget a step instead of recorded for all)."""
        k = int(np.argmin(self.least[length]))
        out: list[tuple[int, int, int]] = []
        j = length
        while j > 0:
            pi, pg = _runs_ending(self.windows, j)
            pu = self.units.units[pg]
            pi, pg, pu = pi[pu <= k], pg[pu <= k], pu[pu <= k]
            offer = self.least[pi, k - pu] + self.prefix[pg, j] - self.before[pg, pi]
            hit = int(np.flatnonzero(offer == self.least[j, k])[0])
            out.append((int(pi[hit]), j, int(pg[hit])))
            k -= int(pu[hit])
            j = int(pi[hit])
        return out[::-1]


def _runs_ending(windows: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Every fitting run [i, b): its starts and grids (``windows[g, b]``: the first fitting start)."""
    first = windows[:, b]
    open_g = np.flatnonzero(first < b)
    counts = b - first[open_g]
    starts = np.repeat(first[open_g], counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
    return starts, np.repeat(open_g, counts)


def small_units(sp: SharingProblem, ranges: list[tuple[int, int]], windows: np.ndarray) -> Units | None:
    """The units of ``sp`` when the programs over ``ranges`` ([first, end) each) try at most
    ``MAX_WORK`` fitting runs and keep at most ``MAX_CELLS`` values in all (None: no common unit, too
    much work, or too much memory: a search keeps every program's table to find its runs again)."""
    units = column_units(sp)
    work = sum(triples(windows, a, b) for a, b in ranges)
    if units is None or work > MAX_WORK or sum((b - a + 1) * (units.budget + 1) for a, b in ranges) > MAX_CELLS:
        return None
    return replace(units, work=work)


def triples(windows: np.ndarray, first: int, end: int) -> int:
    """Fitting runs (i, b, g) with first <= i < b <= end: what a program over [first, end) tries."""
    ends = np.arange(first + 1, end + 1)
    if ends.size == 0:
        return 0
    return int((ends[None, :] - np.maximum(windows[:, first + 1 : end + 1], first)).clip(min=0).sum())


def program(part: SharingProblem, units: Units, deadline: Deadline) -> Program | None:
    """The program from the part's first kernel (see the module docstring); None when the deadline
    passes first."""
    n = part.n_kernels
    budget = units.budget
    windows = part.windows()
    prefix, before = part.prefixes()
    least = np.full((n + 1, budget + 1), NONE, dtype=np.int64)
    least[0] = 0
    fewest = np.full(n + 1, budget + 1, dtype=np.int64)  # the fewest units any partition of [0, l) takes
    fewest[0] = 0
    # keys of one start above every key of a later one: above every run's time, charges included (a
    # charge at a run's first kernel makes ``before`` negative)
    spread = int((prefix.max(axis=1) - before.min(axis=1)).max()) + 1
    for b in range(1, n + 1):
        if deadline.expired():
            return None
        pi, pg = _runs_ending(windows, b)
        pu = units.units[pg]
        room = fewest[pi] + pu <= budget
        pg, pi, pu = pg[room], pi[room], pu[room]
        if pi.size == 0:
            continue
        lat = prefix[pg, b] - before[pg, pi]
        order = np.lexsort((lat, pu, pi))  # by start, then units, then latency
        pi, pu, lat = pi[order], pu[order], lat[order]
        key = lat + (b - pi) * spread  # one running minimum over all starts, each start's keys apart
        front = np.concatenate(([True], key[1:] < np.minimum.accumulate(key)[:-1]))
        row = least[b]
        for i, u, t in zip(pi[front].tolist(), pu[front].tolist(), lat[front].tolist(), strict=True):
            lo = int(fewest[i])
            np.minimum(row[lo + u :], least[i, lo : budget + 1 - u] + t, out=row[lo + u :])
        fits = np.flatnonzero(row < NONE)
        if fits.size:
            fewest[b] = int(fits[0])
    return Program(least, windows, prefix, units, before)
