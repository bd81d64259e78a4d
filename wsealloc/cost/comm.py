"""Communication cost of a placement: distance, link congestion and die crossings (pure, numpy in/out).

Used by the placement solvers (through ``wsealloc.problem.placement``) and, independently of them,
by ``wsealloc verify``. Formulas and reasons: docs/cost-model.md, section "Placement".

A kernel's *stage time* on a placed wafer is

    stage = max(compute, NoC, congestion) + fill + distance + die crossings, i.e.
    stage = latency(op model) + comm,
    comm  = hop_latency * max over its producers of dist(producer, kernel)
          + max(0, congestion - max(compute, NoC))
          + die_crossing_penalty * (die boundaries its rectangle crosses)   [die_boundary: penalty]

* ``dist`` is the Manhattan distance in hops between the nearest cores of the two rectangles
  (1 for rectangles that touch).
* congestion: every producer->consumer flow is routed as a bundle of parallel links in two legs. A
  bundle crossing a line of the mesh is as wide as the rows (horizontal travel) or columns (vertical
  travel) it runs in. Y-then-X: vertically in the producer's columns, then horizontally in the
  consumer's rows into its side (the cost model charges every kernel's ingress on its row edge);
  X-then-Y: horizontally in the producer's rows, then vertically in the consumer's columns. Each flow
  takes the route whose narrowest leg is wider (Y-then-X on ties), a static choice that keeps the
  evaluation one pass. The loads of all flows add up per link and direction (a link has a channel
  each way; a multicast group counted once); a
  flow is busy for its most loaded link (bytes per link / link bandwidth); a kernel waits for its
  slowest incoming flow. Link traffic is pipelined like compute: only the part beyond
  max(compute, NoC) adds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeshParams:
    """Numbers of the mesh the communication model needs."""

    rows: int
    cols: int
    tile_rows: int  # congestion tiles are dies
    tile_cols: int
    link_bytes_per_cycle: float
    hop_latency: int
    die_rows: int
    die_cols: int
    die_penalty: int  # cycles per crossed die boundary (0 unless die_boundary == "penalty")


@dataclass(frozen=True)
class CommCosts:
    """Per-kernel communication cycles and the total traffic x distance."""

    distance_cycles: np.ndarray
    congestion_cycles: np.ndarray  # extra cycles beyond the kernel's own NoC time
    die_cycles: np.ndarray
    comm_cycles: np.ndarray  # sum of the three, int64
    traffic_distance: float  # sum over flows of bytes x hops


def rect_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hops between the nearest cores of rectangles ``a`` and ``b`` (arrays of [row, col, r, c])."""
    dy = np.maximum(0, np.maximum(b[:, 0] - (a[:, 0] + a[:, 2] - 1), a[:, 0] - (b[:, 0] + b[:, 2] - 1)))
    dx = np.maximum(0, np.maximum(b[:, 1] - (a[:, 1] + a[:, 3] - 1), a[:, 1] - (b[:, 1] + b[:, 3] - 1)))
    return dx + dy


def die_crossings(rects: np.ndarray, die_rows: int, die_cols: int) -> np.ndarray:
    """Number of die boundaries (horizontal + vertical) each rectangle crosses."""
    rows = (rects[:, 0] + rects[:, 2] - 1) // die_rows - rects[:, 0] // die_rows
    cols = (rects[:, 1] + rects[:, 3] - 1) // die_cols - rects[:, 1] // die_cols
    return rows + cols


def comm_costs(
    rects: np.ndarray,
    latency: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    nbytes: np.ndarray,
    mesh: MeshParams,
    group: np.ndarray | None = None,
) -> CommCosts:
    """Communication cycles of every kernel for rectangles ``rects`` (int array [n, 4]: row, col, r, c).

    ``src``, ``dst``, ``nbytes`` describe the producer->consumer flows (kernel indices, bytes per sample).
    ``group[f]`` is flow f's multicast group (same producer, same tensor): a link shared by flows of one
    group carries the data once. Default: every flow its own group (no multicast).
    """
    n = rects.shape[0]
    rects = rects.astype(np.int64)
    dist_cyc = np.zeros(n, dtype=np.int64)
    cong = np.zeros(n, dtype=np.float64)
    traffic = 0.0
    if src.size:
        d = rect_distance(rects[src], rects[dst])
        np.maximum.at(dist_cyc, dst, d * mesh.hop_latency)
        traffic = float(np.sum(d * nbytes))
        groups = np.arange(src.size) if group is None else np.asarray(group)
        cong_flow = _congestion(rects, src, dst, nbytes, mesh, groups)
        np.maximum.at(cong, dst, cong_flow)
    # Links feeding a kernel must carry their traffic within its stage time, overlapped with its
    # compute and its own NoC transfers: congestion only adds where it exceeds max(compute, NoC).
    busy = np.maximum(0.0, latency.astype(np.float64) - mesh.hop_latency * (rects[:, 2] + rects[:, 3]))
    extra = np.ceil(np.maximum(0.0, cong - busy)).astype(np.int64)
    die = die_crossings(rects, mesh.die_rows, mesh.die_cols) * mesh.die_penalty if mesh.die_penalty else np.zeros(n, np.int64)
    return CommCosts(dist_cyc, extra, die.astype(np.int64), dist_cyc + extra + die, traffic)


