"""The sharing search over several wafers (``solvers.share_wafers``) against brute force: every cut
into at most W wafers, every partition of each wafer's kernels into runs, every grid per run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from wsealloc.budget import Deadline
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.solvers.base import Status
from wsealloc.solvers.share_wafers import plan_time, solve


def _one_wafer(sp: SharingProblem, a: int, b: int) -> int | None:
    """The least latency of kernels [a, b) on one wafer (every partition, every grid)."""
    cores = sp.cores()
    best = None
    for cuts in itertools.product((False, True), repeat=b - a - 1):
        bounds = [a] + [a + i + 1 for i, cut in enumerate(cuts) if cut] + [b]
        runs = list(zip(bounds[:-1], bounds[1:], strict=True))
        for grids in itertools.product(range(sp.shapes.shape[0]), repeat=len(runs)):
            lat, used = 0, 0
            for (i, j), g in zip(runs, grids, strict=True):
                need = sp.resident[i:j, g].sum() + sp.buffers[i:j, g].max()
                if (sp.latency[i:j, g] >= INF).any() or need > sp.usable_sram:
                    break
                lat += int(sp.latency[i:j, g].sum())
                used += int(cores[g])
            else:
                if used <= sp.total_cores and (best is None or lat < best):
                    best = lat
    return best


def _brute(sp: SharingProblem, links: np.ndarray, wafers: int) -> int | None:
    n = sp.n_kernels
    best = None
    for count in range(1, wafers + 1):
        for inner in itertools.combinations(range(1, n), count - 1):
            cuts = (0, *inner, n)
            parts = [_one_wafer(sp, a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
            if any(p is None for p in parts):
                continue
            total = sum(p for p in parts if p is not None) + int(sum(links[c] for c in inner))
            best = total if best is None or total < best else best
    return best


@pytest.mark.parametrize("seed", range(16))
def test_wafers_sharing_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, g_count, wafers = int(rng.integers(2, 7)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    shapes = np.array(sorted({(int(s), int(s)) for s in rng.integers(1, 5, size=g_count)}))
    lat = rng.integers(5, 60, size=(n, len(shapes))).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, len(shapes))).astype(np.float64)
    buffers = rng.integers(0, 20, size=(n, len(shapes))).astype(np.float64)
    total = int(rng.integers(int((shapes[:, 0] ** 2).min()), int((shapes[:, 0] ** 2).sum()) + 2))
    sp = SharingProblem(tuple(f"k{i}" for i in range(n)), shapes, lat, resident, buffers, 60, total)
    links = np.concatenate(([0], rng.integers(1, 25, size=n - 1), [0])).astype(np.int64)
    best = _brute(sp, links, wafers)
    found = solve(sp, links, wafers, Deadline.after(30))
    if best is None:
        assert found.status is Status.INFEASIBLE
        return
    assert found.status is Status.OPTIMAL, found.message
    assert found.latency == best == found.bound
    assert len(found.cuts) - 1 <= wafers
    assert plan_time(sp, links, found.cuts, found.runs, found.grids) == best
    cores = sp.cores()
    for w in range(len(found.cuts) - 1):  # every wafer's runs within its budget, none crossing a cut
        runs, grids = found.wafer_runs(w)
        assert sum(int(cores[g]) for g in grids) <= total
        assert runs[0][0] == 0 and runs[-1][1] == found.cuts[w + 1] - found.cuts[w]
