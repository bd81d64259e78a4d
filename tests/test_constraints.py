"""User constraints (``--constraints``): the file format, each rule kind in each solver against brute
force, the placement honouring corners, areas and keep-outs, conflicts explained by line, the
verifier's tamper cases and ``--from-plan``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS

import wsealloc.api as ws
from wsealloc.arch import load_arch
from wsealloc.budget import Deadline
from wsealloc.constraints import parse_constraints
from wsealloc.cost import CostOptions, Dataflow
from wsealloc.errors import ConflictError, ConstraintError, UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import Reason
from wsealloc.pipeline import build_costs
from wsealloc.plan.verify import verify_plan
from wsealloc.problem import build_problem
from wsealloc.solvers import SolveOptions, Status, get_solver

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"


def _rules(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the file format


def test_every_kind_parses_with_its_line() -> None:
    c = parse_constraints(
        """
- grid: l0.qkv
  shape: 4x6
- grid: {op: MatMul, range: [l1.ln1, lm_head]}
  rows: [null, 8]
  cores: [2, 40]
  dataflow: weight_stationary
- place: embed
  at: [0, 0]
- place: [l0.softmax, "l1.soft*"]
  within: {rows: [0, 7], cols: [12, 23]}
- keep-out: {rows: [14, 15]}
- together: {range: [l0.ln1, l0.fc2]}
  how: wafer
- cut: l0.fc2
  must: false
- together: [l1.qkv, l1.scores]
  how: touch
""",
        "c.yaml",
    )
    assert [r.kind for r in c.rules] == ["grid", "grid", "place", "place", "keep-out", "together", "cut", "together"]
    assert [r.line for r in c.rules] == [2, 4, 8, 10, 12, 13, 15, 17]
    assert c.rules[7].how.value == "touch" and "side by side" in c.rules[7].text()
    assert c.rules[0].shape == (4, 6)
    assert c.rules[1].dataflow is Dataflow.WEIGHT_STATIONARY and c.rules[1].rows.max == 8
    assert c.rules[4].area.box(16, 24) == (14, 0, 2, 24)  # inclusive rows 14-15, every column
    assert c.where(c.rules[2]) == "c.yaml line 8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- grid: a\n  shape: 4y6\n", "c.yaml line 1: shape takes RxC"),
        ("- grid: a\n  colour: red\n", "c.yaml line 1: grid takes shape, rows, cols, cores, dataflow; unknown field(s) colour"),
        ("- grid: a\n  place: b\n", "c.yaml line 1: an entry has one kind key"),
        ("- grid: a\n  dataflow: diagonal\n", "unknown dataflow 'diagonal'"),
        ("- grid: a\n", "a grid rule needs shape"),
        ("- place: a\n", "a place rule takes at"),
        ("- keep-out: {rows: [9, 3]}\n", "rows [9, 3]: the first is after the last"),
        ("- grid: a\n  rows: [8, 2]\n", "bounds [8, 2]: min is above max"),
        ("grid: a\n", "c.yaml: expected a list of rules"),
        ("- grid: a\n  shape: 2x2\n  shape: 3x3\n", "key 'shape' is given twice"),
        ("- grid: {colour: x}\n  shape: 2x2\n", "a selection takes name(s), op(s) or range"),
    ],
)
def test_malformed_files_name_the_line(text: str, message: str) -> None:
    with pytest.raises(
        ConstraintError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")
    ):
        parse_constraints(text, "c.yaml")


def test_a_rule_selecting_nothing_is_an_error_naming_close_kernels(tmp_path: Path) -> None:
    with pytest.raises(ConstraintError, match=r"c.yaml line 1: l0.qvk selects no kernel.*close names: l0.qkv"):
        ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, "- grid: l0.qvk\n  shape: 2x2\n"), place=False)


@pytest.mark.parametrize(
    "text",
    [
        "- together: [l0.softmax, l0.contxt]\n  how: touch\n",  # a touch group of one would constrain nothing
        "- grid: [l0.fc1, l0.fcc2]\n  shape: 4x8\n",
        "- grid: [l0.fc1, 'l9.*']\n  shape: 4x8\n",  # a glob too
    ],
)
def test_each_name_of_a_list_must_select_a_kernel(tmp_path: Path, text: str) -> None:
    """A misspelt entry beside a good one is refused, not dropped: the rule would be weaker than written
    and the plan would still call it honoured."""
    with pytest.raises(ConstraintError, match=r"c.yaml line 1: '(l0.contxt|l0.fcc2|l9.\*)' in the list selects no kernel"):
        ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), place=False)


def test_rules_no_solver_can_honour_are_refused_up_front(tmp_path: Path) -> None:
    """Rules on own rectangles cannot hold on a fixed region grid (``--grid``) nor beside region groups;
    region groups need the sharing search (``--share auto``)."""
    decode = MODELS / "tiny" / "llm_decode.onnx"
    path = _rules(tmp_path, "- grid: layers.0.q_proj\n  shape: 2x2\n")
    with pytest.raises(UsageError, match="line 1: a grid rule applies to kernels that own their rectangle"):
        ws.solve(decode, "tiny", constraints=path, objective="latency", context=16, grid=(4, 4))
    region = _rules(tmp_path, "- together: [l0.qkv, l0.scores]\n  how: region\n", "r.yaml")
    with pytest.raises(UsageError, match="only --share auto chooses"):
        ws.solve(TRANSFORMER, "tiny", constraints=region)
    text = "- together: [layers.0.scores, layers.0.context]\n  how: region\n- grid: layers.0.q_proj\n  shape: 2x2\n"
    both = _rules(tmp_path, text, "b.yaml")
    with pytest.raises(UsageError, match="line 3: a grid rule applies to kernels that own their rectangle and .*b.yaml line 1"):
        ws.solve(decode, "tiny", constraints=both, objective="latency", context=16)
    touch = _rules(tmp_path, "- together: [layers.0.q_proj, layers.0.scores]\n  how: touch\n", "t.yaml")
    with pytest.raises(UsageError, match="line 1: a together-touch rule applies to kernels that own their rectangle"):
        ws.solve(decode, "tiny", constraints=touch, objective="latency", context=16, grid=(4, 4))


@pytest.mark.parametrize("place", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_rules_on_own_rectangles_under_share_auto_choose_own_rectangles(tmp_path: Path, place: bool) -> None:
    """``--share auto`` chooses between regions and own rectangles: rules on own rectangles (a grid, a
    corner) choose own rectangles, the decision says which rule, and the plan verifies; so a plan made
    with own rectangles re-solves with ``--from-plan`` as the user asked it (it was refused, naming a
    grid rule the user never wrote). Placed, the re-solve keeps every grid and corner."""
    decode = MODELS / "tiny" / "llm_decode.onnx"
    options = {"objective": "latency", "context": 16, "requests": 16, "time_limit": 10, "place": place}
    path = _rules(tmp_path, "- grid: layers.0.q_proj\n  shape: 2x2\n")
    out = ws.solve(decode, "tiny", constraints=path, output=tmp_path / "p.json", **options)  # type: ignore[arg-type]
    decision = out.plan.decision
    assert decision.strategy == "regions" and decision.runs == ()  # type: ignore[attr-defined]
    assert "c.yaml line 1: a grid rule" in decision.reason
    assert next(k.grid for k in out.plan.kernels if k.name == "layers.0.q_proj") == (2, 2)
    assert out.plan.objective.constraints is not None and out.plan.objective.constraints.unconstrained_bound_cycles
    assert verify_plan(tmp_path / "p.json").ok
    # the whole plan again, from itself: every grid (and corner) kept
    from wsealloc.cli.options import user_constraints

    again = ws.solve(
        decode,
        "tiny",
        constraints=user_constraints(None, str(tmp_path / "p.json"), ()),
        output=tmp_path / "q.json",
        **options,  # type: ignore[arg-type]
    )
    assert [(k.grid, k.placement) for k in again.plan.kernels] == [(k.grid, k.placement) for k in out.plan.kernels]
    assert verify_plan(tmp_path / "q.json").ok
    if place:
        return
    # the price's reference is what --share auto proves without the rules, regions included: at one
    # request they reach 1,025 cycles, and a keep-out's price was stated against own rectangles' 1,298
    one = {**options, "requests": 1}
    kept = ws.solve(decode, "tiny", constraints=_rules(tmp_path, "- keep-out: {rows: [0, 1]}\n", "k.yaml"), **one).plan  # type: ignore[arg-type]
    free = ws.solve(decode, "tiny", **one).plan.objective  # type: ignore[arg-type]
    record = kept.objective.constraints
    assert record is not None and not record.unconstrained_optimal
    assert record.unconstrained_bound_cycles is not None and record.unconstrained_bound_cycles <= free.value


# ---------------------------------------------------------------- every solver against brute force

GRID_RULES = """
- grid: l0.fc1
  shape: 4x4
