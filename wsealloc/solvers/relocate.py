"""Relocation search: the slowest kernels moved onto faster rectangles in free cores (issue 37).

Bands leave cores idle where a band is taller than its kernels (ResNet-50 on wse2: 13% of the wafer,
mostly in one block under the short kernels of its first band), and the user's corners and keep-outs
split bands so that a kernel ends up far from its producer. Neither is a question of the band family's
parameters; a move out of the bands is. Each move takes one of the slowest kernels (never one that
touches the user's group; one the user pinned keeps its corner) to a faster legal rectangle (the shape
table's cells below its stage time, the fastest of the smallest that fits first) on free cores: at the
free spot nearest its old corner, or nearest the centre of its producers and consumers (within
``NEAR`` cores: a far spot stretches its flows past what it gains). Every candidate is judged by
the problem's own ``evaluate`` (the communication model the plan reports: distance, congestion, die
crossings), and a move is kept when the stage times, slowest first, improve (leximax: the bottleneck
never rises, and among layouts with the same bottleneck the next slowest kernel counts, so ties of
identical layers fall one at a time); the first such move found is taken.
Where no single move helps, the moves that speed up the slowest kernel are followed by a move of the
kernel each made slowest (an ejection chain of two: the slowest kernel leaves, its consumer follows),
a kernel boxed in (pinned, or with no free spot) takes a faster rectangle at its corner that covers
one other kernel, which moves to free cores elsewhere (an eviction), and where no core is free the
slowest kernel or a far producer of it trades places with a kernel it touches along a row or column,
both keeping their rectangles (an exchange: a one-column layer norm behind the up-projection it feeds
is next to the down-projection that takes it as the residual). A slow kernel may also squeeze its
neighbours (tried before the eviction: measured on ResNet-50 wse3, 1,492 cycles against 1,511 after
it): a faster rectangle near its own takes a strip of at most ``SQUEEZED`` kernels, each of which
re-takes its fastest shape within what is left of its rectangle (a kernel with time to spare gives up
a few columns). Last, a slow kernel may grow in place and push the kernels in its way along the row
or column it grows in, each keeping its rectangle, into the idle cores at the end of the line (the
bands leave those at a band's end and at the wafer's edge, seldom beside the slowest kernel).

The layouts it produces honour the user's rules by construction: a pinned kernel keeps its corner,
a group's members never move, moves only use cores that are free (keep-outs and defects are blocked),
every candidate passes ``PlacementProblem.violations`` (areas, groups) and, with ``die_boundary:
forbid``, stays inside one die. A kernel held far from its producer (pinned, or with no free spot
nearer) has the producer brought next to it instead. The engine (``solvers.place.solve``) keeps the
result only where its score beats the strip layout's.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.cost.comm import die_crossings, rect_distance
from wsealloc.problem.objective import Aggregate
from wsealloc.problem.placement import INF, PlacementProblem
from wsealloc.solvers.strips import Placed

SLOWEST = 6  # kernels, slowest first, a round tries to move
CHAIN = 6  # first moves of the slowest kernel followed by a second move
TARGETS = 6  # latency targets per height between the bound and the kernel's stage
MOST_SHAPES = 40  # shapes per move, fewest cores first (the small ones are the ones that fit)
NEAR = 160  # rows and columns around a wanted corner searched for a free one
SQUEEZED = 2  # kernels a faster rectangle may take a strip of (``_Search._squeeze``)
SPAN = 16  # corners per side of a squeezing rectangle, besides those on its neighbours' edges
PUSHED = 16  # kernels a growing rectangle may push aside along a row or a column (``_Search._push``)


def _before(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether stage times ``a`` come before ``b`` in leximax order (both sorted slowest first)."""
    differ = np.flatnonzero(a != b)
    return bool(differ.size) and bool(a[differ[0]] < b[differ[0]])


def _shapes(problem: PlacementProblem, k: int, below: int) -> list[tuple[int, int, int, int]]:
    """(rows, cols, latency, op-model code) of kernel k's rectangles faster than ``below``: per height
    the narrowest meeting each of ``TARGETS`` latencies between the bound and ``below``, fewest cores
    first."""
    shape = problem.shape(k)
    lo = min(problem.lower_bound, below - 1)
    targets = np.unique(np.linspace(lo, below - 1, TARGETS).astype(np.int64))
    found: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for h in range(shape.heights.size):
        for t in targets.tolist():
            c = shape.width_for(h, int(t))
            if c <= 0:
                continue
            c = int(shape.prefix_width[h, c])
            r, lat = int(shape.best_r[h, c]), int(shape.best[h, c])
            if lat < below and lat < INF and (r, c) not in found:
                found[(r, c)] = (r, c, lat, int(shape.best_df[h, c]))
    # the fewest cores first among MOST_SHAPES, then the fastest first: a move is kept at its first
    # improvement, so the fastest rectangle that fits wins
    smallest = sorted(found.values(), key=lambda o: (o[0] * o[1], o[2]))[:MOST_SHAPES]
    return sorted(smallest, key=lambda o: (o[2], o[0] * o[1]))


