"""A layout the placement starts from (``--from-plan old.json``: ``request.start``): what makes a layout
valid (``PlacementProblem.layout_errors``, by hand), when an old plan's layout is a start
(``driver.start_layout``) and that a re-solve started from it is never worse than the plan it came from."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS

import wsealloc.api as ws
from wsealloc.arch import load_arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions
from wsealloc.cost.comm import MeshParams
from wsealloc.driver import start_layout
from wsealloc.frontend.sources import OnnxSource
from wsealloc.pipeline import build_costs
from wsealloc.plan.io import read_plan
from wsealloc.plan.pins import constraints_from_plan, start_from_plan
from wsealloc.plan.verify import verify_plan
from wsealloc.problem.flows import Flows
from wsealloc.problem.placement import INF, PlacementProblem, build_placement_problem, shape_table
from wsealloc.request import SolveRequest, StartKernel, StartLayout
from wsealloc.solvers import place
from wsealloc.solvers.base import SolveOptions
from wsealloc.solvers.fill import complete, shapes_by_speed
from wsealloc.solvers.strips import Placed, score

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"


def _problem(rows: int = 8, cols: int = 8, die: tuple[int, int] | None = None) -> PlacementProblem:
    """Two kernels of any shape on a ``rows`` x ``cols`` mesh (dies of ``die`` cores, crossing forbidden)."""
    best = np.full((1, cols + 1), INF, dtype=np.int64)
    best[:, 1:] = 10
    table = shape_table(np.array([rows]), best, np.zeros_like(best, dtype=np.int32))
    die_rows, die_cols = die or (rows, cols)
    mesh = MeshParams(rows, cols, die_rows, die_cols, 4.0, 1, die_rows, die_cols, 0)
    flows = Flows(np.array([0]), np.array([1]), np.array([4.0]), np.array([0]))
    rule = DieBoundary.FORBID if die else DieBoundary.IGNORE
    return PlacementProblem(("a", "b"), (0, 0), (table,), mesh, np.zeros((rows, cols), bool), rule, flows, 10)


def test_layout_errors_by_hand() -> None:
    p = _problem()
    ok = np.array([[0, 0, 8, 4], [0, 4, 8, 4]])
    assert p.layout_errors(ok) == []
    assert p.layout_errors(np.array([[0, 0, 8, 5], [0, 4, 8, 4]])) == ["two kernels share core [0, 4]"]
    assert p.layout_errors(np.array([[0, 0, 8, 4], [1, 4, 8, 4]])) == ["b at [1, 4] (8 x 4) leaves the 8 x 8 wafer"]
    assert p.layout_errors(ok[:1]) == ["1 rectangles for 2 kernels"]
    blocked = p.blocked.copy()
    blocked[7, 7] = True
    assert replace(p, blocked=blocked).layout_errors(ok) == ["b covers a defective or kept-out core"]
    # dies of 4 x 8 cores, crossing forbidden: a full-height kernel crosses one
    dies = _problem(die=(4, 8))
    assert dies.layout_errors(ok) == ["a crosses a die boundary", "b crosses a die boundary"]
    assert dies.layout_errors(np.array([[0, 0, 4, 8], [4, 0, 4, 8]])) == []
    # a user rule: b pinned at [0, 0]
    pinned = replace(p, pins=(None, (0, 0)))
    assert pinned.layout_errors(ok) == ["b at [0, 4], pinned at [0, 0]"]


@pytest.fixture(scope="module")
def old_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("start") / "old.json"
    ws.solve(TRANSFORMER, "tiny", output=out, time_limit=1.5)
    return out


def _costs():  # noqa: ANN202
    return build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), CostOptions())


def test_an_old_plan_is_a_start_where_it_still_holds(old_plan: Path) -> None:
    start = start_from_plan(old_plan)
    assert start is not None and len(start.kernels) == len(read_plan(old_plan).kernels)
    costs = _costs()
    problem = build_placement_problem(costs, lower_bound=0)
    said: list[str] = []
    forever = Deadline.after(60)
    placed = start_layout(start, costs, problem, forever, said.append)
    assert placed is not None and "starting from the layout of" in said[-1] and "anew" not in said[-1]
    old = read_plan(old_plan)
    # the start is the old layout, valued by today's model as the plan valued it
    stage, comm = problem.evaluate(placed.rects, placed.latency)
    assert problem.layout_time(stage, comm) == old.objective.value
    first, second = start.kernels[0], start.kernels[1]

    def fitted(kernels: tuple[StartKernel, ...], *anew: str) -> np.ndarray:
        out = start_layout(start.model_copy(update={"kernels": kernels}), costs, problem, forever, said.append)
        assert out is not None and problem.layout_errors(out.rects) == []
        assert f"{len(anew)} kernel(s) fitted anew: {', '.join(anew)}" in said[-1], said[-1]
        kept = [i for i, k in enumerate(costs.kernels) if k.kernel.name not in anew]
        assert np.array_equal(out.rects[kept], placed.rects[kept])  # every other kernel where it was
        return out.rects

    # a kernel the old plan lacks, an op model the tables do not have, one moved onto another kernel
    fitted(start.kernels[1:], first.name)
    huge = first.model_copy(update={"grid": (999, 999)})
    fitted((huge, *start.kernels[1:]), first.name)
    onto = (first, second.model_copy(update={"at": first.at}), *start.kernels[2:])
    fitted(onto, second.name)
    # more than half of them anew: not a start
    n = len(start.kernels)
    half = start.model_copy(update={"kernels": start.kernels[: n // 2 - 1]})
    assert start_layout(half, costs, problem, forever, said.append) is None
    assert said[-1].endswith(f"is not a start: {n - n // 2 + 1} of the {n} kernels would need new rectangles")
    # one kernel loses its rectangle and every core the old layout leaves free is blocked: it may only
    # displace kept kernels (fitted again, elsewhere: whether that cascade stays within half the
    # kernels depends on the old layout, which a 3 s solve makes; the hand-built cases below pin it
    # down); with the others pinned where they are it finds no room
    full = problem.blocked.copy()
    full[:] = True
    for y, x, r, c in placed.rects.tolist():
        full[y : y + r, x : x + c] = False
    y, x, r, c = placed.rects[0].tolist()
    full[y : y + r, x : x + c] = True
    out = start_layout(start, costs, replace(problem, blocked=full), forever, said.append)
    if out is not None:
        assert replace(problem, blocked=full).layout_errors(out.rects) == []
        assert f"fitted anew: {first.name}, " in said[-1]
    else:
        assert " is not a start: no room for " in said[-1]
    pins = tuple(None if i == 0 else (y, x) for i, (y, x, _, _) in enumerate(placed.rects.tolist()))
    assert start_layout(start, costs, replace(problem, blocked=full, pins=pins), forever, said.append) is None
    assert said[-1].endswith(f"is not a start: no room for {first.name}")


def test_a_new_pin_moves_its_kernel_and_what_it_lands_on(old_plan: Path) -> None:
    """The user pins the second kernel where the first one was: it goes there on its old grid, the
    first (the one kernel it lands on) is fitted again."""
    start = start_from_plan(old_plan)
    assert start is not None
    costs = _costs()
    base = build_placement_problem(costs, lower_bound=0)
    names = [k.kernel.name for k in costs.kernels]
    first, second = (names.index(start.kernels[i].name) for i in (0, 1))
    pins = tuple(start.kernels[0].at if k == second else None for k in range(len(names)))
    problem = replace(base, pins=pins)
    said: list[str] = []
    out = start_layout(start, costs, problem, Deadline.after(60), said.append)
    assert out is not None and problem.layout_errors(out.rects) == []
    assert tuple(out.rects[second, :2].tolist()) == start.kernels[0].at
    assert f"2 kernel(s) fitted anew: {names[second]}, {names[first]}" in said[-1]


def _row_problem(cols: int, *widths: dict[int, int]) -> PlacementProblem:
    """Kernels on a 4-row mesh of ``cols`` columns, each on 4-row rectangles whose legal widths and
    latencies are ``widths[k]`` (columns -> cycles), the first feeding the second."""
    rows = 4
    tables = []
    for legal in widths:
        lat = np.full((1, cols + 1), INF, dtype=np.int64)
        for c, cycles in legal.items():
            if c <= cols:
                lat[0, c] = cycles
        tables.append(shape_table(np.array([rows]), lat, np.zeros_like(lat, dtype=np.int32)))
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    flows = Flows(np.array([0]), np.array([1]), np.array([4.0]), np.array([0]))
    names = tuple("abcd"[: len(widths)])
    return PlacementProblem(
        names, tuple(range(len(widths))), tuple(tables), mesh, np.zeros((rows, cols), bool), DieBoundary.IGNORE, flows, 10
    )


def _complete(p: PlacementProblem, rects: list[list[int]], latency: list[int], known: list[bool]):  # noqa: ANN202
    r = np.array(rects)
    k = np.array(known)
    return complete(p, r, np.zeros(len(rects), np.int32), np.array(latency), k, r[:, :2].copy(), Deadline.after(60), k.copy())


def test_a_kernel_with_no_free_spot_displaces_the_kept_ones() -> None:
    """4 x 16 cores: a at [0, 0] and b at [0, 4], each 4 x 4, c and d 4 x 2 after them, the last four
    columns free. A rule now allows a only 6 to 8 columns (wider is faster): no free spot holds one,
    so a takes its old corner on 4 x 8 (latency 92) over b, and b is fitted again in the free columns
    on its old grid; c and d stay."""
    anywhere = {c: 50 for c in range(1, 17)}
    p = _row_problem(16, {c: 100 - c for c in (6, 7, 8)}, anywhere, anywhere, anywhere)
    rects = [[0, 0, 4, 4], [0, 4, 4, 4], [0, 8, 4, 2], [0, 10, 4, 2]]
    out = _complete(p, rects, [0, 50, 50, 50], [False, True, True, True])
    assert out.placed is not None and out.fitted == [0, 1] and out.stuck is None
    assert out.placed.rects.tolist() == [[0, 0, 4, 8], [0, 12, 4, 4], [0, 8, 4, 2], [0, 10, 4, 2]]
    assert out.placed.latency.tolist() == [92, 50, 50, 50]
    assert p.layout_errors(out.placed.rects) == []
    # two kernels only: the displacement fits both anew, more than half: without displacing a finds no room
    two = _row_problem(12, {c: 100 - c for c in (6, 7, 8)}, anywhere)
    out = _complete(two, rects[:2], [0, 50], [False, True])
    assert out.placed is None and out.stuck == 0


def test_a_cascade_that_strands_a_kernel_is_dropped_for_a_slower_shape_in_free_cores() -> None:
    """4 x 10 cores: a (4 x 7 at 40 cycles, or 4 x 4 at 90) lost its rectangle at [0, 0], b (4 x 4
    at 50, its only shape) is kept at [0, 4]. a displaces b on 4 x 7, but b then fits nowhere: the
    completion runs again without displacing and a takes 4 x 4 in its old place (the review's case)."""
    p = _row_problem(10, {7: 40, 4: 90}, {4: 50})
    out = _complete(p, [[0, 0, 4, 4], [0, 4, 4, 4]], [0, 50], [False, True])
    assert out.placed is not None and out.fitted == [0]
    assert out.placed.rects.tolist() == [[0, 0, 4, 4], [0, 4, 4, 4]] and out.placed.latency.tolist() == [90, 50]


def test_kernels_new_to_a_layout_fill_the_holes_they_fit() -> None:
    """4 x 12 cores: c (4 x 2 at [0, 3]) and d (4 x 3 at [0, 9]) kept, holes of 3 and 4 columns left;
    a and b are new (no old corner nor grid): a is fastest on 4 columns (40 cycles, 45 on 3), b has
    only 4 (50). Fitted in dataflow order, fastest first, a would take the 4-column hole and b find
    none; the larger kernel first, each where its border touches most, both fit exactly."""
    p = _row_problem(12, {3: 45, 4: 40}, {4: 50}, {2: 50}, {3: 50})
    rects = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, 3, 4, 2], [0, 9, 4, 3]])
    known = np.array([False, False, True, True])
    toward = np.where(known[:, None], rects[:, :2], -1)
    out = complete(p, rects, np.zeros(4, np.int32), np.array([0, 0, 50, 50]), known, toward, Deadline.after(60), known.copy())
    assert out.placed is not None and out.fitted == [1, 0] and out.stuck is None
    assert out.placed.rects[:2].tolist() == [[0, 0, 4, 3], [0, 5, 4, 4]]
    assert out.placed.latency.tolist() == [45, 50, 50, 50]
    assert p.layout_errors(out.placed.rects) == []


