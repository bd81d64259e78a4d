"""Dataflow-ordered strip construction: the placement warm start (``--placer strips``).

Kernels keep their order (the problem's dataflow order; the contest also asks for a density order
through ``PlacementProblem.in_sequence``) and are laid out in horizontal *bands* (strips), left to right
in even bands and right to left in odd ones (a snake, as wafer compilers lay out pipelines), so a
producer and its consumer are neighbours. A band has one height H and is a row of *column slots*: a
slot holds one kernel (at most H rows) or two consecutive kernels stacked (their rows summing to at
most H; for the contest, ``Stacking.DEEP``, up to ``DEEP_STACK``), each the narrowest legal rectangle
meeting its latency target; ``Stacking.LANES`` also lays runs of up to ``LANE_RUN`` consecutive
kernels as two sub-lanes of a band (the first ones side by side in its upper rows, the rest under
them), and ``Stacking.TURNS`` also runs that turn (``Run.turn``: the upper lane into one kernel of
the band's full height, the lower lane back under it). Per band height a DP over the sequence picks
the slots of least total width (``slots``).

For a target T, a dynamic program over the kernel sequence chooses the band boundaries and heights
with the least total height:  f(j) = min over H of align(f(lo_H(j))) + H, where lo_H(j) is the first
kernel that can share a band of height H with kernel j-1 (slot widths summing to at most the region
width; a band never ends inside a stacked pair). Without stacking f is non-decreasing in j, so the
window minimum is its left end and the DP is O(n * |H|); with it the left end stands for the minimum.
With ``die_boundary: forbid`` the regions are the dies (snake order) and bands never cross them.
Bisection over T finds the smallest feasible target; a packer then places the rectangles for real,
sliding past defective cores and opening a new band when one overflows. Communication (distance,
congestion, die crossings) is evaluated on the result and fed back as per-kernel margins for a few
rounds, keeping the best placement.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import NamedTuple

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.constraints.geometry import connected, largest_free, touching
from wsealloc.problem.flows import crossing_bytes
from wsealloc.problem.latency_start import slack
from wsealloc.problem.objective import Aggregate
from wsealloc.problem.placement import INF, PlacementProblem, ShapeTable
from wsealloc.solvers.path_columns import OFF_PATH, lane_curve, share_columns


@dataclass(frozen=True)
class Placed:
    """Rectangles of every kernel and their op-model numbers."""

    rects: np.ndarray  # [n, 4] int64: row, col, r, c
    dataflow: np.ndarray  # [n] dataflow codes
    latency: np.ndarray  # [n] op-model latency (without communication)


Score = tuple[float, ...]


def score(problem: PlacementProblem, placed: Placed) -> Score:
    """Ranking of placements (lower is better), by the problem's objective:

    * ONNX: bottleneck stage, then how many kernels sit at it, then traffic x distance (counting the
      kernels at the bottleneck lets a search improve identical layers one at a time);
    * the contest: how far the bottleneck exceeds the time cap (0 within it), the weighted score, then
      the bottleneck, then how many sit at it.

    (``problem.objective.rank``: the objective decides.)"""
    return problem.rank(placed.rects, placed.latency)


class Stacking(Enum):
    """Which pairs of consecutive kernels may share a column slot."""

    NONE = "none"
    ANY = "any"  # wherever it narrows the band
    SKIP = "skip"  # only (k, k+1) where k+1 also reads a tensor from before k (a residual add after
    # the branch's last kernel): the skip flow then passes one slot fewer
    DEEP = "deep"  # the contest: up to DEEP_STACK consecutive kernels share a slot, one lane each (a
    # 633-row fabric holds three 198-row kernels or four 150-row ones in one column slot)
    LANES = "lanes"  # a run of up to LANE_RUN consecutive kernels shares a stretch of the band as two
    # sub-lanes, the first kernels left to right in the upper rows, the rest under them (``_lane_slots``)
    TURNS = "turns"  # LANES, and runs that turn: the upper lane's kernels into one kernel of the band's
    # full height beside both lanes, the lower lane back under the upper one (``Run.turn``)


# Stacking.DEEP: most kernels in one column slot (the contest only: no link model to leave room for)
DEEP_STACK = 4
# Stacking.LANES: most kernels in one run of two sub-lanes (ViT-B/16's 99-row matmuls two to a
# 198-row band; longer runs were not needed in the measurements, docs/benchmarks.md, 2026-11-29)
LANE_RUN = 6
# Stacking.TURNS: most kernels in a run that turns (upper lane, turn, lower lane): ViT-B/16's QK^T,
# softmax, softmax x V and the norm after it. Each run a DP tries costs its valid (band, upper lane)
# pairs, up to half an [|H|, |H|] grid, per construction: turns as long as LANE_RUN took ViT-B/16
# training's bisection 6.5 -> 9.8 s; with the flat pairs, runs of 5 and 6 took its construction
# 23.9 -> 24.6 and 34.9 s (17,044 and 17,004 cycles), past what a 30 s solve leaves it
TURN_RUN = 4
# ``wire_plans``: the prices of a band row against a tile of the wire estimate, one band plan each (the
# contest; a DP per price, so only the layouts the multi-start ranks best are rebuilt with them,
# ``place.construct_best``). The last is the fewest rows with the shortest chain among them: C's plans
# fit only there (97% of the fabric at 1.04x its bound), N's only at 8-32.
WIRE_PRICES = (0.5, 2.0, 8.0, 32.0, 128.0, 1e6)


@dataclass(frozen=True)
class Style:
    """Shape of a strip layout: the multi-start varies these.

    ``min_band`` excludes flat bands (they pack tightly but stretch producer->consumer distances);
    ``stack`` says which consecutive kernels may share a column slot. (Splitting the wafer into 2-4
    vertical regions to shorten skip flows was measured too: worse on ResNet-50, BERT-base and
    ViT-B/16.) ``first_fit``: where bands cannot slide past the user's corners and keep-outs, kernels
    go to the first free spot instead (``_first_fit``); the last resort, since it packs at targets
    where bands do not, with longer flows."""

    min_band: int = 1
    stack: Stacking = Stacking.NONE
    first_fit: bool = False
    edge: bool = False  # kernels that are taller than half the wafer at every shape first, at its left edge (``edge_pins``)
    wire: bool = False  # the contest: band plans that trade spare rows for shorter wires as well (``wire_plans``)


class Run(NamedTuple):
    """A run of consecutive kernels sharing a stretch of a band as two sub-lanes (``Stacking.LANES``):
    kernels [first, split) side by side in the band's upper ``top`` rows, the rest under them, each
    lane in the band's direction.

    With ``turn`` (``Stacking.TURNS``) kernel ``split`` takes the band's full height right after both
    lanes and the lower lane (split, end) runs back under the upper one, its first kernel next to the
    turn: a hairpin, each lane's kernels side by side and the turn beside the lower lane's first
    kernel (and the upper lane's last, where the upper lane is the wider or the lanes are equal; else
    its flow into the turn crosses the columns the upper lane leaves), so the flows into and out of the
    turn cross its vertical edges and none of the run goes down between the lanes but lane to lane
    (the room rule). The lower lane's last kernel sits at the run's start: its flow onwards crosses the
    run. It is what a 197-row band of ViT-B/16 needs: an attention's QK^T (99 x 17) over its
    softmax-times-V (95 x 16) with the softmax (197 x 1) at the turn, both tensors of 0.93 MB
    crossing 95-99-row edges; as two plain lanes the softmax's output went down a 2-column bundle
    (8,600 cycles of congestion). The run's width: the wider lane's, plus the turn's."""

    first: int
    split: int
    end: int
    top: int
    turn: bool = False

    def upper(self) -> range:
        return range(self.first, self.split)

    def lower(self) -> range:
        """The lower lane's kernels in sequence order (for a turn: from the turn back to the start)."""
        return range(self.split + 1 if self.turn else self.split, self.end)

    def width(self, widths: np.ndarray) -> int:
        """Columns the run takes with these kernel widths: the wider lane's, plus the turn's."""
        lanes = max(int(widths[self.first : self.split].sum()), int(widths[self.lower().start : self.end].sum()))
        return lanes + (int(widths[self.split]) if self.turn else 0)


@dataclass(frozen=True)
class PairRule:
    """What a stacked pair (k, k+1) must leave room for: the flow k -> k+1 runs vertically between
    the lanes, in a bundle as wide as the slot, while k+1 computes (``widths_for``'s rule, turned by
    90 degrees): link cycles / slot width <= target[k+1] - (lane rows + width of k+1)."""

    link_cycles: np.ndarray  # [n - 1]: bytes k -> k+1 over one link's bandwidth
    targets: np.ndarray  # [n]
    allowed: np.ndarray  # [n - 1] bool: the stacking mode admits (k, k+1)
    links: bool = True  # the room rule applies (ONNX); the contest has no link model
    depth: int = 2  # most kernels per column slot (Stacking.DEEP: DEEP_STACK; Stacking.LANES: per run)
    lanes: bool = False  # Stacking.LANES: runs of two sub-lanes instead of column slots
    # Stacking.LANES: (src, dst, bytes over one link's bandwidth) of every flow between kernels less
    # than ``depth`` apart, a multicast tensor once per consumer (the flows a run may turn downwards)
    near: tuple[tuple[int, int, float], ...] = ()
    turns: bool = False  # Stacking.TURNS: runs may also turn (``Run.turn``)


def pair_rule(problem: PlacementProblem, targets: np.ndarray, stack: Stacking) -> PairRule:
    """The ``PairRule`` of a problem for per-kernel targets and a stacking mode."""
    n = problem.n_kernels
    fl = problem.flows
    down = np.zeros(max(n - 1, 0))
    skip = np.zeros(max(n - 1, 0), dtype=bool)
    for s, t, b in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), strict=True):
        if t == s + 1:
            down[s] += b
        if s < t - 1:
            skip[t - 1] = True  # the pair (t - 1, t): t reads from before t - 1
    allowed = skip if stack is Stacking.SKIP else np.full(max(n - 1, 0), stack in (Stacking.ANY, Stacking.DEEP))
    links = problem.objective.charges_communication  # without a link model (the contest) any admitted pair may stack
    lanes = stack in (Stacking.LANES, Stacking.TURNS)
    if lanes:
        allowed = np.ones(max(n - 1, 0), dtype=bool)
    depth = {Stacking.DEEP: DEEP_STACK, Stacking.LANES: LANE_RUN, Stacking.TURNS: LANE_RUN}.get(stack, 2)
    near: dict[tuple[int, int], float] = {}
    if lanes and links:
        for s, t, b in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), strict=True):
            if 0 < t - s < depth:
                near[(s, t)] = near.get((s, t), 0.0) + b / problem.mesh.link_bytes_per_cycle
    flows = tuple((s, t, c) for (s, t), c in sorted(near.items()))
    link_cycles = down / problem.mesh.link_bytes_per_cycle
    return PairRule(link_cycles, targets.astype(np.int64), allowed, links, depth, lanes, flows, stack is Stacking.TURNS)


@dataclass(frozen=True)
class Region:
    """A rectangle of the wafer that bands fill (the wafer, or one die)."""

    row: int
    col: int
    rows: int
    cols: int


def regions(problem: PlacementProblem) -> list[Region]:
    """The wafer (or the problem's ``area``: a fence the user drew) as one region, or its dies (their
    parts inside the area) in snake order when crossing dies is forbidden."""
    m = problem.mesh
    ay, ax, ar, ac = problem.area if problem.area is not None else (0, 0, m.rows, m.cols)
    if problem.die_rule is not DieBoundary.FORBID:
        return [Region(ay, ax, ar, ac)]
    out: list[Region] = []
    n_dy, n_dx = m.rows // m.die_rows, m.cols // m.die_cols
    for dy in range(n_dy):
        xs = range(n_dx) if dy % 2 == 0 else range(n_dx - 1, -1, -1)
        for dx in xs:
            y0, x0 = max(dy * m.die_rows, ay), max(dx * m.die_cols, ax)
            y1, x1 = min((dy + 1) * m.die_rows, ay + ar), min((dx + 1) * m.die_cols, ax + ac)
            if y0 < y1 and x0 < x1:
                out.append(Region(y0, x0, y1 - y0, x1 - x0))
    return out


def band_heights(problem: PlacementProblem, limit: int) -> np.ndarray:
    """Candidate band and lane heights up to ``limit``: every shape height, plus the limit. (ONNX once
    thinned them to ~2% steps for speed; that dropped heights kernels need exactly, e.g. GPT-2
    training's 205-row LM head next to a kept 201: its bands packed at 9.6% above the bound instead of
    8.0%. ``distinct_heights`` now drops only heights that change no kernel's width, which keeps fewer.)"""
    hs = np.unique(np.concatenate([s.heights for s in problem.shapes] + [np.array([limit])]))
    return hs[hs <= limit].astype(np.int64)


def distinct_heights(heights: np.ndarray, widths: np.ndarray, min_band: int) -> tuple[np.ndarray, np.ndarray]:
    """``heights`` and the columns of ``widths`` [n, |H|] without the heights at which no kernel is
    narrower than one height below: a band (or lane) that tall has the same slots as the shorter one
    and more rows, so no band plan needs it. The first height of at least ``min_band`` stays (the
    shortest band the style admits). The band plan and slot DPs cost O(|H|) and O(|H|^2) per kernel,
    so this is their speed as well (GPT-2 training: 164 heights, 106 distinct)."""
    keep = _first_admitted(heights, min_band)
    keep[1:] |= (widths[:, 1:] != widths[:, :-1]).any(axis=0)
    return heights[keep], widths[:, keep]


def _first_admitted(heights: np.ndarray, min_band: int) -> np.ndarray:
    """Which heights must stay whatever their slots: the first, and the shortest band the style admits
    (``band_plan`` admits heights >= min(min_band, the region's rows), the region's rows being the last
    height): a taller height with the same slots may be the shortest admitted band."""
    keep = np.zeros(heights.size, dtype=bool)
    keep[0] = True
    tall = np.flatnonzero(heights >= min(min_band, int(heights[-1])))
    if tall.size:
        keep[tall[0]] = True
    return keep


def distinct_slots(heights: np.ndarray, sl: Slots, min_band: int) -> tuple[np.ndarray, Slots]:
    """``distinct_heights`` for stacked slots: with pairs the band height also decides which pairs fit
    one above the other, so a height whose single widths equal the one below may still hold a pair the
    shorter cannot; the slots (over every height) are compared instead: a height whose slot widths and
    pair splits equal the height below's gives the same band plans with more rows, so ``band_plan``
    never needs it (the slot DP keeps its cost over all heights; the band plan's drops)."""
    keep = _first_admitted(heights, min_band)
    keep[1:] |= (sl.width[:, 1:] != sl.width[:, :-1]).any(axis=0) | (sl.inside[:, 1:] != sl.inside[:, :-1]).any(axis=0)
    runs = tuple(sl.runs[int(h)] for h in np.flatnonzero(keep)) if sl.runs else ()  # (Stacking.LANES: per height)
    return heights[keep], Slots(sl.width[:, keep], sl.top[:, keep], sl.inside[:, keep], runs)


