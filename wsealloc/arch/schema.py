"""Typed, frozen schema of an architecture description (validated once at the boundary).

Units: bytes, cycles of the core clock, Hz. Byte fields accept ``48KiB``-style strings.
The YAML layout mirrors these classes one to one; see ``docs/arch.md``.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from wsealloc.errors import excerpt
from wsealloc.units import parse_bytes, parse_hz

# Upper bounds are generous (far beyond any real machine) and keep every derived number (cycles,
# bytes, the mesh arrays of placement) inside int64 and memory; booleans are not numbers here.
Bytes = Annotated[int, BeforeValidator(parse_bytes), Field(strict=True, ge=0, le=2**40)]
PositiveBytes = Annotated[int, BeforeValidator(parse_bytes), Field(strict=True, gt=0, le=2**40)]
Hertz = Annotated[float, BeforeValidator(parse_hz), Field(gt=0, le=1e12, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, gt=0, le=2**20)]
MAX_CORES = 2**24  # per wafer: 16.7M cores, ~20x a WSE-3 (the placement arrays are rows x cols)


class _Frozen(BaseModel):
    # extra="forbid" turns a misspelled field into an error instead of a silently ignored key.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class Grid(_Frozen):
    """A rows x cols count (dies on the wafer, or cores on a die)."""

    rows: Count
    cols: Count


class Defects(_Frozen):
    """Unusable cores: an explicit list of ``[row, col]`` and/or a seeded random rate."""

    cores: tuple[tuple[int, int], ...] = ()
    rate: float = Field(default=0.0, ge=0.0, lt=1.0)
    seed: int = Field(default=0, strict=True, ge=0, lt=2**32)


class DieBoundary(str, enum.Enum):
    """How a kernel's rectangle may relate to die (reticle) boundaries."""

    IGNORE = "ignore"  # crossing costs nothing
    PENALTY = "penalty"  # each crossing adds die_crossing_penalty_cycles to the kernel's stage
    FORBID = "forbid"  # no rectangle crosses a die boundary


class Wafer(_Frozen):
    """The core mesh: a grid of dies (reticles), each a grid of cores."""

    dies: Grid
    die_cores: Grid
    # How a kernel's rectangle may relate to die (reticle) boundaries (used by placement).
    die_boundary: DieBoundary = DieBoundary.IGNORE
    die_crossing_penalty_cycles: int = Field(default=0, strict=True, ge=0, le=10**9)
    defects: Defects = Defects()

    @model_validator(mode="after")
    def _fits(self) -> Wafer:
        rows, cols = self.dies.rows * self.die_cores.rows, self.dies.cols * self.die_cores.cols
        if rows * cols > MAX_CORES:
            raise ValueError(f"{rows}x{cols} = {rows * cols:,} cores; wsealloc plans wafers of at most {MAX_CORES:,} cores")
        outside = [c for c in self.defects.cores if not (0 <= c[0] < rows and 0 <= c[1] < cols)]
        if outside:
            raise ValueError(f"defects.cores {list(outside[0])} is outside the {rows}x{cols} wafer (rows and cols count from 0)")
        return self


class Core(_Frozen):
    """One processing element."""

    sram_bytes: PositiveBytes
    # Bytes of each core's SRAM taken by code and runtime; never available to tensors.
    sram_reserve_bytes: Bytes = 0
    macs_per_cycle: Count
    # Elementwise/vector operations per cycle; defaults to macs_per_cycle (same SIMD datapath).
    vector_ops_per_cycle: Count | None = None

    @model_validator(mode="after")
    def _reserve_fits(self) -> Core:
        if self.sram_reserve_bytes >= self.sram_bytes:
            raise ValueError(
                f"sram_reserve_bytes ({self.sram_reserve_bytes}) must be smaller than sram_bytes "
                f"({self.sram_bytes}); nothing would be left for tensors"
            )
        return self


class Noc(_Frozen):
    """The 2D mesh network on chip."""

    # per link and direction (a link has one channel each way); at least one byte per 64 cycles
    link_bytes_per_cycle: float = Field(ge=1 / 64, le=2**20, allow_inf_nan=False)
    hop_latency_cycles: int = Field(default=1, strict=True, ge=0, le=10**6)


class DType(_Frozen):
    """Number format of activations/weights and of partial sums."""

    name: str = "bf16"
    bytes: int = Field(default=2, strict=True, gt=0, le=64)
    accum_bytes: int = Field(default=4, strict=True, gt=0, le=64)


