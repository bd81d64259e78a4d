"""Cores shared in time, chosen exactly (``--share auto``): the partition of the kernel sequence into
runs and each run's grid (``problem.sharing``) minimizing one token's time through the kernels.

For a fixed run [i, j) on grid g the time is ``P[g, j] - P[g, i]`` (prefix sums of the kernels'
latencies on g) and the run fits when its SRAM prefix difference is within the usable SRAM; both
conditions are monotone in i, so the starts admissible for a run ending at j form a window
[lo_g(j), j) per grid. The best plan of the first j kernels is then a sliding-window minimum per grid:

    best[j] = min over g, i in window_g(j) of  best[i] - P[g, i]  +  P[g, j] + lam * cores(g)

(a monotone deque per grid: O(kernels x grids)), compared lexicographically with the cores as a tie
break. With ``lam = 0`` it is the optimum over every partition and every candidate grid, the wafer's
core budget aside; when that optimum fits the wafer it is proven optimal (status OPTIMAL, the bound
its value). Otherwise the budget is priced in (Lagrangian relaxation): a bisection on ``lam`` finds
the cheapest price whose plan fits (the primal), and ``max_lam (DP_lam - lam * cores)`` is a proven
lower bound (the dual); the gap between them is reported. Where every grid's cores are whole units of
one size (stacked columns, the default family) and the program is small, the gap is closed by a
knapsack over the units (``solvers.columns``: the least time within the budget, exact); else by
Pareto labels or CP-SAT over the runs the price cannot rule out.

Paced (``solve_paced``): with N requests in flight interleaved through the regions, a new pass enters
every ``slowest`` cycles (a region is busy for all its kernels), so a token of each request takes
``max(path, N x slowest region)`` cycles, not the path alone (Llama-3-8B decode, 16 requests: the
path-optimal plan's 346,289 cycles hold a region of 45,760, 732,160 cycles a token, where balanced
regions give about 370,000). Let ``f(C)`` be the least path among the plans whose every region takes
at most C cycles of its kernels (``solve`` on ``SharingProblem.cap = C``): nonincreasing in C, and the
optimum is ``min over C of max(f(C), N x C)``, a decreasing function against an increasing one, so
searched over C by bisection on which of the two is larger:

- the start: ``L0`` (the fastest partition, the budget aside: ``unbudgeted``) bounds every plan's
  path and ``C_min`` (the largest of the kernels' least latencies on a grid where each fits alone)
  every plan's slowest region: the search starts at ``C0 = max(ceil(L0 / N), C_min)``. Below it the
  value is the path (at least L0 > N x C), least at the largest such cap, C0 - 1, which may still beat
  C0's plan (that one's value up to N x C0): where C0 - 1 >= C_min the bisection below includes it;
- the least cap C_fit some plan within the wafer's cores has: bisected first, one program a probe
  (the fewest-core plan within the cap, at a core price above every latency: whether it fits is
  monotone in the cap), so that no full search is spent proving a cap empty (its whole price ladder:
  4 s of a 1 s share on Llama-3-8B with 44 requests); C0 is at least C_fit and every plan's slowest
  region is at least C_fit (``N x C_fit`` bounds the optimum); where time cuts the bisection short, a
  cap without a plan grows 1.25-fold, at most to the slowest region of the uncapped plan;
- a plan within C0 whose path exceeds ``N x C0``: the uncapped plan too (its bound holds every
  plan's path; where the path binds the search may end there);
- then a cap C whose plan's path is within ``N x C`` rules out every larger cap (each no better
  than ``N x C``) and one whose path exceeds ``N x C`` every smaller one (each has a path at least
  ``f(C)``), so the integer caps between are bisected, every capped search in a share of the time
  left, keeping the plan of least ``max(path, N x slowest)`` (ties: fewer cores);
- the proof: a plan whose slowest region is within a cap C searched with a proven bound b(C) on its
  paths takes at least ``max(b(C), L0)``, any other at least ``N (C + 1)``, so ``min(N (C + 1),
  max(b(C), L0))`` bounds the optimum for every C searched, as do ``L0`` and ``N x C_min``; the
  largest is reported, the plan optimal when it reaches it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers import columns
from wsealloc.solvers.base import Status

LATE_STEP = 32  # the price's rise a program once out of time before any plan fits (4 before)
LAMBDA_STEPS = 12  # bisection steps on the price of a core (when the budget binds; the labels make it exact)
MAX_CANDIDATES = 200_000  # runs the exact closing may hand to CP-SAT (beyond: the Lagrangian gap is reported)
PACED_SHARE = 0.4  # of the time left: each capped search of ``solve_paced`` (the rest for the next ones)
FIT_TOLERANCE = 0.01  # the least cap a plan fits is bisected to within this share (``_least_fitting_cap``)
CAP_GROWTH = 1.25  # the cap's growth while no plan is within it (``solve_paced``)


@dataclass(frozen=True)
class SharingResult:
    """Runs [first, end) with their grid (index into the problem's shapes), the token time (cycles,
    without the transfers placement adds), the cores, and the proof."""

    status: Status
    runs: tuple[tuple[int, int], ...]
    grids: tuple[int, ...]
    latency: int | None
    cores: int | None
    bound: int | None
    wall_s: float
    message: str = ""
    price: float = 0.0  # the Lagrangian price of a core behind the bound (0: the budget did not bind)
    # ``solve_paced`` only (None otherwise): the cap on a region's kernels the plan was found under
    # (None: uncapped; a stacked column's regions are ``split`` by the single windows of that cap) and
    # the plan's slowest region (``slowest_region``)
    cap: int | None = None
    slowest: int | None = None


@dataclass(frozen=True)
class _Plan:
    value: float  # latency + lam * cores
    latency: int
    cores: int
    runs: tuple[tuple[int, int], ...]
    grids: tuple[int, ...]
    prefix_values: tuple[float, ...] = ()  # the best value of kernels [0, j) for every j


def _dp(sp: SharingProblem, lam: float, windows: np.ndarray | None = None) -> _Plan | None:
    """The best partition at core price ``lam`` (None: no partition exists); ``windows``:
    ``sp.windows()`` when the caller has it already.

    best[j] = min over grids g and starts i in g's window at j of best[i] + latency of [i, j) on g +
    lam x cores of g, ties to the fewest cores. Per grid a monotone deque holds the candidate starts as
    (best[i] - prefix[g][i], cores, i), strictly increasing front to back, so its front is the window's
    least (the newest of exact ties). This loop is every sharing search's cost (Qwen3-235B's 1,602 kernels
    on 688 grids: 1.1 M grid steps a price, fifteen prices a search): entries carry their key (no
    recomputed differences), ties compare without tuples, and a grid whose window at j is empty is
    cleared and skipped (its windows only move right): 0.9 -> 0.5 s a price there, the same plans."""
    n, g_count = sp.latency.shape
    cores = sp.cores().astype(np.int64)
    finite = sp.latency < INF
    prefix = np.zeros((g_count, n + 1), dtype=np.float64)
    prefix[:, 1:] = np.cumsum(np.where(finite, sp.latency, 0).T.astype(np.float64), axis=1)
    inf = float("inf")
    best = [inf] * (n + 1)
    best_cores = [0] * (n + 1)
    back: list[tuple[int, int]] = [(-1, -1)] * (n + 1)
    best[0] = 0.0
    first = (sp.windows() if windows is None else windows).tolist()
    core_list = cores.tolist()
    grids_data = list(
        zip(range(g_count), prefix.tolist(), [deque[tuple[float, int, int]]() for _ in range(g_count)], first,
            [lam * float(c) for c in core_list], core_list, strict=True)
    )  # fmt: skip
    for j in range(1, n + 1):
        i_new = j - 1
        b_new, c_new = best[i_new], best_cores[i_new]
        new_ok = b_new < inf
        top, top_cores, top_back = inf, 0, (-1, -1)
        for g, pg, dq, fg, price, cg in grids_data:
            start = fg[j]  # the first start of a run ending at j that fits (monotone in j)
            if start > i_new:  # no run ending at j fits g: no start in its window now or later
                if dq:
                    dq.clear()
                continue
            if new_ok:
                key = b_new - pg[i_new]
                while dq:
                    k_back, c_back, _ = dq[-1]
                    if k_back > key or (k_back == key and c_back >= c_new):
                        dq.pop()
                    else:
                        break
                dq.append((key, c_new, i_new))
            while dq and dq[0][2] < start:
                dq.popleft()
            if dq:
                k_front, c_front, i = dq[0]
                value = k_front + pg[j] + price
                used = c_front + cg
                if value < top or (value == top and used < top_cores) or top == inf:
                    top, top_cores, top_back = value, used, (i, g)
        best[j], best_cores[j], back[j] = top, top_cores, top_back
    if best[n] == float("inf"):
        return None
    runs: list[tuple[int, int]] = []
    grids: list[int] = []
    j = n
    while j > 0:
        i, g = back[j]
        runs.append((i, j))
        grids.append(g)
        j = i
    runs.reverse()
    grids.reverse()
    latency = int(sum(sp.latency[i:jj, g].sum() for (i, jj), g in zip(runs, grids, strict=True)))
    used = int(sum(core_list[g] for g in grids))
    return _Plan(best[n], latency, used, tuple(runs), tuple(grids), tuple(best))


def candidate_runs(
    sp: SharingProblem, lam: float, forward: _Plan, backward: _Plan, upper: int, windows: np.ndarray | None = None
) -> list[tuple[int, int, int]] | None:
    """Lagrangian reduced-cost fixing: every run (i, j, g) that some plan of latency <= ``upper`` may
    use. At price ``lam`` a plan through the run is worth at least ``F[i] + cost(i, j, g) + B[j] - lam *
    cores_budget`` (the best prefix to i, the run, the best suffix from j: a lower bound on the latency
    of every plan within the budget that contains it); runs above ``upper`` are left out. None when too
    many remain (``MAX_CANDIDATES``)."""
    n, _ = sp.latency.shape
    f = np.array(forward.prefix_values, dtype=np.float64)
    b = np.array(backward.prefix_values, dtype=np.float64)[::-1]  # b[j]: the best suffix from j
    finite = sp.latency < INF
    cores = sp.cores().astype(np.float64)
    idx = np.arange(n + 1)
    out: list[tuple[int, int, int]] = []
    later = idx[None, :] > idx[:, None]
    first = sp.windows() if windows is None else windows
    slack = upper + lam * sp.total_cores + 1e-6 * max(1.0, float(upper))
    for g in range(sp.shapes.shape[0]):
        p = np.concatenate(([0.0], np.cumsum(np.where(finite[:, g], sp.latency[:, g], 0).astype(np.float64))))
        through = f[:, None] + (p[None, :] - p[:, None]) + lam * cores[g] + b[None, :]
        fits = idx[:, None] >= first[g][None, :]  # [i, j]: a run [i, j) fits
        ok = later & fits & (through <= slack)
        ii, jj = np.nonzero(ok)
        out += [(int(i), int(j), g) for i, j in zip(ii.tolist(), jj.tolist(), strict=True)]
        if len(out) > MAX_CANDIDATES:
            return None
    return out


def _labels(
    n: int,
    runs: list[tuple[int, int, int]],
    lat: list[int],
    cores: list[int],
    budget: int,
    suffix: np.ndarray,
    lam: float,
    upper: int,
    deadline: Deadline,
) -> list[int] | None:
    """Resource-constrained shortest path over the candidate runs by Pareto labels: at every cut the
    plans of the kernels before it that no other beats on both latency and cores, extended run by run;
    a label whose latency plus ``suffix[j] - lam * (cores left)`` (the Lagrangian lower bound on the rest
    within the cores left) exceeds ``upper`` is dropped. Exact: returns the runs of a plan of least latency (within
    ``upper``; [] when none beats it), or None when the deadline comes first."""
    into: list[list[int]] = [[] for _ in range(n + 1)]
    for t, (_, j, _) in enumerate(runs):
        into[j].append(t)
    run_start = np.array([i for i, _, _ in runs], dtype=np.int64)
    run_lat = np.array(lat, dtype=np.int64)
    run_cores = np.array(cores, dtype=np.int64)
    # every label of every cut in flat arrays (cut j's labels at [offset[j], offset[j] + size[j])):
    # latency, cores, the run that ended at the cut, and the flat index of the label it extended
    flat_lat, flat_cores, flat_run, flat_prev = [np.zeros(1, dtype=np.int64)], [np.zeros(1, dtype=np.int64)], [], []
    flat_run.append(np.array([-1], dtype=np.int64))
    flat_prev.append(np.array([-1], dtype=np.int64))
    offset = np.zeros(n + 1, dtype=np.int64)
    size = np.zeros(n + 1, dtype=np.int64)
    size[0] = 1
    total = 1
    all_lat, all_cores = flat_lat[0], flat_cores[0]
    for j in range(1, n + 1):
        if deadline.expired():
            return None
        offset[j] = total
        ts = np.array(into[j], dtype=np.int64)
        if ts.size:
            ts = ts[size[run_start[ts]] > 0]
        if not ts.size:
            continue
        lengths = size[run_start[ts]]
        # the flat indices of every (run, label of its start cut) pair, in one gather
        firsts = np.repeat(offset[run_start[ts]] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        idx = firsts + np.arange(int(lengths.sum()), dtype=np.int64)
        la = all_lat[idx] + np.repeat(run_lat[ts], lengths)
        co = all_cores[idx] + np.repeat(run_cores[ts], lengths)
        ru = np.repeat(ts, lengths)
        rest = np.ceil(suffix[j] - lam * (budget - co) - 1e-6)
        keep = (co <= budget) & (la + rest <= upper)
        la, co, ru, pr = la[keep], co[keep], ru[keep], idx[keep]
        if la.size:
            order = np.lexsort((la, co))  # cores ascending, then latency
            la, co, ru, pr = la[order], co[order], ru[order], pr[order]
            best_before = np.minimum.accumulate(np.concatenate(([np.iinfo(np.int64).max], la[:-1])))
            front = la < best_before  # Pareto: fewer cores first, each kept only if faster than all before
            la, co, ru, pr = la[front], co[front], ru[front], pr[front]
        size[j] = la.size
        total += la.size
        flat_lat.append(la)
        flat_cores.append(co)
        flat_run.append(ru)
        flat_prev.append(pr)
        all_lat = np.concatenate((all_lat, la))
        all_cores = np.concatenate((all_cores, co))
    if size[n] == 0:
        return []
    runs_flat, prev_flat = np.concatenate(flat_run), np.concatenate(flat_prev)
    k = int(offset[n] + np.argmin(all_lat[offset[n] : offset[n] + size[n]]))
    chosen: list[int] = []
    while k > 0:
        chosen.append(int(runs_flat[k]))
        k = int(prev_flat[k])
    return chosen[::-1]


def _close_gap(
    sp: SharingProblem, lam: float, forward: _Plan, primal: _Plan, deadline: Deadline, lower: int, windows: np.ndarray
) -> SharingResult | None:
    """The exact optimum when the Lagrangian leaves a gap: the runs no plan better than ``primal`` can
    avoid pricing out (``candidate_runs`` at the best price ``lam``), then the least-latency path over
    them within the core budget by Pareto labels (``_labels``: exact), or, when that runs out of time,
    by CP-SAT (``solvers.cpsat_share``). None when too many runs remain or nothing is found in time."""
    from wsealloc.solvers.cpsat_share import solve_partition

    backward = _dp(sp.reversed(), lam)
    if backward is None:
        return None
    runs = candidate_runs(sp, lam, forward, backward, primal.latency, windows)
    if runs is None:
        return None
    hint = {(i, j, g) for (i, j), g in zip(primal.runs, primal.grids, strict=True)}
    runs = sorted(set(runs) | hint)
    cores = sp.cores().astype(np.int64)
    lat = [int(sp.latency[i:j, g].sum()) for i, j, g in runs]
    core_list = [int(cores[g]) for _, _, g in runs]
    # the rest from cut j within c cores takes at least B[j] - lam * c (the Lagrangian suffix bound)
    suffix = np.array(backward.prefix_values, dtype=np.float64)[::-1]
    found = _labels(sp.n_kernels, runs, lat, core_list, sp.total_cores, suffix, lam, primal.latency, deadline)
    if found is not None:
        chosen = found or [runs.index(t) for t in sorted(hint)]  # nothing beats the primal: it is optimal
        picked = [runs[t] for t in chosen]
        latency = sum(lat[t] for t in chosen)
        return SharingResult(
            Status.OPTIMAL,
            tuple((i, j) for i, j, _ in picked),
            tuple(g for _, _, g in picked),
            latency,
            int(sum(core_list[t] for t in chosen)),
            latency,
            0.0,
            f"{len(picked)} regions; the core budget binds: Lagrangian price, then the least-latency path within the "
            f"budget over the {len(runs):,} runs reduced costs cannot rule out (Pareto labels: exact)",
        )
    status, chosen, bound = solve_partition(
        sp.n_kernels, runs, lat, [int(cores[g]) for _, _, g in runs], sp.total_cores, hint, deadline, lower
    )
    if not chosen or bound is None:
        return None
    picked = sorted(runs[t] for t in chosen)
    latency = sum(lat[t] for t in chosen)
    used = int(sum(int(cores[runs[t][2]]) for t in chosen))
    proven = min(bound, latency) if status is Status.OPTIMAL else bound
    return SharingResult(
        Status.OPTIMAL if proven >= latency else Status.FEASIBLE,
        tuple((i, j) for i, j, _ in picked),
        tuple(g for _, _, g in picked),
        latency,
        used,
        min(proven, latency),
        0.0,
        f"{len(picked)} regions; the core budget binds: Lagrangian price, then CP-SAT over the {len(runs):,} runs "
        "reduced costs cannot rule out",
    )


def _by_columns(sp: SharingProblem, units: columns.Units, deadline: Deadline) -> SharingResult | None:
    """The least time within the wafer's cores by the knapsack over whole units (``solvers.columns``);
    None when time runs out first."""
    found = columns.program(sp, units, deadline)
    if found is None or found.least[sp.n_kernels, units.budget] >= columns.NONE:
        return None
    picked = found.runs(sp.n_kernels)
    latency = int(found.least[sp.n_kernels, units.budget])
    cores = sp.cores()
    return SharingResult(
        Status.OPTIMAL,
        tuple((i, j) for i, j, _ in picked),
        tuple(g for _, _, g in picked),
        latency,
        sum(int(cores[g]) for _, _, g in picked),
        latency,
        0.0,
        f"{len(picked)} regions; the core budget binds: the least time within {units.budget:,} units of "
        f"{units.unit:,} cores (a knapsack over the units: exact)",
    )


def unbudgeted(sp: SharingProblem) -> SharingResult:
    """The fastest partition with the wafer's core budget aside (one program): the optimum where it
    fits the wafer, else no plan and its time as a proven lower bound. What a caller holding a plan
    found otherwise still proves when no time is left for ``solve`` (its price bisection and closing)."""
    start = time.perf_counter()
    plan = _dp(sp, 0.0)
    if plan is None:
        message = "a kernel fits no candidate region grid"
        return SharingResult(Status.INFEASIBLE, (), (), None, None, None, time.perf_counter() - start, message)
    if plan.cores <= sp.total_cores:
        message = f"{len(plan.runs)} regions; the fastest partition fits the wafer ({plan.cores:,} cores)"
        wall = time.perf_counter() - start
        return SharingResult(Status.OPTIMAL, plan.runs, plan.grids, plan.latency, plan.cores, plan.latency, wall, message)
    message = f"no time to search: at least {plan.latency:,} cycles (the fastest partition takes {plan.cores:,} cores)"
    return SharingResult(Status.FEASIBLE, (), (), None, None, plan.latency, time.perf_counter() - start, message)


def solve(sp: SharingProblem, deadline: Deadline | None = None) -> SharingResult:
    """The best runs and grids for one token's time (see the module docstring)."""
    start = time.perf_counter()
    windows = sp.windows()
    plan = _dp(sp, 0.0, windows)
    if plan is None:
        return SharingResult(
            Status.INFEASIBLE,
            (),
            (),
            None,
            None,
            None,
            time.perf_counter() - start,
            "a kernel fits no candidate region grid (its SRAM alone exceeds the largest grid's)"
            if sp.cap is None
            else f"no partition into regions of at most {sp.cap:,} cycles each fits their grids' SRAM",
        )
    if plan.cores <= sp.total_cores:
        return SharingResult(
            Status.OPTIMAL,
            plan.runs,
            plan.grids,
            plan.latency,
            plan.cores,
            plan.latency,
            time.perf_counter() - start,
            f"{len(plan.runs)} regions; the fastest partition fits the wafer ({plan.cores:,} cores)",
        )
    # the budget binds: price the cores (Lagrangian relaxation)
    bound = float(plan.latency)  # at lam = 0 the relaxation is the unconstrained optimum
    best: _Plan | None = None
    best_lam, best_dual = 0.0, plan
    # above this price one core costs more than every kernel's slowest latency together
    price_cap = _price_cap(sp)
    lo, hi = 0.0, min(1.0, price_cap)
    while True:  # a price high enough that the plan fits
        if deadline is not None and deadline.stopped:
            break
        late = deadline is not None and deadline.expired()
        fit = _dp(sp, hi, windows)
        if fit is None:
            break
        if fit.value - hi * sp.total_cores > bound:
            bound, best_lam, best_dual = fit.value - hi * sp.total_cores, hi, fit
        if fit.cores <= sp.total_cores:
            best = fit
            break
        if hi >= price_cap:  # the price outweighs every latency: this plan has the fewest cores of all
            return SharingResult(
                Status.INFEASIBLE,
                (),
                (),
                None,
                None,
                None,
                time.perf_counter() - start,
                f"no partition into regions fits the wafer: the fewest cores any takes are {fit.cores:,}, "
                f"the wafer has {sp.total_cores:,}",
            )
        # out of time before any price made a plan fit: the price rises LATE_STEP-fold a program, a few
        # programs more, not to the cap at once, whose plan takes the fewest cores of all and is as slow
        # (Llama-3.1-70B's wafers on wse3: 425,600 cycles where 285,640 fit); the cap's plan fits if any
        # does, so a plan on timeout is still found (a signal stops at once)
        lo, hi = hi, min(hi * (LATE_STEP if late else 4), price_cap)
    for _ in range(LAMBDA_STEPS):
        if best is None or (deadline is not None and deadline.expired()):
            break
        mid = (lo + hi) / 2
        cand = _dp(sp, mid, windows)
        if cand is None:
            break
        if cand.value - mid * sp.total_cores > bound:
            bound, best_lam, best_dual = cand.value - mid * sp.total_cores, mid, cand
        if cand.cores <= sp.total_cores:
            hi = mid
            if cand.latency < best.latency:
                best = cand
        else:
            lo = mid
    if best is not None and best.latency > np.ceil(bound - 1e-6) and not (deadline is not None and deadline.expired()):
        whole = deadline or Deadline.after(10)
        units = columns.small_units(sp, [(0, sp.n_kernels)], windows)
        # a quick knapsack at once; else the priced closing first (fast where it closes), the knapsack
        # where it does not in its share
        share = whole.share(columns.PRICED_SHARE) if units is not None else whole
        closed = (
            None
            if units is not None and units.quick
            else _close_gap(sp, best_lam, best_dual, best, share, int(np.ceil(bound - 1e-6)), windows)
        )
        if units is not None and (closed is None or closed.status is not Status.OPTIMAL):
            closed = _by_columns(sp, units, whole) or closed
        if closed is not None:
            return replace(closed, wall_s=time.perf_counter() - start, price=best_lam)
    wall = time.perf_counter() - start
    if best is None:  # no price made a plan fit, or the time ran out first: nothing is proven
        return SharingResult(
            Status.UNKNOWN,
            (),
            (),
            None,
            None,
            int(np.ceil(bound - 1e-6)),
            wall,
            "no partition into regions that fits the wafer's cores was found",
        )
    proven = int(np.ceil(bound - 1e-6 * max(1.0, bound)))
    status = Status.OPTIMAL if best.latency <= proven else Status.FEASIBLE
    return SharingResult(
        status,
        best.runs,
        best.grids,
        best.latency,
        best.cores,
        min(proven, best.latency),
        wall,
        f"{len(best.runs)} regions; the core budget binds (Lagrangian price of a core bisected)",
        best_lam,
    )


