"""wsealloc: allocate the cores of a wafer-scale engine to the operators of an ONNX model.

Layers (one-way dependencies): frontend (ONNX) -> graph (kernels) -> cost -> opmodels -> problem
-> solvers -> plan -> report / bench -> cli. See docs/architecture.md.

Python API (typed results; the functions are imported on first use, so ``import wsealloc`` is cheap)::

    import wsealloc
    outcome = wsealloc.solve("models/gpt2.onnx", arch="wse2")        # SolveOutcome (.plan, .speedup, ...)
    report = wsealloc.compare("models/gpt2.onnx", arch="wse2")       # Comparison (.rows, .speedup, .to_dict())
    grid = wsealloc.sweep("models/gpt2.onnx", "wse2", ["core.sram_bytes=24KiB,48KiB"])   # Sweep (.points, .warnings)
    run = wsealloc.run_suite("smoke", jobs=2)                         # BenchRun (.rows, .regressions, .failures)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wsealloc.version import __version__

if TYPE_CHECKING:
    from wsealloc.api import SolveOutcome, solve
    from wsealloc.bench.results import BenchRun, run_suite
    from wsealloc.bench.runner import BenchRow
    from wsealloc.bench.sweep import Sweep, sweep
    from wsealloc.report.compare import Comparison, compare

# public name -> module that defines it
_LAZY = {
    "solve": "wsealloc.api",
    "SolveOutcome": "wsealloc.api",
    "compare": "wsealloc.report.compare",
    "Comparison": "wsealloc.report.compare",
    "sweep": "wsealloc.bench.sweep",
    "Sweep": "wsealloc.bench.sweep",
    "run_suite": "wsealloc.bench.results",
    "BenchRun": "wsealloc.bench.results",
    "BenchRow": "wsealloc.bench.runner",
}


def __getattr__(name: str) -> Any:
    """Import the API functions and result types on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wsealloc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "BenchRow",
    "BenchRun",
    "Comparison",
    "SolveOutcome",
    "Sweep",
    "__version__",
    "compare",
    "run_suite",
    "solve",
    "sweep",
]
