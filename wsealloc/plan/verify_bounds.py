"""The verifier's own recomputation of the bound that counts communication (``problem.comm_bound``).

A plan's ``objective.comm_bound_cycles`` is a proof claim, so ``verify`` derives it again from the
cost table it rebuilt, without the solvers' module: the same definition, written out kernel by kernel.
At a target T a kernel may take a legal grid (fitting the wafer) only if

    latency + hop (when it has a producer; disjoint rectangles are a hop apart at least)
            + die penalty x boundaries its rows and columns must span
            + the congestion beyond max(compute, NoC) of the busiest incoming pair, each pair's bytes
              over the widest bundle the pair could run in: side by side, the consumer's rows or the
              most rows of a grid the producer may take at T; stacked (when the fewest rows of the
              producer's grids fit above or below), the same with columns
    <= T;

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

    def base(k: int) -> np.ndarray:  # latency, the hop to a producer and the die crossings: no T in them
        r, c, lat, _ = grids[k]
        crossings = (r - 1) // wafer.die_cores.rows + (c - 1) // wafer.die_cores.cols
        return lat + (hop if k in into else 0) + penalty * crossings

    bases = [base(k) for k in range(len(grids))]
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
    sides = [(h, w) for _, _, h, w in holes] + [(1, 1)] * int(bad.sum())
    fr = side_functions(arch.rows, set(np.concatenate([g[0] for g in grids]).tolist()) | {h for h, _ in sides})
    fc = side_functions(arch.cols, set(np.concatenate([g[1] for g in grids]).tolist()) | {w for _, w in sides})
    pr, pc = pairs(len(fr), len(fc))
    room = fr[pr, arch.rows] * fc[pc, arch.cols]
    taken = sum((fr[pr, h] * fc[pc, w] for h, w in sides), np.zeros(pr.size, dtype=np.int64))
    signature = [kc.signature for kc in table.kernels]

    def fits(t: int) -> bool:
        reach: list[tuple[int, int, int, int]] = []  # most rows, most columns, fewest rows, fewest columns at t
        for k, (r, c, _, _) in enumerate(grids):
            may = bases[k] <= t
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
                for s, b in into[k].items():
                    rows_p, cols_p, fewest_rows_p, fewest_cols_p = reach[s]
                    bundle = np.zeros(r.size)
                    side_by_side = c + fewest_cols_p <= arch.cols
                    bundle[side_by_side] = np.maximum(r[side_by_side], rows_p)
                    stacked = r + fewest_rows_p <= arch.rows
                    bundle[stacked] = np.maximum(bundle[stacked], np.maximum(c[stacked], cols_p))
                    load = np.full(r.size, np.inf)  # no grid of the producer fits apart from this one
                    load[bundle > 0] = b / (float(noc.link_bytes_per_cycle) * bundle[bundle > 0])
                    busiest = np.maximum(busiest, load)
                stage = stage + np.ceil(np.clip(busiest - compute - 1e-6, 0, None))
            may = stage <= t
            if not np.any(may):
                return False
            least[k] = int(np.min(n[may]))
            key = (signature[k], may.tobytes())
            if key not in memo:
                # f and g never fall as a side grows: per height only the narrowest grid can be least
                heights = np.unique(r[may])
                narrowest = np.array([int(c[may][r[may] == h].min()) for h in heights], dtype=np.int64)
                memo[key] = np.min(fr[:, heights][pr] * fc[:, narrowest][pc], axis=1)
            transformed += memo[key]
        return (
            int(least.sum()) <= table.total_cores
            and bool(np.all(transformed <= room))
            and all(sum(int(least[k]) for k in b.kernels) <= b.cores for b in budgets)
        )

    return first_true(range(value + 1), fits)
