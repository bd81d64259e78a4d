"""Pins repaired: a layout built without the user's fixed corners, then each pinned kernel moved to its
corner and the kernels it lands on moved to free cores nearby (issue 37).

The strip construction honours a fixed corner by building around it (``strips.construct``: pinned
kernels first, then bands on what is left, sliding past them, or the first-fit fallback). Corners in
the middle of the wafer split every band, so the bands pack only at slow targets: under the constraints
benchmark's five corners GPT-2 used 62% of the wafer at 1.55x its bound. Corners usually come from
another plan (``--from-plan old.json --keep``: "keep these where they were"), whose layout put the
kernels around them; the construction without the corners finds such a layout again, and moving a
few kernels is cheaper than splitting every band. So the engine also builds the layout without the
corners (the rest of the user's rules kept: keep-outs, areas, groups), then repairs it:

1. each pinned kernel takes its corner, keeping its rectangle where that lies on cores free of the
   other pinned kernels, keep-outs and defects (and inside its area), else the fewest-core rectangle
   there meeting its latency;
2. every other kernel its rectangle now overlaps is lifted and put, in dataflow order, at the free
   spot nearest its old corner: its own shape first, then other shapes no slower, then slower ones,
   fewest cores first.

None where a kernel finds no spot, a group stops touching, or crossing dies is forbidden (the spots
are not searched per die); the engine then keeps the construction's layout. Whichever ranks better
is improved further (``place.improve``).
"""

from __future__ import annotations

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.problem.placement import INF, PlacementProblem
from wsealloc.solvers.strips import Placed

Box = tuple[int, int, int, int]  # row, col, rows, cols


def _prefix(taken: np.ndarray) -> np.ndarray:
    """2D prefix sums of a boolean grid (a rectangle's taken cores in O(1))."""
    out = np.zeros((taken.shape[0] + 1, taken.shape[1] + 1), dtype=np.int32)
    out[1:, 1:] = taken.cumsum(0, dtype=np.int32).cumsum(1, dtype=np.int32)
    return out


def _nearest(prefix: np.ndarray, area: Box, r: int, c: int, y: int, x: int) -> tuple[int, int] | None:
    """The corner inside ``area`` nearest (y, x) (L1, ties to the top left) of an r x c rectangle on
    free cores (None: none). The whole area is searched: a lifted kernel goes wherever it fits."""
    ay, ax, ar, ac = area
    if r > ar or c > ac:
        return None
    window = prefix[ay : ay + ar + 1, ax : ax + ac + 1]
    used = window[r:, c:] - window[:-r, c:] - window[r:, :-c] + window[:-r, :-c]
    ys, xs = np.arange(ay, ay + ar - r + 1), np.arange(ax, ax + ac - c + 1)
    far = np.abs(ys - y)[:, None] + np.abs(xs - x)[None, :]
    far = np.where(used == 0, far, np.iinfo(np.int64).max)
    i = int(np.argmin(far))
    if far.flat[i] == np.iinfo(np.int64).max:
        return None
    return int(ys[i // far.shape[1]]), int(xs[i % far.shape[1]])


def _options(problem: PlacementProblem, k: int, latency: int) -> list[tuple[int, int, int, int]]:
    """(rows, cols, latency, code) of kernel k's legal rectangles, one per height: those no slower than
    ``latency`` first (fewest cores first), then the slower ones (fastest first)."""
    shape = problem.shape(k)
    fast: list[tuple[int, int, int, int]] = []
    slow: list[tuple[int, int, int, int]] = []
    for h in range(shape.heights.size):
        c = shape.width_for(h, latency)
        if c > 0:
            c = int(shape.prefix_width[h, c])
            fast.append((int(shape.best_r[h, c]), c, int(shape.best[h, c]), int(shape.best_df[h, c])))
            continue
        legal = np.flatnonzero(shape.prefix[h] < INF)
        if legal.size:
            c = int(shape.prefix_width[h, int(legal[-1])])
            slow.append((int(shape.best_r[h, c]), c, int(shape.best[h, c]), int(shape.best_df[h, c])))
    return sorted(set(fast), key=lambda o: (o[0] * o[1], o[2])) + sorted(set(slow), key=lambda o: (o[2], o[0] * o[1]))


def _area(problem: PlacementProblem, k: int) -> Box:
    """The rectangle kernel k must stay within: its area (fence), else the wafer."""
    fence = problem.fences[k] if problem.fences else None
    return fence if fence is not None else (0, 0, problem.mesh.rows, problem.mesh.cols)


def repair(problem: PlacementProblem, placed: Placed) -> Placed | None:
    """``placed`` (a layout of ``problem`` built without its fixed corners) with every pinned kernel at
    its corner and the kernels those land on moved to free cores (module docstring); None where that
    fails."""
    pinned = [k for k in range(problem.n_kernels) if problem.pins and problem.pins[k] is not None]
    if not pinned or problem.die_rule is DieBoundary.FORBID:
        return None
    rects, codes, latency = placed.rects.copy(), placed.dataflow.copy(), placed.latency.copy()
    taken = problem.blocked.copy()
    for k in pinned:
        y, x = problem.pins[k]  # type: ignore[misc]
        here = int(rects[k, 2]), int(rects[k, 3]), int(latency[k]), int(codes[k])
        done = False
        for r, c, lat, code in [here, *_options(problem, k, int(latency[k]))]:
            ay, ax, ar, ac = _area(problem, k)
            inside = ay <= y and ax <= x and y + r <= ay + ar and x + c <= ax + ac
            if inside and not taken[y : y + r, x : x + c].any():
                rects[k], latency[k], codes[k] = (y, x, r, c), lat, code
                taken[y : y + r, x : x + c] = True
                done = True
                break
        if not done:
            return None
    fixed = set(pinned)
    lifted = [
        j
        for j in range(problem.n_kernels)
        if j not in fixed and bool(taken[rects[j, 0] : rects[j, 0] + rects[j, 2], rects[j, 1] : rects[j, 1] + rects[j, 3]].any())
    ]
    for j in range(problem.n_kernels):
        if j not in fixed and j not in lifted:
            y, x, r, c = (int(v) for v in rects[j])
            taken[y : y + r, x : x + c] = True
    for j in lifted:
        prefix = _prefix(taken)
        y0, x0 = int(rects[j, 0]), int(rects[j, 1])
        here = int(rects[j, 2]), int(rects[j, 3]), int(latency[j]), int(codes[j])
        spot = None
        for r, c, lat, code in [here, *_options(problem, j, int(latency[j]))]:
            corner = _nearest(prefix, _area(problem, j), r, c, y0, x0)
            if corner is not None:
                spot = (corner, r, c, lat, code)
                break
        if spot is None:
            return None
        (y, x), r, c, lat, code = spot
        rects[j], latency[j], codes[j] = (y, x, r, c), lat, code
        taken[y : y + r, x : x + c] = True
    if problem.violations(rects):
        return None
    return Placed(rects, codes, latency)
