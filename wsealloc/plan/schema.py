"""The plan file, ``wsealloc.plan/1``: a typed, versioned JSON document (see docs/plan-format.md).

Written by ``wsealloc solve``, read back by ``wsealloc verify`` and the reports. Fields for later
layers (``placement``, ``stage``, ``stages``) exist from version 1 on.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "wsealloc.plan/1"


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelRef(_Doc):
    """Which model the plan is for, and how it was read."""

    path: str
    sha256: str
    dims: dict[str, int] = {}
    fuse: bool = True
    weights_as_inputs: bool | None = None


class ArchRef(_Doc):
    """The machine: headline sizes plus the full validated spec (``spec``) for recomputation."""

    name: str
    rows: int
    cols: int
    total_cores: int
    sram_bytes_per_core: int  # usable bytes (SRAM minus reserve)
    clock_hz: float
    spec: dict[str, Any]


class Objective(_Doc):
    """What was optimized and how well."""

    bottleneck_cycles: int
    lower_bound_cycles: int | None
    gap: float | None
    status: str
    solver: str
    wall_s: float
    bottleneck_kernel: str
    bound_by: str  # compute | noc | communication | transfer
    sram_limited: bool  # the bottleneck kernel sits on its smallest legal op model
    throughput_samples_per_s: float
    cores_used: int
    placed: bool = False  # kernels have positions; bottleneck includes communication
    traffic_distance: float | None = None  # sum over flows of bytes x hops (placed plans)
    message: str = ""


class Baseline(_Doc):
    """The greedy allocation under the same cost model."""

    name: str
    bottleneck_cycles: int | None
    cores_used: int | None
    status: str
    # the greedy allocation's targets placed by the same construction (placed plans only)
    placed_bottleneck_cycles: int | None = None


class KernelPlan(_Doc):
    """One kernel's op model, position and stage."""

    name: str
    type: str
    onnx_nodes: list[str]
    cores: int
    grid: tuple[int, int]
    dataflow: str
    latency_cycles: int
    compute_cycles: int
    noc_cycles: int
    sram_bytes_per_core: int
    comm_cycles: int = 0  # distance + congestion + die crossings (placed plans); stage = latency + comm
    # the three parts of comm_cycles (placed plans; absent in plans written before they were recorded)
    distance_cycles: int | None = None
    congestion_cycles: int | None = None
    die_cycles: int | None = None
    placement: tuple[int, int] | None = None  # [row, col] of the top-left core, or null
    stage: int = 0


class StagePlan(_Doc):
    """One wafer of a multi-wafer pipeline (a single stage on one wafer)."""

    index: int
    kernels: int
    cores_used: int
    bottleneck_cycles: int  # slowest kernel stage time on this wafer
    transfer_cycles: int = 0  # cycles per sample to receive what crosses the cut in front of this wafer
    status: str = "OPTIMAL"  # of this wafer's allocation/placement


class CostRef(_Doc):
    """The cost-model options the plan was computed with (``wsealloc.cost.model.CostOptions``)."""

    model: Literal["standard", "seed"] = "standard"
    stream_block_rows: int = Field(1, ge=1)
    max_padding_waste: float = Field(0.5, ge=0.0, le=1.0)
    allow_unknown_ops: bool = False


class Plan(_Doc):
    """A complete plan document."""

    schema_: Literal["wsealloc.plan/1"] = Field("wsealloc.plan/1", alias="schema")
    created_by: str
    model: ModelRef
    arch: ArchRef
    cost: CostRef
    objective: Objective
    baseline: Baseline
    kernels: list[KernelPlan]
    stages: list[StagePlan]

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        """Serialize with the public field names (``schema``, not ``schema_``)."""
        return self.model_dump_json(by_alias=True, indent=1)
