"""Slicing floorplans (``solvers.slicing``): the shape curves by hand and against every slicing
floorplan of small cases, every layout legal, and the engine keeping one where it ranks better."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.objective import ContestScore
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers import slicing
from wsealloc.solvers.strips import score


def _problem(
    work: list[int], rows: int, cols: int, flows: list[tuple[int, int]] | None = None, only: tuple[int, int] | None = None
) -> PlacementProblem:
    """Kernels on a ``rows`` x ``cols`` fabric whose latency on r x c cores is ceil(work / (r c)) (any
    rectangle, or ``only`` that one), scored as the contest with wires weighing 1; flows a chain unless
    given."""
    heights = np.arange(1, rows + 1)
    tables = []
    for w in work:
        lat = np.full((rows, cols + 1), INF, dtype=np.int64)
        for r in range(1, rows + 1):
            for c in range(1, cols + 1):
                if only is None or only == (r, c):
                    lat[r - 1, c] = math.ceil(w / (r * c))
        tables.append(shape_table(heights, lat, np.zeros_like(lat, dtype=np.int32)))
    pairs = flows if flows is not None else [(k, k + 1) for k in range(len(work) - 1)]
    src = np.array([a for a, _ in pairs], dtype=np.int64)
    dst = np.array([b for _, b in pairs], dtype=np.int64)
    fl = Flows(src, dst, np.ones(src.size), np.arange(src.size))
    mesh = MeshParams(rows, cols, rows, cols, 1.0, 1, rows, cols, 0)
    n = len(work)
    return PlacementProblem(
        tuple(f"k{i}" for i in range(n)),
        tuple(range(n)),
        tuple(tables),
        mesh,
        np.zeros((rows, cols), bool),
        DieBoundary.IGNORE,
        fl,
        1,
        ContestScore(1.0, 1.0),
    )


def _every_slicing(problem: PlacementProblem, target: int) -> dict[tuple[int, int], dict[int, int]]:
    """By enumeration, independently of the curves: per interval and height, the least width of any
    slicing floorplan of the interval (each cut's heights split explicitly)."""
    rows, cols = problem.mesh.rows, problem.mesh.cols
    n = problem.n_kernels

    @cache
    def least(i: int, j: int, h: int) -> int:
        if h <= 0:
            return cols + 1
        if j == i + 1:
            shape = problem.shape(i)
            fit = [c for c in range(1, cols + 1) for r in range(1, h + 1) if shape.best[r - 1, c] <= target]
            return min(fit, default=cols + 1)
        out = cols + 1
        for k in range(i + 1, j):
            out = min(out, least(i, k, h) + least(k, j, h))
            for top in range(1, h):
                out = min(out, max(least(i, k, top), least(k, j, h - top)))
        return min(out, cols + 1)

    return {(i, j): {h: least(i, j, h) for h in range(rows + 1)} for i in range(n) for j in range(i + 1, n + 1)}


def test_curves_by_hand() -> None:
    # three kernels of 4 cells' work at target 1: each needs 4 cores (1 x 4, 2 x 2 or 4 x 1) on 4 x 6
    problem = _problem([4, 4, 4], 4, 6)
    cv = slicing.curves(problem, np.ones(3, dtype=np.int64), Deadline.after(10))
    assert cv is not None
    # one kernel: 1 row -> 4 columns, 2 or 3 rows -> 2, 4 rows -> 1; none in 0 rows (cols + 1)
    assert cv.width[0, 1].tolist() == [7, 4, 2, 2, 1]
    assert cv.height[0, 1].tolist() == [5, 4, 2, 2, 1, 1, 1]
    # all three: 12 columns in one row (too wide: 7); 6 in 2 rows; in 3 rows the first above the
    # other two (1 x 4 over two 2 x 2): 4; in 4 rows three 4 x 1 side by side: 3
    assert cv.width[0, 3].tolist() == [7, 7, 6, 4, 3]
    assert cv.fits(4, 6) and cv.fits(3, 4) and not cv.fits(2, 5)


@settings(max_examples=40, deadline=None)
@given(
    work=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    rows=st.integers(1, 5),
    cols=st.integers(1, 6),
    target=st.integers(1, 6),
)
def test_curves_are_the_least_width_of_every_slicing_floorplan(work: list[int], rows: int, cols: int, target: int) -> None:
    problem = _problem(work, rows, cols)
    n = len(work)
    cv = slicing.curves(problem, np.full(n, target, dtype=np.int64), Deadline.after(10))
    assert cv is not None
    every = _every_slicing(problem, target)
    for (i, j), least in every.items():
        assert cv.width[i, j].tolist() == [least[h] for h in range(rows + 1)], (i, j)


@settings(max_examples=40, deadline=None)
@given(
    work=st.lists(st.integers(1, 20), min_size=2, max_size=6),
    rows=st.integers(2, 8),
    cols=st.integers(2, 8),
    target=st.integers(1, 8),
    extra=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=4),
)
def test_every_layout_is_legal_and_meets_its_target(
    work: list[int], rows: int, cols: int, target: int, extra: list[tuple[int, int]]
) -> None:
    n = len(work)
    flows = [(k, k + 1) for k in range(n - 1)] + [(a, b) for a, b in extra if a < b < n]
    problem = _problem(work, rows, cols, flows)
    cv = slicing.curves(problem, np.full(n, target, dtype=np.int64), Deadline.after(10))
    assert cv is not None
    found = list(slicing.layouts(problem, [target], Deadline.after(10)))
    assert (1 <= len(found) <= 2 * len(slicing.SPREADS)) if cv.fits(rows, cols) else not found
    assert len({placed.rects.tobytes() for placed in found}) == len(found)
    for placed in found:
        assert not problem.layout_errors(placed.rects)
        assert (placed.latency <= target).all()
    if found:  # the orientation search keeps the unoriented layout unless it finds a better one
        plain = slicing.realize(n, slicing.floorplan(problem, cv, slicing.SPREADS[0]), {})
        assert not problem.layout_errors(plain.rects)
        assert score(problem, found[0]) <= score(problem, plain)