- grid: {op: MatMul, range: [l1.ln1, lm_head]}
  rows: [2, 8]
  cores: [null, 24]
- grid: l0.qkv
  dataflow: output_stationary
- keep-out: {rows: [12, 15], cols: [0, 23]}
"""


def _allowed(costs_before, name: str, r: np.ndarray, c: np.ndarray, df: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """The rules of GRID_RULES written out again for one kernel, from their definitions."""
    names = [kc.kernel.name for kc in costs_before.kernels]
    ok = r <= 12  # the keep-out leaves 12 free rows over the whole width
    if name == "l0.fc1":
        ok &= (r == 4) & (c == 4)
    i = names.index(name)
    if names.index("l1.ln1") <= i and costs_before.kernels[i].kernel.anchor_op == "MatMul":
        ok &= (r >= 2) & (r <= 8) & (r * c <= 24)
    if name == "l0.qkv":
        ok &= df == list(Dataflow).index(Dataflow.OUTPUT_STATIONARY)
    return ok


def _brute_force_optimum(tmp_path: Path) -> tuple[int, int]:
    """(min-max optimum, total cores) under GRID_RULES from the unconstrained op-model tables, by scanning
    every latency value (no solver, no frontier)."""
    arch = load_arch("tiny")
    before = build_costs(OnnxSource(path=str(TRANSFORMER)), arch, CostOptions())
    total = arch.total_cores - 4 * 24
    per_kernel = []
    for kc in before.kernels:
        t = kc.table
        ok = t.legal() & _allowed(before, kc.kernel.name, t.r, t.c, t.dataflow)
        per_kernel.append((t.latency[ok], t.cores[ok]))
    values = np.unique(np.concatenate([lat for lat, _ in per_kernel]))
    for value in values.tolist():
        need = sum(int(cores[lat <= value].min()) if (lat <= value).any() else 10**9 for lat, cores in per_kernel)
        if need <= total:
            return value, total
    raise AssertionError("the rules leave no allocation")


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "bisect", "greedy"])
def test_each_solver_honours_grid_rules_and_exact_ones_match_brute_force(tmp_path: Path, solver: str) -> None:
    path = _rules(tmp_path, GRID_RULES)
    out = ws.solve(TRANSFORMER, "tiny", constraints=path, solver=solver, place=False, time_limit=20)
    expected, total = _brute_force_optimum(tmp_path)
    plan = out.plan
    before = out.costs.unconstrained
    assert before is not None
    by_name = {k.name: k for k in plan.kernels}
    for kc in before.kernels:
        k = by_name[kc.kernel.name]
        df = np.array([list(Dataflow).index(Dataflow(k.dataflow))])
        assert _allowed(before, k.name, np.array([k.grid[0]]), np.array([k.grid[1]]), df)[0], k
    assert plan.objective.cores_used <= total
    if solver == "greedy":
        assert plan.objective.value >= expected
    else:
        assert plan.objective.value == expected
        assert plan.objective.status == "OPTIMAL"


AREA_RULES = """
- place: {range: [l1.ln1, l1.fc2]}
  within: {rows: [8, 15], cols: [0, 11]}
- keep-out: {rows: [12, 13], cols: [0, 3]}
"""


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "bisect", "greedy"])
def test_an_area_is_a_core_budget_every_solver_keeps(tmp_path: Path, solver: str) -> None:
    """Layer 1 kept in an 8 x 12 area holding a 2 x 4 keep-out: its kernels share the area's 88 free
    cores, every kernel's grid must fit clear of the keep-out; brute force scans every latency value."""
    out = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, AREA_RULES), solver=solver, place=False, time_limit=20)
    before = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), CostOptions())
    names = [kc.kernel.name for kc in before.kernels]
    inside = set(range(names.index("l1.ln1"), names.index("l1.fc2") + 1))
    per_kernel = []
    for i, kc in enumerate(before.kernels):
        t = kc.table
        ok = t.legal() & ((t.r <= 12) | (t.c <= 20))  # on the wafer: rows 12-13 are blocked in cols 0-3
        if i in inside:  # in the area: 8 x 12, and a grid wider than 8 cannot pass the block's 2 rows
            ok &= (t.r <= 8) & (t.c <= 12) & ((t.c <= 8) | (t.r <= 4))
        per_kernel.append((t.latency[ok], t.cores[ok]))
    expected = None
    for value in np.unique(np.concatenate([lat for lat, _ in per_kernel])).tolist():
        fewest = [int(c[lat <= value].min()) if (lat <= value).any() else 10**9 for lat, c in per_kernel]
        if sum(fewest) <= 384 - 8 and sum(fewest[i] for i in inside) <= 96 - 8:
            expected = value
            break
    assert expected is not None
    used = sum(k.cores for k in out.plan.kernels if names.index(k.name) in inside)
    assert used <= 88
    if solver == "greedy":
        assert out.plan.objective.value >= expected
    else:
        assert out.plan.objective.value == expected


