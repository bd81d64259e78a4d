"""Slicing floorplans over the kernel sequence: layouts that are not bands (issue 37).

A *slicing* floorplan cuts its region in two by one straight line, side by side (a vertical cut) or
one above the other (a horizontal cut), then each part again, down to one kernel per part. Bands are
the slicing floorplans cut horizontally first and then vertically only; slicing floorplans also nest
the other way round, at any depth. Over a fixed kernel sequence whose every part is an interval
``[i, j)`` of it, Stockmeyer's shape curves give them exactly:

* ``width[i, j, h]``: the least width of a slicing layout of kernels ``i .. j-1`` (each at its
  latency target, on its own op models) within ``h`` rows, and ``height[i, j, w]`` the least height
  within ``w`` columns (the same curve read the other way);
* a kernel alone: its fewest columns of a rectangle with at most ``h`` rows meeting its target;
* an interval cut at ``k`` side by side needs ``width[i, k, h] + width[k, j, h]`` columns, one above
  the other ``height[i, k, w] + height[k, j, w]`` rows; the interval takes the better cut at each size.

``curves`` computes every interval's curves in O(n^3 (rows + cols)), vectorized over the cut, and a
sequence fits the wafer at its targets iff ``width[0, n, rows] <= cols``. Of the many floorplans that
fit, ``floorplan`` picks one top-down, as min-cut placement does: in its region each interval takes,
among the cuts whose parts fit, the one of least estimated wire (the flows the cut separates times
the distance between the parts' centres, plus each part's own flows times its half-perimeter, weighed
by ``spread``: larger values keep parts square and close). ``orient`` then mirrors and swaps parts where
that ranks the layout better (a part's exit next to the next part's entry). The slack a region leaves
goes to its parts in proportion to their widths (heights).

Measured against the strip construction (docs/ispd2020.md, "Branching graphs"; docs/benchmarks.md):
the contest's GoogLeNet under its time cap scores 38,577 with the floorplans in the multi-start
against 46,574.5 with bands alone (DenseNet-121 114,794 against 128,193.5). On the ONNX zoo the
curves pack tighter than bands with the communication ignored (ResNet-50 on wse2 fits at 1,580
cycles where bands need 1,743), but compact slicing layouts send tensors through thin rectangles and
skips past the kernels between producer and consumer: charged, even with the bundles written into
the DP as rules, ResNet-50's floorplans start at 1,887-1,923 cycles and ViT-B/16's at 5,372, behind
the bands' layouts, so the engine builds them where communication costs no cycles (the contest).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.problem.placement import PlacementProblem
from wsealloc.solvers.strips import Placed

# The DP keeps two curves per interval, n x (n + 1) x (rows + cols + 2) integers (16 bits where the
# fabric's sides allow): past this many bytes (200 kernels on the contest's 633 x 633 fabric: 97 MiB;
# 2.6 s for the DP) the strip construction is left to itself.
MOST_BYTES = 100 * 2**20
# The wire estimate's weight of each part's own flows (``floorplan``), measured on the contest's
# branching graphs at their time caps (one floorplan each, oriented): GoogLeNet is best at 4 (38,942
# against 43,633.5 at 0.25), DenseNet-121 at 0.25 without the pull (125,385.5 against 137,067 at 4)
# and at 4 with it (119,982), so each target is laid out with all of them.
SPREADS = (0.25, 1.0, 4.0)
# local search over each part's mirror and order (``orient``): passes over the tree
ORIENT_PASSES = 3


@dataclass(frozen=True)
class Curves:
    """Every interval's least width per height and least height per width (``rows + 1`` / ``cols + 1``:
    none), for one vector of latency targets."""

    targets: np.ndarray  # [n] int64
    width: np.ndarray  # [n, n + 1, rows + 1]: width[i, j, h] for i < j
    height: np.ndarray  # [n, n + 1, cols + 1]

    def fits(self, rows: int, cols: int) -> bool:
        """Whether the whole sequence has a slicing layout on ``rows`` x ``cols``."""
        return int(self.width[0, self.width.shape[0], rows]) <= cols


@dataclass(frozen=True)
class Part:
    """A node of a floorplan: one kernel (``kernel`` >= 0), or two parts side by side (``cut`` "|") or
    one above the other ("-"), the first one left (on top); ``rows`` x ``cols`` is the region it
    owns. A kernel's part holds its rectangle
    (``shape``: rows, columns, op-model code, latency): the fewest columns meeting its target within
    the region's rows."""

    rows: int
    cols: int
    kernel: int = -1
    shape: tuple[int, int, int, int] = (0, 0, 0, 0)
    cut: str = ""
    first: Part | None = None
    second: Part | None = None


