"""The plan file, ``wsealloc.plan/5``: a typed, versioned JSON document (see docs/plan-format.md).

Written by ``wsealloc solve``, read back by ``wsealloc verify`` and the reports. Version 2 records the
request the plan answers (``request``: the ``SolveRequest`` JSON, which ``verify`` rebuilds the cost
table from) and speaks of the objective's ``kind``, ``value_cycles`` and ``bound_cycles``; min-max's
fields (``bottleneck_cycles``, ``lower_bound_cycles``) stay. Version 3 keeps the request as the user
gave it and records beside it what the way of running it decided (``decision``: the strategy, the cut
over wafers, the region runs and grids, the streamed batch, the recomputation segment length), which
``verify`` replays. Version 4 records the placed greedy baseline's layout (``baseline.layout``), from
which ``verify`` recomputes the placed baseline's values. Version 5 values a latency plan with N
requests in flight as each request's token time, ``max(path, N x slowest stage)`` (``objective.paced``;
the baseline and the worst routing of a MoE plan likewise), where version 4 wrote the path. Versions
1-4 still read and verify, their values by the path (the decision of 1 and 2 is read off the plan).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from wsealloc.arch import Arch
from wsealloc.cost import CostOptions
from wsealloc.plan.headline import Headline
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.request import SolveRequest
from wsealloc.solvers.base import Status
from wsealloc.strategy.decision import Decision
from wsealloc.strategy.registry import parse_decision

SCHEMA = "wsealloc.plan/5"
# every version this release reads
SCHEMAS = ("wsealloc.plan/1", "wsealloc.plan/2", "wsealloc.plan/3", "wsealloc.plan/4", "wsealloc.plan/5")

# Whole numbers as JSON integers (not 1.0, not true), non-negative and far below int64 overflow, so a
# hand-edited plan fails here with the field named instead of deep inside the verifier's arithmetic.
Count = Annotated[int, Field(strict=True, ge=0, lt=2**53)]
Positive = Annotated[int, Field(strict=True, ge=1, lt=2**31)]
Cycles = Annotated[int, Field(strict=True, ge=0, lt=2**62)]


class BoundBy(str, enum.Enum):
    """What dominates the bottleneck kernel's stage time (the rule: ``wsealloc.plan.rules.bound_by``)."""

    COMPUTE = "compute"
    NOC = "noc"
    COMMUNICATION = "communication"
    COMPUTE_COMMUNICATION = "compute+communication"
    NOC_COMMUNICATION = "noc+communication"
    TRANSFER = "transfer"  # a multi-wafer plan whose slowest part is a cut between wafers
    STREAM = "stream"  # weight streaming: the off-wafer weight stream takes longer than compute and NoC


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelRef(_Doc):
    """Which model the plan is for, and how it was read."""

    path: str
    sha256: str
    dims: dict[str, int] = {}
    input_shapes: dict[str, list[int]] = {}  # --input-shape (absent in plans written before it existed)
    fuse: bool = True
    weights_as_inputs: bool | None = None


class ArchRef(_Doc):
    """The machine: headline sizes for readers of the JSON, plus the full validated spec (``spec``),
    the one source of truth: the headline fields are derived from it (:meth:`of`), and a document
    whose headline disagrees with its spec is refused when read."""

    name: str
    rows: int
    cols: int
    total_cores: int
    sram_bytes_per_core: int  # usable bytes (SRAM minus reserve)
    clock_hz: float
    spec: dict[str, Any]

    @staticmethod
    def headline(arch: Arch) -> dict[str, Any]:
        """The headline fields of ``arch`` (derived: the spec is the source of truth)."""
        return {
            "name": arch.name,
            "rows": arch.rows,
            "cols": arch.cols,
            "total_cores": arch.total_cores,
            "sram_bytes_per_core": arch.usable_sram_bytes,
            "clock_hz": arch.clock_hz,
        }

    @staticmethod
    def of(arch: Arch) -> ArchRef:
        """The record of ``arch``."""
        return ArchRef(**ArchRef.headline(arch), spec=arch.model_dump(mode="json"))

    def arch(self) -> Arch:
        """The validated machine of ``spec``."""
        return Arch.model_validate(self.spec)

    @model_validator(mode="after")
    def _headline_from_spec(self) -> ArchRef:
        for field, value in ArchRef.headline(self.arch()).items():
            if getattr(self, field) != value:
                raise ValueError(f"arch.{field} is {getattr(self, field)!r} but arch.spec gives {value!r}")
        return self


