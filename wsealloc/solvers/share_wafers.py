"""Cores shared in time over several wafers, chosen exactly (``--objective latency --wafers N|auto
--share auto``): the cut of the kernel sequence into at most W wafers, each wafer's runs (regions) and
each run's grid, minimizing one token's time: every run's latency and, at every cut, the link's
cycles (``links[j]``: the bytes crossing in front of kernel j over the link's bandwidth, plus its
latency). Each wafer's runs take at most ``sp.total_cores`` cores (``problem.sharing``).

Two methods, both exact (a plan proven least, or the bound proven when time runs out):

**Bounds per segment** (``method="segments"``, used when the kernels' rows repeat: decoders). Any
segment [a, b) of kernels laid on one wafer takes at least its Lagrangian value at any price of a
core, ``min over partitions of sum(latency + lam * cores) - lam * C`` (``_segment_values``, the best of
``PRICES`` prices around the price of the relaxed problem); a program over the cuts with those
values is a bound over every cut (``fresh_rest``), and Pareto labels (time, cores used on the current
wafer) per (kernel boundary j, wafer w), every run tried from every boundary with labels, pruned by
the same values (``heads``: the rest of the current wafer at each price, then the best cut), find
the least plan within a limit U (``_strong_labels``). The values need one program per start of a
segment, but a start's program depends only on the kernels after it: where the rows repeat with a
period (``_zone``), the starts of one phase share it (17 programs for Llama's 1,124 or 1,768 kernels).

**One price per wafer** (``method="wafers"``, any sequence). Pricing a core of wafer w at ``lam[w]``
and crediting the wafer its ``C`` cores, a plan is worth ``sum(latency + lam[w] * cores) + sum(links)
- sum(lam[w] * C)``, never more than its time when every wafer's runs fit its C cores; the least
worth over every cut and partition is a program over (kernel boundary j, wafer w) (``_sweep``),
the prices searched (one for all, bisected; then per wafer by subgradient steps). Run backwards it
gives every run's least worth through it, so runs and cuts above U are fixed out; Pareto labels over
the rest find the least plan within U. On Llama-3.1-70B this bound stays 0.36% under the optimum (the
relaxed plan moves its cut to the cheapest wafer), too loose for the labels: hence the first method.

In both, U starts just above the bound and widens until a plan is found (a round that finds none
proves the optimum above its U: the bound rises), up to the caller's known plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers.base import Status

BLOCK = 24  # run ends per block of the dynamic program (the settled starts' minima computed once a block)
DUAL_STEPS = 12  # bisection steps on the one price of a core of every wafer
SUBGRADIENT_STEPS = 16  # steps on the prices of each wafer's cores
FIRST_SLACK = 0.0005  # the first round's U: the dual bound plus this share (then doubled each round)
CHUNK = 2_000_000  # window cells tested at once
MAX_RUNS = 4_000_000  # candidate runs a round may hold (beyond: the bound proven so far is kept)


@dataclass(frozen=True)
class WaferSharing:
    """Wafer w holds kernels [cuts[w], cuts[w + 1]); ``runs`` (kernel indices, none crossing a cut) with
    their grid (index into the problem's shapes); ``latency`` the token's time (runs and links)."""

    status: Status
    cuts: tuple[int, ...]
    runs: tuple[tuple[int, int], ...]
    grids: tuple[int, ...]
    latency: int | None
    bound: int | None
    wall_s: float
    message: str = ""

    def wafer_runs(self, w: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
        """Wafer w's runs (kernel indices relative to its first kernel) and their grids."""
        a, b = self.cuts[w], self.cuts[w + 1]
        picked = [(r, g) for r, g in zip(self.runs, self.grids, strict=True) if a <= r[0] < b]
        return tuple((i - a, j - a) for (i, j), _ in picked), tuple(g for _, g in picked)


@dataclass(frozen=True)
class _Sweep:
    """One direction of the Lagrangian program at one vector of prices."""

    ended: np.ndarray  # [W, n + 1]: least worth of kernels [0, j) with a run ending at j on wafer w
    ready: np.ndarray  # [W, n + 1]: least worth with wafer w ready to start a run at j (ended or fresh)
    best: np.ndarray  # [W, G, n + 1]: least worth of a run on grid g ending at j on wafer w


def _sweep(
    sp: SharingProblem, price: np.ndarray, credit: np.ndarray, links: np.ndarray, windows: np.ndarray, forward: bool = True
) -> _Sweep:
    """The Lagrangian program: for every end j, wafer w and grid g, the least worth of a run [i, j) on
    g (i in g's window) after the best prefix ready at i on wafer w (``price[w, g]``: what a run on g
    is charged on wafer w beyond its latency; ``credit[w]``: the worth of wafer w's budget).

    Forward, the plan starts on wafer 0 with its credit and a cut in front of kernel j opens wafer w + 1
    (its credit taken). On the reversed problem (``forward=False``) the same program is the rest of
    the plan: it may end on any wafer, a cut leads to wafer w - 1 and takes the credit of wafer w,
    which the cut opens in dataflow order; the wafer a run starts on is already open (no credit).

    The minimum over a window is split at the block's first end: the starts before it are settled
    (their suffix minima computed once per block), the few inside it are taken directly."""
    n, g_count = sp.latency.shape
    wafers = price.shape[0]
    prefix = _prefix(sp).astype(np.float64)
    ended = np.full((wafers, n + 1), np.inf)
    ready = np.full((wafers, n + 1), np.inf)
    best = np.full((wafers, g_count, n + 1), np.inf)
    start = np.full((wafers, g_count, n + 1), np.inf)  # ready[w, i] - prefix[g, i]
    if forward:
        ready[0, 0] = -credit[0]
    else:
        ready[:, 0] = 0.0
    start[:, :, 0] = ready[:, 0][:, None] - prefix[None, :, 0]
    grids = np.arange(g_count)
    for b in range(1, n + 1, BLOCK):
        e = min(n + 1, b + BLOCK)
        low = int(windows[:, b].min())
        settled = None
        if low < b:  # settled[..., t - low] = min of start[..., t:b]
            settled = np.minimum.accumulate(start[:, :, low:b][:, :, ::-1], axis=2)[:, :, ::-1]
        for j in range(b, e):
            first = windows[:, j]
            value = np.full((wafers, g_count), np.inf)
            if settled is not None:
                old = first < b
                value[:, old] = settled[:, grids[old], first[old] - low]
            if j > b:
                inside = np.arange(b, j)[None, :] >= first[:, None]  # [G, j - b]
                value = np.minimum(value, np.where(inside[None, :, :], start[:, :, b:j], np.inf).min(axis=2))
            value += prefix[None, :, j] + price
            best[:, :, j] = value
            ended[:, j] = value.min(axis=1)
            ready[:, j] = ended[:, j]
            if 0 < j < n and wafers > 1:  # a cut in front of this kernel boundary
                if forward:
                    ready[1:, j] = np.minimum(ready[1:, j], ended[:-1, j] + links[j] - credit[1:])
                else:
                    ready[:-1, j] = np.minimum(ready[:-1, j], ended[1:, j] + links[j] - credit[1:])
            start[:, :, j] = ready[:, j][:, None] - prefix[:, j][None, :]
    return _Sweep(ended, ready, best)


def _prefix(sp: SharingProblem) -> np.ndarray:
    """[G, n + 1] prefix sums of the kernels' latencies per grid (0 where a kernel cannot be laid)."""
    out = np.zeros((sp.shapes.shape[0], sp.n_kernels + 1), dtype=np.int64)
    out[:, 1:] = np.cumsum(np.where(sp.latency < INF, sp.latency, 0).T, axis=1)
    return out


def _trace(sp: SharingProblem, sweep: _Sweep, price: np.ndarray, windows: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The relaxed plan behind a forward program: its runs (i, j, g, w) in order."""
    n = sp.n_kernels
    prefix = _prefix(sp).astype(np.float64)
    w = int(np.argmin(sweep.ended[:, n]))
    j = n
    runs: list[tuple[int, int, int, int]] = []
    while j > 0:
        g = int(np.argmin(sweep.best[w, :, j]))
        i0 = int(windows[g, j])
        worth = (sweep.ready[w, i0:j] - prefix[g, i0:j]) + prefix[g, j] + price[w, g]  # as the sweep sums it
        i = i0 + int(np.argmin(np.abs(worth - sweep.best[w, g, j])))
        runs.append((i, j, g, w))
        j = i
        if j > 0 and sweep.ended[w, j] > sweep.ready[w, j]:  # wafer w was opened by a cut in front of kernel j
            w -= 1
    return runs[::-1]


@dataclass(frozen=True)
class _Dual:
    """The Lagrangian bound at one vector of prices."""

    lam: np.ndarray  # [W]
    value: float
    forward: _Sweep
    surplus: np.ndarray  # [W]: cores of the relaxed plan's wafers beyond their budget (-C: unused)
    plan: list[tuple[int, int, int, int]]


def _dual_at(sp: SharingProblem, lam: np.ndarray, links: np.ndarray, windows: np.ndarray) -> _Dual:
    """The bound at prices ``lam`` and its relaxed plan's surplus of cores per wafer (the slopes)."""
    cores = sp.cores().astype(np.float64)
    price = lam[:, None] * cores[None, :]
    fwd = _sweep(sp, price, lam * sp.total_cores, links, windows)
    value = float(fwd.ended[:, -1].min())
    surplus = np.full(lam.shape[0], -float(sp.total_cores))
    plan: list[tuple[int, int, int, int]] = []
    if np.isfinite(value):
        plan = _trace(sp, fwd, price, windows)
        for _, _, g, w in plan:
            surplus[w] += cores[g]
    return _Dual(lam, value, fwd, surplus, plan)


def _rest(sp: SharingProblem, lam: np.ndarray, links: np.ndarray, rwindows: np.ndarray) -> np.ndarray:
    """[W, n + 1]: the least worth of the rest of the plan when wafer w (already open, its credit
    taken) starts its next run at j; 0 at the end."""
    n = sp.n_kernels
    price = lam[:, None] * sp.cores().astype(np.float64)[None, :]
    bwd = _sweep(sp.reversed(), price, lam * sp.total_cores, links[::-1].copy(), rwindows, forward=False)
    rest = bwd.ended[:, ::-1].copy()  # a run of the reversed problem ending at n - j starts at j
    rest[:, n] = 0.0
    return rest


def _cut_worth(rest: np.ndarray, links: np.ndarray, lam: np.ndarray, budget: int) -> np.ndarray:
    """[W, n + 1]: the least worth of the rest after a cut in front of kernel j from wafer w (inf: none)."""
    wafers, size = rest.shape
    out = np.full((wafers, size), np.inf)
    if wafers > 1 and size > 2:
        out[:-1, 1:-1] = links[None, 1:-1] - (lam[1:] * budget)[:, None] + rest[1:, 1:-1]
    return out


def _candidates(
    sp: SharingProblem, lam: np.ndarray, fwd: _Sweep, rest: np.ndarray, cut: np.ndarray, windows: np.ndarray, upper: int
) -> tuple[np.ndarray, ...] | None:
    """Every run (i, j, g, w) some plan of time <= ``upper`` may use (reduced-cost fixing): its
    starts, ends, grids, wafers, latencies and cores as arrays; None when more than ``MAX_RUNS``."""
    after = np.minimum(rest, cut)  # after a run ending at j on wafer w: another run there, or a cut
    slack = upper + 1e-6 * max(1.0, float(upper))
    prefix = _prefix(sp)
    pf = prefix.astype(np.float64)
    cores = sp.cores().astype(np.int64)
    price = lam[:, None] * cores.astype(np.float64)[None, :]
    ww, gg, jj = np.nonzero(fwd.best + after[:, None, :] <= slack)
    if not ww.size:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, empty, empty
    # every start of every surviving (w, g, j) window, a chunk of windows at a time
    first = windows[gg, jj]
    lengths = jj - first
    ends = np.cumsum(lengths)
    kept: list[tuple[np.ndarray, ...]] = []
    count = 0
    at = 0
    while at < ww.size:
        stop = int(np.searchsorted(ends, (ends[at] - lengths[at]) + CHUNK, side="right"))
        stop = max(stop, at + 1)
        sl = slice(at, stop)
        rows = np.repeat(np.arange(at, stop), lengths[sl])
        base = np.repeat(ends[sl] - lengths[sl], lengths[sl])
        ii = first[rows] + (np.arange(int(base.size)) + (ends[at] - lengths[at]) - base)
        w_, g_, j_ = ww[rows], gg[rows], jj[rows]
        worth = (fwd.ready[w_, ii] - pf[g_, ii]) + pf[g_, j_] + price[w_, g_] + after[w_, j_]
        keep = worth <= slack
        kept.append((ii[keep], j_[keep], g_[keep], w_[keep]))
        count += int(keep.sum())
        if count > MAX_RUNS:
            return None
        at = stop
    i_, j_, g_, w_ = (np.concatenate([k[t] for k in kept]) for t in range(4))
    return i_, j_, g_, w_, prefix[g_, j_] - prefix[g_, i_], cores[g_]


def _labels(
    n: int,
    runs: tuple[np.ndarray, ...],
    links: np.ndarray,
    rest: np.ndarray,
    cut: np.ndarray,
    lam: np.ndarray,
    budget: int,
    upper: int,
    deadline: Deadline,
) -> list[tuple[int, int, int, int]] | None:
    """The least-time plan within ``upper`` over the candidate runs: Pareto labels (time, cores on the
    current wafer) per (kernel boundary j, wafer w), extended run by run, a cut opening the next wafer
    with no cores used; a label whose time plus the Lagrangian bound on the rest exceeds ``upper`` is
    dropped. Returns its runs (i, j, g, w) ([]: no plan within ``upper``), None when time runs out."""
    wafers = rest.shape[0]
    r_start, r_end, r_grid, r_wafer, r_lat, r_cores = runs
    state_of = r_end * wafers + r_wafer
    order = np.argsort(state_of, kind="stable")
    bounds = np.searchsorted(state_of[order], np.arange(wafers * (n + 1) + 1))
    states = wafers * (n + 1)
    size = np.zeros(states, dtype=np.int64)
    offset = np.zeros(states, dtype=np.int64)
    flat_lat = [np.zeros(1, dtype=np.int64)]
    flat_cores = [np.zeros(1, dtype=np.int64)]
    flat_run = [np.array([-1], dtype=np.int64)]  # the run that led here (-1: the start or a cut)
    flat_prev = [np.array([-1], dtype=np.int64)]
    size[0] = 1
    total = 1
    all_lat, all_cores = flat_lat[0], flat_cores[0]
    ended_best = np.full(states, -1, dtype=np.int64)  # flat index of the fastest label a run ended at
    for j in range(1, n + 1):
        if deadline.expired():
            return None
        for w in range(wafers):
            s = j * wafers + w
            offset[s] = total
            ts = order[bounds[s] : bounds[s + 1]]
            ts = ts[size[r_start[ts] * wafers + w] > 0]
            la = co = ru = pr = np.zeros(0, dtype=np.int64)
            if ts.size:
                from_state = r_start[ts] * wafers + w
                lengths = size[from_state]
                firsts = np.repeat(offset[from_state] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
                idx = firsts + np.arange(int(lengths.sum()), dtype=np.int64)
                la = all_lat[idx] + np.repeat(r_lat[ts], lengths)
                co = all_cores[idx] + np.repeat(r_cores[ts], lengths)
                ru, pr = np.repeat(ts, lengths), idx
                left = np.minimum(rest[w, j] - lam[w] * (budget - co), cut[w, j])
                keep = (co <= budget) & (la + np.ceil(left - 1e-6) <= upper)
                la, co, ru, pr = la[keep], co[keep], ru[keep], pr[keep]
            if w > 0 and ended_best[s - 1] >= 0 and np.isfinite(cut[w - 1, j]):  # a cut opens wafer w here
                k = int(ended_best[s - 1])
                fresh = int(all_lat[k]) + int(links[j])
                if fresh + np.ceil(rest[w, j] - lam[w] * budget - 1e-6) <= upper:
                    la, co = np.append(la, fresh), np.append(co, 0)
                    ru, pr = np.append(ru, -1), np.append(pr, k)
            if la.size:
                ordering = np.lexsort((la, co))  # cores ascending, then time
                la, co, ru, pr = la[ordering], co[ordering], ru[ordering], pr[ordering]
                before = np.minimum.accumulate(np.concatenate(([np.iinfo(np.int64).max], la[:-1])))
                front = la < before  # Pareto: each kept only if faster than every label with fewer cores
                la, co, ru, pr = la[front], co[front], ru[front], pr[front]
                ended = np.flatnonzero(ru >= 0)
                if ended.size:
                    ended_best[s] = total + int(ended[np.argmin(la[ended])])
            size[s] = la.size
            total += la.size
            flat_lat.append(la)
            flat_cores.append(co)
            flat_run.append(ru)
            flat_prev.append(pr)
            all_lat = np.concatenate((all_lat, la))
            all_cores = np.concatenate((all_cores, co))
    finals = [n * wafers + w for w in range(wafers) if ended_best[n * wafers + w] >= 0]
    if not finals or min(int(all_lat[ended_best[s]]) for s in finals) > upper:
        return []
    runs_flat, prev_flat = np.concatenate(flat_run), np.concatenate(flat_prev)
    k = min((int(ended_best[s]) for s in finals), key=lambda t: int(all_lat[t]))
    chosen: list[tuple[int, int, int, int]] = []
    while k > 0:
        t = int(runs_flat[k])
        if t >= 0:
            chosen.append((int(r_start[t]), int(r_end[t]), int(r_grid[t]), int(r_wafer[t])))
        k = int(prev_flat[k])
    return chosen[::-1]


def plan_time(
    sp: SharingProblem, links: np.ndarray, cuts: tuple[int, ...], runs: tuple[tuple[int, int], ...], grids: tuple[int, ...]
) -> int:
    """A plan's time: its runs' latencies and its cuts' links."""
    inside = sum(int(sp.latency[i:j, g].sum()) for (i, j), g in zip(runs, grids, strict=True))
    return int(inside) + int(sum(int(links[c]) for c in cuts[1:-1]))


def _plan(status: Status, runs: list[tuple[int, int, int, int]], sp: SharingProblem, links: np.ndarray,
          bound: int, start: float, message: str) -> WaferSharing:  # fmt: skip
    """A plan of runs (i, j, g, w): its cuts where the wafer changes, its time, its proof."""
    cuts = (0, *(r[0] for r, q in zip(runs[1:], runs[:-1], strict=True) if r[3] != q[3]), sp.n_kernels)
    pairs = tuple((i, j) for i, j, _, _ in runs)
    grids = tuple(g for _, _, g, _ in runs)
    latency = plan_time(sp, links, cuts, pairs, grids)
    return WaferSharing(status, cuts, pairs, grids, latency, min(bound, latency), time.perf_counter() - start, message)


def _best_prices(
    sp: SharingProblem, wafers: int, links: np.ndarray, windows: np.ndarray, deadline: Deadline, upper: int | None
) -> _Dual:
    """The prices of the best bound found (the dual is concave; any prices give a valid bound): at 0
    (the problem without budgets); then one price for every wafer, bisected on the relaxed plan's
    total surplus of cores; then each wafer its own price by subgradient steps (a wafer over its
    budget dearer, one under it cheaper; Polyak's step towards ``upper`` or just above the bound)."""
    best = _dual_at(sp, np.zeros(wafers), links, windows)
    if not np.isfinite(best.value) or (best.surplus <= 0).all():
        return best
    cap = float(np.where(sp.latency < INF, sp.latency, 0).max(axis=1).sum()) + 1.0  # no core is worth more
    lo, hi = 0.0, min(1.0, cap)
    while not deadline.expired():  # a price at which the relaxed plan takes no more than the budgets
        at = _dual_at(sp, np.full(wafers, hi), links, windows)
        best = at if at.value > best.value else best
        if at.surplus.sum() <= 0 or hi >= cap:
            break
        lo, hi = hi, min(hi * 4, cap)
    for _ in range(DUAL_STEPS):
        if deadline.expired():
            break
        mid = (lo + hi) / 2
        at = _dual_at(sp, np.full(wafers, mid), links, windows)
        best = at if at.value > best.value else best
        lo, hi = (mid, hi) if at.surplus.sum() > 0 else (lo, mid)
    current, theta = best, 1.0
    for _ in range(SUBGRADIENT_STEPS):
        norm = float((current.surplus**2).sum())
        if deadline.expired() or norm == 0.0 or theta < 1e-3:
            break
        target = upper if upper is not None else best.value * (1 + FIRST_SLACK)
        step = theta * max(target - current.value, 1.0) / norm
        at = _dual_at(sp, np.maximum(current.lam + step * current.surplus, 0.0), links, windows)
        if at.value > best.value:
            best = at
        else:
            theta /= 2
        current = at if at.value > current.value - abs(current.value) * 1e-3 else best
    return best


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
    bare = replace(sp, latency=np.where(sp.latency < INF, 0, INF).astype(np.int64))
    cores = sp.cores().astype(np.float64)[None, :]
    no_cut = np.full(n + 1, np.inf)
    reach: dict[int, int] = {}

    def furthest(a: int) -> int:
        if a not in reach:
            part = bare.segment(a, a + span)
            fewest = _sweep(part, cores, np.zeros(1), no_cut[: part.n_kernels + 1], part.windows(), forward=False).ended[0]
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

MAX_CELLS = 8_000_000  # wafers x grids x kernels the program over wafers holds (without repeating layers)
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
    rows = np.concatenate([sp.latency, *exact], axis=1)  # equal rows: equal kernels on every grid
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


def _segment_values(sp: SharingProblem, lams: np.ndarray, span: int, zone: _Zone) -> np.ndarray:
    """[n + 1, span + 1, m]: the Lagrangian value of every segment [a, a + l) as one wafer's kernels at
    every price (``lams``): a lower bound on that wafer's least time, whatever the cut around it. One
    program a start (prices as its "wafers", no cuts), shared by the starts of one phase of ``zone``."""
    n, m = sp.n_kernels, lams.shape[0]
    out = np.full((n + 1, span + 1, m), np.inf)
    credit = lams * sp.total_cores
    no_cut = np.full(n + 1, np.inf)

    def program(part: SharingProblem) -> np.ndarray:
        price = lams[:, None] * part.cores().astype(np.float64)[None, :]
        swept = _sweep(part, price, credit, no_cut[: part.n_kernels + 1], part.windows(), forward=False)
        return (swept.ended - credit[:, None]).T  # [length + 1, m]

    def piece(a: int, b: int) -> SharingProblem:
        return sp.segment(a, b)

    for a in range(n):  # starts before the zone (every start, without one)
        if zone.start <= a < zone.end:
            continue
        values = program(piece(a, min(n, a + span)))
        out[a, : values.shape[0]] = values
    for phase in range(zone.period):  # each phase of the zone, copied to its starts (segments within the zone)
        first = zone.start + phase
        if first >= zone.end:
            break
        values = program(piece(first, min(zone.end, first + span)))
        for a in range(first, zone.end, zone.period):
            length = min(values.shape[0], zone.end - a + 1)
            out[a, :length] = values[:length]
    for b in range(zone.end + 1, n + 1) if zone.period else ():  # segments of the zone's starts ending after it
        a0 = max(zone.start, b - span)
        if a0 >= b:
            continue
        values = program(piece(a0, b).reversed())  # values[l]: the segment [b - l, b)
        for length in range(1, b - a0 + 1):
            out[b - length, length] = values[length]
    return out


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
    values = _segment_values(sp, lams, span, zone)  # [n + 1, span + 1, m]
    segment = values.max(axis=2)  # the best price per segment
    # fresh_rest[w, a]: the least bound of the plan's rest from a fresh wafer w at kernel a
    fresh_rest = np.full((wafers + 1, n + 1), np.inf)
    heads = np.full((n + 1, wafers, lams.size), np.inf)
    a = np.arange(n + 1)[:, None]
    lengths = np.arange(span + 1)[None, :]
    ends = a + lengths  # [n + 1, span + 1]
    inside = (lengths >= 1) & (ends <= n)
    ends = np.minimum(ends, n)
    for w in range(wafers - 1, -1, -1):
        tail = np.where(np.arange(n + 1) == n, 0.0, links.astype(np.float64) + fresh_rest[w + 1])  # after a segment ending at b
        tail[n] = 0.0
        after = np.where(inside, tail[ends], np.inf)  # [n + 1, span + 1]
        fresh_rest[w] = np.min(segment + after, axis=1)
        heads[:, w] = np.min(values + after[:, :, None], axis=1)
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
    if known is None:
        return WaferSharing(Status.UNKNOWN, (), (), (), None, bound, time.perf_counter() - start,
                            "no plan over the wafers was found in time")  # fmt: skip
    status = Status.OPTIMAL if upper is not None and upper <= bound else Status.FEASIBLE
    return replace(known, status=status, bound=min(bound, upper or bound), wall_s=time.perf_counter() - start,
                   message="the time ran out: the plan found first, the bound proven so far")  # fmt: skip


def solve(
    sp: SharingProblem,
    links: np.ndarray,
    wafers: int,
    deadline: Deadline,
    known: WaferSharing | None = None,
    price: float = 0.0,
    method: str = "auto",
) -> WaferSharing:
    """The least-time cut and regions over at most ``wafers`` wafers (see the module docstring);
    ``known``: a plan found otherwise (the upper bound to beat; kept when time runs out); ``price``:
    the price of a core when every wafer's cores are one budget (``solvers.share``), around which the
    bounds per segment are taken; ``method``: ``segments`` (bounds per segment: sequences of
    identical layers), ``wafers`` (one price per wafer) or ``auto`` (segments when they need at most
    ``MAX_SWEEPS`` programs)."""
    start = time.perf_counter()
    windows = sp.windows()
    zone = _zone(sp)
    if method == "segments" or (method == "auto" and zone.sweeps(sp.n_kernels) <= MAX_SWEEPS):
        return _segment_solve(sp, links, wafers, deadline, windows, zone, price, known, start)
    if method == "auto" and wafers * sp.shapes.shape[0] * (sp.n_kernels + 1) > MAX_CELLS:
        message = f"{wafers} wafers x {sp.shapes.shape[0]} grids x {sp.n_kernels} kernels without repeating layers is beyond it"
        return known if known is not None else WaferSharing(Status.UNKNOWN, (), (), (), None, None, 0.0, message)
    dual = _best_prices(sp, wafers, links, windows, deadline, known.latency if known is not None else None)
    if not np.isfinite(dual.value):
        return WaferSharing(Status.INFEASIBLE, (), (), (), None, None, time.perf_counter() - start,
                            f"no partition into regions fits {wafers} wafer(s) of {sp.total_cores:,} cores")  # fmt: skip
    bound = int(np.ceil(dual.value - 1e-6 * max(1.0, abs(dual.value))))
    if (dual.surplus <= 0).all():  # the relaxed plan fits every wafer: complementary slackness aside, a plan
        relaxed = _plan(Status.FEASIBLE, dual.plan, sp, links, bound, start, "")
        if relaxed.latency is not None and relaxed.latency <= bound:
            fits = f"{len(relaxed.runs)} regions; the relaxed plan fits every wafer"
            return replace(relaxed, status=Status.OPTIMAL, message=fits)
        if known is None or (known.latency or 0) > (relaxed.latency or 0):
            known = relaxed
    upper = known.latency if known is not None else None
    if known is not None and upper is not None and upper <= bound:
        return replace(known, status=Status.OPTIMAL, bound=upper, wall_s=time.perf_counter() - start)
    rest = _rest(sp, dual.lam, links, sp.reversed().windows())
    cut = _cut_worth(rest, links, dual.lam, sp.total_cores)
    slack = FIRST_SLACK
    # no plan takes longer than every kernel on its slowest grid and every link
    ceiling = int(np.where(sp.latency < INF, sp.latency, 0).max(axis=1).sum()) + int(links.sum())
    while not deadline.expired():
        trial = min(int(np.ceil(bound * (1 + slack))), ceiling if upper is None else upper)
        runs = _candidates(sp, dual.lam, dual.forward, rest, cut, windows, trial)
        if runs is None:
            break
        found = _labels(sp.n_kernels, runs, links, rest, cut, dual.lam, sp.total_cores, trial, deadline)
        if found is None:
            break
        if found:
            plan = _plan(Status.OPTIMAL, found, sp, links, trial, start, "")
            return replace(
                plan,
                bound=plan.latency,
                message=f"{len(found)} regions on {len(plan.cuts) - 1} wafer(s); the least time over every cut and "
                f"region within the wafers' budgets (Lagrangian bound, then Pareto labels over the {runs[0].size:,} "
                "runs it cannot rule out: exact)",
            )
        bound = trial + 1  # no plan within the trial: the optimum is above it
        if known is None and trial >= ceiling:
            return WaferSharing(Status.INFEASIBLE, (), (), (), None, None, time.perf_counter() - start,
                                f"no partition into regions fits {wafers} wafer(s) of {sp.total_cores:,} cores")  # fmt: skip
        if known is not None and upper is not None and trial >= upper:
            return replace(known, status=Status.OPTIMAL, bound=upper, wall_s=time.perf_counter() - start,
                           message="no plan beats the one found first")  # fmt: skip
        slack *= 2
    if known is None:
        return WaferSharing(Status.UNKNOWN, (), (), (), None, bound, time.perf_counter() - start,
                            "no plan over the wafers was found in time")  # fmt: skip
    status = Status.OPTIMAL if upper is not None and upper <= bound else Status.FEASIBLE
    return replace(known, status=status, bound=min(bound, upper or bound), wall_s=time.perf_counter() - start,
                   message="the time ran out: the plan found first, the bound proven so far")  # fmt: skip
