"""The driver: what a strategy prepared, solved and made a plan.

``drive`` asks the strategy for its decision and parts (``strategy.base``), solves each part (the
greedy baseline, the bound the strategy proved, the request's backend, then the placement), builds
the plan (merged over wafers when the strategy cut the model), writes the decision, its reason and
the constraints' price into it, and asks the strategy for another decision when a layout does not
pack. It never asks which strategy it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from wsealloc.budget import Deadline, run_stoppable
from wsealloc.cost import Dataflow
from wsealloc.errors import Interrupted, NoLayoutError, SolverError, WseallocError
from wsealloc.opmodels import CostTable
from wsealloc.plan import rules
from wsealloc.plan.build import make_plan, merge_stages
from wsealloc.plan.schema import SCHEMA, ConstraintsRecord, Plan
from wsealloc.problem import AllocationProblem, build_problem
from wsealloc.problem.comm_bound import comm_bound_problem, communication_bound, states_bound
from wsealloc.problem.flows import flows
from wsealloc.problem.objective import Aggregate, ProvenBound, objective_named
from wsealloc.problem.placement import PlacementProblem, build_placement_problem
from wsealloc.problem.stages import build_stage_problem
from wsealloc.request import SolveRequest, StartLayout
from wsealloc.solvers import SolveOptions, SolverResult, Status, get_solver
from wsealloc.solvers.base import PlacementResult, result_from_choice
from wsealloc.solvers.fill import complete
from wsealloc.solvers.place import baseline_share, column_layout, path_share, place_baseline, place_path
from wsealloc.solvers.place import solve as place_solver
from wsealloc.solvers.stages import StagePartition
from wsealloc.solvers.strips import Placed
from wsealloc.strategy.base import Part, Prepared, Strategy
from wsealloc.strategy.regions import regions_fit

Progress = Callable[[str], None]

# Shares of the budget (what remains when the stage starts). The allocation backends usually prove
# their optimum in seconds; capping them at half keeps the placement's time when they do not.
ALLOCATION_SHARE_WHEN_PLACING = 0.5
# ... or less where the bound's own allocation (``ProvenBound.start``) leaves the backend little to
# gain: the share scales with the start's gap to the bound, full from this gap up (``_allocation_share``)
ALLOCATION_GAP_FULL = 0.05
ALLOCATION_SHARE_LEAST = 0.02  # (of the full share: the backend still runs, hinted with the start)
# An old plan's layout as a start (``--from-plan``): the kernels it lacks are fitted into it within this
# share of what remains (LLaMA-7B with 10 kernels to fit took 20 s before the fit was bounded: the
# search then had no time left; docs/benchmarks.md, "Re-solving from a plan"). A tenth until the fit
# took 0.4 s there (session 23): a completed old layout can be optimal, the search rarely as good.
START_SHARE = 0.25
# The bound that counts communication, computed before the placement search (``_comm_bound``): 0.1 s on
# the zoo, 1 s on LLaMA-7B re-solved from a plan (442 fixed corners); never more than this share.
COMM_BOUND_SHARE = 0.25


@dataclass(frozen=True)
class SolveOutcome:
    """Everything a solve produced."""

    plan: Plan
    result: SolverResult  # the chosen solver's result (bound folded in)
    baseline: SolverResult  # greedy under the same cost model
    exact: SolverResult  # the proven bound of the allocation-only problem (an optimum where it constructs one)
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


def drive(
    strategy: Strategy, costs: CostTable, request: SolveRequest, deadline: Deadline, progress: Progress | None = None
) -> SolveOutcome:
    """Solve ``costs`` the way ``strategy`` decides (see the module docstring)."""
    say = progress or (lambda message: None)
    # the strategy's searches (conflicts, segments, sharing, the stage cut) in a worker thread, as every
    # phase: a signal ends the decision within STOP_GRACE_S even where a search does not watch the deadline
    decided = run_stoppable(lambda: strategy.decide(costs, request, deadline, say), deadline)
    if decided is None:
        raise Interrupted(f"interrupted while deciding how to run {request.model.label}; nothing was solved")
    rivals = decided.rivals
    first = deadline.share(1.0 / (1 + len(rivals))) if rivals else deadline
    t0 = time.perf_counter()
    failed: NoLayoutError | None = None
    try:
        best: SolveOutcome | None = _retrying(strategy, costs, request, replace(decided, rivals=()), first, say)
    except NoLayoutError as exc:
        if not rivals or deadline.stopped:
            raise
        best, failed = None, exc  # (a rival may pack: the tries' time counts)
    spent = best.plan.objective.wall_s if best is not None else time.perf_counter() - t0
    stopped = False
    for i, rival in enumerate(rivals):
        # another decision the strategy could not rank before its plan is solved: its share of what remains
        if deadline.stopped or (best is not None and best.interrupted):
            break
        t0 = time.perf_counter()
        try:
            rival = replace(rival, price=rival.price or decided.price)
            other = _annotated(solve_prepared(rival, request, deadline.share(1.0 / (len(rivals) - i)), say), rival)
        except WseallocError as exc:
            if best is None:
                raise
            # the first decision's plan stands (a rival that does not pack, fails or is stopped takes nothing from it)
            say(f"rival decision: {exc}; the plan in hand stands")
            stopped = stopped or isinstance(exc, Interrupted)
            continue
        finally:
            spent += time.perf_counter() - t0  # (a rival that did not pack took its time too)
        stopped = stopped or other.interrupted
        if best is None or other.plan.objective.value < best.plan.objective.value:
            if best is not None:
                say(f"rival decision: {other.plan.objective.value:,} cycles, faster than {best.plan.objective.value:,}; kept")
            best = other
    if best is None:  # (stopped before a rival was tried: the first decision's error)
        assert failed is not None
        raise failed
    if rivals:  # the plan's time counts every decision solved; a signal during any of them says so
        plan = best.plan
        best = replace(best, plan=plan.model_copy(update={"objective": plan.objective.model_copy(update={"wall_s": spent})}))
        best = replace(best, interrupted=best.interrupted or stopped or deadline.stopped)
    return best


def _retrying(
    strategy: Strategy, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress
) -> SolveOutcome:
    """``prepared`` solved, another decision of the strategy's tried where a layout does not pack (the
    plan's time counts the tries before it and the decisions they took)."""
    t0 = time.perf_counter()
    while True:
        start = time.perf_counter()
        try:
            outcome = _annotated(solve_prepared(prepared, request, deadline, say), prepared)
        except NoLayoutError:
            again = run_stoppable(partial(strategy.retry, costs, request, prepared, deadline, say), deadline)
            if again is None or deadline.stopped:
                raise
            prepared = again
            continue
        if start == t0:
            return outcome
        objective = outcome.plan.objective
        update = {"wall_s": objective.wall_s + start - t0}
        return replace(outcome, plan=outcome.plan.model_copy(update={"objective": objective.model_copy(update=update)}))


