"""The summary ``wsealloc solve`` prints: bottleneck, what bounds it, throughput, cores, speed-up, bound, gap."""

from __future__ import annotations

from rich.console import Console

from wsealloc.api import SolveOutcome
from wsealloc.constraints import Together, TogetherHow
from wsealloc.opmodels import CostTable
from wsealloc.plan.decision import strategy_of
from wsealloc.plan.schema import KernelPlan, Plan
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.problem.placement import defect_mask


def communication(k: KernelPlan) -> str:
    """ ", communication N (distance a + congestion b + die crossings c)" for a placed kernel, else ""."""
    if not k.comm_cycles:
        return ""
    named = [("distance", k.distance_cycles), ("congestion", k.congestion_cycles), ("die crossings", k.die_cycles)]
    parts = " + ".join(f"{name} {value:,}" for name, value in named if value)
    return f", communication {k.comm_cycles:,}" + (f" = {parts}" if parts else "")


def placement_cost(out: SolveOutcome) -> str | None:
    """What placing cost against the allocation-only optimum (single-wafer placed plans that lost
    cycles): the cycles, the kernels above the optimum, the cores kept, the defective cores avoided."""
    plan = out.plan
    obj = plan.objective
    alloc = out.result.objective
    if not obj.placed or len(plan.stages) > 1 or alloc is None or obj.bottleneck_cycles <= alloc:
        return None
    extra = obj.bottleneck_cycles - alloc
    slower = sum(1 for k in plan.kernels if k.latency_cycles + k.comm_cycles > alloc)
    cores = f"cores used {obj.cores_used:,} vs {out.result.cores_used:,} allocated" if out.result.cores_used else ""
    d = out.costs.arch.wafer.defects
    bad = int(defect_mask(out.costs.arch.rows, out.costs.arch.cols, d.cores, d.rate, d.seed).sum()) if d.cores or d.rate else 0
    unit = "cycle" if extra == 1 else "cycles"
    parts = [
        f"placement cost: +{extra:,} {unit} (+{100 * extra / alloc:.3g}%) over the allocation-only optimum {alloc:,}",
        f"{slower} of {len(plan.kernels)} kernels above it (communication, or fewer cores to fit the rectangles)",
        cores,
        f"{bad:,} defective cores avoided" if bad else "",
    ]
    return "; ".join(part for part in parts if part)


def _bottleneck_line(plan: Plan, costs: CostTable) -> str:
    """The slowest kernel, or the slowest region of kernels sharing cores in time."""
    obj = plan.objective
    limit = obj.bound_by.value + (", at its SRAM floor" if obj.sram_limited else "")
    region = next((rg for rg in plan.regions if rg.name == obj.bottleneck_kernel), None)
    if region is not None:
        comm = f", communication {region.comm_cycles:,}" if region.comm_cycles else ""
        parts = strategy_of(plan).region_sram_words(region.sram, costs)
        return (
            f"slowest region {region.name} ({len(region.members)} kernels in turn on {region.grid[0]}x{region.grid[1]}): "
            f"{region.latency_cycles:,} cycles{comm}; SRAM {region.sram_bytes_per_core:,} B/core ({parts})"
        )
    bk = next(k for k in plan.kernels if k.name == obj.bottleneck_kernel)
    return (
        f"bottleneck kernel {bk.name} ({bk.type}, {bk.grid[0]}x{bk.grid[1]} {bk.dataflow}): bound by {limit} "
        f"(compute {bk.compute_cycles:,}, NoC {bk.noc_cycles:,}{communication(bk)} cycles, "
        f"SRAM {bk.sram_bytes_per_core:,} B/core)"
    )


