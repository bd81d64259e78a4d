"""The sharing search over several wafers (``solvers.share_wafers``) against brute force: every cut
into at most W wafers, every partition of each wafer's kernels into runs, every grid per run. Each way
it goes (the ``method`` fixture): the knapsack over units of cores (``solvers.columns``) at once, the
knapsack after a priced search that had no time, and the priced bounds per segment with Pareto labels
alone."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest

from wsealloc.budget import Deadline
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers import columns, share_wafers
from wsealloc.solvers.base import Status
from wsealloc.solvers.share_wafers import plan_time, solve

METHODS = ("columns", "after-priced", "priced")


@pytest.fixture(params=METHODS)
def method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each exactness test once per way the search goes: the knapsack at once (a quick pace), the
    knapsack stopped for its pace, then a priced search that had no time, then the knapsack resumed
    from the programs it kept, and the priced search alone (no knapsack)."""
    if request.param == "priced":
        monkeypatch.setattr(columns, "MAX_WORK", 0)
    if request.param == "after-priced":  # too slow a pace for the knapsack first, no time for the priced search
        monkeypatch.setattr(share_wafers, "QUICK_SHARE", 1e-12)
        monkeypatch.setattr(columns, "PRICED_SHARE", 1e-12)
    return "priced" if request.param == "priced" else "columns"


def _partitions(sp: SharingProblem, a: int, b: int) -> Iterator[tuple[int, int]]:
    """(latency, cores) of every partition of kernels [a, b) into runs, each run on every grid whose
    SRAM holds it (the core budget aside)."""
    cores = sp.cores()
    for cuts in itertools.product((False, True), repeat=b - a - 1):
        bounds = [a] + [a + i + 1 for i, cut in enumerate(cuts) if cut] + [b]
        runs = list(zip(bounds[:-1], bounds[1:], strict=True))
        for grids in itertools.product(range(sp.shapes.shape[0]), repeat=len(runs)):
            lat, used = 0, 0
            for (i, j), g in zip(runs, grids, strict=True):
                need = sp.resident[i:j, g].sum() + sp.buffers[i:j, g].max()
                if (sp.latency[i:j, g] >= INF).any() or need > sp.usable_sram:
                    break
                lat += int(sp.latency[i:j, g].sum())
                used += int(cores[g])
            else:
                yield lat, used


def _one_wafer(sp: SharingProblem, a: int, b: int) -> int | None:
    """The least latency of kernels [a, b) on one wafer (every partition, every grid)."""
    return min((lat for lat, used in _partitions(sp, a, b) if used <= sp.total_cores), default=None)


