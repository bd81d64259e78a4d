"""What every solver backend shares: options, the result type, the stop hook, the registry.

Backends live one per module and are imported lazily by name, so that only the CP-SAT backend
imports ``ortools`` and only the PuLP backend imports ``pulp``.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from wsealloc.errors import UsageError, choices_message
from wsealloc.problem import AllocationProblem


class Status(enum.Enum):
    """Outcome of a solve, in the vocabulary of MIP/CP solvers."""

    OPTIMAL = "OPTIMAL"  # objective proven equal to the best bound
    FEASIBLE = "FEASIBLE"  # a valid solution, optimality not proven (time limit, heuristic)
    INFEASIBLE = "INFEASIBLE"  # proven: no solution exists
    UNKNOWN = "UNKNOWN"  # no solution found and nothing proven (e.g. time limit)
    INVALID = "INVALID"  # the solution violates constraints (e.g. the notebook's faithful greedy)


class StopHook:
    """Lets a signal handler stop a running solve: backends register a stop function."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.stopped = threading.Event()

    @contextlib.contextmanager
    def active(self, fn: Callable[[], None]) -> Iterator[None]:
        """While the block runs, a stop request calls ``fn`` (at once if one already came).

        Only running solves may be stopped: OR-Tools aborts the process when ``stop_search`` is
        called on a solver that is not solving any more, so the callback is removed on exit.
        """
        with self._lock:
            self._callbacks.append(fn)
            already = self.stopped.is_set()
        try:
            if already:
                fn()
            yield
        finally:
            with self._lock:
                self._callbacks.remove(fn)

    def stop(self) -> None:
        """Request every registered solve to stop and return its best solution so far."""
        self.stopped.set()
        with self._lock:
            callbacks = list(self._callbacks)
        for fn in callbacks:
            fn()


@dataclass(frozen=True)
class SolveOptions:
    """Explicit knobs of a solve (defaults favour reproducibility)."""

    time_limit_s: float = 10.0
    workers: int = 1  # CP-SAT is only reproducible single-worker with a deterministic time limit
    seed: int = 0
    hint: tuple[int, ...] | None = None  # a complete starting solution (one index per kernel)
    lower_bound: int | None = None  # a proven lower bound on the bottleneck (the exact bound)
    exploit_symmetry: bool = True  # solve over classes of identical kernels (exact, see problem)
    minimize_cores: bool = True  # second phase: fewest cores at the optimal bottleneck
    log: bool = False
    stop: StopHook = field(default_factory=StopHook, compare=False)

    def __post_init__(self) -> None:
        # Every entry point (CLI commands, the Python API, suites, sweeps) builds one of these, so
        # this is the one place the knobs are checked.
        for name, value in (("time limit", self.time_limit_s), ("workers", self.workers), ("seed", self.seed)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"{name} {value!r}: expected a number")
        if not isinstance(self.workers, int) or not isinstance(self.seed, int):
            raise UsageError(f"workers {self.workers!r} and seed {self.seed!r} must be whole numbers")
        if not self.time_limit_s > 0:  # also rejects NaN
            raise UsageError(f"time limit {self.time_limit_s} s: must be positive seconds (--time-limit)")
        if not 1 <= self.workers <= 1024:
            raise UsageError(f"{self.workers} workers: need 1 to 1024 (--workers)")
        if not 0 <= self.seed < 2**31:  # CP-SAT's random_seed is a 32-bit integer
            raise UsageError(f"seed {self.seed}: must be 0 to {2**31 - 1} (--seed)")


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