def pass_through(problem: PlacementProblem) -> np.ndarray:
    """Bytes crossing the boundary in front of each kernel when kernels sit in dataflow order:
    every flow s -> t with s < k <= t (its own inputs included; a multicast group once). Laid out left
    to right in a band, these flows all cross that boundary, so they load its links."""
    return crossing_bytes(problem.n_kernels, problem.flows)[: problem.n_kernels]


def widths_for(problem: PlacementProblem, targets: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """[n, |H|] narrowest width per kernel and band height meeting each kernel's target (INF: none).

    A band must also be tall enough for the traffic crossing in front of the kernel to pass its links
    while the kernel computes: link traffic overlaps compute but not the pipeline fill (the
    communication model, ``wsealloc.cost.comm``), so with a rectangle of at most H rows and w columns
    the pass-through bytes P must satisfy P / (link bandwidth * H) <= target - (H + w)."""
    n = problem.n_kernels
    cache: dict[tuple[int, int], np.ndarray] = {}  # identical kernels at one target: one row
    rows = []
    for k in range(n):
        key = (problem.kernel_class[k], int(targets[k]))
        row = cache.get(key)
        if row is None:
            row = cache[key] = problem.shape(k).widths_within(heights, int(targets[k]))
        rows.append(row)
    width = np.array(rows, dtype=np.int64).reshape(n, heights.size)
    if not problem.objective.charges_communication:  # the contest: a kernel's time is its op model's alone
        return np.where(width > 0, width, INF)
    link_cycles = pass_through(problem) / problem.mesh.link_bytes_per_cycle  # per kernel, over one link
    busy = targets[:, None] - heights[None, :] - width
    fits = (width > 0) & (busy > 0) & (link_cycles[:, None] <= busy * heights[None, :])
    return np.where(fits, width, INF)


@dataclass(frozen=True)
class Band:
    """Kernels [first, end) side by side in a band of ``height`` rows; ``stacked`` lists the groups of
    consecutive kernels sharing one column slot, one above the other: (first kernel, rows of every lane
    but the last, which takes the rest of the band); a pair is (k, (top lane rows,)). ``runs`` lists
    the runs of two sub-lanes (``Stacking.LANES`` and ``TURNS``, ``Run``): kernels [first, split) side
    by side in the band's upper rows, the rest under them (a turn's lower lane is (split, end))."""

    first: int
    end: int
    height: int
    stacked: tuple[tuple[int, tuple[int, ...]], ...] = ()
    runs: tuple[Run, ...] = ()
    skip: int = 0  # rows left empty above the band (``band_plan_around``: it starts below an obstacle)
    reverse: bool | None = None  # filled right to left (None: the snake's direction, odd bands reversed)

    def groups(self) -> dict[int, list[int]]:
        """First kernel of each stacked group -> its kernels, top lane first."""
        return {k: list(range(k, k + len(rows) + 1)) for k, rows in self.stacked}


@dataclass(frozen=True)
class Slots:
    """Column slots per band height: kernels alone, or two consecutive kernels stacked.

    Stacking lets two kernels that are each shorter than the band share its height (e.g. a 349-row and
    a 392-row convolution in a 792-row band) instead of each taking a full-height slot."""

    width: np.ndarray  # [n, |H|]: columns kernel k adds to its band (a pair's width on its second kernel, 0 on its first)
    top: np.ndarray  # [n, |H|]: rows of kernel k's lane when it is in a stacked group but not its last, else 0
    inside: np.ndarray  # [n + 1, |H|] bool: position j splits a pair (no band may end there)
    # Stacking.LANES, per height index: first kernel of a run -> the run
    runs: tuple[dict[int, Run], ...] = field(default=())


def _pair_slots(
    above: np.ndarray,
    below: np.ndarray,
    heights: np.ndarray,
    cols: int,
    targets: np.ndarray,
    link_cycles: np.ndarray,
    allowed: np.ndarray,
    links: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Narrowest stacked slot of pairs (a, b) per band height, and its top lane's rows (0: none).

    ``above``/``below`` [p, |H|]: each kernel's width per lane height; the top lane takes heights[t],
    the bottom one the rest; ``targets``, ``link_cycles``, ``allowed`` [p]: the ``PairRule`` of b."""
    p, nh = above.shape
    pair = np.full((p, nh), cols + 1, dtype=np.int64)
    split = np.zeros((p, nh), dtype=np.int64)
    for t in range(nh):
        bottom = np.searchsorted(heights, heights - heights[t], side="right") - 1  # [nh]
        low = np.maximum(bottom, 0)
        w = np.maximum(above[:, t][:, None], below[:, low])
        busy = targets[:, None] - heights[low][None, :] - below[:, low]
        room = allowed[:, None] & ((busy > 0) & (link_cycles[:, None] <= busy * w) if links else True)
        better = (w < pair) & (bottom >= 0)[None, :] & room
        pair = np.where(better, w, pair)
        split = np.where(better, heights[t], split)
    return pair, split


def _deep_slots(capped: np.ndarray, heights: np.ndarray, cols: int, depth: int) -> Slots:
    """``slots`` with groups of up to ``depth`` consecutive kernels per column slot (no link rule).

    A group fits a slot of w columns in a band of H rows when the least lane rows its kernels need at
    width <= w add up to at most H; per group the narrowest such w, every band height at once (the
    needed rows are non-increasing in w). DP over the sequence: g(i) = min over m <= depth of
    g(i - m) + width of the group [i - m, i)."""
    n, nh = capped.shape
    rows_max = int(heights[-1])
    # need[k, w]: fewest candidate rows at which kernel k is at most w columns wide (rows_max + 1: never)
    need = np.full((n, cols + 2), rows_max + 1, dtype=np.int64)
    for j in range(nh - 1, -1, -1):
        w = capped[:, j]
        for k in np.flatnonzero(w <= cols).tolist():
            need[k, w[k] :] = np.minimum(need[k, w[k] :], heights[j])
    group_width: dict[tuple[int, int], np.ndarray] = {}

    def width_of(first: int, m: int) -> np.ndarray:
        """[|H|] narrowest slot of the group [first, first + m) per band height (cols + 1: none)."""
        key = (first, m)
        if key not in group_width:
            total = need[first : first + m, : cols + 1].sum(axis=0)  # non-increasing in w
            fits = total[None, :] <= heights[:, None]
            group_width[key] = np.where(fits.any(axis=1), np.argmax(fits, axis=1), cols + 1)
        return group_width[key]

    g = np.full((n + 1, nh), INF, dtype=np.int64)
    g[0] = 0
    size = np.ones((n + 1, nh), dtype=np.int64)
    for i in range(1, n + 1):
        for m in range(1, min(depth, i) + 1):
            w = capped[i - 1] if m == 1 else width_of(i - m, m)
            cand = np.where((w <= cols) & (g[i - m] < INF), g[i - m] + w, INF)
            better = cand < g[i]
            g[i] = np.where(better, cand, g[i])
            size[i] = np.where(better, m, size[i])
    width = capped.copy()
    top = np.zeros((n, nh), dtype=np.int64)
    inside = np.zeros((n + 1, nh), dtype=bool)
    for h in range(nh):
        i = n
        while i > 0:
            m = int(size[i, h])
            if m > 1:
                slot = int(width_of(i - m, m)[h])
                for k in range(i - m, i - 1):  # every lane but the last: the rows it needs at the slot's width
                    width[k, h] = 0
                    top[k, h] = need[k, slot]
                    inside[k + 1, h] = True
                width[i - 1, h] = slot
            i -= m
    return Slots(width, top, inside)


def _lane_slots(capped: np.ndarray, heights: np.ndarray, cols: int, rule: PairRule) -> Slots:
    """``slots`` with runs of up to ``run`` consecutive kernels laid as two sub-lanes (no link rule).

    A run [a, i) split at s puts [a, s) side by side in an upper lane of heights[t] rows and [s, i)
    under it in the largest candidate height of the rest of the band; it takes as many columns as the
    wider lane. Short kernels of a tall band stop wasting its height this way (two 99-row matmuls
    over each other in a 198-row band where each alone took a 198-row slot). Per band height the
    narrowest upper lane for each (a, s, i) is found for every band height at once; then the same DP
    over the sequence as ``slots``: g(i) = min(g(i - 1) + own slot, min over runs ending at i of
    g(a) + run width).

    A flow from the upper lane into the lower one runs down in a bundle as wide as the wider of its
    two kernels and must pass while its consumer computes (``PairRule``'s room rule, per flow):
    without it ViT-B/16's runs put a 2-column softmax under the 18-column product it reads, 8,600
    cycles of congestion (the narrower kernel's width as the bundle was measured too: ResNet-50 then
    packs at 1,916 cycles instead of 1,743, ViT-B/16 at the same 5,120).

    With ``rule.turns`` a run [a, i) may also turn at s (``Run.turn``): [a, s) in the upper lane,
    kernel s at the band's full height after the lanes, (s, i) back under the upper lane; its width
    adds the turn's to the wider lane's. Its flows into and out of the turn cross vertical edges of
    95 rows or more, as between neighbours of a band, so only the flows from lane to lane pass the
    room rule."""
    run = rule.depth
    n, nh = capped.shape
    prefix = np.vstack([np.zeros((1, nh), dtype=np.int64), np.cumsum(capped, axis=0)])  # [n + 1, |H|]
    # lower[h, t]: index of the tallest candidate height fitting under an upper lane heights[t] in a
    # band heights[h] (-1: none)
    lower = np.searchsorted(heights, heights[:, None] - heights[None, :], side="right") - 1
    valid = lower >= 0
    low = np.maximum(lower, 0)
    rows = np.arange(nh)
    # the valid (band, upper lane) pairs, flattened band by band (``np.nonzero``, row-major), so each
    # band height's pairs are one segment, in ascending upper lane (valid[h] is a prefix of the upper
    # heights: the first pair of a row is its t = 0, as ``np.argmin`` of a row of INF). Runs are
    # computed over these vectors rather than the [|H|, |H|] grid: at most about half the elements,
    # one-dimensional gathers (the slots 1.1-1.6x faster, the same result; the grid's work was half
    # of BERT-base training's construction)
    pair_band, pair_top = np.nonzero(valid)
    pair_low = low[pair_band, pair_top]
    pair_rows_under = heights[pair_low]
    pair_count = valid.sum(axis=1)
    live = pair_count > 0
    pair_count = pair_count[live]
    pair_start = np.concatenate([[0], np.cumsum(pair_count)[:-1]]).astype(np.int64)
    # the flows a run may turn downwards, from each kernel: (consumer, cycles over one link)
    near_from: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, cycles in rule.near if rule.links else ():
        near_from[u].append((v, cycles))
    # repeated layers have identical runs: each distinct (kernels' widths and targets, split, flows)
    # once; a kernel's widths and target are one small integer (``sig``), so a run's key is a short
    # tuple (LLaMA-7B: 410,000 lookups a minute of construction, their bytes keys 7.5 s of it)
    kinds: dict[tuple[bytes, int], int] = {}
    sig = [kinds.setdefault((capped[k].tobytes(), int(rule.targets[k])), len(kinds)) for k in range(n)]
    seen: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = {}

    def narrowest(a: int, s: int, i: int, turn: bool) -> tuple[np.ndarray, np.ndarray]:
        """[|H|] narrowest width of the run [a, i) split (or turning) at s per band height, and its
        upper lane's index."""
        back = s + 1 if turn else s  # the lower lane's first kernel
        flows = tuple((u - a, v - a, cycles) for u in range(a, s) for v, cycles in near_from[u] if back <= v < i)
        key = (s - a, turn, *sig[a:i], flows)
        if key not in seen:
            # over the valid (band, upper lane) pairs: the wider lane, the turn beside it
            w = np.maximum((prefix[s] - prefix[a])[pair_top], (prefix[i] - prefix[back])[pair_low])
            if turn:
                w += capped[s][pair_band]
            ok: np.ndarray | None = None
            for u, v, cycles in flows:  # down from the upper lane, in a bundle as wide as the wider end
                wv = capped[a + v][pair_low]
                busy = rule.targets[a + v] - pair_rows_under - wv
                fits = (busy > 0) & (cycles <= busy * np.maximum(capped[a + u][pair_top], wv))
                ok = fits if ok is None else ok & fits
            if ok is not None:
                w = np.where(ok, w, INF)
            width = np.full(nh, INF, dtype=np.int64)
            top = np.zeros(nh, dtype=np.int64)
            if w.size:
                least = np.minimum.reduceat(w, pair_start)
                width[live] = least
                # the first upper lane of least width (np.argmin's tie rule, as the DP's)
                top[live] = np.minimum.reduceat(np.where(w == np.repeat(least, pair_count), pair_top, nh), pair_start)
            seen[key] = (width, top)
        return seen[key]

    g = np.zeros((n + 1, nh), dtype=np.int64)
    choice = np.zeros((n + 1, nh, 4), dtype=np.int64)  # (a, s, t, turn) of the run ending at i, a = i: none
    for i in range(1, n + 1):
        alone = g[i - 1] + capped[i - 1]  # (cols + 1 where a kernel does not fit: as in ``slots``)
        starts = [(a, s, False) for a in range(max(0, i - run), i - 1) for s in range(a + 1, i)]
        if rule.turns:  # (a turn has a kernel in each lane)
            starts += [(a, s, True) for a in range(max(0, i - min(TURN_RUN, run)), i - 2) for s in range(a + 1, i - 1)]
        if not starts:
            g[i] = alone
            choice[i, :, 0] = i
            continue
        # every run ending at i at once; the first run (in the order a, then s, plain runs before
        # turns) of least width wins a tie, and kernel i - 1 alone wins a tie with any run
        each = [narrowest(a, s, i, turn) for a, s, turn in starts]
        widths = np.stack([w for w, _ in each])  # [runs, |H|]
        first = np.array([a for a, _, _ in starts], dtype=np.int64)
        cand = np.where(widths <= cols, g[first] + widths, INF)
        j = np.argmin(cand, axis=0)
        least = cand[j, rows]
        better = least < alone
        g[i] = np.where(better, least, alone)
        tops = np.stack([t for _, t in each])[j, rows]
        split = np.array([s for _, s, _ in starts], dtype=np.int64)
        turns = np.array([turn for _, _, turn in starts], dtype=np.int64)
        chosen_run = np.column_stack([first[j], split[j], tops, turns[j]])
        choice[i] = np.where(better[:, None], chosen_run, np.array([i, 0, 0, 0]))
    width = capped.copy()
    inside = np.zeros((n + 1, nh), dtype=bool)
    runs: list[dict[int, Run]] = []
    chosen = choice.tolist()  # (the walk back below reads one cell per kernel and height: Python lists)
    for h in range(nh):
        found: dict[int, Run] = {}
        i = n
        while i > 0:
            a, s, top, turn = chosen[i][h]
            if a == i:
                i -= 1
                continue
            width[a : i - 1, h] = 0
            inside[a + 1 : i, h] = True
            bottom = int(low[h, top])
            back = s + turn
            lanes = max(int(prefix[s, top] - prefix[a, top]), int(prefix[i, bottom] - prefix[back, bottom]))
            width[i - 1, h] = lanes + (int(capped[s, h]) if turn else 0)
            found[a] = Run(a, s, i, int(heights[top]), bool(turn))
            i = a
        runs.append(found)
    return Slots(width, np.zeros((n, nh), dtype=np.int64), inside, tuple(runs))


def slots(widths: np.ndarray, heights: np.ndarray, cols: int, rule: PairRule | None) -> Slots:
    """Per band height, the partition of the kernel sequence into single and stacked slots of least
    total width (DP over the sequence, all heights at once); pairs only where ``rule`` admits them
    (None: every kernel has a slot of its own)."""
    n, nh = widths.shape
    capped = np.minimum(widths, cols + 1)
    width = capped.copy()
    top = np.zeros((n, nh), dtype=np.int64)
    inside = np.zeros((n + 1, nh), dtype=bool)
    if rule is None or n < 2 or not rule.allowed.any():
        return Slots(width, top, inside)
    if rule.lanes:
        return _lane_slots(capped, heights, cols, rule)
    if rule.depth > 2:
        return _deep_slots(capped, heights, cols, rule.depth)
    # Pairs with identical inputs (repeated layers) have identical slots: compute each distinct one once.
    key = np.ascontiguousarray(
        np.column_stack([capped[:-1], capped[1:], rule.targets[1:], rule.link_cycles, rule.allowed]).astype(np.float64)
    )
    seen: dict[bytes, int] = {}
    again = np.array([seen.setdefault(row.tobytes(), len(seen)) for row in key], dtype=np.int64)
    first = np.unique(again, return_index=True)[1]  # each distinct pair's first occurrence
    pair_u, split_u = _pair_slots(
        capped[first],
        capped[first + 1],
        heights,
        cols,
        rule.targets[first + 1],
        rule.link_cycles[first],
        rule.allowed[first],
        rule.links,
    )
    pair, split = pair_u[again], split_u[again]
    g = np.zeros((n + 1, nh), dtype=np.int64)
    stacked = np.zeros((n + 1, nh), dtype=bool)
    g[1] = capped[0]
    for i in range(2, n + 1):
        alone = g[i - 1] + capped[i - 1]
        both = np.where(pair[i - 2] <= cols, g[i - 2] + pair[i - 2], INF)  # no pair fits: never stack
        stacked[i] = both < alone
        g[i] = np.minimum(alone, both)
    # trace the chosen partition back from the end, every band height at once
    at = np.full(nh, n, dtype=np.int64)  # per height: kernels [0, at) still to trace
    cols_h = np.arange(nh)
    while True:
        live = at > 0
        if not live.any():
            break
        paired = live & stacked[at, cols_h]
        h, k = cols_h[paired], at[paired] - 2
        width[k, h], width[k + 1, h] = 0, pair[k, h]
        top[k, h] = split[k, h]
        inside[k + 1, h] = True
        at = np.where(paired, at - 2, np.where(live, at - 1, at))
    return Slots(width, top, inside)


def band_plan(
    sl: Slots, heights: np.ndarray, region_rows: int, region_cols: int, n_regions: int, min_band: int = 1
) -> list[Band] | None:
    """Least-height partition of the kernel sequence into bands, or None.

    DP over the end of the last band: f(j) = min over heights H of align(f(lo_H(j))) + H, where
    lo_H(j) is the first kernel that fits with kernel j-1 into a band of height H (slot widths summing
    to at most the region width); a band never ends inside a stacked pair. f(lo) at the window's left
    end stands for the window minimum (exact when f is non-decreasing, as without stacking)."""
    n = sl.width.shape[0]
    total = region_rows * n_regions
    prefix = np.vstack([np.zeros((1, heights.size), dtype=np.int64), np.cumsum(sl.width, axis=0)])  # [n+1, H]
    f = np.full(n + 1, INF, dtype=np.int64)
    f[0] = 0
    arg_h = np.zeros(n + 1, dtype=np.int64)
    arg_lo = np.zeros(n + 1, dtype=np.int64)
    # first kernel of a band ending at j, per height: prefix[j] - prefix[lo] <= region width (a pair's
    # first kernel adds no width, so the search never lands inside a pair)
    lows = np.stack([np.searchsorted(prefix[:, h], prefix[:, h] - region_cols, side="left") for h in range(heights.size)], axis=1)
    for j in range(1, n + 1):
        ok = (sl.width[j - 1] <= region_cols) & ~sl.inside[j] & (heights >= min(min_band, region_rows))
        if not ok.any():
            continue  # no band ends here (a kernel too wide, or j splits a pair at every height)
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
        h, lo = int(arg_h[j]), int(arg_lo[j])
        bands.append(_band(sl, heights, h, lo, j))
        j = lo
    return bands[::-1]


def wire_plans(sl: Slots, heights: np.ndarray, region_rows: int, region_cols: int, min_band: int = 1) -> list[list[Band]]:
    """Band plans within ``region_rows`` that may end a band before it is full, one per price of
    ``WIRE_PRICES`` (distinct plans only; none where no price gives a plan that fits).

    ``band_plan`` packs as many kernels into each band as fit, which uses the fewest rows; but where a
    few kernels dwarf the rest (the contest's fully connected chains N and T: 8192 x 8192 and 4096 x
    8192 layers take 98% of the fabric) a full band lays a chain of kernels across the fabric's width,
    and the wires run along it. Each large kernel in a band of its own (a strip as wide as the
    fabric) makes the chain's wires the strips' half heights instead: N's wirelength 1,771 -> 936 at
    the same time (with the sideways alignment, ``align``). Which plan is better depends on the rows
    left over, so this is a Lagrangian DP:
    f(j) = min over heights H and first kernels lo (from the first that fits up to j - 1) of
    f(lo) + (1 + price) H + the band's chain wire, the sum of its slot widths less half its end slots'
    (consecutive kernels side by side, centre to centre); a band row also estimates the wire of the
    chain turning into the next band. A plan that needs more rows than the region has is dropped; the
    layouts are then packed and the score decides (``_construct``)."""
    n = sl.width.shape[0]
    if n == 0:
        return []
    # a height whose slots equal the one below's holds the same bands with more rows: never needed
    heights, sl = distinct_slots(heights, sl, min_band)
    width = sl.width.astype(np.float64)
    prefix = np.vstack([np.zeros((1, heights.size)), np.cumsum(width, axis=0)])  # [n+1, H]
    lows = np.stack([np.searchsorted(prefix[:, h], prefix[:, h] - region_cols, side="left") for h in range(heights.size)], axis=1)
    admitted = heights >= min(min_band, region_rows)
    price = np.array(WIRE_PRICES)[:, None, None]  # every price's DP at once: [P, 1, 1]
    f = np.full((price.shape[0], n + 1), np.inf)
    f[:, 0] = 0.0
    rows = np.zeros_like(f, dtype=np.int64)
    choice = np.zeros((price.shape[0], n + 1, 2), dtype=np.int64)  # (first kernel, height index) of the band ending at j
    every = np.arange(price.shape[0])
    for j in range(1, n + 1):
        ok = admitted & (sl.width[j - 1] <= region_cols) & ~sl.inside[j]
        if not ok.any():
            continue
        hs = np.flatnonzero(ok)
        span = int((j - lows[j, hs]).max())
        lo = np.maximum(j - 1 - np.arange(span)[:, None], 0)  # [span, 1]: the band's first kernel, j - 1 down
        valid = (j - 1 - np.arange(span)[:, None] >= lows[j, hs][None, :]) & ~sl.inside[lo, hs[None, :]]
        ends = (width[lo, hs[None, :]] + width[j - 1, hs][None, :]) / 2
        chain = prefix[j, hs][None, :] - prefix[lo, hs[None, :]] - ends  # [span, |hs|]
        value = f[:, lo] + (1 + price) * heights[hs][None, None, :] + chain[None, :, :]  # [P, span, |hs|]
        value = np.where(valid[None, :, :], value, np.inf).reshape(price.shape[0], -1)
        at = np.argmin(value, axis=1)
        reach = np.isfinite(value[every, at])
        t, i = np.divmod(at, hs.size)
        starts, picked = lo[t, 0], hs[i]
        f[reach, j] = value[every, at][reach]
        choice[reach, j, 0], choice[reach, j, 1] = starts[reach], picked[reach]
        rows[reach, j] = rows[reach, starts[reach]] + heights[picked[reach]]
    out: list[list[Band]] = []
    seen: set[tuple[tuple[int, int, int], ...]] = set()
    for q in every.tolist():
        if not np.isfinite(f[q, n]) or rows[q, n] > region_rows:
            continue
        bands, j = [], n
        while j > 0:
            first, h = (int(v) for v in choice[q, j])
            bands.append(_band(sl, heights, h, first, j))
            j = first
        key = tuple((b.first, b.end, b.height) for b in bands)
        if key not in seen:
            seen.add(key)
            out.append(bands[::-1])
    return out


def _band(sl: Slots, heights: np.ndarray, h: int, lo: int, j: int) -> Band:
    """The band of height index h holding kernels [lo, j): its stacked groups and runs from ``sl``."""
    groups: list[tuple[int, tuple[int, ...]]] = []
    k = lo
    while k < j:
        if sl.top[k, h] > 0:
            first, rows = k, []
            while sl.top[k, h] > 0:
                rows.append(int(sl.top[k, h]))
                k += 1
            groups.append((first, tuple(rows)))
        k += 1
    runs = sorted(run for a, run in sl.runs[h].items() if lo <= a < j) if sl.runs else []
    return Band(lo, j, int(heights[h]), tuple(groups), tuple(runs))


def _next_fit(prefix: list[int], done: int, runs: Sequence[tuple[int, int]]) -> int:
    """How far the kernel sequence from ``done`` reaches, next-fit into ``runs`` (in fill order) by
    the slot widths' prefix sums (a list: one bisect per run, far cheaper than numpy's on a scalar)."""
    pos = done
    for a, b in runs:
        pos = bisect_right(prefix, prefix[pos] + (b - a)) - 1
    return pos


@dataclass(frozen=True)
class PinShapes:
    """A pinned kernel's rectangles at its fixed corner meeting its target, by rows (ascending): the
    band that holds its corner decides how many rows it may take (``band_plan_around``)."""

    row: int
    col: int
    rows: np.ndarray  # [m] ascending
    cols: np.ndarray  # [m]
    latency: np.ndarray  # [m]
    code: np.ndarray  # [m] op-model (dataflow) codes
    fewest: np.ndarray  # [m]: index of the fewest-core rectangle among the first i + 1

    def within(self, cap: int) -> int | None:
        """The fewest-core rectangle of at most ``cap`` rows (an index), None if none."""
        i = int(np.searchsorted(self.rows, cap, side="right")) - 1
        return int(self.fewest[i]) if i >= 0 else None

    def shape(self, cap: int) -> int:
        """The fewest-core rectangle of at most ``cap`` rows, else the fewest-core of all (it then
        reaches below the band holding its corner)."""
        i = self.within(cap)
        return int(self.fewest[-1]) if i is None else i


def _pin_shapes(problem: PlacementProblem, k: int, target: int, taken: np.ndarray) -> PinShapes | None:
    """Kernel k's ``PinShapes`` at its corner on the cores free in ``taken``; None if it has none."""
    y, x = problem.pins[k]  # type: ignore[misc]
    shape = problem.shape(k)
    found: dict[int, tuple[int, int, int]] = {}  # rows -> (cols, latency, code), the fewest columns
    for h, r, c in _corner_rects(problem, k, target, taken):
        if r not in found or c < found[r][0]:
            found[r] = (c, int(shape.best[h, c]), int(shape.best_df[h, c]))
    if not found:
        return None
    order = sorted(found)
    r_arr = np.array(order, dtype=np.int64)
    c_arr = np.array([found[r][0] for r in order], dtype=np.int64)
    cores = r_arr * c_arr
    fewest = np.zeros(len(order), dtype=np.int64)
    for i in range(1, len(order)):
        fewest[i] = i if cores[i] < cores[fewest[i - 1]] else fewest[i - 1]
    lat = np.array([found[r][1] for r in order], dtype=np.int64)
    code = np.array([found[r][2] for r in order], dtype=np.int64)
    return PinShapes(y, x, r_arr, c_arr, lat, code, fewest)


Hanging = tuple[tuple[int, int, int], ...]  # pinned rectangles reaching below their band: (col, end col, end row)


@dataclass(frozen=True)
class _PinTable:
    """``PinShapes`` of the pinned kernels of a region, sorted by their corners' rows, with each one's
    choice at every cap on its rows looked up once (``PinShapes.shape``): the band DP asks for it at
    every state and height, for every pin in the band (LLaMA-7B with 442 corners from an old plan:
    100 s of one-by-one lookups before)."""

    row: np.ndarray  # [m] corner rows, region coordinates, ascending
    col: np.ndarray  # [m] corner cols, region coordinates
    rows_at: np.ndarray  # [m, region rows + 1]: rows of the rectangle a pin takes within that many rows
    cols_at: np.ndarray  # [m, region rows + 1]: its cols

    @classmethod
    def of(cls, pins: tuple[PinShapes, ...], reg: Region) -> _PinTable:
        ordered = sorted(pins, key=lambda p: p.row)
        caps = np.arange(reg.rows + 1)
        rows_at = np.zeros((len(ordered), caps.size), dtype=np.int64)
        cols_at = np.zeros_like(rows_at)
        for i, p in enumerate(ordered):
            j = np.searchsorted(p.rows, caps, side="right") - 1
            pick = np.where(j >= 0, p.fewest[np.maximum(j, 0)], p.fewest[-1])
            rows_at[i], cols_at[i] = p.rows[pick], p.cols[pick]
        row = np.array([p.row - reg.row for p in ordered], dtype=np.int64)
        col = np.array([p.col - reg.col for p in ordered], dtype=np.int64)
        return cls(row, col, rows_at, cols_at)


def _pin_cover(pins: _PinTable, after: int, y: int, height: int, hanging: Hanging) -> tuple[list[tuple[int, int]], Hanging]:
    """Columns (start, end; region coordinates) the pinned kernels take in a band of ``height`` rows
    from row y of the region, the band before it ending at row ``after``; and the pinned rectangles
    that reach below this band. A kernel with its corner in the band takes its fewest-core rectangle
    within the band's rows, one with its corner in the rows skipped above the band its fewest-core
    rectangle within them (as ``pin_choices``), each else its fewest-core rectangle of all, which
    then hangs into the bands below (``hanging``: those of the bands before)."""
    end = y + height
    cover = [(a, b) for a, b, bottom in hanging if bottom > y]
    still = [(a, b, bottom) for a, b, bottom in hanging if bottom > end]
    lo, hi = int(np.searchsorted(pins.row, after)), int(np.searchsorted(pins.row, end))
    if hi > lo:
        row = pins.row[lo:hi]
        cap = np.where(row < y, y - row, end - row)
        sel = np.arange(lo, hi)
        bottom = row + pins.rows_at[sel, cap]
        a = pins.col[lo:hi]
        b = a + pins.cols_at[sel, cap]
        cover += list(zip(a[bottom > y].tolist(), b[bottom > y].tolist(), strict=True))
        down = bottom > end
        still += list(zip(a[down].tolist(), b[down].tolist(), bottom[down].tolist(), strict=True))
    return cover, tuple(still)


def _band_masks(
    next_blocked: np.ndarray, y: int, tall: np.ndarray, pins: _PinTable | None, after: int, hanging: Hanging, cols: int
) -> np.ndarray:
    """[heights, cols] bool: per band height in ``tall`` (a band from row y, the band before it
    ending at row ``after``), the columns free over all the band's rows (``next_blocked``: per
    column the first blocked row at or below y) and not taken by a pinned rectangle (``_pin_cover``
    for every height at once: the band DP asks it for every state and height, 94,000 times in a
    few constructions of BERT-base under the constraints benchmark's five corners, 40% of them)."""
    free = next_blocked[None, :] >= (y + tall)[:, None]
    if pins is None:
        return free
    ends = y + tall
    lo, hi = int(np.searchsorted(pins.row, after)), int(np.searchsorted(pins.row, int(ends.max())))
    over = [(a, b) for a, b, bottom in hanging if bottom > y]
    if not over and hi <= lo:
        return free
    edges = np.zeros((tall.size, cols + 1), dtype=np.int32)
    for a, b in over:  # (the bands before it: the same for every height; columns clipped to the region)
        edges[:, max(0, min(a, cols))] += 1
        edges[:, max(0, min(b, cols))] -= 1
    if hi > lo:  # every pin in reach of some height against every height at once
        row = pins.row[lo:hi, None]
        inside = ends[None, :] > row  # [pins, heights]: the band reaches the pin's corner row
        cap = np.where(row < y, y - row, np.maximum(ends[None, :] - row, 0))
        pick = np.arange(lo, hi)[:, None]
        down = inside & (row + pins.rows_at[pick, cap] > y)
        p_at, h_at = np.nonzero(down)
        right = np.clip(pins.col[lo + p_at] + pins.cols_at[lo + p_at, cap[p_at, h_at]], 0, cols)
        np.add.at(edges, (h_at, np.clip(pins.col[lo + p_at], 0, cols)), 1)
        np.subtract.at(edges, (h_at, right), 1)
    return free & (np.cumsum(edges, axis=1)[:, :cols] == 0)


def _masks_runs(free: np.ndarray) -> list[tuple[tuple[int, int], ...]]:
    """Per row of ``free`` (bool [rows, cols]) its runs of true columns (start, end), left to right."""
    rows, cols = free.shape
    if free.all():
        return [((0, cols),)] * rows
    padded = np.zeros((rows, cols + 2), dtype=bool)
    padded[:, 1:-1] = free
    at = np.flatnonzero(padded[:, 1:] != padded[:, :-1])  # row-major: per row, a run's start then its end
    at_row, at_col = np.divmod(at, cols + 1)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(at_row, minlength=rows))]).tolist()
    edges = at_col.tolist()
    out = []
    for i in range(rows):
        e = edges[bounds[i] : bounds[i + 1]]
        out.append(tuple(zip(e[0::2], e[1::2], strict=True)))
    return out


