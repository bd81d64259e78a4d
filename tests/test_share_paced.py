"""Regions paced for N requests in flight (problem/sharing.py ``SharingProblem.cap``, solvers/share.py
``solve_paced``): the capped windows equal testing every start (stacked columns and unbroken
boundaries included) and propagate through the problem's copies; ``solve_paced`` finds the least
``max(path, N x slowest region)`` of brute force over every partition, grid and (for stacked
columns) division into regions, its bound never above that optimum nor its value; pace 1 is
``solve``; a hand-computed case; the deadline and a signal are obeyed."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from wsealloc.budget import Deadline, StopHook
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers import share
from wsealloc.solvers.base import Status
from wsealloc.solvers.share import SharingResult, slowest_region, solve, solve_paced

USABLE = 60


def _names(n: int) -> tuple[str, ...]:
    return tuple(f"k{i}" for i in range(n))


def _random_windows_problem(rng: np.random.Generator, stacked: bool) -> SharingProblem:
    """Up to 40 kernels on 1-5 grids, some kernels that cannot be laid on a grid, a cap from below
    zero to above most runs' sums; stacked: columns of 1-3 regions, some boundaries unbroken."""
    n, g_count = int(rng.integers(1, 41)), int(rng.integers(1, 6))
    lat = np.where(rng.random((n, g_count)) < 0.1, INF, rng.integers(0, 100, (n, g_count))).astype(np.int64)
    resident = rng.integers(0, 50, (n, g_count)).astype(np.float64)
    buffers = rng.integers(0, 50, (n, g_count)).astype(np.float64)
    pieces = rng.integers(1, 4, g_count).astype(np.int64) if stacked else np.zeros(0, dtype=np.int64)
    unbroken = rng.random(n + 1) < 0.2 if stacked and rng.random() < 0.5 else None
    return SharingProblem(
        _names(n),
        np.ones((g_count, 2), dtype=np.int64),
        lat,
        resident,
        buffers,
        int(rng.integers(10, 400)),
        10,
        pieces,
        1,
        unbroken=unbroken,
        cap=int(rng.integers(-5, 600)),
    )


@pytest.mark.parametrize("stacked", [False, True])
def test_capped_windows_equal_testing_every_start(stacked: bool) -> None:
    """The cap's binary search on the prefix sums (combined with the SRAM's, then composed into
    stacked columns) admits exactly the starts that testing every run's own sum does."""
    for seed in range(200):
        sp = _random_windows_problem(np.random.default_rng(seed + (1000 if stacked else 0)), stacked)
        assert np.array_equal(sp.windows(), sp.windows_by_testing()), seed


def _admitted(sp: SharingProblem) -> set[tuple[int, int, int]]:
    """Every run (i, j, g) the windows admit."""
    first = sp.windows()
    return {(i, j, g) for g in range(first.shape[0]) for j in range(1, sp.n_kernels + 1) for i in range(int(first[g, j]), j)}


def test_the_cap_bounds_each_run_and_propagates() -> None:
    """A capped run's kernels sum to at most the cap, charges aside (a charged problem admits the
    same runs); a larger cap admits more; the cap survives ``segment``, ``reversed`` (a run of the
    reversed problem is a run reversed) and ``single_windows``."""
    for seed in range(60):
        rng = np.random.default_rng(seed)
        sp = replace(_random_windows_problem(rng, stacked=False), cap=int(rng.integers(0, 300)))
        assert sp.cap is not None
        runs = _admitted(sp)
        assert all(int(sp.latency[i:j, g].sum()) <= sp.cap for i, j, g in runs)
        assert runs <= _admitted(replace(sp, cap=sp.cap + 50)) <= _admitted(replace(sp, cap=None))
        charged = replace(sp, ends=rng.integers(0, 30, sp.latency.shape), starts=rng.integers(0, 30, sp.latency.shape))
        assert np.array_equal(charged.windows(), sp.windows())
        n = sp.n_kernels
        back = sp.reversed()
        assert back.cap == sp.cap and _admitted(back) == {(n - j, n - i, g) for i, j, g in runs}
        a, b = sorted(int(x) for x in rng.integers(0, n + 1, 2))
        part = sp.segment(a, b)
        assert part.cap == sp.cap
        assert _admitted(part) == {(i - a, j - a, g) for i, j, g in runs if a <= i and j <= b}
        stacked = replace(sp, pieces=np.asarray(rng.integers(1, 4, sp.shapes.shape[0]), dtype=np.int64), wafer_rows=1)
        assert np.array_equal(stacked.single_windows(), sp.windows())


