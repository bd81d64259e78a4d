"""The run of a solve request, and the Python API over it.

:func:`run` is the one function every command, report, sweep point and bench worker calls: it owns
the run's :class:`~wsealloc.budget.Deadline` (created from the request's time limit, before the front
end) and hands each stage its share. :func:`solve` is the Python API: the CLI's ``solve`` as a
function (a request built from keyword arguments, then :func:`run`).

>>> import wsealloc.api as ws
>>> out = ws.solve("models/gpt2.onnx", arch="wse2")           # doctest: +SKIP
>>> out.plan.objective.bottleneck_cycles, out.speedup           # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
from typing_extensions import Unpack

from wsealloc.arch import Arch
from wsealloc.budget import Deadline, StopHook
from wsealloc.contest import ContestOutcome, run_contest
from wsealloc.cost import TrainingWork
from wsealloc.cost.model import Recompute
from wsealloc.cost.training import segment_length
from wsealloc.errors import ConflictError, InfeasibleError, Interrupted, NoLayoutError, SolverError, UsageError, WseallocError
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.recompute import fewest_cores
from wsealloc.opmodels.recompute import fix as fix_recompute
from wsealloc.opmodels.recompute import settle as settle_recompute
from wsealloc.opmodels.recompute import stuck as recompute_stuck
from wsealloc.opmodels.regions import region_table
from wsealloc.opmodels.streaming import largest_batch, streaming_table
from wsealloc.opmodels.streaming import lower_bound as streamed_lower_bound
from wsealloc.opmodels.table import check_each_kernel_fits, pipeline_shape
from wsealloc.pipeline import build_costs, over_wafers, with_options
from wsealloc.plan.build import make_plan, merge_stages
from wsealloc.plan.headline import Headline
from wsealloc.plan.io import write_atomic
from wsealloc.plan.schema import ConstraintsRecord, Plan
from wsealloc.problem import AllocationProblem, build_problem
from wsealloc.problem.allocation import area_budgets
from wsealloc.problem.flows import flows
from wsealloc.problem.objective import Aggregate, Objective, ObjectiveKind, ProvenBound, objective_named
from wsealloc.problem.placement import build_placement_problem
from wsealloc.problem.sharing import INF as SHARING_INF
from wsealloc.problem.sharing import build_sharing_problem, grid_allowed
from wsealloc.problem.stages import StageProblem, build_stage_problem
from wsealloc.request import Mode, RequestOptions, ShareMode, SolveRequest, build_request, check_outputs
from wsealloc.solvers import SolveOptions, SolverResult, Status, get_solver
from wsealloc.solvers.base import PlacementResult, result_from_choice
from wsealloc.solvers.conflicts import check as check_conflicts
from wsealloc.solvers.place import column_layout, place_baseline
from wsealloc.solvers.place import solve as place_solver
from wsealloc.solvers.share import solve as share_solver
from wsealloc.solvers.stages import StagePartition
from wsealloc.solvers.stages import solve as stage_solver
from wsealloc.solvers.strips import Placed
from wsealloc.units import format_bytes

Progress = Callable[[str], None]

# Shares of the budget (what remains when the stage starts). The allocation backends usually prove
# their optimum in seconds; capping them at half keeps the placement's time when they do not.
ALLOCATION_SHARE_WHEN_PLACING = 0.5
BASELINE_PLACEMENT_SHARE = 0.25  # the greedy allocation placed by the same construction
# --share auto: regions that fill the wafer may not pack; choose again among these region families
PACKING_FAMILIES = ("stacked",)  # (only a family that may not pack falls back; stacked columns always do)
# the share of the wafer's cores regions of a family may take: two shelves of regions need a little
# slack to split their widths into rows of the wafer's width; columns (stacked or not) always pack
FAMILY_BUDGET = {"squares": 1.0, "shelves": 0.98, "columns": 1.0, "stacked": 1.0}
SHARING_SHARE = 0.6  # --share auto: the search for runs and grids (LLaMA decodes: about 10 s; the rest allocates and places)
# After a stop request, a phase that does not return within this many seconds is abandoned (its
# best-so-far result is lost, the run falls back to the best one it holds): a signal stops any phase.
STOP_GRACE_S = 1.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class SolveOutcome:
    """Everything a solve produced."""

    plan: Plan
    result: SolverResult  # the chosen solver's result (bound folded in)
    baseline: SolverResult  # greedy under the same cost model
    exact: SolverResult  # bisection: the proven optimum of the allocation-only problem
    costs: CostTable
    interrupted: bool = False
    placement: PlacementResult | None = None
    partition: StagePartition | None = None  # multi-wafer plans: the stage cut points
    request: SolveRequest | None = None  # what was solved (None only for hand-built outcomes)
    kind: str = "model"  # Outcome.kind

    def flows(self) -> list[tuple[str, str, float]]:
        """Producer->consumer flows between kernels: (producer, consumer, bytes per sample)."""
        names = [kc.kernel.name for kc in self.costs.kernels]
        return [(names[s], names[t], b) for s, t, b in flows(self.costs).pairs()]

    @property
    def speedup(self) -> float | None:
        """Baseline bottleneck / plan bottleneck (throughput ratio), placed baseline for placed plans."""
        # the plan's own baseline: for several wafers it is the greedy over the same stages, while
        # ``self.baseline`` is one stage's greedy result
        base = self.plan.baseline.placed_value_cycles if self.plan.objective.placed else self.plan.baseline.value_cycles
        if base is None or self.plan.objective.value == 0:
            return None
        return base / self.plan.objective.value


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


def _settle_recompute(costs: CostTable, objective: Objective) -> tuple[CostTable, ProvenBound | None]:
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
    relaxed = objective.exact_bound(build_problem(costs, objective=objective))
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


def pipeline_bound(costs: CostTable, objective: Objective) -> ProvenBound:
    """The objective's proven bound of a layer pipeline on one wafer, recomputation settled per segment."""
    fixed, relaxed = _settle_recompute(costs, objective)
    return relaxed or objective.exact_bound(build_problem(fixed, objective=objective))


