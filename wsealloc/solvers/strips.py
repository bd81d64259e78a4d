"""Dataflow-ordered strip construction: the placement warm start (``--placer strips``).

Kernels keep their topological order and are laid out in horizontal *bands* (strips), left to right
in even bands and right to left in odd ones (a snake, as wafer compilers lay out pipelines), so a
producer and its consumer are neighbours. A band has one height H; each kernel in it takes the
narrowest legal rectangle with at most H rows meeting its latency target.

For a target T, a dynamic program over the kernel sequence chooses the band boundaries and heights
with the least total height:  f(j) = min over H of align(f(lo_H(j))) + H, where lo_H(j) is the first
kernel that can share a band of height H with kernel j-1 (widths summing to at most the region
width). f is non-decreasing in j, so the window minimum is its left end and the DP is O(n * |H|).
With ``die_boundary: forbid`` the regions are the dies (snake order) and bands never cross them.
Bisection over T finds the smallest feasible target; a packer then places the rectangles for real,
sliding past defective cores and opening a new band when one overflows. Communication (distance,
congestion, die crossings) is evaluated on the result and fed back as per-kernel margins for a few
rounds, keeping the best placement.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from wsealloc.problem.flows import crossing_bytes
from wsealloc.problem.placement import INF, PlacementProblem


@dataclass(frozen=True)
class Placed:
    """Rectangles of every kernel and their op-model numbers."""

    rects: np.ndarray  # [n, 4] int64: row, col, r, c
    dataflow: np.ndarray  # [n] dataflow codes
    latency: np.ndarray  # [n] op-model latency (without communication)
    noc: np.ndarray  # [n] op-model NoC cycles


def score(problem: PlacementProblem, placed: Placed) -> tuple[int, int, float]:
    """Ranking of placements: bottleneck stage, then how many kernels sit at it, then traffic x distance.

    Counting the kernels at the bottleneck lets a search improve identical layers one at a time."""
    stage, comm = problem.evaluate(placed.rects, placed.latency, placed.noc, placed.dataflow)
    worst = int(stage.max())
    return worst, int((stage == worst).sum()), comm.traffic_distance


@dataclass(frozen=True)
class Region:
    """A rectangle of the wafer that bands fill (the wafer, or one die)."""

    row: int
    col: int
    rows: int
    cols: int


def regions(problem: PlacementProblem) -> list[Region]:
    """The wafer as one region, or its dies in snake order when crossing dies is forbidden."""
    m = problem.mesh
    if problem.die_rule != "forbid":
        return [Region(0, 0, m.rows, m.cols)]
    out: list[Region] = []
    n_dy, n_dx = m.rows // m.die_rows, m.cols // m.die_cols
    for dy in range(n_dy):
        xs = range(n_dx) if dy % 2 == 0 else range(n_dx - 1, -1, -1)
        out.extend(Region(dy * m.die_rows, dx * m.die_cols, m.die_rows, m.die_cols) for dx in xs)
    return out


def band_heights(problem: PlacementProblem, limit: int, minimum: int = 1) -> np.ndarray:
    """Candidate band heights in [minimum, limit]: every shape height thinned to ~5% steps, plus the limit."""
    hs = np.unique(np.concatenate([s.heights for s in problem.shapes] + [np.array([limit])]))
    hs = hs[(hs <= limit) & (hs >= min(minimum, limit))]
    kept: list[int] = []
    for h in hs.tolist():
        if not kept or h >= kept[-1] * 1.02 or h == hs[-1]:
            kept.append(int(h))
    return np.array(kept, dtype=np.int64)


def pass_through(problem: PlacementProblem) -> np.ndarray:
    """Bytes crossing the boundary in front of each kernel when kernels sit in dataflow order:
    every flow s -> t with s < k <= t (its own inputs included; a multicast group once). Laid out left
    to right in a band, these flows all cross that boundary, so they load its links."""
    return crossing_bytes(problem.n_kernels, problem.flows)[: problem.n_kernels]


def widths_for(problem: PlacementProblem, targets: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """[n, |H|] narrowest width per kernel and band height meeting each kernel's target (INF: none).

    A band must also be tall enough for the traffic crossing in front of the kernel to pass its links
    within the target: height >= pass-through bytes / (link bandwidth * target)."""
    n = problem.n_kernels
    out = np.full((n, heights.size), INF, dtype=np.int64)
    min_height = pass_through(problem) / (problem.mesh.link_bytes_per_cycle * np.maximum(targets, 1))
    cache: dict[tuple[int, int], np.ndarray] = {}
    for k in range(n):
        key = (problem.kernel_class[k], int(targets[k]))
        row = cache.get(key)
        if row is None:
            shape = problem.shape(k)
            row = np.full(heights.size, INF, dtype=np.int64)
            for h, height in enumerate(heights.tolist()):
                w = shape.width_for(shape.height_index(height), int(targets[k]))
                if w > 0:
                    row[h] = w
            cache[key] = row
        out[k] = np.where(heights >= min_height[k], row, INF)
    return out


def band_plan(
    widths: np.ndarray, heights: np.ndarray, region_rows: int, region_cols: int, n_regions: int
) -> list[tuple[int, int, int]] | None:
    """Least-height partition of the kernel sequence into bands: [(first, end, height)] or None."""
    n = widths.shape[0]
    total = region_rows * n_regions
    capped = np.minimum(widths, region_cols + 1)
    prefix = np.vstack([np.zeros((1, heights.size), dtype=np.int64), np.cumsum(capped, axis=0)])  # [n+1, H]
    f = np.full(n + 1, INF, dtype=np.int64)
    f[0] = 0
    arg_h = np.zeros(n + 1, dtype=np.int64)
    arg_lo = np.zeros(n + 1, dtype=np.int64)
    # first kernel of a band ending at j, per height: prefix[j] - prefix[lo] <= region width
    lows = np.stack([np.searchsorted(prefix[:, h], prefix[:, h] - region_cols, side="left") for h in range(heights.size)], axis=1)
    for j in range(1, n + 1):
        ok = capped[j - 1] <= region_cols
        if not ok.any():
            return None
        lo = lows[j]
        start = f[np.minimum(lo, j - 1)]
        # bands never cross a region boundary: move a band that would to the next region
        offset = start % region_rows
        aligned = np.where(offset + heights > region_rows, start - offset + region_rows, start)
        value = np.where(ok & (start < INF), aligned + heights, INF)
        h = int(np.argmin(value))
        f[j], arg_h[j], arg_lo[j] = value[h], h, lo[h]
    if f[n] > total:
        return None
    bands = []
    j = n
    while j > 0:
        bands.append((int(arg_lo[j]), j, int(heights[arg_h[j]])))
        j = int(arg_lo[j])
    return bands[::-1]


def band_widths(problem: PlacementProblem, bands: list[tuple[int, int, int]], targets: np.ndarray) -> np.ndarray:
    """Each kernel's narrowest width in its band meeting its target (0 when none)."""
    widths = np.zeros(problem.n_kernels, dtype=np.int64)
    for first, end, height in bands:
        for k in range(first, end):
            shape = problem.shape(k)
            widths[k] = shape.width_for(shape.height_index(height), int(targets[k]))
    return widths