Box = tuple[int, int, int, int]  # row, col, rows, cols


def _free(prefix: np.ndarray, own: Box, y: int, x: int, r: int, c: int) -> bool:
    """Whether the r x c rectangle at (y, x) covers no taken core but the moving kernel's own
    (``prefix``: 2D prefix sums of the taken cores, ``own`` among them)."""
    taken = int(prefix[y + r, x + c] - prefix[y, x + c] - prefix[y + r, x] + prefix[y, x])
    oy, ox, orows, ocols = own
    mine = max(0, min(y + r, oy + orows) - max(y, oy)) * max(0, min(x + c, ox + ocols) - max(x, ox))
    return taken == mine


def _near(prefix: np.ndarray, r: int, c: int, y: int, x: int) -> Box | None:
    """The corners (first row, last row, first col, last col) within ``NEAR`` of (y, x) at which an
    r x c rectangle lies on the wafer (None: none)."""
    rows, cols = prefix.shape[0] - 1 - r, prefix.shape[1] - 1 - c  # the last corners that fit
    y0, y1 = max(0, min(rows, y) - NEAR), min(rows, max(0, y) + NEAR)
    x0, x1 = max(0, min(cols, x) - NEAR), min(cols, max(0, x) + NEAR)
    return None if y0 > y1 or x0 > x1 else (y0, y1, x0, x1)


def _free_corners(prefix: np.ndarray, own: Box, r: int, c: int, box: Box) -> tuple[np.ndarray, np.ndarray]:
    """The corners in ``box`` (first row, last row, first col, last col), row-major, of r x c
    rectangles covering no taken core but the moving kernel's own."""
    y0, y1, x0, x1 = box
    window = prefix[y0 : y1 + r + 1, x0 : x1 + c + 1]
    used = window[r:, c:] - window[:-r, c:] - window[r:, :-c] + window[:-r, :-c]
    # the moving kernel's own cores count free: subtracted only where a corner's rectangle overlaps it
    # (a dense layout leaves few free corners, so the distances are measured on those alone: the
    # eviction asks this for every shape of every kernel it moves, 6 of a 30 s constrained solve)
    oy, ox, orows, ocols = own
    a0, a1 = max(y0, oy - r + 1), min(y1, oy + orows - 1)
    b0, b1 = max(x0, ox - c + 1), min(x1, ox + ocols - 1)
    if a0 <= a1 and b0 <= b1:
        ys, xs = np.arange(a0, a1 + 1, dtype=used.dtype), np.arange(b0, b1 + 1, dtype=used.dtype)
        in_rows = np.minimum(ys + r, oy + orows) - np.maximum(ys, oy)
        in_cols = np.minimum(xs + c, ox + ocols) - np.maximum(xs, ox)
        # (``used`` is a new array: the prefix sums stay as they are)
        used[a0 - y0 : a1 - y0 + 1, b0 - x0 : b1 - x0 + 1] -= np.outer(in_rows, in_cols)
    free = np.flatnonzero(used.ravel() == 0)
    return free // used.shape[1] + y0, free % used.shape[1] + x0


def _area(box: Box) -> int:
    """Corners in a box (first row, last row, first col, last col)."""
    return (box[1] - box[0] + 1) * (box[3] - box[2] + 1)


def _nearest_free_each(
    prefix: np.ndarray, own: Box, r: int, c: int, targets: list[tuple[int, int]]
) -> list[tuple[int, int] | None]:
    """Per target (y, x), the corner nearest it (L1, ties to the top left) of an r x c rectangle
    within ``NEAR`` rows and columns of it that covers no taken core but the moving kernel's own
    (None: none). Looking near keeps a move cheap; a far spot would stretch the kernel's flows past
    what it gains. The free corners are found once over the box holding all the targets' windows
    where it is no larger than the windows together (a move asks for the corner nearest the kernel's
    own and the one nearest its neighbours' centre, usually close)."""
    boxes = [_near(prefix, r, c, y, x) for y, x in targets]
    held = [b for b in boxes if b is not None]
    if not held:
        return [None] * len(targets)
    union = (min(b[0] for b in held), max(b[1] for b in held), min(b[2] for b in held), max(b[3] for b in held))
    shared = _free_corners(prefix, own, r, c, union) if len(held) > 1 and _area(union) <= sum(map(_area, held)) else None
    out: list[tuple[int, int] | None] = []
    for (y, x), box in zip(targets, boxes, strict=True):
        if box is None:
            out.append(None)
            continue
        fy, fx = _free_corners(prefix, own, r, c, box) if shared is None else shared
        if shared is not None:  # (row-major within the union is row-major within the box)
            inside = (fy >= box[0]) & (fy <= box[1]) & (fx >= box[2]) & (fx <= box[3])
            fy, fx = fy[inside], fx[inside]
        if fy.size == 0:
            out.append(None)
            continue
        i = int(np.argmin(np.abs(fy - y) + np.abs(fx - x)))  # (row-major: ties to the top left)
        out.append((int(fy[i]), int(fx[i])))
    return out


