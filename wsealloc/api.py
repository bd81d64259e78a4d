"""Python API: the operations of the CLI as functions with typed results, for scripts and notebooks.

>>> import wsealloc.api as ws
>>> out = ws.solve("models/gpt2.onnx", arch="wse2")           # doctest: +SKIP
>>> out.plan.objective.bottleneck_cycles, out.speedup           # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.loader import arch_file
from wsealloc.arch.schema import wafer_count
from wsealloc.cost import CostOptions, cost_model_name
from wsealloc.errors import InfeasibleError, SolverError, UsageError
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import ModelSpec, cost_model
from wsealloc.plan.build import make_plan, merge_stages
from wsealloc.plan.io import check_distinct_outputs, check_writable, write_atomic
from wsealloc.plan.schema import Plan
from wsealloc.problem import AllocationProblem, build_problem
from wsealloc.problem.flows import flows
from wsealloc.problem.placement import build_placement_problem
from wsealloc.problem.stages import StageProblem, build_stage_problem
from wsealloc.solvers import SolveOptions, SolverResult, Status, StopHook, get_solver
from wsealloc.solvers.base import PlacementResult
from wsealloc.solvers.place import place_baseline
from wsealloc.solvers.place import solve as place_solver
from wsealloc.solvers.stages import StagePartition
from wsealloc.solvers.stages import solve as stage_solver
from wsealloc.solvers.strips import score
from wsealloc.units import format_bytes

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

    def flows(self) -> list[tuple[str, str, float]]:
        """Producer->consumer flows between kernels: (producer, consumer, bytes per sample)."""
        names = [kc.kernel.name for kc in self.costs.kernels]
        return [(names[s], names[t], b) for s, t, b in flows(self.costs.kgraph, self.costs.arch).pairs()]

    @property
    def speedup(self) -> float | None:
        """Baseline bottleneck / plan bottleneck (throughput ratio), placed baseline for placed plans."""
        # the plan's own baseline: for several wafers it is the greedy over the same stages, while
        # ``self.baseline`` is one stage's greedy result
        base = self.plan.baseline.placed_bottleneck_cycles if self.plan.objective.placed else self.plan.baseline.bottleneck_cycles
        if base is None or self.plan.objective.bottleneck_cycles == 0:
            return None
        return base / self.plan.objective.bottleneck_cycles


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


def _run_stoppable(fn: Callable[[], _T]) -> _T:
    """Run ``fn`` in a worker thread so the main thread stays free to handle SIGINT/SIGTERM (the
    solvers watch ``SolveOptions.stop``, which the signal handler sets)."""
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
    if error:
        raise error[0]
    return value[0]


def solve_costs(
    costs: CostTable,
    spec: ModelSpec,
    *,
    solver: str = "cpsat",
    options: SolveOptions | None = None,
    use_bound: bool = True,
    place: bool = False,
    progress: Callable[[str], None] | None = None,
) -> SolveOutcome:
    """Solve an already built cost table (greedy baseline, exact bound, then ``solver``); with ``place``,
    also place every kernel on the wafer (the bound stays the allocation-only optimum)."""
    opts = options or SolveOptions()
    say = progress or (lambda message: None)
    problem = build_problem(costs)
    say(f"allocation: {problem.n_kernels} kernels in {len(problem.classes)} classes")
    baseline = get_solver("greedy")(problem, opts)
    exact = get_solver("bisect")(problem, opts)
    if exact.status is Status.INFEASIBLE:
        raise InfeasibleError(infeasibility_message(costs, problem))
    bound = exact.objective
    if solver == "bisect":
        result = exact
    elif solver in ("greedy", "greedy-seed"):
        result = baseline if solver == "greedy" else get_solver(solver)(problem, opts)
    else:
        hint = baseline.choice if baseline.status is Status.FEASIBLE else exact.choice
        run_opts = replace(opts, hint=hint, lower_bound=bound if use_bound else None)
        backend = get_solver(solver)
        say(f"allocation: exact bound {bound:,} cycles; running {solver}")
        result = _run_stoppable(lambda: backend(problem, run_opts))
    interrupted = opts.stop.stopped.is_set()
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
        # The exact bound is a proven lower bound for every backend's problem: report it with each result.
        if result.status is Status.OPTIMAL and result.objective > bound:
            raise SolverError(f"{result.solver} claims OPTIMAL at {result.objective} cycles but bisection proves {bound}")
        status = Status.OPTIMAL if result.objective <= bound else result.status
        result = replace(result, bound=max(result.bound or 0, bound), status=status)
    if not place:
        plan = make_plan(costs, spec, result, baseline)
        return SolveOutcome(plan, result, baseline, exact, costs, interrupted)
    pproblem = build_placement_problem(costs, lower_bound=int(bound or 0))
    say(f"placement: {len(pproblem.shapes)} shape tables; placing (time limit {opts.time_limit_s:g} s)")
    # The baseline: the greedy allocation's latencies placed by the same construction. It is also a
    # start of the placement search, so the result is never worse than it. Both share the placement
    # stage's time limit (a quarter at most for the baseline), so the stage ends within it.
    stage_start = time.perf_counter()
    greedy_layout = None
    baseline_placed = None
    if baseline.choice is not None:
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(baseline.choice)])
        greedy_layout = place_baseline(pproblem, targets, stage_start + opts.time_limit_s / 4)
        if greedy_layout is not None:
            baseline_placed = score(pproblem, greedy_layout)[0]
    starts = (greedy_layout,) if greedy_layout is not None else ()
    # the construction always returns its first layout, however little time is left
    left = max(1e-3, opts.time_limit_s - (time.perf_counter() - stage_start))
    place_opts = replace(opts, time_limit_s=left)
    placement = _run_stoppable(lambda: place_solver(pproblem, place_opts, starts=starts))
    if placement.rects is None:
        raise InfeasibleError(
            f"{costs.kgraph.ops.source}: no placement fits {costs.arch.name} even after giving back cores "
            f"({placement.message}); reduce defects, allow die crossings, or plan with --no-place"
        )
    say(f"placement: {placement.solver} {placement.status.value}, bottleneck {placement.objective:,} cycles")
    plan = make_plan(costs, spec, result, baseline, placement, pproblem, baseline_placed)
    return SolveOutcome(plan, result, baseline, exact, costs, opts.stop.stopped.is_set(), placement)


def parse_wafers(value: int | str | None, arch: Arch) -> int | None:
    """``--wafers`` value: an int >= 1, ``auto`` (None: fewest that fit), or None for the arch's own setting."""
    if value is None:
        value = arch.cluster.wafers
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        value = int(value)  # the command line gives text
    try:
        checked = wafer_count(value)  # the rule of cluster.wafers and of a suite's wafers
    except ValueError as exc:
        raise UsageError(f"--wafers: {exc}") from None
    return None if checked == "auto" else int(checked)


