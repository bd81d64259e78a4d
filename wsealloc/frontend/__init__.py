"""ONNX front end: load a model without weight data, bind dims, resolve every shape, emit an :class:`OpGraph`.

This is the only package (with ``wsealloc.plan.verify`` re-using it) that imports ``onnx``.
"""

from wsealloc.frontend.importer import import_onnx

__all__ = ["import_onnx"]
