"""The layer pipeline: every kernel resident on its own rectangle, on one wafer or cut over several.

Its decisions (:class:`~wsealloc.strategy.decision.PipelineDecision`): the cut over wafers (exact:
``solvers.stages``), and in training the recomputation segment length (searched on one wafer among
about sqrt(D) x ``SEGMENT_FACTORS`` stages, each table's optimum proven, the fastest kept), the way
each segment takes (``opmodels.recompute``, exact for min-max; the ways are in the kernels' dataflows)
and, when a wafer of the cut does not fit once the samples its boundaries add are counted, the cuts
between segments tried instead (then, ``--wafers auto``, one or two more wafers)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions, Dataflow, TrainingWork, grid_costs
from wsealloc.cost.model import Attention, Checkpoints, CostModelName, Recompute
from wsealloc.cost.training import segment_length
from wsealloc.errors import ConflictError, InfeasibleError, Interrupted, UsageError, WseallocError
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.recompute import fewest_cores
from wsealloc.opmodels.recompute import fix as fix_recompute
from wsealloc.opmodels.recompute import settle as settle_recompute
from wsealloc.opmodels.recompute import stuck as recompute_stuck
from wsealloc.opmodels.streaming import micro_batches
from wsealloc.opmodels.table import check_each_kernel_fits, pipeline_shape
from wsealloc.pipeline import over_wafers, with_options
from wsealloc.problem import AllocationProblem, build_problem
from wsealloc.problem.allocation import area_budgets
from wsealloc.problem.objective import Aggregate, Objective, ObjectiveKind, ProvenBound, objective_named
from wsealloc.problem.stages import StageProblem, build_stage_problem
from wsealloc.solvers import Status
from wsealloc.solvers.stages import StagePartition
from wsealloc.solvers.stages import solve as stage_solver
from wsealloc.strategy.base import Part, Prepared, Progress, Strategy, quiet
from wsealloc.strategy.decision import Decision, PipelineDecision
from wsealloc.units import format_bytes

if TYPE_CHECKING:
    from wsealloc.plan.schema import Plan
    from wsealloc.request import SolveRequest

SEGMENT_FACTORS = (0.5, 0.75, 1.0, 1.5)  # recomputation segment lengths tried, times about sqrt(D)


@dataclass(frozen=True)
class Staged:
    """A pipeline over wafers, as far as it got: the partitions to try in turn (the exact cut first,
    then training's cuts between segments), those tried, the one in use and its bound."""

    table: CostTable
    todo: tuple[StagePartition, ...]
    bound: int | None
    sproblem: StageProblem
    current: StagePartition
    tried: tuple[tuple[int, ...], ...] = ()


def infeasibility_message(costs: CostTable, problem: AllocationProblem) -> str:
    """Name the kernels that cannot fit, by how much, and what would make them fit."""
    need = problem.min_cores()
    biggest = sorted(costs.kernels, key=lambda kc: -kc.min_cores)[:3]
    names = ", ".join(
        f"{kc.kernel.name} ({kc.min_cores:,} cores, weights {format_bytes(kc.work.weight_bytes)})" for kc in biggest
    )
    return (
        f"{costs.kgraph.ops.source}: does not fit {costs.arch.name}: its kernels need at least {need:,} cores on their "
        f"smallest legal op models, the wafer has {problem.total_cores:,} (short by {need - problem.total_cores:,}); "
        f"largest: {names}; use more SRAM per core (--set core.sram_bytes=...), smaller --dim values, or several wafers"
    )


def settle(costs: CostTable, objective: Objective) -> tuple[CostTable, ProvenBound | None]:
    """A training table with each recomputation segment's way fixed (``opmodels.recompute``), and the
    bound a result may claim when that choice is not provably optimal (the user's areas, another
    objective than min-max): the table's own with every kernel free (a relaxation; None: the fixed
    table's own bound is exact)."""
    blocked = recompute_stuck(costs) if costs.options.train is not None else None
    if blocked is not None:
        error = ConflictError if costs.applied is not None else InfeasibleError
        raise error(f"{costs.kgraph.ops.source}: {blocked}; change the rules or --recompute")
    fixed, choice = settle_recompute(costs)
    if choice is None:
        return fixed, None
    check_each_kernel_fits(fixed)  # a kernel no way of its segment fits: named here
    if choice.exact and objective.aggregate is Aggregate.MAX and not area_budgets(costs):
        return fixed, None
    relaxed = objective.exact_bound(build_problem(costs, objective=objective), allocate=False)  # (its value alone)
    start = objective.exact_bound(build_problem(fixed, objective=objective))
    if start.value is None and relaxed.value is not None:
        # the user's areas: the ways chosen for the wafer's budget break an area's; the fewest-core ways
        fixed = fix_recompute(costs, fewest_cores(costs))
        start = objective.exact_bound(build_problem(fixed, objective=objective))
    if relaxed.value is not None and start.value is None:
        raise InfeasibleError(
            f"{costs.kgraph.ops.source}: neither the recomputation segments chosen for the wafer nor those with the "
            "fewest cores keep the kernels within the areas of the constraints (each kernel alone could); fix the "
            "choice with --recompute none or all, or widen the areas"
        )
    if relaxed.value is None:
        return fixed, None  # nothing fits: the fixed table's own bound says so
    return fixed, ProvenBound(f"{relaxed.method} (recomputation per kernel)", relaxed.value, None, start=start.choice)


def wafer_part(costs: CostTable, objective: Objective) -> Part:
    """One wafer of a layer pipeline: its recomputation settled and its bound proven (once: the driver
    passes it on). A table no allocation fits raises :class:`InfeasibleError` naming its kernels."""
    t0 = time.perf_counter()
    fixed, relaxed = settle(costs, objective)
    if relaxed is not None:
        return Part(fixed, replace(relaxed, wall_s=relaxed.wall_s + time.perf_counter() - t0), wider=True)
    problem = build_problem(fixed, objective=objective)
    bound = objective.exact_bound(problem)
    if bound.value is None:
        raise InfeasibleError(infeasibility_message(fixed, problem))
    return Part(fixed, replace(bound, wall_s=bound.wall_s + time.perf_counter() - t0))  # the proof's time, in the plan's


def pipeline_bound(costs: CostTable, objective: Objective, allocate: bool = True) -> ProvenBound:
    """The objective's proven bound of a layer pipeline on one wafer, recomputation settled per segment
    (value None: nothing fits; ``allocate``: as ``Objective.exact_bound``)."""
    fixed, relaxed = settle(costs, objective)
    return relaxed or objective.exact_bound(build_problem(fixed, objective=objective), allocate)


def searches_segments(request: SolveRequest) -> bool:
    """Whether a one-wafer solve of ``request`` searches the recomputation segments' length (training
    that recomputes, with no ``--recompute-segment`` given)."""
    train = request.cost.train
    return train is not None and train.segment is None and train.recompute is not Recompute.NONE


def search_segments(
    costs: CostTable, request: SolveRequest, say: Progress = quiet, deadline: Deadline | None = None
) -> tuple[CostTable, Part | None]:
    """A training pipeline on one wafer whose recomputation segments are not fixed
    (``--recompute-segment``): the table costed with segments of L x ``SEGMENT_FACTORS`` stages (L about
    sqrt(D)), the one whose proven optimum (over every choice of recomputing segments) is the fastest,
    with its part (its bound proven once, here). Anything else: the table as it is, and no part yet.
    ``deadline``: a stop request ends the search (:class:`Interrupted`); when its time is up the fastest
    length tried so far is kept (the lengths are tried nearest to L first)."""
    train = request.cost.train
    if train is None or not searches_segments(request):
        return costs, None
    base = segment_length(pipeline_shape(costs.kgraph)[1])
    objective = objective_named(request.objective)
    tried: list[tuple[int, int]] = []  # (length, bound)
    best: tuple[tuple[int, int, int], CostTable, Part] | None = None  # only the fastest so far is kept
    base_train = costs.options.train if costs.options.train is not None else train  # (its micro-batch kept)
    lengths = sorted(segment_lengths(costs), key=lambda n: (abs(n - base), n))
    say(f"recomputation segments: trying lengths {', '.join(map(str, sorted(lengths)))}")
    for length in lengths:
        if deadline is not None and deadline.stopped:
            raise Interrupted(
                f"interrupted while choosing the recomputation segments of {request.model.label}; nothing was solved"
            )
        if deadline is not None and best is not None and deadline.expired():
            break  # the time is up: the fastest length so far
        options = costs.options.model_copy(update={"train": base_train.model_copy(update={"segment": length})})
        # the default length is the table at hand (costed with about sqrt(D) already): only the record differs
        table = replace(costs, options=options) if length == base else with_options(costs, options, request.constraints)
        try:
            part = wafer_part(table, objective)
        except WseallocError:  # this length leaves a kernel no grid, or a rule no segment way
            continue
        assert part.bound is not None and part.bound.value is not None
        tried.append((length, part.bound.value))
        key = (part.bound.value, abs(length - base), length)  # the fastest, then the nearest to L
        if best is None or key < best[0]:
            best = (key, table, part)
    if best is None:
        return costs, None  # no length fits: the default's own error says why
    (_, _, length), table, part = best
    listed = ", ".join(f"{n}: {value:,}" for n, value in sorted(tried))
    say(f"recomputation segments of {length} stages (bounds by length: {listed} cycles)")
    return table, part


def micro_options(options: CostOptions, micro: int | None) -> CostOptions:
    """``options`` with training's micro-batch set to ``micro``."""
    if options.train is None or options.train.micro_batch == micro:
        return options
    return options.model_copy(update={"train": options.train.model_copy(update={"micro_batch": micro})})


def refuse_micro_batch(request: SolveRequest) -> None:
    """What micro-batching cannot plan, in the user's words (both the pipeline and streaming)."""
    m = request.micro_batch
    train = request.cost.train
    if train is not None and train.micro_batch is not None:
        raise ValueError("cost.train.micro_batch is the strategy's decision: give the micro-batch as --micro-batch")
    if m is None:
        return
    if train is None:
        raise ValueError("--micro-batch splits a training batch: give --train (and --train-batch) with it")
    if request.stream_batch is not None:
        raise ValueError("--stream-batch and --micro-batch both set a streamed pass's samples: give one")
    if m > train.batch:
        raise ValueError(f"--micro-batch {m} is over the global batch (--train-batch {train.batch})")
    if request.cost.model is not CostModelName.STANDARD:
        raise ValueError("--micro-batch is costed with the standard model (use --cost-model standard)")


def training_macs(costs: CostTable) -> int:
    """MACs of one training sample over the table's kernels (forward and backward, no recomputation)."""
    return sum(int(kc.work.macs) for kc in costs.kernels if isinstance(kc.work, TrainingWork))


def micro_batch_floor(costs: CostTable, micro: int, wafers: int) -> tuple[int, int]:
    """Two lower bounds on the time per sample of a pipeline of ``micro``-sample micro-batches over
    ``wafers`` wafers, whatever the allocation: every kernel's step is at least its MACs over its cores'
    rate, and the cores of all kernels are at most the wafers', so the slowest step is at least
    ``micro`` x one sample's MACs / (MACs per cycle x cores); a global batch of G takes ceil(G / micro) +
    F such steps (F = 2 (D - 1), the fill and drain). Returns (that bound, the same with G + F micro in
    place of ceil(G / micro) micro + F micro, which grows with ``micro``)."""
    train = costs.options.train
    assert train is not None
    total = train.batch
    fill = 2 * (pipeline_shape(costs.kgraph)[1] - 1)
    rate = float(costs.arch.core.macs_per_cycle) * costs.arch.total_cores * wafers
    step = micro * training_macs(costs) / rate
    exact = (-(-total // micro) + fill) * step / total
    growing = (total + fill * micro) * training_macs(costs) / rate / total
    return int(np.ceil(exact - 1e-9)), int(np.ceil(growing - 1e-9))


def choose_micro_batch(
    costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet
) -> tuple[CostTable, Part | None, str]:
    """A training pipeline in micro-batches (``request.micro_batching``): the table costed with the
    micro-batch (``--micro-batch``, else the fastest of ``opmodels.streaming.micro_batches``, proven:
    the sizes are tried from the least up, each table's optimum proven, a size skipped when
    ``micro_batch_floor`` reaches the best time found and the search ended when the growing floor does
    or a size does not fit, as no larger one does), its part when proven on one wafer (with its segment
    length searched: the table returned is costed with the best), and the reason. The search takes at
    most half the time left (``deadline``): stopped sooner, the reason says the larger sizes are not
    proven slower."""
    train = request.cost.train
    assert train is not None
    if request.micro_batch is not None:
        m = request.micro_batch
        options = micro_options(costs.options, m)
        return with_options(costs, options, request.constraints), None, f"--micro-batch {m} of {train.batch}"
    objective = objective_named(request.objective)
    wafers = request.wafer_count
    assert wafers is not None  # (refused: --wafers auto chooses no micro-batch)
    best: tuple[int, int, CostTable, Part | None] | None = None
    tried = skipped = 0
    budget = deadline.share(0.5)
    stopped: int | None = None  # the first size left uncosted when the time ran out
    sizes = micro_batches(train.batch)
    for m in sizes:
        exact, growing = micro_batch_floor(costs, m, wafers)
        if best is not None and growing >= best[0]:
            break
        if best is not None and exact >= best[0]:
            skipped += 1
            continue
        if best is not None and budget.expired():
            stopped = m
            break
        table = with_options(costs, micro_options(costs.options, m), request.constraints)
        part: Part | None = None
        try:
            if wafers == 1:  # the segment lengths searched at this size too: the two chosen together
                table, part = search_segments(table, request, quiet, deadline)
                part = part or wafer_part(table, objective)
                assert part.bound is not None and part.bound.value is not None
                value = part.bound.value
            else:
                found = stage_solver(build_stage_problem(table), wafers)
                if found.status is not Status.OPTIMAL or found.objective is None:
                    break
                value = found.objective
        except InfeasibleError:
            break  # a larger micro-batch needs at least the SRAM of this one
        tried += 1
        if best is None or value < best[0]:
            best = (value, m, table, part)
    if best is None:  # not even one sample a micro-batch fits: the table at 1 says why
        table = with_options(costs, micro_options(costs.options, 1), request.constraints)
        return table, None, ""
    _, m, table, part = best
    rest = (
        "the larger ones bounded or not fitting"
        if stopped is None
        else f"the time limit stopped the search at {stopped}: the sizes from {stopped} on are not proven slower"
    )
    why = (
        f"micro-batch {m} of {train.batch} ({-(-train.batch // m)} micro-batches a weight update): the fastest of "
        f"{tried} costed, {skipped} bounded no faster, {rest}"
    )
    say(why)
    return table, part, why


def segment_lengths(costs: CostTable) -> list[int]:
    """The recomputation segment lengths a one-wafer training solve tries: about sqrt(D) x ``SEGMENT_FACTORS``."""
    base = segment_length(pipeline_shape(costs.kgraph)[1])
    return sorted({max(1, round(base * f)) for f in SEGMENT_FACTORS})


def stage_infeasibility(costs: CostTable, sproblem: StageProblem, wafers: int | None, reason: str) -> str:
    """Name the kernels larger than a wafer, or say how many wafers are needed."""
    total = sproblem.alloc.total_cores
    too_big = [kc for kc in costs.kernels if not len(kc.frontier) or kc.min_cores > total]
    if too_big:
        names = ", ".join(
            f"{kc.kernel.name} (needs {format_bytes(kc.min_sram_bytes)} per core on the largest grid, "
            f"weights {format_bytes(kc.work.weight_bytes)})"
            for kc in too_big[:3]
        )
        return (
            f"{costs.kgraph.ops.source}: {len(too_big)} kernel(s) fit no single {costs.arch.name} wafer: {names}; "
            "no pipeline over wafers can help: use more SRAM per core (--set core.sram_bytes=...) or smaller --dim values"
        )
    return f"{costs.kgraph.ops.source}: {reason}; use --wafers auto to find the fewest wafers that fit"


def training_retries(costs: CostTable, sproblem: StageProblem, found: int, wafers: int | None) -> Iterator[StagePartition]:
    """Partitions to try when a training pipeline's wafer does not fit once its boundaries' samples and
    cut segments are counted: cuts only between recomputation segments, on the same number of wafers,
    then (``--wafers auto``) on one and two more. None for inference (the first partition is exact)."""
    if costs.options.train is None:
        return
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, kc in enumerate(costs.kernels):
        if isinstance(kc.work, TrainingWork):
            first.setdefault(kc.work.segment, i)
            last[kc.work.segment] = i
    allowed = np.ones(len(costs.kernels) + 1, dtype=bool)
    for s, a in first.items():
        allowed[a + 1 : last[s] + 1] = False  # no cut in front of a segment's later kernels
    if sproblem.cut_allowed is not None:
        allowed &= sproblem.cut_allowed
    between = replace(sproblem, cut_allowed=allowed)
    for count in (found, found + 1, found + 2) if wafers is None else (found,):
        partition = stage_solver(between, count)
        if partition.status is Status.OPTIMAL and partition.objective is not None:
            yield partition


def wafer_sweep(costs: CostTable, counts: Sequence[int]) -> list[tuple[int, int | None]]:
    """Optimal allocation-only bottleneck for each wafer count (None when it does not fit)."""
    sproblem = build_stage_problem(costs)
    return [(n, stage_solver(sproblem, n).objective) for n in counts]


def check_trainable(costs: CostTable, request: SolveRequest) -> None:
    """``--train`` on an inference step (an export that keeps a KV cache) is refused, naming a kernel."""
    held = [kc.kernel.name for kc in costs.kernels if kc.kernel.state]
    if request.cost.train is not None and held:
        raise UsageError(
            f"{request.model.label}: --train plans training, but this export keeps a KV cache ({held[0]}, ...): it is an "
            "inference step (decode or prefill); train the model's training export instead"
        )


class LayerPipeline(Strategy):
    """Every kernel on its own rectangle; one wafer, or an exact cut over several (see the module
    docstring)."""

    name = "pipeline"
    decision_type = PipelineDecision

    def applies(self, request: SolveRequest) -> bool:
        return True  # the way every request runs unless it asks for another

    def refuse(self, request: SolveRequest) -> None:
        if request.cost.train is not None and request.objective is not ObjectiveKind.THROUGHPUT:
            raise ValueError("--train plans training samples per second in the layer pipeline: use --objective throughput")
        refuse_seed_training(request)
        refuse_micro_batch(request)
        refuse_streamed_forms(request)
        if request.micro_batching and request.micro_batch is None and request.wafer_count is None:
            raise ValueError("--wafers auto with a global batch over 1: give --micro-batch (or a number of wafers)")

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        check_trainable(costs, request)
        # one wafer: each request's token time is the value (over wafers each wafer proves its path:
        # paced bounds of wafers do not add up, a pass paced once by the slowest of them all)
        objective = objective_named(request.objective, request.requests)
        chosen: Part | None = None
        why = ""
        if request.micro_batching:
            costs, chosen, why = choose_micro_batch(costs, request, deadline, say)
        if request.wafer_count == 1:
            return _one_wafer(costs, chosen, request, objective, deadline, say, why)
        prepared = self._over_wafers(costs, request, request.wafer_count, deadline, say)
        one = prepared.partition is not None and prepared.partition.wafers == 1
        if one and chosen is None and searches_segments(request):
            # a cut that fits one wafer (--wafers auto, or N that needs one) is the one-wafer solve: a training pipeline's
            # recomputation segments are searched there (the cut's plan kept the default length: a
            # slower plan than --wafers 1, and a decision verify refused)
            return _one_wafer(costs, chosen, request, objective, deadline, say, why)
        return replace(prepared, decision=prepared.decision.model_copy(update={"reason": why})) if why else prepared

    def _over_wafers(
        self, costs: CostTable, request: SolveRequest, wafers: int | None, deadline: Deadline, say: Progress
    ) -> Prepared:
        """The exact cut over ``wafers`` wafers (None: the fewest that fit), each wafer's part prepared;
        training: when a wafer does not fit once its boundaries' samples are counted, the next cut of
        :func:`training_retries` (the first partition's bound kept, or the relaxation's on more wafers)."""
        sproblem = build_stage_problem(costs)
        partition = stage_solver(sproblem, wafers)
        if partition.status is not Status.OPTIMAL or partition.objective is None:
            raise InfeasibleError(stage_infeasibility(costs, sproblem, wafers, partition.message))
        say(f"stages: {partition.wafers} wafers, cuts {list(partition.cuts[1:-1])}, bound {partition.objective:,} cycles")
        retries = tuple(training_retries(costs, sproblem, wafers if wafers is not None else partition.wafers, wafers))
        state = Staged(costs, (partition, *retries), partition.objective, sproblem, partition)
        found = self._attempt(costs, request, state, deadline, say)
        if isinstance(found, Prepared):
            return found
        raise found

    def _attempt(
        self, costs: CostTable, request: SolveRequest, state: Staged, deadline: Deadline, say: Progress
    ) -> Prepared | InfeasibleError:
        """The first partition of ``state.todo`` whose every wafer fits, prepared (else the last error)."""
        objective = objective_named(request.objective)
        error = InfeasibleError(f"{costs.kgraph.ops.source}: no cut over wafers fits")
        for i, partition in enumerate(state.todo):
            if tuple(partition.cuts) in state.tried or partition.objective is None:
                continue
            if state.tried and deadline.stopped:
                break
            bound = state.bound
            if state.tried:
                if partition.wafers != state.current.wafers:  # more wafers: the relaxation's optimum on that many
                    bound = stage_solver(state.sproblem, partition.wafers).objective or 0
                say(f"stages: a wafer does not fit with the samples its boundaries add; cuts {list(partition.cuts[1:-1])}")
            state = replace(state, tried=(*state.tried, tuple(partition.cuts)), current=partition, bound=bound)
            # training: each wafer boundary between a kernel and the loss holds two more samples in flight
            # and cuts the recomputation segments; the partition's bound on that many wafers (without them)
            # stays a valid lower bound whichever cuts the plan ends with
            table = over_wafers(costs, partition.cuts, request.constraints)
            try:
                parts = []
                for s, (first, end) in enumerate(partition.stages()):
                    say(f"stage {s}: kernels [{first}, {end})")
                    parts.append(wafer_part(table.subset(first, end), objective))
            except InfeasibleError as failed:
                error = failed
                continue
            rest = replace(state, todo=state.todo[i + 1 :])
            return Prepared(_decision(partition, costs), tuple(parts), table, costs, partition, bound, state=rest)
        return error

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        state = prepared.state
        if not isinstance(state, Staged) or deadline.stopped:
            return None
        found = self._attempt(costs, request, state, deadline, say)
        return found if isinstance(found, Prepared) else None

    def price_reference(self, request: SolveRequest, prepared: Prepared) -> ProvenBound:
        base = prepared.base.unconstrained if prepared.base.unconstrained is not None else prepared.base
        if prepared.partition is None:
            return pipeline_bound(base, objective_named(request.objective, request.requests))
        t0 = time.perf_counter()
        partition = stage_solver(build_stage_problem(base), prepared.partition.wafers)
        # training: the cut is chosen without the samples a wafer boundary adds (a bound, not an optimum)
        proven: tuple[int, ...] | None = () if base.options.train is None else None
        return ProvenBound("stages", partition.objective, proven, wall_s=time.perf_counter() - t0)

    def cost_options(self, decision: Decision, options: CostOptions) -> CostOptions:
        assert isinstance(decision, PipelineDecision)
        options = micro_options(options, decision.micro_batch)
        if options.train is None or decision.segment == options.train.segment:
            return options
        return options.model_copy(update={"train": options.train.model_copy(update={"segment": decision.segment})})

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        assert isinstance(decision, PipelineDecision)
        return over_wafers(costs, decision.cuts, costs.applied.constraints if costs.applied is not None else None)

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is not None or not isinstance(decision, PipelineDecision):
            return wrong
        count = request.wafer_count
        if count is not None and decision.wafers > count:  # (the exact cut may need fewer than it may use)
            return f"decision.wafers is {decision.wafers}, the request allows {count}"
        wrong = _admits_micro(request, decision)
        if wrong is not None:
            return wrong
        train = request.cost.train
        if not searches_segments(request) or decision.wafers != 1:
            given = train.segment if train is not None else None
            if decision.segment != given:
                return f"decision.segment is {decision.segment}, the request costs segments of {given} stages"
        elif decision.segment not in segment_lengths(costs):
            tried = ", ".join(map(str, segment_lengths(costs)))
            return f"decision.segment is {decision.segment}, not a length the segment search tries ({tried})"
        return None

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        return training_lines(plan, costs)

    def alternatives(self, request: SolveRequest, decision: Decision) -> list[tuple[str, dict[str, object]]]:
        if request.cost.train is None:
            return []
        return [(streamed_label(request), {"mode": "streaming"})]


def streamed_label(request: SolveRequest) -> str:
    """How ``compare`` names the streamed alternative of a request."""
    if request.streams_micro_batches and request.cost.train is not None:
        return f"weight streaming (micro-batches of a global batch of {request.cost.train.batch})"
    return f"weight streaming ({request.stream_samples} sample(s) per pass)"


def _one_wafer(
    costs: CostTable,
    chosen: Part | None,
    request: SolveRequest,
    objective: Objective,
    deadline: Deadline,
    say: Progress,
    why: str,
) -> Prepared:
    """The whole model on one wafer: the micro-batch's part when one was chosen, else the
    recomputation segments searched (training), then the wafer's part."""
    table, part = (costs, chosen) if chosen is not None else search_segments(costs, request, say, deadline)
    part = part or wafer_part(table, objective)
    decision = PipelineDecision(
        wafers=1, cuts=(0, len(costs.kernels)), segment=_segment(table), micro_batch=_micro(table), reason=why
    )
    return Prepared(decision, (part,), part.table, table)


def _decision(partition: StagePartition, costs: CostTable) -> PipelineDecision:
    return PipelineDecision(
        wafers=partition.wafers, cuts=tuple(partition.cuts), segment=_segment(costs), micro_batch=_micro(costs)
    )


def _micro(costs: CostTable) -> int | None:
    """The micro-batch a training table was costed with (None: none)."""
    return costs.options.train.micro_batch if costs.options.train is not None else None


def _admits_micro(request: SolveRequest, decision: PipelineDecision) -> str | None:
    """Why ``request`` could not have led to ``decision.micro_batch`` (None: it could). A decision
    without one is a plan of an earlier release (or a global batch of 1): it verifies as it was made."""
    m = decision.micro_batch
    train = request.cost.train
    if m is None:
        return None
    if train is None or not request.micro_batching:
        return f"decision.micro_batch is {m}, but the request runs no micro-batches"
    if request.micro_batch is not None and m != request.micro_batch:
        return f"decision.micro_batch is {m}, the request's --micro-batch is {request.micro_batch}"
    if request.micro_batch is None and m not in micro_batches(train.batch):
        return f"decision.micro_batch is {m}, not a micro-batch size the search tries for {train.batch} samples"
    return None


def _segment(costs: CostTable) -> int | None:
    """The recomputation segment length a training table was costed with (None: the default)."""
    return costs.options.train.segment if costs.options.train is not None else None


def refuse_streamed_forms(request: SolveRequest) -> None:
    """Weight streaming's memory forms in a layer pipeline (``cost.training``): attention recomputed
    needs nothing more; a checkpoint off the wafer needs the off-wafer bandwidth."""
    train = request.cost.train
    if train is None or train.checkpoints is Checkpoints.WAFER:
        return
    if request.arch is not None and request.arch.cluster.offwafer_bytes_per_s is None:
        raise ValueError(
            f"--checkpoints offwafer needs the off-wafer bandwidth: {request.arch.name} has no "
            "cluster.offwafer_bytes_per_s (--set cluster.offwafer_bytes_per_s=150e9: the 1.2 Tb/s of I/O a CS-2 "
            "is published with)"
        )


def refuse_seed_training(request: SolveRequest) -> None:
    """Training is costed by the standard model (the contest's convs by theirs): the seed model cannot."""
    if request.cost.train is not None and request.cost.model is CostModelName.SEED:
        raise ValueError(
            "--train costs the backward and the update with the standard model: --cost-model seed "
            "is not supported with it (use --cost-model standard, or ispd2020 for the contest's training convs)"
        )


def training_lines(plan: Plan, costs: CostTable) -> list[str]:
    """Training plans: the optimizer, which kernels recompute, the SRAM by part over the wafer."""
    train = costs.options.train
    if train is None:
        return []
    by_name = {kc.kernel.name: kc for kc in costs.kernels}
    totals = dict.fromkeys(("weights", "gradients", "optimizer", "stash", "buffers"), 0.0)
    recompute = 0
    deepest = 0
    works: list[object] = []
    flags: list[bool] = []
    for kp in plan.kernels:
        kc = by_name.get(kp.name)
        if kc is None or not isinstance(kc.work, TrainingWork):
            continue
        dataflow = Dataflow(kp.dataflow)
        recompute += dataflow is Dataflow.TRAIN_RECOMPUTE
        works.append(kc.work)
        flags.append(dataflow is Dataflow.TRAIN_RECOMPUTE)
        deepest = max(deepest, kc.work.in_flight)
        g = grid_costs(kc.work, costs.arch, costs.options, dataflow, np.array([kp.grid[0]]), np.array([kp.grid[1]]))
        parts = g.sram_parts()
        for name, part in (
            ("weights", parts.weights),
            ("gradients", parts.grads),
            ("optimizer", parts.optimizer),
            ("stash", parts.stash),
            ("buffers", parts.buffers),
        ):
            totals[name] += float(part[0]) * kp.cores if part is not None else 0.0
    every = "every sample" if train.batch == 1 else f"every {train.batch} samples"
    fill = max((w.fill_drain for w in works if isinstance(w, TrainingWork)), default=0)
    if train.micro_batch is not None:
        n = -(-train.batch // train.micro_batch)
        every += f" in {n} micro-batch(es) of {train.micro_batch} (and {fill} steps of fill and drain a batch)"
    length = train.segment or segment_length(pipeline_shape(costs.kgraph)[1])
    rate = plan.objective.throughput_samples_per_s
    usable = costs.arch.usable_sram_bytes * costs.arch.total_cores * len(plan.stages)
    memory = ", ".join(f"{name} {format_bytes(v)}" for name, v in totals.items())
    flight = "samples" if train.micro_batch is None else f"micro-batches of {train.micro_batch}"
    forms = [
        text
        for text, on in (
            (
                "attention recomputed (no S x S stashed; scores and softmax run again in the backward)",
                train.attention is Attention.RECOMPUTED,
            ),
            ("recomputing segments' checkpoints held off the wafer", train.checkpoints is Checkpoints.OFFWAFER),
        )
        if on
    ]
    held = f"; {', '.join(forms)}" if forms else ""
    return [
        f"training: {rate:,.1f} samples/s{per_token(costs, rate)}; {train.optimizer.value}, weights updated "
        f"{every}; forward, backward and update time-shared on each kernel's rectangle; {segments_line(works, flags)} "
        f"of about {length} stages ({recompute} of {len(plan.kernels)} kernels) recompute (--recompute "
        f"{train.recompute.value})",
        f"training memory: {memory} (stash: up to {deepest} {flight} in flight{held}); {format_bytes(sum(totals.values()))} "
        f"of {format_bytes(usable)} usable",
    ]


def per_token(costs: CostTable, rate: float) -> str:
    """`` = N tokens/s (T tokens a sample)`` for a sequence model (its token ids), else ``""``."""
    ops = costs.kgraph.ops
    ids = [ops.tensors[t] for t in ops.inputs if t in ops.tensors and not ops.tensors[t].is_float]
    tokens = max((t.numel for t in ids), default=0)  # a sequence model's sample: its token ids
    return f" = {rate * tokens:,.0f} tokens/s ({tokens:,} tokens a sample)" if tokens > 1 else ""


def segments_line(works: list[object], flags: list[bool]) -> str:
    """'k of S segments': the recomputation segments that recompute, of those the kernels form."""
    seen = {w.segment for w in works if isinstance(w, TrainingWork)}
    chosen = {w.segment for w, f in zip(works, flags, strict=True) if f and isinstance(w, TrainingWork)}
    return f"{len(chosen)} of {len(seen)} segments"