class ReductionTree(str, enum.Enum):
    """The shape of a reduction (and of the broadcast back) over the n cores of one grid side."""

    # bidirectional chain toward the middle core: n/2 stages
    CHAIN = "chain"
    # groups of ceil(sqrt(n)) cores reduce (chains toward their middle), then the group roots do (about
    # sqrt(n) stages); WaferLLM's K-tree with K = 2
    TWO_LEVEL = "two_level"


# Cycles are averages here (a fitted per-instruction cost of 6.3 cycles is an average over instructions)
Cycles = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]


class Execution(_Frozen):
    """How programs run on the cores, measured (docs/cost-model.md, "Calibrated against WSE-2
    measurements"). Absent (the default), the cost model is the streaming one: SIMD lanes always full,
    reductions cost only their bandwidth, a pipeline fill across the rectangle. Present, a kernel is a
    sequence of vector instructions, steps and collectives, each with its cost."""

    # issue cost of one vector instruction (an FMAC or add over a DSD), on top of ceil(length / lanes)
    issue_cycles: Cycles = 0.0
    # one step of a kernel: a task activation and its DSD setup (a streamed token of a weight-stationary
    # kernel, a shift-and-compute step of a systolic matmul, a vector kernel's one pass)
    step_cycles: Cycles = 0.0
    # the software of one collective call (an allreduce: reduce, then broadcast back)
    collective_cycles: Cycles = 0.0
    # one stage of a reduction tree: ramp in, add, ramp out at the core that combines
    stage_cycles: Cycles = 0.0
    tree: ReductionTree = ReductionTree.TWO_LEVEL


# The most wafers a plan may use (``--wafers``, ``cluster.wafers``; ``auto`` finds the fewest up to it).
MAX_WAFERS = 1024


def wafer_count(value: object) -> int | str:
    """A number of wafers, 1 to 1024, or ``auto`` (one message instead of one per union member)."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WAFERS):
        return value
    raise ValueError(f"expected a number of wafers (1 to {MAX_WAFERS}) or 'auto', got {excerpt(value)}")


class Cluster(_Frozen):
    """Several wafers in a pipeline (multi-wafer plans); one wafer by default."""

    wafers: Annotated[int | Literal["auto"], BeforeValidator(wafer_count)] = 1
    link_bytes_per_s: float = Field(default=150e9, ge=1e3, allow_inf_nan=False)  # at least 1 kB/s
    link_latency_s: float = Field(default=1e-6, ge=0, le=1.0, allow_inf_nan=False)
    # Off-wafer weight memory, bytes per second each way (--mode streaming: weights in, gradients out;
    # cost.streaming); None = not available. Cerebras publishes 1.2 Tb/s of I/O per CS-2 system, not the
    # bandwidth MemoryX gives one wafer: the presets take those 150 GB/s (docs/cost-model.md, section 12).
    offwafer_bytes_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class Arch(_Frozen):
    """A validated wafer-scale machine. Derived sizes are properties, never stored twice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    sources: tuple[str, ...] = ()
    clock_hz: Hertz
    wafer: Wafer
    core: Core
    noc: Noc
    dtype: DType = DType()
    cluster: Cluster = Cluster()
    # measured execution costs (None: the streaming model, what every preset but wse2-measured uses)
    execution: Execution | None = None

    @model_serializer(mode="wrap")
    def _omit_streaming(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # an arch without an execution section serializes as it did before the section existed, so
        # plans and `arch show` of every other arch stay byte-identical
        data: dict[str, Any] = handler(self)
        if self.execution is None:
            data.pop("execution", None)
        return data

    @property
    def rows(self) -> int:
        """Core rows of the whole wafer."""
        return self.wafer.dies.rows * self.wafer.die_cores.rows

    @property
    def cols(self) -> int:
        """Core columns of the whole wafer."""
        return self.wafer.dies.cols * self.wafer.die_cores.cols

    @property
    def total_cores(self) -> int:
        """All cores on the wafer (defects not subtracted)."""
        return self.rows * self.cols

    @property
    def usable_sram_bytes(self) -> int:
        """Per-core SRAM available to tensors: SRAM minus the reserve."""
        return self.core.sram_bytes - self.core.sram_reserve_bytes

    @property
    def vector_ops_per_cycle(self) -> int:
        """Vector ops per cycle per core (falls back to MACs per cycle)."""
        return self.core.vector_ops_per_cycle or self.core.macs_per_cycle

    @property
    def wafer_sram_bytes(self) -> int:
        """Usable SRAM of the whole wafer."""
        return self.usable_sram_bytes * self.total_cores