def slowest_region(sp: SharingProblem, runs: Sequence[tuple[int, int]], grids: Sequence[int]) -> int:
    """The cycles of a plan's slowest region (0 for no runs): a plain run's time ``sp.run_latency`` (its
    kernels' and its charges); a stacked column's (``sp.pieces[g] > 1``) regions are the pieces
    ``sp.split`` cuts it into by the single windows of ``sp`` (within its ``cap``, if any: each piece
    within it; a region inside the column never beginning where ``unbroken`` forbids, the column
    itself may), each taking its kernels' latencies, the charges included where ``run_latency``
    includes them for the whole run (``starts`` on the column's first piece, ``ends`` on its last)."""
    stacked = [g for g in grids if sp.pieces.size and sp.pieces[g] > 1]
    single = sp.single_windows(stacked) if stacked else None
    worst = 0
    for (i, j), g in zip(runs, grids, strict=True):
        if single is None or not (sp.pieces.size and sp.pieces[g] > 1):
            worst = max(worst, sp.run_latency(i, j, g))
            continue
        cut = None
        if sp.unbroken is not None:
            cut = ~np.asarray(sp.unbroken, dtype=bool)
            cut[i] = True  # the column may begin anywhere
        for a, b in sp.split(i, j, g, single[g], cut):
            took = int(sp.latency[a:b, g].sum())
            took += int(sp.starts[a, g]) if sp.starts is not None and a == i else 0
            took += int(sp.ends[b - 1, g]) if sp.ends is not None and b == j else 0
            worst = max(worst, took)
    return worst