def pin_choices(plan: list[Band], pins: tuple[PinShapes, ...], reg: Region) -> list[int]:
    """The rectangle (an index into its ``PinShapes``) each pinned kernel takes under a band plan: the
    fewest-core one within the band holding its corner (or within the rows down to the next band,
    where its corner lies between bands), else its fewest-core one of all."""
    tops, y = [], 0
    for band in plan:
        y += band.skip
        tops.append((y, y + band.height))
        y += band.height
    out = []
    for p in pins:
        row = p.row - reg.row
        end = next((e for t, e in tops if t <= row < e), None)
        if end is None:
            end = next((t for t, _ in tops if t > row), reg.rows)
        out.append(p.shape(end - row))
    return out


def band_plan_around(
    sl: Slots,
    heights: np.ndarray,
    reg: Region,
    blocked: np.ndarray,
    min_band: int = 1,
    pins: tuple[PinShapes, ...] = (),
    snake: bool = False,
    deadline: Deadline | None = None,
) -> list[Band] | None:
    """``band_plan`` for a region holding obstacles (the user's fixed corners and keep-outs, kernels
    placed before): each band fills the runs of columns free over all its rows, next-fit in its snake
    direction, and may start below the band before it (``Band.skip``) where an obstacle ends; None if
    the kernels do not fit.

    ``band_plan`` assumes every band has the region's full width; with obstacles in the middle of the
    wafer its bands overflow when packed (the packer slides past the obstacles and opens a fresh band),
    so the layout packed only at targets far above the bound (the constraints benchmark: GPT-2 with
    five fixed corners at +41%, its kernels on 11 x 576 slivers of the first-fit fallback).

    A DP over the rows: a state is (top row y, snake parity, kernels placed); from it each admitted
    height H ends a band at y + H holding the kernels next-fit reaches in the band's free runs. Of the
    states at one row and parity only the one with most kernels placed matters (next-fit of a suffix
    of the sequence reaches at least as far), and a state is carried down past empty rows only to
    the rows where the obstacles change (below them, a band's free columns only shrink), so at most
    2 n + 2 (obstacle edges) states are expanded, each with one next-fit per height.

    ``pins``: kernels at fixed corners whose rectangles the bands choose (``_pin_cover``): one with its
    corner in a band takes its fewest-core rectangle within the band's rows, so a tall fewest-core
    rectangle does not cut the bands below it (the constraints benchmark's GPT-2: a 237 x 55 matmul
    at row 504 across the 192-row band its LM head needs packed at 54,012 cycles; a 96-row one fits
    above that band). A band may start at their corners' rows and under each rectangle they may take.

    Each band fills in the snake's direction (opposite to the band before) or, where that holds fewer
    kernels, the other (``Band.reverse``): the state then needs no direction, and of the states at one
    row the one with most kernels placed dominates. Against the snake, the flow into the band's first
    kernel crosses the wafer; ``snake`` keeps the snake wherever it holds a kernel at all, and the
    construction packs both plans and keeps the better layout (the constraints benchmark's ViT-B/16:
    a flow of 1,146 cycles into a band turned the other way).

    ``deadline``: None too once it passes (checked at every row expanded): with an old plan's 442
    corners on LLaMA-7B one plan takes 0.5-1.5 s, and a construction begun just before the time limit
    ran that far past it."""
    n = sl.width.shape[0]
    rows, cols = reg.rows, reg.cols
    if rows <= 0 or cols <= 0:
        return None if n else []
    table = _PinTable.of(pins, reg)
    blk = blocked[reg.row : reg.row + rows, reg.col : reg.col + cols]
    prefix = np.vstack([np.zeros((1, heights.size), dtype=np.int64), np.cumsum(sl.width, axis=0)])  # [n+1, H]
    columns = prefix.T.tolist()  # per height, the prefix as a list (``_next_fit``)
    admitted = np.flatnonzero((heights >= min(min_band, rows)) & (heights <= rows))
    change = {0} | {int(y) for y in np.flatnonzero((blk[1:] != blk[:-1]).any(axis=1)) + 1}
    # a band may start at a pinned kernel's corner row, or under any rectangle it may take
    # (and the row under it: a band starting there leaves the kernel the rows above it)
    for p in pins:
        # (the rectangles it may take: the fewest-core ones within some number of rows)
        bottoms = (p.row - reg.row + p.rows[np.unique(p.fewest)]).tolist()
        change |= {y for y in [p.row - reg.row, p.row - reg.row + 1, *bottoms] if 0 <= y < rows}
    # next_blocked[y, c]: the first blocked row >= y of column c (rows: none), so column c is free
    # over a band [y, y + H) iff next_blocked[y, c] >= y + H
    row_of = np.where(blk, np.arange(rows)[:, None], rows)
    next_blocked = np.minimum.accumulate(row_of[::-1], axis=0)[::-1]
    # nodes: (row after the band, kernels placed, parent node, band top, height index, the band
    # filled right to left, pinned rectangles reaching below it)
    # nodes: (row after the band, kernels placed, parent node, band top, height index, the band filled
    # right to left); the pinned rectangles reaching below a node's band (``Hanging``) are found when
    # the node is expanded (``hangs``): most nodes never are
    nodes: list[tuple[int, int, int, int, int, bool]] = [(0, 0, -1, 0, -1, True)]
    hangs: dict[int, Hanging] = {0: ()}
    reached: dict[int, list[int]] = {0: [0]}  # row -> nodes ending there
    best = -1  # the node with most kernels placed so far (carried down past empty rows)
    heap = sorted(change | {0})
    seen_rows: set[int] = set()
    tall_all = heights[admitted]
    while heap:
        y = heapq.heappop(heap)
        if y in seen_rows:
            continue
        seen_rows.add(y)
        if deadline is not None and deadline.expired():
            return None
        top = max(reached.get(y, []), key=lambda v: nodes[v][1], default=-1)
        if top >= 0 and (best < 0 or nodes[top][1] > nodes[best][1]):
            start = best = top
        elif best >= 0 and y in change:
            start = best
        else:
            continue
        after, done, parent, band_top, band_h, reverse = nodes[start]
        if done == n:
            continue
        if pins and start not in hangs:
            hangs[start] = _pin_cover(table, nodes[parent][0], band_top, int(heights[band_h]), hangs[parent])[1]
        fits = y + tall_all <= rows
        hs, tall = admitted[fits], tall_all[fits]
        if hs.size == 0:
            continue
        free = _band_masks(next_blocked[y], y, tall, table if pins else None, after, hangs.get(start, ()), cols)
        for h, runs in zip(hs.tolist(), _masks_runs(free), strict=True):
            # the snake's direction (opposite to the band before), or the other where more kernels fit
            # (one run of free columns: both directions reach as far, and the snake wins the tie)
            reach = []
            for backwards in (not reverse, reverse)[: 1 if len(runs) <= 1 else 2]:
                pos = _next_fit(columns[h], done, runs[::-1] if backwards else runs)
                while pos > done and sl.inside[pos, h]:
                    pos -= 1  # a band never ends inside a stacked pair or a run
                reach.append((pos, backwards))
            # the snake unless it holds nothing (``snake``), else the direction holding more (the snake on a tie)
            pos, backwards = reach[0] if snake and reach[0][0] > done else max(reach, key=lambda t: t[0])
            if pos <= done:
                continue
            end_row = y + int(heights[h])
            nodes.append((end_row, pos, start, y, h, backwards))
            reached.setdefault(end_row, []).append(len(nodes) - 1)
            heapq.heappush(heap, end_row)
    finished = [v for v in range(len(nodes)) if nodes[v][1] == n]
    if not finished:
        return None
    v = min(finished, key=lambda u: nodes[u][0])
    bands: list[Band] = []
    while nodes[v][2] >= 0:
        _, j, parent, top_row, h, backwards = nodes[v]
        lo = nodes[parent][1]
        bands.append(replace(_band(sl, heights, h, lo, j), skip=top_row - nodes[parent][0], reverse=backwards))
        v = parent
    return bands[::-1]


