"""ONNX-free graph types: the operator graph the front end emits, and the kernel graph built from it."""

from wsealloc.graph.ir import OpGraph, OpNode, TensorInfo, TensorKind

__all__ = ["OpGraph", "OpNode", "TensorInfo", "TensorKind"]