def _run_stoppable(fn: Callable[[], _T], deadline: Deadline) -> _T | None:
    """Run ``fn`` in a worker thread so the main thread stays free to handle SIGINT/SIGTERM (the
    phases watch the deadline, whose stop hook the signal handler sets). A phase still running
    ``STOP_GRACE_S`` after a stop request is abandoned (None), so a signal ends any phase promptly."""
    value: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            value.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(exc)

    worker = threading.Thread(target=target, name="wsealloc-solve", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
        if deadline.stopped:
            worker.join(STOP_GRACE_S)
            break
    if error:
        raise error[0]
    return value[0] if value else None


def solve_costs(
    costs: CostTable,
    request: SolveRequest,
    deadline: Deadline | None = None,
    progress: Progress | None = None,
    proven: ProvenBound | None = None,
) -> SolveOutcome:
    """Solve one wafer's cost table: greedy baseline, exact bound, then the request's backend (an
    allocation share of ``deadline``); with ``request.place``, place every kernel on the wafer in
    what remains (the bound stays the allocation-only optimum). ``deadline`` defaults to the
    request's time limit from now. ``proven``: a bound proven before (the sharing search's, over the
    regions it chose from), used instead of the objective's own; a table whose units each have one
    candidate (a fixed ``--grid``) is taken as it is."""
    deadline = deadline or Deadline.after(request.solver.time_limit_s)
    say = progress or (lambda message: None)
    solver = request.solver.name
    knobs = SolveOptions(deadline=deadline, workers=request.solver.workers, seed=request.solver.seed)
    objective = objective_named(request.objective)
    costs, relaxed = _settle_recompute(costs, objective)
    proven = proven or relaxed
    problem = build_problem(costs, objective=objective)
    say(f"allocation: {problem.n_kernels} kernels in {len(problem.classes)} classes")
    if request.sharing.mode is ShareMode.GRID:
        return _fixed_grid(costs, problem, request, deadline, knobs, say)  # no choice: no solver runs
    objective.check_backend(solver)
    baseline = get_solver("greedy")(problem, knobs)
    t0 = time.perf_counter()
    # a bound proven over a wider family than this table (the sharing search's: every partition into
    # regions) is the only one a result may claim; a backend's own optimum holds for this table alone
    wider = proven is not None
    proven = proven or objective.exact_bound(problem)
    if proven.value is None:
        raise InfeasibleError(infeasibility_message(costs, problem))
    wall = time.perf_counter() - t0 + proven.wall_s
    exact = (
        result_from_choice(proven.method, problem, proven.choice, Status.OPTIMAL, proven.value, wall)
        if proven.choice is not None
        else SolverResult(proven.method, Status.UNKNOWN, None, None, proven.value, wall, message=f"{proven.method} lower bound")
    )
    bound = proven.value
    if solver == "bisect" or proven.final:
        result = (
            exact
            if proven.choice is not None
            else result_from_choice(proven.method, problem, proven.start or (), Status.FEASIBLE, bound, wall)
        )
    elif solver in ("greedy", "greedy-seed"):
        result = baseline if solver == "greedy" else get_solver(solver)(problem, knobs)
    else:
        hint = proven.start or (baseline.choice if baseline.status is Status.FEASIBLE else exact.choice)
        share = deadline.share(ALLOCATION_SHARE_WHEN_PLACING) if request.place else deadline
        run_opts = replace(knobs, deadline=share, hint=hint, lower_bound=bound)
        backend = get_solver(solver)
        say(f"allocation: {proven.method} bound {bound:,} cycles; running {solver} ({share.remaining():.1f} s at most)")
        found = _run_stoppable(lambda: backend(problem, run_opts), deadline)
        result = found or SolverResult(solver, Status.UNKNOWN, None, None, bound, 0.0, message="stopped by a signal")
    if not result.has_solution:
        fallback = baseline if baseline.status is Status.FEASIBLE else exact
        result = replace(
            fallback,
            solver=result.solver,
            status=Status.FEASIBLE,
            wall_s=result.wall_s,
            message=f"{result.solver} found no solution ({result.status.value}: {result.message}); "
            f"kept the {fallback.solver} plan",
        )
    if result.status is not Status.INVALID and bound is not None and result.objective is not None:
        # The objective's proven bound holds for every backend's problem: report it with each result.
        if result.status is Status.OPTIMAL and result.objective > bound and proven.optimal:
            raise SolverError(f"{result.solver} claims OPTIMAL at {result.objective} cycles but {proven.method} proves {bound}")
        value = result.objective
        if wider:
            status = Status.OPTIMAL if value <= bound else Status.FEASIBLE
            result = replace(result, bound=min(bound, value), status=status)
        else:
            status = Status.OPTIMAL if value <= bound else result.status
            result = replace(result, bound=max(result.bound or 0, bound), status=status)
    if not request.place or deadline.stopped:
        # a stop before the placement: the allocation-only plan is the best valid plan there is
        plan = make_plan(costs, request.onnx_model, result, baseline, request=request)
        return SolveOutcome(plan, result, baseline, exact, costs, deadline.stopped, request=request)
    pproblem = build_placement_problem(costs, lower_bound=int(bound or 0), objective=objective)
    say(f"placement: {len(pproblem.shapes)} shape tables; placing ({deadline.remaining():.1f} s left)")
    # The baseline: the greedy allocation's latencies placed by the same construction. It is also a
    # start of the placement search, so the result is never worse than it.
    greedy_layout = None
    baseline_placed = None
    if baseline.choice is not None:
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(baseline.choice)])
        share = deadline.share(BASELINE_PLACEMENT_SHARE)
        greedy_layout = _run_stoppable(lambda: place_baseline(pproblem, targets, share), deadline)
        if greedy_layout is not None:
            stage, comm = pproblem.evaluate(greedy_layout.rects, greedy_layout.latency)
            baseline_placed = (pproblem.layout_time(stage, comm), int(stage.max()))  # (value, bottleneck)
    starts: tuple[Placed, ...] = (greedy_layout,) if greedy_layout is not None else ()
    if objective.aggregate is Aggregate.PATH and result.choice is not None:
        # a token's path: the construction's one target time suits the slowest kernel, not a sum; the
        # solver's own allocation placed by the same construction is a start the search must beat
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(result.choice)])
        solver_layout = _run_stoppable(
            lambda: place_baseline(pproblem, targets, deadline.share(BASELINE_PLACEMENT_SHARE)), deadline
        )
        starts += (solver_layout,) if solver_layout is not None else ()
        if costs.runs is not None:  # regions: few large rectangles, stacked in columns if the search finds none
            stacked = column_layout(pproblem, targets)
            starts += (stacked,) if stacked is not None else ()
    place_opts = replace(knobs, deadline=deadline)
    placement = _run_stoppable(lambda: place_solver(pproblem, place_opts, starts=starts), deadline)
    if placement is None or placement.rects is None:
        if deadline.stopped:
            # stopped before any layout: the allocation-only plan is the best valid plan there is
            plan = make_plan(costs, request.onnx_model, result, baseline, request=request)
            return SolveOutcome(plan, result, baseline, exact, costs, True, request=request)
        message = "no layout" if placement is None else placement.message
        raise NoLayoutError(
            f"{costs.kgraph.ops.source}: no placement fits {costs.arch.name} even after giving back cores "
            f"({message}); reduce defects, allow die crossings, or plan with --no-place"
        )
    say(f"placement: {placement.solver} {placement.status.value}, bottleneck {placement.objective:,} cycles")
    plan = make_plan(costs, request.onnx_model, result, baseline, placement, pproblem, baseline_placed, request)
    return SolveOutcome(plan, result, baseline, exact, costs, deadline.stopped, placement, request=request)


