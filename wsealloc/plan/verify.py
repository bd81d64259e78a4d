"""``wsealloc verify``: recompute every number of a plan from its model and arch and check every
constraint, independently of the solvers (front end + cost model + legality rules; the summary rules
of :mod:`wsealloc.plan.rules` applied to the *recomputed* numbers, never to the plan's own).

Checks, root causes first (a violation that explains later ones is reported before them):

1. the model file is the one planned (SHA-256); the kernels and their ONNX nodes match the model's;
2. each wafer's cores fit the wafer (before the op models: over-allocation is the root cause);
3. each kernel: grid r x c = cores, a legal op model (inside the wafer, die rule, padding, SRAM), its
   latency / compute / NoC / SRAM numbers equal the cost model's;
4. placements: inside the wafer, off defective cores and die crossings when forbidden, no overlap;
   then the communication numbers (distance, congestion, die crossings) recomputed;
5. every summary number the CLI prints: bottleneck, bottleneck kernel, bound-by, lower bound (against
   the allocation-only optimum recomputed here), gap, status, throughput, cores used, stage records;
6. the baseline: the greedy allocation recomputed by the greedy rule (the one piece of solver code
   this module runs: the baseline *is* that rule's output), and the placed baseline's consistency.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.constraints import Constraints
from wsealloc.constraints.select import present
from wsealloc.cost import CostOptions, Dataflow, grid_costs
from wsealloc.cost.comm import comm_costs
from wsealloc.cost.model import Recompute, TrainingWork
from wsealloc.errors import ConflictError, ConstraintError, InfeasibleError, PlanError, UsageError, VerificationError
from wsealloc.frontend.sources import OnnxSource, read_as_file
from wsealloc.graph.kernels import KernelGraph
from wsealloc.opmodels import CostTable, KernelCosts, Reason
from wsealloc.opmodels.enumerate import DATAFLOW_CODES, judge, on_grid
from wsealloc.opmodels.recompute import fix as fix_recompute
from wsealloc.pipeline import build_costs
from wsealloc.plan import rules
from wsealloc.plan.build import kernel_bound_by, kernel_preds, llm_over_wafers, llm_record, region_unit
from wsealloc.plan.contest_plan import CONTEST_SCHEMAS
from wsealloc.plan.decision import decision_of
from wsealloc.plan.experts import experts_record
from wsealloc.plan.experts import merged as merged_experts
from wsealloc.plan.generation import generation_record
from wsealloc.plan.io import file_sha256, read_plan
from wsealloc.plan.schema import SCHEMA, BoundBy, KernelPlan, Plan
from wsealloc.plan.verify_bounds import communication_bound
from wsealloc.plan.verify_constraints import check_constraints
from wsealloc.problem import build_problem
from wsealloc.problem.allocation import area_budgets
from wsealloc.problem.comm_bound import states_bound
from wsealloc.problem.flows import flows
from wsealloc.problem.objective import ObjectiveKind, objective_named
from wsealloc.problem.placement import defect_mask, mesh_params
from wsealloc.problem.stages import cut_bytes, link_params, transfer_cycles
from wsealloc.search import first_true
from wsealloc.solvers.base import Status
from wsealloc.strategy.generation import prefill_tiles
from wsealloc.strategy.regions import regions_fit
from wsealloc.strategy.registry import strategy_for, strategy_named


@dataclass(frozen=True)
class VerifyReport:
    """What was checked and what failed (root causes first)."""

    plan: str
    kernels: int
    checks: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` document."""
        return {
            "plan": self.plan,
            "kernels": self.kernels,
            "checks": self.checks,
            "ok": self.ok,
            "violations": list(self.violations),
        }


@dataclass
class _Checks:
    """Counts checks and collects violations in the order found."""

    bad: list[str] = field(default_factory=list)
    count: int = 0

    def __call__(self, ok: bool, message: str) -> bool:
        self.count += 1
        if not ok:
            self.bad.append(message)
        return ok


@dataclass(frozen=True)
class _Stage:
    """One wafer of the plan, recomputed: its kernels (topological order) and the cuts around it."""

    index: int
    first: int
    end: int
    members: tuple[KernelPlan, ...]
    transfer_in: int
    transfer_out: int

    @property
    def bottleneck(self) -> int:
        return max(k.latency_cycles + k.comm_cycles for k in self.members)


def _resolve_model(plan: Plan, plan_path: Path, override: str | None) -> Path:
    if override:
        if not Path(override).is_file():
            raise PlanError(f"--model {override}: no such model file (a path to the ONNX file the plan was made from)")
        return Path(override)
    for c in (Path(plan.model.path), plan_path.parent / plan.model.path):
        if c.is_file():
            return c
    raise PlanError(
        f"{plan_path}: model {plan.model.path!r} not found (looked in the current directory and next to "
        "the plan); pass --model PATH"
    )


