"""The verifier's own recomputation of the bound that counts communication (``problem.comm_bound``).

A plan's ``objective.comm_bound_cycles`` is a proof claim, so ``verify`` derives it again from the
cost table it rebuilt, without the solvers' module: the same definition, written out kernel by kernel.
At a target T a kernel may take a legal grid (fitting the wafer) only if

    latency + hop (when it has a producer; disjoint rectangles are a hop apart at least; with its
                   corner and the producer's fixed, the fewest hops any grid of the producer leaves)
            + die penalty x boundaries its rows and columns must span (at a fixed corner: cross there)
            + the congestion beyond max(compute, NoC) of the busiest incoming pair, each pair's bytes
              over the widest bundle the pair could run in: side by side, the consumer's rows or the
              most rows of a grid the producer may take at T; stacked (when the fewest rows of the
              producer's grids fit above or below; at fixed corners, in the room they leave), the
              same with columns
    <= T,

a grid at a fixed corner also inside the wafer and off the keep-outs and defective cores there;

the fewest cores of those grids must fit the wafer and each user's area; and for every pair (f, g) of
the dual-feasible functions of ``problem.dual_feasible`` (the one definition of that family, whose
property the tests check on every small multiset), the least f(rows) g(columns) over each kernel's
grids, added up with the keep-out areas (those overlapping none listed before them) and the defective
cores outside them, must not exceed f(wafer rows) g(wafer columns). The least such T, by bisection
over the integers up to the plan's value.
"""

from __future__ import annotations

import numpy as np

from wsealloc.opmodels import CostTable
from wsealloc.problem.allocation import area_budgets
from wsealloc.problem.dual_feasible import pairs, side_functions
from wsealloc.problem.flows import flows
from wsealloc.problem.placement import defect_mask
from wsealloc.search import first_true