def test_the_bound_is_the_bound_under_the_constraints_and_the_price_is_reported(tmp_path: Path) -> None:
    free = ws.solve(TRANSFORMER, "tiny", place=False)
    pinned = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, GRID_RULES), place=False)
    assert pinned.plan.objective.bound_cycles >= free.plan.objective.bound_cycles
    price = pinned.plan.objective.constraints
    assert price is not None and price.unconstrained_bound_cycles == free.plan.objective.bound_cycles
    assert price.rules == 4 and price.source.endswith("c.yaml")


def test_class_symmetry_splits_a_class_a_rule_pins_one_member_of(tmp_path: Path) -> None:
    costs = build_costs(
        OnnxSource(path=str(TRANSFORMER)),
        load_arch("tiny"),
        CostOptions(),
        constraints=parse_constraints("- grid: l0.fc1\n  shape: 4x4\n", "c.yaml"),
    )
    by = {kc.kernel.name: kc for kc in costs.kernels}
    assert by["l0.fc1"].signature != by["l1.fc1"].signature  # identical layers, one of them pinned
    assert by["l0.qkv"].signature == by["l1.qkv"].signature
    problem = build_problem(costs)
    result = get_solver("cpsat")(problem, SolveOptions())
    assert result.status is Status.OPTIMAL
    fc1 = problem.names.index("l0.fc1")
    assert int(problem.choices(fc1).cores[result.choice[fc1]]) == 16
    pinned_rows = by["l0.fc1"].table
    assert (pinned_rows.reason[(pinned_rows.r != 4) | (pinned_rows.c != 4)] != Reason.LEGAL).all()


# ---------------------------------------------------------------- placement: corners, areas, keep-outs

PLACE_RULES = """
- place: embed
  at: [0, 0]
- place: lm_head
  at: [8, 20]
- place: {range: [l1.ln1, l1.fc2]}
  within: {rows: [8, 15], cols: [0, 11]}
- keep-out: {rows: [0, 3], cols: [16, 23]}
- keep-out: {rows: [4, 7], cols: [22, 23]}
"""


def test_the_placement_honours_corners_areas_and_keep_outs_and_verifies(tmp_path: Path) -> None:
    out = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, PLACE_RULES), time_limit=2, output=tmp_path / "p.json")
    plan = out.plan
    assert plan.objective.placed
    by = {k.name: k for k in plan.kernels}
    assert by["embed"].placement == (0, 0) and by["lm_head"].placement == (8, 20)
    keep = np.zeros((16, 24), dtype=bool)
    keep[0:4, 16:24] = keep[4:8, 22:24] = True
    for k in plan.kernels:
        y, x = k.placement
        r, c = k.grid
        assert not keep[y : y + r, x : x + c].any(), k.name
        if k.name.startswith("l1."):
            assert y >= 8 and y + r <= 16 and x + c <= 12, k.name
    assert verify_plan(tmp_path / "p.json").ok


# two corners in the middle of the 16 x 24 wafer and two 13-row grids: no band of the full width
# slides past both corners; bands planned around them (``band_plan_around``) and the first-fit
# fallback both place every kernel
MIDDLE_PINS = """
- place: l0.ln2
  at: [5, 8]
- place: l1.ln2
  at: [10, 16]
- grid: [l0.qkv, l1.qkv]
  shape: 13x3
"""


@pytest.mark.slow
def test_corners_in_the_middle_of_the_wafer_are_placed_around(tmp_path: Path) -> None:
    from wsealloc.problem.placement import build_placement_problem
    from wsealloc.solvers import strips
    from wsealloc.solvers.strips import Style, construct, slowest

    path = _rules(tmp_path, MIDDLE_PINS)
    free = ws.solve(TRANSFORMER, "tiny", place=False, time_limit=5, constraints=path)
    problem = build_placement_problem(free.costs, lower_bound=0)
    targets = np.full(problem.n_kernels, slowest(problem))
    with pytest.MonkeyPatch.context() as m:  # bands of the full width alone: no layout at any target
        m.setattr(strips, "band_plan_around", lambda *args, **kwargs: None)
        assert construct(problem, targets) is None
    for style in (Style(), Style(first_fit=True)):
        # a caller keeping the clock is not held past it by one construction (the band plans around
        # an old plan's hundreds of corners take seconds): a passed deadline gives no layout
        assert construct(problem, targets, style, Deadline.after(0.0)) is None
        placed = construct(problem, targets, style, Deadline.after(60.0))
        assert placed is not None and not problem.violations(placed.rects)
        taken = np.zeros((16, 24), dtype=int)
        for y, x, r, c in placed.rects.tolist():
            taken[y : y + r, x : x + c] += 1
        assert taken.max() == 1  # no two kernels share a core
        assert (placed.latency <= targets).all()
    out = ws.solve(TRANSFORMER, "tiny", constraints=path, time_limit=2, output=tmp_path / "p.json")
    by = {k.name: k for k in out.plan.kernels}
    assert by["l0.ln2"].placement == (5, 8) and by["l1.ln2"].placement == (10, 16)
    assert by["l0.qkv"].grid == (13, 3) and by["l1.qkv"].grid == (13, 3)
    assert verify_plan(tmp_path / "p.json").ok


TOUCH_RULES = """
- together: {range: [l0.qkv, l0.fc2]}
  how: touch
- place: l0.softmax
  at: [6, 9]
- together: [embed, l1.fc2, lm_head]
  how: touch
- keep-out: {rows: [0, 3], cols: [16, 23]}
"""


def test_touching_and_connected_by_hand() -> None:
    from wsealloc.constraints.geometry import connected, touching

    a = (0, 0, 2, 3)  # rows 0-1, cols 0-2
    assert touching(a, (0, 3, 5, 1)) and touching(a, (2, 2, 1, 4))  # beside it; below it sharing col 2
    assert not touching(a, (2, 3, 1, 1))  # corners meeting diagonally
    assert not touching(a, (0, 4, 2, 1))  # a column apart
    assert connected([a, (2, 0, 1, 1), (3, 0, 1, 9)])  # a chain: the first and the last touch through the middle
    assert not connected([a, (2, 0, 1, 1), (5, 0, 1, 9)])
    assert connected([a]) and connected([])


@pytest.mark.parametrize(
    "time_limit",
    [
        2,  # the construction's layout (the search gets what is left, here without finding better)
        # 10 s: the search improves the layout (5 s); run by .ci/run (pytest -m slow)
        pytest.param(10, marks=pytest.mark.slow),
    ],
)
def test_a_touch_group_is_placed_side_by_side_and_verify_checks_it(tmp_path: Path, time_limit: float) -> None:
    from wsealloc.constraints.geometry import connected

    out = ws.solve(
        TRANSFORMER, "tiny", constraints=_rules(tmp_path, TOUCH_RULES), time_limit=time_limit, output=tmp_path / "p.json"
    )
    by = {k.name: k for k in out.plan.kernels}
    assert by["l0.softmax"].placement == (6, 9)
    for group in (
        ["l0.qkv", "l0.scores", "l0.softmax", "l0.context", "l0.proj", "l0.ln2", "l0.fc1", "l0.fc2"],
        ["embed", "l1.fc2", "lm_head"],
    ):
        boxes = [(*by[n].placement, *by[n].grid) for n in group]  # type: ignore[misc]
        assert connected(boxes), group
    assert verify_plan(tmp_path / "p.json").ok
    # lm_head moved to the wafer's far corner (as one core): it no longer touches embed nor l1.fc2
    far = _tamper(tmp_path / "p.json", tmp_path, lambda k: k["lm_head"].update(placement=[15, 23], grid=[1, 1]))
    hits = [v for v in verify_plan(far).violations if "do not touch" in v]
    assert hits and "c.yaml line 6" in hits[0], verify_plan(far).violations


