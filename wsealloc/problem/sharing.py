"""The sharing problem: which consecutive kernels share a region's cores in time, and each region's
grid (numbers only; ``solvers.share`` solves it).

Kernel ``k`` on candidate grid ``g`` (``shapes[g]`` = r x c) takes ``latency[k, g]`` cycles (its fastest
dataflow there, in place) and holds ``resident[k, g]`` bytes per core (weights, KV state) plus
``buffers[k, g]`` while it streams. A *run* of kernels [i, j) on grid g is a region: its time per token
is ``sum latency[i:j, g]`` (they run one after another), it fits when
``sum resident[i:j, g] + max buffers[i:j, g] <= usable`` (every member's weights and KV state held at
once, one member's buffers at a time: ``cost.region``), and it takes ``r * c`` cores. A plan is a
partition of the kernel sequence into runs with a grid each, the runs' cores within the wafer.

The candidate grids are squares and near-squares (sides on a ladder of ``SIDE_RATIO`` steps, aspect
ratios 1, 4:3 and 3:4) that fit the wafer: region grids are chosen from this set (documented in
docs/cost-model.md; the per-kernel op models of the layer pipeline keep their full enumeration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.cost import grid_costs
from wsealloc.cost.model import NO_FIT_WASTE
from wsealloc.cost.region import fastest_on
from wsealloc.opmodels import CostTable

SIDE_RATIO = 1.03  # consecutive candidate sides differ by at most 3%
ASPECTS = (1.0, 4 / 3, 3 / 4)
INF = np.iinfo(np.int64).max // 8


def candidate_shapes(arch: Arch) -> np.ndarray:
    """[G, 2] region grids (rows, cols): squares and 4:3 / 3:4 rectangles on the side ladder, within the
    wafer (and within a die when the arch forbids crossing one), by cores ascending."""
    sides: list[int] = [1]
    while sides[-1] < max(arch.rows, arch.cols):
        sides.append(max(sides[-1] + 1, int(sides[-1] * SIDE_RATIO)))
    shapes = set()
    for s in sides:
        for a in ASPECTS:
            r, c = s, max(1, round(s * a))
            if r <= arch.rows and c <= arch.cols and grid_allowed(arch, r, c):
                shapes.add((r, c))
    ordered = sorted(shapes, key=lambda rc: (rc[0] * rc[1], rc[0]))
    return np.array(ordered, dtype=np.int64).reshape(-1, 2)


def grid_allowed(arch: Arch, r: int, c: int) -> bool:
    """Whether an r x c rectangle is a grid the wafer allows (the die rule of ``opmodels.classify``)."""
    if arch.wafer.die_boundary is DieBoundary.FORBID:
        return r <= arch.wafer.die_cores.rows and c <= arch.wafer.die_cores.cols
    return True


@dataclass(frozen=True)
class SharingProblem:
    """Kernels in dataflow order on every candidate region grid (see the module docstring)."""

    names: tuple[str, ...]
    shapes: np.ndarray  # [G, 2]
    latency: np.ndarray  # [n, G] int64 cycles (INF: the kernel cannot be laid on that grid)
    resident: np.ndarray  # [n, G] bytes per core held all the time (weights, KV state)
    buffers: np.ndarray  # [n, G] bytes per core of its stream buffers (while it runs)
    usable_sram: int
    total_cores: int

    def windows(self) -> np.ndarray:
        """[G, n + 1]: for every grid g and run end j, the first start i of a run [i, j) that fits (the
        fitting starts are i in [first, j): resident sums and buffer maxima only grow with the run;
        ``j`` when none fits)."""
        n, g_count = self.latency.shape
        out = np.empty((g_count, n + 1), dtype=np.int64)
        idx = np.arange(n)
        later = idx[None, :] >= idx[:, None]  # [i, k]: k in the run starting at i
        for g in range(g_count):
            resident = np.concatenate(([0.0], np.cumsum(self.resident[:, g])))
            bad = np.concatenate(([0], np.cumsum(self.latency[:, g] >= INF)))
            peak = np.maximum.accumulate(np.where(later, self.buffers[:, g][None, :], 0.0), axis=1)  # [i, j-1]
            need = resident[None, 1:] - resident[:-1, None] + peak  # [i, j-1]: run [i, j)
            fits = later & (need <= self.usable_sram) & (bad[None, 1:] == bad[:-1, None])
            # the first fitting start of every end (starts fit from it on: the condition is monotone)
            first = np.where(fits.any(axis=0), fits.argmax(axis=0), np.arange(1, n + 1))
            out[g, 0] = 0
            out[g, 1:] = first
        return out

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
    resident = np.empty((len(costs.kernels), grid.shape[0]), dtype=np.float64)
    buffers = np.empty((len(costs.kernels), grid.shape[0]), dtype=np.float64)
    allowed = np.array([grid_allowed(arch, int(r), int(c)) for r, c in grid.tolist()], dtype=bool)
    seen: dict[int, int] = {}
    for k, kc in enumerate(costs.kernels):
        if kc.signature in seen:
            j = seen[kc.signature]
            lat[k], resident[k], buffers[k] = lat[j], resident[j], buffers[j]
            continue
        seen[kc.signature] = k
        _, g = fastest_on(kc.work, arch, costs.options, grid[:, 0], grid[:, 1], grid_costs, in_place=True)
        lat[k] = np.where((g.waste >= NO_FIT_WASTE) | ~allowed, INF, g.latency)
        parts = g.sram_parts()
        resident[k] = parts.weights + parts.state
        buffers[k] = parts.buffers
    return SharingProblem(
        names=tuple(kc.kernel.name for kc in costs.kernels),
        shapes=grid,
        latency=lat,
        resident=resident,
        buffers=buffers,
        usable_sram=arch.usable_sram_bytes,
        total_cores=arch.total_cores,
    )
