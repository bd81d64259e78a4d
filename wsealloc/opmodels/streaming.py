"""The cost table of a weight-streamed model: every kernel in its turn on the whole wafer (one region of
all the kernels, ``cost.streaming``), and which kernels recompute their forward so the batch's stash
fits.

The region's SRAM per core is the sum of the kernels' stashes, the largest replay and the largest
kernel's buffers (``cost.streaming``). Under ``--recompute auto``, when that is over the usable SRAM,
whole segments recompute (keep their checkpoint, replay their forward): the set that fits with the
fewest cycles added, exactly. For each segment p that may have the largest replay, the others whose
replay is no larger are a covering knapsack (free at least what is over, fewest cycles), solved by
dynamic programming over the bytes (:func:`cheapest_cover`); the best p wins (docs/cost-model.md,
section 12). None recompute when the stash fits; ``all`` recomputes every segment, ``none`` none.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wsealloc.cost import Dataflow, ExpertsWork, KernelWork, StreamedWork, TrainingWork, grid_costs
from wsealloc.cost.model import Attention, Checkpoints, Recompute
from wsealloc.cost.streaming import streamed_floor
from wsealloc.errors import InfeasibleError
from wsealloc.opmodels.regions import region_table
from wsealloc.opmodels.table import CostTable, attention_roles_of


def recompute_choice(costs: CostTable, batch: int) -> tuple[tuple[bool, bool], ...]:
    """Per kernel whether its segment recomputes under streaming with ``batch`` samples per pass, and
    whether its segment's replay is the largest (``StreamedWork.replayed``; module docstring)."""
    arch = costs.arch
    r, c = np.array([arch.rows]), np.array([arch.cols])
    n = len(costs.kernels)
    segment = [kc.work.segment if isinstance(kc.work, TrainingWork) else -1 - k for k, kc in enumerate(costs.kernels)]
    # per kernel: SRAM state kept, recomputing (the checkpoint), recomputing with its replay; buffers;
    # latency kept and recomputing
    state: list[tuple[int, int, int]] = []
    buffers: list[int] = []
    latency: list[tuple[int, int]] = []
    forms = with_room(costs, streamed_forms(costs), batch)
    seen: dict[StreamedWork, tuple[int, int, int]] = {}  # equal forms (repeated layers: ``cost_key``) are costed once
    for form in forms:
        row = []
        for recompute, replayed in ((False, False), (True, False), (True, True)):
            streamed = replace(form, recompute=recompute, replayed=replayed)
            key = streamed.cost_key
            if key not in seen:
                g = grid_costs(streamed, arch, costs.options, Dataflow.STREAM, r, c)
                seen[key] = (int(g.sram_parts().state[0]), int(g.sram_parts().buffers[0]), int(g.latency[0]))
            row.append(seen[key])
        state.append((row[0][0], row[1][0], row[2][0]))
        buffers.append(row[0][1])
        latency.append((row[0][2], row[1][2]))
    members: dict[int, list[int]] = {}
    for k in range(n):
        members.setdefault(segment[k], []).append(k)
    mode = costs.options.train.recompute if costs.options.train is not None else Recompute.NONE
    choosable = [s for s in members if s >= 0] if mode is not Recompute.NONE else []
    chosen: set[int] = set(choosable) if mode is Recompute.ALL else set()

    def replay(s: int) -> int:
        return sum(state[k][2] - state[k][1] for k in members[s])

    def total(picked: set[int]) -> int:
        kept = sum(state[k][1] if segment[k] in picked else state[k][0] for k in range(n))
        return kept + max((replay(s) for s in picked), default=0) + max(buffers, default=0)

    if mode is Recompute.AUTO and total(chosen) > arch.usable_sram_bytes:
        save = {s: sum(state[k][0] - state[k][1] for k in members[s]) for s in choosable}
        slower = {s: sum(latency[k][1] - latency[k][0] for k in members[s]) for s in choosable}
        best: tuple[int, set[int]] | None = None
        for p in choosable:  # the segment whose replay is the largest (module docstring)
            others = [s for s in choosable if s != p and (replay(s), -s) <= (replay(p), -p)]
            need = total({p}) - arch.usable_sram_bytes
            cover = cheapest_cover([(save[s], slower[s]) for s in others], need)
            if cover is not None and (best is None or slower[p] + cover[0] < best[0]):
                best = (slower[p] + cover[0], {p, *(others[i] for i in cover[1])})
        chosen = best[1] if best is not None else set(choosable)  # nothing fits: all recompute, still over
    peak = max(chosen, key=lambda s: (replay(s), -s), default=None)
    return tuple((segment[k] in chosen, segment[k] == peak) for k in range(n))