Rate = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class GenerationRecord(_Doc):
    """One request's generation end to end (``--prompt IN --generate OUT``; ``plan/generation.py``):
    the prefill of IN tokens on its grid, then OUT decode steps of this plan with the past growing from
    IN to IN + OUT - 1. Times per step are the plan's token path at that step's context."""

    prompt: Positive  # IN
    generate: Positive  # OUT
    prefill_model: str  # the prefill export (its path as given)
    prefill_grid: tuple[Positive, Positive]  # every prefill kernel on it, one after another
    prefill_cycles: Cycles
    prefill_regions: Positive  # regions of the prefill grid its weights and cache need (packed by SRAM, as --grid)
    prefill_fits_wafer: bool  # those regions side by side on the wafer (always, now; verify refuses false)
    decode_first_cycles: Cycles  # the first step (past IN)
    decode_last_cycles: Cycles  # the last step (past IN + OUT - 1: the plan's own token path)
    decode_total_cycles: Cycles  # every step, summed exactly
    time_to_first_token_s: Rate  # the prefill
    time_per_output_token_first_s: Rate
    time_per_output_token_last_s: Rate
    time_per_output_token_mean_s: Rate  # the decode steps' total over OUT
    end_to_end_s: Rate  # prefill + every decode step
    end_to_end_tokens_per_s: Rate  # OUT over the whole time
    distinct_step_costs: Positive  # how many different step times the OUT steps take (tile boundaries crossed)


class LlmRecord(_Doc):
    """An LLM plan's tokens (``plan.llm``): the phase, one pass through the kernels, and the rates it
    gives one request and all of them."""

    phase: Literal["decode", "prefill"]
    batch: Positive  # requests decoded together (a pass makes tokens for each)
    tokens_per_request: Positive  # new tokens of a pass per request (1 for a decode step, the prompt for a prefill)
    context: Count  # decode: the past length; prefill: the prompt's length
    kv_bytes_per_token: Count  # the KV cache one more token of context adds (all layers, the batch, every request in flight)
    token_path_cycles: Cycles  # one pass through the kernels (stage times along the token's path)
    slowest_stage_cycles: Cycles  # a kernel's or region's stage: how often a new pass can enter
    requests: Positive  # sequences in flight, interleaved through the kernels
    tokens_per_s_per_request: Rate
    aggregate_tokens_per_s: Rate
    time_to_first_token_s: Rate | None = None  # a prefill: the prompt's time through the kernels
    # the longest context whose KV cache fits the wafer beside weights and buffers (SRAM in all: an upper bound)
    largest_context: Count
    generation: GenerationRecord | None = None  # --prompt IN --generate OUT: the request end to end


class ExpertsLayoutRecord(_Doc):
    """One mixture-of-experts layer on its grid (``cost.experts``): its tiles, the experts each holds,
    the busiest tile under the plan's routing, and the layer's time under the worst routing."""

    kernel: str
    tiles: tuple[Positive, Positive]  # tile rows x tile columns on the kernel's (or its region's) grid
    tile: tuple[Positive, Positive]  # cores of one tile, rows x columns
    experts_per_tile: Positive
    busiest_tile_experts: Rate  # experts at work on the busiest tile (expected under uniform routing)
    busiest_tile_tokens: Positive  # tokens each of them serves
    latency_cycles: Cycles  # the layer's time under the plan's routing
    worst_routing_latency_cycles: Cycles  # ... with every token on the same k experts
    # expert parallelism: shard i of S of its layer (``kernel`` is the shard), holding E / S experts
    shard: tuple[Count, Positive] | None = None

    @model_serializer(mode="wrap")
    def _shard_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)  # a layer kept whole reads as before
        if data.get("shard", 0) is None:
            del data["shard"]
        return data

    @property
    def layer(self) -> str:
        """The layer's kernel name (a shard's without its ``/shard<i>``)."""
        return self.kernel.rsplit("/shard", 1)[0] if self.shard is not None else self.kernel


class ExpertsRecord(_Doc):
    """The mixture-of-experts layers of a plan (``plan.experts``: the rules there): how many, their
    routing, the tokens per expert, their share of the time, and the plan's value under the worst
    routing (the same grids; a bound any routing stays within)."""

    layers: Positive
    experts: Positive  # per layer (the largest, when layers differ)
    top_k: Positive
    routing: Literal["uniform", "worst"]
    tokens_per_step: Positive  # tokens one layer routes per sample
    tokens_per_expert: Rate  # on average: tokens x k / experts
    experts_at_work: Rate  # expected under uniform routing: E (1 - (1 - k/E)^T)
    time_share: Rate  # the layers' share of the kernels' summed time: experts_cycles / kernels_cycles
    experts_cycles: Cycles  # the layers' times summed (each on its grid)
    kernels_cycles: Cycles  # every kernel's time summed
    worst_routing_value_cycles: Cycles  # the objective's value with every layer under the worst routing
    layouts: tuple[ExpertsLayoutRecord, ...]


