"""A partial layout completed: the kernels it lacks fitted onto the cores it leaves free.

A start layout from an old plan (``--from-plan old.json``, ``driver.start_layout``) holds for most
kernels of a re-solve but not all: the user changed a kernel's grid (its old op model is now
forbidden), pinned it elsewhere, kept an area out under it, or the model gained a kernel. Dropping
the whole start would throw away the layout of every other kernel (and the re-solve could then be
worse than the plan it came from), so the kernels it lacks are fitted into it instead, one at a
time: a pinned kernel at its corner, on its old grid if that is still legal and fits there, else the
fastest of its shapes that does (a kept kernel in the way leaves and is fitted again), then the
rest in dataflow order, each on its old grid or a shape as fast as the old layout's slowest kept
kernel, on the free cores nearest its old corner (a kernel new to the layout, with no old corner
nor grid: nearest its placed neighbours). Where
the free cores hold no such shape (a dense layout: ResNet-50's old plan leaves no free 256 x 40 for a
conv whose grid the user changed from 392 x 27, and a kernel it lands on then finds its old grid
nowhere) the kernel displaces kept ones: the same search with the kept kernels' cores counted free,
and the kernels it lands on are fitted again, in dataflow order, the same way. Only where neither
holds a shape that fast does it take a slower one (free cores first). Every kernel fitted is fixed
from then on (pinned ones too), so each displacement fixes one more and the cascade ends. A cascade
that strands a kernel or fits more than half the kernels anew (little of the old layout left) is
dropped, and the kernels are fitted again without displacing (free cores only, a slower shape where
that is all they hold).
Kernels new to the layout (the model gained them, or the plan lost them) are then also fitted after
the others, the largest first or in dataflow order, each on the shape and free spot whose border
touches taken cores most (a hole's own kernel fills it; then fewest cores, then nearest its placed
neighbours), as in decreasing-size bin packing; of the three completions the fastest is kept.
The result is one more start of the search, judged by the same score as every other; the search's
moves (windows, relocation) then improve whatever the fit cost.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline
from wsealloc.problem.placement import INF, PlacementProblem
from wsealloc.solvers.strips import Placed

Shape = tuple[int, int, int, int]  # rows, cols, latency, op-model code
MOST_SCANS = 64  # shapes of one kernel scanned for a free spot (about 5 ms each on a 792 x 1232 wafer)
# spots of one shape whose border is measured when a new kernel is fitted into holes (the nearest ones):
# a region of free cores that large is no hole, and measuring all its spots took 12 s of LLaMA-7B's fill
MOST_SPOTS = 4096


class Completed(NamedTuple):
    """What :func:`complete` made: the layout (None when a kernel found no room or time ran out),
    the kernels fitted (in order), the kernel that found no room (None: none, or time ran out)."""

    placed: Placed | None
    fitted: list[int]
    stuck: int | None


def shapes_by_speed(problem: PlacementProblem, kernel: int) -> list[Shape]:
    """Kernel ``kernel``'s rectangles, fastest first, without one that a faster one fits inside
    (where r x c fits, a faster r' x c' with r' <= r and c' <= c fits too, so it is never needed)."""
    shape = problem.shape(kernel)
    found: dict[tuple[int, int], Shape] = {}
    for h in range(shape.heights.size):
        prefix = shape.prefix[h]
        # the widths where the best latency at this height drops: the front of this height
        drops = np.flatnonzero((prefix[1:] < prefix[:-1]) & (prefix[1:] < INF)) + 1
        for c in drops.tolist():
            r = int(shape.best_r[h, c])
            if (r, c) not in found:
                found[(r, c)] = (r, c, int(shape.best[h, c]), int(shape.best_df[h, c]))
    out: list[Shape] = []
    narrowest = np.full(problem.mesh.rows + 2, np.iinfo(np.int64).max)  # least cols of a kept shape with <= r rows
    for r, c, lat, code in sorted(found.values(), key=lambda s: (s[2], s[0] * s[1])):
        if narrowest[r] <= c:
            continue
        out.append((r, c, lat, code))
        narrowest[r:] = np.minimum(narrowest[r:], c)
    return out


def complete(
    problem: PlacementProblem,
    rects: np.ndarray,
    codes: np.ndarray,
    latency: np.ndarray,
    known: np.ndarray,
    toward: np.ndarray,
    deadline: Deadline,
    old: np.ndarray | None = None,
) -> Completed:
    """``rects`` (with ``codes``, ``latency``) where ``known`` is true, completed (module docstring).
    ``toward[k]`` is the corner kernel k is fitted nearest (its old one; -1: near its neighbours);
    ``old[k]``, where true, says ``rects[k]`` (its rows and columns), ``codes[k]`` and ``latency[k]``
    are a legal shape of kernel k, tried first wherever it is fitted.
    Known rectangles must be valid on their own (on the wafer, on free cores, disjoint, within their
    kernel's rules); a pinned kernel's is replaced when it does not sit at its pin. None too when
    ``deadline`` passes (checked before every shape tried).

    A displacement is never undone, so a cascade can strand a kernel that free cores held before (a
    displaced kernel finding no room), or fit more than half the kernels anew: then the completion
    runs again without displacing (free cores only, a slower shape where that is all they hold), and
    that pass is the answer."""
    given = (rects, codes, latency, known)
    cache: dict[int, list[Shape]] = {}  # per kernel class (one shape table: repeated layers ask once)

    def shapes(k: int) -> list[Shape]:
        c = problem.kernel_class[k]
        if c not in cache:
            cache[c] = shapes_by_speed(problem, k)
        return cache[c]

    def one_pass(displace: bool, largest: bool | None, holes: bool) -> tuple[Completed, bool]:
        """The completion in one pass, displacing kept kernels where ``displace``, the kernels new to
        the layout in the order ``largest`` says (``_key``), each into the spot its border touches
        most where ``holes`` (else the nearest); and whether it displaced."""
        rects, codes, latency, known = given[0].copy(), given[1].copy(), given[2].copy(), given[3].copy()
        pins = problem.pins or (None,) * problem.n_kernels
        for k, pin in enumerate(pins):
            if pin is not None and known[k] and tuple(rects[k, :2].tolist()) != pin:
                known[k] = False
        fitted: list[int] = []

        def first(k: int) -> Shape | None:
            return (int(rects[k, 2]), int(rects[k, 3]), int(latency[k]), int(codes[k])) if old is not None and old[k] else None

        # pins first, each on the cores no other pinned kernel holds: the rest give way to it
        pinned = np.array([p is not None for p in pins], dtype=bool)
        for k, pin in enumerate(pins):
            if pin is None or known[k]:
                continue
            spot = _fit(problem, k, _Free(problem.blocked, rects[known & pinned]), pin, True, first(k), shapes(k), deadline)
            if spot is None:
                return Completed(None, fitted, None if deadline.expired() else k), False
            (y, x), (r, c, lat, code) = spot
            known[k] = False
            known[_under(rects, known, (y, x, r, c))] = False  # the kept kernels it now covers are fitted again
            rects[k], codes[k], latency[k], known[k] = (y, x, r, c), code, lat, True
            fitted.append(k)
        # the rest in dataflow order; a kernel finding no free spot displaces kept ones (module docstring)
        fixed = known & pinned
        fixed[fitted] = True
        free = _Free(problem.blocked, rects[known])
        ref = int(latency[known].max()) if known.any() else None  # the old layout's slowest kept kernel
        waiting = [_key(shapes, k, toward, old, ref, largest) for k in np.flatnonzero(~known).tolist()]
        heapq.heapify(waiting)
        displaced = False
        while waiting:
            k = heapq.heappop(waiting)[-1]
            near = _toward(problem, rects, known, toward, k)
            snug = holes and bool(toward[k, 0] < 0 and first(k) is None)  # no old corner nor grid: into a hole (``_fit``)
            may = displace and 2 * (len(fitted) + 1) <= problem.n_kernels
            # as fast as the old layout's slowest kernel in free cores, else displacing kept kernels
            # (only the blocked cores and the fixed kernels' taken); then the fastest shape the same way
            spot, moves = None, False
            for moves, slowest in [(False, ref), (True, ref), (False, None), (True, None)][0 if ref is not None else 2 :]:
                if (may or not moves) and not deadline.expired():
                    cores = _Free(problem.blocked, rects[fixed]) if moves else free
                    spot = _fit(
                        problem, k, cores, near, False, first(k), shapes(k), deadline, slowest, snug and slowest is not None
                    )
                    if spot is not None:
                        break
            if spot is None:
                return Completed(None, fitted, None if deadline.expired() else k), displaced
            (y, x), (r, c, lat, code) = spot
            if moves:  # the kept kernels it lands on are fitted again, in dataflow order
                landed = _under(rects, known & ~fixed, (y, x, r, c))
                known[landed] = False
                for j in landed.tolist():
                    heapq.heappush(waiting, _key(shapes, j, toward, old, ref, largest))
                free = _Free(problem.blocked, rects[known])
                displaced = True
            rects[k], codes[k], latency[k], known[k], fixed[k] = (y, x, r, c), code, lat, True, True
            free.take(rects[k])
            fitted.append(k)
        return Completed(Placed(rects, codes, latency), fitted, None), displaced

    def completed(largest: bool | None, holes: bool) -> Completed:
        done, displaced = one_pass(True, largest, holes)
        if not displaced or (done.placed is not None and 2 * len(done.fitted) <= problem.n_kernels):
            return done  # (without a displacement the second pass would be this one again)
        return one_pass(False, largest, holes)[0]

    def value(c: Completed) -> float:
        return math.inf if c.placed is None else problem.layout_time(*problem.evaluate(c.placed.rects, c.placed.latency))

    # the fill before session 23 first (kernels new to the layout among the others, each at the
    # nearest spot): the two ways after it, into holes, only replace it where they do better
    done = completed(largest=None, holes=False)
    if not ((toward[:, 0] < 0) & ~known & (old is None or ~old)).any():
        return done  # (no kernel new to the layout: the three ways are one)
    # largest first into holes fills the holes a plan's deleted kernels left (LLaMA-7B's); on a small
    # model's 600 fuzzed completions the three complete 370 where the first alone completed 312
    best = value(done)
    for largest in (True, False):
        if deadline.expired():
            break
        other = completed(largest, holes=True)
        if (v := value(other)) < best:
            done, best = other, v
    return done


def _under(rects: np.ndarray, among: np.ndarray, rect: tuple[int, int, int, int]) -> np.ndarray:
    """The kernels (indices) where ``among`` holds whose rectangle shares a core with ``rect``."""
    y, x, r, c = rect
    ys, xs, rs, cs = rects.T
    return np.flatnonzero(among & (ys < y + r) & (y < ys + rs) & (xs < x + c) & (x < xs + cs))


def _key(
    shapes: Callable[[int], list[Shape]],
    k: int,
    toward: np.ndarray,
    old: np.ndarray | None,
    ref: int | None,
    largest: bool | None,
) -> tuple[int, ...]:
    """Where kernel k waits to be fitted: a kernel with an old corner or grid in dataflow order; the
    kernels with neither (new to the layout) among them where ``largest`` is None, else after them,
    in dataflow order or, where ``largest``, largest first (their fewest cores as fast as ``ref``), as
    in decreasing-size bin packing: the holes a plan's deleted kernels left are each the size of one,
    and a small kernel fitted first can split the hole a large one needed."""
    if toward[k, 0] >= 0 or (old is not None and old[k]):
        return (0, k)
    if largest is None:
        return (0, k)  # (among the others: the fill before session 23)
    if not largest:
        return (1, 0, k)
    fewest = min((s[0] * s[1] for s in shapes(k) if ref is None or s[2] <= ref), default=0)
    return (1, -fewest, k)


class _Free:
    """The cores not taken (blocked, or under a placed rectangle) and what a fit asks of them, kept
    until the next rectangle is taken (one pass over the wafer per kernel fitted, not per shape
    tried): prefix sums of the taken cores with a ring of taken ones around the wafer (its edge
    counts as taken where a rectangle's border touches it), and per free core the free run below it
    and to its right, so a shape's possible corners are found among the free cores alone (a dense
    layout leaves a few thousand of them)."""

    def __init__(self, blocked: np.ndarray, taken: np.ndarray) -> None:
        self.taken = blocked.copy()
        for y, x, r, c in taken.tolist():
            self.taken[y : y + r, x : x + c] = True
        self._prefix: np.ndarray | None = None
        self._runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def take(self, rect: np.ndarray) -> None:
        y, x, r, c = (int(v) for v in rect)
        self.taken[y : y + r, x : x + c] = True
        self._prefix = self._runs = None

    @property
    def prefix(self) -> np.ndarray:
        """[rows + 3, cols + 3] prefix sums of the taken cores, the wafer ringed by taken cores (core
        (y, x) is (y + 1, x + 1) there)."""
        if self._prefix is None:
            rows, cols = self.taken.shape
            padded = np.ones((rows + 2, cols + 2), dtype=bool)
            padded[1:-1, 1:-1] = self.taken
            self._prefix = np.zeros((rows + 3, cols + 3), dtype=np.int64)
            self._prefix[1:, 1:] = np.cumsum(np.cumsum(padded, axis=0), axis=1)
        return self._prefix

    def room(self) -> int:
        """How many cores are free."""
        return int(self.taken.size - np.count_nonzero(self.taken))

    def _taken_in(self, y: np.ndarray | int, x: np.ndarray | int, h: int, w: int) -> np.ndarray | int:
        """Taken cores (the ring's too) in the h x w rectangles at wafer corners (y, x); y, x >= -1."""
        p = self.prefix
        y1, x1 = np.add(y, 1), np.add(x, 1)
        return p[y1 + h, x1 + w] - p[y1, x1 + w] - p[y1 + h, x1] + p[y1, x1]

    def empty_at(self, ys: np.ndarray | int, xs: np.ndarray | int, r: int, c: int) -> np.ndarray:
        """Per corner (or at one), whether the r x c rectangle there (on the wafer) is all free."""
        return np.asarray(self._taken_in(ys, xs, r, c)) == 0

    def contact(self, ys: np.ndarray, xs: np.ndarray, r: int, c: int) -> np.ndarray:
        """Per corner, the cores just outside an r x c rectangle there (its four sides) that are taken
        or off the wafer: a rectangle filling a hole exactly touches all 2 (r + c)."""
        return np.asarray(
            self._taken_in(ys - 1, xs, 1, c)
            + self._taken_in(ys + r, xs, 1, c)
            + self._taken_in(ys, xs - 1, r, 1)
            + self._taken_in(ys, xs + c, r, 1)
        )

    def corners(self, r: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """The free cores (rows, cols; row-major) with at least r free cores down from them and c to
        their right: every corner of a free r x c rectangle is one (not every one is such a corner)."""
        if self._runs is None:
            free = ~self.taken
            rows, cols = free.shape
            row, col = np.arange(rows, dtype=np.int32)[:, None], np.arange(cols, dtype=np.int32)[None, :]
            row_of = np.where(free, np.int32(rows), row)  # a taken core's row, else past the end
            below = np.minimum.accumulate(row_of[::-1], axis=0)[::-1] - row
            col_of = np.where(free, np.int32(cols), col)
            right = np.minimum.accumulate(col_of[:, ::-1], axis=1)[:, ::-1] - col
            ys, xs = np.nonzero(free)
            self._runs = (ys, xs, below[ys, xs], right[ys, xs])
        ys, xs, below_at, right_at = self._runs
        ok = (below_at >= r) & (right_at >= c)
        return ys[ok], xs[ok]


def _toward(problem: PlacementProblem, rects: np.ndarray, known: np.ndarray, toward: np.ndarray, k: int) -> tuple[int, int]:
    """Where kernel k is fitted nearest: its old corner, else the mean corner of its placed producers
    and consumers, else the wafer's top-left."""
    if toward[k, 0] >= 0:
        return int(toward[k, 0]), int(toward[k, 1])
    fl = problem.flows
    near = np.concatenate([fl.src[fl.dst == k], fl.dst[fl.src == k]])
    near = near[known[near]] if near.size else near
    if near.size == 0:
        return 0, 0
    y, x = rects[near, :2].mean(axis=0)
    return int(y), int(x)


def _fit(
    problem: PlacementProblem,
    k: int,
    free: _Free,
    at: tuple[int, int],
    exact: bool,
    first: Shape | None,
    shapes: list[Shape],
    deadline: Deadline,
    slowest: int | None = None,
    snug: bool = False,
) -> tuple[tuple[int, int], Shape] | None:
    """Shape ``first``, else the fastest of ``shapes`` (kernel k's, ``shapes_by_speed``), with a free
    spot (at ``at`` when ``exact``, else the free corner nearest it; none slower than ``slowest``;
    inside k's area and, where the wafer forbids crossing dies, inside one die). A shape holding one
    that found no spot finds none either (at every corner the larger rectangle covers the smaller): it
    is skipped unscanned; at most ``MOST_SCANS`` shapes are scanned (a kernel that far from fitting
    makes a start not worth its time).

    ``snug`` (a kernel new to the layout, with ``slowest``): of every shape with a free spot, the one
    whose border touches taken cores or the wafer's edge most (as a share of its border; then fewest
    cores, then nearest ``at``), at its spot touching most: a hole a deleted kernel left is filled by
    a kernel that fits it, not split by whichever comes first (LLaMA-7B with 10 kernels deleted from
    its plan: fastest-first, nearest, a matmul later found no room; the fewest-core shape first, a
    32 x 187 matmul took parts of two holes)."""
    rows, cols = free.taken.shape
    room = free.room()
    fence = problem.fences[k] if problem.fences else None
    y0, x0, fr, fc = fence if fence is not None else (0, 0, rows, cols)
    m = problem.mesh
    failed = np.full(rows + 2, np.iinfo(np.int64).max)  # least cols of a shape with <= r rows that found no spot
    scans = 0
    best: tuple[tuple[float, int, int], tuple[int, int], Shape] | None = None  # (snug) rank, corner, shape
    if snug:  # the fewest cores first: a hole's own kernel fits it with few to spare
        shapes = sorted(shapes, key=lambda s: (s[0] * s[1], s[2]))
    for shape in [*([first] if first is not None else []), *shapes]:
        r, c = shape[0], shape[1]
        if slowest is not None and shape[2] > slowest:
            continue
        if r * c > room or r > fr or c > fc or failed[r] <= c:
            continue
        if scans >= MOST_SCANS or deadline.expired():
            break
        scans += 1
        if exact:
            y, x = at
            inside = y0 <= y and x0 <= x and y + r <= y0 + fr and x + c <= x0 + fc
            # (``rect_errors``: its die rule, pin and area)
            if inside and free.empty_at(y, x, r, c) and not problem.rect_errors(k, np.array([y, x, r, c])):
                return (y, x), shape
            failed[r:] = np.minimum(failed[r:], c)
            continue
        ys, xs = free.corners(r, c)  # row-major: the nearest first among equals, as a scan of the wafer
        ok = (ys >= y0) & (xs >= x0) & (ys + r <= y0 + fr) & (xs + c <= x0 + fc)
        if problem.die_rule is DieBoundary.FORBID:
            ok &= (ys // m.die_rows) == ((ys + r - 1) // m.die_rows)
            ok &= (xs // m.die_cols) == ((xs + c - 1) // m.die_cols)
        ys, xs = ys[ok], xs[ok]
        if ys.size:
            empty = free.empty_at(ys, xs, r, c)
            ys, xs = ys[empty], xs[empty]
        if not ys.size:
            failed[r:] = np.minimum(failed[r:], c)
            continue
        far = np.abs(ys - at[0]) + np.abs(xs - at[1])
        if not snug:
            i = int(np.argmin(far))
            return (int(ys[i]), int(xs[i])), shape
        if ys.size > MOST_SPOTS:  # a large free region, no hole: its spots nearest ``at`` are enough
            near = np.sort(np.argpartition(far, MOST_SPOTS)[:MOST_SPOTS])
            ys, xs, far = ys[near], xs[near], far[near]
        touch = free.contact(ys, xs, r, c)
        i = int(np.lexsort((far, -touch))[0])  # most touching, then nearest
        rank = (-int(touch[i]) / (2 * (r + c)), r * c, int(far[i]))
        if best is None or rank < best[0]:
            best = (rank, (int(ys[i]), int(xs[i])), shape)
        if best[0][0] == -1.0:
            break  # a hole filled exactly: no shape after it (more cores) ranks better
    return None if best is None else (best[1], best[2])