def _fixed_grid(
    costs: CostTable, problem: AllocationProblem, request: SolveRequest, deadline: Deadline, knobs: SolveOptions, say: Progress
) -> SolveOutcome:
    """``--grid RxC``: every region on the one grid (no choice to make); placed when its regions fit the
    wafer, else reported with the cores it needs (the configuration is the one a measurement describes:
    it is not refused)."""
    choice = tuple(0 for _ in range(problem.n_kernels))
    need = problem.evaluate(choice)[1]
    fits = need <= problem.total_cores
    fixed_problem = replace(problem, total_cores=max(problem.total_cores, need))
    r, c = request.sharing.grid or (0, 0)
    note = f"every kernel on {r}x{c}: {len(costs.kernels)} regions of {r * c:,} cores = {need:,} cores" + (
        "" if fits else f", more than the wafer's {problem.total_cores:,}: not placed"
    )
    result = result_from_choice("grid", fixed_problem, choice, Status.FEASIBLE, None, 0.0, message=note)
    say(f"allocation: {note}")
    if not fits or not request.place or deadline.stopped:
        plan = make_plan(costs, request.onnx_model, result, result, request=request, fits=fits)
        return SolveOutcome(plan, result, result, result, costs, deadline.stopped, request=request)
    pproblem = build_placement_problem(costs, lower_bound=0, objective=problem.objective)
    stacked = column_layout(pproblem, np.array(problem.latencies(choice)))
    starts = (stacked,) if stacked is not None else ()
    placement = _run_stoppable(lambda: place_solver(pproblem, replace(knobs, deadline=deadline), starts=starts), deadline)
    if placement is None or placement.rects is None:
        # the cores fit but the rectangles do not (three 420 x 420 regions on 750 x 994): say so, keep the plan
        unplaced = replace(
            result, message=f"{note}; no layout packs {len(costs.kernels)} regions of {r}x{c} on the wafer: not placed"
        )
        plan = make_plan(costs, request.onnx_model, unplaced, unplaced, request=request)
        return SolveOutcome(plan, unplaced, unplaced, unplaced, costs, deadline.stopped, request=request)
    plan = make_plan(costs, request.onnx_model, result, result, placement, pproblem, None, request)
    return SolveOutcome(plan, result, result, result, costs, deadline.stopped, placement, request=request)