@dataclass(frozen=True)
class _Paced:
    """A plan found by ``solve_paced``: its value ``max(path, pace x slowest)``, the search's result,
    the cap it was found under (None: uncapped) and its slowest region."""

    value: int
    found: SharingResult
    cap: int | None
    slowest: int

    def key(self) -> tuple[int, int]:
        return self.value, self.found.cores or 0


def solve_paced(sp: SharingProblem, pace: int, deadline: Deadline | None = None) -> SharingResult:
    """The runs and grids minimizing ``max(path, pace x slowest region)``: one token of each of ``pace``
    requests interleaved through the regions (see the module docstring: capped searches, bisected on
    the cap). ``pace == 1`` is ``solve`` itself (the path is never below a region). The result's
    ``latency`` is the plan's path, ``bound`` a proven lower bound on the paced value, ``cap`` the cap
    the plan was found under (its stacked columns are split by that cap's single windows) and
    ``slowest`` its slowest region; OPTIMAL when the value reaches the bound. A signal ends the search
    at once with the plan in hand; no capped search starts once the time is up (a plan is then still
    found uncapped, as ``solve`` finds one)."""
    if pace < 1:
        raise ValueError(f"pace {pace}: expected at least one request in flight")
    if pace == 1 or sp.n_kernels == 0:
        return solve(sp, deadline)
    start = time.perf_counter()
    free = unbudgeted(sp)
    if free.status is Status.INFEASIBLE or free.bound is None:
        return replace(free, wall_s=time.perf_counter() - start)
    floor = int(free.bound)  # L0: every plan's path, the budget aside
    c_min = least_slowest(sp)
    if c_min >= INF:  # a kernel fits no grid alone: no plan (``unbudgeted`` says so first)
        return SharingResult(Status.INFEASIBLE, (), (), None, None, None, time.perf_counter() - start, free.message)
    # the least cap any plan within the wafer's cores has (its fewest-core plan fits: one program a cap,
    # monotone in the cap), bisected before any full search: a cap no plan fits costs a full search
    # its whole price ladder to prove empty (Llama-3-8B, 44 requests: 4 s of a 1 s share)
    fewest = _dp(sp, _price_cap(sp))
    if fewest is None or fewest.cores > sp.total_cores:
        message = (
            free.message
            if fewest is None
            else f"no partition into regions fits the wafer: the fewest cores any takes are {fewest.cores:,}, "
            f"the wafer has {sp.total_cores:,}"
        )
        return SharingResult(Status.INFEASIBLE, (), (), None, None, None, time.perf_counter() - start, message)
    c_fit, none_below = _least_fitting_cap(
        sp, c_min, max(-(-floor // pace), c_min), slowest_region(sp, fewest.runs, fewest.grids), deadline
    )
    lower = max(floor, pace * c_min, pace * none_below)
    best: _Paced | None = None
    tried = 0

    def consider(found: SharingResult, cap: int | None) -> None:
        nonlocal best, lower
        if found.runs and found.latency is not None:
            problem = _capped(sp, cap)
            slowest = slowest_region(problem, found.runs, found.grids)
            plan = _Paced(max(found.latency, pace * slowest), found, problem.cap, slowest)
            if best is None or plan.key() < best.key():
                best = plan
        proven = math.inf if found.status is Status.INFEASIBLE else found.bound
        if proven is None:  # out of time before anything was proven: nothing for this cap
            return
        # uncapped: every plan's path; capped: within the cap the path, beyond it pace x a slower region
        held = min(proven, INF) if cap is None else min(pace * (cap + 1), max(proven, floor))
        lower = max(lower, int(held))

    def search(cap: int | None) -> SharingResult:
        nonlocal tried
        tried += 1
        found = solve(_capped(sp, cap), None if deadline is None else deadline.share(PACED_SHARE))
        consider(found, cap)
        return found

    def out_of_time() -> bool:
        return deadline is not None and deadline.expired()

    def limit() -> int:  # caps from here on cannot beat the plan in hand (pace x cap >= its value)
        return INF if best is None else -(-best.value // pace)

    if free.status is Status.OPTIMAL:  # the fastest partition fits the wafer: the uncapped plan in hand
        consider(free, None)
    c0 = max(-(-floor // pace), c_fit)
    # the caps to search lie in (lo, hi): at most lo, the value is the path, at least that of lo's plan
    # (or there is no plan); at least hi, pace x the cap, at least that of hi's plan. Below C_min no plan
    # at all; below ceil(L0 / pace) the path (at least L0) is the value and the least of those caps is
    # the largest, c0 - 1, whose plan may still beat c0's (within pace x c0, maybe above L0)
    lo, hi = (c0 - 1 if c0 - 1 < none_below else c0 - 2), INF
    cap = c0
    uncapped: SharingResult | None = free if free.status is Status.OPTIMAL else None
    while not out_of_time() and lower < (best.value if best is not None else INF) and cap < min(hi, limit()):
        found = search(cap)
        if found.runs and found.latency is not None:
            if found.latency <= pace * cap:
                hi = cap  # larger caps: at least pace x cap, no better than this plan
            else:
                lo = cap  # smaller caps: paths at least this one (as far as it is proven)
                if uncapped is None and not out_of_time():
                    # the path binds: the uncapped search's bound holds every plan's path (the caps
                    # up to its value need no search where it meets the plan in hand) and its plan
                    # may be the best
                    uncapped = search(None)
            break
        lo = cap  # no plan within the cap (or none found in time): a larger one
        if uncapped is None and not out_of_time():
            uncapped = search(None)  # the growth's end: the uncapped plan's slowest region
            if uncapped.status is Status.INFEASIBLE or not uncapped.runs:
                break
        top = best.slowest if best is not None else INF
        cap = max(cap + 1, math.ceil(cap * CAP_GROWTH))
        if cap >= top:  # the uncapped plan is within it: nothing more to grow to
            break
    while best is not None and lower < best.value and lo + 1 < min(hi, limit()) and not out_of_time():
        mid = (lo + min(hi, limit())) // 2
        found = search(mid)
        if found.runs and found.latency is not None and found.latency <= pace * mid:
            hi = mid
        else:
            lo = mid
    if best is None and uncapped is None and not (deadline is not None and deadline.stopped):
        uncapped = search(None)  # out of time before any plan: the uncapped one, as ``solve`` finds it
    wall = time.perf_counter() - start
    if best is None:
        last = uncapped if uncapped is not None else free
        status = Status.INFEASIBLE if last.status is Status.INFEASIBLE else Status.UNKNOWN
        return SharingResult(status, (), (), None, None, None if status is Status.INFEASIBLE else lower, wall, last.message)
    plan = best.found
    status = Status.OPTIMAL if best.value <= lower else Status.FEASIBLE
    under = "uncapped" if best.cap is None else f"regions capped at {best.cap:,} cycles"
    return SharingResult(
        status,
        plan.runs,
        plan.grids,
        plan.latency,
        plan.cores,
        lower,
        wall,
        f"{len(plan.runs)} regions paced for {pace} requests in flight: max(path {plan.latency:,}, {pace} x slowest "
        f"region {best.slowest:,}) = {best.value:,} cycles a token, bound {lower:,} ({under}; {tried} searches)",
        plan.price,
        best.cap,
        best.slowest,
    )


def least_slowest(sp: SharingProblem) -> int:
    """The least slowest region any plan has (INF: none): the largest of the kernels' least latencies
    on a grid where each fits a region alone (a region holds its kernels' sum, at least each one's)."""
    single = sp.single_windows()
    alone = single[:, 1:] <= np.arange(sp.n_kernels)[None, :]  # [G, n]: kernel k fits a region of its own on g
    return int(np.where(alone, sp.latency.T, INF).min(axis=0).max(initial=0))


def none_within(sp: SharingProblem, cap: int) -> bool:
    """Whether no plan whose every region takes at most ``cap`` cycles fits the problem's cores (its
    fewest-core plan does not: one program, as each probe of ``_least_fitting_cap``). Every plan's
    slowest region then takes more than ``cap``: with N requests in flight a token takes more than
    N x ``cap`` (``solve_paced``'s value), proven without the search."""
    return cap < least_slowest(sp) or not _fits_within(sp, cap, _price_cap(sp))


def _fits_within(sp: SharingProblem, cap: int, price: float) -> bool:
    """Whether the fewest-core plan whose every region takes at most ``cap`` cycles fits the problem's
    cores (``price``: ``_price_cap``'s, at which the program's plan is the one of fewest cores)."""
    plan = _dp(_capped(sp, cap), price)
    return plan is not None and plan.cores <= sp.total_cores


def fitting_cap(sp: SharingProblem, start: int, deadline: Deadline | None = None) -> int | None:
    """A cap at least ``start`` within which some plan fits the problem's cores, near the least such
    (``_least_fitting_cap``); None when no plan fits at all."""
    fewest = _dp(sp, _price_cap(sp))
    if fewest is None or fewest.cores > sp.total_cores:
        return None
    top = slowest_region(sp, fewest.runs, fewest.grids)
    return _least_fitting_cap(sp, least_slowest(sp), max(start, least_slowest(sp)), max(top, start), deadline)[0]


def _price_cap(sp: SharingProblem) -> float:
    """A price of a core above which the program's plan is the one of fewest cores (one core costs more
    than every kernel's slowest latency together)."""
    return float(np.where(sp.latency < INF, sp.latency, 0).max(axis=1).sum()) + 1.0


def _least_fitting_cap(sp: SharingProblem, lo: int, start: int, hi: int, deadline: Deadline | None) -> tuple[int, int]:
    """A cap whose fewest-core plan fits the wafer's cores, at least ``start`` and as near the least
    such cap as needed: ``start`` itself when its plan fits (the search starts there anyway), else the
    least in (start, hi] (``hi``'s fits) within ``FIT_TOLERANCE``, by bisection, one program a probe
    (Llama-3-8B's: 0.4 s; whether some plan within a cap fits is monotone in the cap); and the least
    cap proven to hold a plan at all (every cap below it holds none; ``lo``: none below it)."""
    price = _price_cap(sp)

    def fits(cap: int) -> bool:
        return _fits_within(sp, cap, price)

    if start >= hi or fits(start):
        return min(start, hi), lo
    lo = start + 1  # (no plan within start)
    while hi - lo > FIT_TOLERANCE * hi and not (deadline is not None and deadline.expired()):
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi, lo


def _capped(sp: SharingProblem, cap: int | None) -> SharingProblem:
    """``sp`` with its regions within ``cap`` cycles (None: as it is; a cap of its own kept if lower)."""
    if cap is None:
        return sp
    return replace(sp, cap=cap if sp.cap is None else min(cap, sp.cap))