def solve_prepared(prepared: Prepared, request: SolveRequest, deadline: Deadline, say: Progress) -> SolveOutcome:
    """Every part solved; several wafers merged into one plan (each wafer an equal share of what remains)."""
    partition = prepared.partition
    if partition is None:
        (part,) = prepared.parts
        return solve_part(part, request, deadline, say, comm_bound=True)
    outcomes = []
    for s, part in enumerate(prepared.parts):
        # (one part is the whole plan: valued as the plan is)
        paced = len(prepared.parts) == 1
        outcomes.append(solve_part(part, request, deadline.share(1.0 / (len(prepared.parts) - s)), say, paced=paced))
    costs = prepared.costs
    transfer = build_stage_problem(costs).transfer_cycles()
    wall = partition.wall_s + sum(o.plan.objective.wall_s for o in outcomes)
    plan = merge_stages(
        costs,
        request.onnx_model,
        partition.cuts,
        [o.plan for o in outcomes],
        transfer,
        prepared.bound,
        f"stages+{outcomes[0].plan.objective.solver}",
        wall,
        request,
        [o.costs for o in outcomes],
    )
    exact = SolverResult("stages", Status.OPTIMAL, None, prepared.bound, prepared.bound, partition.wall_s)
    first = outcomes[0]
    return SolveOutcome(plan, first.result, first.baseline, exact, costs, deadline.stopped, None, partition, request)