Segment = tuple[int, int, int, int]  # [y0, y1) x [x0, x1) of a load grid


def _route(rect_p: np.ndarray, rect_c: np.ndarray, size: float) -> tuple[tuple[Segment, float] | None, ...]:
    """The bundle route of one flow: (vertical leg, bytes per link), (horizontal leg, bytes per link).

    Vertical travel crosses horizontal lines between the two row spans, horizontal travel vertical
    lines between the two column spans. Y-then-X runs vertically in the producer's columns, then
    horizontally in the consumer's rows; X-then-Y horizontally in the producer's rows, then vertically
    in the consumer's columns. A bundle is as wide as the links it runs on and a flow is as slow as
    its narrowest leg, so the route whose narrowest existing leg is wider wins (Y-then-X on ties).
    Comparing the vertical legs alone sent a stacked few-row producer's flow through its few rows."""
    py, px, pr, pc = (int(v) for v in rect_p)
    cy, cx, cr, cc = (int(v) for v in rect_c)
    vertical = cy >= py + pr or cy + cr <= py  # row spans disjoint: a vertical leg is needed
    horizontal = cx >= px + pc or cx + cc <= px
    # narrowest bundle of each route (its legs that exist); the wider one wins, Y-then-X on ties
    y_first = min([pc] * vertical + [cr] * horizontal, default=0)
    x_first = min([cc] * vertical + [pr] * horizontal, default=0) > y_first
    lx, lw = (cx, cc) if x_first else (px, pc)  # columns of the vertical leg
    ly, lh = (py, pr) if x_first else (cy, cr)  # rows of the horizontal leg
    vseg: Segment | None = None
    hseg: Segment | None = None
    if cy >= py + pr:
        vseg = (py + pr, cy + 1, lx, lx + lw)
    elif cy + cr <= py:
        vseg = (cy + cr, py + 1, lx, lx + lw)
    if cx >= px + pc:
        hseg = (ly, ly + lh, px + pc, cx + 1)
    elif cx + cc <= px:
        hseg = (ly, ly + lh, cx + cc, px + 1)
    return (
        None if vseg is None else (vseg, size / lw),
        None if hseg is None else (hseg, size / lh),
    )


@dataclass(frozen=True)
class _Legs:
    """The legs of every flow at once (``_route``'s, as arrays): a vertical leg where the row spans
    are apart (rows [v0, v1) x columns [vx0, vx1), ``vload`` bytes per link), a horizontal one where
    the column spans are apart (rows [hy0, hy1) x columns [h0, h1), ``hload``); ``down`` / ``east``:
    the vertical leg runs southwards, the horizontal one eastwards. The relocation evaluates
    thousands of layouts, and routing their flows one by one was a seventh of a constrained solve's
    relocation."""

    vertical: np.ndarray  # bool
    horizontal: np.ndarray  # bool
    v0: np.ndarray
    v1: np.ndarray
    vx0: np.ndarray
    vx1: np.ndarray
    vload: np.ndarray
    hy0: np.ndarray
    hy1: np.ndarray
    h0: np.ndarray
    h1: np.ndarray
    hload: np.ndarray
    down: np.ndarray
    east: np.ndarray