def test_allocation_leaves_the_keep_out_cores(tmp_path: Path) -> None:
    # 16 x 24 = 384 cores, 336 left beside two rows kept out: the allocation may not count on them
    rules = _rules(tmp_path, "- keep-out: {rows: [0, 1]}\n")
    out = ws.solve(TRANSFORMER, "tiny", constraints=rules, place=False)
    assert out.costs.total_cores == 384 - 48
    assert out.plan.objective.cores_used <= 336


# ---------------------------------------------------------------- conflicts, named by line

CONFLICTS = [
    (  # 1. conflicting pins of one kernel
        "- place: embed\n  at: [0, 0]\n- grid: l0.qkv\n  rows: [1, 2]\n- place: embed\n  at: [4, 4]\n",
        ["c.yaml line 1", "line 5"],
        "a kernel has one corner",
    ),
    (  # 2. a pin beyond the wafer
        "- grid: l0.qkv\n  rows: [1, 2]\n- place: l0.fc1\n  at: [3, 30]\n",
        ["c.yaml line 3"],
        "beyond the 16x24 wafer",
    ),
    (  # 3. keep-outs that leave too few cores
        "- keep-out: {rows: [0, 14]}\n- grid: l0.qkv\n  rows: [1, 2]\n- grid: {op: MatMul}\n  cores: [8, null]\n",
        ["c.yaml line 1", "line 4"],
        "together they need",
    ),
    (  # 4. an SRAM-infeasible grid (fc1's weights do not fit one core of 24 KiB)
        "- grid: embed\n  cores: [1, 4]\n- grid: l0.fc1\n  shape: 1x1\n",
        ["c.yaml line 3"],
        "the grids the rules allow (1x1) are not legal: SRAM per core over the usable SRAM",
    ),
    (  # 5. a fixed grid and a keep-out: no 16-row column is left
        "- grid: l0.fc1\n  rows: [16, 16]\n- keep-out: {rows: [7, 7], cols: [0, 23]}\n- grid: embed\n  cores: [1, 4]\n",
        ["c.yaml line 1", "line 3"],
        "leave l0.fc1 no legal op model",
    ),
    (  # 6. two pinned kernels on one corner
        "- place: embed\n  at: [2, 2]\n- place: lm_head\n  at: [2, 2]\n- grid: l0.qkv\n  rows: [1, 2]\n",
        ["c.yaml line 1", "line 3"],
        "overlapping whatever grids they take",
    ),
    (  # 7. an area too small for the kernels kept in it
        "- place: {range: [l0.ln1, l1.fc2]}\n  within: {rows: [0, 1], cols: [0, 9]}\n- grid: embed\n  cores: [1, 4]\n"
        "- grid: {op: MatMul}\n  cores: [2, null]\n",
        ["c.yaml line 1", "line 5"],
        "needing",
    ),
    (  # 8. areas that do not meet
        "- place: l0.fc1\n  within: {rows: [0, 3]}\n- grid: embed\n  cores: [1, 4]\n- place: l0.fc1\n  within: {rows: [8, 15]}\n",
        ["c.yaml line 1", "line 5"],
        "the areas do not meet",
    ),
    (  # 9. a corner inside a keep-out
        "- keep-out: {rows: [0, 3], cols: [0, 3]}\n- grid: embed\n  cores: [1, 4]\n- place: l0.fc1\n  at: [1, 1]\n",
        ["c.yaml line 1", "line 4"],
        "leave l0.fc1 no legal op model",
    ),
    (  # 10. a cut on a single wafer
        "- grid: embed\n  cores: [1, 4]\n- cut: l0.fc2\n",
        ["c.yaml line 3"],
        "the plan has one wafer",
    ),
    (  # 11. a group side by side whose corners are too far apart for any grids they may take
        "- place: embed\n  at: [0, 0]\n- grid: embed\n  shape: 1x1\n- keep-out: {rows: [12, 15]}\n"
        "- place: lm_head\n  at: [8, 20]\n- together: [embed, lm_head]\n  how: touch\n",
        ["c.yaml line 1", "line 3", "line 6", "line 8"],
        "no grids they may take put their rectangles side by side",
    ),
    (  # 12. a touch group pinned at opposite corners whose free member is too small to join them (issue 37)
        "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [15, 23]\n- grid: [embed, lm_head]\n  shape: 1x1\n"
        "- grid: l0.ln1\n  cores: [1, 4]\n- grid: l0.qkv\n  cores: [1, 4]\n- together: [embed, l0.ln1, lm_head]\n  how: touch\n",
        ["c.yaml line 1", "line 3", "line 5", "line 7", "line 11"],
        "14 rows between them that no grid the pinned members may take covers, and its free members (l0.ln1) span at most 4 rows",
    ),
    (  # 13. a touch group kept in areas that never meet (a placement failure naming no rule before)
        "- place: l0.fc1\n  within: {rows: [0, 3]}\n- grid: embed\n  cores: [1, 4]\n- place: l0.fc2\n  within: {rows: [10, 15]}\n"
        "- together: [l0.fc1, l0.fc2]\n  how: touch\n",
        ["c.yaml line 1", "line 5", "line 7"],
        "where they may lie never meets",
    ),
]


@pytest.mark.parametrize(("text", "lines", "what"), CONFLICTS, ids=[f"kind{i + 1}" for i in range(len(CONFLICTS))])
def test_conflicts_name_a_small_subset_by_line(tmp_path: Path, text: str, lines: list[str], what: str) -> None:
    sets = ["core.sram_bytes=24KiB"] if "SRAM" in what else []
    with pytest.raises(ConflictError) as info:
        ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), place=False, sets=sets)
    message = str(info.value)
    assert what in message, message
    for line in lines:
        assert line in message, message
    named = len(re.findall(r"\bline \d", message))
    assert named == len(lines), message  # nothing beyond the conflicting rules (the unrelated ones are not named)
    assert info.value.exit_code == 3