def _old_layout(old_plan: Path) -> tuple[PlacementProblem, Placed]:
    """The tiny transformer's placement problem and the old plan's layout as a start of it."""
    start = start_from_plan(old_plan)
    assert start is not None
    costs = _costs()
    problem = build_placement_problem(costs, lower_bound=0)
    rival = start_layout(start, costs, problem, Deadline.after(60), lambda _: None)
    assert rival is not None
    return problem, rival


@pytest.mark.slow
def test_an_old_layout_and_the_construction_s_best_are_both_improved(old_plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rival layout (the old plan's) and the construction's best are each improved (the moves, here
    replaced by a stand-in that records its inputs and makes the construction's best faster), and
    the better result is kept, whichever ranked better before the moves."""
    problem, rival = _old_layout(old_plan)
    seen: list[Placed] = []

    def moves(problem: PlacementProblem, placed: Placed, options: SolveOptions, made_by: str = "strips") -> tuple[Placed, str]:
        seen.append(placed)
        if placed is rival:
            return placed, "strips"
        return Placed(placed.rects, placed.dataflow, placed.latency // 2), "strips+relocate"

    monkeypatch.setattr(place, "improve", moves)
    result = place.solve(problem, SolveOptions(deadline=Deadline.after(10)), rival=rival)
    assert len(seen) == 2 and sum(p is rival for p in seen) == 1
    assert result.solver == "strips+relocate"
    assert result.objective is not None and result.objective < score(problem, rival)[0]


def test_a_layout_at_the_proven_bound_ends_the_search(old_plan: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start whose value reaches the bound the caller proved (``options.lower_bound``) is the
    result: no construction, no moves; without the bound, or above it, the search runs as before."""
    problem, rival = _old_layout(old_plan)
    value = place.evaluate(problem, rival)[0]
    calls: list[str] = []
    monkeypatch.setattr(place, "construct_best", lambda *a, **k: calls.append("construct"))
    monkeypatch.setattr(place, "improve", lambda problem, placed, options, *_: (calls.append("improve"), (placed, "strips"))[1])
    result = place.solve(problem, SolveOptions(deadline=Deadline.after(10), lower_bound=value), rival=rival)
    assert calls == [] and result.objective == value and result.rects is not None
    assert np.array_equal(result.rects, rival.rects)
    place.solve(problem, SolveOptions(deadline=Deadline.after(10), lower_bound=value - 1), rival=rival)
    assert calls == ["construct", "improve"]  # (the stand-in construction finds nothing: the rival alone is improved)
    # and the moves stop once a layout reaches it
    assert place.at_bound(problem, rival, SolveOptions(lower_bound=value))
    assert not place.at_bound(problem, rival, SolveOptions(lower_bound=value - 1))
    assert not place.at_bound(problem, rival, SolveOptions())


def test_shapes_by_speed_drop_what_a_faster_one_fits_inside() -> None:
    # heights 2 and 4 on 6 columns: 2 x 3 at 30, 2 x 6 at 20; 4 x 2 at 25, 4 x 3 at 30 (2 x 3 fits in it:
    # the best of 4 rows at 3 columns is the 2-row one), 4 x 6 at 10
    lat = np.full((2, 7), INF, dtype=np.int64)
    lat[0, 3], lat[0, 6] = 30, 20
    lat[1, 2], lat[1, 6] = 25, 10
    table = shape_table(np.array([2, 4]), lat, np.zeros_like(lat, dtype=np.int32))
    p = replace(_problem(rows=4, cols=6), shapes=(table,))
    assert shapes_by_speed(p, 0) == [(4, 6, 10, 0), (2, 6, 20, 0), (4, 2, 25, 0), (2, 3, 30, 0)]
    # (2 x 3 at 30 is slower than 4 x 2 but not inside it: kept after it; 4 x 3 is 2 x 3)


def test_a_re_solve_from_a_plan_is_never_worse_and_records_its_start(old_plan: Path, tmp_path: Path) -> None:
    old = read_plan(old_plan)
    names = [k.name for k in old.kernels]
    pins = constraints_from_plan(old_plan, [names[0], names[-1]])
    start = start_from_plan(old_plan)
    said: list[str] = []
    request = ws.build_request(TRANSFORMER, "tiny", constraints=pins, start=start, time_limit=1.5)
    out = ws.run(request, progress=said.append)
    assert any("starting from the layout of" in s for s in said), said
    assert out.plan.objective.value <= old.objective.value
    # the plan records the start with the request (a hint: verify rebuilds the same costs)
    path = tmp_path / "new.json"
    path.write_text(out.plan.to_json())
    assert read_plan(path).request.start == start  # type: ignore[union-attr]
    assert verify_plan(path).ok
    # a request without a start reads as before: no "start" key
    assert "start" not in json.loads(SolveRequest.model_validate(request.model_dump() | {"start": None}).model_dump_json())


def test_a_start_is_refused_for_a_contest_instance() -> None:
    start = StartLayout(source="old.json", kernels=(StartKernel(name="k", grid=(1, 1), dataflow="ws", at=(0, 0)),))
    with pytest.raises(Exception, match="placed by the contest engine: the start layout of old.json does not apply"):
        ws.build_request(next((MODELS.parent / "tests" / "data").rglob("*.kgraph")), start=start)


def test_a_corner_past_any_wafer_is_a_plan_error(old_plan: Path, tmp_path: Path) -> None:
    from wsealloc.errors import PlanError

    doc = json.loads(old_plan.read_text())
    doc["kernels"][0]["placement"] = [2**21, 0]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    name = doc["kernels"][0]["name"]
    with pytest.raises(PlanError, match=rf"bad.json: kernel {name}: at.0 input should be less than or equal to 1048576"):
        start_from_plan(bad)


def test_the_column_start_never_crosses_a_die_boundary_the_wafer_forbids(tmp_path: Path) -> None:
    """The regions' column layout (a start of a token's path) stacked a rectangle across dies with
    ``die_boundary: forbid`` and the plan failed ``verify``; every start is now checked as a layout."""
    out = tmp_path / "a.json"
    model = MODELS / "tiny" / "attention.onnx"
    ws.solve(model, "tiny", sets=["wafer.die_boundary=forbid"], objective="latency", time_limit=5, output=out)
    assert verify_plan(out).ok


def test_the_construction_keeps_the_clock_when_a_start_is_held() -> None:
    """Without a layout the construction runs past the time limit to its first one (a late valid plan
    beats none); with a start held it stops at the limit (the start is the plan then)."""
    from wsealloc.solvers.place import construct_best

    problem = build_placement_problem(_costs(), lower_bound=0)
    spent = Deadline.after(0.0)
    assert construct_best(problem, spent, held=False) is not None
    assert construct_best(problem, spent, held=True) is None
