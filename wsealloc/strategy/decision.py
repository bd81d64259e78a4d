"""Decisions: what a strategy chose for a solve, recorded in the plan beside the request (which stays
as the user gave it) and replayed by ``wsealloc verify`` (``Strategy.lower``, a pure function of the
decision and the cost table).

Each strategy has its own decision type, a frozen model whose ``strategy`` field names it; a plan
reads its ``decision`` through the registry (:func:`wsealloc.strategy.registry.parse_decision`), so a
new strategy's decision needs no change here."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from wsealloc.strategy.modes import Family, Side

Index = Annotated[int, Field(strict=True, ge=0, lt=2**31)]


class Decision(BaseModel):
    """The common part: which strategy decided, and why it was the one (``--mode auto`` says which
    rates it compared; the plan's note starts with it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: str
    reason: str = ""

    @model_serializer(mode="wrap")
    def _unset_micro(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # micro-batching's and expert parallelism's fields appear only when set: every other plan and
        # request reads as before
        data: dict[str, Any] = handler(self)
        for key in ("micro_batch", "global_batch", "expert_shards", "split_layers"):
            if key in data and data[key] is None:
                del data[key]
        return data

    def stage_cuts(self, units: int) -> tuple[int, ...]:
        """Where the plan's ``units`` (kernels or regions, in dataflow order) are cut over wafers: one
        wafer unless the decision cuts."""
        return (0, units)


class PipelineDecision(Decision):
    """The layer pipeline: the cut over wafers (``cuts``: stage s holds kernels [cuts[s], cuts[s+1]) in
    dataflow order) and, in training, the recomputation segment length the table was costed with (None:
    the default, about sqrt(D) stages). Which segments recompute is in each kernel's dataflow."""

    strategy: Literal["pipeline"] = "pipeline"
    wafers: Annotated[int, Field(strict=True, ge=1, le=2**16)]
    cuts: tuple[Index, ...]
    segment: Annotated[int, Field(strict=True, ge=1, le=2**16)] | None = None
    # training with micro-batches (docs/cost-model.md, "Micro-batches"): the samples of one; None: every
    # sample its own step (a plan of an earlier release, or a global batch of 1)
    micro_batch: Annotated[int, Field(strict=True, ge=1, le=2**20)] | None = None

    @model_validator(mode="after")
    def _cuts(self) -> PipelineDecision:
        ordered = all(a < b for a, b in zip(self.cuts, self.cuts[1:], strict=False))
        if len(self.cuts) != self.wafers + 1 or not self.cuts or self.cuts[0] != 0 or not ordered:
            raise ValueError(f"decision.cuts {list(self.cuts)}: expected {self.wafers + 1} increasing kernel indices from 0")
        return self

    def stage_cuts(self, units: int) -> tuple[int, ...]:
        return self.cuts


class StreamingDecision(Decision):
    """Weight streaming: every kernel in turn on the whole wafer for ``batch`` samples per pass (which
    segments recompute follows from the table and the batch: ``opmodels.streaming``)."""

    strategy: Literal["streaming"] = "streaming"
    batch: Annotated[int, Field(strict=True, ge=1, le=2**20)]
    # training with micro-batches: ``batch`` is the micro-batch, streamed in ceil(global_batch / batch)
    # passes per weight update; None: one pass per update (a plan of an earlier release, or --stream-batch)
    global_batch: Annotated[int, Field(strict=True, ge=1, le=2**20)] | None = None
    # the recomputation segment length the micro-batch search chose with it (None: the request's, or the
    # default about sqrt(D) stages)
    segment: Annotated[int, Field(strict=True, ge=1, le=2**16)] | None = None

    @model_validator(mode="after")
    def _micro(self) -> StreamingDecision:
        if self.global_batch is not None and self.batch > self.global_batch:
            raise ValueError(f"decision.batch {self.batch} is over the global batch {self.global_batch}")
        return self


class RegionsDecision(Decision):
    """Cores shared in time: ``runs`` of consecutive kernels, each a region ([first, end) in dataflow
    order; empty: every kernel kept its own rectangle), each on its own grid (``grids``: a fixed
    ``--grid``, or stacked columns whose grids the sharing search fixed) or on a grid of ``family``
    the allocation chose."""

    strategy: Literal["regions"] = "regions"
    family: Family | None  # None: a fixed --grid
    runs: tuple[tuple[Index, Index], ...]
    grids: tuple[tuple[Side, Side], ...] | None = None
    # every MoE layer's experts split into this many consecutive kernels (``opmodels.experts``: the runs
    # index the split table); None: the layers kept whole (``SharedRegions``, requests in flight)
    expert_shards: Annotated[int, Field(strict=True, ge=2, le=2**10)] | None = None

    @model_validator(mode="after")
    def _shape(self) -> RegionsDecision:
        if self.grids is not None and len(self.grids) != len(self.runs):
            raise ValueError(f"decision.grids has {len(self.grids)} grids for {len(self.runs)} runs")
        if self.family is None and self.grids is None:
            raise ValueError("decision: a region plan names its family or fixes every run's grid")
        at = 0
        for first, end in self.runs:
            if first != at or end <= first:
                raise ValueError(f"decision.runs: [{first}, {end}) does not follow [.., {at}) (runs are consecutive)")
            at = end
        return self
