"""wsealloc: allocate the cores of a wafer-scale engine to the operators of an ONNX model.

Layers (one-way dependencies): frontend (ONNX) -> graph (kernels) -> cost -> opmodels -> problem
-> solvers -> plan -> report -> cli. See docs/architecture.md.

Python API (typed results)::

    import wsealloc
    outcome = wsealloc.solve("models/gpt2.onnx", arch="wse2")       # SolveOutcome (.plan, .speedup, ...)
    report = wsealloc.compare("models/gpt2.onnx", arch="wse2")      # Comparison (.rows, .speedup, ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from wsealloc.api import SolveOutcome
    from wsealloc.report.compare import Comparison


def solve(*args: Any, **kwargs: Any) -> SolveOutcome:
    """Plan a model: see :func:`wsealloc.api.solve` for the parameters."""
    from wsealloc.api import solve as _solve

    return _solve(*args, **kwargs)


def compare(*args: Any, **kwargs: Any) -> Comparison:
    """Greedy vs. solver vs. exact bound: see :func:`wsealloc.report.compare.compare`."""
    from wsealloc.report.compare import compare as _compare

    return _compare(*args, **kwargs)


__all__ = ["__version__", "compare", "solve"]
