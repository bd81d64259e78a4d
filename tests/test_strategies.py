"""Strategies: each way to run a model is one object that decides, the plan records its decision beside
the request as the user gave it, and ``verify`` replays the decision (``wsealloc.strategy``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest
from conftest import MODELS

import wsealloc.api as ws
from wsealloc.budget import Deadline
from wsealloc.errors import PlanError
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import over_wafers
from wsealloc.plan.verify import verify_plan
from wsealloc.problem.objective import Throughput, objective_named
from wsealloc.solvers.base import Status
from wsealloc.solvers.stages import StagePartition
from wsealloc.strategy import registry
from wsealloc.strategy.base import Prepared, Progress, Strategy, quiet
from wsealloc.strategy.decision import Decision
from wsealloc.strategy.pipeline import segment_lengths, wafer_part

if TYPE_CHECKING:
    from wsealloc.request import SolveRequest

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"
ATTENTION = MODELS / "tiny" / "attention.onnx"
DECODE = MODELS / "tiny" / "llm_decode.onnx"
BANDWIDTH = "cluster.offwafer_bytes_per_s=1e9"


class Halves(Decision):
    """The toy's decision: the kernel where the second wafer starts."""

    strategy: Literal["halves"] = "halves"
    at: int

    def stage_cuts(self, units: int) -> tuple[int, ...]:
        return (0, self.at, units)


