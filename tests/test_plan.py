"""Plans: the JSON contract, atomic writing, and the verifier (valid plans pass, broken ones fail with the reason)."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from wsealloc.api import solve, solve_costs
from wsealloc.arch import load_arch
from wsealloc.arch.loader import arch_to_dict
from wsealloc.errors import OutputError, PlanError
from wsealloc.pipeline import build_costs
from wsealloc.plan.io import check_distinct_outputs, read_plan, write_atomic
from wsealloc.plan.verify import verify_plan
from wsealloc.request import build_request

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = ROOT / "models" / "tiny" / "attention.onnx"
TRANSFORMER = ROOT / "models" / "tiny" / "transformer.onnx"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    solve(ATTENTION, "tiny", output=out, place=False)
    return out


def test_plan_contract(plan_file: Path) -> None:
    doc = json.loads(plan_file.read_text())
    assert doc["schema"] == "wsealloc.plan/5"
    # the way it ran: the layer pipeline on one wafer, as the request (unchanged) asked
    assert doc["decision"] == {
        "strategy": "pipeline",
        "reason": "",
        "wafers": 1,
        "cuts": [0, len(doc["kernels"])],
        "segment": None,
    }
    for key in ("kind", "value_cycles", "bound_cycles", "bottleneck_cycles", "lower_bound_cycles", "status", "solver", "wall_s"):
        assert key in doc["objective"]
    # the plan records the request it answers, and under min-max its value is the bottleneck
    assert doc["request"]["model"]["path"].endswith("attention.onnx") and doc["request"]["place"] is False
    assert doc["objective"]["kind"] == "throughput"
    assert doc["objective"]["value_cycles"] == doc["objective"]["bottleneck_cycles"]
    assert doc["objective"]["bound_cycles"] == doc["objective"]["lower_bound_cycles"]
    assert doc["objective"]["status"] == "OPTIMAL"
    assert doc["objective"]["bottleneck_cycles"] == doc["objective"]["lower_bound_cycles"]
    assert set(doc["baseline"]) >= {"name", "bottleneck_cycles"}
    assert {"rows", "cols", "total_cores", "sram_bytes_per_core"} <= set(doc["arch"])
    for k in doc["kernels"]:
        assert {"name", "onnx_nodes", "cores", "grid", "latency_cycles", "sram_bytes_per_core", "placement", "stage"} <= set(k)
        assert k["grid"][0] * k["grid"][1] == k["cores"] and k["placement"] is None and k["stage"] == 0
    assert doc["objective"]["bottleneck_cycles"] == max(k["latency_cycles"] for k in doc["kernels"])


def test_round_trip(plan_file: Path) -> None:
    plan = read_plan(plan_file)
    assert json.loads(plan.to_json()) == json.loads(plan_file.read_text())


def test_valid_plan_verifies(plan_file: Path) -> None:
    report = verify_plan(plan_file)
    assert report.ok, report.violations
    assert report.checks > 10


def test_a_version_1_plan_still_verifies(plan_file: Path, tmp_path: Path) -> None:
    """Plans written before version 2 have no request and no objective kind/value/bound: they read as
    min-max plans and verify as before; the same plan with a tampered bottleneck still fails."""
    doc = json.loads(plan_file.read_text())
    doc["schema"] = "wsealloc.plan/1"
    del doc["request"], doc["decision"]  # version 1 recorded neither
    doc["baseline"].pop("layout", None)  # (nor the placed baseline's layout, which version 4 added)
    for key in ("kind", "value_cycles", "bound_cycles"):
        del doc["objective"][key]
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(doc))
    plan = read_plan(old)
    assert plan.request is None and plan.objective.value_cycles == plan.objective.bottleneck_cycles
    assert verify_plan(old).ok
    doc["objective"]["bottleneck_cycles"] += 1
    old.write_text(json.dumps(doc))
    assert not verify_plan(old).ok


def test_a_plan_whose_request_disagrees_with_it_fails(plan_file: Path, tmp_path: Path) -> None:
    doc = json.loads(plan_file.read_text())
    doc["request"]["cost"]["max_padding_waste"] = 0.25
    bad = tmp_path / "request.json"
    bad.write_text(json.dumps(doc))
    found = verify_plan(bad).violations
    assert any(
        "cost differs from request.cost under the decision: cost.max_padding_waste is 0.5, the decision gives 0.25" in v
        for v in found
    )


def _broken(plan_file: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    doc = json.loads(plan_file.read_text())
    edit(doc)
    out = tmp_path / "broken.json"
    out.write_text(json.dumps(doc))
    return out


def _shrink_wafer(doc: dict) -> None:  # type: ignore[type-arg]
    """One die instead of 2 x 2: the spec and its headline fields agree, the kernels no longer fit."""
    doc["arch"]["spec"]["wafer"]["dies"].update(rows=1, cols=1)
    doc["arch"].update(rows=8, cols=12, total_cores=96)


def test_too_many_cores_is_the_first_violation(plan_file: Path, tmp_path: Path) -> None:
    """The root cause comes first, in the text output as in --json: a wafer too small for the plan's
    cores, before the op models that no longer fit on it."""
    report = verify_plan(_broken(plan_file, tmp_path, _shrink_wafer))
    assert "a wafer has 96" in report.violations[0], report.violations


def _set_first(key: str, value: object):  # type: ignore[no-untyped-def]
    def edit(doc: dict) -> None:  # type: ignore[type-arg]
        doc["kernels"][0][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_set_first("latency_cycles", 1), "latency_cycles is 1"),
        (_set_first("cores", 999), "does not give 999 cores"),
        (_set_first("grid", [1, 1]), "does not give"),
        (_set_first("sram_bytes_per_core", 0), "sram_bytes_per_core is 0"),
        (_set_first("dataflow", "zz"), "unknown dataflow"),
        (lambda d: d["kernels"].pop(), "not in the plan"),
        (lambda d: d["objective"].update(bottleneck_cycles=1), "bottleneck_cycles is 1"),
        (lambda d: d["objective"].update(lower_bound_cycles=10**9), "exceeds the bottleneck"),
        (lambda d: d["objective"].update(bound_cycles=10**9), "bound_cycles differs from lower_bound_cycles"),
        (lambda d: d["objective"].update(value_cycles=1), "value_cycles is 1, the throughput objective gives"),
        (_shrink_wafer, "a wafer has"),
        (lambda d: d["model"].update(sha256="0" * 64), "SHA-256 mismatch"),
        (lambda d: d["objective"].update(gap=0.5), "objective.gap is 0.5"),
        (lambda d: d["objective"].update(placed=True), "objective.placed is True"),
        (lambda d: d["objective"].update(bound_by="transfer"), "objective.bound_by is 'transfer'"),
        (lambda d: d["objective"].update(lower_bound_cycles=10**9), "not a valid bound"),
        (_set_first("type", "conv"), "type is 'conv'"),
        (lambda d: d["baseline"].update(bottleneck_cycles=1), "baseline.bottleneck_cycles is 1, the greedy rule gives"),
        (lambda d: d["baseline"].update(cores_used=7), "baseline.cores_used is 7, the greedy rule uses"),
        (lambda d: d["baseline"].update(status="INFEASIBLE"), "baseline.status is INFEASIBLE"),
        (lambda d: d["baseline"].update(placed_bottleneck_cycles=1), "is given for a plan that is not placed"),
        (lambda d: d["objective"].update(sram_limited=not d["objective"]["sram_limited"]), "objective.sram_limited is"),
    ],
)
def test_broken_plans_fail_with_reason(plan_file: Path, tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    report = verify_plan(_broken(plan_file, tmp_path, edit))
    assert not report.ok
    assert any(needle in v for v in report.violations), report.violations


def test_overlapping_placement_fails(plan_file: Path, tmp_path: Path) -> None:
    def place(doc: dict) -> None:  # type: ignore[type-arg]
        for k in doc["kernels"]:
            k["placement"] = [0, 0]

    report = verify_plan(_broken(plan_file, tmp_path, place))
    assert any("overlaps" in v for v in report.violations)


def test_out_of_wafer_placement_fails(plan_file: Path, tmp_path: Path) -> None:
    report = verify_plan(_broken(plan_file, tmp_path, _set_first("placement", [10_000, 0])))
    assert any("leaves the" in v for v in report.violations)


def test_malformed_plans(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "wsealloc.plan/1", "kern')
    with pytest.raises(PlanError, match="not valid JSON"):
        read_plan(bad)
    bad.write_text('{"schema": "other/2"}')
    with pytest.raises(PlanError, match="not a wsealloc.plan/5"):
        read_plan(bad)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("model", "bogus", "cost.model"),
        ("stream_block_rows", "x", "cost.stream_block_rows"),
        ("max_padding_waste", 2, "cost.max_padding_waste"),
    ],
)
def test_bad_cost_block_is_a_plan_error(plan_file: Path, tmp_path: Path, field: str, value: object, needle: str) -> None:
    broken = _broken(plan_file, tmp_path, lambda d: d["cost"].update({field: value}))
    with pytest.raises(PlanError, match=needle):
        verify_plan(broken)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["objective"].update(status="BOGUS"), "objective.status"),
        (_set_first("grid", [0, 0]), "kernels.0.grid.0"),
        (_set_first("placement", [-1, 0]), "kernels.0.placement.0"),
        (_set_first("latency_cycles", 1.5), "kernels.0.latency_cycles"),
        (_set_first("cores", True), "kernels.0.cores"),
        (lambda d: d["arch"].update(clock_hz=5.0), "arch.clock_hz is 5.0 but arch.spec gives"),
        (lambda d: d["baseline"].update(status="MAYBE"), "baseline.status"),
    ],
)
def test_malformed_fields_name_the_field(plan_file: Path, tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError, match=needle.replace(".", r"\.")):
        verify_plan(_broken(plan_file, tmp_path, edit))


@pytest.fixture(scope="module")
def placed_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("placed") / "placed.json"
    solve(TRANSFORMER, "tiny", output=out, time_limit=2)
    return out


def test_the_bound_counting_communication_is_recomputed(placed_plan: Path, tmp_path: Path) -> None:
    """Issue 37: a placed plan states the bound that counts communication beside the allocation's;
    ``verify`` derives it again with its own code, so one cycle more is caught."""
    obj = json.loads(placed_plan.read_text())["objective"]
    assert obj["bound_cycles"] <= obj["comm_bound_cycles"] <= obj["value_cycles"]
    assert verify_plan(placed_plan).ok
    report = verify_plan(
        _broken(placed_plan, tmp_path, lambda d: d["objective"].update(comm_bound_cycles=obj["comm_bound_cycles"] + 1))
    )
    assert any("objective.comm_bound_cycles is" in v for v in report.violations), report.violations


def test_a_wafer_claiming_a_proof_its_plan_lacks_is_caught(placed_plan: Path, tmp_path: Path) -> None:
    """One wafer: its stage's status is the plan's claim (an OPTIMAL one with the bound below the value
    verified OK)."""
    doc = json.loads(placed_plan.read_text())
    assert doc["objective"]["status"] == "FEASIBLE" and doc["stages"][0]["status"] == "FEASIBLE", "needs an open gap"
    report = verify_plan(_broken(placed_plan, tmp_path, lambda d: d["stages"][0].update(status="OPTIMAL")))
    assert any("stages[0].status OPTIMAL but the bound" in v for v in report.violations), report.violations

    def version_1(d: dict) -> None:  # type: ignore[type-arg]
        # version 1 wrote OPTIMAL on its one wafer whatever the plan's status: such plans still verify
        d["schema"] = "wsealloc.plan/1"
        del d["request"], d["decision"], d["objective"]["comm_bound_cycles"], d["baseline"]["layout"]
        for key in ("kind", "value_cycles", "bound_cycles"):
            del d["objective"][key]
        d["stages"][0]["status"] = "OPTIMAL"

    old = _broken(placed_plan, tmp_path, version_1)
    assert verify_plan(old).ok, verify_plan(old).violations


def test_the_placed_baseline_is_recomputed_from_its_layout(placed_plan: Path, tmp_path: Path) -> None:
    """The speed-up a placed plan states is against the greedy allocation placed by the same
    construction: version 4 records that layout, and verify places it again with its own model (a
    cycle more, a rectangle moved onto another, a grid the kernel has no op model of, one rectangle
    short, all caught; an older version that claims one is a schema mismatch)."""
    doc = json.loads(placed_plan.read_text())
    base = doc["baseline"]
    assert len(base["layout"]) == len(doc["kernels"]) and base["placed_value_cycles"] >= doc["objective"]["value_cycles"]
    assert verify_plan(placed_plan).ok

    def violations(edit) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
        return verify_plan(_broken(placed_plan, tmp_path, edit)).violations

    value = base["placed_value_cycles"]
    found = violations(lambda d: d["baseline"].update(placed_value_cycles=value + 1))
    assert found == (f"baseline.placed_value_cycles is {value + 1}, its layout gives {value}",), found
    # the second kernel's rectangle onto the first's corner: the layout is refused before its numbers
    first = base["layout"][0]
    found = violations(lambda d: d["baseline"]["layout"].__setitem__(1, [first[0], first[1], *d["baseline"]["layout"][1][2:]]))
    assert len(found) == 1 and found[0].startswith("baseline.layout: ") and "overlaps" in found[0], found
    request = build_request(TRANSFORMER, "tiny", time_limit=2)
    table = build_costs(request.onnx_model, request.machine, request.cost).kernels[0].table
    legal = set(zip(table.r[table.legal()].tolist(), table.c[table.legal()].tolist(), strict=True))
    r, c = next((r, c) for r in range(1, 9) for c in range(1, 13) if (r, c) not in legal)
    found = violations(lambda d: d["baseline"]["layout"].__setitem__(0, [*first[:2], r, c]))
    name = doc["kernels"][0]["name"]
    assert found == (f"baseline.layout: {name} on {r}x{c}: the kernel has no legal op model of that grid",), found
    found = violations(lambda d: d["baseline"]["layout"].pop())
    assert found == (f"baseline.layout has {len(doc['kernels']) - 1} rectangles for the plan's {len(doc['kernels'])} kernels",)
    found = violations(lambda d: d.update(schema="wsealloc.plan/3"))
    assert found and "plans have no baseline.layout" in found[0], found


def test_a_placed_plan_of_a_table_built_by_hand_still_verifies(tmp_path: Path) -> None:
    """``api.solve_costs`` (no strategy, so no decision) writes a version-2 plan: it records no
    baseline layout, which only version 4 has (the placed baseline's values stay, bounded as before)."""
    request = build_request(ATTENTION, "tiny", time_limit=2)
    plan = solve_costs(build_costs(request.onnx_model, request.machine, request.cost), request).plan
    assert plan.schema_ == "wsealloc.plan/2" and plan.objective.placed and plan.baseline.placed_value_cycles is not None
    assert plan.baseline.layout is None
    out = tmp_path / "by-hand.json"
    out.write_text(plan.model_dump_json(by_alias=True))
    assert verify_plan(out).ok, verify_plan(out).violations


def test_overlap_is_reported_before_communication(placed_plan: Path, tmp_path: Path) -> None:
    report = verify_plan(_broken(placed_plan, tmp_path, lambda d: d["kernels"][1].update(placement=d["kernels"][0]["placement"])))
    assert "overlaps" in report.violations[0], report.violations


def test_bound_above_the_optimum_is_caught_on_its_own(placed_plan: Path, tmp_path: Path) -> None:
    # a placed plan sits above the allocation optimum: claiming its own bottleneck as the bound is
    # consistent with every other field (gap 0), and only the recomputed optimum refutes it
    doc = json.loads(placed_plan.read_text())
    assert doc["objective"]["bottleneck_cycles"] > doc["objective"]["lower_bound_cycles"], "needs a placement gap"

    def claim(d: dict) -> None:  # type: ignore[type-arg]
        d["objective"].update(
            lower_bound_cycles=d["objective"]["bottleneck_cycles"], bound_cycles=d["objective"]["bottleneck_cycles"], gap=0.0
        )

    report = verify_plan(_broken(placed_plan, tmp_path, claim))
    assert len(report.violations) == 1 and "not a valid bound" in report.violations[0], report.violations


def test_atomic_write_and_unwritable(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_atomic(target, "{}")
    assert target.read_text() == "{}" and not list(tmp_path.glob(".out.json.*"))
    with pytest.raises(OutputError, match="does not exist"):
        write_atomic(tmp_path / "nope" / "x.json", "{}")
    with pytest.raises(OutputError, match="directory"):
        write_atomic(tmp_path, "{}")


def test_writing_to_a_device_keeps_the_device(tmp_path: Path) -> None:
    # renaming a temporary file over /dev/null (or a FIFO) would replace it with a plain file
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_atomic(fifo, "{}")
    reader.join(5)
    assert got == ["{}"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_outputs_never_overwrite_inputs(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(Path(ATTENTION).read_bytes())
    with pytest.raises(OutputError, match="overwrite the model"):
        solve(model, "tiny", output=model, place=False)
    arch = tmp_path / "myarch"  # an arch file without a .yaml suffix is still the arch file
    arch.write_text(json.dumps(arch_to_dict(load_arch("tiny"))))
    with pytest.raises(OutputError, match="overwrite the arch"):
        solve(ATTENTION, str(arch), output=arch, place=False)
    with pytest.raises(OutputError, match="--floorplan would overwrite the -o"):
        check_distinct_outputs({"model": model}, {"-o": tmp_path / "x.svg", "--floorplan": tmp_path / "x.svg"})


def test_atomic_write_keeps_readable_permissions(tmp_path: Path) -> None:
    import os
    import stat

    new = tmp_path / "new.json"
    write_atomic(new, "{}")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    kept = tmp_path / "kept.json"
    kept.write_text("x")
    kept.chmod(0o640)
    write_atomic(kept, "{}")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640


def test_plans_are_immutable(plan_file: Path) -> None:
    # frozen all the way down: a report cannot change the plan another report reads
    plan = read_plan(plan_file)
    with pytest.raises(AttributeError):
        plan.kernels.append(plan.kernels[0])  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        plan.kernels[0].cores = 1  # type: ignore[misc]
