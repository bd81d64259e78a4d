"""Shared types of the cost models: options, dataflows, per-kernel work and per-grid costs.

Units: cycles of the core clock, bytes. One integer scale everywhere: **1 unit = 1 cycle**; latencies
are whole cycles (ceil), which is also the scale the CP-SAT and PuLP backends use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from wsealloc.graph.contest import ConvArgs
from wsealloc.graph.opclass import KernelKind


class CostModelName(enum.Enum):
    """Which estimates to use: wsealloc's tiled model, the seed notebook's own formulas, or the
    ISPD-2020 contest's conv formula (Cerebras' published model) for Conv kernels, standard otherwise."""

    STANDARD = "standard"
    SEED = "seed"
    ISPD2020 = "ispd2020"


class Dataflow(enum.Enum):
    """How a kernel's work is laid over its r x c grid of cores."""

    # Weights resident and split (K over rows, N over cols); tokens/pixels stream through;
    # partial sums reduce down each column.
    WEIGHT_STATIONARY = "ws"
    # Output rows split over grid rows, output columns over grid cols; each core holds the whole
    # reduction dim K of its operand slice (weights replicated down the rows).
    OUTPUT_STATIONARY = "os"
    # Vector kernels: output rows over grid rows, cols over grid cols.
    VECTOR = "vec"
    # Seed notebook model: latency depends on the core count only.
    SEED = "seed"
    # The ISPD-2020 contest's conv kernel: a rectangle of h'w'(c'+1) rows x 3k' columns laid in the
    # grid, the execution arguments the fastest that fit it within the memory limit.
    ISPD_CONV = "ispd"
    # A region (cost.region): several kernels on one grid, one after another, each on its own fastest
    # dataflow there.
    REGION = "region"


class CostOptions(BaseModel):
    """Knobs of the cost model (recorded in every plan, as they are, so ``verify`` can recompute)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: CostModelName = CostModelName.STANDARD
    # Rows (tokens/pixels) of a stream block each core double-buffers for its input and output; data
    # streams through the mesh in 32-bit wavelets, so one row is enough to keep a core busy.
    stream_block_rows: int = Field(1, ge=1)
    # Op models whose tile padding wastes more than this share of the grid's work are rejected.
    max_padding_waste: float = Field(0.5, ge=0.0, le=1.0)
    allow_unknown_ops: bool = False
    # KV caches each kernel holding one keeps: one per request in flight (``--requests N``: N sequences
    # interleaved through the kernels each keep their cache)
    state_copies: int = Field(1, ge=1, le=2**20)


@dataclass(frozen=True)
class KernelWork:
    """Everything the standard cost model needs about one kernel (hashable: identical layers share it).

    MAC kernels are a generalized matmul out[g, m, n] = a[g, m, k] . b[g, k, n]; ``rows`` x ``cols``
    is the 2D view of the output used for tiling (for a parameter B, groups fold into the columns).
    """

    kind: KernelKind
    macs: int
    vector_ops: int
    g: int
    m: int
    n: int
    k: int
    weight_b: bool  # B is a parameter: enables the weight-stationary dataflow
    b_bytes: int  # bytes of the B operand (parameter, or per-sample activation)
    rows: int
    cols: int
    row_reduce: bool
    col_weight_bytes: int  # per-column parameters (bias, norm scale), split over grid columns
    shard_weight_bytes: int  # parameters sharded over all cores (embedding tables, big masks)
    in_bytes: int  # activation bytes entering per sample (B excluded when it is an activation)
    out_bytes: int  # activation bytes leaving per sample
    weight_bytes: int  # all parameter bytes of the kernel
    # resident state (KV caches, graph.state): all of it, and the part that is the B operand (its
    # stationary tile is the cache itself, not the expanded GQA view the MatMul reads)
    state_bytes: int = field(default=0, kw_only=True)
    b_state_bytes: int = field(default=0, kw_only=True)
    # a lookup table too large for the grid its output spans (one decode token's embedding row): its
    # rows are spread over grid rows too (0: the output's extents suffice)
    table_rows: int = field(default=0, kw_only=True)
    # KV caches held per kernel: one per request in flight (``CostOptions.state_copies``)
    state_copies: int = field(default=1, kw_only=True)
    # Recurrent kernels (LSTM, GRU, RNN anchors): ``steps`` dependent time steps, one after the other on
    # the same grid; g, m, n, k, rows and cols are ONE step's, macs, vector_ops, in/out bytes all steps'.
    # ``step_syncs``: dependent phases per step (each pays the grid's fill); ``feedback_bytes``: the hidden
    # state fed back to every grid row each step. 1, 1, 0 for every other kernel (docs/cost-model.md).
    steps: int = field(default=1, kw_only=True)
    step_syncs: int = field(default=1, kw_only=True)
    feedback_bytes: int = field(default=0, kw_only=True)
    # collectives a row reduction takes (softmax: max and sum; a norm: its statistics); only the
    # calibrated execution model (``Arch.execution``) reads it
    reductions: int = field(default=0, kw_only=True)

    @property
    def is_mac(self) -> bool:
        """True for MatMul/Gemm/Conv-family kernels."""
        return self.macs > 0 and self.k > 0

    def dataflows(self) -> tuple[Dataflow, ...]:
        """Dataflows this kernel supports."""
        if not self.is_mac:
            return (Dataflow.VECTOR,)
        if self.weight_b:
            return (Dataflow.WEIGHT_STATIONARY, Dataflow.OUTPUT_STATIONARY)
        return (Dataflow.OUTPUT_STATIONARY,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """Extents split over grid rows and grid cols (beyond them extra cores idle)."""
        if dataflow is Dataflow.WEIGHT_STATIONARY:
            return self.k, self.cols
        return max(self.rows, self.table_rows), self.cols


@dataclass(frozen=True)
class SeedWork:
    """The seed notebook's three per-op estimates, summed over a kernel's nodes."""

    kind: KernelKind
    compute: int  # notebook compute cost (MAC-ish units)
    comm: int  # bytes of intermediate inputs
    memory: int  # bytes of outputs
    macs: int  # wsealloc's own MAC count, for reporting
    vector_ops: int
    weight_bytes: int
    in_bytes: int
    out_bytes: int

    def dataflows(self) -> tuple[Dataflow, ...]:
        """The seed model has a single dataflow-free estimate."""
        return (Dataflow.SEED,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The seed model does not tile; any grid is allowed up to the wafer."""
        return 1 << 40, 1 << 40