def _brute(sp: SharingProblem, links: np.ndarray, wafers: int) -> int | None:
    n = sp.n_kernels
    best = None
    for count in range(1, wafers + 1):
        for inner in itertools.combinations(range(1, n), count - 1):
            cuts = (0, *inner, n)
            parts = [_one_wafer(sp, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
            if any(p is None for p in parts):
                continue
            total = sum(p for p in parts if p is not None) + int(sum(links[c] for c in inner))
            best = total if best is None or total < best else best
    return best


@pytest.mark.parametrize("seed", range(16))
def test_wafers_sharing_equals_brute_force(seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    n, g_count, wafers = int(rng.integers(2, 7)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 5, size=g_count)}))
    lat = rng.integers(5, 60, size=(n, len(shapes))).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, len(shapes))).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, len(shapes))).astype(np.float64)
    total = int(rng.integers(int((shapes[:, 0] ** 2).min()), int((shapes[:, 0] ** 2).sum()) + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, resident, buffers, 60, total)
    links = np.concatenate(([0], rng.integers(1, 25, size=n - 1), [0])).astype(np.int64)
    best = _brute(sp, links, wafers)
    found = solve(sp, links, wafers, Deadline.after(30))
    assert ("knapsack" in found.message) == (method == "columns" and best is not None)
    if best is None:
        assert found.status is Status.INFEASIBLE
        return
    assert found.status is Status.OPTIMAL, found.message
    assert found.latency == best == found.bound
    assert len(found.cuts) - 1 <= wafers
    assert plan_time(sp, links, found.cuts, found.runs, found.grids) == best
    cores = sp.cores()
    for w in range(len(found.cuts) - 1):  # every wafer's runs within its budget, none crossing a cut
        runs, grids = found.wafer_runs(w)
        assert sum(int(cores[g]) for g in grids) <= total
        assert runs[0][0] == 0 and runs[-1][1] == found.cuts[w + 1] - found.cuts[w]


@pytest.mark.parametrize("seed", range(6))
def test_identical_layers_share_their_bounds_and_stay_exact(seed: int, method: str) -> None:
    """A head, three identical two-kernel layers and a tail (the shape of a decoder): the bounds per
    segment are computed once per phase of the repeating layers, and the plan is still the least."""
    rng = np.random.default_rng(100 + seed)
    g_count = int(rng.integers(1, 3))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 4, size=g_count)}))
    g_count = len(shapes)
    kinds = [rng.integers(5, 60, size=g_count) for _ in range(4)]  # head, layer kernel a, b, tail
    order = [0, 1, 2, 1, 2, 1, 2, 3]
    lat = np.array([kinds[k] for k in order], dtype=np.int64)
    res_kinds = [rng.integers(1, 25, size=g_count).astype(np.float64) for _ in range(4)]
    resident = np.array([res_kinds[k] for k in order])
    buffers = np.zeros_like(resident)
    total = int(rng.integers(int((shapes[:, 0] ** 2).max()), int((shapes[:, 0] ** 2).sum()) * 2 + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(len(order))), shapes, lat, resident, buffers, 50, total)
    links = np.concatenate(([0], rng.integers(1, 25, size=len(order) - 1), [0])).astype(np.int64)
    from wsealloc.solvers.share_wafers import _zone

    zone = _zone(sp)
    assert zone.period == 2 and zone.start <= 1 and zone.end >= 7  # the layers repeat
    best = _brute(sp, links, 3)
    found = solve(sp, links, 3, Deadline.after(30))
    if best is None:
        assert found.status is Status.INFEASIBLE
        return
    assert found.status is Status.OPTIMAL and found.latency == best == found.bound


