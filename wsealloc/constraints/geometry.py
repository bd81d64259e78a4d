"""Where rectangles fit among the user's keep-out areas (pure numpy, exact).

Boxes are ``(row, col, rows, cols)``, half-open. The keep-outs are few rectangles, so every maximal
empty rectangle of an area has its sides on the area's edges or on keep-out edges: enumerating the
rectangles of that compressed grid finds, for every height, the widest free rectangle exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Box = tuple[int, int, int, int]


def _clip(box: Box, area: Box) -> Box | None:
    """The part of ``box`` inside ``area`` (None when they do not meet)."""
    y0, x0 = max(box[0], area[0]), max(box[1], area[1])
    y1, x1 = min(box[0] + box[2], area[0] + area[2]), min(box[1] + box[3], area[1] + area[3])
    return (y0, x0, y1 - y0, x1 - x0) if y0 < y1 and x0 < x1 else None


def free_widths(area: Box, obstacles: Sequence[Box]) -> np.ndarray:
    """[area rows + 1]: entry h is the widest free rectangle of at least h rows inside ``area`` that
    meets no obstacle (entry 0: the area's width; non-increasing)."""
    y0, x0, rows, cols = area
    out = np.zeros(rows + 1, dtype=np.int64)
    if rows <= 0 or cols <= 0:
        return out
    inside = [b for b in (_clip(o, area) for o in obstacles) if b is not None]
    if not inside:
        out[:] = cols
        return out
    ys = np.unique([y0, y0 + rows, *[b[0] for b in inside], *[b[0] + b[2] for b in inside]])
    xs = np.unique([x0, x0 + cols, *[b[1] for b in inside], *[b[1] + b[3] for b in inside]])
    blocked = np.zeros((ys.size - 1, xs.size - 1), dtype=np.int64)
    for by, bx, br, bc in inside:
        i0, i1 = np.searchsorted(ys, by), np.searchsorted(ys, by + br)
        j0, j1 = np.searchsorted(xs, bx), np.searchsorted(xs, bx + bc)
        blocked[i0:i1, j0:j1] = 1
    prefix = np.zeros((ys.size, xs.size), dtype=np.int64)
    prefix[1:, 1:] = np.cumsum(np.cumsum(blocked, axis=0), axis=1)
    span = xs[None, :] - xs[:, None]  # [a, b]: width of columns xs[a]..xs[b]
    ahead = span > 0
    for i in range(ys.size - 1):
        for j in range(i + 1, ys.size):
            count = prefix[j][None, :] - prefix[i][None, :] - prefix[j][:, None] + prefix[i][:, None]
            free = (count == 0) & ahead
            if free.any():
                h = int(ys[j] - ys[i])
                out[h] = max(out[h], int(span[free].max()))
    return np.maximum.accumulate(out[::-1])[::-1]


def largest_free(area: Box, obstacles: Sequence[Box]) -> Box:
    """The free rectangle of most cores inside ``area`` that meets no obstacle (the area itself when
    none is inside it); ties: the first found, top-left first."""
    y0, x0, rows, cols = area
    inside = [b for b in (_clip(o, area) for o in obstacles) if b is not None]
    if not inside or rows <= 0 or cols <= 0:
        return area
    ys = np.unique([y0, y0 + rows, *[b[0] for b in inside], *[b[0] + b[2] for b in inside]])
    xs = np.unique([x0, x0 + cols, *[b[1] for b in inside], *[b[1] + b[3] for b in inside]])
    blocked = np.zeros((ys.size - 1, xs.size - 1), dtype=np.int64)
    for by, bx, br, bc in inside:
        rows_in = slice(int(np.searchsorted(ys, by)), int(np.searchsorted(ys, by + br)))
        blocked[rows_in, int(np.searchsorted(xs, bx)) : int(np.searchsorted(xs, bx + bc))] = 1
    prefix = np.zeros((ys.size, xs.size), dtype=np.int64)
    prefix[1:, 1:] = np.cumsum(np.cumsum(blocked, axis=0), axis=1)
    span = xs[None, :] - xs[:, None]
    best: tuple[int, Box] = (0, (y0, x0, 0, 0))
    for i in range(ys.size - 1):
        for j in range(i + 1, ys.size):
            count = prefix[j][None, :] - prefix[i][None, :] - prefix[j][:, None] + prefix[i][:, None]
            free = (count == 0) & (span > 0)
            if free.any():
                a, b = np.unravel_index(int(np.argmax(np.where(free, span, 0))), span.shape)
                cores = int(span[a, b]) * int(ys[j] - ys[i])
                if cores > best[0]:
                    best = (cores, (int(ys[i]), int(xs[a]), int(ys[j] - ys[i]), int(span[a, b])))
    return best[1]


def fits_within(r: np.ndarray, c: np.ndarray, area: Box, obstacles: Sequence[Box]) -> np.ndarray:
    """Whether an ``r x c`` rectangle fits somewhere inside ``area`` clear of ``obstacles`` (per shape)."""
    widths = free_widths(area, obstacles)
    tall = r <= area[2]
    return tall & (c <= widths[np.minimum(r, area[2])])


def fits_at(
    r: np.ndarray, c: np.ndarray, corner: tuple[int, int], wafer: tuple[int, int], obstacles: Sequence[Box]
) -> np.ndarray:
    """Whether an ``r x c`` rectangle with its top-left core at ``corner`` lies on the wafer and meets
    no obstacle (per shape)."""
    y, x = corner
    ok = (y + r <= wafer[0]) & (x + c <= wafer[1])
    for by, bx, br, bc in obstacles:
        ok &= ~((y < by + br) & (by < y + r) & (x < bx + bc) & (bx < x + c))
    return ok


def overlap(a: Box, b: Box) -> bool:
    """Whether two boxes share a core."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def touching(a: Box, b: Box) -> bool:
    """Whether two boxes that share no core lie side by side: an edge of one along an edge of the
    other for at least one core (corners meeting diagonally do not touch; flows cross edges)."""
    rows_meet = a[0] < b[0] + b[2] and b[0] < a[0] + a[2]
    cols_meet = a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
    beside = (a[1] + a[3] == b[1] or b[1] + b[3] == a[1]) and rows_meet
    stacked = (a[0] + a[2] == b[0] or b[0] + b[2] == a[0]) and cols_meet
    return beside or stacked


def connected(boxes: Sequence[Box]) -> bool:
    """Whether ``boxes`` form one group in which every box touches another, through the others (a
    path of touching boxes between any two). One box or none: connected."""
    if len(boxes) <= 1:
        return True
    seen, todo = {0}, [0]
    while todo:
        i = todo.pop()
        for j in range(len(boxes)):
            if j not in seen and touching(boxes[i], boxes[j]):
                seen.add(j)
                todo.append(j)
    return len(seen) == len(boxes)


def free_cores(area: Box, obstacles: Sequence[Box]) -> int:
    """Cores of ``area`` outside every obstacle."""
    y0, x0, r, c = area
    mask = np.zeros((max(r, 0), max(c, 0)), dtype=bool)
    for by, bx, br, bc in obstacles:
        mask[max(by - y0, 0) : max(by + br - y0, 0), max(bx - x0, 0) : max(bx + bc - x0, 0)] = True
    return r * c - int(mask.sum())


def contains(outer: Box, inner: Box) -> bool:
    """Whether box ``inner`` lies inside box ``outer``."""
    inside_rows = outer[0] <= inner[0] and inner[0] + inner[2] <= outer[0] + outer[2]
    return inside_rows and outer[1] <= inner[1] and inner[1] + inner[3] <= outer[1] + outer[3]


def union_cores(boxes: Sequence[Box], wafer: tuple[int, int]) -> int:
    """Cores covered by at least one box (clipped to the wafer)."""
    if not boxes:
        return 0
    mask = np.zeros(wafer, dtype=bool)
    for y, x, r, c in boxes:
        mask[max(y, 0) : y + r, max(x, 0) : x + c] = True
    return int(mask.sum())
