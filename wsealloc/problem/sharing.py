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

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.cost import grid_costs
from wsealloc.cost.model import NO_FIT_WASTE
from wsealloc.cost.region import fastest_on
from wsealloc.opmodels import CostTable

SIDE_RATIO = 1.03  # consecutive candidate sides differ by at most 3%
STACK = 4  # the "stacked" family: columns of at most this many regions, one above the other
ASPECTS = (1.0, 4 / 3, 3 / 4)
INF = np.iinfo(np.int64).max // 8
WINDOW_CELLS = 4_000_000  # sparse-table cells per chunk of grids (32 MB of float64)


def candidate_shapes(arch: Arch, family: str = "squares") -> np.ndarray:
    """[G, 2] region grids (rows, cols) on the side ladder, within the wafer (and within a die when the
    arch forbids crossing one), by cores ascending: ``squares`` (squares and 4:3 / 3:4 rectangles,
    the fastest for a token's collectives), ``shelves`` (half the wafer's rows, any width: two rows of
    regions side by side) or ``columns`` (all its rows: regions side by side always pack when their
    cores fit)."""
    sides: list[int] = [1]
    while sides[-1] < max(arch.rows, arch.cols):
        sides.append(max(sides[-1] + 1, int(sides[-1] * SIDE_RATIO)))
    shapes = set()
    if family in ("shelves", "columns"):
        height = arch.rows if family == "columns" else max(1, arch.rows // 2)
        shapes = {(height, w) for w in sides if w <= arch.cols and grid_allowed(arch, height, w)}
    if family == "stacked":  # columns of k regions of rows // k, k = 1..STACK
        shapes = {
            (arch.rows // k, w)
            for k in range(1, STACK + 1)
            for w in sides
            if w <= arch.cols and arch.rows // k >= 1 and grid_allowed(arch, arch.rows // k, w)
        }
    for s in sides if family == "squares" else ():
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
    """Kernels in dataflow order on every candidate region grid (see the module docstring).

    ``cap`` (None: none): a run is admissible only if its kernels' latencies sum to at most ``cap``
    cycles (``latency[i:j, g]``), so that a search on the capped problem finds the fastest plan whose
    every region is within the cap (``solvers.share.solve_paced``: with N requests interleaved through
    the regions a token takes ``max(path, N x slowest region)``, and the slowest region is what the cap
    bounds). It applies to each single region, before ``_columns`` composes the stacked columns: each
    region of a column within the cap, not the column as a whole (a column's regions run side by side
    in the pipeline, each its own stage). The MoE charges (``ends``, ``starts``) are left out of the
    test on purpose: the kernels' sum alone is monotone in the start i (the charge at a run's first
    kernel is not), so the admissible starts stay an interval and the binary search of ``windows``
    stays exact, and it is symmetric under ``reversed`` (which swaps the charges). The charges are
    non-negative, so this is a relaxation: every run whose time with its charges is within the cap is
    admitted, and a region's time with its charges may exceed the cap by them."""

    names: tuple[str, ...]
    shapes: np.ndarray  # [G, 2]
    latency: np.ndarray  # [n, G] int64 cycles (INF: the kernel cannot be laid on that grid)
    resident: np.ndarray  # [n, G] bytes per core held all the time (weights, KV state)
    buffers: np.ndarray  # [n, G] bytes per core of its stream buffers (while it runs)
    usable_sram: int
    total_cores: int
    # the "stacked" family: a grid of rows // k x w is a column of up to k regions one above the other
    # (pieces[g] = k), each a run of its own on that grid, the column charged rows x w cores: columns
    # side by side always pack when their cores fit (empty: every grid is one region)
    pieces: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    wafer_rows: int = 0
    # a MoE layer's two shards chosen kept or split by the search (``problem.expert_pairs``): ``ends[k, g]``
    # cycles charged to a run on grid g whose last kernel is k, ``starts[k, g]`` to one whose first is k
    # (the reversed problem's ends), and ``unbroken[p]``: no region inside a stacked column may begin at
    # kernel boundary p (a run, a column, or a wafer may). None: nothing charged, any boundary.
    ends: np.ndarray | None = None
    starts: np.ndarray | None = None
    unbroken: np.ndarray | None = None
    # the most cycles a region's kernels may take together (None: no cap; see the class docstring)
    cap: int | None = None

    @property
    def charged(self) -> bool:
        """Whether runs pay more than their kernels' latencies (``ends``, ``starts``)."""
        return self.ends is not None or self.starts is not None

    def prefixes(self) -> tuple[np.ndarray, np.ndarray]:
        """[G, n + 1] twice: a run [i, j) on grid g takes ``end[g, j] - start[g, i]`` cycles, its kernels'
        latencies (INF counted 0: the windows keep such runs out) and the charges at its ends."""
        n = self.n_kernels
        prefix = np.zeros((self.shapes.shape[0], n + 1), dtype=np.int64)
        prefix[:, 1:] = np.cumsum(np.where(self.latency < INF, self.latency, 0).T, axis=1)
        end, start = prefix, prefix
        if self.ends is not None:
            end = prefix.copy()
            end[:, 1:] += self.ends.T
        if self.starts is not None:
            start = prefix.copy()
            start[:, :-1] -= self.starts.T
        return end, start

    def run_latency(self, i: int, j: int, g: int) -> int:
        """Cycles of the run [i, j) on grid g (its kernels' and its charges)."""
        out = int(self.latency[i:j, g].sum())
        out += int(self.ends[j - 1, g]) if self.ends is not None else 0
        out += int(self.starts[i, g]) if self.starts is not None else 0
        return out

    def windows(self) -> np.ndarray:
        """[G, n + 1]: for every grid g and run end j, the first start i of a run [i, j) that fits (the
        fitting starts are i in [first, j): resident sums and buffer maxima only grow with the run;
        ``j`` when none fits).

        The condition is monotone in i (floating-point sums and maxima of non-negative terms too), so
        every (g, j) is a binary search at once, a buffer maximum over [i, j) read from a sparse table:
        O(G n log n) time and memory per chunk of grids, instead of the O(G n^2) of testing every i."""
        n, g_count = self.latency.shape
        out = np.empty((g_count, n + 1), dtype=np.int64)
        out[:, 0] = 0
        ends = np.arange(1, n + 1)
        levels = max(1, int(n).bit_length())
        chunk = max(1, WINDOW_CELLS // max(1, n * levels))
        for g0 in range(0, g_count, chunk):
            gs = slice(g0, min(g_count, g0 + chunk))
            resident = np.zeros((gs.stop - gs.start, n + 1))
            resident[:, 1:] = np.cumsum(self.resident[:, gs].T, axis=1)
            bad = np.zeros((gs.stop - gs.start, n + 1), dtype=np.int64)
            bad[:, 1:] = np.cumsum(self.latency[:, gs].T >= INF, axis=1)
            table = [self.buffers[:, gs].T.copy()]  # table[k][:, i]: max of buffers[i : i + 2**k]
            for k in range(1, levels):
                prev, half = table[-1], 1 << (k - 1)
                nxt = prev.copy()
                nxt[:, : n - half] = np.maximum(prev[:, : n - half], prev[:, half:])
                table.append(nxt)
            stacked = np.stack(table)  # [levels, chunk, n]
            rows = np.arange(gs.stop - gs.start)[:, None]
            lo = np.zeros((gs.stop - gs.start, n), dtype=np.int64)
            hi = np.broadcast_to(ends, lo.shape).copy()  # the answer lies in [lo, hi]; hi = j: none fits
            for _ in range(levels + 1):
                active = lo < hi
                if not active.any():
                    break
                mid = np.minimum((lo + hi) // 2, ends[None, :] - 1)  # settled entries: any start, unused
                width = np.maximum(ends[None, :] - mid, 1)
                k = np.frexp(width)[1].astype(np.int64) - 1  # floor(log2(width)), exact for integers
                top = np.maximum(stacked[k, rows, mid], stacked[k, rows, ends[None, :] - (1 << k)])
                need = resident[:, 1:] - np.take_along_axis(resident, mid, 1)  # run [mid, j): resident bytes
                clean = bad[:, 1:] == np.take_along_axis(bad, mid, 1)  # and no kernel that cannot be laid there
                fits = (need + top <= self.usable_sram) & clean
                hi = np.where(active & fits, mid, hi)
                lo = np.where(active & ~fits, mid + 1, lo)
            out[gs, 1:] = lo
        if self.cap is not None:  # the cap's first start, the later of the two (both conditions hold on [first, j))
            out[:, 1:] = np.maximum(out[:, 1:], self._capped_starts())
        self._columns(out)
        return out

    def _capped_starts(self) -> np.ndarray:
        """[G, n]: for every grid g and run end j (1..n), the first start i whose run [i, j) takes at
        most ``cap`` cycles of its kernels (charges aside: see the class docstring). The latencies are
        non-negative, so the sum grows as i falls: a binary search on each grid's prefix sums (INF
        entries counted 0; the SRAM windows keep runs holding them out). ``j`` when not even the empty
        run would do (a negative cap)."""
        assert self.cap is not None
        n, g_count = self.latency.shape
        prefix = np.zeros((g_count, n + 1), dtype=np.int64)
        prefix[:, 1:] = np.cumsum(np.where(self.latency < INF, self.latency, 0).T, axis=1)
        ends = np.arange(1, n + 1)
        out = np.empty((g_count, n), dtype=np.int64)
        for g in range(g_count):  # prefix[g, i] >= prefix[g, j] - cap: the run [i, j) is within the cap
            out[g] = np.searchsorted(prefix[g], prefix[g, 1:] - self.cap, side="left")
        return np.minimum(out, ends[None, :])

    def _columns(self, out: np.ndarray) -> None:
        """One-region windows ``out`` made those of the stacked columns in place: a column of k regions
        is k runs back to back, each as long as fits (from the end: the earliest start of each); a region
        inside it never begins where ``unbroken`` forbids (the earliest start then moved to the next
        boundary allowed: a shorter region fits whenever a longer one does), the column itself may."""
        n = self.n_kernels
        for g in range(out.shape[0]):
            if self.pieces.size and self.pieces[g] > 1:
                single = out[g].copy()
                inner = single
                if self.unbroken is not None:  # the first allowed boundary at or after the earliest start
                    allowed = np.where(self.unbroken, n + 1, np.arange(n + 1))
                    later = np.minimum.accumulate(allowed[::-1])[::-1]
                    inner = np.minimum(later[single], np.arange(n + 1))  # none before j: nothing fits
                at = np.arange(n + 1)
                for _ in range(int(self.pieces[g]) - 1):
                    at = inner[at]
                out[g] = single[at]

    def windows_by_testing(self) -> np.ndarray:
        """``windows`` by testing every start (O(G n^2)): the reference the tests hold it to."""
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
            if self.cap is not None:  # every run's own sum of its kernels' latencies (INF entries: bad above)
                lat = np.where(self.latency[:, g] < INF, self.latency[:, g], 0)
                took = np.cumsum(np.where(later, lat[None, :], 0), axis=1)  # [i, j-1]: run [i, j)
                fits &= took <= self.cap
            first = np.where(fits.any(axis=0), fits.argmax(axis=0), np.arange(1, n + 1))
            out[g, 0] = 0
            out[g, 1:] = first
        self._columns(out)
        return out

    def split(self, first: int, end: int, g: int, single: np.ndarray, cut: np.ndarray | None = None) -> list[tuple[int, int]]:
        """A column run [first, end) on grid g as its regions: runs as long as fit, from the end
        (``single``: the one-region windows of grid g, ``single_windows``: with a ``cap``, each region
        within it); ``cut``: where a region may end (the user's groups stay whole; None: anywhere)."""
        runs: list[tuple[int, int]] = []
        j = end
        while j > first:
            i = max(int(single[j]), first)
            while cut is not None and not cut[i] and i < j - 1:
                i += 1  # the next boundary the groups allow (a group that fits alone fits from its start)
            runs.append((i, j))
            j = i
        return runs[::-1]

    def segment(self, first: int, end: int) -> SharingProblem:
        """Kernels [first, end) only (one wafer's of a cut)."""
        rows = slice(first, end)
        return replace(
            self,
            names=self.names[rows],
            latency=self.latency[rows],
            resident=self.resident[rows],
            buffers=self.buffers[rows],
            ends=self.ends[rows] if self.ends is not None else None,
            starts=self.starts[rows] if self.starts is not None else None,
            unbroken=self.unbroken[first : end + 1] if self.unbroken is not None else None,
        )

    def reversed(self) -> SharingProblem:
        """The same problem with the kernel sequence reversed (a run of it is a run reversed, its last
        kernel its first: the charges at the ends swap): the programs that bound the rest of a plan run on it."""
        return replace(
            self,
            names=self.names[::-1],
            latency=self.latency[::-1].copy(),
            resident=self.resident[::-1].copy(),
            buffers=self.buffers[::-1].copy(),
            ends=self.starts[::-1].copy() if self.starts is not None else None,
            starts=self.ends[::-1].copy() if self.ends is not None else None,
            unbroken=self.unbroken[::-1].copy() if self.unbroken is not None else None,
        )

    @property
    def n_kernels(self) -> int:
        """Kernels."""
        return len(self.names)

    def cores(self) -> np.ndarray:
        """[G] cores each candidate grid is charged (a stacked column: the wafer's rows x its width)."""
        if self.pieces.size:
            return np.where(self.pieces > 1, self.wafer_rows * self.shapes[:, 1], self.shapes[:, 0] * self.shapes[:, 1])
        return self.shapes[:, 0] * self.shapes[:, 1]

    def merged(self, spans: list[tuple[int, int]]) -> tuple[SharingProblem, np.ndarray]:
        """The problem with each span [a, b) of kernels as one row (the user keeps them in one region:
        ``together: ... how: region``): its latency the members' sum (INF if one is), its resident
        bytes their sum, its buffers their maximum. Returns it and, for every run boundary of the
        merged rows, the kernel boundary it stands for ([m + 1])."""
        if self.charged or self.unbroken is not None:
            raise ValueError("the user's region groups and expert shards chosen by the search do not combine")
        n = self.n_kernels
        start = np.arange(n + 1)
        for a, b in sorted(spans):
            start[a + 1 : b] = -1  # no boundary inside a span
        bounds = start[start >= 0]
        lat, res, buf = [], [], []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            block = self.latency[a:b]
            lat.append(np.where((block >= INF).any(axis=0), INF, np.minimum(block.sum(axis=0), INF)))
            res.append(self.resident[a:b].sum(axis=0))
            buf.append(self.buffers[a:b].max(axis=0))
        names = tuple("+".join(self.names[a:b]) for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        problem = replace(self, names=names, latency=np.array(lat, dtype=np.int64), resident=np.array(res), buffers=np.array(buf))
        return problem, bounds.astype(np.int64)

    def single_windows(self, grids: Sequence[int] | None = None) -> np.ndarray:
        """The windows of one region per grid (``windows`` of the same problem unstacked, within its
        ``cap``: what ``split`` cuts a column by, so each region of a column stays within it); ``grids``: of
        these grids only (the other rows 0: a plan's runs need their own grids', a tenth of them or
        less, and every wafer's table of regions computed them all: half of its time)."""
        if grids is None:
            return replace(self, pieces=np.zeros(0, dtype=np.int64)).windows()
        rows = np.unique(np.asarray(grids, dtype=np.int64))
        sub = replace(
            self,
            shapes=self.shapes[rows],
            latency=self.latency[:, rows],
            resident=self.resident[:, rows],
            buffers=self.buffers[:, rows],
            pieces=np.zeros(0, dtype=np.int64),
            ends=self.ends[:, rows] if self.ends is not None else None,
            starts=self.starts[:, rows] if self.starts is not None else None,
        )
        out = np.zeros((self.shapes.shape[0], self.n_kernels + 1), dtype=np.int64)
        out[rows] = sub.windows()
        return out


def build_sharing_problem(costs: CostTable, shapes: np.ndarray | None = None, family: str = "squares") -> SharingProblem:
    """The sharing problem of a kernel cost table (identical kernels costed once) over ``shapes`` or
    the ``family``'s candidate grids."""
    arch = costs.arch
    grid = candidate_shapes(arch, family) if shapes is None else np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
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
    stacked = family == "stacked" and shapes is None
    return SharingProblem(
        names=tuple(kc.kernel.name for kc in costs.kernels),
        shapes=grid,
        latency=lat,
        resident=resident,
        buffers=buffers,
        usable_sram=arch.usable_sram_bytes,
        total_cores=arch.total_cores,
        pieces=(arch.rows // np.maximum(grid[:, 0], 1)).astype(np.int64) if stacked else np.zeros(0, dtype=np.int64),
        wafer_rows=arch.rows,
    )