@pytest.mark.parametrize("seed", range(24))
def test_a_fitting_cut_is_found_whenever_one_exists(seed: int) -> None:
    """``fitting_cuts`` (the fallback when the exact search runs out of time): every wafer of its cut
    fits its kernels, near the wished cut, and it finds one whenever brute force does."""
    from wsealloc.solvers.share_wafers import fitting_cuts

    rng = np.random.default_rng(200 + seed)
    n, g_count, wafers = int(rng.integers(2, 8)), int(rng.integers(1, 3)), int(rng.integers(1, 4))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 4, size=g_count)}))
    lat = rng.integers(5, 60, size=(n, len(shapes))).astype(np.int64)
    resident = rng.integers(1, 40, size=(n, len(shapes))).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, len(shapes))).astype(np.float64)
    total = int(rng.integers(int((shapes[:, 0] ** 2).min()), int((shapes[:, 0] ** 2).sum()) + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, resident, buffers, 60, total)
    wish = tuple(sorted({0, n, *(int(x) for x in rng.integers(1, n, size=wafers - 1))}))
    exists = any(
        all(_one_wafer(sp, a, b) is not None for a, b in zip((0, *inner), (*inner, n), strict=True))
        for count in range(1, wafers + 1)
        for inner in itertools.combinations(range(1, n), count - 1)
    )
    cuts = fitting_cuts(sp, wafers, wish)
    assert (cuts is not None) == exists
    if cuts is not None:
        assert cuts[0] == 0 and cuts[-1] == n and len(cuts) - 1 <= wafers
        assert all(_one_wafer(sp, a, b) is not None for a, b in zip(cuts[:-1], cuts[1:], strict=True))


@pytest.mark.parametrize("seed", range(16))
def test_a_fitting_cut_over_repeating_layers_is_the_cut_of_every_start(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the repeating stretch a segment reaches as far as the one from its phase's first kernel
    (one program per phase): the same cuts as a program from every start, for every wish."""
    from wsealloc.solvers.share_wafers import _Zone, _zone, fitting_cuts

    rng = np.random.default_rng(500 + seed)
    period, repeats, g_count = int(rng.integers(1, 4)), int(rng.integers(10, 21)), int(rng.integers(1, 3))
    head, tail = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 4, size=g_count)}))

    def rows(k: int, high: int) -> np.ndarray:
        return rng.integers(1, high, size=(k, len(shapes)))

    layer = [rows(period, 60), rows(period, 25), rows(period, 12)]
    lat, resident, buffers = (
        np.concatenate([rows(head, high), np.tile(part, (repeats, 1)), rows(tail, high)])
        for part, high in zip(layer, (60, 25, 12), strict=True)
    )
    n = lat.shape[0]
    total = int(rng.integers(int((shapes[:, 0] ** 2).max()), 2 * int((shapes[:, 0] ** 2).sum()) + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat.astype(np.int64), resident.astype(np.float64),
                        buffers.astype(np.float64), 60, total)  # fmt: skip
    assert _zone(sp).period > 0  # (the repeating stretch is found)
    wafers = int(rng.integers(4, 13))
    wishes = [tuple(sorted({0, n, *(int(x) for x in rng.integers(1, n, size=wafers - 1))})) for _ in range(3)]
    with_zone = [fitting_cuts(sp, wafers, w) for w in wishes]
    monkeypatch.setattr(share_wafers, "_zone", lambda problem: _Zone(problem.n_kernels, problem.n_kernels, 0))
    assert with_zone == [fitting_cuts(sp, wafers, w) for w in wishes]


@pytest.mark.parametrize("seed", range(12))
def test_a_column_program_is_the_least_time_at_every_budget(seed: int) -> None:
    """``columns.program``: the least time of every prefix of the kernels within every budget of
    units, equal to brute force; grids of whole columns (rows x w cores: a unit of ``rows``) and a
    budget that is not a whole number of units (the wafer's cores floored to units)."""
    rng = np.random.default_rng(300 + seed)
    n, rows = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    widths = sorted({int(w) for w in rng.integers(1, 5, size=int(rng.integers(1, 4)))})
    shapes = np.array([(rows, w) for w in widths])
    lat = rng.integers(5, 60, size=(n, len(shapes))).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, len(shapes))).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, len(shapes))).astype(np.float64)
    total = rows * int(rng.integers(1, 3 * max(widths) + 1)) + int(rng.integers(0, rows))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, resident, buffers, 60, total)
    units = columns.column_units(sp)
    assert units is not None and units.unit % rows == 0 and units.budget == total // units.unit
    found = columns.program(sp, units, Deadline.after(30))
    assert found is not None
    for k in range(units.budget + 1):
        smaller = SharingProblem(sp.names, shapes, lat, resident, buffers, 60, k * units.unit)
        for length in range(1, n + 1):
            best = _one_wafer(smaller, 0, length)
            value = int(found.least[length, k])
            assert (value if value < columns.NONE else None) == best, (k, length)
    if found.least[n, units.budget] < columns.NONE:  # the runs found again make up the value
        runs = found.runs(n)
        assert runs[0][0] == 0 and runs[-1][1] == n
        assert sum(int(lat[i:j, g].sum()) for i, j, g in runs) == int(found.least[n, units.budget])
        assert sum(int(units.units[g]) for _, _, g in runs) <= units.budget


def test_grids_without_a_large_common_unit_take_the_priced_search() -> None:
    """Grids whose cores share no unit that makes a wafer at most ``MAX_UNITS`` units: no knapsack."""
    shapes = np.array([(1, 1), (2, 3)])
    sp = SharingProblem(("a", "b"), shapes, np.ones((2, 2), dtype=np.int64), np.ones((2, 2)), np.zeros((2, 2)), 60,
                        columns.MAX_UNITS + 1)  # fmt: skip
    assert columns.column_units(sp) is None
    sp = SharingProblem(("a", "b"), shapes * 2, np.ones((2, 2), dtype=np.int64), np.ones((2, 2)), np.zeros((2, 2)), 60,
                        4 * columns.MAX_UNITS)  # fmt: skip
    units = columns.column_units(sp)
    assert units is not None and units.unit == 4 and units.budget == columns.MAX_UNITS