def _annotated(outcome: SolveOutcome, prepared: Prepared) -> SolveOutcome:
    """The plan with what the strategy decided: the decision, its reason in front of the note, the price."""
    objective = outcome.plan.objective
    why = prepared.decision.reason
    update: dict[str, object] = {}
    if why:
        update["message"] = f"{why}; {objective.message}" if objective.message else why
    if prepared.price is not None:
        p = prepared.price
        update["constraints"] = ConstraintsRecord(
            source=p.source, rules=p.rules, unconstrained_bound_cycles=p.unconstrained, unconstrained_optimal=p.optimal
        )
    plan = outcome.plan.model_copy(
        update={"objective": objective.model_copy(update=update), "decision": prepared.decision, "schema_": SCHEMA}
    )
    return replace(outcome, plan=plan)


def solve_part(
    part: Part, request: SolveRequest, deadline: Deadline, say: Progress, comm_bound: bool = False, paced: bool = True
) -> SolveOutcome:
    """One part: greedy baseline, the bound the strategy proved, then the request's backend (an
    allocation share of ``deadline``); with ``request.place`` and a part to place, every unit placed in
    what remains (the bound stays the allocation-only optimum). ``comm_bound``: the part is the whole
    plan (one wafer), whose placed layout states the bound that counts communication (``_placed``);
    ``paced``: the part is valued with the requests in flight (False: one wafer of several)."""
    costs = part.table
    solver = request.solver.name
    knobs = SolveOptions(deadline=deadline, workers=request.solver.workers, seed=request.solver.seed)
    # one wafer of several (``paced`` False) is proven for its path: the requests in flight pace the
    # merged plan once (``plan.build.merge_stages``), the parts' paced values would not add up
    objective = objective_named(request.objective, request.requests if paced else 1)
    problem = build_problem(costs, objective=objective)
    say(f"allocation: {problem.n_kernels} kernels in {len(problem.classes)} classes")
    if part.fixed or part.bound is None:
        return _fixed(costs, problem, request, deadline, knobs, say)  # no choice: no solver runs
    objective.check_backend(solver)
    baseline = get_solver("greedy")(problem, knobs)
    proven = part.bound
    assert proven.value is not None  # a strategy proves a bound or refuses the part
    wall = proven.wall_s
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
        share = deadline.share(_allocation_share(problem, proven)) if request.place and part.place else deadline
        run_opts = replace(knobs, deadline=share, hint=hint, lower_bound=bound)
        backend = get_solver(solver)
        say(f"allocation: {proven.method} bound {bound:,} cycles; running {solver} ({share.remaining():.1f} s at most)")
        found = run_stoppable(lambda: backend(problem, run_opts), deadline)
        result = found or SolverResult(solver, Status.UNKNOWN, None, None, bound, 0.0, message="stopped by a signal")
    if not (solver == "bisect" or proven.final):  # the part's time counts its bound's proof too, as where it is the answer
        result = replace(result, wall_s=result.wall_s + wall)
    if not result.has_solution:
        fallback = baseline if baseline.status is Status.FEASIBLE else exact
        if proven.start is not None and problem.feasible(proven.start):  # the bound's own allocation, where faster
            start = result_from_choice("latency-start", problem, proven.start, Status.FEASIBLE, bound, wall)
            if fallback.objective is None or (start.objective is not None and start.objective < fallback.objective):
                fallback = start
        result = replace(
            fallback,
            solver=result.solver,
            status=Status.FEASIBLE,
            wall_s=result.wall_s,
            message=f"{result.solver} found no solution ({result.status.value}: {result.message}); "
            f"kept the {fallback.solver} plan",
        )
    if result.status is not Status.INVALID and result.objective is not None:
        # The objective's proven bound holds for every backend's problem: report it with each result.
        if result.status is Status.OPTIMAL and result.objective > bound and proven.optimal:
            raise SolverError(f"{result.solver} claims OPTIMAL at {result.objective} cycles but {proven.method} proves {bound}")
        value = result.objective
        if part.wider:
            # proven over more than this table: the only bound a result may claim; reaching it is optimal
            result = replace(result, bound=min(bound, value), status=Status.OPTIMAL if value <= bound else Status.FEASIBLE)
        else:
            status = Status.OPTIMAL if value <= bound else result.status
            result = replace(result, bound=max(result.bound or 0, bound), status=status)
    if not request.place or not part.place or deadline.stopped:
        # a stop before the placement: the allocation-only plan is the best valid plan there is
        plan = make_plan(costs, request.onnx_model, result, baseline, request=request)
        return SolveOutcome(plan, result, baseline, exact, costs, deadline.stopped, request=request)
    return _placed(costs, problem, result, baseline, exact, request, deadline, knobs, say, comm_bound)