def test_orientation_puts_a_chain_end_to_end() -> None:
    # four kernels of exactly 2 x 2 in a chain on 4 x 4: two above two. Unoriented the chain reads
    # 0 1 / 2 3 (1 -> 2 crosses diagonally: wirelength 2 + 4 + 2); oriented it turns, 0 1 / 3 2, every
    # flow between touching kernels with centres 2 apart: wirelength 6, score 1 + 6
    problem = _problem([4, 4, 4, 4], 4, 4, only=(2, 2))
    cv = slicing.curves(problem, np.ones(4, dtype=np.int64), Deadline.after(10))
    assert cv is not None and cv.fits(4, 4)
    plan = slicing.floorplan(problem, cv, 1.0)
    assert score(problem, slicing.realize(4, plan, {}))[1] == 1.0 + 8.0
    placed = slicing.orient(problem, plan, Deadline.after(10))
    assert not problem.layout_errors(placed.rects)
    assert score(problem, placed)[1:3] == (1.0 + 6.0, 1)


def test_no_curves_past_the_memory_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem([4, 4, 4], 4, 6)
    assert slicing.fits_memory(problem) and not slicing.fits_memory(_problem([4], 4, 6))
    monkeypatch.setattr(slicing, "MOST_BYTES", 3 * 4 * (4 + 6 + 2) * 2 - 1)  # (int16 curves of 3 kernels)
    assert list(slicing.layouts(problem, [1], Deadline.after(10))) == []


def test_a_floorplan_ranked_first_and_the_bands_best_are_both_improved(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a slicing floorplan ranks first, the moves probe it and the bands' best on a quarter of
    their time each, then the better (by the objective's rank after the probe) takes the rest; the
    result is named after the method that made it."""
    import wsealloc.solvers.place as place
    from wsealloc.solvers.base import SolveOptions
    from wsealloc.solvers.strips import Placed

    problem = _problem([4, 4, 4], 4, 6)
    codes, latency = np.zeros(3, dtype=np.int64), np.ones(3, dtype=np.int64)
    floorplan = Placed(np.array([[0, 0, 2, 2], [0, 2, 2, 2], [0, 4, 2, 2]]), codes, latency)  # wire 4
    bands = Placed(np.array([[0, 0, 4, 1], [0, 1, 4, 1], [0, 2, 4, 1]]), codes, latency)  # wire 2
    monkeypatch.setattr(place, "construct_best", lambda *_, **__: place.Built(floorplan, "slicing", bands))
    calls: list[tuple[str, str]] = []

    def moves(problem: PlacementProblem, placed: Placed, options: SolveOptions, made_by: str = "strips") -> tuple[Placed, str]:
        calls.append(("floorplan" if placed is floorplan else "bands", made_by))
        return placed, made_by if made_by.endswith("+lns") else f"{made_by}+lns"

    monkeypatch.setattr(place, "improve", moves)
    result = place.solve(problem, SolveOptions(deadline=Deadline.after(10)))
    assert calls == [("floorplan", "slicing"), ("bands", "strips"), ("bands", "strips+lns")]
    assert result.solver == "strips+lns" and result.objective == 1
