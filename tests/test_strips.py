"""Strip construction: column slots with stacked pairs, by hand and on ResNet-50 (valid rectangles)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.api import solve
from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.problem.placement import PlacementProblem, build_placement_problem
from wsealloc.solvers import Status, strips
from wsealloc.solvers.align import align

ROOT = Path(__file__).resolve().parents[1]


def test_slots_by_hand() -> None:
    heights = np.array([2, 4])
    # narrowest widths of three kernels in lanes of 2 and 4 rows
    widths = np.array([[5, 3], [6, 4], [2, 1]])
    sl = strips.slots(widths, heights, cols=100, rule=_free_pairs(3))
    # 2-row bands: no room to stack; 4-row bands: kernels 0 over 1 (2 + 2 rows, width max(5, 6) = 6)
    # plus kernel 2 alone = 7 columns, against 3 + 4 + 1 = 8 alone or 3 + max(6, 2) = 9
    assert sl.width[:, 0].tolist() == [5, 6, 2]
    assert sl.width[:, 1].tolist() == [0, 6, 1]
    assert sl.top[:, 1].tolist() == [2, 0, 0]
    assert sl.inside[:, 1].tolist() == [False, True, False, False]
    plain = strips.slots(widths, heights, cols=100, rule=None)
    assert plain.width.tolist() == widths.tolist() and not plain.inside.any()


def _free_pairs(n: int) -> strips.PairRule:
    """Every consecutive pair may stack, and nothing flows between them."""
    return strips.PairRule(np.zeros(n - 1), np.full(n, 1000), np.ones(n - 1, dtype=bool))


def test_pair_rule_rejects_a_pair_whose_vertical_flow_does_not_fit() -> None:
    heights = np.array([2, 4])
    widths = np.array([[5, 3], [6, 4], [2, 1]])
    # kernel 0 over kernel 1 in a 4-row band: a 6-column slot, kernel 1 in the 2-row bottom lane with
    # 6 columns: it computes for 100 - (2 + 6) = 92 cycles, during which 6 links carry the flow 0 -> 1:
    # at most 92 x 6 = 552 link cycles fit.
    fits = strips.PairRule(np.array([552.0, 0.0]), np.full(3, 100), np.array([True, False]))
    assert strips.slots(widths, heights, cols=100, rule=fits).width[:, 1].tolist() == [0, 6, 1]
    too_much = strips.PairRule(np.array([553.0, 0.0]), np.full(3, 100), np.array([True, False]))
    sl = strips.slots(widths, heights, cols=100, rule=too_much)
    assert sl.width[:, 1].tolist() == [3, 4, 1] and not sl.inside.any()  # every kernel alone: 8 columns
    # a mode that does not admit the pair at all: alone too
    barred = strips.PairRule(np.zeros(2), np.full(3, 100), np.array([False, True]))
    assert strips.slots(widths, heights, cols=100, rule=barred).width[:, 1].tolist() == [3, 4, 1]


def test_pair_rule_modes_by_hand() -> None:
    # 0 -> 1 (400 B), 1 -> 2 (800 B), 0 -> 2 (a skip flow around kernel 1): SKIP admits only (1, 2)
    problem = _chain_problem(3, [(0, 1, 400.0), (1, 2, 800.0), (0, 2, 400.0)])
    targets = np.array([100, 100, 100])
    skip = strips.pair_rule(problem, targets, strips.Stacking.SKIP)
    assert skip.allowed.tolist() == [False, True]
    assert skip.link_cycles.tolist() == [100.0, 200.0]  # bytes k -> k+1 over 4 B/cycle
    assert strips.pair_rule(problem, targets, strips.Stacking.ANY).allowed.tolist() == [True, True]


def test_band_plan_never_ends_inside_a_pair() -> None:
    heights = np.array([2, 4])
    widths = np.array([[5, 3], [6, 4], [2, 1]])
    sl = strips.slots(widths, heights, cols=7, rule=_free_pairs(3))
    plan = strips.band_plan(sl, heights, region_rows=8, region_cols=7, n_regions=1)
    assert plan == [strips.Band(0, 3, 4, ((0, (2,)),))]


def _deep(n: int) -> strips.PairRule:
    """Stacking.DEEP's rule: any consecutive kernels, up to DEEP_STACK per slot, no link rule."""
    return strips.PairRule(np.zeros(n - 1), np.full(n, 1000), np.ones(n - 1, dtype=bool), links=False, depth=strips.DEEP_STACK)


