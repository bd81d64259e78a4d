"""``--mode auto``: the layer pipeline or weight streaming, whichever proves faster, compared in one
place by their proven bounds (each proven once: the chosen strategy's parts keep theirs).

The layer pipeline is taken when it fits and its proven optimum (after its own decisions: the
recomputation segments) is no slower than streaming; else streaming, when its batch fits. The plan's
decision is the chosen strategy's, its ``reason`` names both rates; the request keeps ``mode: auto``."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from wsealloc.budget import Deadline
from wsealloc.errors import InfeasibleError
from wsealloc.opmodels import CostTable
from wsealloc.problem.objective import ProvenBound
from wsealloc.strategy.base import Prepared, Progress, Strategy, quiet
from wsealloc.strategy.decision import Decision
from wsealloc.strategy.modes import Mode
from wsealloc.strategy.pipeline import LayerPipeline, streamed_label
from wsealloc.strategy.streaming import WeightStreaming, refuse_streaming

if TYPE_CHECKING:
    from wsealloc.request import SolveRequest

PIPELINE = LayerPipeline()
STREAMING = WeightStreaming()


def _rate(prepared: Prepared) -> int | None:
    bound = prepared.parts[0].bound if prepared.parts else None
    return bound.value if bound is not None else None


class AutoMode(Strategy):
    """Chooses between :class:`LayerPipeline` and :class:`WeightStreaming` (see the module docstring)."""

    name = "auto"
    decision_type = Decision  # never recorded: the plan records the chosen strategy's decision
    kernels_must_fit = False  # a model that fits no pipeline may still stream

    def applies(self, request: SolveRequest) -> bool:
        return request.mode is Mode.AUTO

    def refuse(self, request: SolveRequest) -> None:
        refuse_streaming(request)

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        batch = request.stream_samples
        try:
            streamed: Prepared | None = STREAMING.decide(costs, request, deadline, say)
        except InfeasibleError:
            streamed = None
        unfit = [kc.kernel.name for kc in costs.kernels if len(kc.frontier) == 0]
        piped: Prepared | None = None
        if unfit:
            why_not = (
                f"{len(unfit)} kernel(s) fit no grid of their own ({', '.join(unfit[:2])}{', ...' if len(unfit) > 2 else ''})"
            )
        else:
            why_not = "its kernels' smallest op models need more cores than the wafer has"
            try:
                piped = PIPELINE.decide(costs, request, deadline, say)
            except InfeasibleError:
                if streamed is None:
                    raise
        clock = costs.arch.clock_hz
        if piped is None and streamed is None:
            raise InfeasibleError(
                f"{costs.kgraph.ops.source}: neither mode fits {costs.arch.name}: the layer pipeline does not ({why_not}), and "
                f"streaming {batch} sample(s) per pass needs more SRAM than the wafer has (a smaller --stream-batch)"
            )
        if piped is None:
            assert streamed is not None
            return _because(streamed, f"auto: the layer pipeline does not fit ({why_not}); streamed")
        pipe, stream = _rate(piped), _rate(streamed) if streamed is not None else None
        rates = f"pipelined {clock / (pipe or 1):,.1f} samples/s (proven)"
        if streamed is None or stream is None:
            return _because(piped, f"auto: {rates}; streaming {batch} sample(s) per pass does not fit")
        batch = getattr(streamed.decision, "batch", batch)  # (the micro-batch, when it chose one)
        rates += f", streamed {clock / stream:,.1f} samples/s at {batch} per pass"
        if pipe is not None and pipe <= stream:
            return _because(piped, f"auto: {rates}: pipelined")
        return _because(streamed, f"auto: {rates}: streamed")

    def price_reference(self, request: SolveRequest, prepared: Prepared) -> ProvenBound:
        return PIPELINE.price_reference(request, prepared)  # constraints run in the layer pipeline only

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        if decision.strategy not in (PIPELINE.name, STREAMING.name):
            return f"decision.strategy is {decision.strategy!r}; --mode auto chooses the pipeline or streaming"
        return (PIPELINE if decision.strategy == PIPELINE.name else STREAMING).admits(request, decision, costs)

    def alternatives(self, request: SolveRequest, decision: Decision) -> list[tuple[str, dict[str, object]]]:
        if decision.strategy == STREAMING.name:  # (the pipeline has no streamed pass: --stream-batch dropped, as streaming's)
            return [("layer pipeline (--mode pipelined)", {"mode": "pipelined", "stream_batch": None})]
        return [(streamed_label(request), {"mode": "streaming"})]


def _because(prepared: Prepared, why: str) -> Prepared:
    """``prepared`` with ``why`` as its decision's reason (the plan's note starts with it)."""
    return replace(prepared, decision=prepared.decision.model_copy(update={"reason": why}))