def solve_stages(
    costs: CostTable,
    request: SolveRequest,
    wafers: int | None,
    deadline: Deadline | None = None,
    progress: Progress | None = None,
) -> SolveOutcome:
    """Pipeline the model over ``wafers`` wafers (None: the fewest that fit): exact stage partition,
    then each stage allocated (and placed) on its own wafer, each taking an equal share of what
    remains of ``deadline``."""
    deadline = deadline or Deadline.after(request.solver.time_limit_s)
    say = progress or (lambda message: None)
    sproblem = build_stage_problem(costs)
    partition = stage_solver(sproblem, wafers)
    if partition.status is not Status.OPTIMAL or partition.objective is None:
        raise InfeasibleError(stage_infeasibility(costs, sproblem, wafers, partition.message))
    say(f"stages: {partition.wafers} wafers, cuts {list(partition.cuts[1:-1])}, bound {partition.objective:,} cycles")
    bound = partition.objective
    relaxed = costs
    retries = _training_retries(relaxed, sproblem, wafers if wafers is not None else partition.wafers, wafers)
    tried = {tuple(partition.cuts)}
    while True:
        # training: each wafer boundary between a kernel and the loss holds two more samples in flight
        # and cuts the recomputation segments; the partition's bound on that many wafers (without them)
        # stays a valid lower bound whichever cuts the plan ends with
        costs = over_wafers(relaxed, partition.cuts, request.constraints)
        try:
            outcomes = []
            stages = partition.stages()
            for s, (first, end) in enumerate(stages):
                say(f"stage {s}: kernels [{first}, {end})")
                share = deadline.share(1.0 / (len(stages) - s))
                outcomes.append(solve_costs(costs.subset(first, end), request, share))
            break
        except InfeasibleError:
            retry = next((p for p in retries if tuple(p.cuts) not in tried), None)
            if retry is None or retry.objective is None or deadline.stopped:
                raise
            tried.add(tuple(retry.cuts))
            if retry.wafers != partition.wafers:  # more wafers: the relaxation's optimum on that many
                bound = stage_solver(sproblem, retry.wafers).objective or 0
            partition = retry
            say(f"stages: a wafer does not fit with the samples its boundaries add; cuts {list(partition.cuts[1:-1])}")
    transfer = sproblem.transfer_cycles()
    wall = partition.wall_s + sum(o.plan.objective.wall_s for o in outcomes)
    plan = merge_stages(
        costs,
        request.onnx_model,
        partition.cuts,
        [o.plan for o in outcomes],
        transfer,
        bound,
        f"stages+{outcomes[0].plan.objective.solver}",
        wall,
        request,
    )
    exact = SolverResult("stages", Status.OPTIMAL, None, bound, bound, partition.wall_s)
    first_out = outcomes[0]
    return SolveOutcome(
        plan, first_out.result, first_out.baseline, exact, costs, deadline.stopped, None, partition=partition, request=request
    )


def _training_retries(costs: CostTable, sproblem: StageProblem, found: int, wafers: int | None) -> Iterator[StagePartition]:
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


def wafer_sweep(costs: CostTable, counts: Sequence[int]) -> list[tuple[int, int | None]]:
    """Optimal allocation-only bottleneck for each wafer count (None when it does not fit)."""
    sproblem = build_stage_problem(costs)
    return [(n, stage_solver(sproblem, n).objective) for n in counts]


class PlanDocument(Protocol):
    """What every plan document offers: its JSON and its headline numbers."""

    def to_json(self) -> str: ...

    def headline(self) -> Headline: ...


class Outcome(Protocol):
    """What every outcome of :func:`run` offers (``kind`` names which one: ``model`` or ``contest``;
    commands that print or write more dispatch on it through a registry of their own)."""

    @property
    def kind(self) -> str: ...

    @property
    def plan(self) -> PlanDocument: ...

    @property
    def interrupted(self) -> bool: ...