def test_deep_slots_stack_three_kernels_by_hand() -> None:
    heights = np.array([2, 4, 6])
    widths = np.full((3, 3), 3)  # every kernel 3 columns wide in any lane of 2 rows or more
    sl = strips.slots(widths, heights, cols=100, rule=_deep(3))
    # 6-row bands: all three in one 3-column slot (2 + 2 + 2 rows) against 6 (a pair and one alone) or 9
    assert sl.width[:, 2].tolist() == [0, 0, 3] and sl.top[:, 2].tolist() == [2, 2, 0]
    assert sl.inside[:, 2].tolist() == [False, True, True, False]
    # 4-row bands: a pair (2 + 2 rows) and one alone; 2-row bands: each alone
    assert sl.width[:, 1].tolist() == [0, 3, 3] and sl.top[:, 1].tolist() == [2, 0, 0]
    assert sl.width[:, 0].tolist() == [3, 3, 3] and not sl.inside[:, 0].any()
    # three 2-row bands tie with it on a 6 x 3 region; bands at least 6 rows tall take the triple
    plan = strips.band_plan(sl, heights, region_rows=6, region_cols=3, n_regions=1, min_band=6)
    assert plan == [strips.Band(0, 3, 6, ((0, (2, 2)),))]
    assert strips.lanes(plan[0]) == {0: (0, 2), 1: (2, 2), 2: (4, 2)}
    assert plan[0].groups() == {0: [0, 1, 2]}


def test_deep_stacking_is_for_the_contest_only() -> None:
    from wsealloc.solvers.place import styles

    problem = _chain_problem(3, [(0, 1, 400.0)])
    assert all(s.stack is not strips.Stacking.DEEP for s in styles(problem))
    assert strips.pair_rule(problem, np.full(3, 100), strips.Stacking.DEEP).depth == strips.DEEP_STACK


def test_stacked_resnet_layout_is_valid_and_packs_tighter() -> None:
    out = solve(str(ROOT / "models" / "resnet50.onnx"), "wse2", place=False)
    problem = build_placement_problem(out.costs, out.plan.objective.lower_bound_cycles)
    zero = np.zeros(problem.n_kernels, dtype=np.int64)
    deadline = Deadline.after(60)
    alone = strips.smallest_target(problem, zero, problem.lower_bound, deadline, strips.Style(stack=strips.Stacking.NONE))
    stacked = strips.smallest_target(problem, zero, problem.lower_bound, deadline, strips.Style(stack=strips.Stacking.ANY))
    assert alone is not None and stacked is not None
    assert stacked[0] < alone[0]  # measured: 1,743 vs 1,794 cycles (bands leave room for pass-through)
    rects = stacked[1].rects
    grid = np.zeros((problem.mesh.rows, problem.mesh.cols), dtype=np.int32)
    for row, col, r, c in rects.tolist():
        assert row >= 0 and col >= 0 and row + r <= problem.mesh.rows and col + c <= problem.mesh.cols
        grid[row : row + r, col : col + c] += 1
    assert grid.max() == 1  # no overlap
    assert (stacked[1].latency <= stacked[0]).all()
    # some kernels share a column slot: their column spans overlap
    spans = [(col, col + c) for _, col, _, c in rects.tolist()]
    assert any(a[0] < b[1] and b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))


def _valid(problem: PlacementProblem, placed: strips.Placed) -> None:
    grid = np.zeros((problem.mesh.rows, problem.mesh.cols), dtype=np.int32)
    for row, col, r, c in placed.rects.tolist():
        assert r >= 1 and c >= 1 and row >= 0 and col >= 0
        assert row + r <= problem.mesh.rows and col + c <= problem.mesh.cols
        grid[row : row + r, col : col + c] += 1
    assert grid.max() == 1 and not (grid.astype(bool) & problem.blocked).any()


def test_stacked_layouts_of_random_models_are_valid(tmp_path: Path) -> None:
    """Stacked and plain strip layouts of random models on random machines: inside the wafer, no
    overlap, no defective core, every kernel within its target."""
    import onnx
    from hypothesis import HealthCheck, given, settings
    from test_properties import random_archs, random_models

    from wsealloc.arch import load_arch
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.pipeline import build_costs

    laid_out = dict.fromkeys(strips.Stacking, 0)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(random_models(), random_archs())
    def check(model: onnx.ModelProto, sets: list[str]) -> None:
        path = tmp_path / "m.onnx"
        onnx.save(model, str(path))
        out = solve(str(path), "tiny", sets=[*sets, "wafer.defects.rate=0.01"], place=False)
        costs = build_costs(OnnxSource(path=str(path)), load_arch("tiny", [*sets, "wafer.defects.rate=0.01"]), out.costs.options)
        problem = build_placement_problem(costs, out.plan.objective.lower_bound_cycles)
        zero = np.zeros(problem.n_kernels, dtype=np.int64)
        for style in (strips.Style(1, stack) for stack in strips.Stacking):
            found = strips.smallest_target(problem, zero, problem.lower_bound, Deadline.after(30), style)
            if found is None:
                continue  # too little room at any target (defects): the driver reports it
            target, placed = found
            _valid(problem, placed)
            assert (placed.latency <= target).all()
            aligned, rank = align(problem, placed)
            _valid(problem, aligned)
            assert rank == strips.score(problem, aligned) <= strips.score(problem, placed)
            assert (aligned.rects[:, 1:] == placed.rects[:, 1:]).all()  # only rows change
            laid_out[style.stack] += 1

    check()
    assert min(laid_out.values()) >= 5, laid_out  # the property was exercised, not skipped


