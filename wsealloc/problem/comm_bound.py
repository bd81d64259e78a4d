"""A lower bound on the placed bottleneck that counts communication (issue 37).

The allocation bound (``problem.objective``) ignores where rectangles lie: the bottleneck of every
layout is at least the least T at which each kernel's fewest cores with latency <= T fit the wafer.
A placed kernel's stage time is its latency *plus* what its incoming tensors cost on the mesh
(``cost.comm``), and some of that cost no layout can avoid. For a kernel k on r x c cores and any
layout of the others:

* **distance**: two rectangles of one layout never overlap, so the nearest cores of a producer and
  its consumer are at least one hop apart (``rect_distance`` >= 1): a kernel with a producer pays
  ``hop_latency`` at least;
* **what a tensor must cross**: a flow of B bytes per sample from producer p runs in legs, each a
  bundle of parallel links as wide as rows or columns of p or k (``cost.comm._route``). Beside each
  other (column spans apart) its narrowest leg is at most ``max(r, rows of p)`` links wide; one above
  the other (row spans apart, which needs ``r + rows of p <= wafer rows``) at most ``max(c, columns
  of p)``; with both spans apart at most the smaller of the two. Every link of the bundle carries
  B / width bytes (other flows only add to it; a multicast group carries its largest flow), so the
  flow is busy at least ``B / (link bandwidth x widest possible bundle)``, p on any rectangle it may
  take at T. Tensors between one producer and one consumer take the same route, so they add up.
  Congestion adds where it exceeds ``max(compute, NoC)`` of k, exactly as ``cost.comm`` charges it;
* **die crossings** (``die_boundary: penalty``): r rows span at least ``(r - 1) // die_rows`` die
  boundaries wherever they lie (likewise the columns);
* **fixed corners** (``place ... at``): a pinned kernel's rectangle is known once its shape is. Its
  shapes past the wafer's edge or over an obstacle are out, its die crossings are exact, and a
  producer must lie in the room its corner leaves (above or below it for a vertical bundle, left or
  right for a horizontal one). With both corners of a pair fixed, the hops between them are at least
  the gap between the spans that are apart (the producer's side that reaches nearest) plus the least
  gap along the other axis, the producer on any shape it may take at T (``_apart``);
* **packing** (``problem.dual_feasible``): rectangles of one layout are disjoint and avoid the
  keep-out areas and defective cores, so for every pair of dual-feasible functions f of the rows and
  g of the columns the kernels' f(rows) g(columns), each at its least over the shapes it may take,
  with the obstacles' added, fit in f(wafer rows) g(wafer columns) (Fekete & Schepers). The identity
  pair is the area argument; f = u^(1) with g the identity is the cut line of kernels taller than half
  the wafer (their row spans pairwise intersect, so by Helly's theorem they cross one row side by
  side); the rest count what sides quantized to fractions of the wafer leave idle.

With these terms each kernel's *stage* lower bound is a function of its own shape (and of its
producers' largest shapes at T), so min-max stays separable as in the allocation bound: T is a valid
bound if some shape of every kernel has a stage bound <= T, their fewest cores fit the wafer (and the
user's areas), and every pair of dual-feasible functions finds room for them. The condition is
monotone in T (more shapes become eligible, producers may grow; the functions are fixed per problem,
never chosen per T), so the least such T is found by bisection; it is never below the allocation
bound (every term only adds to the latency). ``plan.verify`` recomputes it with
its own code (``plan/verify_bounds.py``); ``tests/test_comm_bound.py`` checks it against every layout
of tiny wafers.

Only min-max plans of one wafer whose units are kernels get this bound (``Throughput``): a token's
path, regions sharing cores in time, several wafers and the contest's score keep their own bounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wsealloc.cost.comm import MeshParams
from wsealloc.opmodels import CostTable
from wsealloc.problem.allocation import Budget, area_budgets
from wsealloc.problem.dual_feasible import pairs, pareto_front, side_functions
from wsealloc.problem.flows import Flows, flows
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.problem.placement import defect_mask, mesh_params
from wsealloc.search import first_true

# Link loads are sums of floats (``cost.comm`` adds and subtracts them on a difference grid): a load
# equal to B / width can come out a hair below it. The bound gives that hair away.
LOAD_SLACK = 1e-6


@dataclass(frozen=True)
class Shapes:
    """Every legal rectangle of one kernel that fits the wafer (any op model a layout may use)."""

    r: np.ndarray  # int64
    c: np.ndarray  # int64
    latency: np.ndarray  # int64
    cores: np.ndarray  # int64


@dataclass(frozen=True)
class CommBoundProblem:
    """What the bound reads: every kernel's shapes, the flows, the mesh and the core budgets."""

    shapes: tuple[Shapes, ...]
    flows: Flows
    mesh: MeshParams
    total_cores: int
    budgets: tuple[Budget, ...] = ()
    # (row, col, rows, cols) of disjoint rectangles no kernel may cover: keep-out areas, defective cores
    obstacles: tuple[tuple[int, int, int, int], ...] = ()
    # per kernel the top-left corner the user fixed (``place ... at``), or None; empty: none fixed
    pins: tuple[tuple[int, int] | None, ...] = ()

    def incoming(self) -> list[list[tuple[int, float]]]:
        """Per consumer, (producer, bytes) with the tensors of one pair added up (one route for all of
        them) and a multicast group counted once (its largest flow to this consumer)."""
        fl = self.flows
        per_group: dict[tuple[int, int, int], float] = {}
        for s, t, b, g in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), fl.group.tolist(), strict=True):
            if s != t:
                per_group[(t, s, g)] = max(per_group.get((t, s, g), 0.0), b)
        pair: dict[tuple[int, int], float] = {}
        for (t, s, _), b in per_group.items():
            pair[(t, s)] = pair.get((t, s), 0.0) + b
        out: list[list[tuple[int, float]]] = [[] for _ in self.shapes]
        for (t, s), b in sorted(pair.items()):
            out[t].append((s, b))
        return out