def communication_bound(table: CostTable, value: int) -> int | None:
    """The least T <= ``value`` meeting the module docstring's tests (None: not even ``value``)."""
    arch = table.arch
    noc, wafer = arch.noc, arch.wafer
    hop = int(noc.hop_latency_cycles)
    penalty = int(wafer.die_crossing_penalty_cycles) if wafer.die_boundary.value == "penalty" else 0
    grids = []
    for kc in table.kernels:
        t = kc.table
        ok = t.legal() & (t.r <= arch.rows) & (t.c <= arch.cols)
        grids.append((t.r[ok].astype(np.int64), t.c[ok].astype(np.int64), t.latency[ok].astype(np.int64), t.cores[ok]))
    # bytes per (consumer, producer): tensors of one multicast group once (the largest), groups added
    fl = flows(table)
    largest: dict[tuple[int, int, int], float] = {}
    for f in range(fl.src.size):
        s, d, g = int(fl.src[f]), int(fl.dst[f]), int(fl.group[f])
        if s == d:
            continue
        largest[(d, s, g)] = max(largest.get((d, s, g), 0.0), float(fl.nbytes[f]))
    into: dict[int, dict[int, float]] = {}
    for (d, s, _), b in largest.items():
        into.setdefault(d, {})
        into[d][s] = into[d].get(s, 0.0) + b
    budgets = area_budgets(table)

    # what no kernel covers, pairwise disjoint: keep-outs overlapping none before them, other defects 1 x 1
    holes: list[tuple[int, int, int, int]] = []
    for y, x, h, w in table.applied.obstacles if table.applied is not None else ():
        clear = all(y + h <= y2 or y2 + h2 <= y or x + w <= x2 or x2 + w2 <= x for y2, x2, h2, w2 in holes)
        if clear and h > 0 and w > 0:
            holes.append((y, x, h, w))
    broken = wafer.defects
    bad = defect_mask(arch.rows, arch.cols, broken.cores, broken.rate, broken.seed)
    for y, x, h, w in holes:
        bad[y : y + h, x : x + w] = False
    blocked = holes + [(int(y), int(x), 1, 1) for y, x in np.argwhere(bad).tolist()]
    applied = table.applied
    corner = [
        (q[1] if applied is not None and (q := applied.pin_of(kc.kernel.name)) is not None else None) for kc in table.kernels
    ]
    dies = (wafer.die_cores.rows, wafer.die_cores.cols)

    def base(k: int) -> np.ndarray:  # latency, the hop to a producer and the die crossings: no T in them
        r, c, lat, _ = grids[k]
        here = corner[k]
        if here is None:
            crossings = (r - 1) // dies[0] + (c - 1) // dies[1]
            return lat + (hop if k in into else 0) + penalty * crossings
        # a fixed corner: the boundaries crossed there, and no grid past the edge or over a hole
        y, x = here
        crossings = (y + r - 1) // dies[0] - y // dies[0] + (x + c - 1) // dies[1] - x // dies[1]
        ok = (y + r <= arch.rows) & (x + c <= arch.cols)
        for y2, x2, h2, w2 in blocked:
            ok &= ~((y < y2 + h2) & (y2 < y + r) & (x < x2 + w2) & (x2 < x + c))
        return np.where(ok, lat + (hop if k in into else 0) + penalty * crossings, np.iinfo(np.int64).max // 4)

    bases = [base(k) for k in range(len(grids))]
    sides = [(h, w) for _, _, h, w in blocked]
    fr = side_functions(arch.rows, set(np.concatenate([g[0] for g in grids]).tolist()) | {h for h, _ in sides})
    fc = side_functions(arch.cols, set(np.concatenate([g[1] for g in grids]).tolist()) | {w for _, w in sides})
    pr, pc = pairs(len(fr), len(fc))
    room = fr[pr, arch.rows] * fc[pc, arch.cols]
    taken = np.zeros(pr.size, dtype=np.int64)
    for h, w in set(sides):
        taken += sides.count((h, w)) * fr[pr, h] * fc[pc, w]
    signature = [kc.signature for kc in table.kernels]

    def apart(
        k: int, s: int, may: np.ndarray, fewest_rows_p: int, fewest_cols_p: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Per grid of consumer k: can its column spans and producer s's (on its grids ``may``) be
        disjoint, can its row spans, and the fewest hops between them when both corners are fixed
        (inf when they must overlap; None: one hop, the least of any two rectangles)."""
        r, c = grids[k][0], grids[k][1]
        one = None
        mine, theirs = corner[k], corner[s]
        if mine is None and theirs is None:
            return c + fewest_cols_p <= arch.cols, r + fewest_rows_p <= arch.rows, one
        if theirs is None:  # the producer lies in the room left of, right of, above or below k
            assert mine is not None
            y, x = mine
            cols_ok = (fewest_cols_p <= x) | (x + c + fewest_cols_p <= arch.cols)
            return cols_ok, (fewest_rows_p <= y) | (y + r + fewest_rows_p <= arch.rows), one
        py, px = theirs
        if mine is None:  # k lies before the producer's corner or past its least extent
            return (c <= px) | (px + fewest_cols_p + c <= arch.cols), (r <= py) | (py + fewest_rows_p + r <= arch.rows), one
        y, x = mine
        sides_r, sides_c = np.unique(grids[s][0][may]), np.unique(grids[s][1][may])

        def gaps(at: int, side: np.ndarray, p_at: int, p_sides: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Every pair (grid of k, side of the producer) along one axis: the fewest hops across
            when the spans are disjoint (inf if never), and the fewest over all of them."""
            end, p_end = at + side[:, None] - 1, p_at + p_sides[None, :] - 1
            gap = np.maximum(p_at - end, at - p_end)  # >= 1: disjoint, the hops across
            return np.where(gap >= 1, gap, np.inf).min(axis=1), np.maximum(gap, 0).min(axis=1)

        apart_y, any_y = gaps(y, r, py, sides_r)
        apart_x, any_x = gaps(x, c, px, sides_c)
        return np.isfinite(apart_x), np.isfinite(apart_y), np.minimum(apart_y + any_x, any_y + apart_x)

    def usable(t: int) -> list[np.ndarray]:
        """Per kernel the grids whose base meets t; at a fixed corner, none over the block another
        fixed corner's kernel covers whatever grid it takes there (its fewest rows x fewest columns)."""
        out = [b <= t for b in bases]
        covered = []
        for j, here in enumerate(corner):
            if here is not None and np.any(out[j]):
                covered.append((j, here[0], here[1], int(np.min(grids[j][0][out[j]])), int(np.min(grids[j][1][out[j]]))))
        if not covered:
            return out
        owner, y2, x2, h2, w2 = (np.array(v, dtype=np.int64) for v in zip(*covered, strict=True))
        for k, here in enumerate(corner):
            if here is None:
                continue
            live = np.flatnonzero(out[k])
            if live.size == 0:
                continue
            # every grid still usable against every other corner's block at once (an old plan's 442
            # corners took 24 s pair by pair)
            r, c = grids[k][0][live][:, None], grids[k][1][live][:, None]
            other = owner != k
            hit = (here[0] < y2 + h2) & (y2 < here[0] + r) & (here[1] < x2 + w2) & (x2 < here[1] + c) & other
            out[k] = out[k].copy()
            out[k][live[hit.any(axis=1)]] = False
        return out

    def fits(t: int) -> bool:
        reach: list[tuple[int, int, int, int]] = []  # most rows, most columns, fewest rows, fewest columns at t
        usable_now = usable(t)
        for k, (r, c, _, _) in enumerate(grids):
            may = usable_now[k]
            if not np.any(may):
                return False
            reach.append((int(np.max(r[may])), int(np.max(c[may])), int(np.min(r[may])), int(np.min(c[may]))))
        least = np.zeros(len(grids), dtype=np.int64)
        transformed = taken.copy()
        memo: dict[tuple[int, bytes], np.ndarray] = {}
        for k, (r, c, lat, n) in enumerate(grids):
            stage = bases[k]
            if k in into:
                compute = np.clip(lat - hop * (r + c), 0, None)
                busiest = np.zeros(r.size)
                farthest: np.ndarray | float = 1.0
                for s, b in into[k].items():
                    rows_p, cols_p, fewest_rows_p, fewest_cols_p = reach[s]
                    side_by_side, stacked, hops = apart(k, s, usable_now[s], fewest_rows_p, fewest_cols_p)
                    bundle = np.zeros(r.size)
                    bundle[side_by_side] = np.maximum(r[side_by_side], rows_p)
                    bundle[stacked] = np.maximum(bundle[stacked], np.maximum(c[stacked], cols_p))
                    load = np.full(r.size, np.inf)  # no grid of the producer fits apart from this one
                    load[bundle > 0] = b / (float(noc.link_bytes_per_cycle) * bundle[bundle > 0])
                    busiest = np.maximum(busiest, load)
                    if hops is not None:
                        farthest = np.maximum(farthest, hops)
                stage = stage + hop * (farthest - 1) + np.ceil(np.clip(busiest - compute - 1e-6, 0, None))
            may = stage <= t
            if corner[k] is not None:  # (elsewhere the stage meeting t implies the base does)
                may &= usable_now[k]
            if not np.any(may):
                return False
            least[k] = int(np.min(n[may]))
            key = (signature[k], may.tobytes())
            if key not in memo:
                # f and g never fall as a side grows: per height only the narrowest grid can be least
                rows_may, cols_may = r[may], c[may]
                order = np.lexsort((cols_may, rows_may))  # by height, then width: each height's first is narrowest
                first = np.concatenate(([True], np.diff(rows_may[order]) != 0))
                heights, narrowest = rows_may[order][first], cols_may[order][first]
                memo[key] = np.min(fr[:, heights][pr] * fc[:, narrowest][pc], axis=1)
            transformed += memo[key]
        return (
            int(least.sum()) <= table.total_cores
            and bool(np.all(transformed <= room))
            and all(sum(int(least[k]) for k in b.kernels) <= b.cores for b in budgets)
        )

    return first_true(range(value + 1), fits)