def _two_kernel_problem(link_cycles: float) -> PlacementProblem:
    """Kernel 0 -> kernel 1, ``link_cycles`` x 4 bytes; every rectangle needs 20 columns for 100 cycles."""
    return _chain_problem(2, [(0, 1, 4.0 * link_cycles)])


def _chain_problem(n: int, flows: list[tuple[int, int, float]], cols: int = 40) -> PlacementProblem:
    """``n`` kernels of one class on an 8 x ``cols`` mesh (4 B/cycle links) with the given flows (src,
    dst, bytes); every rectangle needs 20 columns for 100 cycles."""
    from wsealloc.cost.comm import MeshParams
    from wsealloc.problem.flows import Flows
    from wsealloc.problem.placement import INF, shape_table

    heights = np.array([2, 4, 8])
    best = np.full((heights.size, cols + 1), INF, dtype=np.int64)
    best[:, 20:] = 100
    table = shape_table(heights, best, np.zeros_like(best, dtype=np.int32))
    mesh = MeshParams(8, cols, 8, cols, 4.0, 1, 8, cols, 0)
    src, dst, nbytes = (np.array(v) for v in zip(*flows, strict=True))
    fl = Flows(src, dst, nbytes.astype(np.float64), np.arange(len(flows)))
    names = tuple(f"k{i}" for i in range(n))
    return PlacementProblem(names, (0,) * n, (table,), mesh, np.zeros((8, cols), bool), "ignore", fl, 100)


def test_place_targets_relaxes_from_its_floor() -> None:
    # every kernel is 100 cycles at best: targets of 90 pack once relaxed to ceil(90 (1000 + x) / 1000)
    # >= 100, i.e. 90 (1000 + x) > 99,000, x >= 101; from a floor below that the bisection ends at 101
    # too, and from 101 itself in one construction
    problem = _chain_problem(3, [(0, 1, 400.0), (1, 2, 400.0)])
    base = np.full(3, 90)
    calls = []
    real = strips.construct

    def counted(*args: object, **kwargs: object) -> strips.Placed | None:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    deadline = Deadline.after(60)
    for floor in (0, 50, 100, 101):
        found = strips.place_targets(problem, base, deadline, strips.Style(), floor)
        assert found is not None and found[0] == 101 and (found[1].latency <= 100).all()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(strips, "construct", counted)
        strips.place_targets(problem, base, deadline, strips.Style(), 101)
    assert len(calls) == 1


def test_place_targets_starts_at_its_hint() -> None:
    # as above, x >= 101 packs: a hint of 120 packs, so the bisection runs over [0, 120] (8
    # constructions, the hint's among them) and ends at 101 as without it; a hint that does not pack
    # (50) doubles on from it (100, then 200 packs: 3 constructions, 7 more to bisect [101, 200]);
    # without a hint the doubling from 0 takes 9 constructions before 128 packs
    problem = _chain_problem(3, [(0, 1, 400.0), (1, 2, 400.0)])
    base = np.full(3, 90)
    deadline = Deadline.after(60)
    real = strips.construct
    for hint, constructions in ((120, 8), (50, 10), (None, 15)):
        calls = []

        def counted(*args: object, **kwargs: object) -> strips.Placed | None:
            calls.append(1)  # noqa: B023 (each loop's own list, read in the loop)
            return real(*args, **kwargs)  # type: ignore[arg-type]

        with pytest.MonkeyPatch.context() as m:
            m.setattr(strips, "construct", counted)
            found = strips.place_targets(problem, base, deadline, strips.Style(), 0, hint)
        assert found is not None and found[0] == 101
        assert len(calls) == constructions, (hint, len(calls))


def test_pack_mirrors_a_run_after_a_lower_lane() -> None:
    # a chain of 6 kernels on an 8 x 80 mesh, each 20 columns on 2 rows at most, in one 8-row band as
    # two runs of lanes: [0, 1] over [2], then [3, 4] over [5]. Kernel 2 ends the first run's lower
    # lane (rows 4-5) and feeds kernel 3. Laid from the top, the second run's upper lane is in rows
    # 0-1, away from kernel 2; mirrored, it is in rows 6-7 (its lanes' rows counted from the band's
    # bottom) and kernel 5 over it in rows 2-3: the first run's mirror image, on the same columns
    problem = _chain_problem(6, [(k, k + 1, 4.0) for k in range(5)], cols=80)
    bands = [strips.Band(0, 6, 8, (), (strips.Run(0, 2, 3, 4), strips.Run(3, 5, 6, 4)))]
    widths = strips.band_widths(problem, bands, np.full(6, 100))
    regs = strips.regions(problem)
    plain = strips.pack(problem, bands, widths, regs)
    mirrored = strips.pack(problem, bands, widths, regs, mirror=True)
    assert plain is not None and mirrored is not None
    assert plain.rects.tolist() == [[0, 0, 2, 20], [0, 20, 2, 20], [4, 0, 2, 20], [0, 40, 2, 20], [0, 60, 2, 20], [4, 40, 2, 20]]
    assert mirrored.rects.tolist() == [*plain.rects[:3].tolist(), [6, 40, 2, 20], [6, 60, 2, 20], [2, 40, 2, 20]]
    # (kernel 3 now lies right under kernel 2, rows 6-7 against 4-5, instead of two rows over it)
    comm = [problem.evaluate(x.rects, x.latency)[1].comm_cycles[3] for x in (mirrored, plain)]
    assert comm[0] < comm[1]