def fits_memory(problem: PlacementProblem) -> bool:
    """Whether the DP's curves are small enough to build (``MOST_BYTES``); one kernel has nothing to cut."""
    n, rows, cols = problem.n_kernels, problem.mesh.rows, problem.mesh.cols
    return n >= 2 and n * (n + 1) * (rows + cols + 2) * np.dtype(_dtype(rows, cols)).itemsize <= MOST_BYTES


def _dtype(rows: int, cols: int) -> type[np.signedinteger]:
    """The curves' integers: 16 bits where two sentinels (a side + 1) add up within them."""
    return np.int16 if 2 * (max(rows, cols) + 1) < np.iinfo(np.int16).max else np.int32


def curves(problem: PlacementProblem, targets: np.ndarray, deadline: Deadline) -> Curves | None:
    """The shape curves of every interval of the kernel sequence at ``targets`` (None: the deadline
    passed first; 0.1 s for GoogLeNet's 57 kernels, 1.1 s for DenseNet-121's 120 on the contest's
    633 x 633 fabric)."""
    n = problem.n_kernels
    rows, cols = problem.mesh.rows, problem.mesh.cols
    dtype = _dtype(rows, cols)
    heights, widths = np.arange(rows + 1), np.arange(cols + 1)
    width = np.full((n, n + 1, rows + 1), cols + 1, dtype=dtype)
    height = np.full((n, n + 1, cols + 1), rows + 1, dtype=dtype)
    for k in range(n):
        w = problem.shape(k).widths_within(heights, int(targets[k]))
        width[k, k + 1] = np.where(w > 0, np.minimum(w, cols + 1), cols + 1)
        height[k, k + 1] = _heights(width[k, k + 1], widths, rows)
    for length in range(2, n + 1):
        if deadline.expired():
            return None
        for i in range(n - length + 1):
            j = i + length
            ks = np.arange(i + 1, j)
            side = (width[i, ks].astype(np.int32) + width[ks, j]).min(axis=0)
            stacked = (height[i, ks].astype(np.int32) + height[ks, j]).min(axis=0)  # non-increasing in w
            # one above the other in h rows: the fewest columns whose least height is at most h
            over = np.searchsorted(-stacked, -heights, side="left")
            width[i, j] = np.minimum(np.minimum(side, over), cols + 1)
            height[i, j] = _heights(width[i, j], widths, rows)
    return Curves(np.asarray(targets, dtype=np.int64), width, height)


def _heights(width: np.ndarray, widths: np.ndarray, rows: int) -> np.ndarray:
    """A width curve (non-increasing in the height) read as the least height per width."""
    return np.minimum(np.searchsorted(-width.astype(np.int32), -widths, side="left"), rows + 1)


def _pair_weights(problem: PlacementProblem) -> np.ndarray:
    """2-D prefix sums of the flows between kernels (a flow counted once, between its lower and higher
    index): ``_between(P, a0, a1, b0, b1)`` is the weight from ``[a0, a1)`` to ``[b0, b1)``."""
    n = problem.n_kernels
    m = np.zeros((n, n))
    fl = problem.flows
    lo, hi = np.minimum(fl.src, fl.dst), np.maximum(fl.src, fl.dst)
    keep = lo != hi
    np.add.at(m, (lo[keep], hi[keep]), 1.0)
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = np.cumsum(np.cumsum(m, axis=0), axis=1)
    return prefix


def _between(prefix: np.ndarray, a0: int, a1: int, b0: int, b1: int) -> float:
    return float(prefix[a1, b1] - prefix[a0, b1] - prefix[a1, b0] + prefix[a0, b0])