def lanes(band: Band) -> dict[int, tuple[int, int]]:
    """Rows available to each kernel of a band: (offset below the band top, rows). The bottom kernel
    of a pair starts under its top lane."""
    out = {k: (0, band.height) for k in range(band.first, band.end)}
    for k, rows in band.stacked:
        offset = 0
        for i, r in enumerate(rows):
            out[k + i] = (offset, r)
            offset += r
        out[k + len(rows)] = (offset, band.height - offset)
    for run in band.runs:  # (a turn keeps the band's full height)
        out.update({k: (0, run.top) for k in run.upper()})
        out.update({k: (run.top, band.height - run.top) for k in run.lower()})
    return out


def band_widths(problem: PlacementProblem, bands: list[Band], targets: np.ndarray) -> np.ndarray:
    """Each kernel's narrowest width in its lane meeting its target (0 when none)."""
    widths = np.zeros(problem.n_kernels, dtype=np.int64)
    for band in bands:
        for k, (_, rows) in lanes(band).items():
            shape = problem.shape(k)
            widths[k] = shape.width_for(shape.height_index(rows), int(targets[k]))
    return widths


def stretch(problem: PlacementProblem, bands: list[Band], widths: np.ndarray, region_cols: int | list[int]) -> np.ndarray:
    """Hand each band's unused columns, one at a time, to its slowest single kernel (where a wider
    rectangle is faster): the band's end would otherwise idle. The narrower kernel of a stacked pair
    widens to the pair's width for free.

    A kernel takes all the columns it is given (ONNX: a wider rectangle also carries its flows in a
    wider bundle, which the communication model rewards even where the exact width's op model is a
    little slower), or, for the contest (no link model), the width within them that holds the best
    time (``ShapeTable.prefix_width``: exact widths can be much slower than narrower ones there)."""
    out = widths.copy()
    exact = problem.objective.charges_communication

    def width_at(shape: ShapeTable, h: int, c: int) -> int:
        return c if exact else int(shape.prefix_width[h, c])

    for b, band in enumerate(bands):
        rows = lanes(band)
        paired: set[int] = set()
        groups = band.groups()
        for members in groups.values():
            paired.update(members)
            slot = int(max(out[m] for m in members))
            for m in members:
                shape = problem.shape(m)
                h = shape.height_index(rows[m][1])
                if h >= 0 and slot < shape.prefix.shape[1] and shape.prefix[h, slot] < shape.prefix[h, out[m]]:
                    out[m] = width_at(shape, h, slot)
        used = sum(int(max(out[m] for m in members)) for members in groups.values())
        for run in band.runs:  # a run keeps its kernels' widths: its wider lane sets its columns
            paired.update(range(run.first, run.end))
            used += run.width(out)
        used += sum(int(out[k]) for k in range(band.first, band.end) if k not in paired)
        spare = (region_cols if isinstance(region_cols, int) else region_cols[b]) - used
        if spare <= 0:
            continue
        heap: list[tuple[int, int]] = []
        for k in range(band.first, band.end):
            if k not in paired and problem.shape(k).height_index(band.height) >= 0:  # (a placed kernel's always is)
                shape = problem.shape(k)
                heapq.heappush(heap, (-int(shape.prefix[shape.height_index(band.height), out[k]]), k))
        while spare > 0 and heap:
            neg, k = heapq.heappop(heap)
            shape = problem.shape(k)
            h = shape.height_index(band.height)
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
            # the widest columns this kernel may take now; it uses the width holding their best latency
            reach = out[k] + step
            used_now = width_at(shape, h, reach)
            spare -= used_now - int(out[k])
            out[k] = used_now
            heapq.heappush(heap, (-int(shape.prefix[h, out[k]]), k))
    return out