def test_band_height_leaves_the_pass_through_room_beside_the_fill() -> None:
    # Traffic into kernel 1 overlaps its compute, not its fill: with a band of H rows and a 20-column
    # rectangle, P / (4 H) <= 100 - H - 20 must hold. 320 link cycles: H = 4 gives (100 - 24) x 4 = 304
    # < 320 (the old rule, H >= 320 / 100, let it pass); H = 8 gives 72 x 8 = 576.
    heights = np.array([2, 4, 8])
    targets = np.array([100, 100])
    widths = strips.widths_for(_two_kernel_problem(320), targets, heights)
    assert widths[0].tolist() == [20, 20, 20]  # nothing crosses in front of the first kernel
    assert widths[1].tolist() == [strips.INF, strips.INF, 20]
    # 300 link cycles: H = 4 is enough (304 >= 300), H = 2 not (78 x 2 = 156)
    widths = strips.widths_for(_two_kernel_problem(300), targets, heights)
    assert widths[1].tolist() == [strips.INF, 20, 20]


def test_widths_within_by_hand() -> None:
    from wsealloc.problem.placement import INF, ShapeTable

    # two heights (2 and 4 rows), widths 0..4: with 4 rows the kernel is faster at every width
    best = np.array([[INF, 300, 200, 150, 120], [INF, 200, 120, 100, 90]], dtype=np.int64)
    widths = np.tile(np.arange(best.shape[1]), (2, 1))
    table = ShapeTable(np.array([2, 4]), best, np.zeros_like(best), np.zeros_like(best, dtype=np.int8), best, widths)
    lanes = np.array([1, 2, 3, 4, 9])
    # 1 row: no height fits; 2-3 rows: the 2-row table; 4 and more rows: the 4-row table
    assert table.widths_within(lanes, 150).tolist() == [0, 3, 3, 2, 2]
    assert table.widths_within(lanes, 100).tolist() == [0, 0, 0, 3, 3]
    assert table.widths_within(lanes, 50).tolist() == [0, 0, 0, 0, 0]
    for target in (50, 100, 120, 150, 200, 300):
        expected = [table.width_for(table.height_index(int(m)), target) for m in lanes]
        assert table.widths_within(lanes, target).tolist() == expected


def test_distinct_heights_drop_only_heights_that_narrow_no_kernel() -> None:
    heights = np.array([2, 3, 4, 6, 8])
    # two kernels: 3 rows narrow neither (dropped), 4 rows narrows kernel 0, 6 rows neither, 8 kernel 1
    widths = np.array([[9, 9, 5, 5, 5], [7, 7, 7, 7, 3]])
    kept, w = strips.distinct_heights(heights, widths, min_band=1)
    assert kept.tolist() == [2, 4, 8] and w.tolist() == [[9, 5, 5], [7, 7, 3]]
    # a style whose bands are at least 5 rows tall keeps its shortest admitted band (6 rows)
    kept, _ = strips.distinct_heights(heights, widths, min_band=5)
    assert kept.tolist() == [2, 4, 6, 8]
    # the band plan over the kept heights is the plan over all of them. 12 columns: two 2-row bands
    # of 9 and 7 columns (4 rows; one 4-row band of 5 + 7 columns ties); 8 columns: kernel 0 fits
    # only from 4 rows (5 columns), kernel 1 in 2 rows (7): 6 rows, against one 8-row band of 5 + 3
    for cols, plan in ((12, [(0, 1, 2), (1, 2, 2)]), (8, [(0, 1, 4), (1, 2, 2)])):
        for hs, ws in ((heights, widths), strips.distinct_heights(heights, widths, 1)):
            sl = strips.slots(np.where(ws <= cols, ws, strips.INF), hs, cols=cols, rule=None)
            bands = strips.band_plan(sl, hs, region_rows=14, region_cols=cols, n_regions=1)
            assert bands == [strips.Band(*b) for b in plan]


def test_distinct_slots_keep_a_height_that_only_a_stacked_pair_needs() -> None:
    """With pairs the height also decides which pairs stack: kernels A and B (10 columns at every
    height, short enough for lanes of 100 rows) stack only in a 200-row band, where C (from 150 rows)
    fits beside them in 20 columns; single widths do not change from 150 to 200 rows, so reducing the
    heights by single widths (``distinct_heights``) lost the only plan (a review found it); the slots
    (``distinct_slots``) keep it. The band plan over the kept heights is the plan over all of them."""
    heights = np.array([100, 150, 200])
    widths = np.array([[10, 10, 10], [10, 10, 10], [strips.INF, 10, 10]])
    sl = strips.slots(widths, heights, cols=20, rule=_free_pairs(3))
    plan = strips.band_plan(sl, heights, region_rows=200, region_cols=20, n_regions=1)
    assert plan is not None and [(b.first, b.end, b.height) for b in plan] == [(0, 3, 200)]  # one 200-row band: A over B, then C
    kept, reduced = strips.distinct_slots(heights, sl, min_band=1)
    assert kept.tolist() == [100, 150, 200]
    assert strips.band_plan(reduced, kept, region_rows=200, region_cols=20, n_regions=1) == plan
    lost, _ = strips.distinct_heights(heights, widths, min_band=1)
    assert lost.tolist() == [100, 150]  # by single widths alone 200 rows is dropped (why stacking uses slots)
    # a height with the same slots as the one below is still dropped
    flat = strips.slots(np.array([[5, 5, 5], [5, 5, 5]]), heights, cols=20, rule=None)
    assert strips.distinct_slots(heights, flat, min_band=1)[0].tolist() == [100]


