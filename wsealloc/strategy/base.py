"""The one protocol for a way to run a model (a *strategy*), and what a strategy hands the driver.

A strategy takes the cost table of a model and the request, and decides everything that is not the
allocation itself: how many wafers and where they are cut, which kernels share cores in time and on
which grids, whether weights stream in, how long a training recomputation segment is. It returns a
:class:`Prepared`: the tables the solvers get (one :class:`Part` per wafer), each with its bound
proven once (the driver passes it to the backends and the plan, never proving it again), and a
typed :class:`~wsealloc.strategy.decision.Decision` that the plan records. ``lower`` turns a
decision back into the table the plan's units were solved on: a pure function, which
``wsealloc verify`` calls on the plan's recorded decision instead of working the choice out again.

The run (``wsealloc.api``) asks the strategy to get ready before the model is read (``ready``), then
reads it and hands both to the driver. The driver (``wsealloc.driver``) never asks which strategy it
holds: it solves the parts, builds the plan from what the strategy prepared (decision, price, note)
and asks the strategy for a second try when a layout does not pack (``retry``). Reports ask the strategy for their lines
(``summary_lines``) and for the other ways to run the same request (``alternatives``).

A new way to run a model is one module with a subclass of :class:`Strategy` and one line in
``strategy.registry.STRATEGIES`` (docs/architecture.md, "Where to add a strategy").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions
from wsealloc.opmodels import CostTable
from wsealloc.problem.objective import ProvenBound
from wsealloc.solvers.stages import StagePartition
from wsealloc.strategy.decision import Decision

if TYPE_CHECKING:  # the request and the plan sit above this layer; a strategy only reads them
    from wsealloc.plan.schema import Plan, SramRecord
    from wsealloc.request import SolveRequest

Progress = Callable[[str], None]


def quiet(message: str) -> None:
    """A progress sink that says nothing."""


@dataclass(frozen=True)
class Part:
    """One table the solvers get: one wafer's kernels, or the units (regions) standing for them.

    ``bound`` is proven once, by the strategy; ``wider`` says it was proven over more than this table
    (every partition into regions the sharing search tried, every recomputation way of every kernel):
    a result reaching it is optimal, and it never rises to the backend's own bound for this table.
    ``place``: False keeps the part unplaced (a streamed kernel has the whole wafer). ``fixed``: every
    unit has one op model and nothing is left to choose (a fixed ``--grid``): no backend runs, and a
    part that needs more cores than a wafer has is reported rather than refused."""

    table: CostTable
    bound: ProvenBound | None
    wider: bool = False
    place: bool = True
    fixed: bool = False


@dataclass(frozen=True)
class Price:
    """The reference of the user's constraints' price: the objective's proven bound of the same
    request without them (None: not known), and whether it is the optimum or only a lower bound."""

    source: str
    rules: int
    unconstrained: int | None
    optimal: bool


@dataclass(frozen=True)
class Prepared:
    """What a strategy decided for one solve: the decision the plan records, the parts the solvers
    get, the table an outcome reports (``costs``: the one part's, or the whole table cut over wafers),
    the table the parts come from (``base``: before recomputation is settled or a wafer cut; the
    constraints' price reads it), the exact cut when the request pipelines over wafers (``partition``:
    the plan merges one plan per wafer; its bound is ``bound``, the cut's), and the price of the user's
    constraints when there are any. ``state`` is the strategy's own (what ``retry`` needs)."""

    decision: Decision
    parts: tuple[Part, ...]
    costs: CostTable
    base: CostTable
    partition: StagePartition | None = None
    bound: int | None = None
    price: Price | None = None
    state: Any = field(default=None, compare=False)
    # other decisions worth solving beside this one, whose allocations alone do not say which plan is
    # faster (placement adds communication): the driver solves each in a share of the time and keeps the
    # fastest plan (``strategy.regions.own_rectangles``: every kernel on its own rectangle beside regions)
    rivals: tuple[Prepared, ...] = ()


class Strategy(ABC):
    """Base class of every way to run a model (see the module docstring). Subclasses set ``name`` and
    ``decision_type`` and override what their way needs; the defaults are those of a strategy that
    keeps every kernel on its own rectangle of one table."""

    name: ClassVar[str]
    decision_type: ClassVar[type[Decision]]
    # the front end refuses a kernel that fits no grid of its own (streaming and auto judge that themselves)
    kernels_must_fit: ClassVar[bool] = True
    # kernels share regions of cores in time (the user's rules are tested for conflicts so)
    shares_cores: ClassVar[bool] = False
    # the strategy chooses which kernels share a region (the user's 'together: how: region' groups apply)
    chooses_regions: ClassVar[bool] = False

    @abstractmethod
    def applies(self, request: SolveRequest) -> bool:
        """Whether ``request`` asks for this way (the registry takes the first that applies)."""

    def refuse(self, request: SolveRequest) -> None:
        """Raise ``ValueError`` with the user's words for what this way cannot plan (checked when the
        request is validated, before any work)."""
        return None  # by default a way refuses nothing

    def ready(self, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> None:
        """Work the request needs before its model is read, where a refusal costs no reading (a
        generation's prefill layout: ``strategy.generation``); by default none."""
        return None

    @abstractmethod
    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        """The decision for ``costs`` and the parts the solvers get, each bound proven."""

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        """Another decision after the parts of ``prepared`` found no layout (None: there is none)."""
        return None

    def price_reference(self, request: SolveRequest, prepared: Prepared) -> ProvenBound:
        """The objective's proven bound of ``prepared``'s request without the user's constraints."""
        return ProvenBound(self.name, None, None)

    def cost_options(self, decision: Decision, options: CostOptions) -> CostOptions:
        """The cost options the decision's table was costed with (the request's, unless it chose some)."""
        return options

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        """The table the plan's units were solved on, from the model's table under
        :meth:`cost_options` (pure: ``verify`` replays the recorded decision with it)."""
        return costs

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        """Why this request could not have led to ``decision`` on the model's table ``costs`` (a violation
        naming the field), or None: ``verify`` asks before it replays the decision."""
        if decision.strategy != self.name:
            return f"decision.strategy is {decision.strategy!r}, but the request asks for the {self.name} strategy"
        return None

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        """Lines the solve summary prints for this way of running (after the throughput line)."""
        return []

    def region_sram_words(self, sram: SramRecord, costs: CostTable) -> str:
        """What a region's SRAM holds, in words (the summary's slowest-region line)."""
        return f"weights {sram.weights:,}, KV cache {sram.state:,}, buffers {sram.buffers:,}"

    def alternatives(self, request: SolveRequest, decision: Decision) -> list[tuple[str, dict[str, object]]]:
        """Other ways to run the same request that ``compare`` shows beside it: a label and the
        request fields that ask for it."""
        return []


class Wrapper(Strategy):
    """A strategy around another (``inner``), the decision and everything else the inner one's: the
    user's rules (``strategy.constrained``), a generation end to end (``strategy.generation``).
    Subclasses override only what they add."""

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]  # the plan records the inner strategy's decision
        self.decision_type = inner.decision_type  # type: ignore[misc]
        self.kernels_must_fit = inner.kernels_must_fit  # type: ignore[misc]
        self.shares_cores = inner.shares_cores  # type: ignore[misc]
        self.chooses_regions = inner.chooses_regions  # type: ignore[misc]

    def applies(self, request: SolveRequest) -> bool:
        return self.inner.applies(request)

    def refuse(self, request: SolveRequest) -> None:
        self.inner.refuse(request)

    def ready(self, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> None:
        self.inner.ready(request, deadline, say)

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        return self.inner.decide(costs, request, deadline, say)

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        return self.inner.retry(costs, request, prepared, deadline, say)

    def price_reference(self, request: SolveRequest, prepared: Prepared) -> ProvenBound:
        return self.inner.price_reference(request, prepared)

    def cost_options(self, decision: Decision, options: CostOptions) -> CostOptions:
        return self.inner.cost_options(decision, options)

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        return self.inner.lower(decision, costs)

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        return self.inner.admits(request, decision, costs)

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        return self.inner.summary_lines(plan, costs)

    def region_sram_words(self, sram: SramRecord, costs: CostTable) -> str:
        return self.inner.region_sram_words(sram, costs)

    def alternatives(self, request: SolveRequest, decision: Decision) -> list[tuple[str, dict[str, object]]]:
        return self.inner.alternatives(request, decision)