def pack(
    problem: PlacementProblem, bands: list[Band], widths: np.ndarray, regs: list[Region], mirror: bool = False
) -> Placed | None:
    """Place the bands' rectangles on the real wafer (defects, regions); None if they do not fit.

    Kernel k takes the best rectangle with exactly ``widths[k]`` columns and at most its lane's rows;
    a stacked pair shares one column slot (the bottom kernel right under the top one).

    ``mirror``: a run of lanes, or a kernel alone, whose producer (the kernel before it) ends in the
    lower half of the band is laid upside down (its upper lane at the band's bottom, a kernel alone
    at its lowest free rows), so the flow into it enters near the rows it leaves. Laid from the top,
    a run's lower lane hands on to a kernel in rows it does not overlap, through a bundle as narrow
    as the narrower end: the 8B decode's 1x1 norms after a run took 2,048 cycles of congestion each
    (its runs of lanes at the quarter floor 760,763 -> 626,109 cycles mirrored, the plain bands
    634,424). The widths are the same either way (and the columns, unless defects push a piece on)."""
    n = problem.n_kernels
    integral = problem.blocked_prefix
    rects = np.zeros((n, 4), dtype=np.int64)
    dfs = np.zeros(n, dtype=np.int32)
    lat = np.zeros(n, dtype=np.int64)
    reg_i, y, band_no = 0, 0, 0

    def free(row: int, col: int, r: int, c: int) -> bool:
        return int(integral[row + r, col + c] - integral[row, col + c] - integral[row + r, col] + integral[row, col]) == 0

    def shape_of(k: int, rows: int) -> tuple[int, int, int] | None:
        """(hidx, r, c) of kernel k's rectangle within ``rows``, None if it has none."""
        shape = problem.shape(k)
        hidx, c = shape.height_index(rows), int(widths[k])
        if c <= 0 or hidx < 0 or shape.best[hidx, c] >= INF:
            return None
        return hidx, int(shape.best_r[hidx, c]), c

    band = bands[0] if bands else None

    def backwards() -> bool:
        """Whether the band being packed fills right to left (its own direction, else the snake's)."""
        return bool(band_no % 2) if band is None or band.reverse is None else band.reverse

    def open_band(height: int) -> bool:
        nonlocal reg_i, y
        while reg_i < len(regs) and y + height > regs[reg_i].rows:
            reg_i, y = reg_i + 1, 0
        return reg_i < len(regs)

    def low(k: int, height: int) -> bool:
        """Whether kernel k's producer k - 1 sits in the lower half of the band being packed (with
        ``mirror``): the piece k starts is then laid upside down."""
        if not mirror or k == 0 or k - 1 < band_start:
            return False
        top = regs[reg_i].row + y
        row, r = int(rects[k - 1, 0]), int(rects[k - 1, 2])
        return top <= row and 2 * (row - top) + r > height

    def run_spots(run: Run, x: int, reg: Region, height: int, flip: bool = False) -> list[tuple[int, int]] | None:
        """Corners of a run's kernels (in sequence order) from column ``x`` of the band, or None: the
        upper lane, then the lower one, each in the band's direction; for a turn the lower lane back
        from the turn, which stands after the wider lane."""
        spots: dict[int, tuple[int, int]] = {}

        def put(m: int, offset: int, y0: int, rows: int) -> bool:
            """Kernel m at ``offset`` columns into the run, within rows [y0, y0 + rows) (mirrored
            with ``flip``): whether it fits."""
            d = shape_of(m, rows)
            if d is None:
                return False
            _, r, c = d
            if x + offset + c > reg.cols:
                return False
            col = reg.col + (reg.cols - x - offset - c if backwards() else x + offset)
            span = range(y0, y0 + rows - r + 1)
            if flip:  # the mirror image: rows counted from the band's bottom
                span = range(height - y0 - r, height - y0 - rows - 1, -1)
            dy = next((dy for dy in span if free(reg.row + y + dy, col, r, c)), None)
            if dy is None:
                return False
            spots[m] = (reg.row + y + dy, col)
            return True

        lane = run.width(widths) - (int(widths[run.split]) if run.turn else 0)
        offset = 0
        for m in run.upper():
            if not put(m, offset, 0, run.top):
                return None
            offset += int(widths[m])
        offset = 0
        for m in run.lower():
            offset += int(widths[m])
            # back from the turn (kernel m ends where the one before it starts), else onwards
            if not put(m, lane - offset if run.turn else offset - int(widths[m]), run.top, height - run.top):
                return None
        if run.turn and not put(run.split, lane, 0, height):
            return None
        return [spots[m] for m in range(run.first, run.end)]

    band_start = 0
    for band in bands:
        y += band.skip
        if not open_band(band.height):
            return None
        band_start = band.first
        groups = band.groups()
        runs = {run.first: run for run in band.runs}
        lane = lanes(band)
        cursor = 0
        k = band.first
        while k < band.end:
            reg = regs[reg_i]
            if k in runs:  # a run of two sub-lanes: its first free columns, else a fresh band
                run = runs[k]
                members = list(range(run.first, run.end))
                dims = [shape_of(m, lane[m][1]) for m in members]
                if any(d is None for d in dims):
                    return None
                got = [d for d in dims if d is not None]
                slot = run.width(widths)
                x = cursor
                corners = None
                flip = low(k, band.height)
                while corners is None and x + slot <= reg.cols:
                    corners = run_spots(run, x, reg, band.height, flip)
                    if corners is None:
                        x += 1
                if corners is not None:
                    for m, (hidx, r, c), (row, col) in zip(members, got, corners, strict=True):
                        rects[m] = (row, col, r, c)
                        dfs[m] = problem.shape(m).best_df[hidx, c]
                        lat[m] = problem.shape(m).best[hidx, c]
                    cursor = x + slot
                    k = run.end
                    continue
                y += band.height  # band overflow (defects): continue in a fresh band of the same height
                band_no += 1
                cursor = 0
                if not open_band(band.height):
                    return None
                continue
            members = groups.get(k, [k])
            lane_rows = [lane[m][1] for m in members]
            dims = [shape_of(m, rows) for m, rows in zip(members, lane_rows, strict=True)]
            if any(d is None for d in dims):
                return None
            got = [d for d in dims if d is not None]
            slot = max(d[2] for d in got)
            flip = len(got) == 1 and low(k, band.height)
            found: list[tuple[int, int]] | None = None
            x = cursor
            while found is None and x + slot <= reg.cols:
                spots: list[tuple[int, int]] = []
                dy0 = 0
                for (_, r, c), rows in zip(got, lane_rows, strict=True):
                    col = reg.col + (reg.cols - x - c if backwards() else x)
                    room = band.height - dy0 if len(got) > 1 and spots else rows
                    offsets = [dy for dy in range(dy0, dy0 + room - r + 1) if free(reg.row + y + dy, col, r, c)]
                    if not offsets:
                        break
                    spots.append((reg.row + y + offsets[-1 if flip and len(got) == 1 else 0], col))
                    dy0 = offsets[0] + r
                if len(spots) == len(got):
                    found = spots
                else:
                    x += 1
            if found is not None:
                for m, (hidx, r, c), (row, col) in zip(members, got, found, strict=True):
                    shape = problem.shape(m)
                    rects[m] = (row, col, r, c)
                    dfs[m] = shape.best_df[hidx, c]
                    lat[m] = shape.best[hidx, c]
                cursor = x + slot
                k += len(members)
                continue
            # band overflow (defects): continue in a fresh band of the same height
            y += band.height
            band_no += 1
            cursor = 0
            if not open_band(band.height):
                return None
        y += band.height
        band_no += 1
    return Placed(rects, dfs, lat)


def construct(
    problem: PlacementProblem,
    targets: np.ndarray,
    style: Style = Style(),
    deadline: Deadline | None = None,
    refine: Deadline | None = None,
) -> Placed | None:
    """Band plan + packing for per-kernel latency targets; None when they cannot be met on the wafer.

    With the user's fixed corners, areas and groups (``problem.constrained``) the layout is built in
    parts: pinned kernels first, then each group side by side (``_touch_group``), then the kernels of
    each area inside it (smallest area first), then the rest on what is left of the wafer; each part
    is a strip construction of its own.

    ``deadline`` (None: none): None too once it passes, so a caller that keeps the clock is not held
    past it by one construction (the band plans around hundreds of fixed corners take seconds); a
    caller that must have a layout passes none (``smallest_target(first_free=True)``).

    ``refine``: the band plan is refined for the objective's rank until then (``refine_plan``: its
    bands' boundaries moved, the rows it leaves handed out; the wafer's own bands only, not the parts
    around the user's rules)."""
    if style.edge:
        pins = edge_pins(problem, targets)
        if pins is None:
            return None
        problem = replace(problem, pins=pins)
    if problem.ruled:
        return _construct_parts(problem, targets, style, deadline)
    return _construct(problem, targets, style, refine=refine)


def tall_kernels(problem: PlacementProblem) -> list[int]:
    """Free kernels (no corner, area or group of the user's) whose every legal rectangle is taller than
    half the wafer: a grid rule's shape, typically, taken from an allocation that ignores placement
    (the constraints benchmark's ResNet-50: stage-1 convolutions on 628 x 29 and 628 x 64).

    In a band such a kernel makes the band that tall, and the kernels beside it share its rows: the
    bands below get what is left (ResNet-50's stage 3 and 4 in 144 rows, 35% over its bound under the
    grids and keep-outs alone). ``Style.edge`` lays them at the wafer's edge first (``edge_pins``) and
    the bands around them at the heights the other kernels want."""
    half = problem.mesh.rows / 2
    grouped = {k for group in problem.touch for k in group}
    least: dict[int, int] = {}  # per kernel class: its shortest legal rectangle's rows
    out = []
    for k in range(problem.n_kernels):
        if (problem.pins and problem.pins[k] is not None) or (problem.fences and problem.fences[k] is not None) or k in grouped:
            continue
        cls = problem.kernel_class[k]
        if cls not in least:
            shape = problem.shapes[cls]
            legal = (shape.best < INF).any(axis=1)
            least[cls] = int(shape.best_r[legal][(shape.best[legal] < INF)].min()) if legal.any() else 0
        if least[cls] > half:
            out.append(k)
    return out