def test_distinct_heights_keep_the_region_height_for_a_style_taller_than_the_region() -> None:
    """``band_plan`` admits bands of at least min(min_band, the region's rows): in a 6-row part (a fence,
    the largest free rectangle) a style of 8-row bands has only the 6-row band, which must stay though
    it narrows no kernel (a review found it dropped)."""
    heights = np.array([4, 6])
    widths = np.array([[10, 10], [10, 10]])
    kept, _ = strips.distinct_heights(heights, widths, min_band=8)
    assert kept.tolist() == [4, 6]
    sl = strips.slots(widths, heights, cols=20, rule=None)
    assert strips.band_plan(sl, heights, region_rows=6, region_cols=20, n_regions=1, min_band=8) == [strips.Band(0, 2, 6)]


def test_repeated_pairs_get_the_slots_of_their_first_occurrence() -> None:
    # the three kernels of test_slots_by_hand, repeated four times: every repetition stacks alike
    heights = np.array([2, 4])
    widths = np.tile(np.array([[5, 3], [6, 4], [2, 1]]), (4, 1))
    sl = strips.slots(widths, heights, cols=100, rule=_free_pairs(12))
    assert sl.width[:, 1].tolist() == [0, 6, 1] * 4
    assert sl.top[:, 1].tolist() == [2, 0, 0] * 4
    assert sl.width[:, 0].tolist() == [5, 6, 2] * 4


def _turn(problem: PlacementProblem) -> strips.Placed:
    """Kernel 0 top-aligned in a 6-row band (rows 0-1 of 0-5), kernel 1 in the band below (rows 6-7):
    the flow 0 -> 1 turns across the 4 idle rows under kernel 0."""
    rects = np.array([[0, 0, 2, 20], [6, 0, 2, 20]])
    return strips.Placed(rects, np.zeros(2, dtype=np.int8), np.array([100, 100]))


def test_align_closes_the_gap_of_a_turn() -> None:
    problem = _two_kernel_problem(1.0)
    placed = _turn(problem)
    assert strips.score(problem, placed)[0] == 100 + 5  # rows 2-5 between them: 5 hops
    aligned, rank = align(problem, placed)
    _valid(problem, aligned)
    assert rank[0] == 101  # touching: one hop
    (y0, _, r0, _), (y1, _, _, _) = aligned.rects.tolist()
    assert y1 == y0 + r0


def test_align_keeps_rectangles_inside_their_die_with_the_forbid_rule() -> None:
    from dataclasses import replace

    base = _two_kernel_problem(1.0)
    problem = replace(base, mesh=replace(base.mesh, die_rows=4), die_rule=DieBoundary.FORBID)
    aligned, rank = align(problem, _turn(problem))
    _valid(problem, aligned)
    for y, _, r, _ in aligned.rects.tolist():
        assert y // 4 == (y + r - 1) // 4
    assert aligned.rects[:, 0].tolist() == [2, 4] and rank[0] == 101  # each slides to the die boundary


def test_align_does_not_slide_over_a_defect() -> None:
    from dataclasses import replace

    base = _two_kernel_problem(1.0)
    blocked = base.blocked.copy()
    blocked[3, 5] = True  # in the columns of both kernels, between them
    problem = replace(base, blocked=blocked)
    aligned, rank = align(problem, _turn(problem))
    _valid(problem, aligned)
    # kernel 0 can reach rows 1-2 at most, kernel 1 rows 4-5: one free row (3) between them
    assert rank[0] == 102


