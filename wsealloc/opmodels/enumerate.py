"""Enumerate a kernel's op models (dataflow x grid shape r x c), legal or rejected with a reason.

Grid sides come from the kernel's split extents E: every side length r that is the smallest giving
its tile size ceil(E / r) (smaller or larger r of the same tile only idle cores), thinned so that
consecutive kept sides differ by at most ``SIDE_STEP`` (2%), plus the divisors of E (zero padding)
and powers of two. Products r x c then reach every core count within a few percent.

A shape is rejected, first failing check wins (in the spirit of the Tenstorrent balancer's
OpModelFailureReasons): taller/wider than the wafer, crossing a die boundary when the arch forbids
it, the kernel's rectangle not fitting the grid at all (``--cost-model ispd2020``: a contest conv
needs 2 rows and 3 columns), tile padding above the waste threshold, SRAM per core above the usable
SRAM.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.cost import CostOptions, Dataflow, GridCosts, Work, grid_costs
from wsealloc.cost.model import NO_FIT_WASTE

SIDE_STEP = 1.02


class Reason(enum.IntEnum):
    """Why an op model is not legal (``LEGAL`` when it is)."""

    LEGAL = 0
    TALLER_THAN_WAFER = 1
    WIDER_THAN_WAFER = 2
    CROSSES_DIE = 3
    PADDING_WASTE = 4
    SRAM_OVER = 5
    NO_FIT = 6
    NOT_ENUMERATED = 7
    CONSTRAINED = 8  # excluded by a rule of the user's constraints (the table's ``rule`` names it)
    SEGMENT = 9  # its recomputation segment took the other way (opmodels.recompute)

    @property
    def label(self) -> str:
        """Human-readable reason."""
        return _LABELS[self]


_LABELS = {
    Reason.LEGAL: "legal",
    Reason.TALLER_THAN_WAFER: "taller than the wafer",
    Reason.WIDER_THAN_WAFER: "wider than the wafer",
    Reason.CROSSES_DIE: "crosses a die boundary (arch forbids it)",
    Reason.PADDING_WASTE: "tile padding waste over the threshold",
    Reason.SRAM_OVER: "SRAM per core over the usable SRAM",
    Reason.NO_FIT: "the kernel's rectangle does not fit the grid",
    Reason.NOT_ENUMERATED: "not one of the kernel's op models (its grid sides are enumerated: opmodels.grid_sides)",
    Reason.CONSTRAINED: "excluded by the user's constraints",
    Reason.SEGMENT: "its recomputation segment took the other way (every kernel of a segment recomputes, or none)",
}

DATAFLOW_CODES: tuple[Dataflow, ...] = tuple(Dataflow)


def grid_sides(extent: int, limit: int) -> np.ndarray:
    """Candidate side lengths in [1, min(extent, limit)] for splitting ``extent`` (sorted, unique).

    Memoized (identical layers ask for the same extents thousands of times); the cached array is
    read-only, so no caller can change what the next one gets."""
    return _grid_sides(int(extent), int(limit))


@lru_cache(maxsize=4096)
def _grid_sides(extent: int, limit: int) -> np.ndarray:
    sides = _compute_sides(extent, limit)
    sides.flags.writeable = False
    return sides


def _compute_sides(extent: int, limit: int) -> np.ndarray:
    top = int(min(extent, limit))
    if top <= 1:
        return np.array([1], dtype=np.int64)
    r = np.arange(1, top + 1, dtype=np.int64)
    tiles = -(-extent // r)
    # smallest r for each tile size: r where the tile is strictly smaller than with r - 1
    efficient = r[np.concatenate(([True], tiles[1:] < tiles[:-1]))]
    kept: list[int] = []
    for side in efficient.tolist():
        if not kept or side >= kept[-1] * SIDE_STEP or side == efficient[-1]:
            kept.append(side)
    divisors = r[extent % r == 0]
    powers = 2 ** np.arange(0, int(np.log2(top)) + 1, dtype=np.int64)
    return np.unique(np.concatenate((np.array(kept, dtype=np.int64), divisors[-64:], powers)))


@dataclass(frozen=True)
class OpModelTable:
    """Every enumerated op model of one kernel (parallel arrays)."""

    dataflow: np.ndarray  # index into DATAFLOW_CODES
    r: np.ndarray
    c: np.ndarray
    latency: np.ndarray
    compute: np.ndarray
    noc: np.ndarray
    sram: np.ndarray
    waste: np.ndarray
    reason: np.ndarray  # Reason codes
    # the user's rule that forbids each op model (1 + its index in the constraints' rules; 0: none; an
    # illegal op model may be forbidden too); None: no constraints were applied
    rule: np.ndarray | None = None

    @property
    def cores(self) -> np.ndarray:
        """Cores of each op model."""
        return self.r * self.c

    def __len__(self) -> int:
        return int(self.r.size)

    def legal(self) -> np.ndarray:
        """Boolean mask of legal op models."""
        return self.reason == Reason.LEGAL

    def row_of(self, dataflow: Dataflow, r: int, c: int) -> int | None:
        """The row of op model (dataflow, r, c), or None when it was not enumerated."""
        hit = np.flatnonzero((self.dataflow == DATAFLOW_CODES.index(dataflow)) & (self.r == r) & (self.c == c))
        return int(hit[0]) if hit.size else None


def judge(table: OpModelTable, work: Work, arch: Arch, options: CostOptions, dataflow: Dataflow, r: int, c: int) -> Reason:
    """Whether op model (dataflow, r, c) of a kernel is legal, read from its op-model table: the
    enumeration is the one place a grid is judged. A shape the table does not list is judged by the
    same rules (off the wafer, over SRAM, ...) or, when those pass, is not one of the op models."""
    row = table.row_of(dataflow, r, c)
    if row is not None:
        return Reason(int(table.reason[row]))
    g = grid_costs(work, arch, options, dataflow, np.array([r]), np.array([c]))
    reason = Reason(int(classify(arch, options, g.rows, g.cols, g.sram_bytes, g.waste)[0]))
    return Reason.NOT_ENUMERATED if reason is Reason.LEGAL else reason


def enumerate_op_models(
    work: Work, arch: Arch, options: CostOptions, *, beyond_wafer: bool = False, shapes: np.ndarray | None = None
) -> OpModelTable:
    """Enumerate and cost every op model; ``beyond_wafer`` also lists shapes larger than the wafer;
    ``shapes`` ([G, 2] rows x cols) costs exactly those grids instead (a region's candidate grids)."""
    parts = []
    for df in work.dataflows():
        er, ec = work.split_extents(df)
        if shapes is not None:
            rr, cc = np.asarray(shapes, dtype=np.int64)[:, 0], np.asarray(shapes, dtype=np.int64)[:, 1]
            costs = grid_costs(work, arch, options, df, rr, cc)
            parts.append((np.full(rr.size, DATAFLOW_CODES.index(df), dtype=np.int8), costs))
            continue
        if beyond_wafer:
            # Also list shapes past the wafer (up to 4x its sides) so `inspect --kernel` shows why they fail.
            rs = grid_sides(int(er), int(min(er, 4 * arch.rows)))
            cs = grid_sides(int(ec), int(min(ec, 4 * arch.cols)))
        else:
            rs = grid_sides(int(er), arch.rows)
            cs = grid_sides(int(ec), arch.cols)
        rr, cc = np.meshgrid(rs, cs, indexing="ij")
        rr, cc = rr.ravel(), cc.ravel()
        costs = grid_costs(work, arch, options, df, rr, cc)
        code = DATAFLOW_CODES.index(df)
        parts.append((np.full(rr.size, code, dtype=np.int8), costs))
    dataflow = np.concatenate([p[0] for p in parts])
    r = np.concatenate([p[1].rows for p in parts])
    c = np.concatenate([p[1].cols for p in parts])
    latency = np.concatenate([p[1].latency for p in parts])
    compute = np.concatenate([p[1].compute_cycles for p in parts])
    noc = np.concatenate([p[1].noc_cycles for p in parts])
    sram = np.concatenate([p[1].sram_bytes for p in parts])
    waste = np.concatenate([p[1].waste for p in parts])
    reason = classify(arch, options, r, c, sram, waste)
    return OpModelTable(dataflow, r, c, latency, compute, noc, sram, waste, reason)


def classify(arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, sram: np.ndarray, waste: np.ndarray) -> np.ndarray:
    """Reason code of each op model (first failing check wins)."""
    reason = np.full(r.size, Reason.LEGAL, dtype=np.int8)
    checks = [
        (Reason.SRAM_OVER, sram > arch.usable_sram_bytes),
        (Reason.PADDING_WASTE, waste > options.max_padding_waste),
        (Reason.NO_FIT, waste >= NO_FIT_WASTE),
    ]
    if arch.wafer.die_boundary is DieBoundary.FORBID:
        dies = arch.wafer.die_cores
        checks.append((Reason.CROSSES_DIE, (r > dies.rows) | (c > dies.cols)))
    checks += [(Reason.WIDER_THAN_WAFER, c > arch.cols), (Reason.TALLER_THAN_WAFER, r > arch.rows)]
    for code, mask in checks:  # later checks overwrite: wafer geometry outranks fit outranks padding outranks SRAM
        reason[mask] = code
    return reason


def on_grid(work: Work, arch: Arch, options: CostOptions, r: int, c: int) -> tuple[Dataflow, GridCosts]:
    """The kernel on exactly ``r x c`` cores (a grid the user fixes, ``--grid``): its fastest dataflow
    there, and that dataflow's costs. Cores beyond the kernel's split extents idle (no padding rule:
    the grid is given, not chosen); SRAM is the caller's to check (a fixed grid spreads what does not
    fit over more regions of that grid). The kernels of a fixed grid run one after another on the same
    cores, so their operands are in place (``grid_costs(in_place=True)``, which only the calibrated
    execution model of ``arch.execution`` reads; the streaming model's numbers are unchanged)."""
    best: tuple[Dataflow, GridCosts] | None = None
    for df in work.dataflows():
        g = grid_costs(work, arch, options, df, np.array([r]), np.array([c]), in_place=True)
        if best is None or int(g.latency[0]) < int(best[1].latency[0]):
            best = (df, g)
    assert best is not None  # every work has a dataflow
    return best


@dataclass(frozen=True)
class Frontier:
    """Legal op models on the (cores, latency) Pareto frontier: cores ascending, latency descending."""

    cores: np.ndarray
    latency: np.ndarray
    index: np.ndarray  # row in the kernel's OpModelTable

    def __len__(self) -> int:
        return int(self.cores.size)


def pareto_frontier(table: OpModelTable) -> Frontier:
    """Keep, among legal op models, those no other beats on both cores and latency.

    Ties on (cores, latency) keep the one with less tile waste, then the lowest index, so the
    choice is deterministic (r x c and c x r often tie).
    """
    legal = np.flatnonzero(table.legal())
    if legal.size == 0:
        empty = np.array([], dtype=np.int64)
        return Frontier(empty, empty, empty)
    cores = table.cores[legal]
    lat = table.latency[legal]
    order = np.lexsort((legal, table.waste[legal], lat, cores))
    cores, lat, idx = cores[order], lat[order], legal[order]
    best_before = np.minimum.accumulate(np.concatenate(([np.iinfo(np.int64).max], lat[:-1])))
    keep = lat < best_before
    return Frontier(cores[keep].astype(np.int64), lat[keep].astype(np.int64), idx[keep].astype(np.int64))
