"""The strategies, in the order a request is matched against them (the first that applies runs it),
and the look-ups the rest of the program uses: which strategy a request asks for, which one a plan's
decision names, the refusals of a request, a plan's decision read back.

A new way to run a model: one module with a :class:`~wsealloc.strategy.base.Strategy` subclass and
one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from wsealloc.cost.model import Routing
from wsealloc.strategy.auto import AutoMode
from wsealloc.strategy.base import Strategy
from wsealloc.strategy.constrained import Constrained, refuse_rules
from wsealloc.strategy.decision import Decision
from wsealloc.strategy.generation import EndToEnd
from wsealloc.strategy.modes import Mode
from wsealloc.strategy.pipeline import LayerPipeline
from wsealloc.strategy.regions import FixedGrid, SharedRegions
from wsealloc.strategy.streaming import WeightStreaming
from wsealloc.strategy.wafers import LatencyOverWafers

if TYPE_CHECKING:
    from wsealloc.request import SolveRequest

STRATEGIES: list[Strategy] = [
    WeightStreaming(),  # --mode streaming
    AutoMode(),  # --mode auto
    LatencyOverWafers(),  # --objective latency --wafers N|auto
    FixedGrid(),  # --grid RxC
    SharedRegions(),  # --share auto
    LayerPipeline(),  # everything else
]


def strategy_for(request: SolveRequest) -> Strategy:
    """The strategy ``request`` asks for, wrapped with the user's constraints when it has any, and with
    the prefill's layout chosen first when it generates end to end (``--prompt/--generate``)."""
    strategy = next(s for s in STRATEGIES if s.applies(request))
    if request.constraints is not None and request.constraints.rules:
        strategy = Constrained(strategy)
    return EndToEnd(strategy) if request.generation is not None else strategy


def strategy_named(name: str) -> Strategy:
    """The strategy whose decisions are named ``name`` (a plan's ``decision.strategy``)."""
    for strategy in STRATEGIES:
        if strategy.name == name:
            return strategy
    known = sorted({s.name for s in STRATEGIES if s.decision_type is not Decision})
    raise ValueError(f"decision.strategy {name!r} is not a strategy of this release ({', '.join(known)})")


def parse_decision(data: Any) -> Decision:
    """A plan's ``decision`` as its strategy's decision type (validated: a tampered field is named)."""
    if isinstance(data, Decision):
        return data
    if not isinstance(data, dict) or not isinstance(data.get("strategy"), str):
        raise ValueError("decision: expected an object with a 'strategy' name")
    kind = strategy_named(data["strategy"]).decision_type
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"decision{'.' + where if where else ''}: {str(err['msg']).removeprefix('Value error, ')}") from None


def refuse(request: SolveRequest) -> None:
    """Raise ``ValueError`` for what the request's strategy cannot plan (the user's words, before any work)."""
    if request.model.carries_machine:
        _refuse_contest(request)
    strategy = strategy_for(request)
    strategy.refuse(request)
    if request.constraints is not None and request.constraints.rules:
        refuse_rules(request, strategy.shares_cores, strategy.chooses_regions)


def _refuse_contest(request: SolveRequest) -> None:
    """A .kgraph instance is scored as the contest states it: the ways of running ONNX models do not apply."""
    if request.cost.train is not None:
        raise ValueError("a .kgraph contest instance is scored as the contest states it: --train applies to ONNX models")
    if request.mode is not Mode.PIPELINED:
        raise ValueError(
            f"a .kgraph contest instance is placed as the contest states it: --mode {request.mode.value} applies to ONNX models"
        )
    if request.constraints is not None and request.constraints.rules:
        raise ValueError("a .kgraph contest instance is scored as the contest states it: --constraints applies to ONNX models")
    # (as on an ONNX model without a KV cache or experts: the contest's score reads neither)
    if request.requests != 1:
        raise ValueError(
            f"a .kgraph contest instance is scored as the contest states it: --requests {request.requests} applies to "
            "LLM exports and latency plans"
        )
    if request.cost.routing is not Routing.UNIFORM:
        raise ValueError(
            f"a .kgraph contest instance is scored as the contest states it: --routing {request.cost.routing.value} "
            "applies to mixture-of-experts layers of ONNX models"
        )
