"""The relocation search (issue 37, ``solvers/relocate.py``): kernels moved onto faster rectangles in
free cores or trading places with a kernel they touch, never a worse layout, the user's corners and keep-outs honoured."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wsealloc.arch import load_arch
from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions
from wsealloc.frontend.sources import OnnxSource
from wsealloc.pipeline import build_costs
from wsealloc.plan.verify import allocation_optimum
from wsealloc.problem.placement import INF, PlacementProblem, build_placement_problem
from wsealloc.solvers.relocate import _Search, relocate
from wsealloc.solvers.strips import Placed, score

ATTENTION = Path(__file__).resolve().parents[1] / "models" / "tiny" / "attention.onnx"


@pytest.fixture(scope="module")
def problem() -> PlacementProblem:
    costs = build_costs(OnnxSource(path=str(ATTENTION)), load_arch("tiny"), CostOptions())
    bound = allocation_optimum(costs)
    assert bound is not None
    return build_placement_problem(costs, bound)


def scattered(problem: PlacementProblem) -> Placed:
    """Every kernel on its fewest-core rectangle, in the four corners of the wafer: slow and far apart."""
    rows, cols = problem.mesh.rows, problem.mesh.cols
    rects, codes, latency = [], [], []
    for k in range(problem.n_kernels):
        shape = problem.shape(k)
        cells = np.argwhere(shape.best < INF)
        h, c = min(cells.tolist(), key=lambda hc: int(shape.best_r[hc[0], hc[1]]) * hc[1])
        r = int(shape.best_r[h, c])
        y, x = [(0, 0), (rows - r, cols - c), (0, cols - c), (rows - r, 0)][k % 4]
        rects.append((y, x, r, c))
        codes.append(int(shape.best_df[h, c]))
        latency.append(int(shape.best[h, c]))
    return Placed(np.array(rects, dtype=np.int64), np.array(codes, dtype=np.int32), np.array(latency, dtype=np.int64))


def _overlaps(rects: np.ndarray) -> bool:
    taken = np.zeros((int((rects[:, 0] + rects[:, 2]).max()), int((rects[:, 1] + rects[:, 3]).max())), dtype=np.int64)
    for y, x, r, c in rects.tolist():
        taken[y : y + r, x : x + c] += 1
    return bool((taken > 1).any())


def side_by_side(problem: PlacementProblem, widths: tuple[int, ...]) -> Placed:
    """Kernels 0, 1, ... full height side by side from column 0 on ``widths`` columns, each on its
    shape table's op model there."""
    rows = problem.mesh.rows
    rects, codes, latency = [], [], []
    x = 0
    for k, c in enumerate(widths):
        shape = problem.shape(k)
        h = shape.height_index(rows)
        assert int(shape.best_r[h, c]) == rows and shape.best[h, c] < INF
        rects.append((0, x, rows, c))
        codes.append(int(shape.best_df[h, c]))
        latency.append(int(shape.best[h, c]))
        x += c
    return Placed(np.array(rects, dtype=np.int64), np.array(codes, dtype=np.int32), np.array(latency, dtype=np.int64))


def test_moves_make_a_scattered_layout_faster(problem: PlacementProblem) -> None:
    start = scattered(problem)
    assert problem.n_kernels == 4 and not _overlaps(start.rects)
    moved = relocate(problem, start, Deadline.after(20))
    assert score(problem, moved) < score(problem, start)
    stage, _ = problem.evaluate(moved.rects, moved.latency)
    before, _ = problem.evaluate(start.rects, start.latency)
    assert stage.max() < before.max()
    assert not _overlaps(moved.rects) and not problem.violations(moved.rects)
    rows, cols = problem.mesh.rows, problem.mesh.cols
    assert ((moved.rects[:, 0] + moved.rects[:, 2]) <= rows).all() and ((moved.rects[:, 1] + moved.rects[:, 3]) <= cols).all()
    for k, (_, _, r, c) in enumerate(moved.rects.tolist()):  # every rectangle's latency is its shape table's
        shape = problem.shape(k)
        h = shape.height_index(r)
        assert int(shape.best[h, c]) == int(moved.latency[k]) and int(shape.best_r[h, c]) == r


