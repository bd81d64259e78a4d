"""wsealloc: allocate the cores of a wafer-scale engine to the operators of an ONNX model.

Layers (one-way dependencies): frontend (ONNX) -> graph (kernels) -> cost -> opmodels -> problem
-> solvers -> plan -> report -> cli. See docs/architecture.md.
"""

__version__ = "0.1.0"
