"""The mixture-of-experts record of a plan (``plan.objective.experts``): each layer's tiles and busiest
tile on its grid, the routing assumed, the tokens per expert, the layers' share of the time and the
plan's value under the worst routing. Computed from the kernels' records and the cost table by the
same code when the plan is built and when ``verify`` checks it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from wsealloc.cost import Dataflow, ExpertsWork, grid_costs
from wsealloc.cost.experts import ExpertsLayout, experts_grid_costs, experts_layout, routing_stats
from wsealloc.cost.model import Routing
from wsealloc.opmodels import CostTable
from wsealloc.plan.schema import ExpertsLayoutRecord, ExpertsRecord, KernelPlan
from wsealloc.problem.objective import ObjectiveKind, paced


def experts_record(
    costs: CostTable, members: Sequence[KernelPlan], stages: Sequence[int], kind: ObjectiveKind, value: int, requests: int = 1
) -> ExpertsRecord | None:
    """The record of one wafer's plan: ``costs`` its kernels' table (the members' table of a region
    plan), ``members`` every kernel's record on its grid (a region's members on the region's grid,
    operands in place), ``stages`` the units' stage times (a kernel's, or a region's at index
    ``member.region``), ``value`` the objective's value (a latency plan's: one pass). None when no
    kernel is a MoE layer.

    The worst routing's value: a token's path (``latency``) adds every layer's extra time, and with
    ``requests`` in flight each request's token takes that or ``requests`` times the slowest unit with
    its layers' extra time (``objective.paced``); min-max (``throughput``) takes the slowest unit with
    its layers' extra time."""
    works = {kc.kernel.name: kc.work for kc in costs.kernels if isinstance(kc.work, ExpertsWork)}
    if not works:
        return None
    arch, options = costs.arch, costs.options
    layouts: list[ExpertsLayoutRecord] = []
    extra = [0] * len(stages)
    # identical layers on one grid have one layout (the works are hashable for this; Qwen3-235B's 94
    # layers on 14 wafers took 2.7 s of a plan's making, three tilings' costs each)
    seen: dict[tuple[ExpertsWork, int, int, bool], tuple[int, ExpertsLayout, int]] = {}
    for i, m in enumerate(members):
        work = works.get(m.name)
        if work is None:
            continue
        (r, c), in_place = m.grid, m.region is not None
        key = (work, r, c, in_place)
        if key not in seen:
            rr, cc = np.array([r]), np.array([c])
            mine = int(grid_costs(work, arch, options, Dataflow.EXPERTS, rr, cc, in_place=in_place).latency[0])
            lay = experts_layout(work, arch, options, r, c, grid_costs, in_place=in_place)
            # the worst routing on the plan's own tiling (the tiles hold the experts they hold)
            worst = replace(work, routing=Routing.WORST)
            tiles = (lay.ta, lay.tb)
            bad = int(experts_grid_costs(worst, arch, options, rr, cc, grid_costs, in_place=in_place, tiling=tiles).latency[0])
            seen[key] = (mine, lay, bad)
        mine, lay, bad = seen[key]
        extra[m.region if m.region is not None else i] += max(bad - mine, 0)
        layouts.append(
            ExpertsLayoutRecord(
                kernel=m.name,
                tiles=(lay.ta, lay.tb),
                tile=lay.tile,
                experts_per_tile=lay.load.per_tile,
                busiest_tile_experts=round(lay.load.active, 6),
                busiest_tile_tokens=lay.load.tokens,
                latency_cycles=mine,
                worst_routing_latency_cycles=bad,
                shard=(work.shard, work.shards) if work.shards > 1 else None,
            )
        )
    if kind is ObjectiveKind.LATENCY:
        slowest = max((s + e for s, e in zip(stages, extra, strict=True)), default=0)
        worst_value = paced(value + sum(extra), slowest, requests)
    else:
        worst_value = max(value, max((s + e for s, e in zip(stages, extra, strict=True)), default=value))
    first = max(works.values(), key=lambda w: w.experts)
    at_work, per_expert = routing_stats(first)
    total = sum(m.latency_cycles for m in members)
    moe = sum(m.latency_cycles for m in members if m.name in works)
    return ExpertsRecord(
        layers=_layers(layouts),
        experts=first.experts,
        top_k=first.top_k,
        routing="uniform" if first.routing is Routing.UNIFORM else "worst",
        tokens_per_step=first.tokens,
        tokens_per_expert=round(per_expert, 6),
        experts_at_work=round(at_work, 6),
        time_share=round(moe / total, 6) if total else 0.0,
        experts_cycles=moe,
        kernels_cycles=total,
        worst_routing_value_cycles=worst_value,
        layouts=tuple(layouts),
    )


def merged(
    records: Sequence[ExpertsRecord | None], kind: ObjectiveKind, value: int, slowest: int = 0, requests: int = 1
) -> ExpertsRecord | None:
    """The record of a plan over several wafers from each wafer's: the layers of all; the worst
    routing's value adds every wafer's extra time to a token's path (``value``: one pass through every
    wafer and link), or takes the slowest wafer's. With ``requests`` in flight a request's token also
    takes ``requests`` turns of the slowest stage: each wafer's record holds its own units' turns under
    the worst routing (its records are paced so), ``slowest`` the plan's slowest stage, transfers
    included (the worst routing only adds to it)."""
    given = [r for r in records if r is not None]
    if not given:
        return None
    first = max(given, key=lambda r: r.experts)
    layouts = tuple(lay for r in given for lay in r.layouts)
    extra = [r.worst_routing_value_cycles for r in given]
    if kind is ObjectiveKind.LATENCY:
        worst = value + sum(lay.worst_routing_latency_cycles - lay.latency_cycles for lay in layouts)
        if requests > 1:
            worst = max([worst, requests * slowest, *extra])
    else:
        worst = max([value, *extra])
    moe, total = sum(r.experts_cycles for r in given), sum(r.kernels_cycles for r in given)
    return first.model_copy(
        update={
            "layers": _layers(layouts),
            "layouts": layouts,
            "worst_routing_value_cycles": worst,
            "experts_cycles": moe,
            "kernels_cycles": total,
            "time_share": round(moe / total, 6) if total else 0.0,
        }
    )


def _layers(layouts: Sequence[ExpertsLayoutRecord]) -> int:
    """The MoE layers the layouts are of (a layer split over shards counted once)."""
    return len({lay.layer for lay in layouts})
