"""Alignment of a placed layout: slide kernels within the free rows of their columns (and, for the
contest, within the free columns of their rows).

The strip construction top-aligns every rectangle in its band (or lane). Where a band is taller than
a kernel, that leaves a gap between the kernel and the band below, and a flow that turns there (the
snake passing from one band to the next, or a skip flow into the next band) pays the gap in hops: on
ResNet-50 (wse3) a 610-row band made the first kernel of the next band wait 424 hop cycles.

``align`` moves each kernel up or down within the rows its own columns leave free (other rectangles,
defects and, with ``die_boundary: forbid``, die rows stay out of reach), to the row that minimizes
the distance part of the stage times it touches: its own (its producers) and its consumers'. Moving
a kernel also moves the links its flows load, so a proposal is only a proposal: the real
communication model judges. Two passes are tried, keeping the better by ``strips.score``:

* all proposed moves at once (flows often need the producer and the consumer moved together), then
* one move at a time, each kept only if the score improves (guards layouts where moves add
  congestion elsewhere), until the deadline.

The result is never worse than the input by ``strips.score``.
"""

from __future__ import annotations

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.problem.placement import PlacementProblem
from wsealloc.solvers.strips import Placed, Score, score

SWEEPS = 2
Neighbours = tuple[list[list[tuple[int, float]]], list[list[tuple[int, float]]]]  # producers, consumers


