"""Solver backends (one module each) behind one registry and one result type."""

from wsealloc.solvers.base import SolveOptions, SolverResult, Status, StopHook, get_solver, solver_names

__all__ = ["SolveOptions", "SolverResult", "Status", "StopHook", "get_solver", "solver_names"]
