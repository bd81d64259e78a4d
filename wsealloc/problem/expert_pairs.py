"""Each MoE layer kept whole or split, chosen by the exact search itself: the sharing problem of the
table whose layers are all split into two shards (``opmodels.experts``), with charges that make a run
holding both shards of a layer cost what the whole layer costs (numbers only; ``strategy.wafers``
builds it, ``solvers.share_wafers`` solves it).

A layer split into shards s0, s1 costs ``l0 + l1`` on the runs that hold them (both on one grid, or
each on its own); kept whole it costs ``lw`` on one grid. The plans of the split table where a run
holding both shards stands for the whole layer are every plan with each layer in either form, and
the exact search can price them if a run's time depends only on its own kernels and its ends: s0
costs ``lw - l1`` on grid g, and a run on g whose last kernel is s0 (s1 on the next run, or on the
next wafer: the layer split) is charged ``l0 - (lw - l1)`` more (``SharingProblem.ends``), so that

- s0 and s1 in one run on g: ``(lw - l1) + l1 = lw``, the whole layer;
- a run ending after s0 on g, s1 later on g': ``l0 + l1``, the split layer.

Where the whole layer cannot be laid on g, or runs slower than its shards (``lw > l0 + l1``), or
faster than its second shard alone (``lw < l1``, which would make s0's share negative), a run holding
both shards keeps them split (no charge: ``l0 + l1``). The SRAM is judged conservatively, so that a
run that fits in this problem fits in the form it is lowered to: s0 holds at least ``rw - r1`` bytes
a core (the whole layer's resident bytes less s1's) and at least the whole layer's buffers; and no
region inside a stacked column begins between the shards (``SharingProblem.unbroken``: a column's
regions then hold both shards in one region, which the whole layer replaces). Exact for the plans
it admits; it may refuse a plan whose whole layer would fit only where the shards' bytes do not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from wsealloc.problem.sharing import INF, SharingProblem


@dataclass(frozen=True)
class Paired:
    """The paired problem (``problem``: every layer split, the charges in it), each pair's first
    shard in the split sequence (``first``), its layer's index in the whole table (``layer``) and
    the grids where both shards in one run run as the whole layer (``whole_on[p, g]``)."""

    problem: SharingProblem
    first: np.ndarray  # [P]
    layer: np.ndarray  # [P]
    whole_on: np.ndarray  # [P, G]

    def kept(self, runs: tuple[tuple[int, int], ...], grids: tuple[int, ...]) -> np.ndarray:
        """[P] whether each layer runs whole in a plan of the paired problem: both shards in one of
        its runs, on a grid where the pair runs as the whole layer."""
        starts = np.array([i for i, _ in runs], dtype=np.int64)
        at = np.searchsorted(starts, self.first, side="right") - 1  # the run holding each first shard
        ends = np.array([j for _, j in runs], dtype=np.int64)[at]
        on = np.array(grids, dtype=np.int64)[at]
        return (ends > self.first + 1) & self.whole_on[np.arange(self.first.size), on]

    def positions(self, kept: np.ndarray) -> np.ndarray:
        """[n + 1] each kernel boundary of the split sequence in the sequence where the ``kept``
        layers are one kernel again (a kept layer's inner boundary maps to its end: never used)."""
        n = self.problem.n_kernels
        removed = np.zeros(n + 1, dtype=np.int64)
        removed[self.first[kept] + 2] = 1  # past a kept layer's second shard, one kernel fewer
        return np.arange(n + 1) - np.cumsum(removed)


def paired_problem(split: SharingProblem, whole: SharingProblem, pairs: list[tuple[int, int]]) -> Paired:
    """The paired problem of ``split`` (every layer's two shards, ``pairs``: (first shard's index in
    ``split``, the layer's index in ``whole``)) with the whole layers of ``whole`` (the same grids)."""
    lat, res, buf = split.latency.copy(), split.resident.copy(), split.buffers.copy()
    ends = np.zeros_like(lat)
    unbroken = np.zeros(split.n_kernels + 1, dtype=bool)
    first = np.array([s for s, _ in pairs], dtype=np.int64)
    layer = np.array([w for _, w in pairs], dtype=np.int64)
    whole_on = np.zeros((len(pairs), lat.shape[1]), dtype=bool)
    for p, (s0, w) in enumerate(pairs):
        l0, l1, lw = split.latency[s0], split.latency[s0 + 1], whole.latency[w]
        ok = (l0 < INF) & (l1 < INF) & (lw < INF) & (lw >= l1) & (lw <= l0 + l1)
        whole_on[p] = ok
        lat[s0] = np.where(ok, lw - l1, l0)
        ends[s0] = np.where(ok, l0 - (lw - l1), 0)
        res[s0] = np.where(ok, np.maximum(res[s0], whole.resident[w] - split.resident[s0 + 1]), res[s0])
        buf[s0] = np.where(ok, np.maximum(buf[s0], whole.buffers[w]), buf[s0])
        unbroken[s0 + 1] = True
    problem = replace(split, latency=lat, resident=res, buffers=buf, ends=ends, unbroken=unbroken)
    return Paired(problem, first, layer, whole_on)


__all__ = ["Paired", "paired_problem"]