@dataclass(frozen=True)
class IspdConvWork(KernelWork):
    """A Conv kernel under ``--cost-model ispd2020``: the standard work plus the conv read as the
    ISPD-2020 contest's conv kernel (``wsealloc/cost/ispd_conv.py``; docs/cost-model.md, section 8).

    A subclass of :class:`KernelWork` on purpose: everything that reads a kernel's MACs, bytes and
    epilogue (reports, allocation hints, placement flows) reads it unchanged; only the dataflow and
    the per-grid costs differ. Equality includes the class, so a conv never shares op models with
    the same conv under the standard model.
    """

    conv: ConvArgs  # H W (input image), R S (filter taps), C (input features per group), K, strides T U
    batch: int  # images per sample: each tile runs them one after the other
    halo_h: int  # rows of halo an input block carries: (R - 1) x dilation (the formula's R - 1)
    halo_w: int  # columns of halo: (S - 1) x dilation

    def dataflows(self) -> tuple[Dataflow, ...]:
        """Only the contest's conv mapping."""
        return (Dataflow.ISPD_CONV,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The upright rectangle's largest useful sides: H*W*(C+1) rows (h'=H, w'=W, c'=C) and 3K columns
        (k'=K). The grid sides come from these (the divisors of 3K are the widths 3k' with k' | K); the
        turned rectangle is one more option on the same grids."""
        cv = self.conv
        return cv.H * cv.W * (cv.C + 1), 3 * cv.K


@dataclass(frozen=True)
class RegionWork:
    """The kernels of one region, in the order they run (``cost.region``: several kernels sharing one
    grid in time; hashable: identical regions share op models)."""

    members: tuple[KernelWork | SeedWork, ...]
    kind: KernelKind = KernelKind.REGION

    @property
    def macs(self) -> int:
        """MACs of every member."""
        return sum(int(m.macs) for m in self.members)

    @property
    def vector_ops(self) -> int:
        """Vector ops of every member."""
        return sum(int(m.vector_ops) for m in self.members)

    @property
    def weight_bytes(self) -> int:
        """Parameters of every member."""
        return sum(int(m.weight_bytes) for m in self.members)

    @property
    def state_bytes(self) -> int:
        """Resident state (KV caches) of every member."""
        return sum(int(getattr(m, "state_bytes", 0)) for m in self.members)

    @property
    def in_bytes(self) -> int:
        """Bytes entering the first member (the region's ingress)."""
        return int(self.members[0].in_bytes)

    @property
    def out_bytes(self) -> int:
        """Bytes leaving the last member."""
        return int(self.members[-1].out_bytes)

    def dataflows(self) -> tuple[Dataflow, ...]:
        """One: every member on the region's grid."""
        return (Dataflow.REGION,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The largest extents any member can split over the grid (beyond them every member idles)."""
        rows = cols = 1
        for m in self.members:
            for df in m.dataflows():
                er, ec = m.split_extents(df)
                rows, cols = max(rows, int(er)), max(cols, int(ec))
        return rows, cols


Work = KernelWork | SeedWork | RegionWork


# Waste of a grid that cannot hold the kernel at all (a contest conv needs 2 rows and 3 columns): the
# whole grid is padding. ``opmodels.classify`` reads it as Reason.NO_FIT whatever max_padding_waste
# allows, so every caller of the classifier (enumeration, placement shapes, the verifier) rejects it;
# the other models' waste stays below 1 (useful work is never zero where waste is computed).
NO_FIT_WASTE = 1.0


@dataclass(frozen=True)
class SramParts:
    """What each core's SRAM holds, by part (bytes per core, parallel to the grid shapes); the parts
    add up to ``GridCosts.sram_bytes``. Training adds gradients, optimizer state and the stash."""

    weights: np.ndarray  # parameters (and a stationary operand's tile)
    state: np.ndarray  # resident per-request state: KV caches
    buffers: np.ndarray  # double-buffered stream blocks

    @staticmethod
    def only_weights(sram: np.ndarray) -> SramParts:
        """A model that does not split its SRAM: all of it counted as weights."""
        zero = np.zeros_like(np.asarray(sram, dtype=np.float64))
        return SramParts(np.asarray(sram, dtype=np.float64), zero, zero)


@dataclass(frozen=True)
class GridCosts:
    """Costs of one kernel on a batch of grid shapes (parallel numpy arrays, one entry per shape)."""

    rows: np.ndarray  # r
    cols: np.ndarray  # c
    compute_cycles: np.ndarray
    noc_cycles: np.ndarray
    sram_bytes: np.ndarray  # per core, reserve excluded
    latency: np.ndarray  # int64 cycles
    waste: np.ndarray  # share of the grid's work lost to tile padding, in [0, 1); NO_FIT_WASTE: nothing fits
    parts: SramParts | None = None  # the SRAM by part (None: the model does not split it)

    def sram_parts(self) -> SramParts:
        """The SRAM by part (everything as weights for a model that does not split it)."""
        return self.parts if self.parts is not None else SramParts.only_weights(self.sram_bytes)