# --- brute force -------------------------------------------------------------------------------


def _random_problem(rng: np.random.Generator, stacked: bool) -> SharingProblem:
    """2-7 kernels (2-5 stacked) on 2-3 grids (square; stacked: columns of a 4-row wafer cut into
    1-3 regions), random latencies, SRAM and a core budget."""
    n = int(rng.integers(2, 6 if stacked else 8))
    g_count = int(rng.integers(2, 4))
    if stacked:
        pieces = rng.integers(1, 4, g_count).astype(np.int64)
        shapes = np.array([[4 // int(k), int(w)] for k, w in zip(pieces, rng.integers(1, 4, g_count), strict=True)])
        cores = 4 * shapes[:, 1]
    else:
        pieces = np.zeros(0, dtype=np.int64)
        shapes = np.array([[int(s), int(s)] for s in rng.integers(1, 5, g_count)])
        cores = shapes[:, 0] * shapes[:, 1]
    lat = rng.integers(5, 60, size=(n, g_count)).astype(np.int64)
    lat[rng.random((n, g_count)) < 0.05] = INF
    resident = rng.integers(1, 30, size=(n, g_count)).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, g_count)).astype(np.float64)
    total = int(rng.integers(int(cores.min()), int(cores.sum()) * 2 + 2))
    return SharingProblem(_names(n), shapes, lat, resident, buffers, USABLE, total, pieces, 4)


def _fits(sp: SharingProblem, a: int, b: int, g: int) -> bool:
    """One region [a, b) on grid g: every kernel laid there, weights and caches summed, one buffer."""
    if (sp.latency[a:b, g] >= INF).any():
        return False
    return bool(sp.resident[a:b, g].sum() + sp.buffers[a:b, g].max() <= sp.usable_sram)


def _column(sp: SharingProblem, a: int, b: int, g: int) -> int | None:
    """The run [a, b) on grid g: None if it cannot be laid there; else its least slowest region (a
    stacked column: the least, over every division into at most ``pieces[g]`` regions that fit, of
    the slowest; no region inside it beginning where ``unbroken`` forbids)."""
    k = int(sp.pieces[g]) if sp.pieces.size else 1
    best = None
    for count in range(1, max(1, k) + 1):
        for inner in itertools.combinations(range(a + 1, b), count - 1):
            if sp.unbroken is not None and any(sp.unbroken[p] for p in inner):
                continue
            bounds = (a, *inner, b)
            pieces = list(itertools.pairwise(bounds))
            if all(_fits(sp, x, y, g) for x, y in pieces):
                slowest = max(int(sp.latency[x:y, g].sum()) for x, y in pieces)
                best = slowest if best is None else min(best, slowest)
    return best


def _brute(sp: SharingProblem, pace: int) -> int | None:
    """Every partition into runs, every grid per run, every division of a stacked column: the least
    ``max(path, pace x slowest region)`` within the core budget (None: no plan)."""
    n, g_count = sp.latency.shape
    cores = sp.cores().astype(np.int64)
    column = {(a, b, g): _column(sp, a, b, g) for a in range(n) for b in range(a + 1, n + 1) for g in range(g_count)}

    @cache
    def plans(a: int) -> list[tuple[int, int, int]]:  # (path, slowest, cores) of every plan of [a, n)
        if a == n:
            return [(0, 0, 0)]
        out = []
        for b in range(a + 1, n + 1):
            for g in range(g_count):
                slow = column[a, b, g]
                if slow is None:
                    continue
                took = int(sp.latency[a:b, g].sum())
                for path, worst, used in plans(b):
                    if used + cores[g] <= sp.total_cores:
                        out.append((path + took, max(worst, slow), used + int(cores[g])))
        return out

    values = [max(path, pace * worst) for path, worst, _ in plans(0)]
    return min(values) if values else None


def _check_plan(sp: SharingProblem, found: SharingResult, pace: int) -> int:
    """The plan is a partition within the budget whose every run its cap admits (each region of a
    stacked column within the cap, as ``split`` cuts it); returns its value."""
    assert found.latency is not None and found.cores is not None and found.slowest is not None
    assert found.runs[0][0] == 0 and found.runs[-1][1] == sp.n_kernels
    assert all(x[1] == y[0] for x, y in itertools.pairwise(found.runs))
    cores = sp.cores()
    assert found.cores == sum(int(cores[g]) for g in found.grids) <= sp.total_cores
    assert found.latency == sum(int(sp.latency[i:j, g].sum()) for (i, j), g in zip(found.runs, found.grids, strict=True))
    capped = replace(sp, cap=found.cap)
    first = capped.windows()
    assert all(first[g, j] <= i for (i, j), g in zip(found.runs, found.grids, strict=True))
    assert slowest_region(capped, found.runs, found.grids) == found.slowest
    single = capped.single_windows()
    worst = 0
    for (i, j), g in zip(found.runs, found.grids, strict=True):
        pieces = capped.split(i, j, g, single[g]) if sp.pieces.size and sp.pieces[g] > 1 else [(i, j)]
        assert len(pieces) <= max(1, int(sp.pieces[g]) if sp.pieces.size else 1)
        for a, b in pieces:
            took = int(sp.latency[a:b, g].sum())
            assert _fits(sp, a, b, g) and (found.cap is None or took <= found.cap)
            worst = max(worst, took)
    assert worst == found.slowest
    return max(found.latency, pace * found.slowest)


@pytest.mark.parametrize("stacked", [False, True])
def test_the_partition_dp_equals_every_start_tried(stacked: bool) -> None:
    """``share._dp`` (monotone deques per grid) against trying every start of every run: at integer core
    prices the values are exact, so each prefix's best value and its fewest cores on ties must match."""
    rng = np.random.default_rng(11 + stacked)
    for _ in range(300):
        sp = _random_windows_problem(rng, stacked)
        n, g_count = sp.latency.shape
        first, cores = sp.windows(), sp.cores().astype(np.int64)
        for lam in (0, 1, int(rng.integers(2, 9))):
            best, fewest = [0.0] + [float("inf")] * n, [0] * (n + 1)
            for j in range(1, n + 1):
                for g in range(g_count):
                    for i in range(int(first[g, j]), j):
                        if best[i] < float("inf"):
                            key = (best[i] + float(sp.latency[i:j, g].sum()) + lam * int(cores[g]), fewest[i] + int(cores[g]))
                            if key < (best[j], fewest[j]) or best[j] == float("inf"):
                                best[j], fewest[j] = key
            plan = share._dp(sp, float(lam))
            if best[n] == float("inf"):
                assert plan is None
                continue
            assert plan is not None and list(plan.prefix_values) == best and plan.cores == fewest[n]
            assert plan.value == plan.latency + lam * plan.cores


@pytest.mark.parametrize("stacked", [False, True])
def test_paced_search_equals_brute_force(stacked: bool) -> None:
    """With time enough every capped search is exact, and so is the bisection over the caps: the
    optimum of brute force, proven (status OPTIMAL, the bound the value); the bound never above it."""
    for seed in range(60 if stacked else 80):
        rng = np.random.default_rng(seed + (5000 if stacked else 0))
        sp = _random_problem(rng, stacked)
        pace = int(rng.integers(2, 9))
        best = _brute(sp, pace)
        found = solve_paced(sp, pace, Deadline.after(60.0))
        if best is None:
            assert found.status is Status.INFEASIBLE and not found.runs, seed
            continue
        value = _check_plan(sp, found, pace)
        assert found.bound is not None and found.bound <= best <= value, seed
        assert found.status is Status.OPTIMAL and value == best == found.bound, (seed, found.message)


@pytest.mark.parametrize("stacked", [False, True])
def test_none_within_a_cap_is_the_least_slowest_region_of_brute_force(stacked: bool) -> None:
    """``share.none_within(sp, cap)``: no plan within the budget has every region within ``cap``,
    exactly where the least slowest region over every plan (brute force, its slowest region paced by
    a pace no path reaches) is above ``cap``; with no plan at all it holds at every cap."""
    rng = np.random.default_rng(23 + stacked)
    big = 10**6  # (paths are below 7 x 60 cycles)
    for _ in range(120):
        sp = _random_problem(rng, stacked)
        value = _brute(sp, big)
        least = None if value is None else value // big
        for cap in (0, 5, 30, 100, 400) if least is None else (least - 1, least, least + 7):
            assert share.none_within(sp, cap) == (least is None or cap < least), (least, cap)


def test_pace_one_is_the_plain_search() -> None:
    """One request in flight: the path is never below a region, so the plain search is the answer."""
    for seed in range(20):
        sp = _random_problem(np.random.default_rng(9000 + seed), stacked=bool(seed % 2))
        paced, plain = solve_paced(sp, 1), solve(sp)
        assert replace(paced, wall_s=0.0) == replace(plain, wall_s=0.0)
    with pytest.raises(ValueError, match="pace 0"):
        solve_paced(sp, 0)


def test_four_equal_kernels_paced_by_four() -> None:
    """By hand: four kernels of 10 cycles, SRAM and cores for four regions. One region: path 40,
    slowest 40, 4 x 40 = 160 a token; four regions: path 40, slowest 10, value 40 (the least: the
    path itself). Unpaced, the fewest cores (one region) ties on the path and is the plain plan."""
    n = 4
    sp = SharingProblem(
        _names(n),
        np.array([[1, 1]]),
        np.full((n, 1), 10, dtype=np.int64),
        np.ones((n, 1)),
        np.zeros((n, 1)),
        100,
        4,
    )
    plain = solve(sp)
    assert plain.latency == 40 and plain.runs == ((0, 4),)
    assert slowest_region(sp, plain.runs, plain.grids) == 40  # 4 x 40 = 160 paced
    found = solve_paced(sp, 4)
    assert found.status is Status.OPTIMAL and found.latency == 40 and found.slowest == 10 and found.bound == 40
    assert found.runs == ((0, 1), (1, 2), (2, 3), (3, 4)) and found.cap == 10
    assert "4 requests" in found.message and "10 cycles" in found.message


def test_the_cap_just_below_the_paths_share() -> None:
    """By hand: kernels of 1, 4 and 4 cycles, pace 2. The path is at least L0 = 9, so the search starts
    at the cap ceil(9 / 2) = 5, whose plan (the fewest regions: [1, 4], [4]) takes 2 x 5 = 10 a token;
    the cap 4 below it gives three regions, max(9, 2 x 4) = 9: caps under L0 / pace still pay their
    path, and the largest of them must be searched too."""
    sp = SharingProblem(
        _names(3), np.array([[1, 1]]), np.array([[1], [4], [4]], dtype=np.int64), np.ones((3, 1)), np.zeros((3, 1)), 100, 3
    )
    capped = solve(replace(sp, cap=5))
    assert capped.runs == ((0, 2), (2, 3)) and slowest_region(sp, capped.runs, capped.grids) == 5
    found = solve_paced(sp, 2)
    assert found.status is Status.OPTIMAL and found.runs == ((0, 1), (1, 2), (2, 3))
    assert found.latency == 9 and found.slowest == 4 and found.bound == 9


def test_the_bound_never_exceeds_the_value_out_of_time() -> None:
    """However little time the capped searches get (a few, then none), the bound stays at most the
    value of the plan returned and the plan is within the budget (random problems, brute force)."""
    for seed in range(30):
        rng = np.random.default_rng(7000 + seed)
        sp = _random_problem(rng, stacked=bool(seed % 2))
        pace = int(rng.integers(2, 9))
        best = _brute(sp, pace)
        found = solve_paced(sp, pace, Deadline.after(float(rng.choice([0.0, 0.002, 0.02]))))
        if best is None:
            assert not found.runs
            continue
        if found.runs:
            value = _check_plan(sp, found, pace)
            assert best <= value
            assert found.bound is None or found.bound <= best
            assert (found.status is Status.OPTIMAL) == (found.bound is not None and value <= found.bound)


def test_expired_and_stopped_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of time: no capped search runs, the plan is the uncapped one (``solve`` finds one however
    late); a signal: no search runs at all after the fastest partition."""
    caps: list[int | None] = []
    real = share.solve

    def recorded(sp: SharingProblem, deadline: Deadline | None = None) -> SharingResult:
        caps.append(sp.cap)
        return real(sp, deadline)

    monkeypatch.setattr(share, "solve", recorded)
    for seed in range(20):
        rng = np.random.default_rng(8000 + seed)
        sp = _random_problem(rng, stacked=bool(seed % 2))
        best = _brute(sp, 4)
        caps.clear()
        late = solve_paced(sp, 4, Deadline(time.perf_counter() - 1.0))
        assert all(cap is None for cap in caps) and len(caps) <= 1
        if best is not None:
            assert late.runs and late.cap is None and _check_plan(sp, late, 4) >= best
        stop = StopHook()
        stop.stop()
        caps.clear()
        stopped = solve_paced(sp, 4, Deadline(time.perf_counter() + 60.0, stop))
        assert caps == []
        assert not stopped.runs or _check_plan(sp, stopped, 4) >= (best or 0)
