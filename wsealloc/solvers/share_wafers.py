"""Cores shared in time over several wafers, chosen exactly (``--objective latency --wafers N|auto
--share auto``): the cut of the kernel sequence into at most W wafers, each wafer's runs (regions) and
each run's grid, minimizing one token's time: every run's latency and, at every cut, the link's
cycles (``links[j]``: the bytes crossing in front of kernel j over the link's bandwidth, plus its
latency). Each wafer's runs take at most ``sp.total_cores`` cores (``problem.sharing``).

Exact (a plan proven least, or the bound proven when time runs out), by bounds per segment. Any
segment [a, b) of kernels laid on one wafer takes at least its Lagrangian value at any price of a
core, ``min over partitions of sum(latency + lam * cores) - lam * C`` (``_segment_values``, the best of
``PRICES`` prices around the price of the relaxed problem); a program over the cuts with those
values is a bound over every cut (``fresh_rest``), and Pareto labels (time, cores used on the current
wafer) per (kernel boundary j, wafer w), every run tried from every boundary with labels, pruned by
the same values (``heads``: the rest of the current wafer at each price, then the best cut), find
the least plan within a limit U (``_strong_labels``). U starts just above the bound and widens until
a plan is found (a round that finds none proves the optimum above its U: the bound rises), up to the
caller's known plan. Out of time with no plan, it still names the cut of that program's least value
(each wafer's own regions go there). The values need one program per start of a segment, but a start's program
depends only on the kernels after it: where the rows repeat with a period (``_zone``), the starts of
one phase share it (17 programs for Llama's 1,124 or 1,768 kernels).

Where every region grid's cores are whole units of one size (the stacked, columns and shelves
families: whole columns of the wafer) and the programs are small enough (``columns.MAX_WORK``), the
segments' values are their least times themselves, not bounds: a knapsack over the units per start
(``solvers.columns``), the same pieces of the zone; the program over the cuts then is the optimum, and
its wafers' runs are found again in the programs (``_ColumnSearch``). Priced bounds leave a gap where a
wafer holds a few large regions (Qwen3-235B-A22B: 0.2%, labels that did not close in minutes); the
knapsack proves it in seconds. It goes first while its programs keep a pace that ends them within
``QUICK_SHARE`` of the time (Llama-3.1-405B: 9 s against 85 s of labels); else, the programs done kept,
after the priced search has had ``columns.PRICED_SHARE`` of the time without closing: where wafers hold many
regions the priced bounds close first and faster (Mixtral on three wafers: seconds, against 16
programs of 1-2 s each), and long segments of many small kernels (Llama-3.1-70B: 10.9 M fitting runs
a program, beyond ``columns.MAX_WORK``) keep them alone.

A bound with one price of a core per wafer (a program over kernel boundary x wafer, reduced-cost
fixing, then labels) was tried first and dropped: on Llama-3.1-70B it stays 0.36% under the optimum,
the relaxed plan moving its cut towards the cheapest wafer, too loose for the labels to close
(docs/benchmarks.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.errors import SolverError
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers import columns
from wsealloc.solvers.base import Status

BLOCK = 24  # run ends per block of the dynamic program (the settled starts' minima computed once a block)
FIRST_SLACK = 0.0005  # twice the first round's U over the bound (then widened by SLACK_GROWTH each round)


@dataclass(frozen=True)
class WaferSharing:
    """Wafer w holds kernels [cuts[w], cuts[w + 1]); ``runs`` (kernel indices, none crossing a cut) with
    their grid (index into the problem's shapes); ``latency`` the token's time (runs and links). An
    UNKNOWN result (no plan found in time) carries no cut and no runs."""

    status: Status
    cuts: tuple[int, ...]
    runs: tuple[tuple[int, int], ...]
    grids: tuple[int, ...]
    latency: int | None
    bound: int | None
    wall_s: float
    message: str = ""
    # out of time before the optimum was proven: the cut of the least bound over every cut (the program
    # over the cuts with a bound per segment), where each wafer's own regions may be faster than the plan
    # in hand, if any (empty: none known)
    wish: tuple[int, ...] = ()

    def wafer_runs(self, w: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
        """Wafer w's runs (kernel indices relative to its first kernel) and their grids."""
        a, b = self.cuts[w], self.cuts[w + 1]
        picked = [(r, g) for r, g in zip(self.runs, self.grids, strict=True) if a <= r[0] < b]
        return tuple((i - a, j - a) for (i, j), _ in picked), tuple(g for _, g in picked)


def _sweep(sp: SharingProblem, price: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """[P, n + 1]: for every price p (a row of ``price[p, g]``: what a run on grid g is charged beyond
    its latency) and every j, the least ``sum(latency + price)`` over the partitions of kernels [0, j)
    into runs that fit their grid's SRAM (inf: none). One run's best start is a minimum over its
    grid's window of starts, split at its block's first end: the starts before it are settled (their
    suffix minima computed once a block), the few inside it are taken directly."""
    n, g_count = sp.latency.shape
    rows = price.shape[0]
    prefix = _prefix(sp).astype(np.float64)
    ended = np.full((rows, n + 1), np.inf)
    ended[:, 0] = 0.0
    start = np.full((rows, g_count, n + 1), np.inf)  # ended[p, i] - prefix[g, i]: a run may start at i
    start[:, :, 0] = -prefix[None, :, 0]
    grids = np.arange(g_count)
    for b in range(1, n + 1, BLOCK):
        e = min(n + 1, b + BLOCK)
        low = int(windows[:, b].min())
        settled = None
        if low < b:  # settled[..., t - low] = min of start[..., t:b]
            settled = np.minimum.accumulate(start[:, :, low:b][:, :, ::-1], axis=2)[:, :, ::-1]
        for j in range(b, e):
            first = windows[:, j]
            value = np.full((rows, g_count), np.inf)
            if settled is not None:
                old = first < b
                value[:, old] = settled[:, grids[old], first[old] - low]
            if j > b:
                inside = np.arange(b, j)[None, :] >= first[:, None]  # [G, j - b]
                value = np.minimum(value, np.where(inside[None, :, :], start[:, :, b:j], np.inf).min(axis=2))
            ended[:, j] = (value + prefix[None, :, j] + price).min(axis=1)
            start[:, :, j] = ended[:, j][:, None] - prefix[:, j][None, :]
    return ended


def _prefix(sp: SharingProblem) -> np.ndarray:
    """[G, n + 1] prefix sums of the kernels' latencies per grid (0 where a kernel cannot be laid)."""
    out = np.zeros((sp.shapes.shape[0], sp.n_kernels + 1), dtype=np.int64)
    out[:, 1:] = np.cumsum(np.where(sp.latency < INF, sp.latency, 0).T, axis=1)
    return out


def plan_time(
    sp: SharingProblem, links: np.ndarray, cuts: tuple[int, ...], runs: tuple[tuple[int, int], ...], grids: tuple[int, ...]
) -> int:
    """A plan's time: its runs' latencies and its cuts' links."""
    inside = sum(sp.run_latency(i, j, g) for (i, j), g in zip(runs, grids, strict=True))
    return int(inside) + int(sum(int(links[c]) for c in cuts[1:-1]))


def _plan(status: Status, runs: list[tuple[int, int, int, int]], sp: SharingProblem, links: np.ndarray,
          bound: int, start: float, message: str) -> WaferSharing:  # fmt: skip
    """A plan of runs (i, j, g, w): its cuts where the wafer changes, its time, its proof."""
    cuts = (0, *(r[0] for r, q in zip(runs[1:], runs[:-1], strict=True) if r[3] != q[3]), sp.n_kernels)
    pairs = tuple((i, j) for i, j, _, _ in runs)
    grids = tuple(g for _, _, g, _ in runs)
    latency = plan_time(sp, links, cuts, pairs, grids)
    return WaferSharing(status, cuts, pairs, grids, latency, min(bound, latency), time.perf_counter() - start, message)


def fitting_cuts(sp: SharingProblem, wafers: int, targets: tuple[int, ...]) -> tuple[int, ...] | None:
    """A cut into at most ``wafers`` wafers whose every wafer's kernels fit its cores in some partition
    into runs, each cut as near its ``target`` (the caller's wish: e.g. even resident bytes) as that
    allows; None when no cut into ``wafers`` fits. A wafer from kernel a can hold kernels up to the
    furthest b whose fewest-cores partition fits (one program from a: the cores priced, no latency),
    and a shorter segment fits whenever a longer one does, so going as far as needed but never past
    what fits, with the most kernels a wafer holds when the wishes leave too much for the rest, finds
    a fitting cut whenever one exists (the furthest reach at every step uses the fewest wafers)."""
    n = sp.n_kernels
    if n == 0:
        return (0, 0)
    span = _longest_segment(sp)
    bare = replace(sp, latency=np.where(sp.latency < INF, 0, INF).astype(np.int64), ends=None, starts=None)
    cores = sp.cores().astype(np.float64)[None, :]
    reach: dict[int, int] = {}
    zone = _zone(sp)

    def furthest(a: int) -> int:
        if a not in reach:
            # a segment inside the repeating stretch reaches as far as the one from its phase's first
            # kernel (the same rows): one program per phase, not per start (Qwen3-235B's 1,602 kernels
            # over 16 wafers: 3.2 s of sweeps)
            phase = zone.start + (a - zone.start) % zone.period if zone.period else a
            if phase != a and zone.start <= a and a + span <= zone.end:
                reach[a] = a + furthest(phase) - phase
                return reach[a]
            part = bare.segment(a, a + span)
            fewest = _sweep(part, cores, part.windows())[0]
            fits = np.flatnonzero(fewest <= sp.total_cores)
            reach[a] = a + int(fits.max()) if fits.size else a
        return reach[a]

    def greedy(cuts: list[int]) -> list[int] | None:
        while cuts[-1] < n:  # the rest as few wafers as it can take: each as far as it reaches
            b = furthest(cuts[-1])
            if b <= cuts[-1] or len(cuts) > wafers:
                return None
            cuts.append(b)
        return cuts if len(cuts) - 1 <= wafers else None

    cuts = [0]
    for target in targets[1:-1]:
        a = cuts[-1]
        b = min(max(int(target), a + 1), furthest(a))
        if b <= a:
            return None
        rest = greedy([b])  # the wafers the rest needs from b on
        if rest is None or len(cuts) + len(rest) - 1 > wafers:
            b = furthest(a)  # the wish leaves too much: this wafer as full as it fits
        cuts.append(b)
        if b >= n:
            break
    done = greedy(cuts)
    return tuple(done) if done is not None else None


# ---------------------------------------------------------------------------------------------------
# Bounds per segment: the method for long sequences of identical layers (LLM decoders)
# ---------------------------------------------------------------------------------------------------

QUICK_SHARE = 0.25  # of the time: the knapsack goes first while its pace ends it within this share
MAX_SWEEPS = 96  # programs from distinct starts the segment bounds may need (identical layers need few)
PRICES = 10  # prices of a core per segment bound
SLACK_GROWTH = 1.5  # a round's U over the last (a round past the optimum costs most: its labels grow fast with U)


@dataclass(frozen=True)
class _Zone:
    """Kernels [start, end) repeat with period ``period`` (their rows of the problem are equal), so a
    run's program from kernel a inside the zone is the program from ``start + (a - start) % period``."""

    start: int
    end: int
    period: int

    def sweeps(self, n: int) -> int:
        """Programs the segment bounds need: every start outside the zone, one per phase, every end after it."""
        return self.start + self.period + 2 * (n - self.end)


def _zone(sp: SharingProblem) -> _Zone:
    """The longest stretch of kernels that repeats (the fewest programs; none: every start its own)."""
    n = sp.n_kernels
    exact = [np.ascontiguousarray(a, dtype=np.float64).view(np.int64) for a in (sp.resident, sp.buffers)]
    charges = [a for a in (sp.ends, sp.starts) if a is not None]
    if sp.unbroken is not None:  # a boundary before the kernel (the program from it sees it first)
        charges.append(sp.unbroken[:-1, None].astype(np.int64))
    rows = np.concatenate([sp.latency, *exact, *charges], axis=1)  # equal rows: equal kernels on every grid
    _, ids = np.unique(rows, axis=0, return_inverse=True)
    ids = ids.ravel()
    best = _Zone(n, n, 0)
    for period in range(1, min(n // 2, 256) + 1):
        same = np.concatenate(([False], ids[:-period] == ids[period:], [False])).astype(np.int8)
        edges = np.flatnonzero(np.diff(same))  # runs of equal rows: [edges[2k], edges[2k + 1])
        if not edges.size:
            continue
        lengths = edges[1::2] - edges[::2]
        k = int(np.argmax(lengths))
        zone = _Zone(int(edges[2 * k]), int(edges[2 * k + 1]) + period, period)
        if zone.sweeps(n) < best.sweeps(n):
            best = zone
    return best


def _longest_segment(sp: SharingProblem) -> int:
    """The most consecutive kernels one wafer can hold: their bytes (each kernel's fewest over the
    grids it can be laid on) within the wafer's usable SRAM."""
    n = sp.n_kernels
    cells = (sp.shapes[:, 0] * sp.shapes[:, 1]).astype(np.float64)
    held = np.where(sp.latency < INF, sp.resident * cells[None, :], np.inf).min(axis=1)
    total = np.concatenate(([0.0], np.cumsum(np.minimum(held, float(sp.usable_sram) * sp.total_cores + 1))))
    ends = np.searchsorted(total, total[:-1] + float(sp.usable_sram) * sp.total_cores, side="right") - 1
    return max(1, int((ends - np.arange(n)).max()))


@dataclass(frozen=True)
class _Piece:
    """One program the segment values need: from ``first`` over [first, end) (``kind`` "start": its
    own start's values; "phase": copied to every start of its phase in the zone) or, for "end", from
    ``end`` backwards over [first, end) (the zone's starts whose segments end after the zone)."""

    first: int
    end: int
    kind: str


def _pieces(n: int, span: int, zone: _Zone) -> list[_Piece]:
    """The programs ``_segment_values`` runs: every start outside the zone, one per phase of the
    zone, and one backwards from every end after it (``_Zone.sweeps`` of them)."""
    out = [_Piece(a, min(n, a + span), "start") for a in range(n) if not zone.start <= a < zone.end]
    for phase in range(zone.period):
        first = zone.start + phase
        if first < zone.end:
            out.append(_Piece(first, min(zone.end, first + span), "phase"))
    for b in range(zone.end + 1, n + 1) if zone.period else ():
        if max(zone.start, b - span) < b:
            out.append(_Piece(max(zone.start, b - span), b, "end"))
    return out


def _segment_values(
    sp: SharingProblem, program: Callable[[SharingProblem], np.ndarray], span: int, zone: _Zone, m: int
) -> np.ndarray:
    """[n + 1, span + 1, m]: ``program``'s values of every segment [a, a + l) as one wafer's kernels
    (``program(part)``: [len(part) + 1, m], its values of the part's first l kernels), one program a
    start, shared by the starts of one phase of ``zone`` (``_pieces``)."""
    n = sp.n_kernels
    out = np.full((n + 1, span + 1, m), np.inf)
    for piece in _pieces(n, span, zone):
        if piece.kind == "end":  # values[l]: the segment [end - l, end)
            values = program(sp.segment(piece.first, piece.end).reversed())
            for length in range(1, piece.end - piece.first + 1):
                out[piece.end - length, length] = values[length]
            continue
        values = program(sp.segment(piece.first, piece.end))
        starts = [piece.first] if piece.kind == "start" else range(piece.first, zone.end, zone.period)
        for a in starts:
            length = values.shape[0] if piece.kind == "start" else min(values.shape[0], zone.end - a + 1)
            out[a, :length] = values[:length]
    return out


def _lagrangian(sp: SharingProblem, lams: np.ndarray) -> Callable[[SharingProblem], np.ndarray]:
    """The Lagrangian values of a part's first l kernels as one wafer at every price (``lams``): ``min
    over partitions of sum(latency + lam * cores) - lam * C``, a lower bound on that wafer's least time."""
    credit = lams * sp.total_cores

    def program(part: SharingProblem) -> np.ndarray:
        price = lams[:, None] * part.cores().astype(np.float64)[None, :]
        return (_sweep(part, price, part.windows()) - credit[:, None]).T  # [length + 1, m]

    return program


def _cut_program(segment: np.ndarray, links: np.ndarray, wafers: int) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The program over the cuts with a value per segment (``segment[a, l]``: [a, a + l) as one
    wafer): ``rest[w, a]`` the least value of kernels [a, n) from a fresh wafer w (inf: they do not fit
    the wafers left), ``best[w, a]`` the length of that wafer's segment, and per wafer ``after[w][a, l]``
    what follows a segment [a, a + l) on wafer w (its cut's link and the rest; 0 at the end)."""
    n, width = segment.shape[0] - 1, segment.shape[1]
    rest = np.full((wafers + 1, n + 1), np.inf)
    best = np.zeros((wafers, n + 1), dtype=np.int64)
    afters: list[np.ndarray] = [np.zeros(0)] * wafers
    a = np.arange(n + 1)[:, None]
    lengths = np.arange(width)[None, :]
    ends = a + lengths  # [n + 1, span + 1]
    inside = (lengths >= 1) & (ends <= n)
    ends = np.minimum(ends, n)
    for w in range(wafers - 1, -1, -1):
        tail = links.astype(np.float64) + rest[w + 1]  # after a segment ending at b: its cut's link, then the rest
        tail[n] = 0.0
        after = np.where(inside, tail[ends], np.inf)
        total = segment + after
        rest[w] = np.min(total, axis=1)
        best[w] = np.argmin(total, axis=1)
        afters[w] = after
    return rest, best, afters


def _least_cut(best: np.ndarray, n: int) -> list[int]:
    """The cut of the least value of ``_cut_program`` (its ``best`` lengths followed from kernel 0)."""
    cuts = [0]
    while cuts[-1] < n:
        cuts.append(cuts[-1] + int(best[len(cuts) - 1, cuts[-1]]))
    return cuts


class _Late(Exception):
    """A search's programs stopped: the deadline passed, or they would take longer than allowed."""


@dataclass
class _ColumnSearch:
    """The least time over every cut and region by the column programs (``solvers.columns``): every
    segment's least time as one wafer, exactly, then the program over the cuts; each chosen wafer's
    runs found again in the program its segment's value came from. The programs done are kept, so a
    search stopped for the priced one (``run``'s ``allowed``) resumes where it stopped."""

    sp: SharingProblem
    links: np.ndarray
    wafers: int
    zone: _Zone
    units: columns.Units
    programs: list[columns.Program] = field(default_factory=list)  # in the order of ``_pieces``

    def run(self, deadline: Deadline, start: float, allowed: float = float("inf")) -> WaferSharing | None:
        """The optimum; None when the deadline passes first or when, paced by the programs run so
        far, the rest would end more than ``allowed`` seconds after this call."""
        sp, units = self.sp, self.units
        n = sp.n_kernels
        span = _longest_segment(sp)
        pieces = _pieces(n, span, self.zone)
        begun, done, calls = time.perf_counter(), len(self.programs), iter(range(len(pieces)))

        def least(part: SharingProblem) -> np.ndarray:
            k = next(calls)
            if k >= len(self.programs):
                found = columns.program(part, units, deadline)
                if found is None:
                    raise _Late
                self.programs.append(found)
                pace = (time.perf_counter() - begun) / (len(self.programs) - done)
                if pace * (len(pieces) - done) > allowed:
                    raise _Late
            full = self.programs[k].least[:, units.budget]
            return np.where(full < columns.NONE, full, np.inf)[:, None]

        try:
            segment = _segment_values(sp, least, span, self.zone, 1)[:, :, 0]
        except _Late:
            return None
        rest, best, _ = _cut_program(segment, self.links, self.wafers)
        if not np.isfinite(rest[0, 0]):
            return WaferSharing(Status.INFEASIBLE, (), (), (), None, None, time.perf_counter() - start,
                                f"no partition into regions fits {self.wafers} wafer(s) of {sp.total_cores:,} cores")  # fmt: skip
        cuts = _least_cut(best, n)
        runs: list[tuple[int, int, int, int]] = []
        for w, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            runs += [(i, j, g, w) for i, j, g in self._runs(pieces, a, b)]
        value = int(round(float(rest[0, 0])))
        plan = _plan(Status.OPTIMAL, runs, sp, self.links, value, start, "")
        if plan.latency != value:
            raise SolverError(f"internal: the column programs' optimum {value:,} and its plan's time {plan.latency:,} differ")
        return replace(
            plan,
            bound=value,
            message=f"{len(runs)} regions on {len(cuts) - 1} wafer(s); the least time over every cut and region within "
            f"the wafers' budgets (a knapsack over {units.budget:,} units of {units.unit:,} cores per segment: exact)",
        )

    def _runs(self, pieces: list[_Piece], a: int, b: int) -> list[tuple[int, int, int]]:
        """The runs of a least partition of [a, b), from the program its value came from."""
        zone = self.zone
        if not zone.start <= a < zone.end:  # its own start's program
            found = self.programs[next(k for k, p in enumerate(pieces) if p.kind == "start" and p.first == a)]
            return [(a + i, a + j, g) for i, j, g in found.runs(b - a)]
        if b <= zone.end:  # its phase's program (the same kernels from the phase's first)
            found = self.programs[next(k for k, p in enumerate(pieces) if p.kind == "phase" and (a - p.first) % zone.period == 0)]
            return [(a + i, a + j, g) for i, j, g in found.runs(b - a)]
        # the program backwards from its end: a run [i, j) of it is [b - j, b - i)
        found = self.programs[next(k for k, p in enumerate(pieces) if p.kind == "end" and p.end == b)]
        return [(b - j, b - i, g) for i, j, g in reversed(found.runs(b - a))]


def _strong_labels(
    sp: SharingProblem,
    links: np.ndarray,
    wafers: int,
    windows: np.ndarray,
    lams: np.ndarray,
    heads: np.ndarray,
    fresh_rest: np.ndarray,
    upper: int,
    deadline: Deadline,
) -> list[tuple[int, int, int, int]] | None:
    """The least-time plan within ``upper``: Pareto labels (time, cores on the current wafer) per
    (kernel boundary j, wafer w), every run (i, j, g) from a boundary with labels tried, pruned by the
    bound on the rest: ``max over prices (price * cores used + heads[j, w])`` to go on on wafer w
    (the wafer's remaining segment at every price, then the best cut, each later wafer's segment
    bound), or a cut at j (``links[j] + fresh_rest[w + 1, j]``). Returns the runs (i, j, g, w) ([]:
    none within ``upper``), None when time runs out."""
    n = sp.n_kernels
    budget = sp.total_cores
    prefix = _prefix(sp)
    cores = sp.cores().astype(np.int64)
    big = np.iinfo(np.int64).max
    states = wafers * (n + 1)
    size = np.zeros(states, dtype=np.int64)
    offset = np.zeros(states, dtype=np.int64)
    least = np.full(states, big)  # the fastest label of a state
    fewest = np.full(states, big)  # the fewest cores of a state's labels
    ended_best = np.full(states, -1, dtype=np.int64)
    lat_parts, core_parts = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)]
    start_parts, grid_parts, prev_parts = [np.array([-1])], [np.array([-1])], [np.array([-1])]
    size[0], least[0], fewest[0] = 1, 0, 0
    all_lat, all_cores = lat_parts[0], core_parts[0]
    total = 1
    cut_rest = np.full((wafers, n + 1), np.inf)
    if wafers > 1:
        cut_rest[:-1, 1:n] = links[None, 1:n] + fresh_rest[1:wafers, 1:n]

    def rest_on(j: int, w: int, used: np.ndarray) -> np.ndarray:
        if j == n:
            return np.zeros(used.shape[0])
        return np.max(lams[None, :] * used[:, None] + heads[j, w][None, :], axis=1)

    g_all = np.arange(cores.size)
    for j in range(1, n + 1):
        if deadline.expired():
            return None
        first = windows[:, j]
        open_g = g_all[first < j]
        counts = j - first[open_g]
        pair_g = np.repeat(open_g, counts)
        pair_i = np.repeat(first[open_g], counts) + (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
        pair_lat = prefix[pair_g, j] - prefix[pair_g, pair_i]
        seen_la = seen_co = np.zeros(0, dtype=np.int64)  # the Pareto front of the labels at j on earlier wafers
        for w in range(wafers):
            s = j * wafers + w
            offset[s] = total
            from_state = pair_i * wafers + w
            live = size[from_state] > 0
            pi, pg, pl, fs = pair_i[live], pair_g[live], pair_lat[live], from_state[live]
            la = co = st = gr = pr = np.zeros(0, dtype=np.int64)
            if pi.size:
                lo_lat, lo_cores = least[fs] + pl, fewest[fs] + cores[pg]
                room = lo_cores <= budget
                left = np.minimum(rest_on(j, w, lo_cores.astype(np.float64)), cut_rest[w, j])
                ok = room & (lo_lat + np.ceil(left - 1e-6) <= upper)
                pi, pg, pl, fs = pi[ok], pg[ok], pl[ok], fs[ok]
            if pi.size:
                lengths = size[fs]
                firsts = np.repeat(offset[fs] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
                idx = firsts + np.arange(int(lengths.sum()), dtype=np.int64)
                la = all_lat[idx] + np.repeat(pl, lengths)
                co = all_cores[idx] + np.repeat(cores[pg], lengths)
                st, gr, pr = np.repeat(pi, lengths), np.repeat(pg, lengths), idx
                left = np.minimum(rest_on(j, w, co.astype(np.float64)), cut_rest[w, j])
                keep = (co <= budget) & (la + np.ceil(left - 1e-6) <= upper)
                la, co, st, gr, pr = la[keep], co[keep], st[keep], gr[keep], pr[keep]
            if w > 0 and 0 < j < n and ended_best[s - 1] >= 0:  # a cut in front of kernel j opens wafer w
                k = int(ended_best[s - 1])
                fresh = int(all_lat[k]) + int(links[j])
                if fresh + np.ceil(rest_on(j, w, np.zeros(1))[0] - 1e-6) <= upper:
                    la, co = np.append(la, fresh), np.append(co, 0)
                    st, gr, pr = np.append(st, -1), np.append(gr, -1), np.append(pr, k)
            if la.size:
                order = np.lexsort((la, co))
                la, co, st, gr, pr = la[order], co[order], st[order], gr[order], pr[order]
                before = np.minimum.accumulate(np.concatenate(([big], la[:-1])))
                front = la < before
                la, co, st, gr, pr = la[front], co[front], st[front], gr[front], pr[front]
                if seen_co.size:  # a label at an earlier wafer no slower with no more cores: every way on from
                    # here is open to it with wafers to spare (the wafers are alike, a link's cost its cut's)
                    at = np.searchsorted(seen_co, co, side="right") - 1
                    alive = (at < 0) | (seen_la[np.maximum(at, 0)] > la)
                    la, co, st, gr, pr = la[alive], co[alive], st[alive], gr[alive], pr[alive]
            if la.size:
                both_la, both_co = np.concatenate((seen_la, la)), np.concatenate((seen_co, co))
                order = np.lexsort((both_la, both_co))
                both_la, both_co = both_la[order], both_co[order]
                keep = both_la < np.minimum.accumulate(np.concatenate(([big], both_la[:-1])))
                seen_la, seen_co = both_la[keep], both_co[keep]
                least[s], fewest[s] = int(la.min()), int(co.min())
                ended = np.flatnonzero(gr >= 0)
                if ended.size:
                    ended_best[s] = total + int(ended[np.argmin(la[ended])])
            size[s] = la.size
            total += la.size
            lat_parts.append(la)
            core_parts.append(co)
            start_parts.append(st)
            grid_parts.append(gr)
            prev_parts.append(pr)
            if la.size:
                all_lat = np.concatenate((all_lat, la))
                all_cores = np.concatenate((all_cores, co))
    finals = [int(ended_best[n * wafers + w]) for w in range(wafers) if ended_best[n * wafers + w] >= 0]
    if not finals or min(int(all_lat[k]) for k in finals) > upper:
        return []
    starts, grids, prevs = np.concatenate(start_parts), np.concatenate(grid_parts), np.concatenate(prev_parts)
    state_of = np.repeat(np.arange(states), size)  # the state of every flat label
    k = min(finals, key=lambda t: int(all_lat[t]))
    chosen: list[tuple[int, int, int, int]] = []
    while k > 0:
        if grids[k] >= 0:
            s = int(state_of[k])
            chosen.append((int(starts[k]), s // wafers, int(grids[k]), s % wafers))
        k = int(prevs[k])
    return chosen[::-1]


def _segment_solve(
    sp: SharingProblem,
    links: np.ndarray,
    wafers: int,
    deadline: Deadline,
    windows: np.ndarray,
    zone: _Zone,
    price: float,
    known: WaferSharing | None,
    start: float,
) -> WaferSharing:
    """The exact search with bounds per segment (see ``_strong_labels``): every segment's Lagrangian
    value at ``PRICES`` prices around ``price`` (the price of a core when all wafers' cores are one
    budget) and 0, the best of them a lower bound on that wafer's time; a dynamic program over the
    cuts with those bounds is the bound over every cut (``fresh_rest[0, 0]``)."""
    n = sp.n_kernels
    span = _longest_segment(sp)
    scale = price if price > 0 else 1.0 / max(1, sp.total_cores)
    lams = np.concatenate(([0.0], scale * np.geomspace(0.3, 3.0, PRICES - 1)))
    priced = _lagrangian(sp, lams)

    def program(part: SharingProblem) -> np.ndarray:  # one sweep a start: the deadline checked between them
        if deadline.expired():
            raise _Late
        return priced(part)

    try:
        values = _segment_values(sp, program, span, zone, lams.size)  # [n + 1, span + 1, m]
    except _Late:  # out of time before the bounds per segment were known: nothing proven beyond ``known``
        message = "no plan over the wafers was found in time"
        return known or WaferSharing(Status.UNKNOWN, (), (), (), None, None, time.perf_counter() - start, message)
    # fresh_rest[w, a]: the least bound of the plan's rest from a fresh wafer w at kernel a (the best price per segment)
    fresh_rest, lengths, afters = _cut_program(values.max(axis=2), links, wafers)
    heads = np.full((n + 1, wafers, lams.size), np.inf)
    for w in range(wafers):
        heads[:, w] = np.min(values + afters[w][:, :, None], axis=1)
    if not np.isfinite(fresh_rest[0, 0]):
        return WaferSharing(Status.INFEASIBLE, (), (), (), None, None, time.perf_counter() - start,
                            f"no partition into regions fits {wafers} wafer(s) of {sp.total_cores:,} cores")  # fmt: skip
    bound = int(np.ceil(float(fresh_rest[0, 0]) - 1e-6 * max(1.0, float(fresh_rest[0, 0]))))
    upper = known.latency if known is not None else None
    if known is not None and upper is not None and upper <= bound:
        return replace(known, status=Status.OPTIMAL, bound=upper, wall_s=time.perf_counter() - start)
    ceiling = int(np.where(sp.latency < INF, sp.latency, 0).max(axis=1).sum()) + int(links.sum())
    slack = FIRST_SLACK / 2  # (bounds per segment are tighter: the optimum is nearer)
    while not deadline.expired():
        trial = min(int(np.ceil(bound * (1 + slack))) + 1, ceiling if upper is None else upper)
        found = _strong_labels(sp, links, wafers, windows, lams, heads, fresh_rest, trial, deadline)
        if found is None:
            break
        if found:
            plan = _plan(Status.OPTIMAL, found, sp, links, trial, start, "")
            return replace(
                plan,
                bound=plan.latency,
                message=f"{len(found)} regions on {len(plan.cuts) - 1} wafer(s); the least time over every cut and "
                f"region within the wafers' budgets (a bound per segment at {lams.size} prices, then Pareto labels: exact)",
            )
        bound = trial + 1
        if known is not None and upper is not None and trial >= upper:
            return replace(known, status=Status.OPTIMAL, bound=upper, wall_s=time.perf_counter() - start,
                           message="no plan beats the one found first")  # fmt: skip
        if known is None and trial >= ceiling:
            return WaferSharing(Status.INFEASIBLE, (), (), (), None, None, time.perf_counter() - start,
                                f"no partition into regions fits {wafers} wafer(s) of {sp.total_cores:,} cores")  # fmt: skip
        slack *= SLACK_GROWTH
    # no plan proven least, but the cut whose wafers' bounds add up least: where each wafer's own regions
    # may go (a cut filling each wafer as far as it fits left Llama-3.1-70B's third wafer on wse3 its SRAM
    # full and 40% slower than the others; a plan in hand on the fewest wafers that fit, the 70B prefill
    # allowed eight, took 1,499,712,605 cycles on four where five take 624,474,232)
    wish = tuple(_least_cut(lengths, n))
    if known is None:
        return WaferSharing(Status.UNKNOWN, (), (), (), None, bound, time.perf_counter() - start,
                            "no plan over the wafers was found in time", wish=wish)  # fmt: skip
    status = Status.OPTIMAL if upper is not None and upper <= bound else Status.FEASIBLE
    return replace(known, status=status, bound=min(bound, upper or bound), wall_s=time.perf_counter() - start,
                   message="the time ran out: the plan found first, the bound proven so far",
                   wish=wish if status is not Status.OPTIMAL else ())  # fmt: skip


def solve(
    sp: SharingProblem,
    links: np.ndarray,
    wafers: int,
    deadline: Deadline,
    known: WaferSharing | None = None,
    price: float = 0.0,
) -> WaferSharing:
    """The least-time cut and regions over at most ``wafers`` wafers (see the module docstring);
    ``known``: a plan found otherwise (the upper bound to beat; kept when time runs out); ``price``:
    the price of a core when every wafer's cores are one budget (``solvers.share``), around which the
    bounds per segment are taken. Where the grids allow the knapsack over units and its programs are
    small: the knapsack while its pace is quick, else the priced bounds and labels, then the knapsack
    again where they do not close in their share; otherwise the priced search alone. A sequence whose segment values need more
    than ``MAX_SWEEPS`` programs (no long repeating stretch) is not searched: ``known`` (or UNKNOWN)
    comes back."""
    start = time.perf_counter()
    windows = sp.windows()
    zone = _zone(sp)
    if zone.sweeps(sp.n_kernels) > MAX_SWEEPS:
        message = f"{sp.n_kernels} kernels without a long repeating stretch need {zone.sweeps(sp.n_kernels)} programs"
        return known if known is not None else WaferSharing(Status.UNKNOWN, (), (), (), None, None, 0.0, message)
    pieces = _pieces(sp.n_kernels, _longest_segment(sp), zone)
    units = columns.small_units(sp, [(p.first, p.end) for p in pieces], windows)
    if sp.charged:  # runs charged at their ends (expert shards): the knapsack alone knows the charges
        if units is None:
            message = "the expert shards' charges need the knapsack over columns, whose programs are too large here"
            return known or WaferSharing(Status.UNKNOWN, (), (), (), None, None, time.perf_counter() - start, message)
        return _ColumnSearch(sp, links, wafers, zone, units).run(deadline, start) or WaferSharing(
            Status.UNKNOWN, (), (), (), None, None, time.perf_counter() - start, "no plan over the wafers was found in time"
        )
    if units is None:
        return _segment_solve(sp, links, wafers, deadline, windows, zone, price, known, start)
    # the knapsack first while its programs keep a pace that ends them within ``QUICK_SHARE`` of the
    # time (Qwen3-235B, Llama-3.1-405B: seconds); else the priced search (it closes in seconds where
    # wafers hold many regions, Mixtral), then the knapsack where that does not close in its share
    search = _ColumnSearch(sp, links, wafers, zone, units)
    exact = search.run(deadline, start, allowed=QUICK_SHARE * deadline.remaining())
    if exact is not None:
        return exact
    if deadline.expired():
        message = "no plan over the wafers was found in time"
        return known or WaferSharing(Status.UNKNOWN, (), (), (), None, None, time.perf_counter() - start, message)
    priced = _segment_solve(sp, links, wafers, deadline.share(columns.PRICED_SHARE), windows, zone, price, known, start)
    if priced.status in (Status.OPTIMAL, Status.INFEASIBLE) or deadline.expired():
        return priced
    exact = search.run(deadline, start)
    return exact if exact is not None else priced