def edge_pins(problem: PlacementProblem, targets: np.ndarray) -> tuple[tuple[int, int] | None, ...] | None:
    """The problem's corners with every ``tall_kernels`` kernel given one at the wafer's left edge, in
    kernel order side by side: each at the first column, then the first row, where a rectangle of it
    meeting its target is free of blocked cores and of the user's corners with their fewest-core
    rectangles (and, where the wafer forbids crossing dies, inside one die), its fewest-core such
    rectangle first; None where one has none. The bands are then planned around them as around the
    user's corners (``band_plan_around``): the first band starts beside them rather than under a
    band as tall as they are."""
    tall = tall_kernels(problem)
    if not tall:
        return None
    m = problem.mesh
    rows, cols = m.rows, m.cols
    pins: list[tuple[int, int] | None] = list(problem.pins) if problem.pins else [None] * problem.n_kernels
    taken = problem.blocked.copy()
    for k, pin in enumerate(pins):
        if pin is not None:
            found = _pinned_rect(problem, k, int(targets[k]), taken)
            r, c = (found[0], found[1]) if found is not None else (1, 1)
            taken[pin[0] : pin[0] + r, pin[1] : pin[1] + c] = True
    apart = problem.die_rule is DieBoundary.FORBID
    for k in tall:
        summed = np.zeros((rows + 1, cols + 1), dtype=np.int32)
        summed[1:, 1:] = taken.cumsum(0, dtype=np.int32).cumsum(1, dtype=np.int32)
        spot: tuple[int, int, int, int] | None = None
        for r, c in sorted(_options(problem, k, int(targets[k]), rows, cols), key=lambda rc: (rc[0] * rc[1], rc)):
            # free[y, x]: the r x c rectangle at corner (y, x) holds no taken core
            free = (summed[r:, c:] - summed[:-r, c:] - summed[r:, :-c] + summed[:-r, :-c]) == 0
            if apart:  # (the rectangle inside one die)
                ys, xs = np.arange(rows - r + 1), np.arange(cols - c + 1)
                free &= ((ys + r - 1) // m.die_rows == ys // m.die_rows)[:, None]
                free &= ((xs + c - 1) // m.die_cols == xs // m.die_cols)[None, :]
            spots = np.argwhere(free.T)  # (x, y): leftmost column first, then topmost row
            if spots.size:
                spot = (int(spots[0][1]), int(spots[0][0]), r, c)
                break
        if spot is None:
            return None
        y, x, r, c = spot
        pins[k] = (y, x)
        taken[y : y + r, x : x + c] = True
    return tuple(pins)


def _pinned_rect(problem: PlacementProblem, k: int, target: int, taken: np.ndarray) -> tuple[int, int, int, int, int] | None:
    """(rows, cols, latency, code, height index) of the fewest-core rectangle of kernel k at its fixed
    corner meeting ``target`` on free cores (inside its area, if it has one); None if none does."""
    shape = problem.shape(k)
    best: tuple[int, int, int, int, int] | None = None
    for h, r, c in _corner_rects(problem, k, target, taken):
        if best is None or r * c < best[0] * best[1]:
            best = (r, c, int(shape.best[h, c]), int(shape.best_df[h, c]), h)
    return best


def _corner_rects(problem: PlacementProblem, k: int, target: int, taken: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(height index, rows, cols) of kernel k's narrowest rectangle meeting ``target`` per band height,
    at its fixed corner, on the wafer (inside its area, if it has one), on cores free in ``taken`` and
    inside one die where the wafer forbids crossing."""
    y, x = problem.pins[k]  # type: ignore[misc]
    rows, cols = problem.mesh.rows - y, problem.mesh.cols - x
    fence = problem.fences[k] if problem.fences else None
    if fence is not None:
        rows, cols = min(rows, fence[0] + fence[2] - y), min(cols, fence[1] + fence[3] - x)
    shape = problem.shape(k)
    apart = problem.die_rule is DieBoundary.FORBID
    for h in range(shape.height_index(rows) + 1):
        c = shape.width_for(h, target)
        if c <= 0 or c > cols:
            continue
        c = int(shape.prefix_width[h, c])
        r = int(shape.best_r[h, c])
        if r <= rows and not taken[y : y + r, x : x + c].any() and not (apart and problem.crosses_dies(np.array([[y, x, r, c]]))):
            yield h, r, c


def _construct_parts(problem: PlacementProblem, targets: np.ndarray, style: Style, deadline: Deadline | None) -> Placed | None:
    """``construct`` for a problem with fixed corners, areas or groups side by side (see there):
    corners alone (no areas, no groups) first in the bands (``_construct_pins_in_bands``), else in
    parts, each pinned kernel on its fewest-core rectangle first."""
    if any(pin is not None for pin in problem.pins) and not problem.touch and not any(f is not None for f in problem.fences):
        placed = _construct_pins_in_bands(problem, targets, style, deadline)
        if placed is not None or (deadline is not None and deadline.expired()):
            return placed
    return _construct_in_parts(problem, targets, style, deadline)


def _construct_pins_in_bands(
    problem: PlacementProblem, targets: np.ndarray, style: Style, deadline: Deadline | None
) -> Placed | None:
    """The kernels at fixed corners laid with the bands around them: ``band_plan_around`` chooses each
    one's rectangle within the band that holds its corner (``PinShapes``), the other kernels fill the
    runs of columns they leave; None where that does not pack (the caller then builds in parts).

    Placed first on their fewest-core rectangles, pinned kernels cut the bands below them: the
    constraints benchmark's GPT-2 packed at 54,012 cycles that way (bound 43,402)."""
    n = problem.n_kernels
    pinned = [k for k in range(n) if problem.pins[k] is not None]
    taken = problem.blocked.copy()
    corners = np.zeros_like(taken)  # each pin's rectangles keep the other pins' corners free
    for k in pinned:
        corners[problem.pins[k]] = True
    shapes = []
    for k in pinned:
        y, x = problem.pins[k]  # type: ignore[misc]
        corners[y, x] = False
        found = _pin_shapes(problem, k, int(targets[k]), taken | corners)
        corners[y, x] = True
        if found is None:
            return None
        shapes.append(found)
    rest = np.array([k for k in range(n) if problem.pins[k] is None], dtype=np.int64)
    wafer = (0, 0, problem.mesh.rows, problem.mesh.cols)
    part = problem.restrict(rest, taken, wafer)
    regs = regions(part)
    if len(regs) != 1:  # (dies kept apart: the bands of each die are the usual construction's)
        return None
    heights, sl, _, _, _ = _band_slots(part, targets[rest], style, regs)
    layouts = []
    for snake in (True, False):
        plan = band_plan_around(sl, heights, regs[0], taken, style.min_band, tuple(shapes), snake, deadline)
        layout = None if plan is None else _pins_and_plan(problem, plan, targets, pinned, shapes, rest, taken, regs)
        if layout is not None:
            layouts.append(layout)
    return min(layouts, key=lambda x: score(problem, x), default=None)


def _pins_and_plan(
    problem: PlacementProblem,
    plan: list[Band],
    targets: np.ndarray,
    pinned: list[int],
    shapes: list[PinShapes],
    rest: np.ndarray,
    blocked: np.ndarray,
    regs: list[Region],
) -> Placed | None:
    """The pinned kernels on the rectangles a band plan leaves them (``pin_choices``), the other
    kernels packed in its bands; None where two pinned rectangles overlap or the plan does not pack."""
    n = problem.n_kernels
    taken = blocked.copy()
    rects = np.zeros((n, 4), dtype=np.int64)
    dfs = np.zeros(n, dtype=np.int32)
    lat = np.zeros(n, dtype=np.int64)
    for k, pin, i in zip(pinned, shapes, pin_choices(plan, tuple(shapes), regs[0]), strict=True):
        r, c = int(pin.rows[i]), int(pin.cols[i])
        if taken[pin.row : pin.row + r, pin.col : pin.col + c].any():
            return None
        taken[pin.row : pin.row + r, pin.col : pin.col + c] = True
        rects[k], dfs[k], lat[k] = (pin.row, pin.col, r, c), int(pin.code[i]), int(pin.latency[i])
    wafer = (0, 0, problem.mesh.rows, problem.mesh.cols)
    placed = _pack_plan(problem.restrict(rest, taken, wafer), plan, targets[rest], regs, around=True)
    if placed is None:
        return None
    rects[rest], dfs[rest], lat[rest] = placed.rects, placed.dataflow, placed.latency
    return Placed(rects, dfs, lat)


def _construct_in_parts(
    problem: PlacementProblem, targets: np.ndarray, style: Style, deadline: Deadline | None = None
) -> Placed | None:
    """``_construct_parts`` in parts: pinned kernels first, then each group, each area, the rest."""
    n = problem.n_kernels
    rects = np.zeros((n, 4), dtype=np.int64)
    dfs = np.zeros(n, dtype=np.int32)
    lat = np.zeros(n, dtype=np.int64)
    taken = problem.blocked.copy()
    pinned = [k for k in range(n) if problem.pins and problem.pins[k] is not None]
    corners = np.zeros_like(taken)  # every later pin's corner is kept free: a wide rectangle must not swallow it
    for k in pinned:
        corners[problem.pins[k]] = True
    for k in pinned:
        y, x = problem.pins[k]  # type: ignore[misc]
        corners[y, x] = False
        found = _pinned_rect(problem, k, int(targets[k]), taken | corners)
        if found is None:
            return None
        r, c, latency, code, _ = found
        rects[k], dfs[k], lat[k] = (y, x, r, c), code, latency
        taken[y : y + r, x : x + c] = True
    done = set(pinned)
    obstacles: list[tuple[int, int, int, int]] = list(problem.keep_out)
    obstacles += [(int(rects[k, 0]), int(rects[k, 1]), int(rects[k, 2]), int(rects[k, 3])) for k in pinned]
    for group in problem.touch:  # side by side: each group grown from its pinned members, or the leftmost spot
        grown = _touch_group(problem, group, targets, taken, rects, done, obstacles, deadline)
        if grown is None:
            return None
        for k, (y, x, r, c), latency, code in grown:
            rects[k], dfs[k], lat[k] = (y, x, r, c), code, latency
            taken[y : y + r, x : x + c] = True
            obstacles.append((y, x, r, c))
            done.add(k)
    fenced: dict[tuple[int, int, int, int], list[int]] = {}
    for k in range(n):
        fence = problem.fences[k] if problem.fences else None
        if fence is not None and k not in done:
            fenced.setdefault(fence, []).append(k)
    rest = [k for k in range(n) if k not in done and not any(k in g for g in fenced.values())]
    parts: list[tuple[np.ndarray, tuple[int, int, int, int] | None]] = [
        (np.array(g), area) for area, g in sorted(fenced.items(), key=lambda f: f[0][2] * f[0][3])
    ]
    parts += [(np.array(rest, dtype=np.int64), None)] if rest else []
    wafer = (0, 0, problem.mesh.rows, problem.mesh.cols)
    for members, area in parts:
        if deadline is not None and deadline.expired():
            return None
        # bands fill the largest free rectangle of their area first (obstacles at its edges, as I/O strips
        # and reserved corners are, then cost nothing); when that is too small, the whole area, sliding past them
        whole = area if area is not None else wafer
        placed = None
        for region in dict.fromkeys((largest_free(whole, obstacles), whole)):
            if region[2] <= 0 or region[3] <= 0:  # (no free rectangle left: the groups and pins took it all)
                continue
            placed = _construct(problem.restrict(members, taken, region), targets[members], style, around=True, deadline=deadline)
            if placed is not None:
                break
        if placed is None and style.first_fit and not (deadline is not None and deadline.expired()):
            # obstacles inside the area (pins in its middle): around them
            for near in (True, False):  # next to its predecessor (short flows), else leftmost (packs)
                placed = _first_fit(problem, members, targets, taken, whole, obstacles, near)
                if placed is not None:
                    break
        if placed is None:
            return None
        rects[members], dfs[members], lat[members] = placed.rects, placed.dataflow, placed.latency
        for y, x, r, c in placed.rects.tolist():
            taken[y : y + r, x : x + c] = True
            obstacles.append((y, x, r, c))
    return Placed(rects, dfs, lat)


class _FreeCores:
    """The free cores of the wafer as a summed-area table: whether a rectangle is free in O(1), for many
    corners at once; taking a rectangle updates the table without a rescan."""

    def __init__(self, taken: np.ndarray) -> None:
        self.summed = np.zeros((taken.shape[0] + 1, taken.shape[1] + 1), dtype=np.int32)
        self.summed[1:, 1:] = taken.cumsum(0, dtype=np.int32).cumsum(1, dtype=np.int32)
        self.below, self.right = np.arange(taken.shape[0] + 1), np.arange(taken.shape[1] + 1)

    def free(self, ys: np.ndarray, xs: np.ndarray, r: int, c: int) -> np.ndarray:
        """Whether the r x c rectangle at each corner (ys, xs) is free (corners inside the wafer)."""
        t = self.summed
        return t[ys + r, xs + c] - t[ys, xs + c] - t[ys + r, xs] + t[ys, xs] == 0

    def take(self, y: int, x: int, r: int, c: int) -> None:
        """Mark a rectangle taken: its cores above and left of every point, added to the table."""
        self.summed += np.outer(np.clip(self.below - y, 0, r), np.clip(self.right - x, 0, c)).astype(np.int32)

    def give_back(self, y: int, x: int, r: int, c: int) -> None:
        """Free a rectangle ``take`` marked (a search that tried it there and moved on)."""
        self.summed -= np.outer(np.clip(self.below - y, 0, r), np.clip(self.right - x, 0, c)).astype(np.int32)


def _options(problem: PlacementProblem, k: int, target: int, rows: int, cols: int) -> dict[tuple[int, int], tuple[int, int]]:
    """Kernel k's rectangles meeting ``target`` within rows x cols, the fewest columns per height:
    (r, c) -> (latency, op-model code)."""
    shape = problem.shape(k)
    options: dict[tuple[int, int], tuple[int, int]] = {}
    for h in range(shape.height_index(rows) + 1):
        c = shape.width_for(h, target)
        if 0 < c <= cols:
            c = int(shape.prefix_width[h, c])
            options.setdefault((int(shape.best_r[h, c]), c), (int(shape.best[h, c]), int(shape.best_df[h, c])))
    return options


Box4 = tuple[int, int, int, int]
Spot = tuple[int, int, int, int, int, int]  # rank, rank, rank, r, c, y (rank: smaller is better), x below


def _best_spot(
    options: dict[tuple[int, int], tuple[int, int]],
    corners: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    free: _FreeCores,
    area: Box4,
    previous: tuple[int, int] | None,
) -> tuple[int, int, int, int] | None:
    """(y, x, r, c): over ``options`` and the corners each may take (``corners(r, c)``: rows, cols), the
    free one nearest ``previous`` (a doubled centre), else the leftmost, then topmost; fewest cores next."""
    ay, ax, ah, aw = area
    best: tuple[tuple[int, int, int], tuple[int, int, int, int]] | None = None
    for r, c in options:
        ys, xs = corners(r, c)
        ok = (ys >= ay) & (xs >= ax) & (ys + r <= ay + ah) & (xs + c <= ax + aw)
        ys, xs = ys[ok], xs[ok]
        if ys.size == 0:
            continue
        free_here = free.free(ys, xs, r, c)
        if not free_here.any():
            continue
        if previous is not None:
            dist = np.abs(2 * xs + c - previous[1]) + np.abs(2 * ys + r - previous[0])
            i = int(np.argmin(np.where(free_here, dist, np.iinfo(np.int64).max)))
            rank = (int(dist[i]), r * c, 0)
        else:
            i = int(np.argmax(free_here))  # corners come column-major: the leftmost, then topmost
            rank = (int(xs[i]), int(ys[i]), r * c)
        if best is None or rank < best[0]:
            best = (rank, (int(ys[i]), int(xs[i]), r, c))
    return None if best is None else best[1]


def _first_fit(
    problem: PlacementProblem,
    members: np.ndarray,
    targets: np.ndarray,
    taken: np.ndarray,
    area: Box4,
    obstacles: list[Box4],
    near: bool = False,
) -> Placed | None:
    """The kernels ``members`` (in order) at free spots of ``area``: next to the kernel before (``near``),
    else the leftmost, then topmost.

    The fallback when bands cannot slide past the obstacles (pins in the middle of the wafer, tall
    fixed grids between them): each kernel takes, over its rectangles meeting its target, the spot
    nearest its predecessor (or the first in column-major order), then the one with the fewest cores.
    Corners are tried where rectangles can start (the area's edges and the right and bottom edges of
    every obstacle and placed kernel); a summed-area table of the taken cores judges them. None when a
    kernel finds no spot."""
    ay, ax, ah, aw = area
    n = problem.n_kernels
    rects, dfs, lat = np.zeros((n, 4), dtype=np.int64), np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int64)
    free = _FreeCores(taken)
    edges = list(obstacles)
    previous: tuple[int, int] | None = None
    for k in members.tolist():
        options = _options(problem, k, int(targets[k]), ah, aw)
        spot = _best_spot(options, _edge_corners(area, edges), free, area, previous if near else None)
        if spot is None:
            return None
        y, x, r, c = spot
        rects[k] = spot
        lat[k], dfs[k] = options[(r, c)]
        free.take(y, x, r, c)
        edges.append(spot)
        previous = (2 * y + r, 2 * x + c)
    return Placed(rects[members], dfs[members], lat[members])


def _box(rects: np.ndarray, k: int) -> Box4:
    """Kernel k's rectangle (row, col, rows, cols) as plain ints."""
    y, x, r, c = (int(v) for v in rects[k])
    return y, x, r, c


def _edge_corners(area: Box4, edges: list[Box4]) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
    """The corners where a rectangle can start in ``area`` (its top-left, and right and bottom edges of
    every box of ``edges`` inside it), column-major: x, then y."""
    ay, ax, ah, aw = area
    xs = np.unique([ax] + [x + c for _, x, _, c in edges if ax <= x + c < ax + aw])
    ys = np.unique([ay] + [y + r for y, _, r, _ in edges if ay <= y + r < ay + ah])
    xg, yg = (g.ravel() for g in np.meshgrid(xs, ys, indexing="ij"))
    return lambda r, c: (yg, xg)


def _around(rects: list[Box4]) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
    """The corners at which an r x c rectangle touches one of ``rects`` (left, right, above, below)."""

    def corners(r: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        ys: list[np.ndarray] = []
        xs: list[np.ndarray] = []
        for y, x, rr, cc in rects:
            along_rows = np.arange(y - r + 1, y + rr)
            along_cols = np.arange(x - c + 1, x + cc)
            ys += [along_rows, along_rows, np.full(along_cols.size, y - r), np.full(along_cols.size, y + rr)]
            xs += [np.full(along_rows.size, x - c), np.full(along_rows.size, x + cc), along_cols, along_cols]
        return np.concatenate(ys), np.concatenate(xs)

    return corners


def _touch_group(
    problem: PlacementProblem,
    group: tuple[int, ...],
    targets: np.ndarray,
    taken: np.ndarray,
    rects: np.ndarray,
    placed: set[int],
    edges: list[Box4],
    deadline: Deadline | None = None,
) -> list[tuple[int, Box4, int, int]] | None:
    """Kernels of a ``together: touch`` group side by side: those already ``placed`` (pinned) stay; each
    other member (in order) takes the free spot touching a placed member nearest the member before it
    (the first of a group with none placed: the leftmost free spot after ``edges``), inside its area
    (``_grow_group``). That joins the group whenever the members placed before it touch one another;
    pins apart are joined only where a member happens to land between them, so when growing leaves
    the group in pieces, ``_join_group`` searches for free members that join the pieces first. (kernel,
    box, latency, code) per member placed here; None when no layout found joins the group."""
    known = {k: _box(rects, k) for k in group if k in placed}
    grown = _grow_group(problem, group, targets, _FreeCores(taken), known, edges)
    if grown is not None or max(_components(list(known.values())), default=0) == 0:
        return grown  # (joined; or the placed members are one piece, or none, and a member found no spot)
    if deadline is not None and deadline.expired():
        return None
    return _join_group(problem, group, targets, taken, known, edges, deadline)


def _member_area(problem: PlacementProblem, k: int) -> Box4:
    """The area kernel k stays in: its own (``place within``), else the wafer."""
    fence = problem.fences[k] if problem.fences else None
    return fence if fence is not None else (0, 0, problem.mesh.rows, problem.mesh.cols)


def _grow_group(
    problem: PlacementProblem,
    group: tuple[int, ...],
    targets: np.ndarray,
    free: _FreeCores,
    known: dict[int, Box4],
    edges: list[Box4],
) -> list[tuple[int, Box4, int, int]] | None:
    """The members of ``group`` not in ``known`` (member -> box), in order, each at the free spot touching
    a member already there nearest the member before it (``_touch_group``); taken in ``free``. None
    when one finds no spot or the group is not connected (``free`` then holds what was taken)."""
    boxes: list[Box4] = list(known.values())
    out: list[tuple[int, Box4, int, int]] = []
    previous: tuple[int, int] | None = None
    for k in group:
        if k in known:
            y, x, r, c = known[k]
            previous = (2 * y + r, 2 * x + c)
            continue
        area = _member_area(problem, k)
        options = _options(problem, k, int(targets[k]), area[2], area[3])
        if boxes:
            spot = _best_spot(options, _around(boxes), free, area, previous)
        else:
            spot = _best_spot(options, _edge_corners(area, edges), free, area, None)
        if spot is None:
            return None
        y, x, r, c = spot
        free.take(y, x, r, c)
        boxes.append(spot)
        out.append((k, spot, *options[(r, c)]))
        previous = (2 * y + r, 2 * x + c)
    return out if connected(boxes) else None


# The joining search (``_join_group``) is bounded so that a large group stays fast when no layout joins
# it (a bisection on the target tries many targets that do not): at most this many search steps, each
# trying the best few spots, each step looking at the members of a few kinds (a kind: one shape table,
# target and area, so identical layers count once) and the shapes of the closest pairs of pieces.
_JOIN_STEPS = 24
# ... and at most this many times the rest of the group grown around joined pieces (each a whole
# ``_grow_group``: 6 s for 90 members on GPT-2's wafer, where the steps alone did not bound the search)
_JOIN_GROWS = 4
_JOIN_BRANCH = 3
_JOIN_KINDS = 4
_JOIN_PAIRS = 8


class _Shapes(NamedTuple):
    """A kernel's distinct legal rectangles meeting its target within its area, fewest cores first
    (then the fastest): rows, cols, latency, op-model code."""

    r: np.ndarray
    c: np.ndarray
    latency: np.ndarray
    code: np.ndarray


def _shape_list(problem: PlacementProblem, k: int, target: int, rows: int, cols: int) -> _Shapes:
    """Every rectangle of kernel k's shape table meeting ``target`` within rows x cols (``_options``
    keeps the narrowest per height; joining pieces needs the widths and heights that span a gap)."""
    shape = problem.shape(k)
    h_count = shape.height_index(rows) + 1
    best = shape.best[:h_count, : cols + 1]
    tall = shape.best_r[:h_count, : cols + 1]
    ok = (best <= target) & (tall <= rows)
    ok[:, 0] = False
    hs, cs = np.nonzero(ok)
    r, latency, code = tall[hs, cs].astype(np.int64), best[hs, cs].astype(np.int64), shape.best_df[hs, cs]
    c = cs.astype(np.int64)
    order = np.lexsort((latency, r * c))  # fewest cores, then the fastest: each shape's first is its best
    _, first = np.unique((r * (cols + 1) + c)[order], return_index=True)
    keep = order[np.sort(first)]
    return _Shapes(r[keep], c[keep], latency[keep], code[keep].astype(np.int64))


def _components(boxes: Sequence[Box4]) -> list[int]:
    """The piece of each box: boxes that touch, through the others, share one; pieces are numbered
    from 0 in the order of their first box."""
    label = [-1] * len(boxes)
    pieces = 0
    for i in range(len(boxes)):
        if label[i] >= 0:
            continue
        label[i], todo = pieces, [i]
        while todo:
            a = todo.pop()
            for b in range(len(boxes)):
                if label[b] < 0 and touching(boxes[a], boxes[b]):
                    label[b] = pieces
                    todo.append(b)
        pieces += 1
    return label


# how a rectangle R touching a box meets it along one axis: R starts where the box ends (R beside it on
# the right, or below it), R ends where the box starts, or R overlaps the box's span [lo, hi)
_Contact = tuple[str, int, int]


def _contacts(box: Box4) -> list[tuple[_Contact, _Contact]]:
    """The four ways a rectangle touches ``box``, as (columns, rows) contacts: left of it, right of it,
    above it, below it."""
    y, x, r, c = box
    rows, cols = ("over", y, y + r), ("over", x, x + c)
    return [(("end", x, 0), rows), (("start", x + c, 0), rows), (cols, ("end", y, 0)), (cols, ("start", y + r, 0))]


def _span_needed(p: _Contact, q: _Contact, edge: tuple[int, int]) -> tuple[int, int] | None:
    """The lengths n of a run of cores [s, s + n) inside ``edge`` ([first, end)) that meets both
    contacts, as [least, most] (one length where it runs from where one box ends to where the other
    starts); None when no length does (both start, or end, at different places; a start past a span)."""
    (kp, p0, p1), (kq, q0, q1) = sorted((p, q))  # kinds in order: end, over, start
    first, end = edge
    if kp == kq == "over":
        least, most = max(p0, q0) - min(p1, q1) + 2, end - first  # a core of each span
    elif kp == kq:  # both start (end) at one place
        least, most = 1, ((p0 - first if kp == "end" else end - p0) if p0 == q0 else 0)
    elif kp == "end" and kq == "start":
        least = most = (p0 - q0) if first <= q0 and p0 <= end else 0
    elif kp == "end":  # ends at p0 and overlaps [q0, q1)
        least, most = p0 - q1 + 1, ((p0 - first) if p0 > q0 else 0)
    else:  # overlaps [p0, p1) and starts at q0
        least, most = p0 - q0 + 1, ((end - q0) if q0 < p1 else 0)
    least = max(least, 1)
    return (least, most) if least <= most else None


def _gap(a: Box4, b: Box4) -> int:
    """Cores strictly between two boxes: the columns between them plus the rows between them (0 for
    boxes that touch or meet at a corner)."""
    gx = max(0, b[1] - a[1] - a[3], a[1] - b[1] - b[3])
    gy = max(0, b[0] - a[0] - a[2], a[0] - b[0] - b[2])
    return gx + gy


def _bridging(shapes: _Shapes, boxes: list[Box4], labels: list[int], area: Box4) -> np.ndarray:
    """Indices of ``shapes`` worth trying to join the pieces: for the ``_JOIN_PAIRS`` closest pairs of
    boxes in different pieces and each way a rectangle inside ``area`` may touch both (``_contacts``:
    the rows and columns it may span), the fewest-core shape that does, and the narrowest and the
    shortest (where taken cores beside the gap leave no room for the fewest-core one); and the widest,
    the tallest and the smallest shape (toward a piece too far for one member: a chain)."""
    pairs = sorted(
        (_gap(boxes[i], boxes[j]), i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if labels[i] != labels[j]
    )[:_JOIN_PAIRS]
    ay, ax, ah, aw = area
    needs: set[tuple[int, int, int, int]] = set()
    for _, i, j in pairs:
        for cols_i, rows_i in _contacts(boxes[i]):
            for cols_j, rows_j in _contacts(boxes[j]):
                across, down = _span_needed(cols_i, cols_j, (ax, ax + aw)), _span_needed(rows_i, rows_j, (ay, ay + ah))
                if across is not None and down is not None:
                    needs.add((*across, *down))
    chosen = {0, int(np.lexsort((shapes.r, -shapes.c))[0]), int(np.lexsort((shapes.c, -shapes.r))[0])}
    if needs:
        c_least, c_most, r_least, r_most = np.array(sorted(needs)).T[:, :, None]  # [4, needs, 1]
        fits = (shapes.c >= c_least) & (shapes.c <= c_most) & (shapes.r >= r_least) & (shapes.r <= r_most)
        hit = fits.any(axis=1)
        cores = shapes.r * shapes.c
        for order in (np.arange(cores.size), np.lexsort((cores, shapes.c)), np.lexsort((cores, shapes.r))):
            chosen.update(order[np.argmax(fits[:, order], axis=1)[hit]].tolist())  # each order's first that fits
    return np.array(sorted(chosen), dtype=np.int64)


JoinSpot = tuple[tuple[int, int, int, int, int, int, int], int, Box4, int, int]  # rank, kernel, box, latency, code


def _joining_spots(
    shapes: _Shapes,
    chosen: np.ndarray,
    boxes: list[Box4],
    labels: list[int],
    free: _FreeCores,
    area: Box4,
    member: tuple[int, int],
    previous: tuple[int, int] | None,
) -> list[JoinSpot]:
    """Per shape of ``chosen``, the free spot inside ``area`` touching a box of the group that joins the
    most pieces, then is nearest a piece it does not touch (a member that joins none must come nearer
    one: a step of a chain), ranked with its cores, its distance to ``previous`` (a doubled centre) and
    ``member`` (its position in the group, the kernel)."""
    ay, ax, ah, aw = area
    order = np.argsort(labels, kind="stable")
    by, bx, br, bc = (np.array([boxes[i][d] for i in order], dtype=np.int64)[:, None] for d in range(4))
    sorted_labels = np.array(labels)[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    pieces = starts.size
    far = np.iinfo(np.int64).max // 4
    between = np.full((pieces, pieces), far, dtype=np.int64)  # cores between two pieces, at their closest
    for i, a in enumerate(boxes):
        for j, b in enumerate(boxes):
            if labels[i] != labels[j]:
                between[labels[i], labels[j]] = min(between[labels[i], labels[j]], _gap(a, b))
    out: list[JoinSpot] = []
    around = _around(boxes)
    for s in chosen.tolist():
        r, c = int(shapes.r[s]), int(shapes.c[s])
        ys, xs = around(r, c)
        inside = (ys >= ay) & (xs >= ax) & (ys + r <= ay + ah) & (xs + c <= ax + aw)
        ys, xs = ys[inside], xs[inside]
        if ys.size:
            here = free.free(ys, xs, r, c)
            ys, xs = ys[here], xs[here]
        if ys.size == 0:
            continue
        rows_meet = (ys < by + br) & (by < ys + r)
        cols_meet = (xs < bx + bc) & (bx < xs + c)
        touch = ((xs + c == bx) | (bx + bc == xs)) & rows_meet | ((ys + r == by) | (by + br == ys)) & cols_meet
        apart = np.maximum(0, np.maximum(bx - xs - c, xs - bx - bc)) + np.maximum(0, np.maximum(by - ys - r, ys - by - br))
        touched = np.logical_or.reduceat(touch, starts, axis=0)  # [pieces, spots]
        untouched = np.where(touched, far, np.minimum.reduceat(apart, starts, axis=0))
        joined = touched.sum(axis=0)
        nearer = (untouched < between[np.argmax(touched, axis=0)].T).any(axis=0)  # than its piece is now
        useful = (joined >= 2) | nearer
        if not useful.any():
            continue
        nearest = untouched.min(axis=0)
        gap = np.where(nearest == far, 0, nearest)
        near = np.zeros_like(ys) if previous is None else np.abs(2 * ys + r - previous[0]) + np.abs(2 * xs + c - previous[1])
        key = np.where(useful, 0, 1)
        i = int(np.lexsort((xs, ys, near, gap, -joined, key))[0])
        rank = (-int(joined[i]), int(gap[i]), r * c, int(near[i]), member[0], int(ys[i]), int(xs[i]))
        box = (int(ys[i]), int(xs[i]), r, c)
        out.append((rank, member[1], box, int(shapes.latency[s]), int(shapes.code[s])))
    return out


def _join_group(
    problem: PlacementProblem,
    group: tuple[int, ...],
    targets: np.ndarray,
    taken: np.ndarray,
    known: dict[int, Box4],
    edges: list[Box4],
    deadline: Deadline | None = None,
) -> list[tuple[int, Box4, int, int]] | None:
    """A touch group whose placed members (``known``) lie in pieces apart: free members placed first to
    join the pieces, then the others grown around them (``_grow_group``). None when none found does.

    A depth-first search over which free member goes where: each step ranks, for members of up to
    ``_JOIN_KINDS`` kinds (the farthest-reaching first), the spots that join the most pieces, then come
    nearest another piece, with the fewest cores (``_joining_spots`` over ``_bridging``'s shapes, all
    meeting the member's target), and tries the best ``_JOIN_BRANCH`` in turn; a member that joins
    none must bring its piece nearer another, so a chain of members can span a gap no one spans.
    Backtracking stops after ``_JOIN_STEPS`` steps and ``_JOIN_GROWS`` growths of the rest, or when
    ``deadline`` passes (a group no layout joins must fail fast: the bisection on the target meets it at
    every target too small to join it)."""
    free = _FreeCores(taken)
    known = dict(known)
    position = {k: i for i, k in enumerate(group)}
    kinds: dict[tuple[int, int, Box4], _Shapes] = {}
    kind_of: dict[int, tuple[int, int, Box4]] = {}
    for k in group:
        if k not in known:
            area = _member_area(problem, k)
            kind_of[k] = (problem.kernel_class[k], int(targets[k]), area)
            if kind_of[k] not in kinds:
                kinds[kind_of[k]] = _shape_list(problem, k, int(targets[k]), area[2], area[3])
    reach = {kind: int(max(s.r.max(initial=0), s.c.max(initial=0))) for kind, s in kinds.items()}
    steps = [_JOIN_STEPS]
    grows = [_JOIN_GROWS]

    def previous_of(k: int) -> tuple[int, int] | None:
        for m in reversed(group[: position[k]]):
            if m in known:
                y, x, r, c = known[m]
                return 2 * y + r, 2 * x + c
        return None

    def search(left: list[int]) -> list[tuple[int, Box4, int, int]] | None:
        boxes = [known[k] for k in group if k in known]
        labels = _components(boxes)
        if deadline is not None and deadline.expired():
            return None
        if max(labels) == 0:  # one piece: the rest grow around it
            if grows[0] <= 0:
                return None
            grows[0] -= 1
            saved = free.summed.copy()
            grown = _grow_group(problem, group, targets, free, known, edges)
            if grown is None:
                free.summed = saved
            return grown
        if not left or steps[0] <= 0:
            return None
        steps[0] -= 1
        first: dict[tuple[int, int, Box4], int] = {}
        for k in left:  # a kind's first member (in group order) stands for the kind
            first.setdefault(kind_of[k], k)
        tried = sorted(first, key=lambda kind: (-reach[kind], position[first[kind]]))[:_JOIN_KINDS]
        spots: list[JoinSpot] = []
        for kind in tried:
            k, shapes = first[kind], kinds[kind]
            if shapes.r.size:
                chosen = _bridging(shapes, boxes, labels, kind[2])
                spots += _joining_spots(shapes, chosen, boxes, labels, free, kind[2], (position[k], k), previous_of(k))
        corners: dict[tuple[int, int], JoinSpot] = {}
        for spot in sorted(spots):  # the best at each corner: the tries differ in where they go
            corners.setdefault(spot[2][:2], spot)
        for _, k, box, latency, code in list(corners.values())[:_JOIN_BRANCH]:
            free.take(*box)
            known[k] = box
            rest = search([m for m in left if m != k])
            if rest is not None:
                return [(k, box, latency, code), *rest]
            del known[k]
            free.give_back(*box)
        return None

    return search([k for k in group if k not in known])


def _construct(
    problem: PlacementProblem,
    targets: np.ndarray,
    style: Style,
    around: bool = False,
    deadline: Deadline | None = None,
    refine: Deadline | None = None,
) -> Placed | None:
    """Band plan + packing of every kernel of ``problem`` on its regions (``construct`` without parts);
    ``around``: the region holds obstacles (a part of ``_construct_parts``), so the bands are first
    planned around them (``band_plan_around``), then, where that does not pack, as if it were free."""
    regs = regions(problem)
    heights, sl, every, all_widths, rule = _band_slots(problem, targets, style, regs)
    if around and len(regs) == 1 and problem.blocked.any():
        blocked = problem.blocked
        plans = (band_plan_around(sl, heights, regs[0], blocked, style.min_band, (), snake, deadline) for snake in (True, False))
        layouts = [x for x in (_pack_plan(problem, plan, targets, regs, around=True) for plan in plans if plan) if x]
        if layouts:
            return min(layouts, key=lambda x: score(problem, x))
        if deadline is not None and deadline.expired():
            return None  # (the plans were cut short: no fallback past the deadline)
    plan = band_plan(sl, heights, regs[0].rows, regs[0].cols, len(regs), style.min_band)
    if plan is None and rule is not None and heights.size < every.size:
        # with pairs a height may hold a stacked pair that the heights of distinct single widths miss
        # (``distinct_slots``): where those find no plan, every height's slots (exact, slower)
        heights, sl = distinct_slots(every, slots(all_widths, every, regs[0].cols, rule), style.min_band)
        plan = band_plan(sl, heights, regs[0].rows, regs[0].cols, len(regs), style.min_band)
    if plan is None:
        return None
    placed = _pack_plan(problem, plan, targets, regs)
    if refine is not None and len(regs) == 1 and placed is not None:
        placed = refine_plan(problem, plan, targets, regs, placed, refine)
    if style.wire and len(regs) == 1 and placed is not None:
        # (packable exactly where the fewest-rows plan is: the bisection's targets do not change)
        for other in wire_plans(sl, heights, regs[0].rows, regs[0].cols, style.min_band):
            found = _pack_plan(problem, other, targets, regs)
            if found is not None and score(problem, found) < score(problem, placed):
                placed = found
    return placed


def _band_slots(
    problem: PlacementProblem, targets: np.ndarray, style: Style, regs: list[Region]
) -> tuple[np.ndarray, Slots, np.ndarray, np.ndarray, PairRule | None]:
    """The candidate band heights and their column slots for per-kernel targets (every height is a
    lane height of stacked pairs; ONNX keeps the heights at which some kernel narrows,
    ``distinct_heights``, the contest every one); then every height, its widths and the pair rule."""
    every = band_heights(problem, regs[0].rows)
    widths = all_widths = widths_for(problem, targets, every)
    rule = None if style.stack is Stacking.NONE else pair_rule(problem, targets, style.stack)
    heights = every
    if problem.objective.charges_communication:  # (the contest keeps every height: see ``distinct_heights``'s test)
        heights, widths = distinct_heights(every, all_widths, style.min_band)
    return heights, slots(widths, heights, regs[0].cols, rule), every, all_widths, rule


def _pack_plan(
    problem: PlacementProblem, plan: list[Band], targets: np.ndarray, regs: list[Region], around: bool = False
) -> Placed | None:
    """A band plan packed: its kernels at their narrowest widths, stretched into each band's spare
    columns (``around``: the columns free over the band's rows, ``_band_room``) where that still packs
    (see ``stretch``)."""
    chosen = band_widths(problem, plan, targets)
    if not problem.objective.charges_communication:
        # the contest: spare columns make the slowest kernels faster but push every centre apart;
        # the score decides between the stretched and the narrow layout
        layouts = [
            x
            for x in (pack(problem, plan, stretch(problem, plan, chosen, regs[0].cols), regs), pack(problem, plan, chosen, regs))
            if x
        ]
        return min(layouts, key=lambda x: score(problem, x), default=None)
    # wider rectangles may no longer slide past defects: fall back to the narrow ones
    room = _band_room(problem, plan, regs[0]) if around else regs[0].cols
    stretched = stretch(problem, plan, chosen, room)
    placed = pack(problem, plan, stretched, regs)
    if problem.objective.aggregate is Aggregate.PATH:
        # a token's path: each band's columns shared by latency saved along the path, not handed to
        # the slowest kernel (``path_columns``), and each packing mirrored where a piece follows a
        # producer low in its band (``pack``); the objective's rank decides (with requests in flight
        # the slowest kernel may pace the plan after all). (Mirrored, the slowest-stage layouts
        # were built better and then moved worse: ViT-B/16 on wse3 3,598 -> 3,455 against 3,660 ->
        # 3,322 at 60 s, 3,455 against 3,321 at 120 s; they are not mirrored.)
        shared = path_stretch(problem, plan, chosen, room, path_weights(problem, targets))
        tries = [(stretched, True)] + ([(shared, False), (shared, True)] if shared is not None else [])
        for widths, mirror in tries:
            other = pack(problem, plan, widths, regs, mirror)
            if other is not None and (placed is None or score(problem, other) < score(problem, placed)):
                placed = other
    return placed or pack(problem, plan, chosen, regs)


# ``refine_plan``: how far a band boundary moves in one step (kernels), the nearest first
BOUNDARY_SHIFTS = (-1, 1, -2, 2, -4, 4)


def refine_plan(
    problem: PlacementProblem, plan: list[Band], targets: np.ndarray, regs: list[Region], placed: Placed, deadline: Deadline
) -> Placed:
    """``placed`` (the band plan ``plan`` packed), or a better-ranked layout of the plan refined: each
    boundary between two bands moved by a few kernels (``BOUNDARY_SHIFTS``) while that ranks better,
    then the rows the plan leaves handed to its bands (``_spare_rows``), until ``deadline``.

    The DP chooses the boundaries for the fewest rows at the targets; a token's path is valued by
    the sum of its latencies, and each band's columns are shared by latency saved (``path_stretch``),
    so a band of steep curves next to one of flat curves gains from a kernel moved between them.
    Moving a band's last kernel to the next band's start keeps it beside its neighbours in the snake.
    Kernels stacked or in runs of lanes stay with their group (a move that splits one is skipped)."""
    best, rank = placed, score(problem, placed)
    grouped = [
        {k for first, rows in band.stacked for k in range(first, first + len(rows) + 1)}
        | {k for run in band.runs for k in range(run.first, run.end)}
        for band in plan
    ]
    improved = True
    while improved and not deadline.expired():
        improved = False
        for b in range(len(plan) - 1):
            for shift in BOUNDARY_SHIFTS:
                here, there = plan[b], plan[b + 1]
                cut = here.end + shift
                moved = set(range(min(cut, here.end), max(cut, here.end)))
                if not here.first < cut < there.end or moved & (grouped[b] | grouped[b + 1]) or deadline.expired():
                    continue
                other = [*plan[:b], replace(here, end=cut), replace(there, first=cut), *plan[b + 2 :]]
                found = _pack_plan(problem, other, targets, regs)
                if found is not None and score(problem, found) < rank:
                    best, rank, plan, improved = found, score(problem, found), other, True
    return _spare_rows(problem, plan, targets, regs, best, deadline)


def _spare_rows(
    problem: PlacementProblem, plan: list[Band], targets: np.ndarray, regs: list[Region], placed: Placed, deadline: Deadline
) -> Placed:
    """``placed`` (the band plan ``plan`` packed), or the plan with the rows it leaves under its last
    band handed out, whichever ranks better: all of them to one band (each in turn) or to every band
    in proportion to its height. A taller band lets its kernels take taller rectangles, and the
    columns they free go on to the others (``stretch``, ``path_stretch``).

    The band heights are the few at which some kernel narrows, so the plan that fits the targets
    leaves rows over: BERT-base with ``--objective latency`` packed 760 of its 792 rows; the bisection
    over the targets does not see them, since they change no band's kernels at the targets' widths.
    Each try is one packing, tried while ``deadline`` allows."""
    left = regs[0].rows - sum(band.height + band.skip for band in plan)
    if left <= 0:
        return placed
    total = sum(band.height for band in plan)
    shares = [left * band.height // total for band in plan]
    shares[-1] += left - sum(shares)
    taller = [[replace(x, height=x.height + left) if i == b else x for i, x in enumerate(plan)] for b in range(len(plan))]
    taller.append([replace(band, height=band.height + extra) for band, extra in zip(plan, shares, strict=True)])
    best, rank = placed, score(problem, placed)
    for other in taller:
        if deadline.expired():
            break
        found = _pack_plan(problem, other, targets, regs)
        if found is not None and score(problem, found) < rank:
            best, rank = found, score(problem, found)
    return best


def path_weights(problem: PlacementProblem, latency: np.ndarray) -> np.ndarray:
    """Each kernel's weight in a token's path at the latencies ``latency``: 1 on a longest path,
    ``OFF_PATH`` beside it (it counts only once its branch grows longer; at 0 it would keep its
    narrowest width and become the longest)."""
    n = problem.n_kernels
    before = [list(problem.preds[k]) for k in range(n)] if problem.preds else [[k - 1] if k else [] for k in range(n)]
    return np.where(np.asarray(slack(before, latency.tolist())) <= 0, 1.0, OFF_PATH)


def path_stretch(
    problem: PlacementProblem, bands: list[Band], widths: np.ndarray, region_cols: int | list[int], weight: np.ndarray
) -> np.ndarray | None:
    """Each band's columns shared among its kernels by weighted latency saved per column
    (``path_columns.share_columns``): a kernel alone on the band's rows, a stacked group as one slot
    (each member within the slot's width at its best), a run of two lanes as one unit whose curve is
    the sum of its lanes' (``lane_curve``; its columns then shared within each lane), a run that turns
    at the widths it has. None where a band's narrowest widths do not fit (the targets' widths stand)."""
    out = widths.copy()
    cols = problem.mesh.cols

    def curve_of(m: int, rows: int) -> np.ndarray | None:
        """Kernel m's weighted latency at each width within ``rows`` rows (None: no legal rectangle)."""
        shape = problem.shape(m)
        h = shape.height_index(rows)
        if h < 0:
            return None
        row = shape.prefix[h, : cols + 1].astype(np.float64)
        row[shape.prefix[h, : cols + 1] >= INF] = np.inf
        return weight[m] * row

    for b, band in enumerate(bands):
        rows = lanes(band)
        groups = band.groups()
        turns = [run for run in band.runs if run.turn]
        runs = [run for run in band.runs if not run.turn]
        budget = (region_cols if isinstance(region_cols, int) else region_cols[b]) - sum(run.width(widths) for run in turns)
        taken = {k for run in band.runs for k in range(run.first, run.end)} | {m for g in groups.values() for m in g}
        units: list[list[int]] = [[k] for k in range(band.first, band.end) if k not in taken] + list(groups.values())
        curves = []
        for members in units:
            parts = [curve_of(m, rows[m][1]) for m in members]
            found = [p for p in parts if p is not None]
            if len(found) < len(parts):
                return None
            curves.append(np.sum(found, axis=0))
        lane_curves: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
        for run in runs:
            upper = [curve_of(m, rows[m][1]) for m in run.upper()]
            lower = [curve_of(m, rows[m][1]) for m in run.lower()]
            if any(p is None for p in (*upper, *lower)):
                return None
            up, low = [p for p in upper if p is not None], [p for p in lower if p is not None]
            lane_curves.append((up, low))
            curves.append(lane_curve(up, cols) + lane_curve(low, cols))
        shared = share_columns(curves, budget)
        if shared is None:
            return None
        for members, w in zip(units, shared[: len(units)], strict=True):
            for m in members:
                shape = problem.shape(m)
                out[m] = int(shape.prefix_width[shape.height_index(rows[m][1]), w]) if len(members) > 1 else w
        for run, (up, low), w in zip(runs, lane_curves, shared[len(units) :], strict=True):
            upper_w, lower_w = share_columns(up, w), share_columns(low, w)
            if upper_w is None or lower_w is None:
                return None
            out[list(run.upper())] = upper_w
            out[list(run.lower())] = lower_w
    return out


def _band_room(problem: PlacementProblem, plan: list[Band], reg: Region) -> list[int]:
    """Columns free over all the rows of each band of a plan laid from the region's top (the spare
    columns ``stretch`` may hand out; with obstacles, fewer than the region's width)."""
    room, y = [], 0
    for band in plan:
        y += band.skip
        rows = problem.blocked[reg.row + y : reg.row + y + band.height, reg.col : reg.col + reg.cols]
        room.append(int((~rows.any(axis=0)).sum()) if rows.shape[0] == band.height else reg.cols)
        y += band.height
    return room


def slowest(problem: PlacementProblem) -> int:
    """The slowest legal rectangle of any kernel: above it, a target changes no kernel's rectangle."""
    return max(int(s.prefix[s.prefix < INF].max(initial=0)) for s in problem.shapes)


def smallest_target(
    problem: PlacementProblem,
    margins: np.ndarray,
    lo: int,
    deadline: Deadline,
    style: Style = Style(),
    first_free: bool = False,
) -> tuple[int, Placed] | None:
    """Bisection on a uniform target T (kernel k aims at T - margins[k]): the smallest T that packs.
    ``first_free``: the clock does not stop the search for a first T that packs (a stop request
    does), only the bisection below it (the placement's first layout: a late valid plan beats none;
    the bisection after it ran unbounded too, 30 s past a 20 s limit on LLaMA-7B with 442 corners)."""
    hi = max(lo, 1)
    found: tuple[int, Placed] | None = None
    ceiling = slowest(problem) + int(margins.max(initial=0))
    while found is None:
        placed = construct(problem, np.maximum(hi - margins, 1), style, None if first_free else deadline)
        if placed is not None:
            found = (hi, placed)
            break
        # (past the ceiling every kernel is on its fewest cores: no larger target packs)
        if hi > ceiling or (deadline.stopped if first_free else deadline.expired()):
            return None
        hi *= 2
    low = lo
    while low < found[0] and not deadline.expired():
        mid = (low + found[0]) // 2
        placed = construct(problem, np.maximum(mid - margins, 1), style, deadline)
        if placed is not None:
            found = (mid, placed)
        else:
            low = mid + 1
    return found


def relaxed(base: np.ndarray, x: int) -> np.ndarray:
    """Targets ``base`` relaxed by the factor (1 + x/1000) (``place_targets``), each at least 1."""
    return -(-np.maximum(base.astype(np.int64), 1) * (1000 + x) // 1000)


def place_targets(
    problem: PlacementProblem,
    base: np.ndarray,
    deadline: Deadline,
    style: Style = Style(),
    floor: int = 0,
    hint: int | None = None,
) -> tuple[int, Placed] | None:
    """Place kernels aiming at per-kernel targets ``base`` (e.g. the greedy allocation's latencies),
    relaxed by the smallest common factor (1 + x/1000) that packs, x from ``floor`` up (a relaxation
    known not to pack below it); (x, the layout), or None. ``hint``: a relaxation likely to pack (one
    another style packed at), tried first: where it packs, the bisection runs below it instead of
    doubling up to it (the 8B decode's runs of lanes: 8 constructions of 0.3-0.5 s instead of 15)."""
    base = np.maximum(base.astype(np.int64), 1)

    def attempt(x: int) -> Placed | None:
        return construct(problem, relaxed(base, x), style, deadline)

    start = hint if hint is not None and hint > floor else floor
    failed, hi, found = floor - 1, start, attempt(start)
    while found is None:
        failed, hi = hi, max(1, hi * 2)
        if hi > 1 << 30 or deadline.expired():
            return None
        found = attempt(hi)
    lo = failed + 1
    while lo < hi and not deadline.expired():
        mid = (lo + hi) // 2
        placed = attempt(mid)
        if placed is not None:
            hi, found = mid, placed
        else:
            lo = mid + 1
    return hi, found