@pytest.mark.parametrize(
    ("sets", "text", "lines"),
    [
        (["wafer.defects.cores=[[5,5]]"], "- grid: embed\n  cores: [1, 4]\n- place: l0.fc1\n  at: [5, 5]\n", ["c.yaml line 3"]),
        (  # 8-row dies: a 4 x 4 grid from row 6 crosses one, which the arch forbids
            ["wafer.die_boundary=forbid"],
            "- place: l0.fc1\n  at: [6, 0]\n- grid: embed\n  cores: [1, 4]\n- grid: l0.fc1\n  shape: 4x4\n",
            ["c.yaml line 1", "line 5"],
        ),
    ],
    ids=["defective-corner", "die-crossing"],
)
def test_a_corner_whose_rectangles_the_wafer_forbids_is_a_conflict(
    tmp_path: Path, sets: list[str], text: str, lines: list[str]
) -> None:
    """A fixed corner's rectangle must miss the defective cores and the die boundaries the arch
    forbids, as it misses keep-outs: else a conflict naming the rules (it was a placement failure that
    blamed "too little room" and named none)."""
    with pytest.raises(ConflictError) as info:
        ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), place=False, sets=sets)
    message = str(info.value)
    assert "leave l0.fc1 no legal op model" in message and info.value.exit_code == 3, message
    for line in lines:
        assert line in message, message
    assert len(re.findall(r"\bline \d", message)) == len(lines), message


def test_the_corner_pairs_tested_at_once_are_the_pairs_tested_one_by_one() -> None:
    """``conflicts._corners_near`` (every pinned kernel against the ones after it, at once) finds the
    pairs ``_corner_cover`` finds pair by pair, on random corners and grid rules of every kernel."""
    from wsealloc.solvers.conflicts import _corner_cover, _corners_near

    rng = np.random.default_rng(3)
    base = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), CostOptions())
    names = [kc.kernel.name for kc in base.kernels]
    covers = 0
    for _ in range(20):
        rules = []
        for name in names:
            if rng.random() < 0.8:
                rules.append(f"- place: {name}\n  at: [{rng.integers(0, 4)}, {rng.integers(0, 6)}]\n")  # (crowded: many covers)
            if rng.random() < 0.5:
                rules.append(f"- grid: {name}\n  rows: [{rng.integers(1, 5)}, 16]\n  cols: [{rng.integers(1, 5)}, 24]\n")
        costs = build_costs(
            OnnxSource(path=str(TRANSFORMER)),
            load_arch("tiny"),
            CostOptions(),
            check_feasible=False,
            constraints=parse_constraints("".join(rules), "c.yaml"),
        )
        applied = costs.applied
        assert applied is not None
        index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
        pinned = [index[name] for name, _, _ in applied.pins]
        near = _corners_near(costs, pinned)
        for i, a in enumerate(pinned):
            assert near[i] == [b for b in pinned[i + 1 :] if _corner_cover(costs, a, b)]
        covers += sum(len(n) for n in near)
    assert covers > 100  # (the corners are crowded enough to test both answers)


# two 2 x 2 kernels pinned in row 0, l0.ln2 (free) between them in their touch group
TOUCH_APART = """- place: l0.fc1
  at: [0, 0]
- grid: l0.fc1
  shape: 2x2
- place: l0.fc2
  at: {at}
- grid: l0.fc2
  shape: 2x2
- together: [l0.fc1, l0.ln2, l0.fc2]
  how: touch
"""


@pytest.mark.parametrize("col", [4, 6, 8])
def test_a_free_member_joins_pins_apart(tmp_path: Path, col: int) -> None:
    """QA: a touch group whose free member must lie between its two pins found no layout (exit 3, "no
    layout found joins"): each member took the spot nearest the member before it, here one core beside
    l0.fc1. Columns 2..col-1 lie between the pins; the fewest cores that touch both are one row of
    exactly those columns beside them (one under both would need col columns; none fits above them;
    l0.ln2 takes one row of up to 22 columns), at the top: [0, 2], 1 x (col - 2)."""
    from wsealloc.constraints.geometry import connected

    path = _rules(tmp_path, TOUCH_APART.format(at=f"[0, {col}]"))
    out = ws.solve(TRANSFORMER, "tiny", constraints=path, time_limit=2, output=tmp_path / "p.json")
    by = {k.name: k for k in out.plan.kernels}
    assert by["l0.fc1"].placement == (0, 0) and by["l0.fc2"].placement == (0, col)
    assert by["l0.ln2"].placement == (0, 2) and by["l0.ln2"].grid == (1, col - 2)
    assert connected([(*by[n].placement, *by[n].grid) for n in ("l0.fc1", "l0.ln2", "l0.fc2")])  # type: ignore[misc]
    assert verify_plan(tmp_path / "p.json").ok


@pytest.mark.slow
def test_pins_at_opposite_corners_are_joined_across_the_wafer(tmp_path: Path) -> None:
    """Issue 37's case (no layout was found, exit 3): embed at [0, 0] and lm_head at [15, 23], the
    wafer's last core (so one core), l0.ln1 free between them. l0.ln1 may take a rectangle of all 16
    rows from embed's right edge to column 22 (beside both), or of all 24 columns from under embed to
    row 14 (under embed, over lm_head): the group is joined and the plan verifies."""
    from wsealloc.constraints.geometry import connected

    text = "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [15, 23]\n- together: [embed, l0.ln1, lm_head]\n  how: touch\n"
    out = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), time_limit=2, output=tmp_path / "p.json")
    by = {k.name: k for k in out.plan.kernels}
    assert by["lm_head"].placement == (15, 23) and by["lm_head"].grid == (1, 1)
    assert connected([(*by[n].placement, *by[n].grid) for n in ("embed", "l0.ln1", "lm_head")])  # type: ignore[misc]
    assert verify_plan(tmp_path / "p.json").ok


@pytest.mark.parametrize(
    ("fc2", "what"),
    [
        # diagonal, two rows and two columns apart: a rectangle touching both spans rows 1-4 beside them
        # or columns 1-4 between them (8 cores at least), and l0.ln2 may take 4: no conflict is proven
        # (2 rows and 2 columns between them, l0.ln2 spans 4), but no layout joins them
        (
            "[4, 4]",
            "no layout found joins the pinned members of {path} line 9 keeps l0.ln2, l0.fc1, l0.fc2 side by side: move a pin",
        ),
        # ten columns apart in row 0: l0.ln2 spans 4 at most, the conflict test proves it
        (
            "[0, 12]",
            "line 9 keeps l0.fc1, l0.ln2, l0.fc2 side by side (touching); line 11 bounds l0.ln2: cores 1..4: together "
            "they keep l0.fc1 at [0, 0] and l0.fc2 at [0, 12] in one group side by side: 10 columns between them",
        ),
    ],
)
def test_a_touch_group_no_layout_joins_names_its_line(tmp_path: Path, fc2: str, what: str) -> None:
    """A touch group no layout joins: exit 3 naming the touch rule's line, not a bare "no placement fits"
    (the conflict test first; what it does not prove, the placement's message after its search)."""
    from conftest import run

    text = TOUCH_APART.format(at=fc2) + "- grid: l0.ln2\n  cores: [1, 4]\n"
    done = run("solve", str(TRANSFORMER), "--arch", "tiny", "--constraints", str(_rules(tmp_path, text)), "--time-limit", "5")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and len(lines) == 1, done.stderr
    assert what.format(path=tmp_path / "c.yaml") in lines[0], lines[0]