class HalvesStrategy(Strategy):
    """A toy way to run a model, defined in this test alone: two wafers cut at the middle kernel (not the
    exact cut), each wafer's part prepared as the layer pipeline prepares one; the plan's bound is the
    larger of the two wafers' proven optima (each bounds its own wafer's slowest kernel)."""

    name = "halves"
    decision_type = Halves

    def applies(self, request: SolveRequest) -> bool:
        return request.model.label.endswith("attention.onnx")

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        n = len(costs.kernels)
        decision = Halves(at=n // 2, reason="toy: cut in halves")
        table = self.lower(decision, costs)
        objective = objective_named(request.objective)
        parts = tuple(wafer_part(table.subset(a, b), objective) for a, b in ((0, n // 2), (n // 2, n)))
        bound = max(p.bound.value or 0 for p in parts if p.bound is not None)
        partition = StagePartition(Status.OPTIMAL, 2, (0, n // 2, n), bound, 0.0)
        return Prepared(decision, parts, table, costs, partition, bound)

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        assert isinstance(decision, Halves)
        return over_wafers(costs, (0, decision.at, len(costs.kernels)))

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is None and isinstance(decision, Halves) and decision.at != len(costs.kernels) // 2:
            return f"decision.at is {decision.at}, the middle kernel is {len(costs.kernels) // 2}"
        return wrong


def test_a_new_strategy_is_one_class_and_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the toy is registered here alone (no change to api.py, the driver, the plan or verify): it runs
    # through api.run, its decision lands in the plan, verify replays it and names a tampered field
    monkeypatch.setattr(registry, "STRATEGIES", [HalvesStrategy(), *registry.STRATEGIES])
    out = ws.solve(ATTENTION, "tiny", place=False, output=tmp_path / "p.json")
    decision = out.plan.decision
    n = len(out.plan.kernels)
    assert isinstance(decision, Halves) and decision.at == n // 2
    assert [k.stage for k in out.plan.kernels] == [0] * (n // 2) + [1] * (n - n // 2)
    assert out.plan.objective.message.startswith("toy: cut in halves")
    assert verify_plan(tmp_path / "p.json").ok
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["decision"] == {"strategy": "halves", "reason": "toy: cut in halves", "at": n // 2}
    bad = verify_plan(_tampered(tmp_path / "p.json", {"decision.at": n // 2 + 1}, tmp_path / "q.json"))
    assert not bad.ok and f"decision.at is {n // 2 + 1}, the middle kernel is {n // 2}" in bad.violations[0]
    monkeypatch.undo()  # without the toy its decision names no strategy of this release
    with pytest.raises(PlanError, match="decision.strategy 'halves' is not a strategy of this release"):
        verify_plan(tmp_path / "p.json")


def _tampered(path: Path, edit: dict[str, object], into: Path) -> Path:
    doc = json.loads(path.read_text())
    for dotted, value in edit.items():
        *parents, last = dotted.split(".")
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value
    into.write_text(json.dumps(doc))
    return into


def test_the_request_stays_as_given_and_the_segment_length_is_the_decisions(tmp_path: Path) -> None:
    out = ws.solve(TRANSFORMER, "tiny", train=True, place=False, output=tmp_path / "p.json")
    plan = out.plan
    assert plan.request is not None and plan.request.cost.train is not None
    assert plan.request.cost.train.segment is None  # as the user asked: the search chose
    assert plan.decision is not None and plan.decision.model_dump()["segment"] == 4 == plan.cost.train.segment  # type: ignore[union-attr]
    assert verify_plan(tmp_path / "p.json").ok
    # another segment length than the plan was costed with: named
    bad = verify_plan(_tampered(tmp_path / "p.json", {"decision.segment": 5}, tmp_path / "q.json"))
    assert not bad.ok and "cost.train.segment is 4, the decision gives 5" in bad.violations[0]
    # a length the search never tries, costed consistently: named too
    bad = verify_plan(_tampered(tmp_path / "p.json", {"decision.segment": 3, "cost.train.segment": 3}, tmp_path / "r.json"))
    tried = ", ".join(map(str, segment_lengths(out.costs)))
    assert not bad.ok and f"decision.segment is 3, not a length the segment search tries ({tried})" in bad.violations[0]


def test_a_tampered_mode_is_rejected_naming_the_field(tmp_path: Path) -> None:
    out = ws.solve(TRANSFORMER, "tiny", train=True, mode="streaming", sets=[BANDWIDTH], output=tmp_path / "p.json")
    assert out.plan.decision is not None and out.plan.decision.strategy == "streaming"
    assert verify_plan(tmp_path / "p.json").ok
    # the request says pipelined, the decision streamed (issue 36: this raised an internal error)
    bad = verify_plan(_tampered(tmp_path / "p.json", {"request.mode": "pipelined"}, tmp_path / "q.json"))
    assert not bad.ok and "decision.strategy is 'streaming', but the request asks for the pipeline strategy" in bad.violations[0]
    # the decision says pipeline: it does not parse as one
    with pytest.raises(PlanError, match="decision.wafers"):
        verify_plan(_tampered(tmp_path / "p.json", {"decision.strategy": "pipeline"}, tmp_path / "r.json"))
    # another streamed batch than the request's
    bad = verify_plan(_tampered(tmp_path / "p.json", {"decision.batch": 2}, tmp_path / "s.json"))
    assert not bad.ok and "decision.batch is 2, the request streams 1 sample(s) per pass" in bad.violations[0]


def test_a_tampered_region_family_is_rejected_naming_the_field(tmp_path: Path) -> None:
    out = ws.solve(DECODE, "tiny", objective="latency", share="auto", context=16, output=tmp_path / "p.json")
    decision = out.plan.decision
    assert decision is not None and decision.strategy == "regions" and out.plan.regions
    assert verify_plan(tmp_path / "p.json").ok
    bad = verify_plan(_tampered(tmp_path / "p.json", {"decision.family": "shelves"}, tmp_path / "q.json"))
    assert not bad.ok and "decision.family is 'shelves'" in bad.violations[0]
    recorded = json.loads((tmp_path / "p.json").read_text())["decision"]
    runs, grids = recorded["runs"], recorded["grids"]
    assert len(runs) > 1 and grids is not None and len(grids) == len(runs)  # stacked columns: each region's grid fixed
    # the first two regions merged in the decision: no longer the plan's regions
    merged = {"decision.runs": [[runs[0][0], runs[1][1]], *runs[2:]], "decision.grids": grids[1:]}
    bad = verify_plan(_tampered(tmp_path / "p.json", merged, tmp_path / "r.json"))
    assert not bad.ok and "are not the plan's regions" in bad.violations[0]


def test_older_plans_still_verify_and_a_current_one_needs_its_decision(tmp_path: Path) -> None:
    out = ws.solve(TRANSFORMER, "tiny", train=True, place=False, output=tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    # a version-2 plan wrote the chosen segment length into its request and had no decision
    v2 = {**doc, "schema": "wsealloc.plan/2", "baseline": {k: v for k, v in doc["baseline"].items() if k != "layout"}}
    del v2["decision"]
    v2["request"]["cost"]["train"]["segment"] = out.plan.cost.train.segment  # type: ignore[union-attr]
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    assert verify_plan(tmp_path / "v2.json").ok
    v3 = dict(doc)
    del v3["decision"]
    (tmp_path / "v3.json").write_text(json.dumps(v3))
    bad = verify_plan(tmp_path / "v3.json")
    assert not bad.ok and "a wsealloc.plan/5 plan records its decision; it has none" in bad.violations


def test_a_schema_version_that_does_not_match_the_content_is_rejected_naming_the_field(tmp_path: Path) -> None:
    """Issue 36, case 8: a version-2 latency plan relabelled ``wsealloc.plan/1`` was accepted (version 1
    knew no request, no objective but throughput); a current plan relabelled ``/2`` keeps a decision
    version 2 never wrote."""
    ws.solve(DECODE, "tiny", objective="latency", context=16, place=False, output=tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    v2 = {**doc, "schema": "wsealloc.plan/2", "baseline": {k: v for k, v in doc["baseline"].items() if k != "layout"}}
    del v2["decision"]
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    assert verify_plan(tmp_path / "v2.json").ok
    (tmp_path / "v1.json").write_text(json.dumps({**v2, "schema": "wsealloc.plan/1"}))
    bad = verify_plan(tmp_path / "v1.json")
    assert not bad.ok
    assert "schema: 'wsealloc.plan/1' plans have no request, regions, objective.kind 'latency'" in bad.violations[0]
    (tmp_path / "v3as2.json").write_text(json.dumps({**doc, "schema": "wsealloc.plan/2"}))
    bad = verify_plan(tmp_path / "v3as2.json")
    assert not bad.ok and "schema: 'wsealloc.plan/2' plans have no decision" in bad.violations[0]


def test_a_stop_request_ends_the_segment_search(tmp_path: Path) -> None:
    """Issue 36, deliverable 2: the recomputation segment search watched no deadline (a SIGTERM during
    GPT-2's search was answered 3.4 s later by an abort, exit -6): a stop request now ends it."""
    from wsealloc.budget import StopHook
    from wsealloc.errors import Interrupted

    stop = StopHook()
    stop.stop()  # a signal came before the search began: the (sub-second) front end still completes
    with pytest.raises(Interrupted, match="interrupted while choosing the recomputation segments"):
        ws.solve(TRANSFORMER, "tiny", train=True, place=False, stop=stop)


def test_a_decision_that_ignores_a_stop_request_is_abandoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any strategy's search runs stoppable: one that never looks at the deadline is abandoned within
    the stop grace of a signal (Interrupted), not waited for."""
    import threading
    import time

    from wsealloc.budget import STOP_GRACE_S, StopHook
    from wsealloc.errors import Interrupted
    from wsealloc.strategy.pipeline import LayerPipeline

    def deaf(self, costs, request, deadline, say=quiet):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        time.sleep(30)
        raise AssertionError("not abandoned")

    monkeypatch.setattr(LayerPipeline, "decide", deaf)
    stop = StopHook()
    threading.Timer(0.5, stop.stop).start()
    start = time.perf_counter()
    with pytest.raises(Interrupted, match="interrupted while deciding how to run"):
        ws.solve(TRANSFORMER, "tiny", place=False, stop=stop)
    assert time.perf_counter() - start < 0.5 + STOP_GRACE_S + 1.5


def test_each_bound_is_proven_once_per_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # a training solve on one wafer tries each segment length's table once; the chosen table's bound is
    # passed to the backends and the plan, never proven again
    calls: list[int] = []
    real = Throughput.exact_bound

    def counted(self, problem):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
        calls.append(problem.n_kernels)
        return real(self, problem)

    monkeypatch.setattr(Throughput, "exact_bound", counted)
    out = ws.solve(TRANSFORMER, "tiny", train=True, place=False)
    assert len(calls) == len(segment_lengths(out.costs))
    calls.clear()
    ws.solve(TRANSFORMER, "tiny", place=False)
    assert len(calls) == 1
