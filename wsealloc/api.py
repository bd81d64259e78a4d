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

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost import CostOptions, cost_model_name
from wsealloc.errors import InfeasibleError, SolverError
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import ModelSpec, cost_model
from wsealloc.plan.build import make_plan
from wsealloc.plan.io import check_writable, write_atomic
from wsealloc.plan.schema import Plan
from wsealloc.problem import AllocationProblem, build_problem
from wsealloc.problem.placement import build_placement_problem, flows
from wsealloc.solvers import SolveOptions, SolverResult, Status, StopHook, get_solver
from wsealloc.solvers.base import PlacementResult
from wsealloc.solvers.place import solve as place_solver
from wsealloc.solvers.strips import place_targets
from wsealloc.units import format_bytes


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

    def flows(self) -> list[tuple[str, str, float]]:
        """Producer->consumer flows between kernels: (producer, consumer, bytes per sample)."""
        src, dst, nbytes = flows(self.costs.kgraph, self.costs.arch)
        names = [kc.kernel.name for kc in self.costs.kernels]
        return [(names[s], names[t], float(b)) for s, t, b in zip(src.tolist(), dst.tolist(), nbytes.tolist(), strict=True)]

    @property
    def speedup(self) -> float | None:
        """Baseline bottleneck / plan bottleneck (throughput ratio), placed baseline for placed plans."""
        base = self.plan.baseline.placed_bottleneck_cycles if self.plan.objective.placed else self.baseline.objective
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


def _run_stoppable(fn, stop: StopHook):  # type: ignore[no-untyped-def]
    """Run ``fn`` in a worker thread so the main thread stays free to handle SIGINT/SIGTERM."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="wsealloc-solve", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


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
        result = _run_stoppable(lambda: backend(problem, run_opts), opts.stop)
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
    placement = _run_stoppable(lambda: place_solver(pproblem, opts), opts.stop)
    if placement.rects is None:
        raise InfeasibleError(
            f"{costs.kgraph.ops.source}: no placement fits {costs.arch.name} even after giving back cores "
            f"({placement.message}); reduce defects, allow die crossings, or plan with --no-place"
        )
    say(f"placement: {placement.solver} {placement.status.value}, bottleneck {placement.objective:,} cycles")
    baseline_placed = None
    if baseline.choice is not None and not opts.stop.stopped.is_set():
        targets = np.array([int(problem.choices(i).latency[j]) for i, j in enumerate(baseline.choice)])
        greedy_layout = place_targets(pproblem, targets, time.perf_counter() + max(5.0, opts.time_limit_s / 4))
        if greedy_layout is not None:
            stage, _ = pproblem.evaluate(greedy_layout.rects, greedy_layout.latency, greedy_layout.noc, greedy_layout.dataflow)
            baseline_placed = int(stage.max())
    plan = make_plan(costs, spec, result, baseline, placement, pproblem, baseline_placed)
    return SolveOutcome(plan, result, baseline, exact, costs, opts.stop.stopped.is_set(), placement)


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
) -> SolveOutcome:
    """Plan ``model`` on ``arch``: the CLI's ``solve`` as a function. Writes ``output`` atomically if given."""
    if output is not None:
        check_writable(output)
    get_solver(solver)  # unknown names fail before any work
    spec = ModelSpec(str(model), dict(dims or {}), fuse=fuse)
    options = replace(CostOptions(), model=cost_model_name(cost), allow_unknown_ops=allow_unknown_ops)
    costs = cost_model(spec, arch, options, sets)
    opts = SolveOptions(time_limit_s=time_limit, workers=workers, seed=seed, stop=stop or StopHook())
    outcome = solve_costs(costs, spec, solver=solver, options=opts, place=place)
    if output is not None:
        write_atomic(output, outcome.plan.to_json())
    return outcome