def floorplan(problem: PlacementProblem, cv: Curves, spread: float, pull: bool = False) -> Part:
    """One slicing floorplan of the whole sequence on the wafer, cut top-down (module docstring);
    ``cv`` must fit. With ``pull`` (terminal propagation, as min-cut placers do) each cut also weighs
    the flows from its two parts to the kernels outside the interval, at the centres of the regions
    those were given so far, and chooses which part goes first (left, or on top) by them: intervals
    are cut breadth-first, so every region of a level is known before the next level is cut."""
    n = problem.n_kernels
    rows, cols = problem.mesh.rows, problem.mesh.cols
    prefix = _pair_weights(problem)
    fl = problem.flows
    real = fl.src != fl.dst
    ends_in, ends_out = np.concatenate([fl.src[real], fl.dst[real]]), np.concatenate([fl.dst[real], fl.src[real]])
    centre = np.tile([rows / 2.0, cols / 2.0], (n, 1))
    # per interval its region (rows, cols) and, cut, how: (cut, k, the first part's extent, the later
    # interval first)
    region: dict[tuple[int, int], tuple[int, int]] = {}
    how: dict[tuple[int, int], tuple[str, int, int, bool]] = {}
    queue: deque[tuple[int, int, int, int, int, int]] = deque([(0, n, 0, 0, rows, cols)])
    while queue:
        i, j, y, x, h, w = queue.popleft()
        region[(i, j)] = (h, w)
        if j == i + 1:
            continue
        # (cost, cut, k, the earlier interval's extent along the cut, the later interval first)
        options: list[tuple[float, str, int, int, bool]] = []
        for k in range(i + 1, j):
            cross = _between(prefix, i, k, k, j)
            own_first, own_second = _between(prefix, i, k, i, k), _between(prefix, k, j, k, j)
            first, second = int(cv.width[i, k, h]), int(cv.width[k, j, h])
            if first + second <= w:  # side by side, the slack shared in proportion
                size = first + (w - first - second) * first // (first + second)
                cost = cross * w / 2 + spread * (own_first * (h + size) + own_second * (h + w - size)) / 2
                options.extend((cost, "|", k, size, later) for later in ((False, True) if pull else (False,)))
            first, second = int(cv.height[i, k, w]), int(cv.height[k, j, w])
            if first + second <= h:  # one above the other
                size = first + (h - first - second) * first // (first + second)
                cost = cross * h / 2 + spread * (own_first * (size + w) + own_second * (h - size + w)) / 2
                options.extend((cost, "-", k, size, later) for later in ((False, True) if pull else (False,)))
        if not options:  # (the curves say the interval fits: some cut does)
            raise AssertionError(f"kernels {i}..{j - 1}: no cut fits {h} x {w}")
        spots = [_parts(i, j, k, cut, size, later, y, x, h, w) for _, cut, k, size, later in options]
        costs = np.array([o[0] for o in options])
        outside = (ends_in >= i) & (ends_in < j) & ((ends_out < i) | (ends_out >= j))
        if pull and outside.any():
            inner, outer = ends_in[outside], ends_out[outside]
            ks = np.array([o[2] for o in options])
            earlier = inner[None, :] < ks[:, None]
            at = np.array([[a[4], a[5], b[4], b[5]] for a, b in spots], dtype=np.float64)  # the parts' centres
            cy = np.where(earlier, at[:, 0:1], at[:, 2:3])
            cx = np.where(earlier, at[:, 1:2], at[:, 3:4])
            costs = costs + (np.abs(cy - centre[outer, 0]) + np.abs(cx - centre[outer, 1])).sum(axis=1)
        best = int(np.argmin(costs))
        _, cut, k, size, later = options[best]
        how[(i, j)] = (cut, k, size, later)
        for lo, hi, (py, px, ph, pw, cy_, cx_) in ((i, k, spots[best][0]), (k, j, spots[best][1])):
            centre[lo:hi] = (cy_, cx_)  # (at once: the next cuts of this level see it)
            queue.append((lo, hi, py, px, ph, pw))

    def part(i: int, j: int) -> Part:
        h, w = region[(i, j)]
        if j == i + 1:
            shape = problem.shape(i)
            hidx = shape.height_index(h)
            c = int(shape.prefix_width[hidx, shape.width_for(hidx, int(cv.targets[i]))])
            r, code, latency = int(shape.best_r[hidx, c]), int(shape.best_df[hidx, c]), int(shape.best[hidx, c])
            return Part(h, w, kernel=i, shape=(r, c, code, latency))
        cut, k, size, later = how[(i, j)]
        first, second = (part(k, j), part(i, k)) if later else (part(i, k), part(k, j))
        return Part(h, w, cut=cut, first=first, second=second)

    return part(0, n)


Spot = tuple[int, int, int, int, float, float]  # a part's region (row, col, rows, cols) and its centre