def test_programs_too_large_to_keep_take_the_priced_search() -> None:
    """``small_units``: work and memory both bound the knapsack; a long sequence of kernels that each
    fit only alone (little work) but a table of (n + 1) x (K + 1) values beyond ``MAX_CELLS`` is refused."""
    n = columns.MAX_CELLS // (columns.MAX_UNITS + 1) + 1
    shapes = np.array([(1, 1)])
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, np.ones((n, 1), dtype=np.int64), np.ones((n, 1)),
                        np.zeros((n, 1)), 1, columns.MAX_UNITS)  # fmt: skip
    windows = np.concatenate(([0], np.arange(n)))[None, :]  # every run one kernel long
    assert columns.triples(windows, 0, n) == n
    assert columns.small_units(sp, [(0, n // 2)], windows) is not None
    assert columns.small_units(sp, [(0, n)], windows) is None


def test_the_priced_search_keeps_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The priced search's bounds per segment are one sweep a start: with the deadline passed it stops
    between them (before, every sweep ran first: 14.8 s of a 6 s share on the 70B prefill under load)
    and returns the plan it was given, or UNKNOWN without one."""
    import time

    monkeypatch.setattr(columns, "MAX_WORK", 0)  # the priced search, not the knapsack
    rng = np.random.default_rng(7)
    n = 6
    shapes = np.array([(1, 1), (2, 2), (3, 3)])
    lat = rng.integers(5, 60, size=(n, 3)).astype(np.int64)
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, np.ones((n, 3)), np.zeros((n, 3)), 60, 12)
    links = np.zeros(n + 1, dtype=np.int64)
    calls: list[int] = []
    real = share_wafers._lagrangian

    def counted(sp_: SharingProblem, lams: np.ndarray):  # type: ignore[no-untyped-def]
        program = real(sp_, lams)

        def wrapped(part: SharingProblem) -> np.ndarray:
            calls.append(part.n_kernels)
            return program(part)

        return wrapped

    monkeypatch.setattr(share_wafers, "_lagrangian", counted)
    late = share_wafers._segment_solve(
        sp, links, 2, Deadline(time.perf_counter() - 1.0), sp.windows(), share_wafers._zone(sp), 0.0, None, time.perf_counter()
    )
    assert late.status is Status.UNKNOWN and not late.runs and calls == []
    found = solve(sp, links, 2, Deadline.after(30))
    assert found.status is Status.OPTIMAL and calls


def _lagrangian_brute(sp: SharingProblem, a: int, b: int, lams: np.ndarray) -> float:
    """The best over ``lams`` of kernels [a, b)'s Lagrangian value on one wafer, every partition and
    grid enumerated: ``min(sum(latency + lam * cores)) - lam * C`` (the core budget priced, not kept)."""
    least = np.full(lams.size, np.inf)
    for lat, used in _partitions(sp, a, b):
        least = np.minimum(least, lat + lams * used)
    return float((least - lams * sp.total_cores).max())


@pytest.mark.parametrize("seed", range(12))
def test_out_of_time_with_no_plan_gives_the_cut_of_the_least_bound(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The priced search out of time before its labels found a plan, with none handed to it, still
    names the cut whose wafers' bounds and links add up least (where each wafer's own regions then go):
    its value is the least over every cut into at most W wafers, each wafer's Lagrangian value
    enumerated at the search's prices, and it is the bound reported."""
    monkeypatch.setattr(columns, "MAX_WORK", 0)  # the priced search, not the knapsack
    monkeypatch.setattr(share_wafers, "_strong_labels", lambda *args: None)  # (their time ran out)
    rng = np.random.default_rng(300 + seed)
    n, wafers = int(rng.integers(3, 7)), int(rng.integers(2, 4))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 5, size=int(rng.integers(1, 4)))}))
    lat = rng.integers(5, 60, size=(n, len(shapes))).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, len(shapes))).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, len(shapes))).astype(np.float64)
    total = int(rng.integers(int((shapes[:, 0] ** 2).max()), int((shapes[:, 0] ** 2).sum()) + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, resident, buffers, 60, total)
    links = np.concatenate(([0], rng.integers(1, 25, size=n - 1), [0])).astype(np.int64)
    price = float(rng.uniform(0.0, 3.0))
    found = solve(sp, links, wafers, Deadline.after(30), price=price)
    scale = price if price > 0 else 1.0 / max(1, sp.total_cores)
    lams = np.concatenate(([0.0], scale * np.geomspace(0.3, 3.0, share_wafers.PRICES - 1)))
    span = share_wafers._longest_segment(sp)  # (a longer segment's kernels need more SRAM than a wafer has)

    def value(cuts: tuple[int, ...]) -> float:
        if any(b - a > span for a, b in zip(cuts[:-1], cuts[1:], strict=True)):
            return np.inf
        inner = sum(_lagrangian_brute(sp, a, b, lams) for a, b in zip(cuts[:-1], cuts[1:], strict=True))
        return inner + float(sum(links[c] for c in cuts[1:-1]))

    every = [(0, *inner, n) for count in range(1, wafers + 1) for inner in itertools.combinations(range(1, n), count - 1)]
    least = min(value(c) for c in every)
    if not np.isfinite(least):
        assert found.status is Status.INFEASIBLE
        return
    assert found.status is Status.UNKNOWN and found.latency is None and not found.runs and not found.cuts
    assert found.wish[0] == 0 and found.wish[-1] == n and len(found.wish) - 1 <= wafers
    assert value(found.wish) == pytest.approx(least, rel=1e-9, abs=1e-6)
    assert found.bound == int(np.ceil(least - 1e-6 * max(1.0, least)))


def _cut_value(cuts: tuple[int, ...], segment: np.ndarray, links: np.ndarray, span: int) -> float:
    """A cut's value in ``_cut_program``'s terms: its segments' values and its links (inf: a wafer past the span)."""
    parts = list(zip(cuts[:-1], cuts[1:], strict=True))
    if any(b - a > span for a, b in parts):
        return np.inf
    return sum(float(segment[a, b - a]) for a, b in parts) + float(sum(links[c] for c in cuts[1:-1]))


@pytest.mark.parametrize("seed", range(8))
def test_the_program_over_the_cuts_and_its_least_cut_against_every_cut(seed: int) -> None:
    """``_cut_program`` and ``_least_cut`` on random segment values (some segments impossible, some
    values negative: Lagrangian values may be) against every cut into at most W wafers: the least value
    and a cut of that value, every wafer within the span, at most W of them (100 programs a seed: a cut
    read from the wrong wafer's lengths differs in about one program of twenty)."""
    rng = np.random.default_rng(900 + seed)
    for _ in range(100):
        n, wafers = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        span = int(rng.integers(1, n + 1))
        segment = np.full((n + 1, span + 1), np.inf)
        for a in range(n):
            for length in range(1, min(span, n - a) + 1):
                if rng.random() > 0.3:
                    segment[a, length] = float(rng.integers(-20, 60))
        links = np.concatenate(([0], rng.integers(0, 25, size=max(0, n - 1)), [0])).astype(np.int64)
        rest, best, _ = share_wafers._cut_program(segment, links, wafers)

        every = [(0, *inner, n) for count in range(1, wafers + 1) for inner in itertools.combinations(range(1, n), count - 1)]
        least = min(_cut_value(c, segment, links, span) for c in every)
        assert rest[0, 0] == least
        if np.isfinite(least):
            cut = tuple(share_wafers._least_cut(best, n))
            assert cut[0] == 0 and cut[-1] == n and all(a < b for a, b in zip(cut[:-1], cut[1:], strict=True))
            assert len(cut) - 1 <= wafers and _cut_value(cut, segment, links, span) == least