class _Layout:
    """Rectangles plus an occupancy grid (kernel id, -1 free, -2 unusable) for sliding kernels."""

    def __init__(self, problem: PlacementProblem, rects: np.ndarray) -> None:
        self.problem = problem
        self.rects = rects.copy()
        occ = np.full((problem.mesh.rows, problem.mesh.cols), -1, dtype=np.int64)
        occ[problem.blocked] = -2
        for k, (y, x, r, c) in enumerate(self.rects.tolist()):
            occ[y : y + r, x : x + c] = k
        self.occ = occ

    def span(self, k: int) -> tuple[int, int]:
        """[lo, hi): the rows kernel k's columns leave free around its rectangle (its own included)."""
        y, x, r, c = (int(v) for v in self.rects[k])
        rows = self.occ.shape[0]
        if self.problem.fixed(k):
            return y, y + r  # the user fixed its corner, or it touches its group
        if (y == 0 or (self.occ[y - 1, x : x + c] != -1).any()) and (y + r == rows or (self.occ[y + r, x : x + c] != -1).any()):
            return y, y + r  # boxed in above and below (most kernels): no need to scan the columns
        cols = self.occ[:, x : x + c]
        free = ((cols == -1) | (cols == k)).all(axis=1)
        blocked_above = np.flatnonzero(~free[:y])
        blocked_below = np.flatnonzero(~free[y + r :])
        lo = int(blocked_above[-1]) + 1 if blocked_above.size else 0
        hi = y + r + int(blocked_below[0]) if blocked_below.size else free.size
        mesh = self.problem.mesh
        if self.problem.die_rule is DieBoundary.FORBID:  # stay inside the die rows the rectangle is in
            lo = max(lo, (y // mesh.die_rows) * mesh.die_rows)
            hi = min(hi, ((y + r - 1) // mesh.die_rows + 1) * mesh.die_rows)
        fence = self.problem.fences[k] if self.problem.fences else None
        if fence is not None:  # stay inside the area the user gave it
            lo, hi = max(lo, fence[0]), min(hi, fence[0] + fence[2])
        return lo, hi

    def move(self, k: int, row: int) -> None:
        y, x, r, c = (int(v) for v in self.rects[k])
        self.occ[y : y + r, x : x + c] = -1
        self.occ[row : row + r, x : x + c] = k
        self.rects[k, 0] = row

    def span_cols(self, k: int) -> tuple[int, int]:
        """[lo, hi): the columns kernel k's rows leave free around its rectangle (the contest: no dies,
        areas or fixed corners)."""
        y, x, r, c = (int(v) for v in self.rects[k])
        cols = self.occ.shape[1]
        if (x == 0 or (self.occ[y : y + r, x - 1] != -1).any()) and (x + c == cols or (self.occ[y : y + r, x + c] != -1).any()):
            return x, x + c
        band = self.occ[y : y + r, :]
        free = ((band == -1) | (band == k)).all(axis=0)
        blocked_left = np.flatnonzero(~free[:x])
        blocked_right = np.flatnonzero(~free[x + c :])
        lo = int(blocked_left[-1]) + 1 if blocked_left.size else 0
        hi = x + c + int(blocked_right[0]) if blocked_right.size else free.size
        return lo, hi

    def move_col(self, k: int, col: int) -> None:
        y, x, r, c = (int(v) for v in self.rects[k])
        self.occ[y : y + r, x : x + c] = -1
        self.occ[y : y + r, col : col + c] = k
        self.rects[k, 1] = col


def _neighbours(problem: PlacementProblem) -> Neighbours:
    """Per kernel: its producers and its consumers, with the bytes of each flow."""
    n = problem.n_kernels
    producers: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    consumers: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    fl = problem.flows
    for s, t, b in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), strict=True):
        producers[t].append((s, b))
        consumers[s].append((t, b))
    return producers, consumers


def _proposal(problem: PlacementProblem, lat: np.ndarray, layout: _Layout, k: int, neighbours: Neighbours) -> int | None:
    """The row kernel k should move to (None: stay): least (worst distance-driven stage time among k
    and its consumers, bytes x hops of its flows), op-model latencies ``lat``."""
    producers, consumers = neighbours
    y, x, r, c = (int(v) for v in layout.rects[k])
    lo, hi = layout.span(k)
    if hi - lo == r:
        return None
    hop = problem.mesh.hop_latency
    rows = {lo, hi - r, y}
    for j, _ in producers[k] + consumers[k]:
        jy, jr = int(layout.rects[j, 0]), int(layout.rects[j, 2])
        for v in (jy, jy + jr - r, jy + jr - 1, jy - r + 1):  # aligned edges, or one row of overlap
            rows.add(min(max(v, lo), hi - r))

    def dist(a: tuple[int, ...], b: tuple[int, ...]) -> int:
        # ``wsealloc.cost.comm.rect_distance`` for one pair, without numpy's per-call overhead
        dy = max(0, b[0] - (a[0] + a[2] - 1), a[0] - (b[0] + b[2] - 1))
        dx = max(0, b[1] - (a[1] + a[3] - 1), a[1] - (b[1] + b[3] - 1))
        return dx + dy

    rects = [tuple(v) for v in layout.rects.tolist()]
    if not problem.objective.charges_communication:
        # the contest: the vertical part of the centre distances to its neighbours (in half rows)
        centres = [2 * int(rects[j][0]) + int(rects[j][2]) for j, _ in producers[k] + consumers[k]]
        # centre on a neighbour's (the optimum is a median; a half-row centre: the rows either side)
        rows |= {min(max((cy - r + d) // 2, lo), hi - r) for cy in centres for d in (0, 1)}

        def wire_cost(row: int) -> tuple[int, float]:
            return 0, float(sum(abs(2 * row + r - cy) for cy in centres))

        best_row = min(sorted(rows), key=wire_cost)
        return best_row if wire_cost(best_row) < wire_cost(y) else None

    def cost(row: int) -> tuple[int, float]:
        me = (row, x, r, c)
        worst = int(lat[k]) + hop * max([dist(me, rects[p]) for p, _ in producers[k]], default=0)
        traffic = sum(b * dist(me, rects[p]) for p, b in producers[k])
        for t, b in consumers[k]:
            far = max(dist(me, rects[t]) if p == k else dist(rects[p], rects[t]) for p, _ in producers[t])
            worst = max(worst, int(lat[t]) + hop * far)
            traffic += b * dist(me, rects[t])
        return worst, traffic

    best = min(sorted(rows), key=cost)
    return best if cost(best) < cost(y) else None


def _column_proposal(layout: _Layout, k: int, neighbours: Neighbours) -> int | None:
    """The contest: the column kernel k should slide to within the columns its rows leave free (None:
    stay), by the horizontal part of its wires' centre distances (in half columns; a median of its
    neighbours' centres is optimal)."""
    producers, consumers = neighbours
    _, x, _, c = (int(v) for v in layout.rects[k])
    lo, hi = layout.span_cols(k)
    if hi - lo == c:
        return None
    centres = [2 * int(layout.rects[j, 1]) + int(layout.rects[j, 3]) for j, _ in producers[k] + consumers[k]]
    # (a centre on a half column: the columns either side of it)
    cols = {lo, hi - c, x} | {min(max((cx - c + d) // 2, lo), hi - c) for cx in centres for d in (0, 1)}

    def wire_cost(col: int) -> int:
        return sum(abs(2 * col + c - cx) for cx in centres)

    best = min(sorted(cols), key=wire_cost)
    return best if wire_cost(best) < wire_cost(x) else None


def align(
    problem: PlacementProblem, placed: Placed, deadline: Deadline | None = None, one_by_one: bool = True
) -> tuple[Placed, Score]:
    """``placed`` with kernels slid vertically to shorten their flows, and its ``strips.score``: never
    worse than ``placed``'s (then ``placed`` itself). Without ``one_by_one`` only the all-at-once pass
    runs (one evaluation of the communication model: cheap enough for every start of a multi-start)."""
    neighbours = _neighbours(problem)
    original = score(problem, placed)
    lat = placed.latency

    together = _Layout(problem, placed.rects)
    moved = False
    # the contest: kernels slide sideways too (its wires are centre to centre, each axis on its own:
    # a band's last kernels sit where the band's fill left them, far from the next band's first)
    sideways = not problem.objective.charges_communication and problem.objective.wire_weight > 0
    for _ in range(SWEEPS):
        for k in range(problem.n_kernels):
            row = _proposal(problem, lat, together, k, neighbours)
            if row is not None:
                together.move(k, row)
                moved = True
            col = _column_proposal(together, k, neighbours) if sideways and not problem.fixed(k) else None
            if col is not None:
                together.move_col(k, col)
                moved = True
    best_rects, best_score = placed.rects, original
    if moved:
        all_at_once = score(problem, Placed(together.rects, placed.dataflow, placed.latency))
        if all_at_once < best_score:
            best_rects, best_score = together.rects, all_at_once

    if one_by_one:
        single = _Layout(problem, best_rects)
        current = best_score
        for _ in range(SWEEPS):
            for k in range(problem.n_kernels):
                if deadline is not None and deadline.expired():
                    break
                row = _proposal(problem, lat, single, k, neighbours)
                if row is None:
                    continue
                previous = int(single.rects[k, 0])
                single.move(k, row)
                trial = score(problem, Placed(single.rects, placed.dataflow, placed.latency))
                if trial < current:
                    current = trial
                else:
                    single.move(k, previous)
        if current < best_score:
            best_rects, best_score = single.rects, current
    if best_score >= original:
        return placed, original
    return Placed(best_rects.copy(), placed.dataflow, placed.latency), best_score