def test_cut_rules_that_overfill_a_wafer_are_explained(tmp_path: Path) -> None:
    # tiny wafers of 4 cores each: 21 kernels need 6 wafers; cuts forced after every kernel but the first
    # four leave a stage of five kernels on one 4-core wafer
    cuts = "".join(f"- cut: {name}\n" for name in ("l0.ln2", "l0.fc1", "l0.fc2", "l1.ln1"))
    text = "- together: {range: [embed, l0.proj]}\n  how: wafer\n" + cuts
    with pytest.raises(ConflictError, match=r"c.yaml line 1 keeps embed..l0.proj on one wafer.*leave no pipeline") as info:
        ws.solve(
            TRANSFORMER,
            "tiny",
            constraints=_rules(tmp_path, text),
            place=False,
            wafers="auto",
            sets=["wafer.dies.rows=1", "wafer.dies.cols=1", "wafer.die_cores.rows=2", "wafer.die_cores.cols=2"],
        )
    assert "cuts after" not in str(info.value)  # the cuts are not part of this conflict


def test_cut_and_together_shape_the_pipeline_over_wafers(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "- cut: l0.fc2\n- together: [l1.ln1, lm_head]\n  how: wafer\n")
    out = ws.solve(TRANSFORMER, "tiny", constraints=rules, place=False, wafers=2, output=tmp_path / "p.json")
    stage = {k.name: k.stage for k in out.plan.kernels}
    assert stage["l0.fc2"] != stage["l1.ln1"]
    assert stage["l1.ln1"] == stage["lm_head"]
    assert verify_plan(tmp_path / "p.json").ok


@pytest.mark.slow  # two-wafer solves placed (3-4 s): run by .ci/run (pytest -m slow)
def test_pins_and_areas_on_different_wafers_never_conflict(tmp_path: Path) -> None:
    """Each wafer has its own [0, 0]: corners a cut puts on different wafers do not overlap, and an area
    is the area of each wafer (before, a false conflict, exit 3, and a plan verify rejected)."""
    text = "- cut: l0.fc2\n- place: embed\n  at: [0, 0]\n- place: l1.ln1\n  at: [0, 0]\n"
    out = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), wafers=2, time_limit=3, output=tmp_path / "p.json")
    placed = {k.name: (k.stage, k.placement) for k in out.plan.kernels}
    assert placed["embed"] == (0, (0, 0)) and placed["l1.ln1"] == (1, (0, 0))
    assert verify_plan(tmp_path / "p.json").ok
    # an area of 8 cores for a kernel of each wafer: each takes up to all 8 of its own wafer's
    area = "- cut: l0.fc2\n- place: [l0.fc2, l1.qkv]\n  within: {rows: [8, 9], cols: [0, 3]}\n"
    out = ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, area), wafers=2, time_limit=3, output=tmp_path / "a.json")
    cores = {k.name: k.cores for k in out.plan.kernels}
    report = verify_plan(tmp_path / "a.json")
    assert report.ok, (cores["l0.fc2"], cores["l1.qkv"], report.violations)


@pytest.mark.slow  # two-wafer solves placed (3-4 s): run by .ci/run (pytest -m slow)
def test_from_plan_of_a_verified_plan_over_wafers_solves(tmp_path: Path) -> None:
    """Its kernels on different wafers share corners; its cuts are pinned with them, so they stay apart."""
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import constraints_from_plan, moved

    ws.solve(TRANSFORMER, "tiny", wafers=2, time_limit=3, output=tmp_path / "p.json")
    assert verify_plan(tmp_path / "p.json").ok
    again = ws.solve(TRANSFORMER, "tiny", wafers=2, time_limit=3, constraints=constraints_from_plan(tmp_path / "p.json"))
    assert moved(read_plan(tmp_path / "p.json"), again.plan) == []
    # its layout a start of each wafer: with the first kernel free, each wafer starts from its old corners
    from wsealloc.plan.pins import start_from_plan

    old = read_plan(tmp_path / "p.json")
    said: list[str] = []
    pins = constraints_from_plan(tmp_path / "p.json", [k.name for k in old.kernels[1:]])
    request = ws.build_request(
        TRANSFORMER, "tiny", wafers=2, time_limit=3, constraints=pins, start=start_from_plan(tmp_path / "p.json")
    )
    out = ws.run(request, progress=said.append)
    assert sum("starting from the layout of" in s for s in said) == 2, said
    assert out.plan.objective.value <= old.objective.value


def test_overlapping_pins_the_pipeline_cut_puts_on_one_wafer_conflict(tmp_path: Path) -> None:
    # nothing parts them but the cut the solvers take: the conflict says so, and what would part them
    text = "- place: embed\n  at: [0, 0]\n- place: l0.ln1\n  at: [0, 0]\n"
    with pytest.raises(
        ConflictError, match="on the wafer the pipeline's cut puts both on \\(a cut rule between them parts them\\)"
    ):
        ws.solve(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), wafers=2, time_limit=10)


# ---------------------------------------------------------------- verify: tampered plans


@pytest.fixture(scope="module")
def placed_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("constrained")
    rules = _rules(d, PLACE_RULES + "- grid: l0.fc1\n  shape: 4x4\n")
    ws.solve(TRANSFORMER, "tiny", constraints=rules, time_limit=10, output=d / "p.json")
    return d / "p.json"


def _tamper(path: Path, tmp_path: Path, change) -> Path:  # noqa: ANN001
    doc = json.loads(path.read_text())
    by = {k["name"]: k for k in doc["kernels"]}
    change(by)
    out = tmp_path / "tampered.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda k: k["embed"].update(placement=[1, 0]), "embed: corner [1, 0] breaks"),
        (lambda k: k["l1.qkv"].update(placement=[0, 0]), "l1.qkv: rectangle"),
        (lambda k: k["l0.ln1"].update(placement=[0, 16]), "enters"),
        (lambda k: k["l0.fc1"].update(grid=[2, 8]), "l0.fc1: grid 2x8 breaks"),
    ],
    ids=["pin", "within", "keep-out", "grid"],
)
def test_verify_rejects_a_plan_that_breaks_a_rule_with_its_line(placed_plan: Path, tmp_path: Path, change, expected: str) -> None:  # noqa: ANN001
    assert verify_plan(placed_plan).ok
    report = verify_plan(_tamper(placed_plan, tmp_path, change))
    hits = [v for v in report.violations if expected in v]
    assert hits, report.violations[:5]
    assert "c.yaml line" in hits[0]


def _tamper_rules(path: Path, tmp_path: Path, change) -> Path:  # noqa: ANN001
    """The plan with its recorded rules (``request.constraints.rules``) changed by ``change``."""
    doc = json.loads(path.read_text())
    change(doc["request"]["constraints"]["rules"])
    out = tmp_path / "rules.json"
    out.write_text(json.dumps(doc))
    return out


def _widen_keep_out(rules: list[dict]) -> None:  # the keep-out of rows 0-3 over every column: under embed's corner
    next(r for r in rules if r["kind"] == "keep-out")["area"]["cols"] = None