def verify_plan(path: str | Path, model_override: str | None = None) -> VerifyReport:
    """Recompute and check ``path``; the report lists every violation found, root causes first.

    A contest plan (``wsealloc.contest-plan/1``, from ``wsealloc solve X.kgraph -o``) is checked by
    :func:`verify_contest_plan`."""
    plan_path = Path(path)
    if plan_schema(plan_path) in CONTEST_SCHEMAS:
        return verify_contest_plan(plan_path, model_override)
    plan = read_plan(plan_path)
    model_path = _resolve_model(plan, plan_path, model_override)
    check = _Checks()
    check(
        file_sha256(model_path) == plan.model.sha256,
        f"model {model_path} differs from the planned one (SHA-256 mismatch): re-run solve",
    )
    try:
        arch = plan.arch.arch()
    except ValidationError as exc:
        raise PlanError(f"{plan_path}: arch.spec is not a valid architecture: {exc.errors()[0]['msg']}") from exc
    options = plan.cost
    source = OnnxSource(
        path=str(model_path),
        dims=plan.model.dims,
        input_shapes={name: tuple(shape) for name, shape in plan.model.input_shapes.items()},
        fuse=plan.model.fuse,
        weights_as_inputs=plan.model.weights_as_inputs,
    )
    if plan.request is not None:
        # rebuild from the request the plan answers (version 2): its model read as it was, on its machine
        request = plan.request
        if request.model.kind not in ("onnx", "synthetic"):
            raise PlanError(f"{plan_path}: request.model is a {request.model.kind} source; an ONNX plan records an ONNX model")
        source = read_as_file(request.onnx_model, str(model_path))
    constraints = plan.request.constraints if plan.request is not None else None
    # what the way of running it decided: recorded (version 3), or read off the plan (versions 1 and 2)
    decides = plan.schema_ not in ("wsealloc.plan/1", "wsealloc.plan/2")  # (version 3 on)
    check(not decides or plan.decision is not None, f"a {plan.schema_} plan records its decision; it has none")
    for disagreement in _schema_disagrees(plan):
        check(False, disagreement)
    decision = decision_of(plan)
    try:
        strategy = strategy_named(decision.strategy)
    except ValueError as exc:
        raise PlanError(f"{plan_path}: {exc}") from None
    if plan.request is not None:
        if plan.decision is not None:  # the request as the user gave it, costed as the decision says
            lowered = strategy.cost_options(decision, plan.request.cost)
            check(lowered == options, f"cost differs from request.cost under the decision: {_differ(options, lowered)}")
        else:  # versions 1-2 wrote the decision back into the request
            check(plan.request.cost == options, "request.cost differs from cost: the plan does not answer its own request")
    try:
        table = build_costs(source, arch, options, check_feasible=False, constraints=constraints)
    except (ConstraintError, ConflictError) as exc:  # rules that cannot even be resolved on this model and wafer
        check(False, f"request.constraints: {exc}")
        return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
    if plan.request is not None:
        wrong = strategy_for(plan.request).admits(plan.request, decision, table)
        check(wrong is None, f"{wrong}: the decision does not answer the request")
    try:  # the decision replayed: the table the plan's units were solved on
        lowered_table = strategy.lower(decision, table)
    except ValueError as exc:
        check(False, f"decision: {exc}")
        return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
    # the kernels the plan was solved on: the model's, or the ones its decision made of them (expert shards)
    kernels_table = lowered_table.members if lowered_table.members is not None else lowered_table
    if kernels_table.kgraph.kernels != table.kgraph.kernels:
        table = replace(kernels_table, applied=table.applied, unconstrained=table.unconstrained)
    kernels_table = table
    kgraph = table.kgraph
    if not _kernels_match(plan, kgraph, check):
        return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
    order = {k.name: i for i, k in enumerate(kgraph.kernels)}
    in_order = tuple(sorted(plan.kernels, key=lambda k: order[k.name]))
    if lowered_table.runs is not None or plan.regions:  # kernels sharing cores in time: the regions are the units
        found = _region_units(plan, in_order, lowered_table, check)
        if found is None:
            return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
        table, in_order = found
    stages = _stages(plan, in_order, table, check)
    if stages is None:
        return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
    cuts = tuple(st.first for st in stages) + (stages[-1].end,)
    want = decision.stage_cuts(len(in_order))
    check(cuts == want, f"decision.cuts {list(want)} differ from the plan's stages (cuts {list(cuts)})")
    if lowered_table.runs is None:  # training over wafers: each kernel costed with the samples its boundaries add
        table = kernels_table = lowered_table
    for st in stages:  # root cause first: too many cores explains the op models that follow from it
        cores = sum(k.cores for k in st.members)
        if plan.objective.fits_wafer:
            check(cores <= arch.total_cores, f"wafer {st.index} uses {cores:,} cores, a wafer has {arch.total_cores:,}")
        else:  # a fixed --grid reported over the wafer: it must indeed be, and never placed
            grids = [(int(rg.grid[0]), int(rg.grid[1])) for rg in plan.regions if rg.stage == st.index]
            check(
                not regions_fit(arch, grids or [(int(k.grid[0]), int(k.grid[1])) for k in st.members]),
                f"objective.fits_wafer is false but the regions ({cores:,} cores) lie side by side on the wafer",
            )
            check(not plan.objective.placed, "a plan that does not fit the wafer cannot be placed")
    if plan.request is not None:  # the plan's own records agree with the request it answers
        check(plan.request.machine == arch, "request.arch differs from arch.spec: the plan does not answer its own request")
        check(dict(plan.request.onnx_model.dims) == plan.model.dims, "request.model.dims differ from model.dims")
    if not plan.regions:
        _check_kernel_numbers(in_order, kernels_table, check)
    if constraints is not None and constraints.rules:  # every rule of the user's, from the rule itself (a root cause)
        check_constraints(plan, constraints, kgraph.kernels, arch.rows, arch.cols, check)
        for budget in area_budgets(table):
            for st in stages:  # each wafer has the area: the kernels on one wafer share it
                used = sum(in_order[k].cores for k in budget.kernels if st.first <= k < st.end)
                on = f" on wafer {st.index}" if len(stages) > 1 else ""
                check(
                    used <= budget.cores,
                    f"the kernels kept within {budget.label} use {used:,} cores{on}, the area has {budget.cores:,} free",
                )
    for st in stages:
        before = len(check.bad)
        _check_placement(st.members, arch, check)
        if len(check.bad) == before:  # the communication of rectangles off the wafer means nothing
            sub = table.subset(st.first, st.end)
            _check_comm(st.members, sub, check, plan.objective.traffic_distance if len(stages) == 1 else None)
        _check_stage_record(plan, st, check)
    _check_objective(plan, stages, table, check)
    _check_price(plan, constraints, table, len(stages), check)
    _check_llm(plan, stages, table, check)
    _check_experts(plan, stages, table, check)
    fixed = table if plan.regions else _check_recompute(in_order, stages, table, check)
    starved = _no_op_model(fixed)
    if check(starved is None, f"{starved}: the plan does not answer its request"):
        _check_baseline(plan, stages, fixed, check)  # the greedy rule picks an op model for every kernel
        _check_comm_bound(plan, stages, fixed, check)
    return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))


def _differ(recorded: CostOptions, lowered: CostOptions) -> str:
    """The first field where the plan's cost options and the request's under its decision differ."""

    def flat(doc: object, at: str = "") -> dict[str, object]:
        if isinstance(doc, dict):
            return {k: v for key, value in doc.items() for k, v in flat(value, f"{at}{key}.").items()}
        return {at.rstrip("."): doc}

    mine, theirs = flat(recorded.model_dump(mode="json")), flat(lowered.model_dump(mode="json"))
    field = next((k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)), "?")
    return f"cost.{field} is {mine.get(field)}, the decision gives {theirs.get(field)}"


def _kernels_match(plan: Plan, kgraph: KernelGraph, check: _Checks) -> bool:
    """The plan names exactly the model's kernels, once each, with their ONNX nodes and types."""
    by_name = {k.name: k for k in kgraph.kernels}
    planned = {k.name for k in plan.kernels}
    missing = [n for n in by_name if n not in planned]
    extra = [n for n in planned if n not in by_name]
    ok = check(not missing, f"{len(missing)} kernel(s) of the model are not in the plan, e.g. {missing[:3]}")
    ok &= check(not extra, f"{len(extra)} planned kernel(s) are not in the model, e.g. {extra[:3]}")
    ok &= check(len(planned) == len(plan.kernels), "kernel names repeat in the plan")
    for kp in plan.kernels:
        kernel = by_name.get(kp.name)
        if kernel is not None:
            check(tuple(kernel.nodes) == kp.onnx_nodes, f"{kp.name}: onnx_nodes differ from the model's grouping")
            check(kp.type == kernel.kind.value, f"{kp.name}: type is {kp.type!r}, the model's kernel is {kernel.kind.value!r}")
    return ok


def _stages(plan: Plan, in_order: tuple[KernelPlan, ...], table: CostTable, check: _Checks) -> list[_Stage] | None:
    """The wafers of the plan from its kernels' stage numbers, with the transfer cycles of every cut."""
    stage_of = [k.stage for k in in_order]
    contiguous = stage_of[0] == 0 and all(b - a in (0, 1) for a, b in zip(stage_of, stage_of[1:], strict=False))
    if not check(contiguous, "kernel stages must be contiguous in topological order, starting at wafer 0"):
        return None
    check(len(plan.stages) == stage_of[-1] + 1, f"the plan lists {len(plan.stages)} stages, its kernels use {stage_of[-1] + 1}")
    cuts = [0] + [i for i in range(1, len(stage_of)) if stage_of[i] != stage_of[i - 1]] + [len(stage_of)]
    n = len(stage_of)
    transfer = transfer_cycles(cut_bytes(table), *link_params(table.arch)) if len(cuts) > 2 else np.zeros(n + 1, dtype=np.int64)
    return [
        _Stage(s, first, end, in_order[first:end], int(transfer[first]), int(transfer[end]))
        for s, (first, end) in enumerate(zip(cuts[:-1], cuts[1:], strict=True))
    ]