def states_bound(kind: ObjectiveKind, placed: bool, wafers: int, regions: bool) -> bool:
    """Whether a plan states this bound: a placed min-max plan of one wafer whose units are kernels
    (the bound is of the slowest kernel's stage; regions and a token's path add what it does not count).
    The one place the driver and the verifier ask."""
    return placed and wafers == 1 and kind is ObjectiveKind.THROUGHPUT and not regions


def comm_bound_problem(costs: CostTable) -> CommBoundProblem:
    """The bound's data of a cost table: every legal op model whose grid fits the wafer (identical
    kernels share one ``Shapes``, which lets the bisection test each class of them once)."""
    arch = costs.arch
    by_signature: dict[int, Shapes] = {}
    shapes = []
    for kc in costs.kernels:
        if kc.signature not in by_signature:
            t = kc.table
            keep = t.legal() & (t.r <= arch.rows) & (t.c <= arch.cols)
            by_signature[kc.signature] = Shapes(
                t.r[keep].astype(np.int64),
                t.c[keep].astype(np.int64),
                t.latency[keep].astype(np.int64),
                t.cores[keep].astype(np.int64),
            )
        shapes.append(by_signature[kc.signature])
    applied = costs.applied
    pins = tuple((q[1] if (q := applied.pin_of(kc.kernel.name)) is not None else None) for kc in costs.kernels) if applied else ()
    return CommBoundProblem(
        tuple(shapes), flows(costs), mesh_params(arch), costs.total_cores, area_budgets(costs), obstacles(costs), pins
    )


def obstacles(costs: CostTable) -> tuple[tuple[int, int, int, int], ...]:
    """(row, col, rows, cols) of rectangles no kernel covers, pairwise disjoint (a packing argument adds
    them to the kernels): the keep-out areas that overlap none taken before them (an overlapping one is
    left out, which only weakens the bound), then each defective core outside those as 1 x 1."""
    arch = costs.arch
    boxes: list[tuple[int, int, int, int]] = []
    for y, x, r, c in costs.applied.obstacles if costs.applied is not None else ():
        if r > 0 and c > 0 and all(y >= y2 + r2 or y2 >= y + r or x >= x2 + c2 or x2 >= x + c for y2, x2, r2, c2 in boxes):
            boxes.append((y, x, r, c))
    d = arch.wafer.defects
    broken = defect_mask(arch.rows, arch.cols, d.cores, d.rate, d.seed)
    for y, x, r, c in boxes:
        broken[y : y + r, x : x + c] = False
    return tuple(boxes) + tuple((int(y), int(x), 1, 1) for y, x in np.argwhere(broken).tolist())