def _grid_no_wafer_holds(rules: list[dict]) -> None:
    select = {"names": ["l0.ln1"], "ops": [], "range": None}
    rules.append({"line": 99, "source": "", "kind": "grid", "select": select, "shape": [100, 100]})


def _pin_off_the_wafer(rules: list[dict]) -> None:
    next(r for r in rules if r["kind"] == "place" and r["at"])["at"] = [100, 100]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            _widen_keep_out,
            ("embed: the recorded rules leave it no legal op model (", "c.yaml line 8: keeps rows 0-3, all cols out): the plan"),
        ),
        (
            _grid_no_wafer_holds,
            ("l0.ln1: the recorded rules leave it no legal op model (", "c.yaml line 99: pins l0.ln1 to 100 x 100)"),
        ),
        (_pin_off_the_wafer, ("request.constraints: ", "c.yaml line 2 places embed at row 100, col 100, beyond the 16x24 wafer")),
    ],
    ids=["keep-out-under-a-pin", "grid-100x100", "pin-off-the-wafer"],
)
def test_verify_reports_recorded_rules_that_leave_a_kernel_nothing(
    placed_plan: Path,
    tmp_path: Path,
    change,  # noqa: ANN001
    expected: tuple[str, str],
) -> None:
    """Rules of the plan's own request that leave a kernel no legal op model (the greedy baseline's
    recomputation had nothing to choose: an IndexError, exit 70) or cannot be resolved on the wafer
    (an error of the solve, exit 2 or 3) are violations of the plan, exit 4."""
    tampered = _tamper_rules(placed_plan, tmp_path, change)
    report = verify_plan(tampered)
    assert any(all(part in v for part in expected) for v in report.violations), report.violations
    from conftest import run

    result = run("verify", str(tampered))
    assert result.returncode == 4 and len(result.stderr.strip().splitlines()) == 1, result.stderr


# ---------------------------------------------------------------- plans as constraints


def test_from_plan_pins_every_kernel_and_nothing_moves(placed_plan: Path, tmp_path: Path) -> None:
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import constraints_from_plan, moved

    pins = constraints_from_plan(placed_plan)
    out = ws.solve(TRANSFORMER, "tiny", constraints=pins, time_limit=10)
    assert moved(read_plan(placed_plan), out.plan) == []


def test_from_plan_of_a_model_that_lost_a_kernel_drops_its_rules(placed_plan: Path, tmp_path: Path) -> None:
    """The old plan's kernel the edited model no longer has: its rules drop out (the re-solve said
    "selects no kernel", exit 2), the summary lists it as gone, the new plan verifies and counts the
    rules that applied. Written the other way round: the old plan gains a kernel ``ghost``."""
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import constraints_from_plan, moved

    doc = json.loads(placed_plan.read_text())
    ghost = json.loads(json.dumps(doc["kernels"][-1]))
    ghost["name"] = "ghost"
    doc["kernels"].append(ghost)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    pins = constraints_from_plan(old)
    new = tmp_path / "new.json"
    out = ws.solve(TRANSFORMER, "tiny", constraints=pins, time_limit=10, output=new)
    assert moved(read_plan(old), out.plan) == ["ghost: in the old plan, not in this model"]
    record = out.plan.objective.constraints
    assert record is not None and record.rules == len(pins.rules) - 2  # (ghost's grid and corner)
    assert verify_plan(new).ok, verify_plan(new).violations
    # the user's own rule for a kernel the model lacks stays an error
    mine = parse_constraints("- grid: ghost\n  shape: 2x2\n", "mine.yaml")
    with pytest.raises(ConstraintError, match="mine.yaml line 1: ghost selects no kernel"):
        ws.solve(TRANSFORMER, "tiny", constraints=mine.merged(pins), time_limit=10)


def test_from_plan_keep_pins_only_the_selected_kernels(placed_plan: Path, tmp_path: Path) -> None:
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import constraints_from_plan

    old = read_plan(placed_plan)
    pins = constraints_from_plan(placed_plan, ["l0.*"])
    assert {r.select.names[0] for r in pins.rules} == {k.name for k in old.kernels if k.name.startswith("l0.")}
    # change one kernel: fc1 of layer 0 now 2 x 8, the rest of layer 0 as it was
    user = parse_constraints("- grid: l0.fc1\n  shape: 2x8\n", "mine.yaml")
    with pytest.raises(ConflictError, match=r"mine.yaml line 1 pins l0.fc1 to 2 x 8; .*p.json \(l0.fc1\) pins l0.fc1 to 4 x 4"):
        ws.solve(TRANSFORMER, "tiny", constraints=user.merged(pins), time_limit=10)
    with pytest.raises(ConstraintError, match="--keep 'nope' matches no kernel"):
        constraints_from_plan(placed_plan, ["nope"])


# ---------------------------------------------------------------- the command line


def test_cli_conflict_is_one_line_with_exit_code_3(tmp_path: Path) -> None:
    from conftest import run

    path = _rules(tmp_path, "- grid: l0.fc1\n  rows: 16\n- keep-out: {rows: [7, 7]}\n- grid: embed\n  cores: [1, 4]\n")
    result = run("solve", str(TRANSFORMER), "--arch", "tiny", "--constraints", str(path))
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "c.yaml line 1 bounds l0.fc1: rows 16; line 3 keeps rows 7-7, all cols out: together they" in lines[0]


@pytest.mark.slow
def test_the_summary_says_what_the_rules_held(tmp_path: Path) -> None:
    """With --no-place the grids and cores the rules allow hold, but no corner or keep-out was applied on
    a wafer: the summary says so (before: "honoured by the baseline and every solver")."""
    from conftest import run

    rules = _rules(tmp_path, "- place: embed\n  at: [0, 0]\n- keep-out: {rows: [0, 3], cols: [16, 23]}\n")
    args = ("solve", str(TRANSFORMER), "--arch", "tiny", "--constraints", str(rules), "--time-limit", "3")
    unplaced = run(*args, "--no-place")
    assert unplaced.returncode == 0, unplaced.stderr
    assert (
        "honoured by the baseline and every solver in the grids and cores they allow; the positions of the keep-out "
        "and place rules are not (--no-place: nothing was placed)"
    ) in " ".join(unplaced.stdout.split())
    placed = run(*args)
    assert "cores kept out), honoured by the baseline and every solver; price" in " ".join(placed.stdout.split())


