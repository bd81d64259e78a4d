"""Shared types of the cost models: options, dataflows, per-kernel work and per-grid costs.

Units: cycles of the core clock, bytes. One integer scale everywhere: **1 unit = 1 cycle**; latencies
are whole cycles (ceil), which is also the scale the CP-SAT and PuLP backends use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from wsealloc.graph.opclass import KernelKind


class CostModelName(enum.Enum):
    """Which estimates to use: wsealloc's tiled model, or the seed notebook's own formulas."""

    STANDARD = "standard"
    SEED = "seed"


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
        return self.rows, self.cols


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


Work = KernelWork | SeedWork


@dataclass(frozen=True)
class GridCosts:
    """Costs of one kernel on a batch of grid shapes (parallel numpy arrays, one entry per shape)."""

    rows: np.ndarray  # r
    cols: np.ndarray  # c
    compute_cycles: np.ndarray
    noc_cycles: np.ndarray
    sram_bytes: np.ndarray  # per core, reserve excluded
    latency: np.ndarray  # int64 cycles
    waste: np.ndarray  # share of the grid's work lost to tile padding, in [0, 1)
