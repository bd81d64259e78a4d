"""Communication cost of a placement: distance, link congestion and die crossings (pure, numpy in/out).

Used by the placement solvers (through ``wsealloc.problem.placement``) and, independently of them,
by ``wsealloc verify``. Formulas and reasons: docs/cost-model.md, section "Placement".

A kernel's *stage time* on a placed wafer is

    stage = latency(op model) + comm,
    comm  = hop_latency * max over its producers of dist(producer, kernel)
          + max(0, congestion - own NoC cycles)
          + die_crossing_penalty * (die boundaries its rectangle crosses)   [die_boundary: penalty]

* ``dist`` is the Manhattan distance in hops between the nearest cores of the two rectangles
  (1 for rectangles that touch).
* congestion: every producer->consumer flow is routed X-then-Y between the die-sized tiles holding
  the rectangles' centres; each tile boundary it crosses carries its bytes; a boundary between two
  tiles has (tile side) links of ``link_bytes_per_cycle``. A flow is busy for the most loaded boundary
  on its path (bytes / capacity); a kernel waits for its slowest incoming flow. Only the part beyond
  the kernel's own NoC time (which already charges its edge ingress) adds.
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
    rects: np.ndarray, noc_cycles: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, mesh: MeshParams
) -> CommCosts:
    """Communication cycles of every kernel for rectangles ``rects`` (int array [n, 4]: row, col, r, c).

    ``src``, ``dst``, ``nbytes`` describe the producer->consumer flows (kernel indices, bytes per sample).
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
        cong_flow = _congestion(rects, src, dst, nbytes, mesh)
        np.maximum.at(cong, dst, cong_flow)
    extra = np.ceil(np.maximum(0.0, cong - noc_cycles)).astype(np.int64)
    die = die_crossings(rects, mesh.die_rows, mesh.die_cols) * mesh.die_penalty if mesh.die_penalty else np.zeros(n, np.int64)
    return CommCosts(dist_cyc, extra, die.astype(np.int64), dist_cyc + extra + die, traffic)


def _congestion(rects: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, mesh: MeshParams) -> np.ndarray:
    """Busy cycles per flow: the most loaded tile boundary on its X-then-Y route."""
    tr, tc = mesh.tile_rows, mesh.tile_cols
    n_ty = -(-mesh.rows // tr)
    n_tx = -(-mesh.cols // tc)
    cy = (rects[:, 0] + rects[:, 2] // 2) // tr
    cx = (rects[:, 1] + rects[:, 3] // 2) // tc
    # load on vertical boundaries (between tile x and x+1 in tile row y) and horizontal ones
    vload = np.zeros((n_ty, max(n_tx - 1, 1)))
    hload = np.zeros((max(n_ty - 1, 1), n_tx))
    routes: list[tuple[int, int, int, int]] = []
    for s, t, b in zip(src.tolist(), dst.tolist(), nbytes.tolist(), strict=True):
        y0, x0, y1, x1 = int(cy[s]), int(cx[s]), int(cy[t]), int(cx[t])
        routes.append((y0, x0, y1, x1))
        if x0 != x1:
            vload[y0, min(x0, x1) : max(x0, x1)] += b
        if y0 != y1:
            hload[min(y0, y1) : max(y0, y1), x1] += b
    vcap = tr * mesh.link_bytes_per_cycle
    hcap = tc * mesh.link_bytes_per_cycle
    out = np.zeros(len(routes))
    for i, (y0, x0, y1, x1) in enumerate(routes):
        busy = 0.0
        if x0 != x1:
            busy = max(busy, float(vload[y0, min(x0, x1) : max(x0, x1)].max()) / vcap)
        if y0 != y1:
            busy = max(busy, float(hload[min(y0, y1) : max(y0, y1), x1].max()) / hcap)
        out[i] = busy
    return out