def stretch(problem: PlacementProblem, bands: list[tuple[int, int, int]], widths: np.ndarray, region_cols: int) -> np.ndarray:
    """Hand each band's unused columns, one at a time, to its slowest kernel (where a wider rectangle
    is faster): the band's end would otherwise idle."""
    out = widths.copy()
    for first, end, height in bands:
        spare = region_cols - int(out[first:end].sum())
        if spare <= 0:
            continue
        heap: list[tuple[int, int]] = []
        for k in range(first, end):
            shape = problem.shape(k)
            heapq.heappush(heap, (-int(shape.prefix[shape.height_index(height), out[k]]), k))
        while spare > 0 and heap:
            neg, k = heapq.heappop(heap)
            shape = problem.shape(k)
            h = shape.height_index(height)
            if out[k] + 1 >= shape.prefix.shape[1]:
                continue
            now, wider = -neg, int(shape.prefix[h, out[k] + 1])
            if wider >= now:
                # one more column does not help this kernel now; look a few columns further
                ahead = shape.prefix[h, out[k] + 1 : out[k] + 1 + spare]
                better = np.flatnonzero(ahead < now)
                if better.size == 0:
                    continue
                step = int(better[0]) + 1
            else:
                step = 1
            out[k] += step
            spare -= step
            heapq.heappush(heap, (-int(shape.prefix[h, out[k]]), k))
    return out