def _run_model(request: SolveRequest, deadline: Deadline, progress: Progress | None) -> SolveOutcome:
    """An ONNX (or generated ONNX) model: the front half, the cores shared in time if asked, then one
    wafer or a pipeline over several."""
    resident = request.mode is Mode.PIPELINED  # streaming and auto judge what fits themselves
    costs = _run_stoppable(
        lambda: build_costs(
            request.onnx_model, request.machine, request.cost, constraints=request.constraints, check_feasible=resident
        ),
        deadline,
    )
    if costs is None:  # stopped before the model was read: there is no plan to keep
        raise Interrupted(f"interrupted while reading {request.model.label}; nothing was solved")
    held = [kc.kernel.name for kc in costs.kernels if kc.kernel.state]
    if request.cost.train is not None and held:
        raise UsageError(
            f"{request.model.label}: --train plans training, but this export keeps a KV cache ({held[0]}, ...): it is an "
            "inference step (decode or prefill); train the model's training export instead"
        )
    if not resident:
        mode, why, streamed = choose_mode(costs, request)
        request = request.model_copy(update={"mode": mode})
        if mode is Mode.STREAMING:
            return solve_streamed(costs, streamed, request, why)
        check_each_kernel_fits(costs)
        costs, request = search_segments(costs, request, progress)
        return _noted(_run_resident(costs, request, deadline, progress), why)
    costs, request = search_segments(costs, request, progress)
    return _run_resident(costs, request, deadline, progress)


SEGMENT_FACTORS = (0.5, 0.75, 1.0, 1.5)  # recomputation segment lengths tried, times about sqrt(D)


def search_segments(costs: CostTable, request: SolveRequest, progress: Progress | None = None) -> tuple[CostTable, SolveRequest]:
    """A layer pipeline on one wafer whose recomputation segments are not fixed (``--recompute-segment``):
    the table costed with segments of L x ``SEGMENT_FACTORS`` stages (L about sqrt(D)), the one whose
    proven optimum (over every choice of recomputing segments) is the fastest kept, and the request with
    that length recorded (its plan says which; ``verify`` costs it so). Anything else is returned as it is."""
    train = request.cost.train
    if (
        train is None
        or train.segment is not None
        or train.recompute is Recompute.NONE
        or request.wafer_count != 1
        or request.sharing.mode is not ShareMode.NONE
    ):
        return costs, request
    base = segment_length(pipeline_shape(costs.kgraph)[1])
    objective = objective_named(request.objective)
    found: list[tuple[int, int, int, CostTable]] = []  # (bound, distance from L, length, table)
    for length in sorted({max(1, round(base * f)) for f in SEGMENT_FACTORS}):
        options = request.cost.model_copy(update={"train": train.model_copy(update={"segment": length})})
        # the default length is the table at hand (costed with about sqrt(D) already): only the record differs
        table = replace(costs, options=options) if length == base else with_options(costs, options, request.constraints)
        try:
            value = pipeline_bound(table, objective).value
        except WseallocError:  # this length leaves a kernel no grid, or a rule no segment way
            continue
        if value is not None:
            found.append((value, abs(length - base), length, table))
    if not found:
        return costs, request  # no length fits: the default's own error says why
    value, _, length, table = min(found, key=lambda f: f[:3])
    if progress is not None:
        tried = ", ".join(f"{f[2]}: {f[0]:,}" for f in sorted(found, key=lambda f: f[2]))
        progress(f"recomputation segments of {length} stages (bounds by length: {tried} cycles)")
    return table, request.model_copy(update={"cost": table.options})


def _noted(outcome: SolveOutcome, why: str) -> SolveOutcome:
    """``outcome`` with ``why`` (the mode's choice) in front of its plan's message."""
    objective = outcome.plan.objective
    message = f"{why}; {objective.message}" if objective.message else why
    plan = outcome.plan.model_copy(update={"objective": objective.model_copy(update={"message": message})})
    return replace(outcome, plan=plan)


def _run_resident(costs: CostTable, request: SolveRequest, deadline: Deadline, progress: Progress | None) -> SolveOutcome:
    """Every kernel resident on the wafer(s): the cores shared in time if asked, then one wafer or a
    pipeline over several."""
    if costs.applied is not None:  # the user's rules: a conflict is explained before any solver runs
        check_conflicts(costs, request.wafer_count, shared=request.sharing.mode is not ShareMode.NONE)
    count = request.wafer_count
    if request.sharing.mode is not ShareMode.NONE:
        if count != 1:
            raise UsageError("--share/--grid plan regions on one wafer; drop --wafers (or use --share none)")
        units, proven = share_cores(costs, request, deadline, progress)
        retries = PACKING_FAMILIES if request.sharing.family != "stacked" else ()
        for family in (*retries, None):
            try:
                reference = ProvenBound("share", proven.unconstrained, ()) if proven and proven.unconstrained else None
                return priced(solve_costs(units, request, deadline, progress, proven), costs, request, reference)
            except NoLayoutError:
                if family is None or request.sharing.mode is not ShareMode.AUTO or deadline.stopped:
                    raise
            # the regions chosen do not pack: choose again among shapes that do (the plan records the
            # family; its bound stays the least of the families searched, so the plan reports the price)
            if progress:
                progress(f"sharing: no layout packs those regions; choosing again among {family} regions")
            request = request.model_copy(update={"sharing": request.sharing.model_copy(update={"family": family})})
            units, proven = share_cores(costs, request, deadline, progress, proven.value if proven else None)
    if count == 1:
        return priced(solve_costs(costs, request, deadline, progress), costs, request)
    return priced(solve_stages(costs, request, count, deadline, progress), costs, request)