def _allocation_share(problem: AllocationProblem, proven: ProvenBound) -> float:
    """The exact backend's share of the time when the plan is placed: ``ALLOCATION_SHARE_WHEN_PLACING``,
    scaled down by the start's gap to the bound below ``ALLOCATION_GAP_FULL`` (it can gain no more
    than that gap; the placement loses far more where its time runs short). Every kernel of GPT-2 on
    its own rectangle with ``--objective latency``: the start 48 cycles above the bound of 2,442,345,
    and CP-SAT ran 15 s of a 30 s solve for nothing while the placement, in the 15 s left, ended 25%
    above the bound (session 39)."""
    if proven.start is None or proven.value is None or not problem.feasible(proven.start):
        return ALLOCATION_SHARE_WHEN_PLACING
    value = problem.evaluate(proven.start)[0]
    gap = (value - proven.value) / value if value > 0 else 0.0
    return ALLOCATION_SHARE_WHEN_PLACING * min(1.0, max(gap / ALLOCATION_GAP_FULL, ALLOCATION_SHARE_LEAST))


def _placed(
    costs: CostTable,
    problem: AllocationProblem,
    result: SolverResult,
    baseline: SolverResult,
    exact: SolverResult,
    request: SolveRequest,
    deadline: Deadline,
    knobs: SolveOptions,
    say: Progress,
    comm_bound: bool = False,
) -> SolveOutcome:
    """Every unit placed on the wafer: the greedy allocation placed by the same construction (the
    baseline, and a start of the search), then the placement search. With ``comm_bound`` (and a plan
    that states one, ``problem.comm_bound.states_bound``) the bound that counts communication is
    computed before the search, inside the time limit (``_comm_bound``)."""
    t0 = time.perf_counter()  # the placement phase's wall time: the baseline's layout, the bound and the search
    objective = problem.objective
    pproblem = build_placement_problem(costs, lower_bound=int(result.bound or 0), objective=objective)
    say(f"placement: {len(pproblem.shapes)} shape tables; placing ({deadline.remaining():.1f} s left)")
    old = None  # (first, on its share: a completed old layout can be optimal, and the greedy's first layout ignores the clock)
    if (start := request.start) is not None:
        share = deadline.share(START_SHARE)
        old = run_stoppable(lambda: start_layout(start, costs, pproblem, share, say), deadline)
    greedy_layout = None
    baseline_placed = None
    if baseline.choice is not None:
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(baseline.choice)])
        share = deadline.share(baseline_share(pproblem))
        greedy_layout = run_stoppable(lambda: place_baseline(pproblem, targets, share), deadline)
        if greedy_layout is not None:
            stage, comm = pproblem.evaluate(greedy_layout.rects, greedy_layout.latency)
            baseline_placed = (pproblem.layout_time(stage, comm), int(stage.max()))  # (value, bottleneck)
    starts: tuple[Placed, ...] = (greedy_layout,) if greedy_layout is not None else ()
    if objective.aggregate is Aggregate.PATH and result.choice is not None:
        # a token's path: the construction's one target time suits the slowest kernel, not a sum; the
        # solver's own allocation placed by the same construction is a start the search must beat
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(result.choice)])
        solver_layout = run_stoppable(lambda: place_path(pproblem, targets, deadline.share(path_share(pproblem))), deadline)
        starts += (solver_layout,) if solver_layout is not None else ()
        if costs.runs is not None:  # regions: few large rectangles, stacked in columns if the search finds none
            stacked = column_layout(pproblem, targets)
            starts += (stacked,) if stacked is not None else ()
    proven = None
    if comm_bound and states_bound(request.objective, True, 1, costs.runs is not None):
        # (the least value of a valid layout in hand: each passes every test of the bound)
        values = [pproblem.layout_time(*pproblem.evaluate(p.rects, p.latency)) for p in (*starts, old) if p is not None]
        upper = min(values) if values else None
        proven = run_stoppable(lambda: _comm_bound(costs, int(result.bound or 0), upper, deadline, say), deadline)
    placement = run_stoppable(
        lambda: place_solver(pproblem, replace(knobs, deadline=deadline, lower_bound=proven), starts=starts, rival=old), deadline
    )
    if placement is None or placement.rects is None:
        if deadline.stopped:
            # stopped before any layout: the allocation-only plan is the best valid plan there is
            plan = make_plan(costs, request.onnx_model, result, baseline, request=request)
            return SolveOutcome(plan, result, baseline, exact, costs, True, request=request)
        message = "no layout" if placement is None else placement.message
        raise NoLayoutError(
            f"{costs.kgraph.ops.source}: no placement fits {costs.arch.name} even after giving back cores "
            f"({message}){_touch_groups_named(costs) or _rules_named(costs)}; reduce defects, allow die crossings, "
            "or plan with --no-place"
        )
    say(f"placement: {placement.solver} {placement.status.value}, bottleneck {placement.objective:,} cycles")
    # the plan's wall time counts the whole placement phase, not only the search's own: a search that
    # ends at once at the bound (GPT-2) reported 0.01 s after 2.5 s of construction
    placement = replace(placement, wall_s=time.perf_counter() - t0)
    rects = greedy_layout.rects if greedy_layout is not None else None
    plan = make_plan(
        costs, request.onnx_model, result, baseline, placement, pproblem, baseline_placed, request, baseline_rects=rects
    )
    if proven is not None and proven <= plan.objective.value:  # (above it the layout would contradict it: never claimed)
        update: dict[str, object] = {"comm_bound_cycles": proven}
        if rules.proven_optimal(plan.objective.value, proven):  # no layout is faster: the plan is optimal
            update["status"] = Status.OPTIMAL
        plan = plan.model_copy(update={"objective": plan.objective.model_copy(update=update)})
    return SolveOutcome(plan, result, baseline, exact, costs, deadline.stopped, placement, request=request)


