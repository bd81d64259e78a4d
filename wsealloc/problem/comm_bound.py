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
    # (rows, columns) of disjoint rectangles no kernel may cover: keep-out areas and defective cores
    obstacles: tuple[tuple[int, int], ...] = ()

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
    return CommBoundProblem(
        tuple(shapes), flows(costs), mesh_params(arch), costs.total_cores, area_budgets(costs), obstacles(costs)
    )


def obstacles(costs: CostTable) -> tuple[tuple[int, int], ...]:
    """(rows, columns) of rectangles no kernel covers, pairwise disjoint (a packing argument adds them
    to the kernels): the keep-out areas that overlap none taken before them (an overlapping one is left
    out, which only weakens the bound), then each defective core outside those as 1 x 1."""
    arch = costs.arch
    boxes: list[tuple[int, int, int, int]] = []
    for y, x, r, c in costs.applied.obstacles if costs.applied is not None else ():
        if r > 0 and c > 0 and all(y >= y2 + r2 or y2 >= y + r or x >= x2 + c2 or x2 >= x + c for y2, x2, r2, c2 in boxes):
            boxes.append((y, x, r, c))
    d = arch.wafer.defects
    broken = defect_mask(arch.rows, arch.cols, d.cores, d.rate, d.seed)
    for y, x, r, c in boxes:
        broken[y : y + r, x : x + c] = False
    return tuple((r, c) for _, _, r, c in boxes) + ((1, 1),) * int(broken.sum())


def communication_bound(p: CommBoundProblem, hi: int, lo: int = 0) -> int | None:
    """The least T in [``lo``, ``hi``] that passes every test of the module docstring (None: not even
    ``hi``, which a valid layout with bottleneck ``hi`` would contradict). ``lo``: a proven bound of the
    same table (the allocation's), where the bisection may start."""
    mesh = p.mesh
    incoming = p.incoming()
    n = len(p.shapes)
    has_producer = [bool(incoming[k]) for k in range(n)]
    # each shape's stage time without the congestion term (it does not depend on T)
    fixed = [
        s.latency
        + mesh.hop_latency * has_producer[k]
        + (mesh.die_penalty * ((s.r - 1) // mesh.die_rows + (s.c - 1) // mesh.die_cols) if mesh.die_penalty else 0)
        for k, s in enumerate(p.shapes)
    ]
    # the dual-feasible functions of the rows and of the columns (``problem.dual_feasible``), the pairs
    # tested, what each pair allows (the wafer's transformed area) and what the obstacles take of it
    distinct = list({id(s): s for s in p.shapes}.values())
    heights = np.unique(np.concatenate([s.r for s in distinct] + [np.array([h for h, _ in p.obstacles], dtype=np.int64)]))
    widths = np.unique(np.concatenate([s.c for s in distinct] + [np.array([w for _, w in p.obstacles], dtype=np.int64)]))
    rows_f, cols_f = side_functions(mesh.rows, heights.tolist()), side_functions(mesh.cols, widths.tolist())
    pair_r, pair_c = pairs(len(rows_f), len(cols_f))
    capacity = rows_f[pair_r, mesh.rows] * cols_f[pair_c, mesh.cols]
    packed = np.zeros(pair_r.size, dtype=np.int64)
    for h, w in p.obstacles:
        packed += rows_f[pair_r, h] * cols_f[pair_c, w]
    busy = [np.maximum(0, s.latency - mesh.hop_latency * (s.r + s.c)).astype(np.float64) for s in p.shapes]

    def eligible(k: int, sides: np.ndarray, t: int) -> np.ndarray:
        """The shapes of kernel k whose stage lower bound meets t (``sides``: per kernel the most and
        the fewest rows and columns of the shapes it may take at t)."""
        s = p.shapes[k]
        stage = fixed[k]
        if incoming[k]:
            cong = np.zeros(s.r.size)
            for src, nbytes in incoming[k]:
                most_r, most_c, least_r, least_c = sides[src]
                beside = np.where(s.c + least_c <= mesh.cols, np.maximum(s.r, most_r), 0)
                above = np.where(s.r + least_r <= mesh.rows, np.maximum(s.c, most_c), 0)
                width = np.maximum(beside, above)  # 0: no rectangle of p fits apart from this one
                cong = np.maximum(cong, np.where(width > 0, nbytes / (mesh.link_bytes_per_cycle * np.maximum(width, 1)), np.inf))
            stage = stage + np.ceil(np.maximum(0.0, cong - busy[k] - LOAD_SLACK))  # float: inf where p cannot fit
        return stage <= t

    def fits(t: int) -> bool:
        # the sides of the rectangles each producer may take at T (its stage without congestion meets T)
        sides = np.zeros((n, 4), dtype=np.int64)
        for k, s in enumerate(p.shapes):
            within = fixed[k] <= t
            if not within.any():
                return False
            sides[k] = (s.r[within].max(), s.c[within].max(), s.r[within].min(), s.c[within].min())
        fewest = np.zeros(n, dtype=np.int64)
        load = packed.copy()  # per pair of dual-feasible functions: the transformed area taken
        seen: dict[tuple[object, ...], tuple[int, np.ndarray]] = {}
        for k, s in enumerate(p.shapes):
            # identical kernels fed alike (the repeated layers) give the same answer: test them once
            key = (id(s), has_producer[k], tuple((tuple(sides[src].tolist()), b) for src, b in incoming[k]))
            if key not in seen:
                ok = eligible(k, sides, t)
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

    return first_true(range(lo, hi + 1), fits)