def pack(problem: PlacementProblem, bands: list[tuple[int, int, int]], widths: np.ndarray) -> Placed | None:
    """Place the bands' rectangles on the real wafer (defects, regions); None if they do not fit.

    Kernel k takes the best rectangle with exactly ``widths[k]`` columns and at most its band's rows."""
    n = problem.n_kernels
    regs = regions(problem)
    blocked = problem.blocked
    integral = np.zeros((blocked.shape[0] + 1, blocked.shape[1] + 1), dtype=np.int32)
    integral[1:, 1:] = np.cumsum(np.cumsum(blocked, axis=0), axis=1)
    rects = np.zeros((n, 4), dtype=np.int64)
    dfs = np.zeros(n, dtype=np.int8)
    lat = np.zeros(n, dtype=np.int64)
    noc = np.zeros(n, dtype=np.float64)
    reg_i, y, band_no = 0, 0, 0

    def free(row: int, col: int, r: int, c: int) -> bool:
        return int(integral[row + r, col + c] - integral[row, col + c] - integral[row + r, col] + integral[row, col]) == 0

    for first, end, height in bands:
        # open a band of this height (next region if it does not fit in this one)
        while reg_i < len(regs) and y + height > regs[reg_i].rows:
            reg_i, y = reg_i + 1, 0
        if reg_i >= len(regs):
            return None
        cursor = 0
        k = first
        while k < end:
            reg = regs[reg_i]
            shape = problem.shape(k)
            hidx = shape.height_index(height)
            c = int(widths[k])
            if c <= 0 or shape.best[hidx, c] >= INF:
                return None
            r = int(shape.best_r[hidx, c])
            placed = False
            x = cursor
            while x + c <= reg.cols:
                col = reg.col + (x if band_no % 2 == 0 else reg.cols - x - c)
                offsets = [dy for dy in range(0, height - r + 1) if free(reg.row + y + dy, col, r, c)]
                if offsets:
                    rects[k] = (reg.row + y + offsets[0], col, r, c)
                    dfs[k] = shape.best_df[hidx, c]
                    lat[k] = shape.best[hidx, c]
                    noc[k] = shape.best_noc[hidx, c]
                    cursor = x + c
                    placed = True
                    break
                x += 1
            if placed:
                k += 1
                continue
            # band overflow (defects): continue in a fresh band of the same height
            y += height
            band_no += 1
            cursor = 0
            while reg_i < len(regs) and y + height > regs[reg_i].rows:
                reg_i, y = reg_i + 1, 0
            if reg_i >= len(regs):
                return None
        y += height
        band_no += 1
    return Placed(rects, dfs, lat, noc)


def construct(problem: PlacementProblem, targets: np.ndarray, min_band: int = 1) -> Placed | None:
    """Band plan + packing for per-kernel latency targets; None when they cannot be met on the wafer.

    ``min_band`` excludes flat bands, which pack tightly but stretch producer->consumer distances."""
    regs = regions(problem)
    heights = band_heights(problem, regs[0].rows, min_band)
    widths = widths_for(problem, targets, heights)
    plan = band_plan(widths, heights, regs[0].rows, regs[0].cols, len(regs))
    if plan is None:
        return None
    chosen = band_widths(problem, plan, targets)
    # wider rectangles may no longer slide past defects: fall back to the narrow ones
    return pack(problem, plan, stretch(problem, plan, chosen, regs[0].cols)) or pack(problem, plan, chosen)


def smallest_target(
    problem: PlacementProblem, margins: np.ndarray, lo: int, deadline: float, min_band: int = 1
) -> tuple[int, Placed] | None:
    """Bisection on a uniform target T (kernel k aims at T - margins[k]): the smallest T that packs."""
    hi = max(lo, 1)
    found: tuple[int, Placed] | None = None
    while found is None:
        placed = construct(problem, np.maximum(hi - margins, 1), min_band)
        if placed is not None:
            found = (hi, placed)
            break
        if hi > 1 << 50 or time.perf_counter() > deadline:
            return None
        hi *= 2
    low = lo
    while low < found[0] and time.perf_counter() < deadline:
        mid = (low + found[0]) // 2
        placed = construct(problem, np.maximum(mid - margins, 1), min_band)
        if placed is not None:
            found = (mid, placed)
        else:
            low = mid + 1
    return found


def place_targets(problem: PlacementProblem, base: np.ndarray, deadline: float) -> Placed | None:
    """Place kernels aiming at per-kernel targets ``base`` (e.g. the greedy allocation's latencies),
    relaxed by the smallest common factor (1 + x/1000) that packs."""
    base = np.maximum(base.astype(np.int64), 1)

    def attempt(x: int) -> Placed | None:
        return construct(problem, -(-base * (1000 + x) // 1000))

    hi, found = 0, attempt(0)
    while found is None:
        hi = max(1, hi * 2)
        if hi > 1 << 30 or time.perf_counter() > deadline:
            return None
        found = attempt(hi)
    lo = hi // 2 if hi else 0
    while lo < hi and time.perf_counter() < deadline:
        mid = (lo + hi) // 2
        placed = attempt(mid)
        if placed is not None:
            hi, found = mid, placed
        else:
            lo = mid + 1
    return found