def choose_mode(costs: CostTable, request: SolveRequest) -> tuple[Mode, str, CostTable]:
    """The mode a ``--mode streaming|auto`` request runs in, why, and the streamed cost table. Auto: the
    layer pipeline when it fits and its proven optimum is no slower than streaming, else streaming (when
    its batch fits); the reason names both rates."""
    streamed = streaming_table(costs, request.stream_samples)
    unit = streamed.kernels[0]
    stream = int(unit.frontier.latency[0]) if len(unit.frontier) else None
    if request.mode is Mode.STREAMING:
        return Mode.STREAMING, "--mode streaming", streamed
    objective = objective_named(request.objective)
    pipe: int | None = None
    unfit = [kc.kernel.name for kc in costs.kernels if len(kc.frontier) == 0]
    if unfit:
        why_not = f"{len(unfit)} kernel(s) fit no grid of their own ({', '.join(unfit[:2])}{', ...' if len(unfit) > 2 else ''})"
    else:
        pipe = pipeline_bound(costs, objective).value
        why_not = "its kernels' smallest op models need more cores than the wafer has"
    clock = costs.arch.clock_hz
    if pipe is None and stream is None:
        raise InfeasibleError(
            f"{costs.kgraph.ops.source}: neither mode fits {costs.arch.name}: the layer pipeline does not ({why_not}), and "
            f"streaming {request.stream_samples} sample(s) per pass needs more SRAM than the wafer has (a smaller --stream-batch)"
        )
    if pipe is None:
        return Mode.STREAMING, f"auto: the layer pipeline does not fit ({why_not}); streamed", streamed
    rates = f"pipelined {clock / pipe:,.1f} samples/s (proven)"
    if stream is None:
        return Mode.PIPELINED, f"auto: {rates}; streaming {request.stream_samples} sample(s) per pass does not fit", streamed
    rates += f", streamed {clock / stream:,.1f} samples/s at {request.stream_samples} per pass"
    if pipe <= stream:
        return Mode.PIPELINED, f"auto: {rates}: pipelined", streamed
    return Mode.STREAMING, f"auto: {rates}: streamed", streamed


def _recompute_mode(costs: CostTable) -> str:
    """The request's --recompute (what a streamed plan's recomputation may do)."""
    return costs.options.train.recompute.value if costs.options.train is not None else "none"


def solve_streamed(costs: CostTable, units: CostTable, request: SolveRequest, why: str) -> SolveOutcome:
    """The streamed plan of ``costs``: every kernel in its turn on the whole wafer (one region, ``units``),
    its recomputation chosen so the batch fits (``opmodels.streaming``). Its bound: every kernel on its
    fastest dataflow with its stash kept, SRAM ignored (``opmodels.streaming.lower_bound``)."""
    t0 = time.perf_counter()
    unit = units.kernels[0]
    source = units.kgraph.ops.source
    if not len(unit.frontier):
        need = int(unit.table.sram.min())
        fits = largest_batch(costs)
        raise InfeasibleError(
            f"{source}: streamed with {request.stream_samples} sample(s) per pass, every kernel's stash and the largest "
            f"kernel's buffers need {format_bytes(need)} per core, usable {format_bytes(units.arch.usable_sram_bytes)} "
            f"with every segment --recompute {_recompute_mode(costs)} lets recompute; the largest batch that fits is {fits} "
            "(--stream-batch)"
        )
    objective = objective_named(request.objective)
    problem = build_problem(units, objective=objective)
    value = int(unit.frontier.latency[0])
    bound = streamed_lower_bound(costs, request.stream_samples)
    if bound > value:
        raise SolverError(f"{source}: the streamed plan ({value:,} cycles) is below its own lower bound ({bound:,})")
    status = Status.OPTIMAL if bound == value else Status.FEASIBLE
    result = result_from_choice("stream", problem, (0,), status, bound, time.perf_counter() - t0, message=why)
    knobs = SolveOptions(deadline=Deadline.after(request.solver.time_limit_s), workers=1, seed=request.solver.seed)
    baseline = get_solver("greedy")(problem, knobs)  # one unit, one op model: the same plan, as the greedy finds it
    plan = make_plan(units, request.onnx_model, result, baseline, request=request)
    return SolveOutcome(plan, result, baseline, result, units, False, request=request)


def unconstrained_bound(costs: CostTable, request: SolveRequest, wafers: int | None) -> ProvenBound:
    """The objective's proven bound for the request without its constraints (the price's reference):
    on one wafer the objective's own bound of the unconstrained table, over several the exact stage cut."""
    base = costs.unconstrained if costs.unconstrained is not None else costs
    if wafers == 1:
        return pipeline_bound(base, objective_named(request.objective))
    t0 = time.perf_counter()
    partition = stage_solver(build_stage_problem(base), wafers)
    # training: the cut is chosen without the samples a wafer boundary adds (a bound, not an optimum)
    proven: tuple[int, ...] | None = () if base.options.train is None else None
    return ProvenBound("stages", partition.objective, proven, wall_s=time.perf_counter() - t0)


