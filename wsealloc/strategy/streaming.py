"""Weight streaming: every kernel in its turn on the whole wafer for a batch of samples, its weights
streamed in from off-wafer memory (``cost.streaming``; one region of every kernel, ``opmodels.streaming``).

Its decision is the batch per pass; which recomputation segments recompute so that the batch's stash
fits follows from the table and the batch (``opmodels.streaming.recompute_choice``), so lowering the
decision rebuilds the same streamed table. Its bound: every kernel on its fastest dataflow with its
stash kept, SRAM ignored (``opmodels.streaming.lower_bound``); the plan is FEASIBLE against it unless
the two meet."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.cost import StreamedWork
from wsealloc.cost.model import CostModelName, CostOptions, Recompute
from wsealloc.cost.training import segment_length
from wsealloc.errors import InfeasibleError, SolverError
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.streaming import largest_batch, micro_batches, streaming_table
from wsealloc.opmodels.streaming import lower_bound as streamed_lower_bound
from wsealloc.opmodels.table import pipeline_shape
from wsealloc.pipeline import with_options
from wsealloc.problem.objective import ObjectiveKind, ProvenBound
from wsealloc.strategy.base import Part, Prepared, Progress, Strategy, quiet
from wsealloc.strategy.decision import Decision, StreamingDecision
from wsealloc.strategy.modes import Mode, ShareMode
from wsealloc.strategy.pipeline import (
    check_trainable,
    refuse_micro_batch,
    refuse_seed_training,
    segment_lengths,
    segments_line,
)
from wsealloc.strategy.regions import regions_lines
from wsealloc.units import format_bytes

if TYPE_CHECKING:
    from wsealloc.plan.schema import Plan, SramRecord
    from wsealloc.request import SolveRequest


def refuse_streaming(request: SolveRequest) -> None:
    """Refuse what weight streaming does not plan: it runs every kernel on the whole wafer in turn."""
    flag = f"--mode {request.mode.value}"
    if request.cost.train is not None and request.objective is not ObjectiveKind.THROUGHPUT:
        raise ValueError("--train plans training samples per second in the layer pipeline: use --objective throughput")
    refuse_seed_training(request)
    refuse_micro_batch(request)
    if request.objective is not ObjectiveKind.THROUGHPUT:
        raise ValueError(f"{flag} plans samples per second: use --objective throughput")
    if request.sharing.mode is not ShareMode.NONE:
        raise ValueError(f"{flag}: streaming runs each kernel on the whole wafer; drop --share/--grid")
    if request.wafers != 1:
        raise ValueError(f"{flag} plans one wafer fed from off-wafer memory: drop --wafers")
    if request.constraints is not None and request.constraints.rules:
        raise ValueError(f"{flag}: a streamed kernel has the whole wafer; constraints apply to the layer pipeline")
    if request.cost.model is not CostModelName.STANDARD:
        raise ValueError(f"{flag} is costed with the standard model (use --cost-model standard)")
    if request.arch is not None and request.arch.cluster.offwafer_bytes_per_s is None:
        raise ValueError(
            f"{flag} needs the off-wafer bandwidth: {request.arch.name} has no cluster.offwafer_bytes_per_s "
            "(--set cluster.offwafer_bytes_per_s=150e9: the 1.2 Tb/s of I/O a CS-2 is published with)"
        )


def streamed_part(
    costs: CostTable, batch: int, recompute: str, global_batch: int | None = None, bound: int | None = None
) -> Part:
    """The streamed table of ``costs`` for ``batch`` samples per pass as one part (unplaced), with its
    bound (``bound``: one proven over more than this batch, the micro-batch search's); a batch whose
    stash does not fit is refused naming the largest that does. ``global_batch``: micro-batches."""
    t0 = time.perf_counter()
    units = streaming_table(costs, batch, global_batch=global_batch)
    unit = units.kernels[0]
    source = units.kgraph.ops.source
    if not len(unit.frontier):
        need = int(unit.table.sram.min())
        fits = largest_batch(costs)
        raise InfeasibleError(
            f"{source}: streamed with {batch} sample(s) per pass, every kernel's stash and the largest "
            f"kernel's buffers need {format_bytes(need)} per core, usable {format_bytes(units.arch.usable_sram_bytes)} "
            f"with every segment --recompute {recompute} lets recompute; the largest batch that fits is {fits} "
            "(--stream-batch)"
        )
    value = int(unit.frontier.latency[0])
    bound = streamed_lower_bound(costs, batch, global_batch) if bound is None else bound
    if bound > value:
        raise SolverError(f"{source}: the streamed plan ({value:,} cycles) is below its own lower bound ({bound:,})")
    # one unit, one op model: the answer as it is (final), reported against the sound bound
    proven = ProvenBound(
        "stream", bound, (0,) if bound == value else None, start=(0,), final=True, wall_s=time.perf_counter() - t0
    )
    return Part(units, proven, wider=True, place=False)


def streamed_segments(costs: CostTable, request: SolveRequest) -> dict[int | None, CostTable]:
    """The tables a streamed micro-batch search costs, by recomputation segment length: with the length
    not fixed (``--recompute-segment``) and segments that may recompute, the table at each length the
    pipeline's search tries (about sqrt(D) x ``SEGMENT_FACTORS``: shorter segments replay less at once,
    longer ones keep fewer checkpoints), built as needed; else the table as it is (key None)."""
    train = request.cost.train
    if train is None or train.segment is not None or train.recompute is Recompute.NONE:
        return {None: costs}
    base = costs.options.train
    assert base is not None
    return {
        length: with_options(costs, costs.options.model_copy(update={"train": base.model_copy(update={"segment": length})}))
        for length in segment_lengths(costs)
    }


def streamed_micro_batch(
    costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet
) -> tuple[int, int | None, CostTable, Part, str]:
    """Training streamed in micro-batches (``request.streams_micro_batches``): the micro-batch (``--micro-batch``,
    else the fastest of ``micro_batches``, proven: each size's sound bound is computed, sizes are tried
    from the least bound up and the search stops when a bound reaches the best time found, so no other
    size is faster) and the recomputation segment length (``streamed_segments``: each size costed at every
    length, the fastest kept, then the nearest to the default), the table of that length, its part with
    the bound over every size, and the reason. A size's bound holds at every length (each kernel's stash
    kept, SRAM ignored: the segments do not enter it). The search takes at most half the time left
    (``deadline``); the bound stays the least over every size either way."""
    train = request.cost.train
    assert train is not None
    total = train.batch
    recompute = _recompute_mode(costs)
    tables = streamed_segments(costs, request)
    base = segment_length(pipeline_shape(costs.kgraph)[1])  # (the default length, about sqrt(D))

    def off(n: int | None) -> int:  # how far a length is from the default (ties go to the nearest)
        return 0 if n is None else abs(n - base)

    default = min(tables, key=lambda n: (off(n), n or 0))
    fits = {n: largest_batch(t, limit=total) for n, t in tables.items()}
    if request.micro_batch is not None:
        sizes = [request.micro_batch]
    else:
        sizes = [m for m in micro_batches(total) if m <= max(fits.values())]
    if not sizes:  # not even one sample: the default length's error names it
        return 1, default, tables[default], streamed_part(tables[default], 1, recompute, total), ""
    bounds = {m: streamed_lower_bound(costs, m, total) for m in sizes}
    best: tuple[tuple[int, int, int], int, int | None, Part] | None = None  # (key, size, length, part)
    tried = 0
    budget = deadline.share(0.5)
    stopped = False
    for m in sorted(sizes, key=lambda m: (bounds[m], m)):
        if best is not None and bounds[m] >= best[0][0]:
            break  # every size left is bounded no faster than the best
        if best is not None and budget.expired():
            stopped = True
            break  # (the plan's bound, the least over every size, says how far from proven)
        tried += 1
        for n, table in tables.items():
            if m > fits[n] and request.micro_batch is None:
                continue
            try:
                part = streamed_part(table, m, recompute, total)
            except InfeasibleError:
                continue
            assert part.bound is not None and part.bound.value is not None
            value = int(part.table.kernels[0].frontier.latency[0])
            key = (value, m, off(n))
            if best is None or key < best[0]:
                best = (key, m, n, part)
    if best is None:  # nothing fits: the default length's error names the largest batch that does
        first = request.micro_batch or 1
        return first, default, tables[default], streamed_part(tables[default], first, recompute, total), ""
    (value, _, _), m, length, part = best
    low = min(bounds.values())  # no micro-batch streams faster (every size's bound, or a time reached)
    assert part.bound is not None
    proven = replace(part.bound, value=low, choice=(0,) if low == value else None)
    segments = "" if length is None else f", recomputation segments of {length} stages (of {', '.join(map(str, tables))} tried)"
    if request.micro_batch is not None:
        why = f"--micro-batch {m} of {total}{segments}"
    else:
        why = (
            f"micro-batch {m} of {total} ({-(-total // m)} passes){segments}: the fastest of {len(sizes)} sizes that "
            f"fit (up to {max(fits.values())}), {tried} costed, "
            + ("the time limit stopped the rest (the bound is the least over them)" if stopped else "the rest bounded no faster")
        )
    say(why)
    return m, length, tables[length], replace(part, bound=proven), why


class WeightStreaming(Strategy):
    """``--mode streaming``: every kernel in turn on the whole wafer (see the module docstring)."""

    name = "streaming"
    decision_type = StreamingDecision
    kernels_must_fit = False  # a kernel too large for a rectangle of its own streams all the same

    def applies(self, request: SolveRequest) -> bool:
        return request.mode is Mode.STREAMING

    def refuse(self, request: SolveRequest) -> None:
        refuse_streaming(request)

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        check_trainable(costs, request)
        if request.streams_micro_batches:
            assert request.cost.train is not None
            m, segment, table, part, why = streamed_micro_batch(costs, request, deadline, say)
            decision = StreamingDecision(
                batch=m,
                global_batch=request.cost.train.batch,
                segment=segment,
                reason=f"--mode streaming; {why}" if why else "--mode streaming",
            )
            return Prepared(decision, (part,), part.table, table)
        part = streamed_part(costs, request.stream_samples, _recompute_mode(costs))
        decision = StreamingDecision(batch=request.stream_samples, reason="--mode streaming")
        return Prepared(decision, (part,), part.table, costs)

    def cost_options(self, decision: Decision, options: CostOptions) -> CostOptions:
        assert isinstance(decision, StreamingDecision)
        if options.train is None or decision.segment is None or decision.segment == options.train.segment:
            return options
        return options.model_copy(update={"train": options.train.model_copy(update={"segment": decision.segment})})

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        assert isinstance(decision, StreamingDecision)
        return streaming_table(costs, decision.batch, global_batch=decision.global_batch)

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is not None or not isinstance(decision, StreamingDecision):
            return wrong
        if decision.global_batch is None:  # one pass per update (a plan of an earlier release, --stream-batch)
            if decision.batch != request.stream_samples:
                return f"decision.batch is {decision.batch}, the request streams {request.stream_samples} sample(s) per pass"
            return None
        train = request.cost.train
        if not request.streams_micro_batches or train is None:
            return "decision.global_batch is set, but the request streams one pass per update (no micro-batches)"
        if decision.global_batch != train.batch:
            return f"decision.global_batch is {decision.global_batch}, the request's --train-batch is {train.batch}"
        if request.micro_batch is not None and decision.batch != request.micro_batch:
            return f"decision.batch is {decision.batch}, the request's --micro-batch is {request.micro_batch}"
        if request.micro_batch is None and decision.batch not in micro_batches(train.batch):
            return f"decision.batch is {decision.batch}, not a micro-batch size the search tries for {train.batch} samples"
        if decision.segment is not None and (train.segment is not None or train.recompute is Recompute.NONE):
            return f"decision.segment is {decision.segment}, the request costs segments of {train.segment} stages"
        if decision.segment is not None and decision.segment not in segment_lengths(costs):
            tried = ", ".join(map(str, segment_lengths(costs)))
            return f"decision.segment is {decision.segment}, not a length the segment search tries ({tried})"
        return None

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        return regions_lines(plan) + streaming_lines(plan, costs)

    def region_sram_words(self, sram: SramRecord, costs: CostTable) -> str:
        kept = "stash" if costs.options.train is not None else "KV cache"
        return f"{kept} {sram.state:,}, streamed weights and activations passing {sram.buffers:,}"

    def alternatives(self, request: SolveRequest, decision: Decision) -> list[tuple[str, dict[str, object]]]:
        # --stream-batch sizes a streamed pass; the layer pipeline has none and refuses it, so its row drops it
        return [("layer pipeline (--mode pipelined)", {"mode": "pipelined", "stream_batch": None})]


def _recompute_mode(costs: CostTable) -> str:
    """The request's --recompute (what a streamed plan's recomputation may do)."""
    return costs.options.train.recompute.value if costs.options.train is not None else "none"


def streaming_lines(plan: Plan, costs: CostTable) -> list[str]:
    """A streamed plan: the batch, the bandwidth, how many kernels the stream bounds, which recompute."""
    if costs.members is None or not costs.kernels:
        return []
    arch = costs.arch
    bw = arch.cluster.offwafer_bytes_per_s or 0.0
    kernels = costs.members.kernels
    works = [kc.work for kc in kernels if isinstance(kc.work, StreamedWork)]
    recompute = sum(w.recompute for w in works)
    segments = segments_line([w.inner for w in works], [w.recompute for w in works])
    stream_bound = 0
    turns = 2 if costs.options.train is not None else 1  # forward and backward each stream the weights
    by_name = {kp.name: kp for kp in plan.kernels}
    for kc in kernels:
        w = kc.work
        if isinstance(w, StreamedWork) and bw:
            stream = int(np.ceil(w.weight_bytes / (bw / arch.clock_hz)))
            stream_bound += by_name[kc.kernel.name].latency_cycles <= -(-stream * turns // w.batch)
    what = "training" if costs.options.train is not None else "inference"
    inner = replace(
        costs.members, kernels=tuple(replace(kc, work=kc.work.inner) for kc in kernels if isinstance(kc.work, StreamedWork))
    )
    batch = works[0].batch if works else 1
    total = works[0].global_batch if works else None
    passes = f" ({works[0].passes} pass(es) of a global batch of {total}, gradients accumulated)" if total else ""
    return [
        f"streaming ({what}): {batch} samples per pass{passes}, one kernel at a time on the whole wafer, weights "
        f"streamed at {bw / 1e9:,.0f} GB/s each way; {plan.objective.throughput_samples_per_s:,.1f} samples/s; "
        f"{stream_bound} of {len(works)} kernels bound by the stream, {segments} ({recompute} kernels) recompute; the largest "
        f"batch that fits: {largest_batch(inner):,} samples per pass"
    ]
