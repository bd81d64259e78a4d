"""Building a :class:`Plan` document from a cost table and the solvers' results (the summary numbers
follow :mod:`wsealloc.plan.rules`, which the verifier applies to its own recomputed numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from wsealloc.cost import Dataflow, grid_costs
from wsealloc.errors import SolverError
from wsealloc.frontend.sources import OnnxSource, SyntheticSource
from wsealloc.graph.state import cache_shape
from wsealloc.opmodels import DATAFLOW_CODES, CostTable, KernelCosts
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.plan import rules
from wsealloc.plan.experts import experts_record
from wsealloc.plan.experts import merged as merged_experts
from wsealloc.plan.generation import generation_record
from wsealloc.plan.io import file_sha256
from wsealloc.plan.llm import LlmShape, aggregate_tokens_per_s, largest_context, tokens_per_s_per_request
from wsealloc.plan.schema import (
    ArchRef,
    Baseline,
    BoundBy,
    KernelPlan,
    LlmRecord,
    ModelRef,
    Objective,
    Plan,
    RegionPlan,
    SramRecord,
    StagePlan,
)
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.problem.placement import PlacementProblem
from wsealloc.request import SolveRequest
from wsealloc.solvers import SolverResult, Status
from wsealloc.solvers.base import PlacementResult
from wsealloc.version import __version__

# A plan built here knows no decision yet (the strategy's, which the driver adds with the current
# schema); one that never gets one, built by hand, reads as a version-2 plan: its decision is read off it.
UNDECIDED = "wsealloc.plan/2"


def kernel_plan(
    costs: CostTable,
    index: int,
    dataflow: Dataflow,
    r: int,
    c: int,
    comm: int = 0,
    placement: tuple[int, int] | None = None,
    in_place: bool = False,
) -> KernelPlan:
    """The plan record of kernel ``index`` on an r x c grid, numbers recomputed by the cost model
    (``in_place``: a region's member, its operands on its cores already)."""
    kc = costs.kernels[index]
    g = grid_costs(kc.work, costs.arch, costs.options, dataflow, np.array([r]), np.array([c]), in_place=in_place)
    return KernelPlan(
        name=kc.kernel.name,
        type=kc.kernel.kind.value,
        onnx_nodes=tuple(kc.kernel.nodes),
        cores=r * c,
        grid=(r, c),
        dataflow=dataflow.value,
        latency_cycles=int(g.latency[0]),
        compute_cycles=int(g.compute_cycles[0]),
        noc_cycles=int(g.noc_cycles[0]),
        sram_bytes_per_core=int(g.sram_bytes[0]),
        comm_cycles=comm,
        placement=placement,
        stream_cycles=int(g.stream_cycles[0]) if g.stream_cycles is not None else None,
    )


def expand_regions(costs: CostTable, units: list[KernelPlan]) -> tuple[list[KernelPlan], list[RegionPlan]]:
    """A region table's unit records as the model's kernels (each on its region's grid and position,
    its own numbers there: its fastest dataflow) and the regions themselves; a kernel table's records
    unchanged, with no regions."""
    if costs.members is None or costs.runs is None:
        return units, []
    members = costs.members
    kernels: list[KernelPlan] = []
    regions: list[RegionPlan] = []
    for i, ((first, end), unit) in enumerate(zip(costs.runs, units, strict=True)):
        r, c = unit.grid
        for k in range(first, end):
            dataflow, _ = on_grid(members.kernels[k].work, costs.arch, costs.options, r, c)
            rec = kernel_plan(members, k, dataflow, r, c, 0, unit.placement, in_place=True)
            kernels.append(rec.model_copy(update={"region": i, "stage": unit.stage}))
        g = grid_costs(costs.kernels[i].work, costs.arch, costs.options, Dataflow.REGION, np.array([r]), np.array([c]))
        parts = g.sram_parts()
        regions.append(
            RegionPlan(
                index=i,
                name=unit.name,
                members=tuple(members.kernels[k].kernel.name for k in range(first, end)),
                cores=r * c,
                grid=(r, c),
                latency_cycles=unit.latency_cycles,
                sram_bytes_per_core=unit.sram_bytes_per_core,
                sram=SramRecord(weights=int(parts.weights[0]), state=int(parts.state[0]), buffers=int(parts.buffers[0])),
                comm_cycles=unit.comm_cycles,
                placement=unit.placement,
                stage=unit.stage,
            )
        )
    return kernels, regions


def kernel_plans(costs: CostTable, choice: tuple[int, ...]) -> list[KernelPlan]:
    """One record per kernel for a choice vector (index into each kernel's frontier)."""
    out = []
    for i, (kc, j) in enumerate(zip(costs.kernels, choice, strict=True)):
        row = int(kc.frontier.index[j])
        t = kc.table
        out.append(kernel_plan(costs, i, DATAFLOW_CODES[int(t.dataflow[row])], int(t.r[row]), int(t.c[row])))
    return out


def placed_kernel_plans(costs: CostTable, placement: PlacementResult, comm: np.ndarray) -> list[KernelPlan]:
    """One record per kernel for a placement."""
    assert placement.rects is not None and placement.dataflow is not None
    return [
        kernel_plan(costs, i, DATAFLOW_CODES[int(code)], int(rect[2]), int(rect[3]), int(extra), (int(rect[0]), int(rect[1])))
        for i, (rect, code, extra) in enumerate(zip(placement.rects, placement.dataflow, comm, strict=True))
    ]


def model_ref(source: OnnxSource | SyntheticSource) -> ModelRef:
    """The plan's record of the model file (with its hash) and how it was read (a synthetic model is
    recorded as the ONNX file it was generated into)."""
    path = source.onnx_path()
    return ModelRef(
        path=str(path) if isinstance(source, SyntheticSource) else source.path,
        sha256=file_sha256(path),
        dims=dict(source.dims),
        input_shapes={name: list(shape) for name, shape in source.input_shapes.items()},
        fuse=source.fuse,
        weights_as_inputs=source.weights_as_inputs,
    )


def kernel_bound_by(k: KernelPlan) -> BoundBy:
    """``rules.bound_by`` of a kernel record."""
    return rules.bound_by(k.compute_cycles, k.noc_cycles, k.latency_cycles, k.comm_cycles, k.stream_cycles or 0)


def _slowest(costs: CostTable, choice: tuple[int, ...] | None) -> int | None:
    """The slowest unit's latency under a choice vector (frontier indices)."""
    if choice is None:
        return None
    return max((int(kc.frontier.latency[j]) for kc, j in zip(costs.kernels, choice, strict=True)), default=0)


def _path(costs: CostTable, units: Sequence[KernelPlan]) -> int:
    """One pass through a plan's units (kernels or regions, in the table's order): the longest path of
    their stage times (one request in flight)."""
    return rules.objective_value(ObjectiveKind.LATENCY, [u.latency_cycles + u.comm_cycles for u in units], kernel_preds(costs))


def llm_record(costs: CostTable, units: list[KernelPlan] | tuple[KernelPlan, ...], requests: int) -> LlmRecord | None:
    """The LLM report of a plan (``plan.llm``: the rules there) from its units' records (kernels or
    regions, in the table's order) on ``costs``; None for a model without a KV cache."""
    stage = [u.latency_cycles + u.comm_cycles for u in units]
    return llm_over_wafers([(costs, list(units))], _path(costs, units), max(stage, default=0), requests)


def llm_over_wafers(
    wafers: Sequence[tuple[CostTable, Sequence[KernelPlan]]], path: int, slowest: int, requests: int
) -> LlmRecord | None:
    """The LLM report of a plan over one or more wafers (each wafer's table and its units' records):
    one pass takes ``path`` cycles (every wafer's token path and the links between them), a new pass
    enters every ``slowest`` cycles; the largest context is the one at which the first wafer runs out
    of SRAM, each wafer holding the caches of its own kernels (their share of the cache per token)."""
    costs = wafers[0][0]
    base = costs.members if costs.members is not None else costs
    shape = cache_shape(base.kgraph.ops)
    if shape is None:
        return None
    arch = costs.arch
    # every request in flight keeps its own cache: one more token of context costs that many times
    kv_per_token = shape.elems_per_token * arch.dtype.bytes * costs.options.state_copies
    llm = LlmShape(shape.phase, shape.batch, shape.tokens, shape.context, kv_per_token)
    held = [_held(table, units) for table, units in wafers]
    state_total = sum(h[2] for h in held)
    sram = arch.usable_sram_bytes * arch.total_cores
    # each wafer's share of the cache per token (one wafer: all of it), rounded up: the context is not overstated
    contexts = [
        largest_context(
            llm if len(held) == 1 else replace(llm, kv_bytes_per_token=-(-kv_per_token * state // state_total)), sram, w, b
        )
        for w, b, state in held
        if state or len(held) == 1
    ]
    per_request = tokens_per_s_per_request(llm, arch.clock_hz, path, slowest, requests)
    return LlmRecord(
        phase="decode" if llm.phase == "decode" else "prefill",
        batch=llm.batch,
        tokens_per_request=llm.tokens,
        context=llm.context,
        kv_bytes_per_token=llm.kv_bytes_per_token,
        token_path_cycles=path,
        slowest_stage_cycles=slowest,
        requests=requests,
        tokens_per_s_per_request=per_request,
        aggregate_tokens_per_s=aggregate_tokens_per_s(llm, arch.clock_hz, path, slowest, requests),
        time_to_first_token_s=path / arch.clock_hz if llm.phase == "prefill" else None,
        largest_context=min(contexts, default=0),
    )


def _held(costs: CostTable, units: Sequence[KernelPlan]) -> tuple[int, int, int]:
    """Bytes a wafer holds as planned: its kernels' weights, its units' buffers (per core x cores) and
    its kernels' KV caches (resident state)."""
    base = costs.members if costs.members is not None else costs
    weights = sum(int(kc.work.weight_bytes) for kc in base.kernels)
    state = sum(int(getattr(kc.work, "state_bytes", 0)) for kc in base.kernels)
    buffers = 0
    for kc, u in zip(costs.kernels, units, strict=True):
        g = grid_costs(kc.work, costs.arch, costs.options, Dataflow(u.dataflow), np.array([u.grid[0]]), np.array([u.grid[1]]))
        buffers += int(g.sram_parts().buffers[0]) * u.cores
    return weights, buffers, state


def kernel_preds(costs: CostTable) -> list[list[int]]:
    """Producers of each unit along a token's path (``CostTable.preds``)."""
    return [list(p) for p in costs.preds()]


def _at_sram_floor(costs: CostTable, kc: KernelCosts, cores: int) -> bool:
    """Whether a kernel on ``cores`` sits on its smallest legal op model: SRAM, not a user's rule, keeps
    it from fewer cores (a grid the rules fix is judged against the table without them)."""
    free = costs.unconstrained.by_name(kc.kernel.name) if costs.unconstrained is not None else kc
    return bool(len(free.frontier) and cores <= int(free.frontier.cores[0]) and cores > 1)


def _layout(rects: np.ndarray) -> tuple[tuple[int, int, int, int], ...]:
    """Rectangles [n, 4] (row, col, rows, cols) as the plan records them."""
    return tuple((int(y), int(x), int(r), int(c)) for y, x, r, c in rects.tolist())


def make_plan(
    costs: CostTable,
    source: OnnxSource | SyntheticSource,
    result: SolverResult,
    baseline: SolverResult,
    placement: PlacementResult | None = None,
    pproblem: PlacementProblem | None = None,
    baseline_placed: tuple[int, int] | None = None,
    request: SolveRequest | None = None,
    fits: bool = True,
    baseline_rects: np.ndarray | None = None,
) -> Plan:
    """Assemble the plan: allocation-only from ``result``, or placed from ``placement`` on ``pproblem``;
    ``request`` (what the plan answers) is recorded and names the objective."""
    if result.choice is None or result.objective is None:
        raise SolverError(f"solver {result.solver} returned no solution ({result.status.value}): {result.message}")
    arch = costs.arch
    traffic_distance = None
    if placement is not None and pproblem is not None:
        exact = placed_kernel_plans(costs, placement, np.zeros(len(costs.kernels), dtype=np.int64))
        assert placement.rects is not None and placement.dataflow is not None
        _, comm = pproblem.evaluate(placement.rects, np.array([k.latency_cycles for k in exact]))
        traffic_distance = comm.traffic_distance
        parts = zip(comm.comm_cycles, comm.distance_cycles, comm.congestion_cycles, comm.die_cycles, strict=True)
        kernels = [
            k.model_copy(
                update={"comm_cycles": int(c), "distance_cycles": int(d), "congestion_cycles": int(g), "die_cycles": int(e)}
            )
            for k, (c, d, g, e) in zip(exact, parts, strict=True)
        ]
        solver, status, wall = f"{result.solver}+{placement.solver}", placement.status, result.wall_s + placement.wall_s
        message = placement.message
    else:
        kernels = kernel_plans(costs, result.choice)
        solver, status, wall, message = result.solver, result.status, result.wall_s, result.message
    stage = [k.latency_cycles + k.comm_cycles for k in kernels]
    worst = rules.bottleneck_index(stage)
    bk = kernels[worst]
    bottleneck = stage[worst]
    bound = result.bound
    kind = request.objective if request is not None else ObjectiveKind.THROUGHPUT
    value = rules.objective_value(kind, stage, kernel_preds(costs), _requests(request))
    cores_used = sum(k.cores for k in kernels)
    kc = costs.kernels[worst]
    objective = Objective(
        kind=kind,
        value_cycles=value,
        bound_cycles=bound,
        bottleneck_cycles=bottleneck,
        lower_bound_cycles=bound if kind is ObjectiveKind.THROUGHPUT else None,
        gap=rules.gap(value, bound),
        status=status,
        solver=solver,
        wall_s=round(wall, 4),
        bottleneck_kernel=bk.name,
        bound_by=kernel_bound_by(bk),
        sram_limited=_at_sram_floor(costs, kc, bk.cores),
        throughput_samples_per_s=rules.throughput(arch.clock_hz, bottleneck),
        cores_used=cores_used,
        placed=placement is not None,
        traffic_distance=traffic_distance,
        message=message,
        fits_wafer=fits,
    )
    llm = llm_record(costs, kernels, request.requests if request is not None else 1)
    if llm is not None and request is not None and request.generation is not None:
        llm = llm.model_copy(update={"generation": generation_record(request, costs, kernels)})
    if llm is not None:
        objective = objective.model_copy(update={"llm": llm, "tokens_per_s_per_request": llm.tokens_per_s_per_request})
    members, regions = expand_regions(costs, kernels)  # the units (kernels or regions) as the model's kernels
    # the worst routing adds its extra time to one pass, then paces it (``plan.experts``)
    one_pass = rules.objective_value(kind, stage, kernel_preds(costs))
    table = costs.members if costs.members is not None else costs
    moe = experts_record(table, members, stage, kind, one_pass, _requests(request))
    if moe is not None:
        objective = objective.model_copy(update={"experts": moe})
    return Plan(
        schema_=UNDECIDED,  # the driver records the decision (and the current schema) beside the request
        created_by=f"wsealloc {__version__}",
        request=request,
        model=model_ref(source),
        arch=ArchRef.of(arch),
        cost=costs.options,
        objective=objective,
        baseline=Baseline(
            name=baseline.solver,
            bottleneck_cycles=_slowest(costs, baseline.choice),
            cores_used=baseline.cores_used,
            status=baseline.status,
            placed_bottleneck_cycles=baseline_placed[1] if baseline_placed else None,
            value_cycles=baseline.objective,
            placed_value_cycles=baseline_placed[0] if baseline_placed else None,
            # (the units are the plan's kernels, in its order: a region plan's units are regions)
            layout=_layout(baseline_rects) if baseline_placed and baseline_rects is not None and costs.runs is None else None,
        ),
        kernels=tuple(members),
        stages=(StagePlan(index=0, kernels=len(members), cores_used=cores_used, bottleneck_cycles=bottleneck, status=status),),
        regions=tuple(regions),
    )


def merge_stages(
    costs: CostTable,
    source: OnnxSource | SyntheticSource,
    cuts: tuple[int, ...],
    stage_plans: list[Plan],
    transfer: np.ndarray,
    lower_bound: int | None,
    solver: str,
    wall_s: float,
    request: SolveRequest | None = None,
    stage_tables: Sequence[CostTable] = (),
) -> Plan:
    """One plan for a pipeline over several wafers: stage s runs kernels [cuts[s], cuts[s+1]) on wafer s
    (``transfer``: cycles per sample at each cut of ``costs``' kernels). Its value is the slowest stage
    (throughput, transfers included) or one token's time through every wafer and every link (latency:
    ``rules.wafers_value``); regions keep their wafer. ``stage_tables`` (each wafer's table, as its plan
    was solved on): the LLM record over the wafers."""
    arch = costs.arch
    kind = request.objective if request is not None else ObjectiveKind.THROUGHPUT
    kernels: list[KernelPlan] = []
    regions: list[RegionPlan] = []
    stages: list[StagePlan] = []
    worst_load, worst_kernel, worst_by, worst_sram = -1, "", BoundBy.COMPUTE, False
    base_worst: int | None = 0  # greedy allocation over the same stages (allocation only)
    placed_worst: int | None = 0  # the same, placed by the same construction (placed plans)
    links = [int(transfer[c]) for c in cuts[1:-1]]
    for s, plan in enumerate(stage_plans):
        offset = len(regions)
        regions += [rg.model_copy(update={"index": rg.index + offset, "stage": s}) for rg in plan.regions]
        kernels += [
            k.model_copy(update={"stage": s, "region": k.region + offset if k.region is not None else None}) for k in plan.kernels
        ]
        t_in, t_out = int(transfer[cuts[s]]), int(transfer[cuts[s + 1]])
        stages.append(
            StagePlan(
                index=s,
                kernels=len(plan.kernels),
                cores_used=plan.objective.cores_used,
                bottleneck_cycles=plan.objective.bottleneck_cycles,
                transfer_cycles=t_in,
                status=plan.objective.status,
            )
        )
        load = rules.stage_load(plan.objective.bottleneck_cycles, t_in, t_out)
        if load > worst_load:
            worst_load = load
            if not rules.transfer_bound(plan.objective.bottleneck_cycles, t_in, t_out):
                worst_kernel, worst_by = plan.objective.bottleneck_kernel, plan.objective.bound_by
                worst_sram = plan.objective.sram_limited  # the stage's own rule (smallest legal op model)
            else:
                own_first = rules.receives_slowest_cut(t_in, t_out) == "first"
                receiver = _units(plan)[0] if own_first else _units(stage_plans[s + 1])[0]  # a kernel, or a region
                worst_kernel, worst_by, worst_sram = receiver.name, BoundBy.TRANSFER, False
        alloc_base, placed_base = plan.baseline.bottleneck_cycles, plan.baseline.placed_bottleneck_cycles
        base_worst = None if base_worst is None or alloc_base is None else max(base_worst, alloc_base, t_in, t_out)
        placed_worst = None if placed_worst is None or placed_base is None else max(placed_worst, placed_base, t_in, t_out)
    # each wafer's one pass (its own plan's value is paced by the requests in flight on that wafer alone)
    wafer_paths = (
        [_path(t, _units(p)) for t, p in zip(stage_tables, stage_plans, strict=True)]
        if stage_tables
        else [p.objective.value for p in stage_plans]
    )
    value = rules.wafers_value(kind, worst_load, wafer_paths, links, _requests(request))
    assert value is not None  # every wafer's plan has a value
    # the multi-wafer bound holds over every cut, so reaching it proves optimality whatever each stage reported
    status = Status.OPTIMAL if rules.proven_optimal(value, lower_bound) else Status.FEASIBLE
    if len(stages) == 1 and stages[0].status is Status.OPTIMAL and status is not Status.OPTIMAL:
        # one wafer after all, of several allowed: its regions are proven for that wafer, not against the
        # cuts over more wafers the bound still admits, and one wafer's claim is the plan's (verify)
        stages[0] = stages[0].model_copy(update={"status": status})
    bound = lower_bound
    placed = all(p.objective.placed for p in stage_plans)
    traffic = sum(p.objective.traffic_distance or 0.0 for p in stage_plans) if placed else None
    objective = Objective(
        kind=kind,
        value_cycles=value,
        bound_cycles=bound,
        bottleneck_cycles=worst_load,
        lower_bound_cycles=bound if kind is ObjectiveKind.THROUGHPUT else None,
        gap=rules.gap(value, bound),
        status=status,
        solver=solver,
        wall_s=round(wall_s, 4),
        bottleneck_kernel=worst_kernel,
        bound_by=worst_by,
        sram_limited=worst_sram,
        throughput_samples_per_s=rules.throughput(arch.clock_hz, worst_load),
        cores_used=sum(k.cores for k in kernels if k.region is None) + sum(rg.cores for rg in regions),
        placed=placed,
        traffic_distance=traffic,
        message=(
            "1 wafer, no cut" if len(stage_plans) == 1 else f"{len(stage_plans)} wafers, cuts before kernels {list(cuts[1:-1])}"
        ),
    )
    first = stage_plans[0]
    paths = [p.objective.llm.token_path_cycles if p.objective.llm is not None else None for p in stage_plans]
    if len(stage_plans) == 1:  # one wafer after all: its plan's LLM record holds
        llm = first.objective.llm
    elif stage_tables and None not in paths:  # one token's time through every wafer and link, passes every slowest stage
        path = rules.wafers_value(ObjectiveKind.LATENCY, worst_load, paths, links)
        assert path is not None
        llm = llm_over_wafers(
            [(t, _units(p)) for t, p in zip(stage_tables, stage_plans, strict=True)], path, worst_load, _requests(request)
        )
    else:  # no KV cache: no token record
        llm = None
    if llm is not None:
        objective = objective.model_copy(update={"llm": llm, "tokens_per_s_per_request": llm.tokens_per_s_per_request})
    one_pass = rules.wafers_value(kind, worst_load, wafer_paths, links)  # (the worst routing's extra time adds to it)
    assert one_pass is not None
    moe = merged_experts([p.objective.experts for p in stage_plans], kind, one_pass, worst_load, _requests(request))
    if moe is not None:
        objective = objective.model_copy(update={"experts": moe})
    base_values = [p.baseline.value_cycles for p in stage_plans]
    placed_values = [p.baseline.placed_value_cycles for p in stage_plans]
    return Plan(
        schema_=UNDECIDED,  # the driver records the decision (and the current schema) beside the request
        created_by=f"wsealloc {__version__}",
        request=request,
        model=model_ref(source),
        arch=first.arch,
        cost=first.cost,
        objective=objective,
        baseline=Baseline(
            name="greedy (same stages)",
            bottleneck_cycles=base_worst,
            cores_used=first.baseline.cores_used if len(stage_plans) == 1 else None,
            status=Status.FEASIBLE,
            placed_bottleneck_cycles=placed_worst if placed else None,
            value_cycles=rules.wafers_value(kind, base_worst, base_values, links, _requests(request)),
            placed_value_cycles=rules.wafers_value(kind, placed_worst, placed_values, links, _requests(request))
            if placed
            else None,
            layout=first.baseline.layout if len(stage_plans) == 1 else None,  # (one wafer after all: its layout holds)
        ),
        kernels=tuple(kernels),
        stages=tuple(stages),
        regions=tuple(regions),
    )


def region_unit(rg: RegionPlan, compute: int = 0, noc: int = 0, stream: int | None = None) -> KernelPlan:
    """A region as the unit record its table holds (its grid, time, SRAM and place; the compute and NoC
    parts of its time where the caller recomputed them)."""
    return KernelPlan(
        name=rg.name,
        type="region",
        onnx_nodes=(),
        cores=rg.cores,
        grid=rg.grid,
        dataflow=Dataflow.REGION.value,
        latency_cycles=rg.latency_cycles,
        compute_cycles=compute,
        noc_cycles=noc,
        sram_bytes_per_core=rg.sram_bytes_per_core,
        comm_cycles=rg.comm_cycles,
        placement=rg.placement,
        stage=rg.stage,
        stream_cycles=stream,
    )


def _units(plan: Plan) -> list[KernelPlan]:
    """A wafer plan's units as its table holds them: its regions (as unit records), else its kernels."""
    return [region_unit(rg) for rg in plan.regions] if plan.regions else list(plan.kernels)


def _requests(request: SolveRequest | None) -> int:
    return request.requests if request is not None else 1