def _legs(rects: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> _Legs:
    """``_route`` of every flow at once: the same legs and the same bytes per link (one float
    division each, as there)."""
    py, px, pr, pc = rects[src].astype(np.int64).T
    cy, cx, cr, cc = rects[dst].astype(np.int64).T
    below, above = cy >= py + pr, cy + cr <= py  # the consumer's rows below / above the producer's
    right, left = cx >= px + pc, cx + cc <= px
    vertical, horizontal = below | above, right | left
    wide = np.iinfo(np.int64).max
    # the narrowest existing leg of each route (0 where no leg exists), the wider route wins
    y_first = np.minimum(np.where(vertical, pc, wide), np.where(horizontal, cr, wide))
    x_first = np.minimum(np.where(vertical, cc, wide), np.where(horizontal, pr, wide))
    y_first[~(vertical | horizontal)] = 0
    x_first[~(vertical | horizontal)] = 0
    xf = x_first > y_first
    lx, lw = np.where(xf, cx, px), np.where(xf, cc, pc)
    ly, lh = np.where(xf, py, cy), np.where(xf, pr, cr)
    size = nbytes.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # (a leg that does not exist may divide by 0)
        vload, hload = size / lw, size / lh
    return _Legs(
        vertical,
        horizontal,
        np.where(below, py + pr, cy + cr),
        np.where(below, cy + 1, py + 1),
        lx,
        lx + lw,
        vload,
        ly,
        ly + lh,
        np.where(right, px + pc, cx + cc),
        np.where(right, cx + 1, px + 1),
        hload,
        cy > py,
        cx > px,
    )


def _congestion(
    rects: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, mesh: MeshParams, group: np.ndarray
) -> np.ndarray:
    """Busy cycles per flow: the most loaded link on its bundle route (``_route``).

    Each link of a leg carries bytes / bundle width. Loads add up per link and direction over
    multicast groups;
    within a group a link carries the largest of its flows' loads (the data once). A flow is busy for
    its most loaded link (bytes per link / link bandwidth).

    Loads are piecewise constant between the rows and lines where legs start or end, so the load grids
    are kept on those coordinates only (compressed): the same additions in the same order as on the
    full mesh, hence the same numbers, on a grid often 10-100x smaller. The legs of the groups with
    one leg in a pass are added to the grid's difference array in one ``np.bincount`` (it adds its
    weights in the order given, which ``tests/test_placement.py`` pins: group by group in the order
    the groups first occur among the flows, as one by one), those of groups with several legs (their
    pointwise maximum) one group at a time after.
    """
    legs = _legs(rects, src, dst, nbytes)
    # each flow's group as the index of the flow where the group first occurs: groups are added in
    # that order
    _, first, inverse = np.unique(np.asarray(group), return_index=True, return_inverse=True)
    order = first[inverse]
    out = np.zeros(src.size)
    # vertical travel loads [horizontal line y, col], horizontal travel [row, vertical line x]; each
    # leg kind in its two directions: a link carries each direction on its own channel, so flows
    # going opposite ways over the same links do not load each other
    passes = (
        (legs.vertical & legs.down, legs.v0, legs.v1, legs.vx0, legs.vx1, legs.vload),
        (legs.vertical & ~legs.down, legs.v0, legs.v1, legs.vx0, legs.vx1, legs.vload),
        (legs.horizontal & legs.east, legs.hy0, legs.hy1, legs.h0, legs.h1, legs.hload),
        (legs.horizontal & ~legs.east, legs.hy0, legs.hy1, legs.h0, legs.h1, legs.hload),
    )
    for present, y0s, y1s, x0s, x1s, loads in passes:
        f = np.flatnonzero(present)
        if not f.size:
            continue
        y0, y1, x0, x1, value = y0s[f], y1s[f], x0s[f], x1s[f], loads[f]
        ys, xs = np.unique(np.concatenate([y0, y1])), np.unique(np.concatenate([x0, x1]))
        y0, y1 = np.searchsorted(ys, y0), np.searchsorted(ys, y1)
        x0, x1 = np.searchsorted(xs, x0), np.searchsorted(xs, x1)
        shape = (ys.size + 1, xs.size + 1)
        g = order[f]
        legs_of = np.bincount(g, minlength=src.size)[g]  # the group's legs in this pass
        one = np.flatnonzero(legs_of == 1)
        one = one[np.argsort(g[one], kind="stable")]
        # a rectangle [y0, y1) x [x0, x1) on a 2D difference array: +v, -v, -v, +v at its corners
        top, bottom, left, right = y0[one] * shape[1], y1[one] * shape[1], x0[one], x1[one]
        cells = np.stack([top + left, bottom + left, top + right, bottom + right], axis=1)
        signed = np.stack([value[one], -value[one], -value[one], value[one]], axis=1)
        diff = np.bincount(cells.ravel(), weights=signed.ravel(), minlength=shape[0] * shape[1]).reshape(shape)
        load = np.cumsum(np.cumsum(diff, axis=0), axis=1)
        many = np.flatnonzero(legs_of > 1)
        if many.size:
            extra: np.ndarray | None = None  # multicast groups: the pointwise maximum of their legs
            for members in (many[g[many] == grp] for grp in np.unique(g[many]).tolist()):
                segs = [((int(y0[i]), int(y1[i]), int(x0[i]), int(x1[i])), float(value[i])) for i in members.tolist()]
                extra = _add_max(extra, shape, segs)
            assert extra is not None
            load = load + extra
        for i, flow in enumerate(f.tolist()):
            busiest = float(load[y0[i] : y1[i], x0[i] : x1[i]].max())
            if busiest > out[flow]:
                out[flow] = busiest
    return out / mesh.link_bytes_per_cycle


def _add_max(grid: np.ndarray | None, shape: tuple[int, int], segs: list[tuple[Segment, float]]) -> np.ndarray:
    """Add the pointwise maximum of one multicast group's segments to a dense load grid (created with
    ``shape`` when None); returns the grid."""
    y0 = min(s[0][0] for s in segs)
    y1 = max(s[0][1] for s in segs)
    x0 = min(s[0][2] for s in segs)
    x1 = max(s[0][3] for s in segs)
    local = np.zeros((y1 - y0, x1 - x0))
    for (sy0, sy1, sx0, sx1), value in segs:
        view = local[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0]
        np.maximum(view, value, out=view)
    if grid is None:
        grid = np.zeros(shape)
    grid[y0:y1, x0:x1] += local
    return grid