def _comm_bound(costs: CostTable, lo: int, upper: int | None, deadline: Deadline, say: Progress) -> int | None:
    """The bound that counts communication (``problem.comm_bound``), from the allocation bound ``lo``
    up to ``upper`` (the least value of a valid layout in hand, the greedy baseline's or the old
    plan's: each passes every test; None: found by doubling), in at most ``COMM_BOUND_SHARE`` of what
    remains. It does not depend on the layout, so
    it runs before the search, inside the time limit (after it, it took up to 2 s past the limit on
    LLaMA-7B with 442 fixed corners); out of time it is not stated (None)."""
    share = deadline.share(COMM_BOUND_SHARE)
    bound = communication_bound(comm_bound_problem(costs), upper, lo, stop=share.expired)
    if bound is not None:
        say(f"placement: {bound:,} cycles at least with communication counted (allocation bound {lo:,})")
    return bound


def start_layout(
    start: StartLayout, costs: CostTable, pproblem: PlacementProblem, deadline: Deadline, say: Progress
) -> Placed | None:
    """``start`` as a layout of ``pproblem``: each kernel's rectangle at its corner, its latency the op
    model of its grid and dataflow in today's table. A kernel it lacks, whose op model is no longer
    legal (another arch or cost model, a rule forbidding its grid), or whose rectangle breaks a rule
    (off the wafer, on a defect or keep-out, away from its pin or area, over a kernel before it) is
    fitted into the cores the others leave (``solvers.fill``). None, with the reason said, when more
    than half the kernels need that (little of the old layout would be left: the search's own
    layouts do as well) or one finds no room, or the result breaks a rule (a group no longer side by
    side)."""
    if costs.runs is not None:
        say(f"placement: the layout of {start.source} is not a start (kernels share regions of cores here)")
        return None
    given = {k.name: k for k in start.kernels}
    n = len(costs.kernels)
    rects = np.zeros((n, 4), dtype=np.int64)
    codes = np.zeros(n, dtype=np.int32)
    latency = np.zeros(n, dtype=np.int64)
    toward = np.full((n, 2), -1, dtype=np.int64)
    known = np.zeros(n, dtype=bool)
    legal = np.zeros(n, dtype=bool)  # its old op model legal (its grid tried first where it is fitted anew)
    cover = np.zeros((pproblem.mesh.rows, pproblem.mesh.cols), dtype=bool)
    for i, kc in enumerate(costs.kernels):
        k = given.get(kc.kernel.name)
        if k is None:
            continue
        toward[i] = k.at
        try:
            row = kc.table.row_of(Dataflow(k.dataflow), *k.grid)
        except ValueError:
            row = None
        if row is None or not kc.table.legal()[row]:
            continue
        rects[i] = (*k.at, *k.grid)
        codes[i], latency[i], legal[i] = int(kc.table.dataflow[row]), int(kc.table.latency[row]), True
        y, x, r, c = rects[i].tolist()
        known[i] = not pproblem.rect_errors(i, rects[i]) and not cover[y : y + r, x : x + c].any()
        if known[i]:
            cover[y : y + r, x : x + c] = True
    missing = int(n - known.sum())
    if 2 * missing > n:
        say(f"placement: the layout of {start.source} is not a start: {missing} of the {n} kernels would need new rectangles")
        return None
    done = complete(pproblem, rects, codes, latency, known, toward, deadline, legal)
    names = [costs.kernels[k].kernel.name for k in done.fitted]
    errors = pproblem.layout_errors(done.placed.rects) if done.placed is not None else []
    if done.placed is None or errors:
        stuck = costs.kernels[done.stuck].kernel.name if done.stuck is not None else ""
        why = errors[0] if errors else f"no room for {stuck}" if stuck else "no time left to fit the kernels it lacks"
        say(f"placement: the layout of {start.source} is not a start: {why}")
        return None
    placed = done.placed
    stage, comm = pproblem.evaluate(placed.rects, placed.latency)
    refit = f"; {len(names)} kernel(s) fitted anew: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}" if names else ""
    say(f"placement: starting from the layout of {start.source} ({pproblem.layout_time(stage, comm):,} cycles{refit})")
    return placed