def communication_bound(p: CommBoundProblem, hi: int | None, lo: int = 0, stop: Callable[[], bool] | None = None) -> int | None:
    """The least T in [``lo``, ``hi``] that passes every test of the module docstring (None: not even
    ``hi``, which a valid layout with bottleneck ``hi`` would contradict). ``lo``: a proven bound of the
    same table (the allocation's), where the bisection may start. ``hi`` None: no layout's value is
    known yet, so the upper end is found by doubling steps above ``lo`` (None past ``MOST_CYCLES``).

    ``stop`` is asked before every test (each a pass over the kernels: 0.1-0.2 s on a 452-kernel
    table with 442 fixed corners), so the driver can run the bound inside the search's time limit; a
    stop gives None, never a T short of the least one (``verify`` recomputes it exactly)."""
    mesh = p.mesh
    incoming = p.incoming()
    n = len(p.shapes)
    has_producer = [bool(incoming[k]) for k in range(n)]
    # each shape's stage time without the congestion term (it does not depend on T)
    pins = p.pins or (None,) * n
    fixed = [_fixed_stage(s, pins[k], mesh, has_producer[k], p.obstacles) for k, s in enumerate(p.shapes)]
    # the dual-feasible functions of the rows and of the columns (``problem.dual_feasible``), the pairs
    # tested, what each pair allows (the wafer's transformed area) and what the obstacles take of it
    distinct = list({id(s): s for s in p.shapes}.values())
    heights = np.unique(np.concatenate([s.r for s in distinct] + [np.array([o[2] for o in p.obstacles], dtype=np.int64)]))
    widths = np.unique(np.concatenate([s.c for s in distinct] + [np.array([o[3] for o in p.obstacles], dtype=np.int64)]))
    rows_f, cols_f = side_functions(mesh.rows, heights.tolist()), side_functions(mesh.cols, widths.tolist())
    pair_r, pair_c = pairs(len(rows_f), len(cols_f))
    capacity = rows_f[pair_r, mesh.rows] * cols_f[pair_c, mesh.cols]
    packed = np.zeros(pair_r.size, dtype=np.int64)
    for (h, w), count in Counter((o[2], o[3]) for o in p.obstacles).items():  # defects: many 1 x 1
        packed += count * rows_f[pair_r, h] * cols_f[pair_c, w]
    busy = [np.maximum(0, s.latency - mesh.hop_latency * (s.r + s.c)).astype(np.float64) for s in p.shapes]

    fixed_corners = [(k, pin) for k, pin in enumerate(pins) if pin is not None]

    def allowed_at(t: int) -> list[np.ndarray]:
        """Per kernel the shapes whose stage without its producers' terms meets t; at a fixed corner
        also off every other fixed corner's block (each shape there covers the fewest rows x the
        fewest columns that kernel may take, so no other rectangle may)."""
        allowed = [f <= t for f in fixed]
        blocks = [
            (k, y, x, int(p.shapes[k].r[allowed[k]].min()), int(p.shapes[k].c[allowed[k]].min()))
            for k, (y, x) in fixed_corners
            if allowed[k].any()
        ]
        if not blocks:
            return allowed
        owner, by, bx, br, bc = (np.array(v, dtype=np.int64) for v in zip(*blocks, strict=True))
        for k, (y, x) in fixed_corners:
            # a shape r x c at (y, x) misses block b iff r <= by - y or c <= bx - x (or the block lies
            # above or left of the corner): for the blocks with by - y < r, c must be at most the least
            # bx - x among them. Sorted by by - y, that least is a prefix minimum (one pass per kernel:
            # an old plan's 442 corners took 12 s a bisection step pair by pair)
            near = (owner != k) & (by + br > y) & (bx + bc > x)
            if not near.any():
                continue
            rows_free, cols_free = by[near] - y, bx[near] - x
            order = np.argsort(rows_free, kind="stable")
            rows_free, least = rows_free[order], np.minimum.accumulate(cols_free[order])
            s = p.shapes[k]
            reach = np.searchsorted(rows_free, s.r, side="left")  # blocks with by - y < r
            cap = np.where(reach > 0, least[np.maximum(reach - 1, 0)], np.iinfo(np.int64).max)
            allowed[k] = allowed[k] & (s.c <= cap)
        return allowed

    def eligible(k: int, sides: np.ndarray, allowed: list[np.ndarray], t: int) -> np.ndarray:
        """The shapes of kernel k whose stage lower bound meets t (``sides``: per kernel the most and
        the fewest rows and columns of the shapes it may take at t, ``allowed`` those shapes)."""
        s = p.shapes[k]
        stage = fixed[k]
        if incoming[k]:
            cong = np.zeros(s.r.size)
            hops = np.ones(s.r.size)
            for src, nbytes in incoming[k]:
                most_r, most_c, least_r, least_c = sides[src]
                if pins[k] is not None and pins[src] is not None:  # the producer's every side counts
                    within = allowed[src]
                    span = Span(pins[src], np.unique(p.shapes[src].r[within]), np.unique(p.shapes[src].c[within]))
                else:  # its fewest rows and columns decide
                    span = Span(pins[src], np.array([least_r, most_r]), np.array([least_c, most_c]))
                stacked, side_by_side, apart = _apart(s, pins[k], span, mesh)
                beside = np.where(side_by_side, np.maximum(s.r, most_r), 0)
                above = np.where(stacked, np.maximum(s.c, most_c), 0)
                width = np.maximum(beside, above)  # 0: no rectangle of p fits apart from this one
                cong = np.maximum(cong, np.where(width > 0, nbytes / (mesh.link_bytes_per_cycle * np.maximum(width, 1)), np.inf))
                hops = np.maximum(hops, apart)
            stage = stage + mesh.hop_latency * (hops - 1)  # both corners fixed: the hops between them
            stage = stage + np.ceil(np.maximum(0.0, cong - busy[k] - LOAD_SLACK))  # float: inf where p cannot fit
        return (stage <= t) & allowed[k]

    def fits(t: int) -> bool:
        # the sides of the rectangles each producer may take at T (its stage without congestion meets T)
        sides = np.zeros((n, 4), dtype=np.int64)
        allowed = allowed_at(t)
        for k, s in enumerate(p.shapes):
            within = allowed[k]
            if not within.any():
                return False
            sides[k] = (s.r[within].max(), s.c[within].max(), s.r[within].min(), s.c[within].min())
        fewest = np.zeros(n, dtype=np.int64)
        load = packed.copy()  # per pair of dual-feasible functions: the transformed area taken
        seen: dict[tuple[object, ...], tuple[int, np.ndarray]] = {}
        for k, s in enumerate(p.shapes):
            # identical kernels fed alike (the repeated layers) give the same answer: test them once
            # (a fixed corner, its own or a producer's, makes a kernel its own class)
            pinned = pins[k] is not None or any(pins[src] is not None for src, _ in incoming[k])
            key = (k if pinned else -1, id(s), has_producer[k], tuple((tuple(sides[src].tolist()), b) for src, b in incoming[k]))
            if key not in seen:
                ok = eligible(k, sides, allowed, t)
                if not ok.any():
                    return False
                front_r, front_c = pareto_front(s.r[ok], s.c[ok])
                least = (rows_f[:, front_r][pair_r] * cols_f[:, front_c][pair_c]).min(axis=1)
                seen[key] = (int(s.cores[ok].min()), least)
            cores, least = seen[key]
            fewest[k] = cores
            load += least
        if int(fewest.sum()) > p.total_cores or bool((load > capacity).any()):
            return False
        return all(int(fewest[list(b.kernels)].sum()) <= b.cores for b in p.budgets)

    def test(t: int) -> bool:
        if stop is not None and stop():
            raise _Stopped
        return fits(t)

    try:
        if hi is None:
            hi, step = max(lo, 1), max(1, lo // 16)
            while not test(hi):
                lo, hi, step = hi + 1, hi + step, 2 * step
                if hi > MOST_CYCLES:
                    return None
        return first_true(range(lo, hi + 1), test)
    except _Stopped:
        return None


class _Stopped(Exception):
    """The bound's search was asked to stop (``communication_bound(stop=)``)."""


# The doubling search for an upper end gives up past this many cycles (no layout that slow is planned).
MOST_CYCLES = 1 << 50


BIG = np.iinfo(np.int64).max // 4  # the stage of a shape that cannot lie at its kernel's fixed corner


@dataclass(frozen=True)
class Span:
    """Where a producer may lie at a target: its fixed corner (None: anywhere) and the distinct rows
    and columns (ascending) of the shapes it may take."""

    pin: tuple[int, int] | None
    rows: np.ndarray
    cols: np.ndarray


def _fixed_stage(
    s: Shapes, pin: tuple[int, int] | None, mesh: MeshParams, has_producer: bool, obstacles: tuple[tuple[int, int, int, int], ...]
) -> np.ndarray:
    """Each shape's stage time without the terms of its producers' shapes (no T in it): the latency,
    a hop from a producer, the die boundaries crossed (where the corner is fixed, exactly the ones
    its rectangle crosses there); ``BIG`` for a shape that does not fit at a fixed corner (past the
    wafer's edge or over a keep-out area or defective core)."""
    hop = mesh.hop_latency * has_producer
    if pin is None:
        die = (s.r - 1) // mesh.die_rows + (s.c - 1) // mesh.die_cols
        return s.latency + hop + (mesh.die_penalty * die if mesh.die_penalty else 0)
    y, x = pin
    die = (y + s.r - 1) // mesh.die_rows - y // mesh.die_rows + (x + s.c - 1) // mesh.die_cols - x // mesh.die_cols
    fits = (y + s.r <= mesh.rows) & (x + s.c <= mesh.cols)
    for oy, ox, orows, ocols in obstacles:
        fits &= (y + s.r <= oy) | (oy + orows <= y) | (x + s.c <= ox) | (ox + ocols <= x)
    return np.where(fits, s.latency + hop + mesh.die_penalty * die, BIG)


def _apart(s: Shapes, pin: tuple[int, int] | None, p: Span, mesh: MeshParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per shape of a consumer (at ``pin``, or anywhere): whether its row spans and a producer's (``p``)
    can be disjoint (one above the other), whether their column spans can (side by side), and the
    fewest hops between the two rectangles (1 unless both corners are fixed; inf if they must overlap).

    Free kernels are apart in rows when their heights add up to at most the wafer's; a fixed corner
    leaves the room above it or below its rectangle. Two fixed corners: apart in rows when the
    consumer ends above the producer's corner or some producer height ends above the consumer's, the
    hops then at least the rows between them (the tallest such producer height) plus the least column
    gap any producer width leaves, or the same with rows and columns swapped."""
    rows, cols = mesh.rows, mesh.cols
    least_r, least_c = int(p.rows[0]), int(p.cols[0])
    one = np.ones(s.r.size)
    if pin is None and p.pin is None:
        return s.r + least_r <= rows, s.c + least_c <= cols, one
    if p.pin is None:
        assert pin is not None
        y, x = pin
        return (least_r <= y) | (least_r <= rows - y - s.r), (least_c <= x) | (least_c <= cols - x - s.c), one
    py, px = p.pin
    if pin is None:
        return (s.r <= py) | (s.r <= rows - py - least_r), (s.c <= px) | (s.c <= cols - px - least_c), one
    y, x = pin
    inf = np.full(s.r.size, np.inf)
    gap_y = _gap(y, s.r, py, p.rows, inf)
    gap_x = _gap(x, s.c, px, p.cols, inf)
    # the least gap over every producer side (apart or not): the tallest side reaches nearest
    near_y = np.maximum(0, np.maximum(py - (y + s.r - 1), y - (py + int(p.rows[-1]) - 1)))
    near_x = np.maximum(0, np.maximum(px - (x + s.c - 1), x - (px + int(p.cols[-1]) - 1)))
    return np.isfinite(gap_y), np.isfinite(gap_x), np.minimum(gap_y + near_x, near_y + gap_x)


def _gap(at: int, side: np.ndarray, p_at: int, p_sides: np.ndarray, inf: np.ndarray) -> np.ndarray:
    """Along one axis, per consumer side (its span from ``at``): the fewest hops to a producer span from
    ``p_at`` of one of ``p_sides`` (ascending) when the two spans are disjoint; inf if none is."""
    before = np.where(at + side <= p_at, p_at - (at + side) + 1, inf)  # the consumer ends first
    # the producer ends first: its longest side that does, nearest
    fits = np.searchsorted(p_sides, at - p_at, side="right")
    if fits > 0:
        before = np.minimum(before, at - (p_at + int(p_sides[fits - 1])) + 1)
    return before