def priced(outcome: SolveOutcome, costs: CostTable, request: SolveRequest, reference: ProvenBound | None = None) -> SolveOutcome:
    """``outcome`` with the price of the user's constraints in its plan (``objective.constraints``): the
    proven optimum without them (``reference`` when the caller proved it, e.g. the sharing search)
    beside the plan's bound with them."""
    applied = costs.applied
    if applied is None:
        return outcome
    wafers = outcome.partition.wafers if outcome.partition is not None else 1
    if reference is None:
        reference = (
            ProvenBound("share", None, None)
            if request.sharing.mode is not ShareMode.NONE
            else unconstrained_bound(costs, request, wafers)
        )
    record = ConstraintsRecord(
        source=applied.constraints.source,
        rules=len(applied.constraints.rules),
        unconstrained_bound_cycles=reference.value,
        unconstrained_optimal=reference.optimal,
    )
    objective = outcome.plan.objective.model_copy(update={"constraints": record})
    return replace(outcome, plan=outcome.plan.model_copy(update={"objective": objective}))


def pack_runs(costs: CostTable, r: int, c: int) -> list[tuple[int, int]]:
    """Consecutive kernels packed into as few ``r x c`` regions as SRAM allows (first fit in dataflow
    order: the fewest regions of a sequence); a kernel that alone needs more is an error naming it."""
    if r > costs.arch.rows or c > costs.arch.cols:
        raise UsageError(f"--grid {r}x{c}: larger than the {costs.arch.rows}x{costs.arch.cols} wafer of {costs.arch.name}")
    if not grid_allowed(costs.arch, r, c):
        die = costs.arch.wafer.die_cores
        raise UsageError(
            f"--grid {r}x{c}: crosses a die boundary, which {costs.arch.name} forbids (dies are {die.rows}x{die.cols})"
        )
    sp = build_sharing_problem(costs, np.array([[r, c]]))
    usable = float(sp.usable_sram)
    runs: list[tuple[int, int]] = []
    first, held, peak = 0, 0.0, 0.0
    for k in range(sp.n_kernels):
        resident, buffers = float(sp.resident[k, 0]), float(sp.buffers[k, 0])
        if sp.latency[k, 0] >= SHARING_INF or resident + buffers > usable:
            why = (
                f"cannot be laid on {r}x{c}"
                if sp.latency[k, 0] >= SHARING_INF
                else f"needs {format_bytes(int(resident + buffers))} per core on {r}x{c}, more than the usable "
                f"{format_bytes(sp.usable_sram)}"
            )
            raise InfeasibleError(
                f"{costs.kgraph.ops.source}: kernel {sp.names[k]} {why}: a kernel cannot span regions; use a larger --grid"
            )
        if held + resident + max(peak, buffers) > usable:  # resident parts add up, one kernel's buffers at a time
            runs.append((first, k))
            first, held, peak = k, 0.0, 0.0
        held += resident
        peak = max(peak, buffers)
    runs.append((first, sp.n_kernels))
    return runs