def _rules_named(costs: CostTable) -> str:
    """What the user's rules fix of the layout, for a placement that found none: the grids they leave
    a kernel one shape of (and the share of the cores those take), the corners, the areas and the
    keep-outs, with their source, so the message points at the rules before the wafer (a re-solve
    ``--from-plan`` of an allocation-only plan fixes every grid: 383 of 384 cores to pack)."""
    applied = costs.applied
    if applied is None or not applied.constraints.rules:
        return ""
    fixed = [kc for kc in costs.kernels if len(kc.frontier) == 1 and kc.table.rule is not None and (kc.table.rule > 0).any()]
    parts = []
    if fixed:
        cores = sum(int(kc.frontier.cores[0]) for kc in fixed)
        parts.append(f"{len(fixed)} kernel(s) on one grid each ({cores:,} of {costs.total_cores:,} cores)")
    parts += [f"{n} {what}" for n, what in ((len(applied.pins), "corner(s)"), (len(applied.fences), "area(s)")) if n]
    parts += [f"{len(applied.keep_out)} keep-out(s)"] if applied.keep_out else []
    if not parts:
        return ""
    return f"; the rules of {applied.constraints.source} fix {', '.join(parts)}: relax them"


def _touch_groups_named(costs: CostTable) -> str:
    """The user's ``together: touch`` groups with pinned members, by file and line, for a placement that
    found no layout: a group whose pins lie apart must be joined by its free members, which the layout
    may not manage (the conflict test proves what cannot be; this names what was not found)."""
    applied = costs.applied
    if applied is None:
        return ""
    pinned = {name for name, _, _ in applied.pins}
    groups = [(i, g) for i, g in applied.touch_groups if sum(name in pinned for name in g) >= 2]
    if not groups:
        return ""
    named = "; ".join(f"{applied.where(i)} keeps {', '.join(g)} side by side" for i, g in groups)
    return f"; no layout found joins the pinned members of {named}: move a pin or drop the rule"


