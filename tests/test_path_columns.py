"""A band's columns shared for a token's path (``solvers.path_columns``, ``strips.path_stretch``) and
an allocation's latencies floored for the placement (``place.floored_targets``): hand-computed cases,
brute force on convex curves, and a band laid out for the latency objective."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.budget import Deadline
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.latency_start import slack
from wsealloc.problem.objective import Latency
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers import strips
from wsealloc.solvers.path_columns import lane_curve, least_width, share_columns
from wsealloc.solvers.place import floored_targets, place_baseline

inf = np.inf


def test_share_columns_by_hand() -> None:
    a = np.array([inf, 100, 60, 45, 40, 38, 37])
    b = np.array([inf, 80, 50, 48, 47, 46, 45])
    # both on one column, 3 left: A saves 40 (1 -> 2), then B 30 (1 -> 2) before A's 15, then A's 15
    # before B's 2: (3, 2) = 45 + 50 = 95, the best of (1, 4) 147, (2, 3) 108, (3, 2) 95, (4, 1) 120
    assert share_columns([a, b], 5) == [3, 2]
    assert share_columns([a, b], 2) == [1, 1]
    assert share_columns([a, b], 1) is None  # the narrowest widths alone do not fit
    assert share_columns([np.array([inf, inf]), b], 9) is None  # a unit with no legal width


def test_lane_curve_by_hand() -> None:
    # the greedy's nested steps: (1, 1) 180, A to 2 (40 a column) 140, B to 2 (30) 110, A to 3 (15) 95
    a = np.array([inf, 100, 60, 45, 40, 38, 37])
    b = np.array([inf, 80, 50, 48, 47, 46, 45])
    assert lane_curve([a, b], 5).tolist() == [inf, inf, 180.0, 140.0, 110.0, 95.0]
    for budget in (2, 3, 4, 5):  # each width's value is what share_columns finds at that budget
        widths = share_columns([a, b], budget)
        assert widths is not None and float(a[widths[0]] + b[widths[1]]) == lane_curve([a, b], 5)[budget]
    assert lane_curve([np.array([inf, inf])], 3).tolist() == [inf] * 4


def test_share_columns_looks_past_a_flat_step() -> None:
    # A saves nothing until its fourth column, then 90 (30 a column): beats B's 10 a column
    a = np.array([inf, 100, 100, 100, 10, 10])
    b = np.array([inf, 50, 40, 30, 20, 10])
    assert share_columns([a, b], 5) == [4, 1]
    # two columns left: A's step does not fit, B takes them
    assert share_columns([a, b], 4) == [1, 3]


def test_least_width() -> None:
    assert least_width(np.array([inf, inf, 5.0, 4.0])) == 2
    assert least_width(np.array([inf, inf])) == 0


def test_slack_by_hand() -> None:
    # 0 -> {1, 2} -> 3, latencies 1, 5, 2, 1: the path 0-1-3 is 7; kernel 2 may take 3 more
    assert slack([[], [0], [0], [1, 2]], [1, 5, 2, 1]) == [0, 0, 3, 0]
    assert slack([[], [0], [1]], [4, 4, 4]) == [0, 0, 0]


@st.composite
def _convex_curve(draw: st.DrawFn) -> np.ndarray:
    """A decreasing convex latency curve over widths 0..8, infinite below its narrowest width."""
    first = draw(st.integers(1, 3))
    steps = sorted(draw(st.lists(st.integers(0, 40), min_size=8 - first, max_size=8 - first)), reverse=True)
    start = draw(st.integers(200, 400))
    curve = [inf] * first + [float(start - sum(steps[:i])) for i in range(len(steps) + 1)]
    return np.array(curve)


@settings(max_examples=60, deadline=None)
@given(curves=st.lists(_convex_curve(), min_size=1, max_size=3), budget=st.integers(1, 20))
def test_share_columns_is_the_least_sum_on_convex_curves(curves: list[np.ndarray], budget: int) -> None:
    ranges = [range(least_width(c), c.size) for c in curves]
    sums = [sum(float(c[w]) for c, w in zip(curves, ws, strict=True)) for ws in itertools.product(*ranges) if sum(ws) <= budget]
    found = share_columns(curves, budget)
    if not sums:
        assert found is None
        return
    assert found is not None and sum(found) <= budget
    assert sum(float(c[w]) for c, w in zip(curves, found, strict=True)) == min(sums)


def _band_problem(objective: Latency | None) -> PlacementProblem:
    """Two kernels in a chain on a 4 x 40 mesh, free links: kernel 0 takes 1000 / c cycles on c
    columns, kernel 1 100 / c (any height)."""
    cols = 40
    heights = np.array([4])
    widths = np.arange(cols + 1)
    tables = []
    for work in (1000, 100):
        lat = np.full((1, cols + 1), INF, dtype=np.int64)
        lat[0, 1:] = -(-work // widths[1:])
        tables.append(shape_table(heights, lat, np.zeros_like(lat, dtype=np.int32)))
    mesh = MeshParams(4, cols, 4, cols, 1e9, 0, 4, cols, 0)
    fl = Flows(np.array([0]), np.array([1]), np.array([1.0]), np.array([0]))
    extra = {"objective": objective, "preds": ((), (0,))} if objective is not None else {}
    return PlacementProblem(("big", "small"), (0, 1), tuple(tables), mesh, np.zeros((4, cols), bool), "ignore", fl, 1, **extra)  # type: ignore[arg-type]


def test_a_band_is_shared_for_the_path_not_for_the_slowest_kernel() -> None:
    targets = np.array([100, 100])
    # throughput: the band's spare columns go to the slowest kernel, the two end near equal
    slowest = strips.construct(_band_problem(None), targets)
    assert slowest is not None
    # the path: 1000 / a + 100 / b on a + b = 40 is least near a = 30 (34 + 10 = 44)
    path = strips.construct(_band_problem(Latency()), targets)
    assert path is not None
    best = min(-(-1000 // a) + -(-100 // (40 - a)) for a in range(1, 40))
    assert int(path.latency.sum()) == best == 44
    assert int(slowest.latency.sum()) > best
    assert int(path.rects[:, 3].sum()) <= 40


def test_floored_targets() -> None:
    base = np.array([100, 1000, 10, 400])
    problem = _band_problem(Latency())
    floored = floored_targets(problem, base)
    # a quarter, an eighth, a half and a sixteenth of the slowest, then the allocation as it is
    expected = [[250, 1000, 250, 400], [125, 1000, 125, 400], [500, 1000, 500, 500], [100, 1000, 62, 400], [100, 1000, 10, 400]]
    assert [t.tolist() for t in floored] == expected
    # floors that change nothing are tried once
    assert len(floored_targets(problem, np.array([1000, 1000]))) == 1
    # the slowest stage objective places the allocation as it is
    assert [t.tolist() for t in floored_targets(_band_problem(None), base)] == [base.tolist()]


def _short_band_problem(objective: Latency | None) -> PlacementProblem:
    """Two kernels in a chain on an 8 x 10 mesh, free links: each takes ceil(80 / (r c)) cycles on r x c
    cores, r one of 2, 4 or 8 rows."""
    cols = 10
    heights = np.array([2, 4, 8])
    lat = np.full((3, cols + 1), INF, dtype=np.int64)
    for h, r in enumerate(heights):
        lat[h, 1:] = -(-80 // (r * np.arange(1, cols + 1)))
    table = shape_table(heights, lat, np.zeros_like(lat, dtype=np.int32))
    mesh = MeshParams(8, cols, 8, cols, 1e9, 0, 8, cols, 0)
    fl = Flows(np.array([0]), np.array([1]), np.array([1.0]), np.array([0]))
    extra = {"objective": objective, "preds": ((), (0,))} if objective is not None else {}
    return PlacementProblem(("a", "b"), (0, 0), (table,), mesh, np.zeros((8, cols), bool), "ignore", fl, 1, **extra)  # type: ignore[arg-type]


def test_the_rows_a_band_plan_leaves_go_to_its_band() -> None:
    # at 10 cycles each kernel needs 4 columns of 2 rows: one band of 2 rows holds both and leaves 6
    # rows. Shared along the path the band's 10 columns give 5 each: 80 / 10 = 8 cycles apiece; with the
    # 6 rows handed to the band (8 rows) 80 / 40 = 2 cycles apiece
    targets = np.array([10, 10])
    problem = _short_band_problem(Latency())
    plain = strips.construct(problem, targets)
    assert plain is not None and plain.rects[:, 2].max() == 2 and int(plain.latency.sum()) == 16
    taller = strips.construct(problem, targets, refine=Deadline.after(60))
    assert taller is not None and taller.rects[:, 2].tolist() == [8, 8] and int(taller.latency.sum()) == 4
    assert int(taller.rects[:, 3].sum()) <= 10 and (taller.rects[:, 0] + taller.rects[:, 2] <= 8).all()
    # the placement of an allocation's targets refines the best style's plan (a token's path)
    found = place_baseline(problem, targets, Deadline.after(60))
    assert found is not None and int(found.latency.sum()) == 4


def test_a_band_boundary_moves_where_the_path_gains() -> None:
    """Three kernels in a chain on a 2 x 12 mesh, bands of 1 row: kernel 0 takes 600 / c cycles, 1 and
    2 take 12 / c. A plan of two bands at targets of 100 may put its boundary after kernel 1 or 0; the
    refinement moves it to where a token's path is shorter."""
    cols = 12
    heights = np.array([1])
    tables = []
    for work in (600, 12, 12):
        lat = np.full((1, cols + 1), INF, dtype=np.int64)
        lat[0, 1:] = -(-work // np.arange(1, cols + 1))
        tables.append(shape_table(heights, lat, np.zeros_like(lat, dtype=np.int32)))
    mesh = MeshParams(2, cols, 2, cols, 1e9, 0, 2, cols, 0)
    fl = Flows(np.array([0, 1]), np.array([1, 2]), np.array([1.0, 1.0]), np.array([0, 1]))
    problem = PlacementProblem(
        ("a", "b", "c"), (0, 1, 2), tuple(tables), mesh, np.zeros((2, cols), bool), "ignore", fl, 1, Latency(), ((), (0,), (1,))
    )
    targets = np.array([100, 100, 100])
    plan = [strips.Band(0, 2, 1), strips.Band(2, 3, 1)]  # kernel 0 shares its band with kernel 1
    regs = strips.regions(problem)
    placed = strips._pack_plan(problem, plan, targets, regs)
    assert placed is not None
    # sharing a band, kernels 0 and 1 are best on 10 + 2 columns (60 + 6 cycles), kernel 2 alone on 12 (1):
    # 67. With the boundary moved, kernel 0 has a band of its own (12 columns: 50 cycles) and kernels 1
    # and 2 share the other (6 + 6: 2 + 2): 54
    assert int(placed.latency.sum()) == 67
    refined = strips.refine_plan(problem, plan, targets, regs, placed, Deadline.after(60))
    assert int(refined.latency.sum()) == 54 and refined.rects[0, 3] == 12