class ConstraintsRecord(_Doc):
    """The price of the user's constraints: the proven optimum without them beside the plan's bound
    with them (the rules themselves are in the plan's ``request.constraints``)."""

    source: str
    rules: Count
    # the objective's proven bound of the same request without the constraints (its optimum for a
    # throughput plan: the bisection, or the exact stage cut over several wafers)
    unconstrained_bound_cycles: Cycles | None
    unconstrained_optimal: bool = True  # that bound is the proven optimum (not only a lower bound)

    def price(self, bound: int | None) -> float | None:
        """How much the constraints cost: (bound with them) / (bound without) - 1 (None: unknown)."""
        if bound is None or not self.unconstrained_bound_cycles:
            return None
        return bound / self.unconstrained_bound_cycles - 1.0


class Objective(_Doc):
    """What was optimized and how well: the objective's ``kind``, its value and proven bound (cycles;
    ``gap`` and ``status`` are of that value), and the pipeline's bottleneck (min-max's fields, kept:
    for ``throughput`` the value is the bottleneck and the bound its lower bound)."""

    kind: ObjectiveKind = ObjectiveKind.THROUGHPUT
    value_cycles: Cycles | None = None  # None only in version-1 plans (read as the bottleneck)
    bound_cycles: Cycles | None = None
    bottleneck_cycles: Cycles
    lower_bound_cycles: Cycles | None
    gap: Annotated[float, Field(ge=0.0, le=1.0)] | None
    status: Status
    solver: str
    wall_s: Annotated[float, Field(ge=0.0)]
    bottleneck_kernel: str
    bound_by: BoundBy
    sram_limited: bool  # the bottleneck kernel sits on its smallest legal op model
    throughput_samples_per_s: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    cores_used: Count
    placed: bool = False  # kernels have positions; bottleneck includes communication
    # sum over flows of bytes x hops (placed plans)
    traffic_distance: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    message: str = ""
    # a fixed --grid whose regions need more cores than the wafer has (reported, not placed)
    fits_wafer: bool = True
    # LLM exports (a KV cache in the graph): one request's tokens per second, and the rest in ``llm``
    tokens_per_s_per_request: Rate | None = None
    llm: LlmRecord | None = None
    # the user's constraints (``--constraints``, ``--from-plan``): what they cost
    constraints: ConstraintsRecord | None = None
    # a placed min-max plan of one wafer: the bound that counts what tensors must cross
    # (``problem.comm_bound``; never below the allocation bound, which ``bound_cycles`` keeps)
    comm_bound_cycles: Cycles | None = None
    # mixture-of-experts layers (written only when the model has them)
    experts: ExpertsRecord | None = None

    @model_serializer(mode="wrap")
    def _experts_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("experts", 0) is None:
            del data["experts"]
        return data

    @model_validator(mode="before")
    @classmethod
    def _value_of_old_plans(cls, data: Any) -> Any:
        # a version-1 plan knows min-max only: its value is the bottleneck, its bound the lower bound
        if isinstance(data, dict) and "value_cycles" not in data and "bottleneck_cycles" in data:
            data = {**data, "value_cycles": data["bottleneck_cycles"], "bound_cycles": data.get("lower_bound_cycles")}
        return data

    @property
    def value(self) -> int:
        """The objective's value in cycles."""
        return self.bottleneck_cycles if self.value_cycles is None else self.value_cycles

    @property
    def best_bound(self) -> int | None:
        """The larger of the proven bounds: the allocation's and, placed, the one counting communication."""
        bounds = [b for b in (self.bound_cycles, self.comm_bound_cycles) if b is not None]
        return max(bounds) if bounds else None