def _parts(i: int, j: int, k: int, cut: str, size: int, later: bool, y: int, x: int, h: int, w: int) -> tuple[Spot, Spot]:
    """The regions of ``[i, k)`` (``size`` of the extent along the cut) and ``[k, j)`` in the region
    (y, x, h, w) cut ``cut``, the later interval first where ``later``."""
    if cut == "|":
        a = (y, x + (w - size if later else 0), h, size)
        b = (y, x if later else x + size, h, w - size)
    else:
        a = (y + (h - size if later else 0), x, size, w)
        b = (y if later else y + size, x, h - size, w)

    def spot(r: tuple[int, int, int, int]) -> Spot:
        return (*r, r[0] + r[2] / 2, r[1] + r[3] / 2)

    return spot(a), spot(b)


# a part's orientation: (its two parts swapped, mirrored left-right, mirrored top-bottom)
Flip = tuple[bool, bool, bool]
FLIPS: tuple[Flip, ...] = tuple((a, b, c) for a in (False, True) for b in (False, True) for c in (False, True))


def realize(n: int, root: Part, flips: dict[int, Flip]) -> Placed:
    """The layout of a floorplan of ``n`` kernels with each internal part oriented by ``flips`` (keyed
    by ``id``); each kernel's rectangle in its region's corner (the one the mirrors make first)."""
    rects = np.zeros((n, 4), dtype=np.int64)
    codes = np.zeros(n, dtype=np.int64)
    latency = np.zeros(n, dtype=np.int64)

    def go(p: Part, y: int, x: int, mirror_x: bool, mirror_y: bool) -> None:
        if p.kernel >= 0:
            k = p.kernel
            r, c, codes[k], latency[k] = p.shape
            rects[k] = (y + p.rows - r if mirror_y else y, x + p.cols - c if mirror_x else x, r, c)
            return
        assert p.first is not None and p.second is not None
        swap, flip_x, flip_y = flips.get(id(p), (False, False, False))
        first, second = (p.second, p.first) if swap else (p.first, p.second)
        inner_x, inner_y = mirror_x ^ flip_x, mirror_y ^ flip_y
        if p.cut == "|":
            a = first.cols  # along the row, mirrored: the first part at the far end
            go(first, y, x + p.cols - a if mirror_x else x, inner_x, inner_y)
            go(second, y, x if mirror_x else x + a, inner_x, inner_y)
        else:
            a = first.rows
            go(first, y + p.rows - a if mirror_y else y, x, inner_x, inner_y)
            go(second, y if mirror_y else y + a, x, inner_x, inner_y)

    go(root, 0, 0, False, False)
    return Placed(rects, codes, latency)


def orient(problem: PlacementProblem, root: Part, deadline: Deadline) -> Placed:
    """The floorplan's layout with each internal part mirrored and its parts swapped where the
    objective ranks the layout better: passes over the parts top-down, every orientation of one part
    tried with the others fixed."""
    inner: list[Part] = []
    stack = [root]
    while stack:
        p = stack.pop()
        if p.first is not None and p.second is not None:
            inner.append(p)
            stack.extend((p.second, p.first))
    flips: dict[int, Flip] = {}
    n = problem.n_kernels
    best = realize(n, root, flips)
    rank = problem.rank(best.rects, best.latency)
    for _ in range(ORIENT_PASSES):
        moved = False
        for p in inner:
            if deadline.expired():
                return best
            kept = flips.get(id(p), FLIPS[0])
            for flip in FLIPS:
                if flip == kept:
                    continue
                flips[id(p)] = flip
                layout = realize(n, root, flips)
                r = problem.rank(layout.rects, layout.latency)
                if r < rank:
                    best, rank, kept, moved = layout, r, flip, True
            flips[id(p)] = kept
        if not moved:
            break
    return best


def layouts(problem: PlacementProblem, targets: Sequence[int], deadline: Deadline) -> Iterator[Placed]:
    """Slicing layouts of the kernel sequence, each kernel at a uniform target: per target that fits,
    one floorplan per ``SPREADS`` weight, without and with the pull of the flows leaving each
    interval, oriented; a layout already yielded at the target is not yielded again. Nothing past
    ``MOST_BYTES``."""
    if not fits_memory(problem):
        return
    rows, cols = problem.mesh.rows, problem.mesh.cols
    for target in targets:
        if deadline.expired():
            return
        cv = curves(problem, np.full(problem.n_kernels, target, dtype=np.int64), deadline)
        if cv is None or not cv.fits(rows, cols):
            continue
        seen: set[bytes] = set()
        for spread in SPREADS:
            for pull in (False, True):
                if deadline.expired():
                    return
                placed = orient(problem, floorplan(problem, cv, spread, pull), deadline)
                if placed.rects.tobytes() not in seen:
                    seen.add(placed.rects.tobytes())
                    yield placed