def test_a_pinned_kernel_keeps_its_corner_and_keep_outs_stay_free(problem: PlacementProblem) -> None:
    start = scattered(problem)
    corner = (int(start.rects[1, 0]), int(start.rects[1, 1]))
    keep_out = (6, 8, 4, 8)  # the middle of the 16 x 24 wafer, free in the scattered layout
    blocked = problem.blocked.copy()
    blocked[6:10, 8:16] = True
    pinned = replace(problem, pins=(None, corner, None, None), keep_out=(keep_out,), blocked=blocked)
    assert not pinned.violations(start.rects)
    moved = relocate(pinned, start, Deadline.after(20))
    assert (int(moved.rects[1, 0]), int(moved.rects[1, 1])) == corner
    assert not pinned.violations(moved.rects) and not _overlaps(moved.rects)
    assert score(pinned, moved) <= score(pinned, start)


def test_the_contest_objective_is_left_alone(problem: PlacementProblem) -> None:
    from wsealloc.problem.objective import ContestScore

    contest = replace(problem, objective=ContestScore(weight_time=1.0, wires=1.0))
    start = scattered(problem)
    assert relocate(contest, start, Deadline.after(5)) is start


def test_a_full_wafer_improves_by_kernels_trading_places(problem: PlacementProblem) -> None:
    """No core is free (the rest of the wafer blocked), so a swap of touching kernels helps without new shapes:
    pv (3) is the slowest, 12 hops from q_proj (0), which it reads past qk and softmax; trading places
    brings them nearer, and every kernel keeps its shape."""
    start = side_by_side(problem, (8, 8, 3, 4))  # q_proj, qk, softmax, pv in dataflow order
    x = 8 + 8 + 3 + 4
    blocked = problem.blocked.copy()
    blocked[:, x:] = True
    full = replace(problem, blocked=blocked)
    before, _ = full.evaluate(start.rects, start.latency)
    assert int(np.argmax(before)) == 3
    swapped = _Search(full, Deadline.after(20))._exchange(start, 3, np.sort(before)[::-1])
    assert swapped is not None
    after, _ = full.evaluate(swapped.rects, swapped.latency)
    assert after.max() < before.max()
    assert not _overlaps(swapped.rects) and not (swapped.rects[:, 1] + swapped.rects[:, 3] > x).any()
    assert (swapped.rects[:, 2:] == start.rects[:, 2:]).all() and (swapped.latency == start.latency).all()
    moved = relocate(full, start, Deadline.after(20))  # the whole search, the swap among its moves
    assert score(full, moved) < score(full, start) and not _overlaps(moved.rects)


