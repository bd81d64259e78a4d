"""The run of a contest request (an ISPD-2020 ``.kgraph`` instance), in the same engine as ONNX models.

``api.run`` hands a request whose source is a :class:`KgraphSource` here:

1. read the instance (header overrides applied), enumerate every kernel's op models
   (``opmodels.contest``), prove the lower bounds on the largest kernel time (``problem.contest_bounds``);
2. build the placement problem (``problem.contest_placement``: dataflow order, shape tables from the
   op models, the contest's score as the objective) and place it with ``solvers.place.solve``: the
   strip construction with a ladder of time targets (time traded for wires), alignment, and the
   CP-SAT window search minimizing the score;
3. turn the layout into a contest :class:`Solution`, check it with the independent verifier
   (``plan.contest_verify``: a layout it rejects is an internal error, never a result) and build the
   plan document (``plan.contest_plan``).

The time budget is the run's deadline (``wsealloc.budget``): enumeration and bounds take what they
need (about a second for the largest instance), the placement the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from wsealloc.budget import Deadline
from wsealloc.errors import InfeasibleError, Interrupted, SolverError, UsageError
from wsealloc.frontend.sources import as_kgraph
from wsealloc.graph.contest import ContestGraph
from wsealloc.opmodels.contest import ContestOpModels, enumerate_graph
from wsealloc.plan.contest_plan import Bounds, ContestObjective, ContestPlan, FabricRef, InstanceRef, kernel_records
from wsealloc.plan.contest_solution import Solution, solution_kernel
from wsealloc.plan.contest_verify import ContestReport, verify_solution
from wsealloc.plan.io import file_sha256
from wsealloc.problem.contest_bounds import ContestBounds, contest_bounds
from wsealloc.problem.contest_placement import ContestPlacement, build_contest_placement
from wsealloc.request import SolveRequest
from wsealloc.solvers.base import PlacementResult, SolveOptions, Status
from wsealloc.solvers.place import solve as place_solver
from wsealloc.version import __version__

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ContestOutcome:
    """Everything a contest solve produced."""

    request: SolveRequest
    graph: ContestGraph
    models: tuple[ContestOpModels, ...]  # per graph kernel
    bounds: ContestBounds
    placement: PlacementResult
    solution: Solution
    report: ContestReport  # the independent verifier's verdict and figures
    plan: ContestPlan
    interrupted: bool = False
    kind: str = "contest"  # api.Outcome.kind


def _solution(graph: ContestGraph, cp: ContestPlacement, placement: PlacementResult) -> Solution:
    """The layout as a contest solution, kernels in the file's order: rectangle (row, col) -> (y, x)
    and the shape-table code -> the op model (execution arguments, orientation)."""
    assert placement.rects is not None and placement.dataflow is not None
    by_kernel = {}
    for i, k in enumerate(cp.order):
        models = cp.models[i]
        code = int(placement.dataflow[i])
        row, col, r, c = (int(v) for v in placement.rects[i])
        if (int(models.height[code]), int(models.width[code])) != (r, c):
            raise SolverError(
                f"{graph.kernels[k].name}: placed as {r}x{c} but its op model is {models.height[code]}x{models.width[code]}"
            )
        kernel = graph.kernels[k]
        by_kernel[k] = solution_kernel(
            kernel.name, kernel.kind, kernel.args, models.exec_args(code), col, row, models.orientation_of(code)
        )
    return Solution(tuple(by_kernel[k] for k in range(len(graph.kernels))), source=graph.source)


def run_contest(request: SolveRequest, deadline: Deadline, progress: Progress | None = None) -> ContestOutcome:
    """Solve a contest request within ``deadline`` (see the module docstring)."""
    say = progress or (lambda message: None)
    source = as_kgraph(request.model)
    if source is None:
        raise UsageError(f"{request.model.label}: not a .kgraph contest instance")
    start = time.perf_counter()
    graph = source.read()
    models = enumerate_graph(graph)
    bounds = contest_bounds(graph, models)
    say(
        f"contest: {len(graph.kernels)} kernels, {len(graph.edges)} edges on {graph.fabric.width}x{graph.fabric.height}; "
        f"lower bound {bounds.value:,} (single kernel {bounds.single_kernel:,}, area {bounds.area:,})"
    )
    cp = build_contest_placement(graph, models, bounds.value, request.solver.time_cap)
    knobs = SolveOptions(deadline=deadline, workers=request.solver.workers, seed=request.solver.seed)
    placement = place_solver(cp.problem, knobs)
    if placement.rects is None:
        if deadline.stopped:  # a signal, not an infeasible instance: exit 130 like every interrupted solve
            raise Interrupted(f"interrupted while solving {source.label}, before a first layout; nothing was written")
        raise InfeasibleError(
            f"{source.label}: no layout of the kernels fits the {graph.fabric.width}x{graph.fabric.height} fabric "
            f"({placement.message}); a larger fabric (--set width=... --set height=...) or memory limit may help"
        )
    say(
        f"placement: {placement.solver} {placement.status.value}, max time {placement.objective:,}, "
        f"wirelength {placement.traffic_distance:,.1f}"
    )
    solution = _solution(graph, cp, placement)
    report = verify_solution(solution, graph, bound=bounds.value)
    if not report.ok:  # the engine's layout must pass the independent check: never hand out an illegal one
        raise SolverError(
            f"{source.label}: the placement fails the contest verifier: {report.violations[0].message}; please report this bug"
        )
    assert report.max_time is not None and report.score is not None
    status = Status.FEASIBLE  # the score's optimum is never proven (the bound is on the time alone)
    objective = ContestObjective(
        max_time=report.max_time,
        max_time_kernel=report.max_time_kernel,
        lower_bound=bounds.value,
        time_over_bound=round(report.max_time / max(bounds.value, 1), 6),
        wirelength=float(report.wirelength),
        score=float(report.score),
        status=status,
        solver=f"contest+{placement.solver}",
        wall_s=round(time.perf_counter() - start, 4),
    )
    plan = ContestPlan(
        created_by=f"wsealloc {__version__}",
        request=request,
        instance=InstanceRef(path=source.path, sha256=file_sha256(source.path), header=dict(source.header)),
        fabric=FabricRef.of(graph.fabric),
        bounds=Bounds(single_kernel=bounds.single_kernel, area=bounds.area, fabric=bounds.fabric, value=bounds.value),
        objective=objective,
        kernels=kernel_records(solution, report),
    )
    return ContestOutcome(request, graph, models, bounds, replace(placement), solution, report, plan, deadline.stopped)
