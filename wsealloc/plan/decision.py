"""The decision a plan records, or (versions 1 and 2, which wrote it into the request) the one read
off the plan: what ``verify`` replays and the reports describe."""

from __future__ import annotations

import numpy as np
from pydantic import ValidationError

from wsealloc.errors import PlanError
from wsealloc.plan.schema import Plan
from wsealloc.request import Mode
from wsealloc.strategy.base import Strategy
from wsealloc.strategy.decision import Decision, PipelineDecision, RegionsDecision, StreamingDecision
from wsealloc.strategy.registry import strategy_named


def decision_of(plan: Plan) -> Decision:
    """The plan's decision: recorded, or read off an older plan (:func:`legacy_decision`)."""
    return plan.decision if plan.decision is not None else legacy_decision(plan)


def strategy_of(plan: Plan) -> Strategy:
    """The strategy whose decision the plan records (a name this release does not know: :class:`PlanError`)."""
    try:
        return strategy_named(decision_of(plan).strategy)
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def legacy_decision(plan: Plan) -> Decision:
    """The decision a version-1 or -2 plan made, read off it: those versions wrote the chosen mode, the
    region family and the segment length back into the request, and the regions and stages into the plan."""
    request = plan.request
    if request is not None and request.mode is Mode.STREAMING:
        return StreamingDecision(batch=request.stream_samples)
    if plan.regions:
        regions = sorted(plan.regions, key=lambda rg: rg.index)
        ends = np.cumsum([len(rg.members) for rg in regions]).tolist()
        runs = tuple(zip([0, *ends[:-1]], ends, strict=True))
        sharing = request.sharing if request is not None else None
        grid = sharing.grid if sharing is not None else None
        family = None if grid is not None else (sharing.family if sharing is not None else "squares")
        grids = tuple(rg.grid for rg in regions) if grid is not None or family == "stacked" else None
        try:
            return RegionsDecision(family=family, runs=runs, grids=grids)
        except ValidationError as exc:
            raise PlanError(f"regions: {exc.errors()[0]['msg']}") from None
    stage_of = [k.stage for k in plan.kernels]
    cuts = [0] + [i for i in range(1, len(stage_of)) if stage_of[i] != stage_of[i - 1]] + [len(stage_of)]
    segment = plan.cost.train.segment if plan.cost.train is not None else None
    try:
        return PipelineDecision(wafers=len(cuts) - 1, cuts=tuple(cuts), segment=segment)
    except ValidationError:  # stages out of order: the stage checks name it
        return PipelineDecision(wafers=1, cuts=(0, len(stage_of)), segment=segment)