def test_a_boxed_in_kernel_takes_a_strip_of_a_neighbour_with_time_to_spare(
    problem: PlacementProblem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No core is free: qk (1) is the slowest on 4 columns (1,044 cycles), softmax (2) beside it has time
    to spare on 6 (532 needs 4). qk on 6 columns takes two of softmax's, which keeps the 4 left; the
    search without this move (single moves, chains, evictions, exchanges) gains qk's hops at most."""
    rows = problem.mesh.rows
    order, widths = (0, 2, 1, 3), (8, 6, 4, 6)  # q_proj, softmax, qk, pv side by side: the whole wafer
    rects, codes, latency = [(0, 0, 0, 0)] * 4, [0] * 4, [0] * 4
    x = 0
    for k, c in zip(order, widths, strict=True):
        shape = problem.shape(k)
        h = shape.height_index(rows)
        assert int(shape.best_r[h, c]) == rows and shape.best[h, c] < INF
        rects[k], codes[k], latency[k] = (0, x, rows, c), int(shape.best_df[h, c]), int(shape.best[h, c])
        x += c
    assert x == problem.mesh.cols
    start = Placed(np.array(rects, dtype=np.int64), np.array(codes, dtype=np.int32), np.array(latency, dtype=np.int64))
    before, _ = problem.evaluate(start.rects, start.latency)
    assert int(np.argmax(before)) == 1
    squeezed = _Search(problem, Deadline.after(20))._squeeze(start, 1, before, np.sort(before)[::-1])
    assert squeezed is not None
    after, _ = problem.evaluate(squeezed.rects, squeezed.latency)
    assert after.max() < before.max() and after[1] < before[1]
    assert not _overlaps(squeezed.rects) and not problem.violations(squeezed.rects)
    assert int(squeezed.rects[1, 3]) > 4 and int(squeezed.rects[2, 3]) < 6  # qk wider, softmax narrower
    for k, (_, _, r, c) in enumerate(squeezed.rects.tolist()):  # every rectangle's latency is its shape table's
        shape = problem.shape(k)
        h = shape.height_index(r)
        assert int(shape.best[h, c]) == int(squeezed.latency[k]) and int(shape.best_r[h, c]) == r
    moved = relocate(problem, start, Deadline.after(20))
    assert problem.evaluate(moved.rects, moved.latency)[0].max() < 800 and not _overlaps(moved.rects)
    monkeypatch.setattr(_Search, "_squeeze", lambda *args: None)  # without the new move
    without = relocate(problem, start, Deadline.after(20))
    assert problem.evaluate(without.rects, without.latency)[0].max() >= int(start.latency[1])  # qk's hops at most


def test_the_taken_cores_after_one_kernel_grows_are_the_layouts_own(problem: PlacementProblem) -> None:
    """An eviction grows one kernel once per shape: its layout's prefix sums of taken cores, updated by
    the old and new rectangle alone, are the sums counted afresh (rectangles overlapping count twice)."""
    start = scattered(problem)
    rows, cols = problem.mesh.rows, problem.mesh.cols
    rng = np.random.default_rng(2)
    search = _Search(problem, Deadline.after(20))
    for _ in range(40):
        k = int(rng.integers(problem.n_kernels))
        grown = start.rects.copy()
        y, x = int(rng.integers(rows)), int(rng.integers(cols))
        grown[k] = (y, x, int(rng.integers(1, rows - y + 1)), int(rng.integers(1, cols - x + 1)))
        after = Placed(grown, start.dataflow, start.latency)
        updated = search.taken(after, start, k)
        assert (updated == _Search(problem, Deadline.after(20)).taken(Placed(grown.copy(), start.dataflow, start.latency))).all()


def test_the_nearest_free_corners_are_those_a_scan_of_every_corner_finds() -> None:
    """``_nearest_free_each`` (the free corners found once for targets near each other) against a
    scan of every corner: the rectangle on no taken core but the moving kernel's own, nearest each
    target (L1), ties to the top left; None where no corner is free."""
    from wsealloc.solvers.relocate import _nearest_free_each

    rng = np.random.default_rng(4)
    for _ in range(150):
        rows, cols = int(rng.integers(2, 14)), int(rng.integers(2, 14))
        taken = (rng.random((rows, cols)) < rng.choice([0.1, 0.3, 0.6])).astype(np.int32)
        oy, ox = int(rng.integers(rows)), int(rng.integers(cols))
        own = (oy, ox, int(rng.integers(1, rows - oy + 1)), int(rng.integers(1, cols - ox + 1)))
        taken[oy : oy + own[2], ox : ox + own[3]] += 1
        prefix = np.zeros((rows + 1, cols + 1), dtype=np.int32)
        prefix[1:, 1:] = taken.cumsum(0).cumsum(1)
        r, c = int(rng.integers(1, rows + 1)), int(rng.integers(1, cols + 1))
        targets = [(int(rng.integers(-3, rows + 3)), int(rng.integers(-3, cols + 3))) for _ in range(int(rng.integers(1, 5)))]
        mine = np.zeros_like(taken)
        mine[oy : oy + own[2], ox : ox + own[3]] = 1
        free = [
            (y, x)
            for y in range(rows - r + 1)
            for x in range(cols - c + 1)
            if (taken[y : y + r, x : x + c] - mine[y : y + r, x : x + c]).sum() == 0
        ]
        want = [min(free, key=lambda s, t=t: (abs(s[0] - t[0]) + abs(s[1] - t[1]), s)) if free else None for t in targets]
        assert _nearest_free_each(prefix, own, r, c, targets) == want


def test_a_growing_kernel_pushes_the_kernels_after_it_into_the_idle_columns(problem: PlacementProblem) -> None:
    """q_proj, qk, softmax, pv side by side on 8 + 4 + 4 + 6 of the 24 columns: the two idle columns are
    at the wafer's end, too narrow for qk (the slowest: 1,045 cycles on 4 columns) to move to. qk grows
    to 6 columns (726 cycles) in place and pushes softmax and pv two columns on, each keeping its
    rectangle: stages 536, 727, 661, 801 (pv, 1,044 -> 790 on 6 columns, waits a hop longer)."""
    start = side_by_side(problem, (8, 4, 4, 6))
    before, _ = problem.evaluate(start.rects, start.latency)
    assert before.tolist() == [536, 1045, 661, 799]
    pushed = _Search(problem, Deadline.after(20))._push(start, 1, before, np.sort(before)[::-1])
    assert pushed is not None
    rows = problem.mesh.rows
    assert pushed.rects.tolist() == [[0, 0, rows, 8], [0, 8, rows, 6], [0, 14, rows, 4], [0, 18, rows, 6]]
    after, _ = problem.evaluate(pushed.rects, pushed.latency)
    qk = problem.shape(1)
    six = int(qk.best[qk.height_index(rows), 6])  # qk's op model on 16 x 6
    # qk on its new op model, a hop from q_proj; pv two hops further from q_proj (columns 0-7), softmax
    # beside qk as before
    assert after.tolist() == [before[0], six + 1, before[2], before[3] + 2] == [536, 727, 661, 801]
    assert (pushed.latency[[0, 2, 3]] == start.latency[[0, 2, 3]]).all()


def test_a_push_stops_at_the_edge_a_fixed_kernel_and_a_blocked_core(problem: PlacementProblem) -> None:
    """``_pushed`` gives no layout where the line of kernels would leave the wafer, move a pinned
    kernel, cross a keep-out's cores or make a kernel jump over the one pushing it."""
    from wsealloc.solvers.relocate import _pushed

    start = side_by_side(problem, (8, 4, 4, 6))
    rows = problem.mesh.rows
    assert _pushed(problem, start.rects, 1, (0, 8, rows, 5), 1, True) is not None
    assert _pushed(problem, start.rects, 1, (0, 8, rows, 6), 1, True) is not None  # to the last idle column
    assert _pushed(problem, start.rects, 1, (0, 8, rows, 7), 1, True) is None  # pv past the edge
    pinned = replace(problem, pins=(None, None, (0, 12), None))
    assert _pushed(pinned, start.rects, 1, (0, 8, rows, 6), 1, True) is None
    blocked = problem.blocked.copy()
    blocked[rows - 1, 23] = True
    assert _pushed(replace(problem, blocked=blocked), start.rects, 1, (0, 8, rows, 6), 1, True) is None
    # grown to the left, qk would push q_proj (behind it) backwards past the wafer's first column
    assert _pushed(problem, start.rects, 1, (0, 6, rows, 6), 1, False) is None


def test_pushes_keep_every_rectangle_apart_and_on_the_wafer(problem: PlacementProblem) -> None:
    """Random layouts of kernels on a grid of cells with idle ones between them, random grown
    rectangles and directions: a push's layout has no two rectangles sharing a core, every one on the
    wafer and off the blocked cores, the grown kernel on its new rectangle, and every other kernel on
    its own shape, moved along the push's axis in its direction or not at all."""
    from wsealloc.solvers.relocate import _pushed

    rng = np.random.default_rng(7)
    rows, cols = problem.mesh.rows, problem.mesh.cols
    found = 0
    for _ in range(400):
        n = int(rng.integers(2, 9))
        cells = rng.choice(16, size=n, replace=False)  # a 4 x 4 grid of 4 x 6 cells
        rects = []
        for cell in cells.tolist():
            cy, cx = 4 * (cell // 4), 6 * (cell % 4)
            r, c = int(rng.integers(1, 5)), int(rng.integers(1, 7))
            rects.append((cy + int(rng.integers(0, 5 - r)), cx + int(rng.integers(0, 7 - c)), r, c))
        layout = np.array(rects, dtype=np.int64)
        blocked = rng.random((rows, cols)) < 0.01
        for y, x, r, c in rects:
            blocked[y : y + r, x : x + c] = False
        toy = replace(problem, blocked=blocked, pins=(), touch=())
        k = int(rng.integers(n))
        y, x, r, c = rects[k]
        axis, ahead = int(rng.integers(2)), bool(rng.integers(2))
        r2, c2 = r + int(rng.integers(0, 6)), c + int(rng.integers(0, 8))
        # grown from its top-left corner (pushing ahead) or from its bottom-right one (backwards)
        box = (y, x, min(rows - y, r2), min(cols - x, c2)) if ahead else (max(0, y + r - r2), max(0, x + c - c2), 0, 0)
        if not ahead:
            box = (box[0], box[1], y + r - box[0], x + c - box[1])
        out = _pushed(toy, layout, k, box, axis, ahead)
        if out is None:
            continue
        found += 1
        assert tuple(out[k].tolist()) == box
        assert not _overlaps(out)
        assert (out[:, 0] >= 0).all() and (out[:, 1] >= 0).all()
        assert ((out[:, 0] + out[:, 2]) <= rows).all() and ((out[:, 1] + out[:, 3]) <= cols).all()
        for y2, x2, r2, c2 in out.tolist():
            assert not blocked[y2 : y2 + r2, x2 : x2 + c2].any()
        others = np.delete(np.arange(n), k)
        assert (out[others, 2:] == layout[others, 2:]).all()
        assert (out[others, 1 - axis] == layout[others, 1 - axis]).all()
        assert ((out[others, axis] >= layout[others, axis]) if ahead else (out[others, axis] <= layout[others, axis])).all()
    assert found > 100
