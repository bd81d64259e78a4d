"""The sharing problem: which consecutive kernels share a region's cores in time, and each region's
grid (numbers only; ``solvers.share`` solves it).

Kernel ``k`` on candidate grid ``g`` (``shapes[g]`` = r x c) takes ``latency[k, g]`` cycles (its fastest
dataflow there) and ``sram[k, g]`` bytes per core. A *run* of kernels [i, j) on grid g is a region: its
time per token is ``sum latency[i:j, g]`` (they run one after another), it fits when
``sum sram[i:j, g] <= usable`` (every member's weights, KV state and buffers held at once), and it
takes ``r * c`` cores. A plan is a partition of the kernel sequence into runs with a grid each, the
runs' cores within the wafer.

The candidate grids are squares and near-squares (sides on a ladder of ``SIDE_RATIO`` steps, aspect
ratios 1, 4:3 and 3:4) that fit the wafer: region grids are chosen from this set (documented in
docs/cost-model.md; the per-kernel op models of the layer pipeline keep their full enumeration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost import grid_costs
from wsealloc.cost.model import NO_FIT_WASTE
from wsealloc.cost.region import fastest_on
from wsealloc.opmodels import CostTable

SIDE_RATIO = 1.03  # consecutive candidate sides differ by at most 3%
ASPECTS = (1.0, 4 / 3, 3 / 4)
INF = np.iinfo(np.int64).max // 8


def candidate_shapes(arch: Arch) -> np.ndarray:
    """[G, 2] region grids (rows, cols): squares and 4:3 / 3:4 rectangles on the side ladder, within the
    wafer, by cores ascending."""
    sides: list[int] = [1]
    while sides[-1] < max(arch.rows, arch.cols):
        sides.append(max(sides[-1] + 1, int(sides[-1] * SIDE_RATIO)))
    shapes = set()
    for s in sides:
        for a in ASPECTS:
            r, c = s, max(1, round(s * a))
            if r <= arch.rows and c <= arch.cols:
                shapes.add((r, c))
    ordered = sorted(shapes, key=lambda rc: (rc[0] * rc[1], rc[0]))
    return np.array(ordered, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class SharingProblem:
    """Kernels in dataflow order on every candidate region grid (see the module docstring)."""

    names: tuple[str, ...]
    shapes: np.ndarray  # [G, 2]
    latency: np.ndarray  # [n, G] int64 cycles (INF: the kernel cannot be laid on that grid)
    sram: np.ndarray  # [n, G] bytes per core
    usable_sram: int
    total_cores: int

    @property
    def n_kernels(self) -> int:
        """Kernels."""
        return len(self.names)

    def cores(self) -> np.ndarray:
        """[G] cores of each candidate grid."""
        return self.shapes[:, 0] * self.shapes[:, 1]


def build_sharing_problem(costs: CostTable, shapes: np.ndarray | None = None) -> SharingProblem:
    """The sharing problem of a kernel cost table (identical kernels costed once)."""
    arch = costs.arch
    grid = candidate_shapes(arch) if shapes is None else np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
    lat = np.empty((len(costs.kernels), grid.shape[0]), dtype=np.int64)
    sram = np.empty((len(costs.kernels), grid.shape[0]), dtype=np.float64)
    seen: dict[int, int] = {}
    for k, kc in enumerate(costs.kernels):
        if kc.signature in seen:
            lat[k], sram[k] = lat[seen[kc.signature]], sram[seen[kc.signature]]
            continue
        seen[kc.signature] = k
        _, g = fastest_on(kc.work, arch, costs.options, grid[:, 0], grid[:, 1], grid_costs, in_place=True)
        lat[k] = np.where(g.waste >= NO_FIT_WASTE, INF, g.latency)
        sram[k] = g.sram_bytes
    return SharingProblem(
        names=tuple(kc.kernel.name for kc in costs.kernels),
        shapes=grid,
        latency=lat,
        sram=sram,
        usable_sram=arch.usable_sram_bytes,
        total_cores=arch.total_cores,
    )
