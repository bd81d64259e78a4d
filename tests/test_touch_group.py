"""A ``together: touch`` group whose pinned members lie apart (``strips._touch_group``): free members are
placed to join the pieces (``strips._join_group``), by hand and against brute force on small wafers."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wsealloc.constraints.geometry import connected, touching
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers import strips


def _group_problem(rows: int, cols: int, tables: list[np.ndarray], pins: tuple[tuple[int, int] | None, ...]) -> PlacementProblem:
    """One kernel per table of ``tables`` ([heights 1..H, cols + 1] latencies, INF: no such rectangle),
    chained, all in one touch group, pinned at ``pins``."""
    n = len(tables)
    shapes = tuple(
        shape_table(np.arange(1, t.shape[0] + 1), t.astype(np.int64), np.zeros(t.shape, dtype=np.int32)) for t in tables
    )
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    src = np.arange(n - 1)
    fl = Flows(src, src + 1, np.full(src.size, 4.0), src.copy())
    return PlacementProblem(
        tuple(f"k{i}" for i in range(n)),
        tuple(range(n)),
        shapes,
        mesh,
        np.zeros((rows, cols), dtype=bool),
        "ignore",
        fl,
        100,
        pins=pins,
        fences=(None,) * n,
        touch=(tuple(range(n)),),
    )


def _one_row(cols: int, widths: range) -> np.ndarray:
    """A table of one-row rectangles of the given widths, each 100 cycles."""
    table = np.full((1, cols + 1), INF, dtype=np.int64)
    table[0, list(widths)] = 100
    return table


def test_two_pins_apart_are_joined_by_a_chain_of_free_members() -> None:
    # 2 x 12 cores; k0 and k3 one core each, pinned at [0, 0] and [0, 9]; k1 and k2 one row of 1-4
    # columns. Columns 1-8 lie between the pins: no member spans them alone, two side by side do, and
    # only in row 0 (k3 is touched only from [0, 8], [0, 10] or [1, 9]; a chain along row 1 from
    # under k0 ends at column 7). Growing each member at the spot nearest the one before took one core
    # beside k0 and left k3 apart
    tables = [_one_row(12, range(1, 2)), _one_row(12, range(1, 5)), _one_row(12, range(1, 5)), _one_row(12, range(1, 2))]
    problem = _group_problem(2, 12, tables, ((0, 0), None, None, (0, 9)))
    placed = strips.construct(problem, np.full(4, 100))
    assert placed is not None
    assert placed.rects.tolist() == [[0, 0, 1, 1], [0, 1, 1, 4], [0, 5, 1, 4], [0, 9, 1, 1]]
    assert not problem.violations(placed.rects)
    # a column more between the pins: two members of four columns cannot span nine
    far = _group_problem(
        2,
        13,
        [_one_row(13, range(1, 2)), *[_one_row(13, range(1, 5))] * 2, _one_row(13, range(1, 2))],
        ((0, 0), None, None, (0, 10)),
    )
    assert strips.construct(far, np.full(4, 100)) is None


def test_spans_a_rectangle_must_take_to_touch_two_boxes_by_hand() -> None:
    a, b = (0, 0, 2, 2), (4, 4, 2, 2)  # rows 0-1, cols 0-1; rows 4-5, cols 4-5 (diagonal, 2 apart each way)
    left_a, right_a, above_a, below_a = strips._contacts(a)
    left_b, right_b, above_b, below_b = strips._contacts(b)
    cols, rows = (0, 24), (0, 16)
    # beside a on its right and beside b on its left: exactly columns 2-3, and rows meeting 0-1 and 4-5
    assert strips._span_needed(right_a[0], left_b[0], cols) == (2, 2)
    assert strips._span_needed(right_a[1], left_b[1], rows) == (4, 16)  # rows 1..4 at least
    # below a and above b: exactly rows 2-3, columns meeting 0-1 and 4-5: at least 4, from column 1
    assert strips._span_needed(below_a[1], above_b[1], rows) == (2, 2)
    assert strips._span_needed(below_a[0], above_b[0], cols) == (4, 24)
    # beside a on its right (from column 2) and above b (reaching column 4): 3 columns at least, 22 at
    # most; rows ending at row 4 and meeting row 1: 3 at least, 4 at most (from row 0)
    assert strips._span_needed(right_a[0], above_b[0], cols) == (3, 22)
    assert strips._span_needed(right_a[1], above_b[1], rows) == (3, 4)
    # left of a: it ends at column 0, so no rectangle on the wafer is there
    assert strips._span_needed(left_a[0], left_b[0], cols) is None
    assert strips._span_needed(above_a[1], above_b[1], rows) is None  # ending at row 0 and at row 4


def test_the_pieces_of_a_group() -> None:
    boxes = [(0, 0, 2, 2), (0, 4, 2, 2), (0, 2, 1, 2), (5, 5, 1, 1), (4, 6, 1, 1)]
    # the third joins the first two; the last two meet only at a corner
    assert strips._components(boxes) == [0, 0, 0, 1, 2]
    assert strips._components([]) == []


def _bridges(problem: PlacementProblem, k: int, a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether some rectangle of kernel k's shape table lies on the wafer clear of a and b and touches both
    (every shape at every corner)."""
    shape = problem.shape(k)
    rows, cols = problem.mesh.rows, problem.mesh.cols
    for h in range(shape.heights.size):
        for c in range(1, cols + 1):
            if shape.best[h, c] >= INF:
                continue
            r = int(shape.best_r[h, c])
            for y in range(rows - r + 1):
                for x in range(cols - c + 1):
                    box = (y, x, r, c)
                    overlaps = any(y < o[0] + o[2] and o[0] < y + r and x < o[1] + o[3] and o[1] < x + c for o in (a, b))
                    if not overlaps and touching(box, a) and touching(box, b):
                        return True
    return False


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(3, 8),
    cols=st.integers(3, 9),
    data=st.data(),
)
def test_one_free_member_joins_two_pins_whenever_some_rectangle_of_it_does(rows: int, cols: int, data: st.DataObject) -> None:
    """Brute force: on a wafer holding only the two pinned rectangles, the group is joined exactly when
    some rectangle of the free member (any shape of its table, any corner) touches both, and the
    layout found is valid (on free cores, touching)."""
    draw = data.draw
    heights = draw(st.integers(1, rows))
    legal = np.array(draw(st.lists(st.booleans(), min_size=heights * cols, max_size=heights * cols))).reshape(heights, cols)
    table = np.full((heights, cols + 1), INF, dtype=np.int64)
    table[:, 1:][legal] = 100
    one = np.full((1, cols + 1), INF, dtype=np.int64)
    one[0, 1] = 100  # the pinned members: one core each
    pins = []
    for _ in range(2):
        pins.append((draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))))
    a, b = (pins[0][0], pins[0][1], 1, 1), (pins[1][0], pins[1][1], 1, 1)
    assume(pins[0] != pins[1] and not touching(a, b))  # (pins side by side are one piece: nothing to join)
    problem = _group_problem(rows, cols, [one, table, one], (pins[0], None, pins[1]))
    rects = np.zeros((3, 4), dtype=np.int64)
    taken = np.zeros((rows, cols), dtype=bool)
    for k, (y, x) in ((0, pins[0]), (2, pins[1])):
        rects[k] = (y, x, 1, 1)
        taken[y, x] = True
    found = strips._touch_group(problem, (0, 1, 2), np.full(3, 100), taken, rects, {0, 2}, [])
    expected = _bridges(problem, 1, a, b)
    assert (found is not None) == expected, (pins, legal.astype(int).tolist(), found)
    if found is not None:
        ((k, box, latency, _),) = found
        y, x, r, c = box
        assert k == 1 and latency == 100 and not taken[y : y + r, x : x + c].any()
        assert y + r <= rows and x + c <= cols and connected([a, box, b])