def llm_lines(plan: Plan) -> list[str]:
    """An LLM plan's tokens: per request and in aggregate, the time to the first token, the context."""
    llm = plan.objective.llm
    if llm is None:
        return []
    clock = plan.arch.clock_hz
    per_pass = f"{llm.token_path_cycles:,} cycles = {llm.token_path_cycles / clock * 1e6:,.2f} us"
    if llm.phase == "prefill":
        first = f"{(llm.time_to_first_token_s or 0.0) * 1e3:,.3f} ms"
        lines = [
            f"prefill of {llm.tokens_per_request:,} tokens x {llm.batch}: time to first token {first} ({per_pass}); "
            f"{llm.tokens_per_s_per_request:,.1f} tokens/s per request (prompt tokens over its time)"
        ]
    else:
        # each request gets a token every pass, or every turn of the slowest stage among the requests in
        # flight when that is longer (with 2 requests: 1,886 cycles where one pass takes 1,102)
        turn = max(llm.token_path_cycles, llm.requests * llm.slowest_stage_cycles)
        each = f"{turn:,} cycles = {turn / clock * 1e6:,.2f} us"
        lines = [
            f"decode at context {llm.context:,}, batch {llm.batch}: {llm.tokens_per_s_per_request:,.1f} tokens/s per request "
            + (f"(one token per {per_pass})" if turn == llm.token_path_cycles else f"(one token per {each}; a pass {per_pass})")
        ]
    lines.append(
        f"{llm.requests} request(s) in flight: {llm.aggregate_tokens_per_s:,.1f} tokens/s in all "
        f"(a new pass every {llm.slowest_stage_cycles:,} cycles at most)"
    )
    # the record's bytes are every sequence's: the batch of each pass times the requests in flight (a user
    # sizing SRAM read "1 MiB per token at batch 1" for 8 requests of 128 KiB each as 8x the real cost)
    seqs = llm.batch * llm.requests
    each, fits = "", ""
    if seqs > 1:
        each = f" for {seqs} sequences ({llm.batch} a pass x {llm.requests} in flight; {llm.kv_bytes_per_token // seqs:,} B each)"
        fits = " for each"
    lines.append(
        f"KV cache {llm.kv_bytes_per_token:,} B per token of context{each}: the SRAM beside the weights holds at most "
        f"{llm.largest_context:,} tokens of context{fits} (all of it; a kernel's own grids may hold fewer)"
    )
    gen = llm.generation
    if gen is not None:
        ms = 1e3
        lines.append(
            f"generation end to end, prompt {gen.prompt:,} + {gen.generate:,} tokens: time to first token "
            f"{gen.time_to_first_token_s * ms:,.3f} ms (prefill on {gen.prefill_grid[0]} x {gen.prefill_grid[1]}, "
            f"{gen.prefill_cycles:,} cycles; {_prefill_layout(gen.prefill_regions, gen.prefill_fits_wafer)}); "
            f"time per output token first {gen.time_per_output_token_first_s * ms:,.4f} ms, "
            f"last {gen.time_per_output_token_last_s * ms:,.4f} ms, mean {gen.time_per_output_token_mean_s * ms:,.4f} ms "
            f"({gen.distinct_step_costs:,} distinct step times, summed exactly); {gen.end_to_end_s * ms:,.3f} ms in all, "
            f"{gen.end_to_end_tokens_per_s:,.1f} output tokens/s end to end"
        )
    return lines


def _prefill_layout(regions: int, fits: bool) -> str:
    """Where the prefill's weights and cache lie: the time to first token is read off that layout."""
    if not fits:  # a plan of an older release (verify rejects it)
        return f"its weights and cache in {regions} regions of that grid, more than the wafer holds: no plan, re-solve"
    if regions == 1:
        return "its weights and cache in that one grid"
    return f"its weights and cache in {regions} regions of that grid, side by side on the wafer"


