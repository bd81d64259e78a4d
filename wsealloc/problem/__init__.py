"""The optimization problem handed to solver backends (numbers only)."""

from wsealloc.problem.allocation import AllocationProblem, Choices, GreedyHints, build_problem

__all__ = ["AllocationProblem", "Choices", "GreedyHints", "build_problem"]