def cheapest_cover(items: list[tuple[int, int]], need: int) -> tuple[int, list[int]] | None:
    """The fewest cycles that free at least ``need`` bytes: a subset of ``items`` (bytes freed, cycles
    added; each taken once) by dynamic programming over the bytes still needed: exact up to 2**20 bytes;
    beyond, bytes in units of ``need // 2**20 + 1``, each item's rounded down so the cover still frees
    ``need`` (optimal in those units). None: no subset frees it."""
    if need <= 0:
        return 0, []
    if sum(b for b, _ in items) < need:
        return None
    unit = need // 2**20 + 1
    size = -(-need // unit)
    inf = np.iinfo(np.int64).max // 4
    cost = np.full(size + 1, inf, dtype=np.int64)  # cost[x]: fewest cycles freeing at least x units
    cost[0] = 0
    took = np.zeros((len(items), size + 1), dtype=bool)
    at = np.arange(size + 1)
    for i, (freed, cycles) in enumerate(items):
        with_it = cost[np.maximum(at - freed // unit, 0)] + cycles
        took[i] = with_it < cost
        cost = np.minimum(cost, with_it)
    if cost[size] >= inf:
        return None  # the rounding lost what made it fit: no cover in these units
    picked, x = [], size
    for i in range(len(items) - 1, -1, -1):
        if took[i, x]:
            picked.append(i)
            x = max(x - items[i][0] // unit, 0)
    return int(cost[size]), sorted(picked)


def attention_roles(costs: CostTable) -> list[tuple[int, bool]]:
    """Per kernel of ``costs``, with attention recomputed: the bytes per sample of its inputs that are
    attention's S x S scores or probabilities, and whether its output is one
    (``opmodels.table.attention_roles_of``: attention found by its shape in the kernel graph)."""
    works = [kc.work.forward if isinstance(kc.work, TrainingWork) else kc.work for kc in costs.kernels]
    return attention_roles_of(works, costs.edges)


def streamed_forms(costs: CostTable) -> list[StreamedWork]:
    """Each kernel's streamed work with the training options' memory forms set (``Attention``: the S x S
    roles of :func:`attention_roles`; ``Checkpoints``: a recomputing segment's checkpoint off the wafer),
    its batch and recomputation still to be given (one sample, none)."""
    train = costs.options.train
    recomputed = train is not None and train.attention is Attention.RECOMPUTED
    offwafer = train is not None and train.checkpoints is Checkpoints.OFFWAFER
    roles = attention_roles(costs) if recomputed else [(0, False)] * len(costs.kernels)
    return [
        StreamedWork(_inner(kc.work), 1, probs_in=p_in, probs_out=p_out, offwafer=offwafer)
        for kc, (p_in, p_out) in zip(costs.kernels, roles, strict=True)
    ]


def with_room(costs: CostTable, forms: list[StreamedWork], batch: int) -> list[StreamedWork]:
    """The forms for ``batch`` samples a pass, each kernel of attention recomputed given the room its
    strips may take (``StreamedWork.room``): the largest buffers a core of the other kernels' turns,
    which the region holds anyway."""
    if not any(f.probs_in or f.probs_out for f in forms):
        return [replace(f, batch=batch) for f in forms]
    arch = costs.arch
    r, c = np.array([arch.rows]), np.array([arch.cols])
    seen: dict[StreamedWork, int] = {}
    for f in forms:
        if f.probs_in or f.probs_out:
            continue
        work = replace(f, batch=batch)
        if work.cost_key not in seen:
            seen[work.cost_key] = int(grid_costs(work, arch, costs.options, Dataflow.STREAM, r, c).sram_parts().buffers[0])
    room = max(seen.values(), default=0)
    return [replace(f, batch=batch, room=room if f.probs_in or f.probs_out else 0) for f in forms]


def _inner(work: object) -> KernelWork | TrainingWork:
    if isinstance(work, ExpertsWork):  # (--mode auto then takes the layer pipeline)
        raise InfeasibleError(
            "weight streaming has no form for mixture-of-experts layers (their experts are resident: k of E work per "
            "token); use --mode pipelined"
        )
    if not isinstance(work, KernelWork | TrainingWork):
        raise ValueError(f"weight streaming costs forward or training kernels, not {type(work).__name__}")
    if isinstance(work, TrainingWork):  # the forms are the streamed work's (StreamedWork), not the pipeline's
        return replace(work, probs_in=0, probs_out=False, offwafer=False)
    return work


def streaming_table(costs: CostTable, batch: int, *, recompute: bool = True, global_batch: int | None = None) -> CostTable:
    """The streamed model's cost table: one region of every kernel on the whole wafer, each kernel's
    work a :class:`StreamedWork` (with the recomputation :func:`recompute_choice` makes; ``recompute``
    False: every kernel keeps its stash); ``global_batch``: micro-batches of ``batch`` samples, as many
    passes as cover it per weight update (``StreamedWork.passes``)."""
    chosen = recompute_choice(costs, batch) if recompute else ((False, False),) * len(costs.kernels)
    kernels = tuple(
        replace(kc, work=replace(form, recompute=rec, replayed=peak, global_batch=global_batch))
        for kc, form, (rec, peak) in zip(costs.kernels, with_room(costs, streamed_forms(costs), batch), chosen, strict=True)
    )
    members = replace(costs, kernels=kernels)
    whole = np.array([[costs.arch.rows, costs.arch.cols]], dtype=np.int64)
    return region_table(members, [(0, len(kernels))], shapes=whole)


def lower_bound(costs: CostTable, batch: int, global_batch: int | None = None) -> int:
    """A proven lower bound on the streamed time per sample: every kernel's turn on its fastest dataflow
    with its stash kept and SRAM ignored (``cost.streaming.streamed_floor``), summed (the region runs
    them one after another); ``global_batch``: micro-batches of ``batch`` (``streaming_table``)."""
    arch = costs.arch
    r, c = np.array([arch.rows]), np.array([arch.cols])
    works = [replace(form, batch=batch, global_batch=global_batch) for form in streamed_forms(costs)]
    seen: dict[StreamedWork, int] = {}  # equal forms (repeated layers) are costed once
    for work in works:
        if work.cost_key not in seen:
            seen[work.cost_key] = int(streamed_floor(work, arch, costs.options, r, c, grid_costs)[0])
    return sum(seen[work.cost_key] for work in works)


def micro_batches(global_batch: int) -> list[int]:
    """The micro-batch sizes worth trying for ``global_batch`` samples, ascending: for every count n of
    micro-batches, the least size that covers the batch in n, ceil(global_batch / n) (a larger size with
    the same count only pads more: every op model's time and SRAM grow with the samples)."""
    sizes = {-(-global_batch // n) for n in range(1, min(global_batch, 1 << 12) + 1)}
    sizes.update(range(1, -(-global_batch // (1 << 12)) + 1))  # (past 4,096 micro-batches: every small size)
    return sorted(sizes)


def largest_batch(costs: CostTable, limit: int = 1 << 16) -> int:
    """The largest batch up to ``limit`` whose streamed region fits the wafer's SRAM (0: not even one sample), by
    bisection (a larger batch needs at least as much SRAM: more activations per kernel)."""

    def fits(batch: int) -> bool:
        unit = streaming_table(costs, batch).kernels[0]
        return len(unit.frontier) > 0

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)  # (nothing past the limit is tried)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