def _fixed(
    costs: CostTable, problem: AllocationProblem, request: SolveRequest, deadline: Deadline, knobs: SolveOptions, say: Progress
) -> SolveOutcome:
    """Every unit on its one op model (a fixed ``--grid``): placed when the units fit the wafer, else
    reported with the cores they need (the configuration is the one a measurement describes: it is
    not refused)."""
    t0 = time.perf_counter()
    choice = tuple(0 for _ in range(problem.n_kernels))
    need = problem.evaluate(choice)[1]
    # regions of one grid fit where as many lie side by side, not where their cores do
    units = [(int(kc.table.r[0]), int(kc.table.c[0])) for kc in costs.kernels]
    fits = need <= problem.total_cores and regions_fit(costs.arch, units)
    fixed_problem = replace(problem, total_cores=max(problem.total_cores, need))
    grids = sorted({f"{int(kc.table.r[0])}x{int(kc.table.c[0])}" for kc in costs.kernels if len(kc.table.r)})
    shape = grids[0] if len(grids) == 1 else "their grids"
    size = need // max(len(costs.kernels), 1)
    over = (
        f", more than the wafer's {problem.total_cores:,}"
        if need > problem.total_cores
        else f"; {len(costs.kernels)} regions of {shape} do not lie side by side on the wafer"
    )
    note = f"every kernel on {shape}: {len(costs.kernels)} regions of {size:,} cores = {need:,} cores" + (
        "" if fits else f"{over}: not placed"
    )
    result = result_from_choice("grid", fixed_problem, choice, Status.FEASIBLE, None, time.perf_counter() - t0, message=note)
    say(f"allocation: {note}")
    if not fits or not request.place or deadline.stopped:
        plan = make_plan(costs, request.onnx_model, result, result, request=request, fits=fits)
        return SolveOutcome(plan, result, result, result, costs, deadline.stopped, request=request)
    t_place = time.perf_counter()
    pproblem = build_placement_problem(costs, lower_bound=0, objective=problem.objective)
    stacked = column_layout(pproblem, np.array(problem.latencies(choice)))
    starts = (stacked,) if stacked is not None else ()
    placement = run_stoppable(lambda: place_solver(pproblem, replace(knobs, deadline=deadline), starts=starts), deadline)
    if placement is None or placement.rects is None:
        # the cores fit but the rectangles do not (three 420 x 420 regions on 750 x 994): say so, keep the plan
        unplaced = replace(
            result, message=f"{note}; no layout packs {len(costs.kernels)} regions of {shape} on the wafer: not placed"
        )
        plan = make_plan(costs, request.onnx_model, unplaced, unplaced, request=request)
        return SolveOutcome(plan, unplaced, unplaced, unplaced, costs, deadline.stopped, request=request)
    placement = replace(placement, wall_s=time.perf_counter() - t_place)  # (the column layout counted, as in ``_placed``)
    plan = make_plan(costs, request.onnx_model, result, result, placement, pproblem, None, request)
    return SolveOutcome(plan, result, result, result, costs, deadline.stopped, placement, request=request)