def experts_lines(plan: Plan) -> list[str]:
    """A mixture-of-experts plan: the experts, the routing assumed and what it gives each expert, the
    layers' share of the time, where the experts lie, and the value under the worst routing."""
    moe = plan.objective.experts
    if moe is None:
        return []
    value = plan.objective.value
    worst = moe.worst_routing_value_cycles
    shapes: dict[tuple[int, tuple[int, int], tuple[int, int], int, float, int], int] = {}
    for lay in moe.layouts:
        of = lay.shard[1] if lay.shard is not None else 1
        key = (of, lay.tiles, lay.tile, lay.experts_per_tile, lay.busiest_tile_experts, lay.busiest_tile_tokens)
        shapes[key] = shapes.get(key, 0) + 1
    placed = "; ".join(
        f"{n} {'layer(s)' if of == 1 else f'shard(s) of E/{of} experts'} on {t[0]}x{t[1]} tiles of {c[0]}x{c[1]} cores, "
        f"{m} expert(s) a tile, the busiest tile {a:,.2f} expert(s) at work x {tok:,} token(s)"
        for (of, t, c, m, a, tok), n in shapes.items()
    )
    split = {lay.layer for lay in moe.layouts if lay.shard is not None}
    return [
        f"mixture of experts: {moe.layers} layer(s) of {moe.experts} experts, top-{moe.top_k}, {moe.routing} routing: "
        f"{moe.tokens_per_step:,} token(s) a step, {moe.tokens_per_expert:,.3g} per expert on average, "
        f"{moe.experts_at_work:,.3g} experts at work; the layers take {moe.time_share:.1%} of the kernels' time",
        f"experts placed: {placed}"
        + (f" ({len(split)} layer(s) split into consecutive shards: expert parallelism)" if split else ""),
        f"worst routing (a bound on any: the busiest tiles serve every pick they can, on the same tiles): {worst:,} cycles, "
        f"{worst / value if value else 0:.2f}x the plan's {value:,}",
    ]


def constraints_line(out: SolveOutcome) -> str | None:
    """The user's rules and what they cost: the plan's bound with them beside the proven optimum
    without them (``objective.constraints``)."""
    record = out.plan.objective.constraints
    request = out.plan.request
    if record is None or request is None or request.constraints is None:
        return None
    kinds: dict[str, int] = {}
    applied = out.costs.applied
    # the rules that apply to the model (an old plan's for kernels it lost are dropped), as the record counts them
    for rule in (applied.constraints if applied is not None else request.constraints).rules:
        kinds[rule.kind] = kinds.get(rule.kind, 0) + 1
    counted = ", ".join(f"{n} {kind}" for kind, n in kinds.items()) or "none applies to this model"
    kept = f"; {applied.kept_out_cores:,} cores kept out" if applied is not None and applied.kept_out_cores else ""
    bound = out.plan.objective.bound_cycles
    price = record.price(bound)
    if price is None or bound is None or record.unconstrained_bound_cycles is None:
        cost = "price unknown (no bound)"
    else:
        free = "the optimum" if record.unconstrained_optimal else "a lower bound"
        cost = (
            f"price {price:+.2%}: proven bound {bound:,} cycles with them, {record.unconstrained_bound_cycles:,} without "
            f"({free} without them)"
        )
    return f"constraints: {record.rules} rule(s) from {record.source} ({counted}{kept}), {_what_holds(out)}; {cost}"


def _what_holds(out: SolveOutcome) -> str:
    """What the rules held in this plan. Every rule is folded into the op models the baseline and every
    solver choose among (grids, cores, cuts); where rules put rectangles (``place``, ``keep-out``,
    ``together: touch``) holds only for a placed plan: with ``--no-place`` nothing was put anywhere."""
    request = out.plan.request
    assert request is not None and request.constraints is not None
    rules = request.constraints.rules
    touch = any(isinstance(rule, Together) and rule.how is TogetherHow.TOUCH for rule in rules)
    where = sorted({rule.kind for rule in rules if rule.kind in ("place", "keep-out")}) + (["together: touch"] if touch else [])
    if out.plan.objective.placed or not where:
        return "honoured by the baseline and every solver"
    named = " and ".join(where) if len(where) <= 2 else f"{', '.join(where[:-1])} and {where[-1]}"
    why = "--no-place: nothing was placed" if not request.place else "the plan is not placed"
    return (
        f"honoured by the baseline and every solver in the grids and cores they allow; the positions of the {named} "
        f"rules are not ({why})"
    )


def _rate(plan: Plan, clock: str) -> str:
    """The plan's samples per second: a new sample every slowest stage. A decode step needs its request's
    previous token, so that rate is only reached with a request in every stage: for decode exports it is
    named as such (beside it, ``llm_lines`` says what the requests in flight reach: Qwen3-235B's 50,638
    samples/s stood next to 743.8 tokens/s for one request)."""
    rate = plan.objective.throughput_samples_per_s
    llm = plan.objective.llm
    if llm is None or llm.phase == "prefill":
        return f"throughput {rate:,.1f} samples/s {clock}"
    return f"throughput at most {rate:,.1f} passes/s {clock} with a request in every stage ({llm.requests} in flight: below)"