def _check_kernel_numbers(in_order: tuple[KernelPlan, ...], table: CostTable, check: _Checks, *, in_region: bool = False) -> None:
    """Grid, dataflow, legality and the op-model numbers of every kernel, recomputed by the cost model
    (the table is the verifier's own, rebuilt from the plan's request). Legality is read from the
    kernel's op-model table (``opmodels.judge``); a kernel inside a region is judged with its region
    (its grid is the region's, its SRAM part of the region's), so only its numbers are checked."""
    arch, options = table.arch, table.options
    by_name = {kc.kernel.name: kc for kc in table.kernels}
    for kp in in_order:
        r, c = kp.grid
        check(r * c == kp.cores, f"{kp.name}: grid {r}x{c} does not give {kp.cores} cores")
        try:
            dataflow = Dataflow(kp.dataflow)
        except ValueError:
            check(False, f"{kp.name}: unknown dataflow {kp.dataflow!r}")
            continue
        kc = by_name[kp.name]
        work = kc.work
        if not check(dataflow in work.dataflows(), f"{kp.name}: dataflow {kp.dataflow} is not available for this kernel"):
            continue
        cost = grid_costs(work, arch, options, dataflow, np.array([r]), np.array([c]), in_place=in_region)
        if not in_region:
            reason = judge(kc.table, work, arch, options, dataflow, r, c)
            need = (
                f" (needs {int(cost.sram_bytes[0])} B, usable {arch.usable_sram_bytes} B)" if reason is Reason.SRAM_OVER else ""
            )
            if reason is Reason.CONSTRAINED:
                need = _constraint_line(kc, table, dataflow, r, c)
            check(reason is Reason.LEGAL, f"{kp.name}: op model {r}x{c} is not legal: {reason.label}{need}")
        for name, value in (
            ("latency_cycles", cost.latency[0]),
            ("compute_cycles", cost.compute_cycles[0]),
            ("noc_cycles", cost.noc_cycles[0]),
            ("sram_bytes_per_core", cost.sram_bytes[0]),
        ):
            check(getattr(kp, name) == int(value), f"{kp.name}: {name} is {getattr(kp, name)}, the cost model gives {int(value)}")
        stream = int(cost.stream_cycles[0]) if cost.stream_cycles is not None else None
        check(kp.stream_cycles == stream, f"{kp.name}: stream_cycles is {kp.stream_cycles}, the cost model gives {stream}")


def _check_price(plan: Plan, constraints: Constraints | None, table: CostTable, wafers: int, check: _Checks) -> None:
    """The price record: it counts the request's rules, and (one wafer, throughput, no regions) its
    unconstrained optimum is the optimum of the table rebuilt without them."""
    record = plan.objective.constraints
    # (the rules that apply to this model: an old plan's rules for kernels it lost are dropped, ``select.present``)
    rules = len(present(constraints, table.kgraph.kernels).rules) if constraints is not None else 0
    if record is None:
        check(not rules, "the request has constraints but objective.constraints (their price) is missing")
        return
    check(record.rules == rules, f"objective.constraints.rules is {record.rules}, the request has {rules}")
    simple = wafers == 1 and not plan.regions and plan.objective.kind is ObjectiveKind.THROUGHPUT
    if simple and record.unconstrained_optimal and table.unconstrained is not None:
        free = allocation_optimum(table.unconstrained)
        check(
            free == record.unconstrained_bound_cycles,
            f"objective.constraints.unconstrained_bound_cycles is {record.unconstrained_bound_cycles}, the optimum "
            f"without the constraints is {free}",
        )


def _no_op_model(table: CostTable) -> str | None:
    """The first kernel left without a legal op model, with the recorded rules that exclude its op models
    (``c.yaml line 4: keeps rows 0-15, all cols out``); None when every kernel has one. A plan's own
    rules can do this (a keep-out widened under a pinned kernel, a grid no wafer holds appended to
    ``request.constraints``): then there is no baseline to recompute, and the plan answers nothing."""
    for kc in table.kernels:
        if len(kc.frontier):
            continue
        applied, numbers = table.applied, kc.table.rule
        found = sorted({int(n) for n in numbers[numbers > 0]}) if numbers is not None else []
        if applied is None or not found:
            return f"{kc.kernel.name}: no legal op model on the {table.arch.rows}x{table.arch.cols} wafer"
        rules = "; ".join(f"{applied.where(n - 1)}: {applied.rule(n - 1).text()}" for n in found[:3])
        return f"{kc.kernel.name}: the recorded rules leave it no legal op model ({rules}{'; ...' if len(found) > 3 else ''})"
    return None


def _constraint_line(kc: KernelCosts, table: CostTable, dataflow: Dataflow, r: int, c: int) -> str:
    """`` (c.yaml line 4: pins ...)``: the rule that excluded op model (dataflow, r, c) of a kernel."""
    row = kc.table.row_of(dataflow, r, c)
    applied = table.applied
    if row is None or kc.table.rule is None or applied is None or not int(kc.table.rule[row]):
        return ""
    rule = applied.constraints.rules[int(kc.table.rule[row]) - 1]
    return f" ({applied.constraints.where(rule)}: {rule.text()})"


def _region_units(
    plan: Plan, in_order: tuple[KernelPlan, ...], units: CostTable, check: _Checks
) -> tuple[CostTable, tuple[KernelPlan, ...]] | None:
    """A plan whose kernels share cores in time: ``units``, the table of regions its decision lowers to
    (``Strategy.lower``: runs of consecutive kernels, each region on its grid or its family's), against
    the plan's regions: the same runs, each region's grid and place shared by its members, each
    member's own numbers on it, and the region's SRAM (all of its members' at once) judged by that
    table. The regions then stand for their kernels in every later check (cores, overlap,
    communication, objective). None: the regions do not match the decision (nothing later can be
    checked)."""
    regions = sorted(plan.regions, key=lambda rg: rg.index)
    if not check([rg.index for rg in regions] == list(range(len(regions))), "regions must be numbered 0..n-1"):
        return None
    names = [k.name for k in in_order]
    runs: list[tuple[int, int]] = []
    at = 0
    for rg in regions:
        ok = check(
            tuple(names[at : at + len(rg.members)]) == rg.members,
            f"region {rg.name}: its members are not the next kernels in dataflow order",
        )
        if not ok or not rg.members:
            return None
        runs.append((at, at + len(rg.members)))
        at += len(rg.members)
    if not check(at == len(names), f"{len(names) - at} kernel(s) belong to no region"):
        return None
    decided = list(units.runs) if units.runs is not None else []
    if not check(decided == runs, f"decision.runs {decided[:4]}{' ...' if len(decided) > 4 else ''} are not the plan's regions"):
        return None
    # the members as the regions hold them (streamed kernels: each its streamed work)
    table = units.members if units.members is not None else units
    by_name = {kc.kernel.name: kc for kc in table.kernels}
    records = []
    for rg, (first, end), unit in zip(regions, runs, units.kernels, strict=True):
        r, c = rg.grid
        check(r * c == rg.cores, f"region {rg.name}: grid {r}x{c} does not give {rg.cores} cores")
        for kp in in_order[first:end]:
            check(
                (kp.region, kp.grid, kp.placement, kp.stage) == (rg.index, rg.grid, rg.placement, rg.stage),
                f"{kp.name}: its region, grid, placement or stage is not its region {rg.name}'s",
            )
        _check_kernel_numbers(in_order[first:end], table, check, in_region=True)
        for kp in in_order[first:end]:  # each member on its fastest dataflow on the region's grid (as costed)
            fastest, _ = on_grid(by_name[kp.name].work, table.arch, table.options, r, c)
            check(
                kp.dataflow == fastest.value, f"{kp.name}: dataflow {kp.dataflow} is not its fastest on {r}x{c} ({fastest.value})"
            )
        members_sum = sum(kp.latency_cycles for kp in in_order[first:end])
        check(
            members_sum == rg.latency_cycles,
            f"region {rg.name}: latency {rg.latency_cycles:,} is not its members' sum {members_sum:,}",
        )
        g = grid_costs(unit.work, table.arch, table.options, Dataflow.REGION, np.array([r]), np.array([c]))
        parts = g.sram_parts()
        recomputed = (int(g.latency[0]), int(g.sram_bytes[0]), int(parts.weights[0]), int(parts.state[0]), int(parts.buffers[0]))
        recorded = (rg.latency_cycles, rg.sram_bytes_per_core, rg.sram.weights, rg.sram.state, rg.sram.buffers)
        check(recorded == recomputed, f"region {rg.name}: latency/SRAM {recorded} differ from its members' {recomputed}")
        reason = judge(unit.table, unit.work, table.arch, table.options, Dataflow.REGION, r, c)
        need = (
            f" (its kernels need {recomputed[1]:,} B per core, usable {table.arch.usable_sram_bytes:,} B)"
            if reason is Reason.SRAM_OVER
            else ""
        )
        check(reason is Reason.LEGAL, f"region {rg.name}: {r}x{c} is not legal: {reason.label}{need}")
        stream = int(g.stream_cycles[0]) if g.stream_cycles is not None else None
        records.append(region_unit(rg, int(g.compute_cycles[0]), int(g.noc_cycles[0]), stream))
    if any(len(kc.frontier) == 0 for kc in units.kernels):
        return None  # a region no grid of its family holds: the violations above say which; nothing later is meaningful
    return units, tuple(records)