def share_cores(
    costs: CostTable,
    request: SolveRequest,
    deadline: Deadline,
    progress: Progress | None = None,
    known_bound: int | None = None,
) -> tuple[CostTable, ProvenBound | None]:
    """The cost table of regions the request asks for (``--grid``: the runs SRAM packing gives on the
    fixed grid; ``--share auto``: the runs and grids ``solvers.share`` proves best for a token's time
    among the request's family of region grids), with the sharing search's proven bound (the least of
    it and ``known_bound``, another family's, when a solve fell back)."""
    say = progress or (lambda message: None)
    if request.sharing.mode is ShareMode.GRID:
        assert request.sharing.grid is not None
        r, c = request.sharing.grid
        runs = pack_runs(costs, r, c)
        return region_table(costs, runs, shapes=np.array([[r, c]])), None
    if request.objective is not ObjectiveKind.LATENCY:
        raise UsageError(
            "--share auto chooses regions for one token's time: add --objective latency "
            "(a throughput plan keeps every kernel on its own rectangle: --share none)"
        )
    sp = build_sharing_problem(costs, family=request.sharing.family)
    sp = replace(sp, total_cores=int(sp.total_cores * FAMILY_BUDGET[request.sharing.family]))
    groups = _region_spans(costs)
    kernel_sp = sp
    sp, bounds = sp.merged([span for span, _ in groups]) if groups else (sp, np.arange(sp.n_kernels + 1))
    share = deadline.share(SHARING_SHARE)  # the runs and grids; the allocation and placement take the rest
    found = _run_stoppable(lambda: share_solver(sp, share), deadline)
    if found is None:
        raise Interrupted(f"interrupted while choosing regions for {request.model.label}; nothing was solved")
    if found.status is Status.INFEASIBLE:
        named = "; ".join(where for _, where in groups)
        rules = f" with {named}" if named else ""
        raise InfeasibleError(f"{costs.kgraph.ops.source}: {found.message}{rules}")
    found = replace(found, runs=tuple((int(bounds[i]), int(bounds[j])) for i, j in found.runs))
    sp = kernel_sp  # the runs are of kernels again
    free = None
    if groups:  # the price of the groups: the same search without them (a share of what is left)
        free_run = _run_stoppable(lambda: share_solver(kernel_sp, deadline.share(0.2)), deadline)
        free = free_run.bound if free_run is not None and free_run.status is not Status.INFEASIBLE else None
    if not found.runs:  # nothing found in time: every kernel keeps its own rectangle
        say(f"sharing: {found.message}; planning one kernel per region instead")
        return costs, None
    say(f"sharing: {found.message}; {found.latency:,} cycles per token, bound {found.bound:,} ({found.wall_s:.1f} s)")
    units = region_table(costs, found.runs, shapes=sp.shapes)
    start = []
    for i, ((first, end), g) in enumerate(zip(found.runs, found.grids, strict=True)):
        run_latency = int(sp.latency[first:end, g].sum())
        frontier = units.kernels[i].frontier
        within = np.flatnonzero(frontier.latency <= run_latency)
        start.append(int(within[0]) if within.size else len(frontier) - 1)
    choice = tuple(start)
    bound = found.bound if known_bound is None else min(known_bound, found.bound or known_bound)
    optimal = found.status is Status.OPTIMAL and bound == found.latency
    if sp.pieces.size:  # stacked columns: each column's regions on its grid, as chosen (they pack as columns)
        single = sp.single_windows()
        cut = np.zeros(sp.n_kernels + 1, dtype=bool)
        cut[bounds] = True  # a column's regions break only where the user's groups allow
        pieces = [
            (piece, g) for (i, j), g in zip(found.runs, found.grids, strict=True) for piece in sp.split(i, j, g, single[g], cut)
        ]
        runs = [piece for piece, _ in pieces]
        grids = [sp.shapes[g : g + 1] for _, g in pieces]
        units = region_table(costs, runs, run_shapes=grids)
        fixed = tuple(0 for _ in runs)
        return units, ProvenBound(
            "share", bound, fixed if optimal else None, fixed, final=True, wall_s=found.wall_s, unconstrained=free
        )
    return units, ProvenBound("share", bound, choice if optimal else None, choice, wall_s=found.wall_s, unconstrained=free)


def _region_spans(costs: CostTable) -> list[tuple[tuple[int, int], str]]:
    """The user's ``together: ... how: region`` groups as kernel spans [first, last + 1) (a region is a
    run of consecutive kernels, so the kernels between a group's first and last share it too), each
    with the rule's file and line."""
    applied = costs.applied
    if applied is None:
        return []
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    spans = []
    for rule, group in applied.region_groups:
        members = [index[name] for name in group]
        spans.append(((min(members), max(members) + 1), f"{applied.where(rule)} ({applied.rule(rule).text()})"))
    return spans


def _run_contest(request: SolveRequest, deadline: Deadline, progress: Progress | None) -> ContestOutcome:
    """An ISPD-2020 contest instance: :func:`wsealloc.contest.run_contest` in the same engine."""
    contest = _run_stoppable(lambda: run_contest(request, deadline, progress), deadline)
    if contest is None:
        raise Interrupted(f"interrupted while solving {request.model.label}; nothing was written")
    return contest


# the runner of each model source kind (frontend.sources.SOURCE_KINDS): a new format adds one line
RUNNERS: dict[str, Callable[[SolveRequest, Deadline, Progress | None], SolveOutcome | ContestOutcome]] = {
    "onnx": _run_model,
    "synthetic": _run_model,
    "kgraph": _run_contest,
}


def run(request: SolveRequest, stop: StopHook | None = None, progress: Progress | None = None) -> SolveOutcome | ContestOutcome:
    """Solve ``request``: the one entry every command, report, sweep point and bench worker calls.

    The run's deadline starts here (front end included); ``stop`` lets a signal handler end it early
    with the best plan found so far (``.interrupted``). The source's kind picks the runner
    (``RUNNERS``); every outcome meets :class:`Outcome` (a contest instance gives a
    :class:`ContestOutcome`)."""
    deadline = Deadline.after(request.solver.time_limit_s, stop)
    return RUNNERS[request.model.kind](request, deadline, progress)


def solve(
    model: str | Path | SolveRequest,
    arch: str | Path | Arch | None = None,
    *,
    output: str | Path | None = None,
    stop: StopHook | None = None,
    **options: Unpack[RequestOptions],
) -> SolveOutcome | ContestOutcome:
    """Plan ``model`` on ``arch``: the CLI's ``solve`` as a function (keyword ``options``: see
    :class:`wsealloc.request.RequestOptions`). Writes ``output`` atomically if given. ``arch`` None
    means ``wse2`` for an ONNX model and the file's own header for a ``.kgraph`` instance (an arch
    given for one overrides its header, as ``--arch`` does)."""
    if output is not None:
        check_outputs(model, arch, {"output": output})
    request = build_request(model, arch, **options)
    outcome = run(request, stop)
    if output is not None:
        write_atomic(output, outcome.plan.to_json())
    return outcome
