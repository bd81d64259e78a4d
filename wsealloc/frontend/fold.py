"""Evaluate small constant subgraphs (shape computation) so that every shape becomes concrete.

ONNX shape inference alone leaves dims unknown behind Shape -> Gather -> Concat -> Reshape chains.
We evaluate such nodes on their (small, known) inputs: common shape ops with numpy fast paths, any
other op with ``onnx.reference``. Only nodes whose inputs are all known values are evaluated, and
only when their result stays small (shape data, not weights).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from wsealloc.frontend.load import SMALL_CONSTANT_ELEMENTS

Values = dict[str, np.ndarray]
_FastOp = Callable[[onnx.NodeProto, list[np.ndarray | None], int], list[np.ndarray]]


def _ints(node: onnx.NodeProto, name: str) -> list[int] | None:
    for a in node.attribute:
        if a.name == name:
            return list(a.ints) if a.ints else [a.i]
    return None


def _attr_i(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _axes(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[int] | None:
    if len(args) > 1 and args[1] is not None:
        return [int(x) for x in np.asarray(args[1]).reshape(-1)]
    return _ints(node, "axes")


def _unsqueeze(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    x = np.asarray(args[0])
    axes = _axes(node, args, opset) or []
    rank = x.ndim + len(axes)
    for ax in sorted(a % rank for a in axes):
        x = np.expand_dims(x, ax)
    return [x]


def _squeeze(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    x = np.asarray(args[0])
    axes = _axes(node, args, opset)
    return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _concat(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    return [np.concatenate([np.asarray(a) for a in args if a is not None], axis=_attr_i(node, "axis", 0))]


def _gather(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    return [np.take(np.asarray(args[0]), np.asarray(args[1]), axis=_attr_i(node, "axis", 0))]


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> _FastOp:
    def run(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
        a, b = np.asarray(args[0]), np.asarray(args[1])
        return [np.asarray(fn(a, b)).astype(np.result_type(a, b), copy=False)]

    return run


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer Div truncates
    return a / b


_FAST: dict[str, _FastOp] = {
    "Identity": lambda n, a, o: [np.asarray(a[0])],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "Gather": _gather,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
}


def evaluate(node: onnx.NodeProto, args: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """Evaluate one node on known inputs (numpy fast path, else the ONNX reference implementation)."""
    fast = _FAST.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if fast is not None:
        return fast(node, args, opset)
    evaluator = ReferenceEvaluator(node)
    feeds = {name: value for name, value in zip(node.input, args, strict=True) if name}
    return [np.asarray(v) for v in evaluator.run(None, feeds)]


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node, or None if it is not representable here."""
    for a in node.attribute:
        if a.name == "value":
            if a.t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(a.t)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
    return None


def _values(arg: np.ndarray | None) -> list[int]:
    return [int(v) for v in np.asarray(arg).reshape(-1)]


def predicted_elements(node: onnx.NodeProto, args: list[np.ndarray | None]) -> int | None:
    """How many elements ``node``'s output would have, for the ops whose output size an input's *values*
    set (Range, ConstantOfShape, Expand, Tile); None for other ops, or when the inputs do not say.

    Asked before evaluating: ``small_enough`` looks at a result, and a Range over a 10^9-token
    context (an LLM's key positions) allocated 8 GB before it could refuse it."""
    try:
        if node.op_type == "Range" and len(args) >= 3:
            start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in args[:3])
            return max(0, math.ceil((limit - start) / delta)) if delta else None
        if node.op_type == "ConstantOfShape" and args:
            return math.prod(_values(args[0]))
        if node.op_type == "Expand" and len(args) >= 2 and args[0] is not None:
            shape, target = list(np.asarray(args[0]).shape), _values(args[1])
            rank = max(len(shape), len(target))
            shape, target = [1] * (rank - len(shape)) + shape, [1] * (rank - len(target)) + target
            return math.prod(max(a, b) for a, b in zip(shape, target, strict=True))
        if node.op_type == "Tile" and len(args) >= 2 and args[0] is not None:
            return math.prod(np.asarray(args[0]).shape) * math.prod(_values(args[1]))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return None


def small_enough(values: Sequence[np.ndarray]) -> bool:
    """Folded results must stay shape-sized: we never materialize weight-sized tensors."""
    return all(np.asarray(v).size <= SMALL_CONSTANT_ELEMENTS for v in values)