def _wafers_value(
    kind: ObjectiveKind, stages: list[_Stage], table: CostTable, slowest: int, *, comm: bool, requests: int = 1
) -> int:
    """The objective's value of the plan's units, stage by stage (``rules.wafers_value``): the slowest
    stage, or each request's token time (one token's path through every wafer and the transfers of its
    cuts, or ``requests`` times the slowest stage when longer); ``comm``: with the communication placing
    added."""
    times = [[k.latency_cycles + (k.comm_cycles if comm else 0) for k in st.members] for st in stages]
    preds = [kernel_preds(table if len(stages) == 1 else table.subset(st.first, st.end)) for st in stages]
    if len(stages) == 1:
        return rules.objective_value(kind, times[0], preds[0], requests)
    paths = [rules.objective_value(kind, t, p) for t, p in zip(times, preds, strict=True)]
    value = rules.wafers_value(kind, slowest, paths, [st.transfer_in for st in stages[1:]], requests)
    assert value is not None
    return value


def _flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A record's fields with nested records' as ``outer.inner`` (None for a record not given)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_llm(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """An LLM plan's token rates and largest context, by the rules of ``plan.llm`` on the numbers
    recomputed here (the units' stage times, the model's cache and weights; over several wafers, the
    token's path through every wafer and link, each wafer holding its own kernels' caches)."""
    requests = plan.request.requests if plan.request is not None else 1
    got = plan.objective.llm
    if len(stages) == 1:
        expected = llm_record(table, list(stages[0].members), requests)
        if expected is not None and plan.request is not None and plan.request.generation is not None:
            gen = got.generation if got is not None else None
            if gen is not None:
                _check_prefill_fits(gen.prefill_grid, gen.prefill_regions, gen.prefill_fits_wafer, table, check)
            try:
                expected = expected.model_copy(
                    update={"generation": generation_record(plan.request, table, list(stages[0].members))}
                )
            except (InfeasibleError, UsageError) as exc:  # its prefill grid refused on this wafer (an older release's)
                check(False, f"objective.llm.generation: recomputed, {exc}")
                if got is not None:  # the rest of the record is still checked
                    got = got.model_copy(update={"generation": None})
    else:  # one token's path through every wafer and link; a new pass every slowest stage
        worst, _, _ = _slowest(stages, tuple(k for st in stages for k in st.members))
        path = _wafers_value(ObjectiveKind.LATENCY, stages, table, worst, comm=True)
        wafers = [(table.subset(st.first, st.end), list(st.members)) for st in stages]
        expected = llm_over_wafers(wafers, path, worst, requests)
    if expected is None or got is None:
        check(
            expected is None and got is None,
            "objective.llm is "
            + ("missing for a model with a KV cache" if got is None else "given for a model without a KV cache"),
        )
        return
    theirs, mine_all = _flat(got.model_dump()), _flat(expected.model_dump())
    extra = sorted(set(theirs) - set(mine_all))
    check(not extra, f"objective.llm has {', '.join(extra[:3])}, which the request does not ask for")
    for name, value in mine_all.items():
        mine = theirs.get(name)
        same = (
            mine == value
            if not isinstance(value, float)
            else mine is not None and abs(mine - value) <= 1e-9 * max(1.0, abs(value))
        )
        check(same, f"objective.llm.{name} is {mine}, recomputed {value}")
    tps = plan.objective.tokens_per_s_per_request
    check(
        tps is not None and abs(tps - expected.tokens_per_s_per_request) <= 1e-9 * max(1.0, tps),
        "objective.tokens_per_s_per_request differs from objective.llm's",
    )


def _check_prefill_fits(grid: tuple[int, int], regions: int, fits: bool, table: CostTable, check: _Checks) -> None:
    """A generation record's prefill on a layout the wafer holds: its regions side by side on the wafer
    (``strategy.generation.prefill_tiles``, recomputed here from the recorded grid), and said so. The time to
    first token and the end-to-end rate are read off this layout: on one the wafer cannot hold they are
    no plan's numbers (an older release recorded such a prefill with ``prefill_fits_wafer`` false)."""
    r, c = grid
    tiles = prefill_tiles(table.arch, r, c)
    check(
        fits,
        f"objective.llm.generation.prefill_fits_wafer is false: a time to first token on a prefill the wafer "
        f"cannot hold ({regions} regions of {r} x {c}) is not a plan's; re-solve",
    )
    check(
        regions <= tiles,
        f"objective.llm.generation.prefill_regions: {regions} regions of {r} x {c} do not fit the wafer, which "
        f"holds {tiles} side by side",
    )


def _check_experts(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """The mixture-of-experts record (``plan.experts``) recomputed from the rebuilt table and the plan's
    kernel records (each already checked on its grid): per wafer, then merged over the wafers."""
    kind = plan.objective.kind
    requests = _paced_by(plan)
    records = []
    for st in stages:
        sub = table.subset(st.first, st.end)
        base = sub.members if sub.members is not None else sub
        names = {kc.kernel.name for kc in base.kernels}
        members = [k for k in plan.kernels if k.name in names]
        offset = min((k.region for k in members if k.region is not None), default=0)
        members = [k.model_copy(update={"region": k.region - offset}) if k.region is not None else k for k in members]
        stage = [u.latency_cycles + u.comm_cycles for u in st.members]
        value = rules.objective_value(kind, stage, kernel_preds(sub))  # (one pass: the worst routing paces it)
        records.append(experts_record(base, members, stage, kind, value, requests))
    # the worst routing adds its extra time to one pass (the value without requests in flight)
    one_pass = _wafers_value(kind, stages, table, plan.objective.bottleneck_cycles, comm=True)
    slowest = plan.objective.bottleneck_cycles
    expected = records[0] if len(stages) == 1 else merged_experts(records, kind, one_pass, slowest, requests)
    got = plan.objective.experts
    if expected is None or got is None:
        check(
            expected is None and got is None,
            f"objective.experts is {'missing for' if got is None else 'given for'} a model "
            f"{'with' if got is None else 'without'} mixture-of-experts layers",
        )
        return
    mine, theirs = _flat(expected.model_dump()), _flat(got.model_dump())
    for name in sorted(set(mine) | set(theirs)):
        check(mine.get(name) == theirs.get(name), f"objective.experts.{name} is {theirs.get(name)}, recomputed {mine.get(name)}")


def _kernel_count(plan: Plan, st: _Stage) -> int:
    """Model kernels on a stage: its units, or the members of the regions standing for them."""
    if not plan.regions:
        return len(st.members)
    by_name = {rg.name: rg for rg in plan.regions}
    return sum(len(by_name[k.name].members) if k.name in by_name else 1 for k in st.members)


def _check_stage_record(plan: Plan, st: _Stage, check: _Checks) -> None:
    if st.index >= len(plan.stages):
        return
    sp = plan.stages[st.index]
    cores = sum(k.cores for k in st.members)
    check(
        (sp.index, sp.kernels, sp.cores_used, sp.bottleneck_cycles, sp.transfer_cycles)
        == (st.index, _kernel_count(plan, st), cores, st.bottleneck, st.transfer_in),
        f"stages[{st.index}] does not match its kernels (kernels, cores, bottleneck or transfer cycles)",
    )


def _slowest(stages: list[_Stage], in_order: tuple[KernelPlan, ...]) -> tuple[int, set[str], str]:
    """The plan's bottleneck load, the kernels that may be named for it, and what bounds it
    ("kernel" or "transfer"), by the rules of :mod:`wsealloc.plan.rules` on recomputed numbers."""
    worst, names, kind = -1, set[str](), "kernel"
    for st in stages:
        load = rules.stage_load(st.bottleneck, st.transfer_in, st.transfer_out)
        if rules.transfer_bound(st.bottleneck, st.transfer_in, st.transfer_out):
            first = rules.receives_slowest_cut(st.transfer_in, st.transfer_out) == "first" or st.end >= len(in_order)
            receiver = st.members[0] if first else in_order[st.end]
            here, what = {receiver.name}, "transfer"
        else:
            here, what = {k.name for k in st.members if k.latency_cycles + k.comm_cycles == load}, "kernel"
        if load > worst:
            worst, names, kind = load, set(here), what
        elif load == worst:  # stages tied at the slowest load all hold slowest kernels
            names |= here
    return worst, names, kind


def _check_objective(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """Every summary number of the objective, recomputed."""
    obj = plan.objective
    in_order = tuple(k for st in stages for k in st.members)
    worst, names, kind = _slowest(stages, in_order)
    total = sum(k.cores for st in stages for k in st.members)  # kernels, or the regions they share
    check(obj.cores_used == total, f"objective.cores_used is {obj.cores_used}, the kernels add up to {total}")
    check(
        obj.bottleneck_cycles == worst, f"objective.bottleneck_cycles is {obj.bottleneck_cycles}, the slowest stage takes {worst}"
    )
    check(obj.bottleneck_kernel in names, f"objective.bottleneck_kernel {obj.bottleneck_kernel!r} is not a slowest kernel")
    throughput = rules.throughput(table.arch.clock_hz, worst)
    check(abs(obj.throughput_samples_per_s - throughput) <= 1e-6 * throughput, "throughput does not equal clock / bottleneck")
    placed = [k.placement is not None for k in plan.kernels]
    check(obj.placed == all(placed), f"objective.placed is {obj.placed} but {sum(placed)} of {len(placed)} kernels are placed")
    slowest = next((k for k in in_order if k.name == obj.bottleneck_kernel), None)  # a kernel's or a region's record
    if slowest is not None:
        expected = kernel_bound_by(slowest) if kind == "kernel" else BoundBy.TRANSFER
        check(
            obj.bound_by is expected,
            f"objective.bound_by is {obj.bound_by.value!r}, the bottleneck's numbers give {expected.value!r}",
        )
        if len(stages) == 1:  # the SRAM floor: no legal op model of the unit (without the user's rules) has fewer cores
            floor = _sram_floor(table, slowest.name)
            if floor is not None:
                at = slowest.cores > 1 and slowest.cores <= floor
                said = f"objective.sram_limited is {obj.sram_limited}, the bottleneck's op models give {at}"
                check(obj.sram_limited == at, said)
    throughput = obj.kind is ObjectiveKind.THROUGHPUT
    if plan.request is not None:
        check(
            obj.kind is plan.request.objective,
            f"objective.kind is {obj.kind.value}, its request asks for {plan.request.objective.value}",
        )
    requests = _paced_by(plan)
    value = _wafers_value(obj.kind, stages, table, worst, comm=True, requests=requests)
    check(
        obj.value_cycles == value, f"objective.value_cycles is {obj.value_cycles}, the {obj.kind.value} objective gives {value}"
    )
    # min-max plans state their bound twice (bound_cycles, and lower_bound_cycles of version 1)
    bound = obj.lower_bound_cycles if throughput else obj.bound_cycles
    if throughput:
        check(obj.bound_cycles == bound, "objective.bound_cycles differs from lower_bound_cycles under min-max")
    else:
        check(
            obj.lower_bound_cycles is None,
            f"objective.lower_bound_cycles is a min-max bound; this plan minimizes {obj.kind.value}",
        )
    if bound is None:
        check(obj.gap is None, "objective.gap is given without a lower bound")
        return
    what = "the bottleneck" if throughput else f"the {obj.kind.value} value"
    check(bound <= value, f"lower bound {bound} exceeds {what} {value}")
    if not throughput:
        # a proof claim: no bound can exceed this very allocation's value without communication (the
        # allocation-only optimum is at most it); a latency plan's bound is an allocation bound (over
        # several wafers, with the links its cuts pay)
        alone = _wafers_value(obj.kind, stages, table, worst, comm=False, requests=requests)
        check(
            bound <= alone,
            f"bound {bound} exceeds the plan's own allocation ({alone:,} cycles without communication): not a proof",
        )
    proven = rules.proven_optimal(value, bound) or rules.proven_optimal(value, obj.comm_bound_cycles)
    if obj.status is Status.OPTIMAL:  # either proven bound may close the gap (the second is checked on its own)
        check(proven, "status OPTIMAL but the bound is below the objective")
    # one wafer: its stage's claim is the plan's (version 1 wrote OPTIMAL there whatever the plan's status)
    if len(stages) == 1 and plan.stages and plan.stages[0].status is Status.OPTIMAL and plan.schema_ != "wsealloc.plan/1":
        check(proven, "stages[0].status OPTIMAL but the bound is below the objective")
    gap = rules.gap(value, bound)
    check(
        obj.gap is not None and gap is not None and abs(obj.gap - gap) <= 1e-9,
        f"objective.gap is {obj.gap}, (value - bound) / value is {gap:.6g}",
    )
    if len(stages) == 1 and throughput:
        # the bound is a proof claim: recompute the allocation-only optimum without solver code
        optimum = allocation_optimum(table)
        check(
            optimum is not None and bound <= optimum,
            "no allocation of the model fits the wafer, so the plan cannot be valid"
            if optimum is None
            else f"objective.lower_bound_cycles {bound} exceeds the allocation-only optimum {optimum}: it is not a valid bound",
        )


def _sram_floor(table: CostTable, name: str) -> int | None:
    """The fewest cores of a legal op model of unit ``name`` in the table without the user's rules (the
    least SRAM lets it go); None: no such unit, or none legal."""
    free = table.unconstrained if table.unconstrained is not None else table
    try:
        legal = free.by_name(name).table.legal()
    except KeyError:
        return None
    cores = free.by_name(name).table.cores[legal]
    return int(cores.min()) if cores.size else None


def _check_baseline(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """The baseline the CLI prints the speed-up against: the greedy rule's allocation, recomputed
    (per wafer for a pipeline, with the transfers of its cuts), and a placed baseline that no
    placement could beat the allocation-only optimum with."""
    from wsealloc.solvers.greedy import greedy_choice  # the baseline is defined by this rule

    base = plan.baseline
    kind = plan.objective.kind
    # no choice left (a fixed --grid, stacked columns: each region on its own grid): the baseline is that allocation
    fixed = table.runs is not None and all(len(kc.table.r) <= 1 for kc in table.kernels)
    values: list[int] = []
    loads: list[int] = []
    slowest_loads: list[int] = []
    cores, feasible = 0, True
    for st in stages:
        sub = table if len(stages) == 1 else table.subset(st.first, st.end)
        # one wafer's baseline is valued with the requests in flight; over several, each wafer's path
        # (the merged value is paced once, below)
        requests = _paced_by(plan) if len(stages) == 1 else 1
        problem = build_problem(sub, objective=objective_named(kind, requests) if kind is not ObjectiveKind.CONTEST else None)
        # a fixed --grid has one op model per region: its baseline is that mapping itself
        choice = [0] * problem.n_kernels if fixed else greedy_choice(problem)
        objective, used = problem.evaluate(choice)
        feasible = problem.feasible(choice) or fixed
        slowest = max(problem.latencies(choice), default=0)
        values.append(int(objective))
        loads.append(rules.stage_load(int(objective), st.transfer_in, st.transfer_out) if len(stages) > 1 else int(objective))
        slowest_loads.append(rules.stage_load(slowest, st.transfer_in, st.transfer_out) if len(stages) > 1 else slowest)
        cores += int(used)
    links = [st.transfer_in for st in stages[1:]]
    paced = _paced_by(plan)
    worst = values[0] if len(stages) == 1 else rules.wafers_value(kind, max(slowest_loads), values, links, paced)
    bottleneck = max(slowest_loads)
    check(
        base.value_cycles == worst,
        f"baseline.value_cycles is {base.value_cycles}, the {'fixed grid' if fixed else 'greedy rule'} gives {worst}",
    )
    check(
        base.bottleneck_cycles == bottleneck,
        f"baseline.bottleneck_cycles is {base.bottleneck_cycles}, the greedy rule gives {bottleneck}",
    )
    if len(stages) == 1:
        check(base.cores_used == cores, f"baseline.cores_used is {base.cores_used}, the greedy rule uses {cores}")
        status = Status.FEASIBLE if feasible else Status.INFEASIBLE
        check(base.status is status, f"baseline.status is {base.status.value}, the greedy allocation is {status.value}")
    throughput = kind is ObjectiveKind.THROUGHPUT and not plan.regions
    optimum = (allocation_optimum(table) if len(stages) == 1 else plan.objective.lower_bound_cycles) if throughput else None
    if base.placed_bottleneck_cycles is not None:
        check(plan.objective.placed, "baseline.placed_bottleneck_cycles is given for a plan that is not placed")
        check(
            optimum is None or base.placed_bottleneck_cycles >= optimum,
            f"baseline.placed_bottleneck_cycles {base.placed_bottleneck_cycles} beats the allocation-only optimum "
            f"{optimum}: impossible",
        )
    if base.layout is not None:
        _check_baseline_layout(plan, stages, table, check)


def _check_baseline_layout(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """The placed baseline recomputed from its layout (the speed-up a placed plan states is against
    it): each rectangle a grid of its kernel's legal op models (the fastest of that grid, as the
    construction takes it), on the wafer, off its defects and each other, and its communication, its
    slowest stage and its value by the same model as the plan's own layout. The user's rules are held
    to the plan's layout, not the baseline's."""
    base = plan.baseline
    assert base.layout is not None
    one = len(stages) == 1 and not plan.regions and plan.objective.placed and base.placed_value_cycles is not None
    if not check(one, "baseline.layout is given, but only a placed plan of one wafer whose units are kernels has one"):
        return
    if not check(
        len(base.layout) == len(plan.kernels),
        f"baseline.layout has {len(base.layout)} rectangles for the plan's {len(plan.kernels)} kernels",
    ):
        return
    rect_of = {k.name: rect for k, rect in zip(plan.kernels, base.layout, strict=True)}
    by_name = {kc.kernel.name: kc for kc in table.kernels}
    members = []
    for k in stages[0].members:
        row, col, r, c = rect_of[k.name]
        t = by_name[k.name].table
        grid = t.legal() & (t.r == r) & (t.c == c)
        if not check(bool(grid.any()), f"baseline.layout: {k.name} on {r}x{c}: the kernel has no legal op model of that grid"):
            return
        update = {"placement": (row, col), "grid": (r, c), "cores": r * c, "latency_cycles": int(t.latency[grid].min())}
        members.append(k.model_copy(update=update))
    placed = _Checks()
    _check_placement(tuple(members), table.arch, placed)
    for message in placed.bad:
        check(False, f"baseline.layout: {message}")
    if placed.bad:
        return
    rects = np.array([(*m.placement, *m.grid) for m in members if m.placement is not None], dtype=np.int64)
    latency = np.array([m.latency_cycles for m in members], dtype=np.int64)
    fl = flows(table)
    comm = comm_costs(rects, latency.astype(np.float64), fl.src, fl.dst, fl.nbytes, mesh_params(table.arch), fl.group)
    stage = latency + comm.comm_cycles
    slowest = int(stage.max(initial=0))
    requests = _paced_by(plan)
    value = rules.objective_value(plan.objective.kind, stage.tolist(), kernel_preds(table), requests)
    check(
        base.placed_bottleneck_cycles == slowest,
        f"baseline.placed_bottleneck_cycles is {base.placed_bottleneck_cycles}, its layout gives {slowest}",
    )
    check(
        base.placed_value_cycles == value, f"baseline.placed_value_cycles is {base.placed_value_cycles}, its layout gives {value}"
    )


def _check_comm_bound(plan: Plan, stages: list[_Stage], table: CostTable, check: _Checks) -> None:
    """The bound that counts communication, a proof claim: recomputed by the verifier's own code
    (``plan/verify_bounds.py``) on the table the plan's kernels were solved on; only a placed min-max
    plan of one wafer whose units are kernels states one."""
    obj = plan.objective
    if obj.comm_bound_cycles is None:
        return
    states = states_bound(obj.kind, obj.placed, len(stages), bool(plan.regions))
    if not check(states, "objective.comm_bound_cycles is given, but only a placed min-max plan of one wafer has one"):
        return
    again = communication_bound(table, obj.value)
    check(
        again == obj.comm_bound_cycles,
        f"objective.comm_bound_cycles is {obj.comm_bound_cycles}, "
        + ("but no T up to the plan's value passes its tests" if again is None else f"recomputed {again}"),
    )


def allocation_optimum(table: CostTable) -> int | None:
    """The allocation-only optimum, recomputed independently of the solvers: the smallest T at which
    every kernel's fewest cores with latency <= T fit the wafer together (None: they never do).

    A training kernel's op models come in two ways (keep the stash, recompute) and a recomputation
    segment takes one way for all its kernels (``cost.training``, "Recomputation"): at each T every
    segment takes the way whose kernels' fewest cores sum lowest. The fewest cores meeting T are a
    running minimum over the legal op models sorted by latency, and the total is non-increasing in T."""
    groups: dict[tuple[int, int], dict[bool, list[tuple[np.ndarray, np.ndarray]]]] = {}
    here: dict[int, int] = {}
    for kc in table.kernels:
        if isinstance(kc.work, TrainingWork):
            here[kc.work.segment] = here.get(kc.work.segment, 0) + 1
    code = DATAFLOW_CODES.index(Dataflow.TRAIN_RECOMPUTE)
    for k, kc in enumerate(table.kernels):
        w = kc.work
        ways: tuple[bool, ...] = (False,)
        key = (1, k)
        if isinstance(w, TrainingWork):
            key = (0, w.segment)
            whole = here[w.segment] == w.segment_kernels  # a segment split by a wafer boundary keeps its stash
            mode = w.recompute if whole else Recompute.NONE
            ways = {Recompute.NONE: (False,), Recompute.ALL: (True,), Recompute.AUTO: (False, True)}[mode]
        for way in ways:
            rows = kc.table.legal() & ((kc.table.dataflow == code) == way if isinstance(w, TrainingWork) else True)
            order = np.argsort(kc.table.latency[rows], kind="stable")
            latency = kc.table.latency[rows][order]
            groups.setdefault(key, {}).setdefault(way, []).append((latency, np.minimum.accumulate(kc.table.cores[rows][order])))
    everything = [lat for g in groups.values() for pairs in g.values() for lat, _ in pairs]
    candidates = np.unique(np.concatenate(everything)) if everything else np.zeros(0, dtype=np.int64)
    if candidates.size == 0:
        return None
    budgets = area_budgets(table)  # the user's areas: their kernels share the area's free cores
    members = {key: [k for k, kc in enumerate(table.kernels) if _group_key(kc, k) == key] for key in groups}

    def fits(t: int) -> bool:
        fewest = [0] * len(table.kernels)
        total = 0
        for key, by_way in groups.items():
            best: list[int] | None = None
            for pairs in by_way.values():
                need = []
                for latency, cores in pairs:
                    i = int(np.searchsorted(latency, t, side="right")) - 1
                    if i < 0:
                        break
                    need.append(int(cores[i]))
                else:
                    if best is None or sum(need) < sum(best):
                        best = need
            if best is None:
                return False
            total += sum(best)
            for k, n in zip(members[key], best, strict=True):
                fewest[k] = n
        return total <= table.total_cores and all(sum(fewest[k] for k in b.kernels) <= b.cores for b in budgets)

    return first_true(candidates, fits)


def _group_key(kc: KernelCosts, k: int) -> tuple[int, int]:
    """The choice a kernel shares: its recomputation segment (training), else its own."""
    return (0, kc.work.segment) if isinstance(kc.work, TrainingWork) else (1, k)


def _check_recompute(in_order: tuple[KernelPlan, ...], stages: list[_Stage], table: CostTable, check: _Checks) -> CostTable:
    """Every kernel of a recomputation segment takes one way, one its segment may take on its wafer
    (a segment split by a wafer boundary keeps its stash; ``--recompute`` fixes the way); the table with
    the plan's ways fixed (what the plan's greedy baseline chose among)."""
    if not any(isinstance(kc.work, TrainingWork) for kc in table.kernels):
        return table
    index = {kc.kernel.name: i for i, kc in enumerate(table.kernels)}
    ways = [False] * len(table.kernels)
    for st in stages:
        seen: dict[int, tuple[bool, str]] = {}
        count: dict[int, int] = {}
        for kp in st.members:
            w = table.kernels[index[kp.name]].work
            if isinstance(w, TrainingWork):
                count[w.segment] = count.get(w.segment, 0) + 1
        for kp in st.members:
            kc = table.kernels[index[kp.name]]
            w = kc.work
            if not isinstance(w, TrainingWork):
                continue
            way = kp.dataflow == Dataflow.TRAIN_RECOMPUTE.value
            ways[index[kp.name]] = way
            first = seen.setdefault(w.segment, (way, kp.name))
            check(
                first[0] == way,
                f"{kp.name}: {kp.dataflow} but {first[1]} of its recomputation segment {w.segment} "
                f"{'recomputes' if first[0] else 'keeps its stash'}: a segment recomputes whole or not at all",
            )
            split = count[w.segment] != w.segment_kernels
            if way:
                check(
                    not split and w.recompute is not Recompute.NONE,
                    f"{kp.name}: recomputes, but "
                    + ("its segment is split by a wafer boundary" if split else "the request says --recompute none"),
                )
            else:
                check(
                    split or w.recompute is not Recompute.ALL,
                    f"{kp.name}: keeps its stash, but the request says --recompute all",
                )
    return fix_recompute(table, tuple(ways))


def _check_comm(members: tuple[KernelPlan, ...], table: CostTable, check: _Checks, traffic: float | None) -> None:
    """Communication cycles of one wafer's kernels: zero without placement, recomputed with it."""
    placed = [k.placement is not None for k in members]
    if not any(placed):
        for k in members:
            check(not k.comm_cycles, f"{k.name}: comm_cycles {k.comm_cycles} without a placement")
        return
    if not check(all(placed), f"{placed.count(False)} kernel(s) have no placement in a placed plan"):
        return
    rects = np.array([(*k.placement, *k.grid) for k in members if k.placement is not None], dtype=np.int64)
    fl = flows(table)
    latency = np.array([k.latency_cycles for k in members], dtype=np.float64)
    comm = comm_costs(rects, latency, fl.src, fl.dst, fl.nbytes, mesh_params(table.arch), fl.group)
    parts = zip(
        comm.comm_cycles.tolist(),
        comm.distance_cycles.tolist(),
        comm.congestion_cycles.tolist(),
        comm.die_cycles.tolist(),
        strict=True,
    )
    for k, (value, dist, cong, die) in zip(members, parts, strict=True):
        check(k.comm_cycles == value, f"{k.name}: comm_cycles is {k.comm_cycles}, the communication model gives {value}")
        recorded = (k.distance_cycles, k.congestion_cycles, k.die_cycles)
        check(
            all(x is None for x in recorded) or recorded == (dist, cong, die),
            f"{k.name}: distance/congestion/die cycles are {recorded}, the communication model gives {(dist, cong, die)}",
        )
    if traffic is not None:
        check(
            abs(traffic - comm.traffic_distance) <= 1e-6 * max(1.0, comm.traffic_distance),
            f"objective.traffic_distance is {traffic}, recomputed {comm.traffic_distance}",
        )


def _check_placement(members: tuple[KernelPlan, ...], arch: Arch, check: _Checks) -> None:
    """Bounds, die rule, defects and overlap of one wafer's rectangles."""
    placed = [k for k in members if k.placement is not None]
    if not placed:
        return
    occupancy = np.full((arch.rows, arch.cols), -1, dtype=np.int32)
    d = arch.wafer.defects
    defects = defect_mask(arch.rows, arch.cols, d.cores, d.rate, d.seed)
    die_r, die_c = arch.wafer.die_cores.rows, arch.wafer.die_cores.cols
    for idx, k in enumerate(placed):
        assert k.placement is not None
        row, col = k.placement
        r, c = k.grid
        if not check(
            row + r <= arch.rows and col + c <= arch.cols,
            f"{k.name}: rectangle {r}x{c} at [{row}, {col}] leaves the {arch.rows}x{arch.cols} wafer",
        ):
            continue
        check(
            arch.wafer.die_boundary is not DieBoundary.FORBID
            or (row // die_r == (row + r - 1) // die_r and col // die_c == (col + c - 1) // die_c),
            f"{k.name}: rectangle at [{row}, {col}] crosses a die boundary, which the arch forbids",
        )
        window = occupancy[row : row + r, col : col + c]
        taken = window[window >= 0]
        check(
            taken.size == 0, f"{k.name}: rectangle at [{row}, {col}] overlaps {placed[int(taken[0])].name if taken.size else ''}"
        )
        broken = int(defects[row : row + r, col : col + c].sum())
        check(not broken, f"{k.name}: rectangle at [{row}, {col}] covers {broken} defective core(s)")
        window[window < 0] = idx


def _paced_by(plan: Plan) -> int:
    """The requests in flight a plan's latency values are paced by: its request's (version 5 on, and
    version 2, which this release writes for a table built by hand); 1 for versions 1, 3 and 4, which
    wrote one pass (``plan.schema``)."""
    if plan.request is None or plan.schema_ in ("wsealloc.plan/1", "wsealloc.plan/3", "wsealloc.plan/4"):
        return 1
    return plan.request.requests


def _schema_disagrees(plan: Plan) -> list[str]:
    """What the plan holds that its ``schema`` version never wrote (a newer plan relabelled older: read
    by the older version's rules, its newer fields would go unchecked). Version 1 recorded no request,
    decision, regions, LLM record nor an objective other than throughput; version 2 no decision (a plan
    of a cost table built by hand, ``api.solve_costs``, is written as version 2, its layout left out);
    version 3 no baseline layout; version 4 held what 5 holds (its latency values by the path)."""
    version = plan.schema_
    if version == SCHEMA:
        return []
    held = []
    if plan.baseline.layout is not None and version != "wsealloc.plan/4":
        held.append("baseline.layout")
    if plan.decision is not None and version not in ("wsealloc.plan/3", "wsealloc.plan/4"):
        held.append("decision")
    if version == "wsealloc.plan/1":
        if plan.request is not None:
            held.append("request")
        if plan.regions:
            held.append("regions")
        if plan.objective.kind is not ObjectiveKind.THROUGHPUT:
            held.append(f"objective.kind {plan.objective.kind.value!r}")
        if plan.objective.llm is not None or plan.objective.tokens_per_s_per_request is not None:
            held.append("objective.llm")
    if not held:
        return []
    return [f"schema: {version!r} plans have no {', '.join(held)}; this plan does: its schema version does not match its content"]


def plan_schema(path: Path) -> str | None:
    """The ``schema`` of a plan file, or None when it cannot be read (``read_plan`` then says why)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return data.get("schema") if isinstance(data, dict) else None


def verify_contest_plan(plan_path: Path, instance_override: str | None = None) -> VerifyReport:
    """A contest plan: its kernels as a contest solution through the independent contest verifier
    (legality and figures from the kernel library's formulas), then every recorded number: the
    instance's hash, the fabric and weights (header with the plan's overrides), the bounds
    (recomputed), max time and its kernel, wirelength, score, each kernel's figures."""
    from wsealloc.frontend.sources import KgraphSource
    from wsealloc.plan.contest_plan import read_contest_plan
    from wsealloc.plan.contest_verify import verify_solution
    from wsealloc.problem.contest_bounds import contest_bounds

    plan = read_contest_plan(plan_path, json.loads(plan_path.read_text()))
    path = _locate(plan.instance.path, plan_path, instance_override, "the .kgraph instance")
    check = _Checks()
    check(
        file_sha256(path) == plan.instance.sha256,
        f"instance {path} differs from the planned one (SHA-256 mismatch): re-run solve",
    )
    try:  # the recorded overrides are validated like --set ones (a malformed field is the plan's fault)
        source = KgraphSource(path=str(path), header=plan.instance.header)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PlanError(
            f"{plan_path}: field instance.header: {str(err['msg']).removeprefix('Value error, ')}; re-run solve"
        ) from None
    graph = source.read()
    from wsealloc.plan.contest_plan import FabricRef

    check(plan.fabric == FabricRef.of(graph.fabric), "fabric does not match the instance's header with the plan's overrides")
    # legality first (a plan under an impossible header fails here, on its kernels), then the bounds:
    # a legal layout proves the instance feasible, so they exist
    report = verify_solution(plan.solution(), graph, bound=None)
    for v in report.violations:
        check(False, v.message)
    if not report.ok:
        return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))
    bounds = contest_bounds(graph)
    obj = plan.objective
    recorded = (plan.bounds.single_kernel, plan.bounds.area, plan.bounds.fabric, plan.bounds.value)
    check(
        recorded == (bounds.single_kernel, bounds.area, bounds.fabric, bounds.value),
        f"bounds {recorded} differ from the recomputed {(bounds.single_kernel, bounds.area, bounds.fabric, bounds.value)}",
    )
    check(obj.lower_bound == bounds.value, f"objective.lower_bound is {obj.lower_bound}, the bounds give {bounds.value}")
    check(obj.max_time == report.max_time, f"objective.max_time is {obj.max_time}, the kernels give {report.max_time}")
    times = {f.name: f.time for f in report.kernels}
    check(
        times.get(obj.max_time_kernel) == report.max_time,
        f"objective.max_time_kernel {obj.max_time_kernel!r} is not a slowest kernel",
    )
    check(
        obj.wirelength == float(report.wirelength),
        f"objective.wirelength is {obj.wirelength}, recomputed {float(report.wirelength)}",
    )
    check(obj.score == float(report.score or 0), f"objective.score is {obj.score}, recomputed {float(report.score or 0)}")
    ratio = round((report.max_time or 0) / max(bounds.value, 1), 6)
    check(abs(obj.time_over_bound - ratio) <= 1e-6, f"objective.time_over_bound is {obj.time_over_bound}, recomputed {ratio}")
    figures = {f.name: f for f in report.kernels}
    for k in plan.kernels:
        f = figures[k.name]
        check(
            (k.width, k.height, k.time) == (f.width, f.height, f.time)
            and abs(k.memory - float(f.memory)) <= 1e-9 * max(1.0, k.memory),
            f"{k.name}: width/height/time/memory {(k.width, k.height, k.time, k.memory)} differ from the library's "
            f"{(f.width, f.height, f.time, float(f.memory))}",
        )
    return VerifyReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad))


def _locate(recorded: str, plan_path: Path, override: str | None, what: str) -> Path:
    """The input file a plan names: ``override`` if given, else as recorded or next to the plan."""
    if override:
        if not Path(override).is_file():
            raise PlanError(f"--model {override}: no such file ({what} the plan was made from)")
        return Path(override)
    for c in (Path(recorded), plan_path.parent / recorded):
        if c.is_file():
            return c
    raise PlanError(
        f"{plan_path}: {what} {recorded!r} not found (looked in the current directory and next to the plan); pass --model PATH"
    )


def require_valid(report: VerifyReport) -> None:
    """Raise :class:`VerificationError` summarizing the violations (the root cause first), if any."""
    if report.violations:
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise VerificationError(f"{report.plan}: {len(report.violations)} violation(s): {report.violations[0]}{more}")