def test_packing_relaxation_by_hand() -> None:
    from dataclasses import replace

    from wsealloc.solvers.base import SolveOptions
    from wsealloc.solvers.cpsat_place import pack_ignoring_comm

    # every kernel needs at least 2 x 20 cores for 100 cycles on an 8 x 40 mesh: 8 fit, 9 do not (area)
    flows = [(k, k + 1, 4.0) for k in range(8)]
    options = SolveOptions(deadline=Deadline.after(20), workers=1)
    status, rects = pack_ignoring_comm(_chain_problem(9, flows), 101, options)
    assert (status, rects) == (Status.INFEASIBLE, None)
    status, rects = pack_ignoring_comm(_chain_problem(8, flows[:7]), 101, options)
    assert status is Status.FEASIBLE and rects is not None
    grid = np.zeros((8, 40), dtype=np.int32)
    for row, col, r, c in rects.tolist():
        assert c >= 20 and row + r <= 8 and col + c <= 40
        grid[row : row + r, col : col + c] += 1
    assert grid.max() == 1
    # consumers pay at least one hop: at a target of 100 only the first kernel has a legal rectangle
    assert pack_ignoring_comm(_chain_problem(8, flows[:7]), 100, options) == (Status.INFEASIBLE, None)
    # the user's corners and areas hold: the 8 rectangles of 2 x 20 fill the 8 x 40 mesh exactly, so a
    # corner at row 1 leaves 20 cores of row 0 no kernel fits (300 cores for 320); at [2, 20] they pack,
    # kernel 0 there, and kernel 3 kept within the last two rows ends there
    full = _chain_problem(8, flows[:7])
    odd = replace(full, pins=((1, 0), *(None,) * 7))
    assert pack_ignoring_comm(odd, 101, options) == (Status.INFEASIBLE, None)
    kept = replace(full, pins=((2, 20), *(None,) * 7), fences=(*(None,) * 3, (6, 0, 2, 40), *(None,) * 4))
    status, rects = pack_ignoring_comm(kept, 101, options)
    assert status is Status.FEASIBLE and rects is not None
    assert rects[0, :2].tolist() == [2, 20] and rects[3, 0] == 6


def test_prefix_width_holds_the_running_best() -> None:
    """Exact widths can be slower than narrower ones (a contest kernel's widths are multiples of 3):
    the width to use for 'at most c columns' is where the running best was reached."""
    from wsealloc.problem.placement import INF, shape_table

    lat = np.array([[INF, INF, INF, 90, INF, INF, 60, 80]], dtype=np.int64)
    table = shape_table(np.array([4]), lat, np.zeros_like(lat, dtype=np.int32))
    assert table.prefix[0].tolist() == [INF, INF, INF, 90, 90, 90, 60, 60]
    assert table.prefix_width[0].tolist()[3:] == [3, 3, 3, 6, 6]


def test_floors_only_where_a_layout_fails_in_the_band_plan_alone() -> None:
    """``construct_best``'s floors (a taller-band style starts where the all-heights style packed) hold
    only where a layout fails in the band plan alone: not with a defect (bands overflow past it: a review
    found a taller style packing at the bound where the all-heights style needed twice it), nor with the
    user's keep-outs, corners or areas (layouts built in parts)."""
    from dataclasses import replace

    from wsealloc.solvers.place import floors_hold

    problem = _two_kernel_problem(1.0)
    assert floors_hold(problem)
    blocked = problem.blocked.copy()
    blocked[0, 10] = True
    assert not floors_hold(replace(problem, blocked=blocked))
    assert not floors_hold(replace(problem, keep_out=((0, 0, 2, 2),)))


def test_a_layout_only_stacked_pairs_make_is_found() -> None:
    """Six kernels on a 16 x 20 mesh (dies of 6 rows): a, b, d, e 4 rows x 15 columns, c and f 6 or 8
    rows x 5 columns. Only 8-row bands pack them (a over b beside c; d over e beside f), and 8 rows
    narrows no single kernel: with the heights of distinct single widths alone no style found a layout
    (a review's case); stacked styles that find no plan take every height's slots."""
    from wsealloc.cost.comm import MeshParams
    from wsealloc.problem.flows import Flows
    from wsealloc.problem.placement import INF, shape_table
    from wsealloc.solvers.place import construct_best

    cols, rows = 20, 16

    def table(hs: list[int], w: int):  # type: ignore[no-untyped-def]
        best = np.full((len(hs), cols + 1), INF, dtype=np.int64)
        best[:, w:] = 100
        return shape_table(np.array(hs), best, np.zeros_like(best, dtype=np.int32))

    mesh = MeshParams(rows, cols, 6, cols, 4.0, 1, 6, cols, 0)
    flows = Flows(np.arange(5), np.arange(1, 6), np.full(5, 4.0), np.arange(5))
    problem = PlacementProblem(
        tuple("abcdef"), (0, 0, 1, 0, 0, 1), (table([4], 15), table([6, 8], 5)), mesh, np.zeros((rows, cols), bool),
        "ignore", flows, 100,
    )  # fmt: skip
    built = construct_best(problem, Deadline.after(10))
    placed = None if built is None else built.placed
    assert placed is not None and not problem.violations(placed.rects)
    assert strips.score(problem, placed)[0] <= 101  # every kernel at its 100 cycles, one hop to its producer


def _lanes_rule(n: int, near: tuple[tuple[int, int, float], ...] = ()) -> strips.PairRule:
    """Stacking.LANES's rule over ``n`` kernels (targets 1000), with the given flows between near kernels."""
    return strips.PairRule(np.zeros(n - 1), np.full(n, 1000), np.ones(n - 1, dtype=bool), bool(near), 3, True, near)