@settings(max_examples=80, deadline=None)
@given(rows=st.integers(4, 10), cols=st.integers(4, 12), members=st.integers(1, 3), data=st.data())
def test_every_group_joined_lies_on_free_cores_side_by_side(rows: int, cols: int, members: int, data: st.DataObject) -> None:
    """With taken cores about (other kernels, keep-outs) and several free members, whatever layout the
    search returns is one: every member on free cores of the wafer, none sharing a core, meeting its
    target, the group connected."""
    draw = data.draw
    taken = np.array(draw(st.lists(st.booleans(), min_size=rows * cols, max_size=rows * cols))).reshape(rows, cols)
    taken &= np.array(draw(st.lists(st.booleans(), min_size=rows * cols, max_size=rows * cols))).reshape(rows, cols)
    tables = []
    for _ in range(members):
        heights = draw(st.integers(1, rows))
        table = np.full((heights, cols + 1), INF, dtype=np.int64)
        table[:, 1:] = np.array(
            draw(st.lists(st.sampled_from([50, 100, INF]), min_size=heights * cols, max_size=heights * cols))
        ).reshape(heights, cols)
        tables.append(table)
    one = np.full((1, cols + 1), INF, dtype=np.int64)
    one[0, 1] = 100
    free_cells = np.argwhere(~taken)
    assume(len(free_cells) >= 2)
    i, j = draw(st.lists(st.integers(0, len(free_cells) - 1), min_size=2, max_size=2, unique=True))
    pins = (tuple(free_cells[i].tolist()), tuple(free_cells[j].tolist()))
    problem = _group_problem(rows, cols, [one, *tables, one], (pins[0], *[None] * members, pins[1]))
    n = members + 2
    rects = np.zeros((n, 4), dtype=np.int64)
    rects[0], rects[-1] = (*pins[0], 1, 1), (*pins[1], 1, 1)
    blocked = taken.copy()
    for y, x in pins:
        blocked[y, x] = True
    found = strips._touch_group(problem, tuple(range(n)), np.full(n, 100), blocked, rects, {0, n - 1}, [])
    if found is None:
        return
    cover = blocked.astype(int)
    for k, (y, x, r, c), latency, _ in found:
        assert 0 < k < n - 1 and latency <= 100 and y >= 0 and x >= 0 and y + r <= rows and x + c <= cols
        cover[y : y + r, x : x + c] += 1
        rects[k] = (y, x, r, c)
    assert cover.max() == 1 and sorted(k for k, *_ in found) == list(range(1, n - 1))
    assert connected([tuple(int(v) for v in box) for box in rects.tolist()])
