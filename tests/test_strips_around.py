"""Bands planned around obstacles (``strips.band_plan_around``): by hand, and every plan it returns packs
on the real cores (random obstacles on small wafers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.arch.schema import DieBoundary
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers import strips


def _problem(n: int, rows: int, cols: int, width: int, blocked: np.ndarray) -> PlacementProblem:
    """``n`` chained kernels of one class on a rows x cols mesh: any rectangle of at least ``width``
    columns (on 2, 4 or 8 rows) computes in 100 cycles."""
    heights = np.array([h for h in (2, 4, 8) if h <= rows])
    best = np.full((heights.size, cols + 1), INF, dtype=np.int64)
    best[:, width:] = 100
    table = shape_table(heights, best, np.zeros_like(best, dtype=np.int32))
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    src = np.arange(max(n - 1, 0))
    fl = Flows(src, src + 1, np.full(src.size, 4.0), src.copy())
    names = tuple(f"k{i}" for i in range(n))
    return PlacementProblem(names, (0,) * n, (table,), mesh, blocked, "ignore", fl, 100)


def test_band_plan_around_by_hand() -> None:
    # 8 x 8 cores: the top two rows kept out, a fixed kernel on rows 2-3, columns 0-3; four kernels of
    # 4 columns in 2-row bands. At row 2 a band has columns 4-7 only (one kernel), below it the whole
    # width (two): bands [0, 1) from row 2 (two rows skipped), [1, 3) from row 4, [3, 4) from row 6
    blocked = np.zeros((8, 8), dtype=bool)
    blocked[:2] = True
    blocked[2:4, :4] = True
    heights = np.array([2, 4])
    sl = strips.slots(np.full((4, 2), 4), heights, cols=8, rule=None)
    plan = strips.band_plan_around(sl, heights, strips.Region(0, 0, 8, 8), blocked)
    assert plan == [
        strips.Band(0, 1, 2, skip=2, reverse=False),
        strips.Band(1, 3, 2, reverse=True),
        strips.Band(3, 4, 2, reverse=False),
    ]
    # the plain plan takes the full width for every band and so packs the first band over the obstacles
    assert strips.band_plan(sl, heights, 8, 8, 1) == [strips.Band(0, 2, 2), strips.Band(2, 4, 2)]
    problem = _problem(4, 8, 8, 4, blocked)
    placed = strips._construct(problem, np.full(4, 100), strips.Style(), around=True)
    assert placed is not None
    # snake: the first band left to right (its only free run, columns 4-7), the second right to left
    assert placed.rects.tolist() == [[2, 4, 2, 4], [4, 4, 2, 4], [4, 0, 2, 4], [6, 0, 2, 4]]


def test_band_plan_around_none_when_the_obstacles_leave_no_room() -> None:
    blocked = np.zeros((8, 8), dtype=bool)
    blocked[:, 3:5] = True  # every row: free runs of 3 columns only
    heights = np.array([2, 4])
    sl = strips.slots(np.full((2, 2), 4), heights, cols=8, rule=None)
    assert strips.band_plan_around(sl, heights, strips.Region(0, 0, 8, 8), blocked) is None


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 7),
    width=st.integers(1, 6),
    boxes=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 15), st.integers(1, 5), st.integers(1, 6)), max_size=4),
)
def test_every_plan_around_obstacles_packs_on_free_cores(n: int, width: int, boxes: list[tuple[int, int, int, int]]) -> None:
    """A plan the DP returns fits its bands' free runs, so the packer places every kernel on free
    cores, inside the wafer, without overlaps."""
    rows, cols = 12, 16
    blocked = np.zeros((rows, cols), dtype=bool)
    for y, x, r, c in boxes:
        blocked[y : y + r, x : x + c] = True
    problem = _problem(n, rows, cols, width, blocked)
    heights = strips.band_heights(problem, rows)
    widths = strips.widths_for(problem, np.full(n, 100), heights)
    sl = strips.slots(widths, heights, cols, None)
    plan = strips.band_plan_around(sl, heights, strips.Region(0, 0, rows, cols), blocked)
    if plan is None:
        return
    assert [b.first for b in plan] == [0, *(b.end for b in plan[:-1])] and plan[-1].end == n
    assert sum(b.skip + b.height for b in plan) <= rows
    placed = strips._pack_plan(problem, plan, np.full(n, 100), strips.regions(problem), around=True)
    assert placed is not None
    used = blocked.copy()
    for y, x, r, c in placed.rects.tolist():
        assert y >= 0 and x >= 0 and y + r <= rows and x + c <= cols
        assert not used[y : y + r, x : x + c].any()
        used[y : y + r, x : x + c] = True


def test_a_pinned_kernel_takes_the_rectangle_the_bands_leave_room_for() -> None:
    # 8 x 8 cores; kernel 0 pinned at the top-left corner, its fewest-core rectangle 8 x 1 (then 2 x 5
    # and 4 x 3); five more kernels of 4 columns in 2-row bands. Pinned first on 8 x 1, it leaves 7
    # columns to every band (one kernel each: 10 rows for five); the bands pick 2 x 5, whose band
    # holds nothing else, and three full bands below it hold the five kernels
    rows = cols = 8
    heights = np.array([2, 4, 8])
    pinned = np.full((3, cols + 1), INF, dtype=np.int64)
    pinned[0, 5:] = pinned[1, 3:] = pinned[2, 1:] = 100
    free = np.full((3, cols + 1), INF, dtype=np.int64)
    free[:, 4:] = 100
    tables = tuple(shape_table(heights, t, np.zeros_like(t, dtype=np.int32)) for t in (pinned, free))
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    src = np.arange(5)
    fl = Flows(src, src + 1, np.full(5, 4.0), src.copy())
    problem = PlacementProblem(
        tuple(f"k{i}" for i in range(6)),
        (0, 1, 1, 1, 1, 1),
        tables,
        mesh,
        np.zeros((rows, cols), dtype=bool),
        "ignore",
        fl,
        100,
        pins=((0, 0), None, None, None, None, None),
    )
    targets = np.full(6, 100)
    placed = strips.construct(problem, targets)
    assert placed is not None and not problem.violations(placed.rects)
    assert placed.rects[0].tolist() == [0, 0, 2, 5]
    used = np.zeros((rows, cols), dtype=int)
    for y, x, r, c in placed.rects.tolist():
        used[y : y + r, x : x + c] += 1
    assert used.max() == 1
    # the pinned kernel first, on its fewest cores: no layout
    assert strips._construct_in_parts(problem, targets, strips.Style()) is None


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 7),
    width=st.integers(1, 6),
    corners=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 15)), min_size=1, max_size=2, unique=True),
    box=st.tuples(st.integers(0, 11), st.integers(0, 15), st.integers(1, 4), st.integers(1, 4)),
)
def test_pinned_kernels_in_the_bands_keep_their_corners(
    n: int, width: int, corners: list[tuple[int, int]], box: tuple[int, int, int, int]
) -> None:
    """Whatever the corners and a keep-out, a layout the construction returns has every pinned kernel
    at its corner and no two rectangles on one core or a blocked one."""
    rows, cols = 12, 16
    blocked = np.zeros((rows, cols), dtype=bool)
    y0, x0, r0, c0 = box
    blocked[y0 : y0 + r0, x0 : x0 + c0] = True
    corners = [(y, x) for y, x in corners if not blocked[y, x]][: n - 1]
    pins = tuple(corners[i] if i < len(corners) else None for i in range(n))
    problem = replace(_problem(n, rows, cols, width, blocked), pins=pins, keep_out=((y0, x0, r0, c0),))
    placed = strips.construct(problem, np.full(n, 100))
    if placed is None:
        return
    assert not problem.violations(placed.rects)
    used = blocked.copy()
    for k, (y, x, r, c) in enumerate(placed.rects.tolist()):
        assert pins[k] is None or (y, x) == pins[k]
        assert y >= 0 and x >= 0 and y + r <= rows and x + c <= cols
        assert not used[y : y + r, x : x + c].any()
        used[y : y + r, x : x + c] = True


def test_no_room_left_after_a_touch_group_is_no_layout_not_a_crash() -> None:
    # every kernel is a 2 x 16 rectangle on a 4 x 16 wafer: the touch group (kernels 0 and 1) takes all
    # of it, so the largest free rectangle is empty and kernel 2 has no room (an IndexError before)
    heights = np.array([2])
    best = np.full((1, 17), INF, dtype=np.int64)
    best[:, 16] = 100
    table = shape_table(heights, best, np.zeros_like(best, dtype=np.int32))
    mesh = MeshParams(4, 16, 4, 16, 4.0, 1, 4, 16, 0)
    fl = Flows(np.array([0, 1]), np.array([1, 2]), np.full(2, 4.0), np.arange(2))
    problem = PlacementProblem(
        ("a", "b", "c"), (0, 0, 0), (table,), mesh, np.zeros((4, 16), bool), "ignore", fl, 100, touch=((0, 1),)
    )
    assert strips.construct(problem, np.full(3, 100), strips.Style()) is None
    # and a region without rows plans no band
    sl = strips.slots(np.full((1, 1), 4), heights, cols=16, rule=None)
    assert strips.band_plan_around(sl, heights, strips.Region(0, 0, 0, 16), np.zeros((4, 16), bool)) is None


def test_free_columns_for_every_band_height_at_once_are_those_of_one_height_at_a_time() -> None:
    """``strips._band_masks`` (every band height at once, in the band DP) frees the columns the
    obstacles leave over the band's rows less those ``_pin_cover`` gives the pinned rectangles, height
    by height; ``_masks_runs`` are the runs of each row."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        rows, cols = int(rng.integers(4, 40)), int(rng.integers(4, 40))
        blocked = rng.random((rows, cols)) < rng.choice([0.0, 0.02, 0.1])
        row_of = np.where(blocked, np.arange(rows)[:, None], rows)
        next_blocked = np.minimum.accumulate(row_of[::-1], axis=0)[::-1]
        m = int(rng.integers(0, 6))
        pin_rows = np.sort(rng.integers(0, rows, m))
        caps = rows + 1
        rows_at = rng.integers(1, rows + 1, (m, caps))  # (within the cap, or the fewest-core one of all: taller)
        table = strips._PinTable(pin_rows, rng.integers(0, cols, m), rows_at, rng.integers(1, cols + 1, (m, caps)))
        after = int(rng.integers(0, rows))
        y = int(rng.integers(after, rows))
        starts = rng.integers(0, cols, int(rng.integers(0, 3)))
        hanging = tuple((int(a), int(a + rng.integers(1, 8)), int(rng.integers(y - 2, rows + 2))) for a in starts)
        tall = np.unique(rng.integers(1, rows - y + 1, int(rng.integers(1, 8))))
        got = strips._band_masks(next_blocked[y], y, tall, table, after, hanging, cols)
        runs = strips._masks_runs(got)
        for i, height in enumerate(tall.tolist()):
            want = next_blocked[y] >= y + height
            cover, _ = strips._pin_cover(table, after, y, height, hanging)
            for a, b in cover:
                want[min(a, cols) : min(b, cols)] = False
            assert (got[i] == want).all()
            edges = np.flatnonzero(np.diff(np.concatenate([[0], want.astype(int), [0]])))
            assert runs[i] == tuple(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def _tall_first(blocked: np.ndarray) -> PlacementProblem:
    """8 x 8 cores; kernel 0 only on 6 x 1 (taller than half the wafer at every shape, as a grid rule
    makes it), then five kernels of 3 columns on 2 rows, a chain."""
    rows = cols = 8
    tall = np.full((1, cols + 1), INF, dtype=np.int64)
    tall[0, 1:] = 100
    short = np.full((1, cols + 1), INF, dtype=np.int64)
    short[0, 3:] = 100
    tables = (
        shape_table(np.array([6]), tall, np.zeros_like(tall, dtype=np.int32)),
        shape_table(np.array([2]), short, np.zeros_like(short, dtype=np.int32)),
    )
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    src = np.arange(5)
    fl = Flows(src, src + 1, np.full(5, 4.0), src.copy())
    return PlacementProblem(tuple(f"k{i}" for i in range(6)), (0, 1, 1, 1, 1, 1), tables, mesh, blocked, "ignore", fl, 100)


def test_a_kernel_taller_than_half_the_wafer_goes_to_its_edge_and_the_bands_keep_their_height() -> None:
    # In a band the 6-row kernel makes it 6 rows tall: kernels 1 and 2 beside it (1 + 3 + 3 columns),
    # 3 and 4 in the 2-row band left below, kernel 5 nowhere. At the left edge it leaves columns 1-7
    # to three 2-row bands of two kernels: [1, 2], [3, 4], [5]
    problem = _tall_first(np.zeros((8, 8), dtype=bool))
    targets = np.full(6, 100)
    assert strips.tall_kernels(problem) == [0]
    assert strips.construct(problem, targets) is None
    assert strips.edge_pins(problem, targets) == ((0, 0), None, None, None, None, None)
    placed = strips.construct(problem, targets, strips.Style(edge=True))
    assert placed is not None and not problem.layout_errors(placed.rects)
    assert placed.rects[0].tolist() == [0, 0, 6, 1]
    assert sorted(placed.rects[1:, 0].tolist()) == [0, 0, 2, 2, 4]  # three 2-row bands
    # the multi-start tries it first
    from wsealloc.solvers.place import styles

    assert styles(problem)[0].edge and not styles(problem)[-1].edge


def test_the_edge_spot_of_a_tall_kernel_avoids_blocked_cores_and_the_users_corners() -> None:
    blocked = np.zeros((8, 8), dtype=bool)
    blocked[3, 0] = True  # a defect in the first column: the 6 x 1 rectangle fits there nowhere
    problem = _tall_first(blocked)
    targets = np.full(6, 100)
    assert strips.edge_pins(problem, targets) == ((0, 1), None, None, None, None, None)
    # a kernel the user pinned keeps its corner (with its rectangle) and is not moved to the edge
    pinned = replace(problem, blocked=np.zeros((8, 8), dtype=bool), pins=(None, (0, 0), None, None, None, None))
    assert strips.edge_pins(pinned, targets) == ((2, 0), (0, 0), None, None, None, None)
    assert strips.tall_kernels(replace(problem, pins=((0, 0), None, None, None, None, None))) == []


def test_an_edge_spot_stays_inside_one_die_where_the_wafer_forbids_crossing() -> None:
    # dies of 8 x 4 cores; the tall kernel (6 x 4) cannot take column 0 (a defect in it): the first
    # spot free of blocked cores, [0, 1], crosses into the second die; [0, 4] does not
    blocked = np.zeros((8, 8), dtype=bool)
    blocked[3, 0] = True
    tall = np.full((1, 9), INF, dtype=np.int64)
    tall[0, 4:5] = 100
    short = np.full((1, 9), INF, dtype=np.int64)
    short[0, 2:5] = 100
    tables = (
        shape_table(np.array([6]), tall, np.zeros_like(tall, dtype=np.int32)),
        shape_table(np.array([2]), short, np.zeros_like(short, dtype=np.int32)),
    )
    mesh = MeshParams(8, 8, 8, 4, 4.0, 1, 8, 4, 0)
    src = np.arange(3)
    fl = Flows(src, src + 1, np.full(3, 4.0), src.copy())
    problem = PlacementProblem(("k0", "k1", "k2", "k3"), (0, 1, 1, 1), tables, mesh, blocked, DieBoundary.FORBID, fl, 100)
    targets = np.full(4, 100)
    assert strips.edge_pins(problem, targets) == ((0, 4), None, None, None)
    placed = strips.construct(problem, targets, strips.Style(edge=True))
    assert placed is not None and not problem.layout_errors(placed.rects)
    # and a layout that crosses a die is never ranked (the first-fit fallback does not look at dies)
    crossing = placed.rects.copy()
    crossing[0] = (0, 2, 6, 4)
    assert problem.crosses_dies(crossing) and not problem.crosses_dies(placed.rects)


def test_the_edge_takes_a_tall_kernel_s_other_shapes_and_the_fallback_keeps_plain_styles() -> None:
    # 8 x 8 cores, rows 0-1 kept out, defects on row 7 at odd columns, corners at [2, 0] and [4, 5];
    # the tall kernel is 5 x 4 (fewest cores) or 6 x 2. Neither edge styles nor bands place it all,
    # the first-fit fallback does (it used to run the first style, an edge one, and found nothing)
    rows = cols = 8
    lat = np.full((2, cols + 1), INF, dtype=np.int64)
    lat[0, 4], lat[1, 2] = 100, 100
    tall = shape_table(np.array([5, 6]), lat, np.zeros_like(lat, dtype=np.int32))
    s = np.full((2, cols + 1), INF, dtype=np.int64)
    s[0, 2:], s[1, 1:] = 100, 100
    short = shape_table(np.array([2, 3]), s, np.zeros_like(s, dtype=np.int32))
    blocked = np.zeros((rows, cols), dtype=bool)
    blocked[:2] = True
    blocked[7, 1::2] = True
    src = np.arange(6)
    problem = PlacementProblem(
        tuple(f"k{i}" for i in range(7)), (0,) + (1,) * 6, (tall, short),
        MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0), blocked, DieBoundary.IGNORE,
        Flows(src, src + 1, np.full(6, 4.0), src.copy()), 100,
        keep_out=((0, 0, 2, 8),), pins=(None, (2, 0), None, None, None, None, (4, 5)),
    )  # fmt: skip
    from wsealloc.budget import Deadline
    from wsealloc.solvers.place import construct_best

    built = construct_best(problem, Deadline.after(5.0))
    placed = None if built is None else built.placed
    assert placed is not None and not problem.layout_errors(placed.rects)


def test_a_pinned_kernel_takes_a_rectangle_inside_its_die_where_crossing_is_forbidden() -> None:
    # dies of 8 x 4 cores; a kernel pinned at [0, 2] on 2 x 4 (its fewest cores, across the die boundary
    # at column 4) or 4 x 2 (inside the first die): the second
    lat = np.full((2, 9), INF, dtype=np.int64)
    lat[0, 4:], lat[1, 2:] = 100, 100
    table = shape_table(np.array([2, 4]), lat, np.zeros_like(lat, dtype=np.int32))
    none = np.zeros(0, dtype=np.int64)
    problem = PlacementProblem(
        ("k0",), (0,), (table,), MeshParams(8, 8, 8, 4, 4.0, 1, 8, 4, 0), np.zeros((8, 8), dtype=bool),
        DieBoundary.FORBID, Flows(none, none, np.zeros(0), none), 100,
        pins=((0, 2),),
    )  # fmt: skip
    found = strips._pinned_rect(problem, 0, 100, problem.blocked)
    assert found is not None and found[:2] == (4, 2)
    assert strips._pinned_rect(replace(problem, die_rule=DieBoundary.IGNORE), 0, 100, problem.blocked)[:2] == (2, 4)  # type: ignore[index]