def test_cli_from_plan_says_what_moved(placed_plan: Path, tmp_path: Path) -> None:
    from conftest import run

    same = run("solve", str(TRANSFORMER), "--arch", "tiny", "--from-plan", str(placed_plan), "--time-limit", "10")
    assert same.returncode == 0, same.stderr
    assert "moved: nothing (all 21 kernels as in" in same.stdout
    mine = _rules(tmp_path, "- grid: l0.fc2\n  shape: 2x2\n", "mine.yaml")
    changed = run(
        "solve", str(TRANSFORMER), "--arch", "tiny", "--from-plan", str(placed_plan), "--keep", "l1.*",
        "--constraints", str(mine), "--time-limit", "10", "-o", str(tmp_path / "new.json"), "-v",
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    # the old layout is a start, l0.fc2 (its old grid now forbidden) fitted anew into it
    assert "placement: starting from the layout of" in changed.stderr
    assert "1 kernel(s) fitted anew: l0.fc2)" in changed.stderr
    assert "l0.fc2: grid" in changed.stdout and "-> 2x2" in changed.stdout
    assert "constraints: " in changed.stdout and "price" in changed.stdout
    assert verify_plan(tmp_path / "new.json").ok
    refused = run("solve", str(TRANSFORMER), "--arch", "tiny", "--keep", "l1.*")
    assert refused.returncode == 2 and "--keep selects the kernels --from-plan pins" in refused.stderr


def test_a_contest_instance_refuses_constraints(tmp_path: Path) -> None:
    from conftest import ROOT

    kgraph = next((ROOT / "tests" / "data").rglob("*.kgraph"))
    with pytest.raises(UsageError, match="--constraints applies to ONNX models"):
        ws.solve(kgraph, constraints=_rules(tmp_path, "- keep-out: {rows: [0, 1]}\n"))


def test_a_suite_instance_takes_a_constraints_file(tmp_path: Path) -> None:
    from wsealloc.bench.suite import Instance

    rules = _rules(tmp_path, "- grid: l0.fc1\n  shape: 8x8\n")
    instance = Instance(name="x", model=str(TRANSFORMER), arch="tiny", constraints="c.yaml")
    request = instance.request(tmp_path)
    assert request.constraints is not None and request.constraints.source == str(rules)


def test_the_documented_example_selects_kernels_of_gpt2() -> None:
    # docs/constraints.md's "every kind once" file is written for models/gpt2.onnx: each rule that
    # selects kernels selects some there (a renamed kernel in the zoo would leave the example stale)
    from wsealloc.constraints.select import members

    text = (Path(__file__).resolve().parents[1] / "docs" / "constraints.md").read_text()
    found = re.search(r"```yaml\n(# c.yaml.*?)```", text, re.S)
    assert found
    rules = parse_constraints(found.group(1), "docs/constraints.md")
    assert {r.kind for r in rules.rules} == {"grid", "place", "keep-out", "together", "cut"}
    costs = build_costs(OnnxSource(path=str(MODELS / "gpt2.onnx")), load_arch("wse2"), CostOptions(), check_feasible=False)
    picked = members(rules, [kc.kernel for kc in costs.kernels])
    for rule, chosen in zip(rules.rules, picked, strict=True):
        assert rule.kind == "keep-out" or chosen, rule.text()
    # ... and the rules hold together over two wafers, as the text after it says (the example's MatMul
    # bounds left the attention's MatMuls no op model, and its corner lay in its own keep-out)
    from wsealloc.opmodels.constrain import apply
    from wsealloc.solvers.conflicts import infeasibility

    assert infeasibility(apply(costs, rules), 2) is None


def test_the_readme_example_prices_the_hand_tuned_grid(tmp_path: Path) -> None:
    # README, "Constraints": the shipped rules for GPT-2; both optima proven by the bisection
    rules = Path(__file__).resolve().parents[1] / "instances" / "constraints" / "gpt2.yaml"
    out = ws.solve(MODELS / "gpt2.onnx", "wse2", constraints=rules, place=False, output=tmp_path / "p.json")
    o = out.plan.objective
    assert o.status.value == "OPTIMAL" and o.bound_cycles == 50_368
    assert o.constraints is not None and o.constraints.unconstrained_bound_cycles == 43_402
    assert o.constraints.price(o.bound_cycles) == pytest.approx(50_368 / 43_402 - 1)
    assert not o.sram_limited  # the rule, not SRAM, keeps node_addmm_2 on 64 x 192
    assert verify_plan(tmp_path / "p.json").ok
    # the user's own rules are written as the previous release wrote them (it refuses an unknown field)
    assert '"optional"' not in (tmp_path / "p.json").read_text()


def test_a_conflict_among_a_thousand_harmless_rules_is_found_by_halves(tmp_path: Path) -> None:
    # 1,000 rules that allow every grid (issue 36: deletion filtering tested each rule against all the
    # others, 19 s here; by halves about 2 x 2 log2(1000) subsets) around two pins that overlap
    harmless = "".join("- grid: l0.qkv\n  cores: [1, 384]\n" for _ in range(1000))
    text = "- place: embed\n  at: [0, 0]\n" + harmless + "- place: l0.ln1\n  at: [0, 0]\n"
    from wsealloc.budget import Deadline, StopHook
    from wsealloc.errors import Interrupted
    from wsealloc.pipeline import build_costs
    from wsealloc.request import build_request
    from wsealloc.solvers.conflicts import explain

    request = build_request(TRANSFORMER, "tiny", constraints=_rules(tmp_path, text), place=False)
    costs = build_costs(request.onnx_model, request.machine, request.cost, constraints=request.constraints)
    message = explain(costs, 1)
    assert message is not None and "c.yaml line 1 places embed" in message and "line 2003" in message, message
    assert len(re.findall(r"\bline \d", message)) == 2  # none of the harmless rules named
    out_of_time = explain(costs, 1, deadline=Deadline.after(0.0))
    assert out_of_time is not None and "the time limit ended the search for the smallest subset" in out_of_time
    stop = StopHook()
    stop.stop()
    with pytest.raises(Interrupted):
        explain(costs, 1, deadline=Deadline.after(60, stop))


def test_kernels_new_to_an_old_plan_or_gone_from_the_model_are_changes(placed_plan: Path) -> None:
    """A re-solve that fitted kernels the old plan lacked did not leave everything as it was."""
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import moved

    plan = read_plan(placed_plan)
    first, *rest = plan.kernels
    fewer = plan.model_copy(update={"kernels": rest})
    assert moved(plan, plan) == []
    grid, at = f"{first.grid[0]}x{first.grid[1]}", list(first.placement or ())
    assert moved(fewer, plan) == [f"{first.name}: new to the old plan, grid {grid} at {at}"]
    assert moved(plan, fewer) == [f"{first.name}: in the old plan, not in this model"]


def test_a_layout_the_rules_leave_none_of_names_what_they_fix(tmp_path: Path) -> None:
    """An allocation-only plan's grids pinned (--from-plan): 383 of the 384 cores on fixed grids, which
    no layout packs. The placement's error counts what the rules fix (it blamed defects and the die
    rule only, with neither on the wafer)."""
    from wsealloc.errors import NoLayoutError
    from wsealloc.plan.pins import constraints_from_plan

    ws.solve(TRANSFORMER, "tiny", place=False, output=tmp_path / "np.json")
    with pytest.raises(NoLayoutError, match=r"the rules of .*np.json fix 21 kernel\(s\) on one grid each \(3\d\d of 384 cores\)"):
        ws.solve(TRANSFORMER, "tiny", constraints=constraints_from_plan(tmp_path / "np.json"), time_limit=5)
