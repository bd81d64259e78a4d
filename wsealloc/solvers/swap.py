"""Exchange kernels between the rectangles of a layout to shorten wires (the contest objective).

A layout's rectangles are *containers*: any kernel may sit in any container with its fastest op
model that fits inside it (top-left corner, as the strip construction places them). Two kernels can
therefore trade containers, each re-choosing its model for the other's room, and the layout stays
legal (the containers never overlap). ``swap_kernels`` keeps an exchange when the largest kernel time
does not grow (both new times within the layout's current largest time) and the total
centre-to-centre wirelength shrinks: hill climbing over all pairs until a pass changes nothing or
the deadline comes. Kernels of one class (the same op models) in equal containers trade without any
change of time.

Why: the strip construction decides which rectangle a kernel gets by its position in the sequence it
follows. In the density order (``solvers.place.sequences``) kernels are grouped by size, far from
their producers and consumers; exchanging them back towards their neighbours recovers much of the
wirelength the dataflow order would have had, at the density order's time.

ONNX layouts are left alone: their communication cost is congestion as well as distance, and an
exchange would need the whole model re-evaluated per proposal.
"""

from __future__ import annotations

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.problem.placement import INF, PlacementProblem
from wsealloc.solvers.strips import Placed

MAX_PASSES = 20


def swap_kernels(problem: PlacementProblem, placed: Placed, deadline: Deadline) -> Placed:
    """``placed`` with kernels exchanged between containers wherever that shortens the wirelength
    without a slower largest kernel (the contest only; ONNX layouts are returned as they are)."""
    if problem.objective.wire_weight <= 0 or problem.flows.src.size == 0 or problem.n_kernels < 2:
        return placed  # (with wires weightless an exchange cannot lower the score, only add kernels at the top time)
    return _climb(problem, placed, deadline)


def _fastest_in(problem: PlacementProblem, k: int, rows: int, cols: int) -> tuple[int, int, int, int] | None:
    """(latency, rows, cols, code) of kernel k's fastest model within rows x cols (None: none fits)."""
    shape = problem.shape(k)
    h = shape.height_index(rows)
    c = min(cols, shape.prefix.shape[1] - 1)
    if h < 0 or shape.prefix[h, c] >= INF:
        return None
    w = int(shape.prefix_width[h, c])
    return int(shape.prefix[h, c]), int(shape.best_r[h, w]), w, int(shape.best_df[h, w])


def _climb(problem: PlacementProblem, placed: Placed, deadline: Deadline) -> Placed:
    """Pairwise exchanges until no exchange shortens the wires (or the deadline)."""
    n = problem.n_kernels
    neighbours: list[list[int]] = [[] for _ in range(n)]  # one entry per flow (a flow counts once per end)
    for s, t in zip(problem.flows.src.tolist(), problem.flows.dst.tolist(), strict=True):
        if s != t:
            neighbours[s].append(t)
            neighbours[t].append(s)
    box = [tuple(int(v) for v in r) for r in placed.rects.tolist()]  # containers: row, col, rows, cols
    limit = int(placed.latency.max())
    home = list(range(n))  # kernel k sits in container home[k]
    rect = [list(r) for r in box]
    code = [int(v) for v in placed.dataflow.tolist()]
    lat = [int(v) for v in placed.latency.tolist()]
    fits: dict[tuple[int, int], tuple[int, int, int, int] | None] = {}  # (kernel class, container) -> model

    def model_in(k: int, container: int) -> tuple[int, int, int, int] | None:
        """(latency, rows, cols, code) of kernel k's fastest model inside a container (None: none fits)."""
        key = (problem.kernel_class[k], container)
        if key not in fits:
            fits[key] = _fastest_in(problem, k, box[container][2], box[container][3])
        return fits[key]

    def centre(r: list[int] | tuple[int, ...]) -> tuple[int, int]:  # half tiles: exact integers
        return 2 * r[0] + r[2], 2 * r[1] + r[3]

    def cost(k: int, y: int, x: int, skip: int) -> int:
        return sum(abs(y - ys[m]) + abs(x - xs[m]) for m in neighbours[k] if m != skip)

    changed = False
    cy, cx = zip(*(centre(r) for r in rect), strict=True)
    ys, xs = list(cy), list(cx)
    for _ in range(MAX_PASSES):
        improved = False
        for a in range(n):
            for b in range(a + 1, n):
                ma, mb = model_in(a, home[b]), model_in(b, home[a])
                if ma is None or mb is None or ma[0] > limit or mb[0] > limit:
                    continue
                ra = [box[home[b]][0], box[home[b]][1], ma[1], ma[2]]
                rb = [box[home[a]][0], box[home[a]][1], mb[1], mb[2]]
                (ya, xa), (yb, xb) = centre(ra), centre(rb)
                link = sum(1 for m in neighbours[a] if m == b)  # flows between a and b themselves
                after = cost(a, ya, xa, b) + cost(b, yb, xb, a) + link * (abs(ya - yb) + abs(xa - xb))
                before = cost(a, ys[a], xs[a], b) + cost(b, ys[b], xs[b], a) + link * (abs(ys[a] - ys[b]) + abs(xs[a] - xs[b]))
                if after < before:
                    home[a], home[b] = home[b], home[a]
                    rect[a], rect[b] = ra, rb
                    lat[a], lat[b], code[a], code[b] = ma[0], mb[0], ma[3], mb[3]
                    ys[a], xs[a], ys[b], xs[b] = ya, xa, yb, xb
                    improved = changed = True
            if deadline.expired():
                break
        if not improved or deadline.expired():
            break
    if not changed:
        return placed
    return Placed(
        np.array(rect, dtype=placed.rects.dtype),
        np.array(code, dtype=placed.dataflow.dtype),
        np.array(lat, dtype=placed.latency.dtype),
    )