class Baseline(_Doc):
    """The greedy allocation under the same cost model: its value under the plan's objective
    (``value_cycles``; a throughput plan's is its bottleneck) and its slowest kernel."""

    name: str
    bottleneck_cycles: Cycles | None
    cores_used: Count | None
    status: Status
    # the greedy allocation's targets placed by the same construction (placed plans only)
    placed_bottleneck_cycles: Cycles | None = None
    value_cycles: Cycles | None = None
    placed_value_cycles: Cycles | None = None
    # that layout: (row, col, rows, cols) of each kernel's op-model grid, in the plan's kernel order, so
    # that ``verify`` recomputes the placed values (version 4 on, a placed plan of one wafer whose units
    # are kernels; None elsewhere, where only their bounds are checked)
    layout: tuple[tuple[Count, Count, Positive, Positive], ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _value_of_old_plans(cls, data: Any) -> Any:
        # a version-1 plan knows min-max only: the baseline's value is its bottleneck
        if isinstance(data, dict) and "value_cycles" not in data:
            data = {
                **data,
                "value_cycles": data.get("bottleneck_cycles"),
                "placed_value_cycles": data.get("placed_bottleneck_cycles"),
            }
        return data


class KernelPlan(_Doc):
    """One kernel's op model, position and stage."""

    name: str
    type: str
    onnx_nodes: tuple[str, ...]
    cores: Count
    grid: tuple[Positive, Positive]
    dataflow: str
    latency_cycles: Cycles
    compute_cycles: Cycles
    noc_cycles: Cycles
    sram_bytes_per_core: Count
    comm_cycles: Cycles = 0  # distance + congestion + die crossings (placed plans); stage = latency + comm
    # cycles per sample of the off-wafer weight stream (weight streaming; None: no stream)
    stream_cycles: Cycles | None = None
    # the three parts of comm_cycles (placed plans; absent in plans written before they were recorded)
    distance_cycles: Cycles | None = None
    congestion_cycles: Cycles | None = None
    die_cycles: Cycles | None = None
    placement: tuple[Count, Count] | None = None  # [row, col] of the top-left core, or null
    stage: Count = 0
    # index into Plan.regions when kernels share cores in time (its grid and placement are the
    # region's, its numbers its own on that grid); None: the kernel owns its rectangle
    region: Count | None = None


class SramRecord(_Doc):
    """SRAM per core by part (bytes): what a region's cores hold for all of its kernels at once."""

    weights: Count
    state: Count  # KV caches
    buffers: Count

    @property
    def total(self) -> int:
        """All parts."""
        return self.weights + self.state + self.buffers


class RegionPlan(_Doc):
    """Kernels sharing one rectangle in time: they run one after another (``members`` in order), its
    time per sample is the sum of theirs, its SRAM holds all of theirs (cost.region)."""

    index: Count
    name: str
    members: tuple[str, ...]
    cores: Count
    grid: tuple[Positive, Positive]
    latency_cycles: Cycles  # the members' latencies summed
    sram_bytes_per_core: Count
    sram: SramRecord
    comm_cycles: Cycles = 0  # communication its placement causes (placed plans)
    placement: tuple[Count, Count] | None = None
    stage: Count = 0


class StagePlan(_Doc):
    """One wafer of a multi-wafer pipeline (a single stage on one wafer)."""

    index: Count
    kernels: Count
    cores_used: Count
    bottleneck_cycles: Cycles  # slowest kernel stage time on this wafer
    transfer_cycles: Cycles = 0  # cycles per sample to receive what crosses the cut in front of this wafer
    status: Status = Status.OPTIMAL  # of this wafer's allocation/placement


class Plan(_Doc):
    """A complete plan document."""

    schema_: Literal["wsealloc.plan/1", "wsealloc.plan/2", "wsealloc.plan/3", "wsealloc.plan/4", "wsealloc.plan/5"] = Field(
        "wsealloc.plan/5", alias="schema"
    )
    created_by: str
    request: SolveRequest | None = None  # what the plan answers, as the user asked (None: a version-1 plan)
    # what the way of running the request decided (None: a plan of version 1 or 2)
    decision: SerializeAsAny[Annotated[Decision, BeforeValidator(parse_decision)]] | None = None
    model: ModelRef
    arch: ArchRef
    cost: CostOptions
    objective: Objective
    baseline: Baseline
    kernels: tuple[KernelPlan, ...]
    stages: tuple[StagePlan, ...]
    # kernels sharing cores in time (empty: every kernel owns its rectangle, as in version 1)
    regions: tuple[RegionPlan, ...] = ()

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        """Serialize with the public field names (``schema``, not ``schema_``)."""
        return self.model_dump_json(by_alias=True, indent=1)

    def headline(self) -> Headline:
        """The objective's value, bound, gap, status and the greedy baseline (placed when placed)."""
        obj, base = self.objective, self.baseline
        baseline = base.placed_value_cycles if obj.placed and base.placed_value_cycles else base.value_cycles
        llm = obj.llm
        return Headline(
            len(self.kernels),
            obj.value,
            obj.bound_cycles,
            obj.gap,
            obj.status,
            baseline,
            tokens_per_s_per_request=llm.tokens_per_s_per_request if llm is not None else None,
            aggregate_tokens_per_s=llm.aggregate_tokens_per_s if llm is not None else None,
            wafers=len(self.stages),
        )
