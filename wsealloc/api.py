"""The run of a solve request, and the Python API over it.

:func:`run` is the one function every command, report, sweep point and bench worker calls: it owns
the run's :class:`~wsealloc.budget.Deadline` (created from the request's time limit, before the front
end) and hands each stage its share. An ONNX model runs the way its request asks for: the strategy
(``wsealloc.strategy``) decides, the driver (``wsealloc.driver``) solves and builds the plan; this
module only connects them. :func:`solve` is the Python API: the CLI's ``solve`` as a function (a
request built from keyword arguments, then :func:`run`).

>>> import wsealloc.api as ws
>>> out = ws.solve("models/gpt2.onnx", arch="wse2")           # doctest: +SKIP
>>> out.plan.objective.bottleneck_cycles, out.speedup           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from typing_extensions import Unpack

from wsealloc.arch import Arch
from wsealloc.budget import Deadline, StopHook, run_stoppable
from wsealloc.contest import ContestOutcome, run_contest
from wsealloc.driver import SolveOutcome, drive, solve_part
from wsealloc.errors import Interrupted, UsageError
from wsealloc.graph.state import cache_shape
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import build_costs
from wsealloc.plan.headline import Headline
from wsealloc.plan.io import write_atomic
from wsealloc.problem import build_problem
from wsealloc.problem.objective import ObjectiveKind, objective_named
from wsealloc.request import RequestOptions, SolveRequest, build_request, check_outputs
from wsealloc.solvers import get_solver
from wsealloc.strategy.base import quiet
from wsealloc.strategy.pipeline import wafer_part, wafer_sweep
from wsealloc.strategy.registry import strategy_for

__all__ = ["SolveOutcome", "build_problem", "get_solver", "run", "solve", "solve_costs", "wafer_sweep"]

Progress = Callable[[str], None]


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
    """An ONNX (or generated ONNX) model: the front half, then the way of running the request asks for
    (``strategy.strategy_for``), driven to a plan (``driver.drive``)."""
    strategy = strategy_for(request)
    strategy.ready(request, deadline, progress or quiet)  # (what a refusal needs before the model is read)
    if progress is not None:
        progress(f"reading {request.model.label}")
    costs = run_stoppable(
        lambda: build_costs(
            request.onnx_model,
            request.machine,
            request.cost,
            constraints=request.constraints,
            check_feasible=strategy.kernels_must_fit,
        ),
        deadline,
    )
    if costs is None:  # stopped before the model was read: there is no plan to keep
        raise Interrupted(f"interrupted while reading {request.model.label}; nothing was solved")
    _refuse_unread_requests(request, costs)
    return drive(strategy, costs, request, deadline, progress)


def _refuse_unread_requests(request: SolveRequest, costs: CostTable) -> None:
    """``--requests N`` (N > 1) where nothing reads it, refused as ``--context`` is on a model without a
    KV cache: once the model is read, before any search. A latency plan is paced by the requests in flight
    (each request's token takes max(one pass, N x the slowest stage)); a throughput plan's value is its
    slowest kernel whatever N, and there only an LLM export's KV cache reads N (a cache per request, and
    ``plan.llm``'s aggregate tokens/s). Without one, the plan would record N and nothing would use it."""
    if request.requests == 1 or request.objective is not ObjectiveKind.THROUGHPUT:
        return
    base = costs.members if costs.members is not None else costs
    if cache_shape(base.kgraph.ops) is None:
        raise UsageError(
            f"--requests {request.requests}: {request.model.label} has no KV cache and a throughput plan's value is its "
            "slowest kernel whatever the requests in flight; drop --requests, or give --objective latency (each "
            "request's token paced by the slowest stage)"
        )


def solve_costs(
    costs: CostTable, request: SolveRequest, deadline: Deadline | None = None, progress: Progress | None = None
) -> SolveOutcome:
    """One wafer's cost table as the layer pipeline solves it (recomputation settled, the bound proven,
    the request's backend, the placement): for tables built by hand (benchmarks, tests). No strategy
    decided it, so its plan is a version-2 plan (no decision), which records no baseline layout (that
    is version 4's: ``verify`` would call the plan's version a mismatch); the placed values stay."""
    part = wafer_part(costs, objective_named(request.objective, request.requests))
    out = solve_part(part, request, deadline or Deadline.after(request.solver.time_limit_s), progress or quiet)
    base = out.plan.baseline
    if base.layout is None:
        return out
    return replace(out, plan=out.plan.model_copy(update={"baseline": base.model_copy(update={"layout": None})}))


def _run_contest(request: SolveRequest, deadline: Deadline, progress: Progress | None) -> ContestOutcome:
    """An ISPD-2020 contest instance: :func:`wsealloc.contest.run_contest` in the same engine."""
    contest = run_stoppable(lambda: run_contest(request, deadline, progress), deadline)
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
