"""Exact optima computed from their definitions, without the solvers: the tests set the solvers' results
and recorded best values beside these (a recorded value alone proves nothing about the code).

* ``bottleneck_by_scan``: the single-wafer optimum. For a fixed target T the kernels are independent
  (each takes its fewest cores among the candidates of latency <= T), so the optimum is the smallest
  candidate latency at which those cores fit together: every T is tried, smallest first (no bisection,
  no use of the frontier's ordering), which ``test_solvers`` checks against brute force.
* ``pipeline_by_cuts``: the multi-wafer optimum over every choice of cut points, each stage's load its
  own scan optimum and the transfers of the cuts on either side (``problem.stages``' definition).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from wsealloc.problem import AllocationProblem
from wsealloc.problem.stages import StageProblem


def bottleneck_by_scan(p: AllocationProblem) -> int | None:
    """The optimal bottleneck latency of ``p`` (None: even the fewest cores do not fit)."""
    values = np.unique(np.concatenate([p.classes[c].latency for c in set(p.kernel_class)])).astype(np.int64)
    need = np.zeros(values.size, dtype=np.float64)  # inf: some kernel has no candidate that fast
    for c, count in Counter(p.kernel_class).items():
        ch = p.classes[c]
        # fewest cores among the candidates with latency <= T, for every T of ``values``
        fewest = [float(ch.cores[ch.latency <= t].min()) if (ch.latency <= t).any() else np.inf for t in values.tolist()]
        need += count * np.array(fewest)
    ok = need <= p.total_cores
    for budget in p.budgets:  # the user's areas: the same scan over their kernels
        inside = np.zeros(values.size, dtype=np.float64)
        for k in budget.kernels:
            ch = p.choices(k)
            inside += np.array(
                [float(ch.cores[ch.latency <= t].min()) if (ch.latency <= t).any() else np.inf for t in values.tolist()]
            )
        ok &= inside <= budget.cores
    fits = np.flatnonzero(ok)
    return None if fits.size == 0 else int(values[fits[0]])


def pipeline_by_cuts(sp: StageProblem, wafers: int) -> int | None:
    """The optimal slowest-stage load over at most ``wafers`` contiguous stages (None: no partition fits)."""
    n = sp.n_kernels
    transfer = sp.transfer_cycles()
    p = sp.alloc
    best = None
    for k in range(1, min(wafers, n) + 1):
        for inner in itertools.combinations(range(1, n), k - 1):
            cuts = (0, *inner, n)
            load: int | None = 0
            for a, b in itertools.pairwise(cuts):
                stage = AllocationProblem(p.names[a:b], p.kernel_class[a:b], p.classes, p.total_cores, p.hints)
                t = bottleneck_by_scan(stage)
                if t is None or load is None:
                    load = None
                    break
                load = max(load, t, int(transfer[a]), int(transfer[b]))
            if load is not None and (best is None or load < best):
                best = load
    return best