def solve_stages(
    costs: CostTable,
    spec: ModelSpec,
    wafers: int | None,
    *,
    solver: str = "cpsat",
    options: SolveOptions | None = None,
    place: bool = False,
    progress: Callable[[str], None] | None = None,
) -> SolveOutcome:
    """Pipeline the model over ``wafers`` wafers (None: the fewest that fit): exact stage partition,
    then each stage allocated (and placed) on its own wafer."""
    opts = options or SolveOptions()
    say = progress or (lambda message: None)
    sproblem = build_stage_problem(costs)
    partition = stage_solver(sproblem, wafers)
    if partition.status is not Status.OPTIMAL or partition.objective is None:
        raise InfeasibleError(stage_infeasibility(costs, sproblem, wafers, partition.message))
    say(f"stages: {partition.wafers} wafers, cuts {list(partition.cuts[1:-1])}, bound {partition.objective:,} cycles")
    per_stage = replace(opts, time_limit_s=max(1.0, opts.time_limit_s / partition.wafers))
    outcomes = []
    for s, (first, end) in enumerate(partition.stages()):
        say(f"stage {s}: kernels [{first}, {end})")
        outcomes.append(solve_costs(costs.subset(first, end), spec, solver=solver, options=per_stage, place=place))
    transfer = sproblem.transfer_cycles()
    wall = partition.wall_s + sum(o.plan.objective.wall_s for o in outcomes)
    plan = merge_stages(
        costs,
        spec,
        partition.cuts,
        [o.plan for o in outcomes],
        transfer,
        partition.objective,
        f"stages+{outcomes[0].plan.objective.solver}",
        wall,
    )
    exact = SolverResult("stages", Status.OPTIMAL, None, partition.objective, partition.objective, partition.wall_s)
    first_out = outcomes[0]
    return SolveOutcome(
        plan, first_out.result, first_out.baseline, exact, costs, opts.stop.stopped.is_set(), None, partition=partition
    )


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


def solve(
    model: str | Path,
    arch: str | Arch = "wse2",
    *,
    dims: Mapping[str, int] | None = None,
    sets: Sequence[str] = (),
    solver: str = "cpsat",
    time_limit: float = 10.0,
    workers: int = 1,
    seed: int = 0,
    cost: str = "standard",
    fuse: bool = True,
    allow_unknown_ops: bool = False,
    output: str | Path | None = None,
    stop: StopHook | None = None,
    place: bool = True,
    wafers: int | str | None = 1,
) -> SolveOutcome:
    """Plan ``model`` on ``arch``: the CLI's ``solve`` as a function. Writes ``output`` atomically if given."""
    if output is not None:
        arch_path = arch_file(str(arch)) if isinstance(arch, (str, Path)) else None
        check_distinct_outputs({"model": model, "arch": arch_path}, {"output": output})
        check_writable(output)
    get_solver(solver)  # unknown names fail before any work
    if not isinstance(dims or {}, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in (dims or {}).items()
    ):
        raise UsageError(f"dims {dims!r}: expected a mapping of dim names to positive integers, e.g. {{'batch': 8}}")
    spec = ModelSpec(str(model), dict(dims or {}), fuse=fuse)
    options = replace(CostOptions(), model=cost_model_name(cost), allow_unknown_ops=allow_unknown_ops)
    costs = cost_model(spec, arch, options, sets)
    opts = SolveOptions(time_limit_s=time_limit, workers=workers, seed=seed, stop=stop or StopHook())
    count = parse_wafers(wafers, costs.arch)
    if count == 1:
        outcome = solve_costs(costs, spec, solver=solver, options=opts, place=place)
    else:
        outcome = solve_stages(costs, spec, count, solver=solver, options=opts, place=place)
    if output is not None:
        write_atomic(output, outcome.plan.to_json())
    return outcome