def test_lane_slots_by_hand() -> None:
    heights = np.array([2, 4])
    widths = np.array([[5, 5], [3, 3], [8, 8]])
    sl = strips.slots(widths, heights, cols=100, rule=_lanes_rule(3))
    # 2-row bands: no room for two lanes; 4-row bands: kernels 0 and 1 side by side in the upper 2 rows
    # (5 + 3 columns), kernel 2 under them (8): 8 columns, against 16 alone, 13 for either pair and 11
    # for the run split after kernel 0
    assert sl.width[:, 0].tolist() == [5, 3, 8] and sl.runs[0] == {}
    assert sl.width[:, 1].tolist() == [0, 0, 8]
    assert sl.inside[:, 1].tolist() == [False, True, True, False]
    assert sl.runs[1] == {0: strips.Run(0, 2, 3, 2)}
    # (bands of at least 4 rows: two 2-row bands would tie with it)
    plan = strips.band_plan(sl, heights, region_rows=4, region_cols=8, n_regions=1, min_band=4)
    assert plan == [strips.Band(0, 3, 4, (), (strips.Run(0, 2, 3, 2),))]
    assert strips.lanes(plan[0]) == {0: (0, 2), 1: (0, 2), 2: (2, 2)}


def test_lane_runs_leave_room_for_their_downward_flows() -> None:
    heights = np.array([2, 4])
    widths = np.array([[5, 5], [3, 3], [8, 8]])
    # 0 -> 2 runs down from the upper lane in a bundle of max(5, 8) = 8 columns while kernel 2 computes:
    # 1000 - (2 rows + 8 columns) = 990 cycles of room, 7,920 link cycles at most
    fits = strips.slots(widths, heights, cols=100, rule=_lanes_rule(3, ((0, 2, 7920.0),)))
    assert fits.runs[1] == {0: strips.Run(0, 2, 3, 2)}
    # one cycle more: every run with 0 above 2 is out; the pair 0 over 1 (no flow between them) is
    # the first of the two 13-column layouts
    barred = strips.slots(widths, heights, cols=100, rule=_lanes_rule(3, ((0, 2, 7921.0),)))
    assert barred.width[:, 1].tolist() == [0, 5, 8] and barred.runs[1] == {0: strips.Run(0, 1, 2, 2)}


def test_pair_rule_of_lanes_lists_the_near_flows() -> None:
    problem = _chain_problem(4, [(0, 1, 400.0), (0, 3, 800.0), (1, 2, 40.0)])
    rule = strips.pair_rule(problem, np.full(4, 100), strips.Stacking.LANES)
    assert rule.lanes and rule.depth == strips.LANE_RUN and rule.allowed.all()
    assert rule.near == ((0, 1, 100.0), (0, 3, 200.0), (1, 2, 10.0))  # bytes over 4 B/cycle


def test_pack_lays_a_run_as_two_lanes_by_hand() -> None:
    # 8 x 40 mesh, every kernel 20 columns on any of 2, 4 or 8 rows: a band of 8 rows with kernels 0
    # and 1 side by side in the upper 4 rows and kernel 2 under kernel 0
    problem = _chain_problem(3, [(0, 1, 4.0), (1, 2, 4.0)])
    band = strips.Band(0, 3, 8, (), (strips.Run(0, 2, 3, 4),))
    targets = np.full(3, 100)
    widths = strips.band_widths(problem, [band], targets)
    assert widths.tolist() == [20, 20, 20]
    placed = strips.pack(problem, [band], widths, strips.regions(problem))
    assert placed is not None
    assert placed.rects.tolist() == [[0, 0, 2, 20], [0, 20, 2, 20], [4, 0, 2, 20]]
    assert placed.latency.tolist() == [100, 100, 100]


def test_distinct_slots_keep_each_kept_height_s_runs() -> None:
    """``Stacking.LANES`` slots carry their runs per height index: the heights ``distinct_slots`` keeps
    keep their own runs (the dropped height's are dropped with it)."""
    heights = np.array([2, 4, 6])
    width = np.array([[0, 0, 0], [5, 3, 3]])
    runs = ({}, {0: strips.Run(0, 1, 2, 2)}, {0: strips.Run(0, 1, 2, 3)})
    sl = strips.Slots(width, np.zeros((2, 3), dtype=np.int64), np.zeros((3, 3), dtype=bool), runs)
    kept, reduced = strips.distinct_slots(heights, sl, min_band=1)
    assert kept.tolist() == [2, 4] and reduced.runs == ({}, {0: strips.Run(0, 1, 2, 2)})
    assert reduced.width.tolist() == [[0, 0], [5, 3]]