def summary_lines(out: SolveOutcome) -> list[str]:
    """Human-readable lines describing a solve outcome."""
    plan = out.plan
    obj = plan.objective
    arch = plan.arch
    gap = f"{obj.gap:.2%}" if obj.gap is not None else "n/a"
    wafers = len(plan.stages)
    total = arch.total_cores * wafers
    on = f"{wafers} x {arch.name}" if wafers > 1 else arch.name
    if obj.kind is ObjectiveKind.LATENCY:
        bound = f"{obj.bound_cycles:,}" if obj.bound_cycles is not None else "n/a"
        requests = plan.request.requests if plan.request is not None else 1
        # with requests in flight the value is each request's token time (``objective.Latency``)
        what = "one pass" if requests == 1 else f"a token per request, {requests} in flight,"
        headline = f"{what} {obj.value:,} cycles (latency), bound {bound}, gap {gap}; slowest stage {obj.bottleneck_cycles:,}"
    else:
        bound = f"{obj.lower_bound_cycles:,}" if obj.lower_bound_cycles is not None else "n/a"
        headline = f"bottleneck {obj.bottleneck_cycles:,} cycles, bound {bound}, gap {gap}"
    lines = [
        f"model {plan.model.path}: {len(plan.kernels)} kernels ({out.costs.kgraph.ops.onnx_nodes} ONNX nodes) "
        f"on {on} ({arch.rows}x{arch.cols} = {arch.total_cores:,} cores{' each' if wafers > 1 else ''})",
        f"solver {obj.solver}: {obj.status.value} in {obj.wall_s:.2f} s; {headline}",
        _bottleneck_line(plan, out.costs),
        f"{_rate(plan, f'at {arch.clock_hz / 1e9:.2f} GHz')}; "
        f"cores used {obj.cores_used:,} of {total:,} ({obj.cores_used / total:.1%})",
    ]
    lines += strategy_of(plan).summary_lines(plan, out.costs)  # the way it runs: regions, training, streaming
    lines += llm_lines(plan)
    lines += experts_lines(plan)
    if wafers > 1:
        lines.append(
            "stages: "
            + "; ".join(
                f"wafer {s.index}: {s.kernels} kernels, {s.cores_used:,} cores, {s.bottleneck_cycles:,} cycles, "
                f"transfer in {s.transfer_cycles:,} ({s.status.value})"
                for s in plan.stages
            )
        )
    cost = placement_cost(out)
    if cost is not None:
        lines.append(cost)
    if obj.comm_bound_cycles is not None:  # placed: the bound that counts what tensors must cross
        over = obj.value / obj.comm_bound_cycles - 1.0 if obj.comm_bound_cycles else 0.0
        lines.append(
            f"with communication counted no layout beats {obj.comm_bound_cycles:,} cycles "
            f"({_allocation_bound(obj.bound_cycles)}); this layout is {over:+.1%} over it"
        )
    priced = constraints_line(out)
    if priced is not None:
        lines.append(priced)
    base = plan.baseline
    if base.value_cycles is not None:
        if not obj.placed:
            placed = ""
        elif base.placed_value_cycles is not None:
            placed = f", placed by the same construction {base.placed_value_cycles:,} cycles"
        else:  # (the time ran out before its layout: the line stays, the placed comparison does not)
            placed = ", not placed in the time (no placed speed-up)"
        speedup = f"; speed-up {out.speedup:.2f}x" if out.speedup is not None else ""
        lines.append(f"baseline {base.name}: {base.value_cycles:,} cycles ({base.status.value}){placed}{speedup}")
    if obj.message:
        lines.append(f"note: {obj.message}")
    lines += [f"control flow: {note}" for note in out.costs.kgraph.ops.control_flow]
    return lines


def print_summary(out: SolveOutcome, console: Console) -> None:
    """Print the summary lines."""
    for line in summary_lines(out):
        console.print(line, highlight=False, soft_wrap=True)


def _allocation_bound(bound: int | None) -> str:
    """The allocation's bound beside the one counting communication; a solver that proves none
    (``greedy-seed``) has none, not a bound of 0."""
    return f"allocation bound {bound:,}" if bound is not None else "no allocation bound: the solver proves none"