class _Search:
    """One relocation search over a problem (its flows' neighbours kept once)."""

    def __init__(self, problem: PlacementProblem, deadline: Deadline) -> None:
        self.problem = problem
        self.deadline = deadline
        fl = problem.flows
        self.producers = [sorted(set(fl.src[fl.dst == k].tolist()) - {k}) for k in range(problem.n_kernels)]
        self.consumers = [sorted(set(fl.dst[fl.src == k].tolist()) - {k}) for k in range(problem.n_kernels)]
        self.neighbours = [sorted(set(a) | set(b)) for a, b in zip(self.producers, self.consumers, strict=True)]
        self._taken: list[tuple[np.ndarray, np.ndarray]] = []
        # ``_shapes`` per (kernel class, stage): a kernel stuck at the bottleneck is asked for the same
        # shapes every round (the constraints benchmark's ResNet-50: 13% of its relocation)
        self._shapes: dict[tuple[int, int], tuple[tuple[int, int, int, int], ...]] = {}

    def shapes(self, k: int, below: int) -> tuple[tuple[int, int, int, int], ...]:
        """``_shapes(problem, k, below)``, kept per kernel class and ``below`` (a tuple: shared)."""
        key = (int(self.problem.kernel_class[k]), below)
        if key not in self._shapes:
            self._shapes[key] = tuple(_shapes(self.problem, k, below))
        return self._shapes[key]

    def grouped(self, k: int) -> bool:
        """Whether kernel k touches a group of the user's (moving it alone could part the group)."""
        return any(k in g for g in self.problem.touch)

    def taken(self, placed: Placed, before: Placed | None = None, k: int = -1) -> np.ndarray:
        """2D prefix sums of the cores a layout takes (its rectangles, defects, keep-outs); the last
        few layouts' kept (a round asks for the same layout once per shape of every kernel it moves).
        ``before``: a layout differing from ``placed`` in kernel k's rectangle alone, whose sums are
        updated by the two rectangles' own (an eviction grows k once per shape: summing the wafer
        each time was a tenth of a constrained solve's relocation)."""
        for rects, prefix in self._taken:
            if rects is placed.rects:
                return prefix
        p = self.problem
        if before is not None:
            prefix = self.taken(before).copy()
            rows, cols = prefix.shape[0] - 1, prefix.shape[1] - 1
            for add, (y, x, r, c) in ((True, placed.rects[k]), (False, before.rects[k])):
                # a rectangle's own prefix sums: the rows and the columns of it above and left of each point
                down = np.clip(np.arange(rows + 1, dtype=np.int32) - int(y), 0, int(r))
                across = np.clip(np.arange(cols + 1, dtype=np.int32) - int(x), 0, int(c))
                (np.add if add else np.subtract)(prefix, np.outer(down, across), out=prefix)
        else:
            taken = p.blocked.astype(np.int32)  # counts: a core two rectangles cover counts twice (an eviction)
            for y, x, r, c in placed.rects.tolist():
                taken[y : y + r, x : x + c] += 1
            prefix = np.zeros((taken.shape[0] + 1, taken.shape[1] + 1), dtype=np.int32)
            prefix[1:, 1:] = taken.cumsum(0).cumsum(1)
        self._taken = [(placed.rects, prefix), *self._taken[:7]]
        return prefix

    def stages(self, placed: Placed) -> np.ndarray:
        """Every kernel's stage time in the full model."""
        stage, _ = self.problem.evaluate(placed.rects, placed.latency)
        return stage

    def moves(self, placed: Placed, k: int, below: int, ceiling: int, toward: int | None = None) -> Iterator[Placed]:
        """Layouts with kernel k on a rectangle faster than ``below`` in free cores (module docstring),
        those whose hops alone would make k or a neighbour reach ``ceiling`` left out unevaluated;
        ``toward``: a consumer k is brought next to (its four sides), instead of the usual corners."""
        p = self.problem
        rows, cols = p.mesh.rows, p.mesh.cols
        prefix = self.taken(placed)
        y0, x0, r0, c0 = (int(v) for v in placed.rects[k])
        own = (y0, x0, r0, c0)
        near = self.neighbours[k]
        rects = placed.rects
        cy = float(np.mean(rects[near, 0] + rects[near, 2] / 2)) if near else y0 + r0 / 2
        cx = float(np.mean(rects[near, 1] + rects[near, 3] / 2)) if near else x0 + c0 / 2
        producers, consumers = self.producers[k], self.consumers[k]
        pinned = bool(p.pins) and p.pins[k] is not None
        hop = p.mesh.hop_latency
        for r, c, lat, code in self.shapes(k, below):
            if r > rows or c > cols or self.deadline.expired():
                continue
            if pinned:  # the user's corner: only the rectangle there changes
                fits = y0 + r <= rows and x0 + c <= cols and _free(prefix, own, y0, x0, r, c)
                corners = [(y0, x0)] if fits else []
            elif toward is not None:  # beside the consumer: above, below, left, right of it
                ty, tx, tr, tc = (int(v) for v in rects[toward])
                wanted = sorted({(ty - r, tx), (ty + tr, tx), (ty, tx - c), (ty, tx + tc)})
                corners = sorted({spot for spot in _nearest_free_each(prefix, own, r, c, wanted) if spot is not None})
            else:  # the free corner nearest the old one, and the one nearest the neighbours' centre
                wanted = sorted({(y0, x0), (round(cy - r / 2), round(cx - c / 2))})
                corners = sorted({spot for spot in _nearest_free_each(prefix, own, r, c, wanted) if spot is not None})
            for y, x in corners:
                moved = rects.copy()
                moved[k] = (y, x, r, c)
                here = np.repeat(moved[k : k + 1], max(len(producers), len(consumers), 1), axis=0)
                if producers and lat + hop * int(rect_distance(moved[producers], here[: len(producers)]).max()) >= ceiling:
                    continue  # its producers too far: slower than the layout it should beat
                if consumers and bool(
                    (placed.latency[consumers] + hop * rect_distance(here[: len(consumers)], moved[consumers]) >= ceiling).any()
                ):
                    continue
                if p.die_rule is DieBoundary.FORBID and die_crossings(moved[k : k + 1], p.mesh.die_rows, p.mesh.die_cols)[0]:
                    continue
                if p.violations(moved):
                    continue
                latency, codes = placed.latency.copy(), placed.dataflow.copy()
                latency[k], codes[k] = lat, code
                yield Placed(moved, codes, latency)

    def better(self, placed: Placed, stage: np.ndarray) -> Placed | None:
        """A layout one move or a chain of two away that improves on ``placed`` (the first found,
        slowest kernels first; None: none)."""
        key = np.sort(stage)[::-1]
        top = int(key[0])
        for k in np.argsort(-stage, kind="stable")[:SLOWEST].tolist():
            if self.grouped(k):
                continue
            firsts: list[tuple[tuple[int, ...], Placed, np.ndarray]] = []
            for moved in self.moves(placed, k, int(stage[k]), top + 1):
                after = self.stages(moved)
                order = np.sort(after)[::-1]
                if _before(order, key):
                    return moved
                if after[k] < stage[k]:
                    firsts.append((tuple(order.tolist()), moved, after))
            firsts.sort(key=lambda f: f[0])
            for _, first, after in firsts[:CHAIN]:
                j = int(np.argmax(after))
                if j == k or self.grouped(j):
                    continue
                for moved in self.moves(first, j, int(after[j]), top + 1):
                    if _before(np.sort(self.stages(moved))[::-1], key):
                        return moved
            # a kernel kept far from its producer (the user pinned it, or no faster spot is free):
            # the producer brought next to it
            far = self._farthest_producer(placed, k)
            if far is not None:
                for moved in self.moves(placed, far, top, top + 1, toward=k):
                    if _before(np.sort(self.stages(moved))[::-1], key):
                        return moved
            exchanged = self._exchange(placed, k, key)
            if exchanged is not None:
                return exchanged
            squeezed = self._squeeze(placed, k, stage, key)
            if squeezed is not None:
                return squeezed
            evicted = self._evict(placed, k, stage, key)
            if evicted is not None:
                return evicted
            pushed = self._push(placed, k, stage, key)
            if pushed is not None:
                return pushed
            if self.deadline.expired():
                break
        return None

    def _evict(self, placed: Placed, k: int, stage: np.ndarray, key: np.ndarray) -> Placed | None:
        """Kernel k boxed in (a pinned one at its corner, any other at its old corner): a faster
        rectangle of k there that covers one other kernel, which moves to free cores elsewhere (the
        first such pair that improves on ``placed``; None: none)."""
        p = self.problem
        rows, cols = p.mesh.rows, p.mesh.cols
        y0, x0 = (int(v) for v in placed.rects[k, :2])
        top = int(key[0])
        others = np.delete(np.arange(p.n_kernels), k)
        for r, c, lat, code in self.shapes(k, int(stage[k])):
            if y0 + r > rows or x0 + c > cols or self.deadline.expired():
                continue
            o = placed.rects[others]
            covered = others[(o[:, 0] < y0 + r) & (y0 < o[:, 0] + o[:, 2]) & (o[:, 1] < x0 + c) & (x0 < o[:, 1] + o[:, 3])]
            if covered.size != 1 or p.fixed(int(covered[0])):
                continue
            grown = placed.rects.copy()
            grown[k] = (y0, x0, r, c)
            if bool(p.blocked[y0 : y0 + r, x0 : x0 + c].any()):
                continue
            latency, codes = placed.latency.copy(), placed.dataflow.copy()
            latency[k], codes[k] = lat, code
            # the covered kernel's own cores under k's new rectangle count as taken (counted twice
            # in the prefix sums, once subtracted as its own)
            bigger = Placed(grown, codes, latency)
            self.taken(bigger, placed, k)
            for moved in self.moves(bigger, int(covered[0]), top, top + 1):
                if _before(np.sort(self.stages(moved))[::-1], key):
                    return moved
        return None

    def _exchange(self, placed: Placed, k: int, key: np.ndarray) -> Placed | None:
        """Kernel k or one of its far producers swapped with a kernel it touches along a row (or a
        column), each keeping its rectangle (the first swap that improves on ``placed``; None: none).

        Where no core is free, a producer far from k can still come nearer by trading places with its
        neighbour on k's side: BERT-base's second layer norm of a block feeds the MLP's up-projection
        next to it and, as the residual, the down-projection on the far side of it (155 hops, which
        made the down-projections the bottleneck); behind the up-projection it is next to both, and
        its own producer's tensor travels the 155 hops instead, to a kernel with time to spare."""
        p = self.problem
        rects = placed.rects
        producers = self.producers[k]
        hops: list[int] = []
        if producers:
            hops = rect_distance(rects[producers], np.repeat(rects[k : k + 1], len(producers), axis=0)).tolist()
        far = [j for j, d in zip(producers, hops, strict=True) if d > 1]
        prefix = self.taken(placed)
        for a in [k, *far]:
            if p.fixed(a) or self.grouped(a):
                continue
            for b in self._touching(rects, a):
                if self.deadline.expired():
                    return None
                if p.fixed(b) or self.grouped(b):
                    continue
                swapped = _swapped(rects, a, b)
                if swapped is None or not _free_of(prefix, swapped[[a, b]], rects[[a, b]]):
                    continue
                if p.die_rule is DieBoundary.FORBID and die_crossings(swapped[[a, b]], p.mesh.die_rows, p.mesh.die_cols).any():
                    continue
                if p.violations(swapped):
                    continue
                moved = Placed(swapped, placed.dataflow, placed.latency)
                if _before(np.sort(self.stages(moved))[::-1], key):
                    return moved
            if self.deadline.expired():
                break
        return None

    def _squeeze(self, placed: Placed, k: int, stage: np.ndarray, key: np.ndarray) -> Placed | None:
        """Kernel k on a faster rectangle near its own that takes a strip of at most ``SQUEEZED``
        kernels beside it, each of which keeps the largest part of its rectangle the new one leaves and
        takes its fastest shape there (the first such layout that improves on ``placed``; None: none).

        Where no free core is near, a neighbour with time to spare can give up a few columns or rows:
        ResNet-50 on wse3's bottleneck (a 196 x 52 conv at 1,536 cycles) needs 54 columns for 1,474,
        and its consumer beside it (196 x 43 at 1,022 cycles) gives up two of them (1,053 cycles)."""
        p = self.problem
        rows, cols = p.mesh.rows, p.mesh.cols
        rects = placed.rects
        y0, x0, r0, c0 = (int(v) for v in rects[k])
        top = int(key[0])
        prefix = self.taken(placed)
        # corners: k's own edges kept, or k's new edges on the edges of the kernels that touch it
        near = self._touching(rects, k)
        edges_y = {y0, y0 + r0} | {int(v) for j in near for v in (rects[j, 0], rects[j, 0] + rects[j, 2])}
        edges_x = {x0, x0 + c0} | {int(v) for j in near for v in (rects[j, 1], rects[j, 1] + rects[j, 3])}
        others = np.delete(np.arange(p.n_kernels), k)
        o = rects[others].astype(np.int64)
        oy0, oy1, ox0, ox1 = o[:, 0], o[:, 0] + o[:, 2], o[:, 1], o[:, 1] + o[:, 3]
        pinned = bool(p.pins) and p.pins[k] is not None
        for r, c, lat, code in self.shapes(k, int(stage[k])):
            if r > rows or c > cols:
                continue
            # and corners of a taller (wider) rectangle that covers k's own rows (columns), at most
            # ``SPAN`` + 1 of them per side; a kernel the user pinned keeps its corner
            ys = sorted(edges_y | {e - r for e in edges_y} | set(range(y0 + r0 - r, y0 + 1, max(1, (r - r0) // SPAN))))
            xs = sorted(edges_x | {e - c for e in edges_x} | set(range(x0 + c0 - c, x0 + 1, max(1, (c - c0) // SPAN))))
            ys = [y for y in ys if 0 <= y <= rows - r and abs(y - y0) <= max(r0, r) and (not pinned or y == y0)]
            xs = [x for x in xs if 0 <= x <= cols - c and abs(x - x0) <= max(c0, c) and (not pinned or x == x0)]
            if not ys or not xs:
                continue
            # rows (columns) every other kernel shares with the rectangle at each corner's row (column),
            # and how many kernels each corner's rectangle lands on: corners on none (a plain move's) or
            # on more than ``SQUEEZED`` are passed over at once (the squeeze tried 60,000 corners a
            # round on ViT-B/16 under the constraints benchmark's rules, most of them such)
            ya, xa = np.array(ys, dtype=np.int64)[:, None], np.array(xs, dtype=np.int64)[:, None]
            in_rows = np.maximum(np.minimum(oy1, ya + r) - np.maximum(oy0, ya), 0)  # [corner rows, others]
            in_cols = np.maximum(np.minimum(ox1, xa + c) - np.maximum(ox0, xa), 0)  # [corner cols, others]
            lands = (in_rows > 0).astype(np.int32) @ (in_cols > 0).astype(np.int32).T
            for yi, xi in np.argwhere((lands >= 1) & (lands <= SQUEEZED)).tolist():
                y, x = ys[yi], xs[xi]
                if self.deadline.expired():
                    return None
                if (y, x, r, c) == (y0, x0, r0, c0):
                    continue
                shared = in_rows[yi] * in_cols[xi]
                hit = np.flatnonzero(shared)
                covered = others[hit]
                if any(p.fixed(int(j)) or self.grouped(int(j)) for j in covered):
                    continue
                # every other core of the new rectangle free (k's own and the squeezed kernels' aside)
                own = max(0, min(y + r, y0 + r0) - max(y, y0)) * max(0, min(x + c, x0 + c0) - max(x, x0))
                taken = int(prefix[y + r, x + c] - prefix[y, x + c] - prefix[y + r, x] + prefix[y, x])
                if taken != own + int(shared[hit].sum()):
                    continue
                for moved in self._squeezed(placed, k, (y, x, r, c), lat, code, [int(j) for j in covered], top):
                    if _before(np.sort(self.stages(moved))[::-1], key):
                        return moved
        return None

    def _squeezed(self, placed: Placed, k: int, box: Box, lat: int, code: int, covered: list[int], top: int) -> Iterator[Placed]:
        """Layouts with kernel k on ``box`` and each ``covered`` kernel on its fastest shape (below
        ``top``) within a part of its rectangle that ``box`` leaves (left, right, above or below it),
        against either end of that part."""
        p = self.problem
        y, x, r, c = box
        options: list[list[tuple[Box, int, int]]] = []
        for j in covered:
            jy, jx, jr, jc = (int(v) for v in placed.rects[j])
            parts = [
                (jy, jx, jr, x - jx),  # left of the box
                (jy, x + c, jr, jx + jc - x - c),  # right of it
                (jy, jx, y - jy, jc),  # above it
                (y + r, jx, jy + jr - y - r, jc),  # below it
            ]
            shape = p.shape(j)
            mine: list[tuple[Box, int, int]] = []
            for py, px, pr, pc in parts:
                if pr <= 0 or pc <= 0 or py < jy or px < jx or py + pr > jy + jr or px + pc > jx + jc:
                    continue
                h = shape.height_index(pr)
                if h < 0:
                    continue
                w = int(shape.prefix_width[h, pc])
                if w <= 0 or int(shape.best[h, w]) >= min(top, INF):
                    continue
                rr = int(shape.best_r[h, w])
                spots = {(py, px), (py + pr - rr, px + pc - w), (py, px + pc - w), (py + pr - rr, px)}
                for sy, sx in sorted(spots):
                    mine.append(((sy, sx, rr, w), int(shape.best[h, w]), int(shape.best_df[h, w])))
            if not mine:
                return
            options.append(mine)
        for combo in product(*options):
            if self.deadline.expired():
                return
            moved = placed.rects.copy()
            latency, codes = placed.latency.copy(), placed.dataflow.copy()
            moved[k] = box
            latency[k], codes[k] = lat, code
            for j, (jbox, jlat, jcode) in zip(covered, combo, strict=True):
                moved[j] = jbox
                latency[j], codes[j] = jlat, jcode
            if len(covered) > 1 and _overlap_among(moved[covered]):
                continue
            if p.die_rule is DieBoundary.FORBID and die_crossings(moved[[k, *covered]], p.mesh.die_rows, p.mesh.die_cols).any():
                continue
            if p.violations(moved):
                continue
            yield Placed(moved, codes, latency)

    def _push(self, placed: Placed, k: int, stage: np.ndarray, key: np.ndarray) -> Placed | None:
        """Kernel k on a faster rectangle grown from its own along a row (or a column), the kernels in
        the way pushed on by just as much, each keeping its rectangle (the first such layout that
        improves on ``placed``; None: none).

        Bands leave their idle cores at a band's end and under its short kernels, seldom beside the
        slowest one, and a move that needs free cores next to a kernel finds none there: ViT-B/16 on
        wse3's bottleneck (a 119 x 154 matmul, 3,478 cycles) takes four more rows when the twelve
        kernels below it move down into the idle rows at the bottom of the wafer (the relocation,
        which had no other move left at 3,479, goes on to 3,417 from the same start)."""
        p = self.problem
        rows, cols = p.mesh.rows, p.mesh.cols
        if p.fixed(k):
            return None
        y0, x0, r0, c0 = (int(v) for v in placed.rects[k])
        for r, c, lat, code in self.shapes(k, int(stage[k])):
            if r > rows or c > cols:
                continue
            # grown to the right or the left (rows kept at the top or the bottom), down or up
            boxes = [((y, x, r, c), 1, x == x0) for y in (y0, y0 + r0 - r) for x in (x0, x0 + c0 - c)]
            boxes += [((y, x, r, c), 0, y == y0) for x in (x0, x0 + c0 - c) for y in (y0, y0 + r0 - r)]
            for box, axis, ahead in dict.fromkeys(boxes):
                if self.deadline.expired():
                    return None
                if box[0] < 0 or box[1] < 0 or box[0] + r > rows or box[1] + c > cols or box == (y0, x0, r0, c0):
                    continue
                moved = _pushed(p, placed.rects, k, box, axis, ahead)
                if moved is None:
                    continue
                if p.die_rule is DieBoundary.FORBID and die_crossings(moved, p.mesh.die_rows, p.mesh.die_cols).any():
                    continue
                if p.violations(moved):
                    continue
                latency, codes = placed.latency.copy(), placed.dataflow.copy()
                latency[k], codes[k] = lat, code
                candidate = Placed(moved, codes, latency)
                if _before(np.sort(self.stages(candidate))[::-1], key):
                    return candidate
        return None

    @staticmethod
    def _touching(rects: np.ndarray, a: int) -> list[int]:
        """Kernels whose rectangles share a side with kernel a's along a row or a column."""
        y, x, r, c = (int(v) for v in rects[a])
        rows_meet = (rects[:, 0] < y + r) & (y < rects[:, 0] + rects[:, 2])
        cols_meet = (rects[:, 1] < x + c) & (x < rects[:, 1] + rects[:, 3])
        beside = rows_meet & ((rects[:, 1] + rects[:, 3] == x) | (rects[:, 1] == x + c))
        over = cols_meet & ((rects[:, 0] + rects[:, 2] == y) | (rects[:, 0] == y + r))
        return [int(b) for b in np.flatnonzero(beside | over) if b != a]

    def _farthest_producer(self, placed: Placed, k: int) -> int | None:
        """The producer of k farthest from it that may move (None: none at a distance, or fixed)."""
        producers = self.producers[k]
        if not producers:
            return None
        here = np.repeat(placed.rects[k : k + 1], len(producers), axis=0)
        hops = rect_distance(placed.rects[producers], here)
        j = producers[int(np.argmax(hops))]
        fixed = self.problem.fixed(j)
        return None if int(hops.max()) <= 1 or fixed else j


def _pushed(problem: PlacementProblem, rects: np.ndarray, k: int, box: Box, axis: int, ahead: bool) -> np.ndarray | None:
    """``rects`` with kernel k on ``box`` and every kernel it then covers shifted along ``axis`` (1:
    columns, 0: rows), forwards (``ahead``) or backwards, just past it, and so on down the line; None
    where the line reaches a kernel that lies behind the one pushing it, is fixed or in a group, the
    wafer's edge, a blocked core, or more than ``PUSHED`` kernels. The kernels pushed keep their
    shapes; each moves one way only, and after its last move whatever it covers is pushed in turn
    (the queue ends: every push moves a kernel on, towards the edge), so no two rectangles of the
    result overlap. A pushed kernel may pass one beside the line that it never touches."""
    out = rects.astype(np.int64, copy=True)
    out[k] = box
    limit = problem.mesh.cols if axis == 1 else problem.mesh.rows
    other = 1 - axis
    moved = {k}
    queue = [k]
    while queue:
        a = queue.pop()
        a0, a1 = int(out[a, axis]), int(out[a, axis] + out[a, 2 + axis])
        b0, b1 = int(out[a, other]), int(out[a, other] + out[a, 2 + other])
        along, across = out[:, axis], out[:, other]
        hit = (along < a1) & (a0 < along + out[:, 2 + axis]) & (across < b1) & (b0 < across + out[:, 2 + other])
        hit[a] = False
        for j in np.flatnonzero(hit).tolist():
            # (a kernel behind its pusher would have to jump over it; k itself never moves again;
            # forwards the box starts where its kernel started, backwards it ends where it ended)
            if ahead:
                behind = rects[j, axis] < rects[a, axis]
            else:
                behind = rects[j, axis] + rects[j, 2 + axis] > rects[a, axis] + rects[a, 2 + axis]
            moved.add(j)
            if j == k or behind or problem.fixed(j) or len(moved) > PUSHED + 1:
                return None
            out[j, axis] = a1 if ahead else a0 - out[j, 2 + axis]
            if out[j, axis] < 0 or out[j, axis] + out[j, 2 + axis] > limit:
                return None
            queue.append(j)
    blocked = problem.blocked_prefix
    for y, x, r, c in out[sorted(moved)].tolist():
        if int(blocked[y + r, x + c] - blocked[y, x + c] - blocked[y + r, x] + blocked[y, x]):
            return None
    return out


def _swapped(rects: np.ndarray, a: int, b: int) -> np.ndarray | None:
    """The layout with touching kernels a and b trading places along the side they share: the first of
    the two (left, or above) now starts where the other started, each keeping its rows (columns) and
    shape. None when they share no side."""
    first, second = sorted((a, b), key=lambda k: (int(rects[k, 1]), int(rects[k, 0])))
    f, s = rects[first], rects[second]
    out = rects.copy()
    if f[1] + f[3] == s[1]:  # side by side along a row
        out[second, 1] = f[1]
        out[first, 1] = f[1] + s[3]
        return out
    first, second = sorted((a, b), key=lambda k: (int(rects[k, 0]), int(rects[k, 1])))
    f, s = rects[first], rects[second]
    if f[0] + f[2] == s[0]:  # one above the other along a column
        out[second, 0] = f[0]
        out[first, 0] = f[0] + s[2]
        return out
    return None


def _overlap_among(rects: np.ndarray) -> bool:
    """Whether any two of a few rectangles share a core."""
    for i in range(len(rects)):
        for j in range(i + 1, len(rects)):
            (y, x, r, c), (y2, x2, r2, c2) = rects[i].tolist(), rects[j].tolist()
            if y < y2 + r2 and y2 < y + r and x < x2 + c2 and x2 < x + c:
                return True
    return False


def _free_of(prefix: np.ndarray, new: np.ndarray, old: np.ndarray) -> bool:
    """Whether the rectangles ``new`` (two kernels' after a swap) lie on the wafer, share no core and
    cover no taken core but the ones ``old`` (the same kernels' before) held (``prefix``: 2D prefix
    sums of the taken cores)."""
    rows, cols = prefix.shape[0] - 1, prefix.shape[1] - 1
    (y, x, r, c), (y2, x2, r2, c2) = new.tolist()
    if y < y2 + r2 and y2 < y + r and x < x2 + c2 and x2 < x + c:
        return False
    for y, x, r, c in new.tolist():
        if y < 0 or x < 0 or y + r > rows or x + c > cols:
            return False
        taken = int(prefix[y + r, x + c] - prefix[y, x + c] - prefix[y + r, x] + prefix[y, x])
        mine = sum(
            max(0, min(y + r, oy + orows) - max(y, oy)) * max(0, min(x + c, ox + ocols) - max(x, ox))
            for oy, ox, orows, ocols in old.tolist()
        )
        if taken != mine:
            return False
    return True


def relocates(problem: PlacementProblem) -> bool:
    """Whether the relocation applies: a min-max objective that charges communication (the contest's
    score charges none, and a token's path is not ranked by its slowest kernels)."""
    return problem.objective.charges_communication and problem.objective.aggregate is Aggregate.MAX


def relocate(problem: PlacementProblem, placed: Placed, deadline: Deadline) -> Placed:
    """``placed`` improved move by move until no move helps or ``deadline`` passes (module docstring);
    ``placed`` itself when no move helps (a min-max objective that charges communication only)."""
    if not relocates(problem):
        return placed
    search = _Search(problem, deadline)
    best = placed
    while not deadline.expired():
        found = search.better(best, search.stages(best))
        if found is None or _overlap(found.rects, problem.mesh.rows, problem.mesh.cols):
            break  # (the second: a move that broke the layout would be a bug; the layout so far stands)
        best = found
    return best


def _overlap(rects: np.ndarray, rows: int, cols: int) -> bool:
    """Whether two rectangles share a core (every move is built not to; checked before it is kept)."""
    cover = np.zeros((rows, cols), dtype=np.int32)
    for y, x, r, c in rects.tolist():
        cover[y : y + r, x : x + c] += 1
    return bool((cover > 1).any())