def _lane_widths_one_run_at_a_time(capped: np.ndarray, heights: np.ndarray, cols: int, rule: strips.PairRule) -> np.ndarray:
    """The least total width per band height of ``_lane_slots``' DP, each run tried on its own (the
    form before runs ending at one kernel were compared at once, and before their cache keys were
    per-kernel ids)."""
    n, nh = capped.shape
    prefix = np.vstack([np.zeros((1, nh), dtype=np.int64), np.cumsum(capped, axis=0)])
    lower = np.searchsorted(heights, heights[:, None] - heights[None, :], side="right") - 1
    low = np.maximum(lower, 0)
    near = {(u, v): c for u, v, c in rule.near} if rule.links else {}
    g = np.zeros((n + 1, nh), dtype=np.int64)
    for i in range(1, n + 1):
        g[i] = g[i - 1] + capped[i - 1]
        for a in range(max(0, i - rule.depth), i - 1):
            for s in range(a + 1, i):
                ok = lower >= 0
                for u in range(a, s):
                    for v in range(s, i):
                        if (u, v) in near:
                            wv = capped[v][low]
                            busy = rule.targets[v] - heights[low] - wv
                            ok &= (busy > 0) & (near[(u, v)] <= busy * np.maximum(capped[u][None, :], wv))
                both = np.maximum((prefix[s] - prefix[a])[None, :], (prefix[i] - prefix[s])[low])
                w = np.where(ok, both, strips.INF).min(axis=1)
                g[i] = np.minimum(g[i], np.where(w <= cols, g[a] + w, strips.INF))
    return g[n]


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=3),
    order=st.lists(st.integers(0, 2), min_size=2, max_size=9),
    flows=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 3), st.floats(0, 400)), max_size=6),
)
def test_lane_slots_widths_are_those_of_every_run_tried_alone(
    kinds: list[tuple[int, int, int]], order: list[int], flows: list[tuple[int, int, float]]
) -> None:
    """Repeated kernels (a few kinds, as repeated layers) and flows down between near kernels: the slots'
    total width per band height is the DP's with each run tried on its own, and every run's lanes fit."""
    heights = np.array([2, 4, 6])
    capped = np.array([kinds[k % len(kinds)] for k in order], dtype=np.int64)
    n = capped.shape[0]
    near = tuple((u, v, c) for (u, v), c in sorted({(u, u + d): c for u, d, c in flows if u + d < n}.items()))
    rule = strips.PairRule(np.zeros(n - 1), np.full(n, 30), np.ones(n - 1, dtype=bool), True, 3, True, near)
    sl = strips.slots(capped, heights, cols=20, rule=rule)
    assert sl.width.sum(axis=0).tolist() == _lane_widths_one_run_at_a_time(np.minimum(capped, 21), heights, 20, rule).tolist()


def test_wire_plans_trade_rows_for_wires_by_hand() -> None:
    """Kernels 0 and 1 are 6 columns wide in 1 row or 3 in 2 rows, kernel 2 needs 2 rows (4 columns);
    the region is 10 columns wide. The fewest rows: one 2-row band of all three (3 + 3 + 4 columns),
    whose chain estimate is 10 - (3 + 4) / 2 = 6.5 (centres side by side). With 4 rows, a band each
    (1 + 1 + 2 rows, no chain inside a band): f = (1 + price) 4 against (1 + price) 2 + 6.5 for the one
    band and (1 + price) 3 + 3.5 for [0] and [1, 2]: the three bands at prices 0.5 and 2, the one band
    from 8 on. With 3 rows the three bands do not fit (the Lagrangian optimum is dropped, not
    constrained), so only the fewest-rows plan is left."""
    heights = np.array([1, 2])
    widths = np.array([[6, 3], [6, 3], [strips.INF, 4]])
    sl = strips.slots(widths, heights, cols=10, rule=None)
    one = [strips.Band(0, 3, 2)]
    assert strips.band_plan(sl, heights, region_rows=4, region_cols=10, n_regions=1) == one
    apart = [strips.Band(0, 1, 1), strips.Band(1, 2, 1), strips.Band(2, 3, 2)]
    assert strips.wire_plans(sl, heights, region_rows=4, region_cols=10) == [apart, one]
    assert strips.wire_plans(sl, heights, region_rows=3, region_cols=10) == [one]
    assert strips.wire_plans(sl, heights, region_rows=1, region_cols=10) == []  # (kernel 2 needs 2 rows)


@settings(max_examples=60, deadline=None)
@given(
    widths=st.lists(st.lists(st.integers(1, 12), min_size=3, max_size=3), min_size=1, max_size=7),
    rows=st.integers(2, 12),
    pairs=st.booleans(),
)
def test_wire_plans_hold_every_kernel_in_order_within_the_rows(widths: list[list[int]], rows: int, pairs: bool) -> None:
    heights = np.array([1, 2, 4])
    w = np.array(widths)
    n = w.shape[0]
    sl = strips.slots(np.where(w <= 12, w, strips.INF), heights, cols=12, rule=_free_pairs(n) if pairs and n > 1 else None)
    for plan in strips.wire_plans(sl, heights, region_rows=rows, region_cols=12):
        assert [b.first for b in plan][0] == 0 and plan[-1].end == n
        assert all(a.end == b.first for a, b in zip(plan, plan[1:], strict=False))
        assert sum(b.height for b in plan) <= rows
        for b in plan:  # each band's slots fit its width, and no band ends inside a stacked pair
            h = int(np.flatnonzero(heights == b.height)[0])
            assert sl.width[b.first : b.end, h].sum() <= 12 and not sl.inside[b.end, h]
