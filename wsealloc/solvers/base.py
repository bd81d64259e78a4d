"""What every solver backend shares: options, the result type, the registry.

Backends live one per module and are imported lazily by name, so that only the CP-SAT backend
imports ``ortools`` and only the PuLP backend imports ``pulp``.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from wsealloc.budget import DEFAULT_TIME_LIMIT_S, Deadline, StopHook
from wsealloc.errors import UsageError, choices_message
from wsealloc.problem import AllocationProblem
from wsealloc.problem.objective import ALL_BACKENDS


class Status(str, enum.Enum):
    """Outcome of a solve, in the vocabulary of MIP/CP solvers (a str enum: ``Status.OPTIMAL ==
    "OPTIMAL"``, and plans store the value)."""

    OPTIMAL = "OPTIMAL"  # objective proven equal to the best bound
    FEASIBLE = "FEASIBLE"  # a valid solution, optimality not proven (time limit, heuristic)
    INFEASIBLE = "INFEASIBLE"  # proven: no solution exists
    UNKNOWN = "UNKNOWN"  # no solution found and nothing proven (e.g. time limit)
    INVALID = "INVALID"  # the solution violates constraints (e.g. the notebook's faithful greedy)


@dataclass(frozen=True)
class SolveOptions:
    """Explicit knobs of a solve (defaults favour reproducibility). The knobs a user sets are checked
    once, where the request is built (``wsealloc.request``); the deadline is the run's own
    (``wsealloc.budget``): a backend runs until it passes or a stop is requested."""

    deadline: Deadline = field(default_factory=lambda: Deadline.after(DEFAULT_TIME_LIMIT_S), compare=False)
    workers: int = 1  # CP-SAT is only reproducible single-worker with a deterministic time limit
    seed: int = 0
    hint: tuple[int, ...] | None = None  # a complete starting solution (one index per kernel)
    lower_bound: int | None = None  # a proven lower bound on the bottleneck (the exact bound)
    exploit_symmetry: bool = True  # solve over classes of identical kernels (exact, see problem)
    minimize_cores: bool = True  # second phase: fewest cores at the optimal bottleneck
    log: bool = False

    @property
    def stop(self) -> StopHook:
        """The run's stop hook (a signal handler calls ``stop()`` on it)."""
        return self.deadline.stop


@dataclass(frozen=True)
class SolverResult:
    """The same result type from every backend."""

    solver: str
    status: Status
    choice: tuple[int, ...] | None  # candidate index per kernel (None when no solution)
    objective: int | None  # bottleneck cycles
    bound: int | None  # best proven lower bound on the bottleneck
    wall_s: float
    cores_used: int | None = None
    message: str = ""

    @property
    def gap(self) -> float | None:
        """Relative gap (objective - bound) / objective, or None when either is unknown."""
        if self.objective is None or self.bound is None:
            return None
        if self.objective == 0:
            return 0.0
        return max(0.0, (self.objective - self.bound) / self.objective)

    @property
    def has_solution(self) -> bool:
        """True if the result carries a choice vector."""
        return self.choice is not None


class Solver(Protocol):
    """A backend: a callable from problem and options to a result."""

    def __call__(self, problem: AllocationProblem, options: SolveOptions) -> SolverResult: ...


# name -> (module, function); imported on first use
_BACKENDS: dict[str, tuple[str, str]] = {
    "cpsat": ("wsealloc.solvers.cpsat", "solve"),
    "pulp": ("wsealloc.solvers.pulp_backend", "solve"),
    "pulp-highs": ("wsealloc.solvers.pulp_backend", "solve_highs"),
    "bisect": ("wsealloc.solvers.bisect", "solve"),
    "greedy": ("wsealloc.solvers.greedy", "solve"),
    "greedy-seed": ("wsealloc.solvers.greedy", "solve_seed"),
}
# the names live in problem.objective (the request checks --solver there); the registry holds exactly those
assert tuple(_BACKENDS) == ALL_BACKENDS, f"solvers.base registers {tuple(_BACKENDS)}, problem.objective names {ALL_BACKENDS}"


def solver_names() -> tuple[str, ...]:
    """Registered backend names."""
    return tuple(_BACKENDS)


def get_solver(name: str) -> Solver:
    """The backend called ``name``; unknown names raise an error listing the choices."""
    if name not in _BACKENDS:
        raise UsageError(choices_message("solver", name, list(_BACKENDS)))
    module, attr = _BACKENDS[name]
    fn: Solver = getattr(importlib.import_module(module), attr)
    return fn


def result_from_choice(
    name: str,
    problem: AllocationProblem,
    choice: list[int] | tuple[int, ...],
    status: Status,
    bound: int | None,
    wall: float,
    message: str = "",
) -> SolverResult:
    """Build a result from a choice vector, recomputing objective and cores from the problem."""
    objective, cores = problem.evaluate(choice)
    return SolverResult(name, status, tuple(int(j) for j in choice), objective, bound, wall, cores, message)


@dataclass(frozen=True)
class PlacementResult:
    """The result type of placement solvers: rectangles plus the same status/objective/bound/gap/wall."""

    solver: str
    status: Status
    rects: np.ndarray | None  # [n, 4]: row, col, r, c
    dataflow: np.ndarray | None  # [n] dataflow codes
    objective: int | None  # bottleneck stage cycles (op model + communication)
    bound: int | None  # proven lower bound (the allocation-only optimum)
    wall_s: float
    traffic_distance: float = 0.0
    message: str = ""

    @property
    def gap(self) -> float | None:
        """Relative gap (objective - bound) / objective."""
        if self.objective is None or self.bound is None or self.objective == 0:
            return None if self.objective is None or self.bound is None else 0.0
        return max(0.0, (self.objective - self.bound) / self.objective)
