"""The cost table of a weight-streamed model: every kernel in its turn on the whole wafer (one region of
all the kernels, ``cost.streaming``), and which kernels recompute their forward so the batch's stash
fits.

The region's SRAM per core is the sum of the kernels' stashes and the largest kernel's buffers. When
that is over the usable SRAM, kernels recompute (drop their stash, run their forward again) in order of
stash bytes freed per cycle added, the best first, until it fits: a greedy knapsack (not proven
optimal; docs/cost-model.md, section 12). None recompute when the stash fits.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wsealloc.cost import Dataflow, KernelWork, StreamedWork, TrainingWork, grid_costs
from wsealloc.cost.streaming import streamed_floor
from wsealloc.opmodels.regions import region_table
from wsealloc.opmodels.table import CostTable


def recompute_choice(costs: CostTable, batch: int) -> tuple[bool, ...]:
    """Which kernels recompute under streaming with ``batch`` samples per pass (module docstring)."""
    arch = costs.arch
    r, c = np.array([arch.rows]), np.array([arch.cols])
    keep: list[tuple[int, int, int]] = []  # per kernel: stash, buffers, latency with the stash
    again: list[tuple[int, int, int]] = []  # ... recomputing
    for kc in costs.kernels:
        row = []
        for recompute in (False, True):
            g = grid_costs(StreamedWork(_inner(kc.work), batch, recompute), arch, costs.options, Dataflow.STREAM, r, c)
            p = g.sram_parts()
            row.append((int(p.state[0]), int(p.buffers[0]), int(g.latency[0])))
        keep.append(row[0])
        again.append(row[1])
    chosen = [False] * len(keep)
    usable = arch.usable_sram_bytes
    training = costs.options.train is not None
    while training:
        held = [again[k] if chosen[k] else keep[k] for k in range(len(keep))]
        if sum(h[0] for h in held) + max((h[1] for h in held), default=0) <= usable:
            break
        gains = [
            ((keep[k][0] - again[k][0]) / max(again[k][2] - keep[k][2], 1), k)
            for k in range(len(keep))
            if not chosen[k] and keep[k][0] > again[k][0]
        ]
        if not gains:
            break  # everything recomputes and it still does not fit: the region is illegal (SRAM)
        chosen[max(gains)[1]] = True
    return tuple(chosen)


def _inner(work: object) -> KernelWork | TrainingWork:
    if not isinstance(work, KernelWork | TrainingWork):
        raise ValueError(f"weight streaming costs forward or training kernels, not {type(work).__name__}")
    return work


def streaming_table(costs: CostTable, batch: int, *, recompute: bool = True) -> CostTable:
    """The streamed model's cost table: one region of every kernel on the whole wafer, each kernel's
    work a :class:`StreamedWork` (with the recomputation :func:`recompute_choice` makes; ``recompute``
    False: every kernel keeps its stash)."""
    chosen = recompute_choice(costs, batch) if recompute else (False,) * len(costs.kernels)
    kernels = tuple(
        replace(kc, work=StreamedWork(_inner(kc.work), batch, rec)) for kc, rec in zip(costs.kernels, chosen, strict=True)
    )
    members = replace(costs, kernels=kernels)
    whole = np.array([[costs.arch.rows, costs.arch.cols]], dtype=np.int64)
    return region_table(members, [(0, len(kernels))], shapes=whole)


def lower_bound(costs: CostTable, batch: int) -> int:
    """A proven lower bound on the streamed time per sample: every kernel's turn on its fastest dataflow
    with its stash kept and SRAM ignored (``cost.streaming.streamed_floor``), summed (the region runs
    them one after another)."""
    arch = costs.arch
    r, c = np.array([arch.rows]), np.array([arch.cols])
    return sum(
        int(streamed_floor(StreamedWork(_inner(kc.work), batch), arch, costs.options, r, c, grid_costs)[0])
        for kc in costs.kernels
    )


def largest_batch(costs: CostTable, limit: int = 1 << 16) -> int:
    """The largest batch whose streamed region fits the wafer's SRAM (0: not even one sample), by
    bisection (a larger batch needs at least as much SRAM: more activations per kernel)."""

    def fits(batch: int) -> bool:
        unit = streaming_table(costs, batch).kernels[0]
        return len(unit.frontier) > 0

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
