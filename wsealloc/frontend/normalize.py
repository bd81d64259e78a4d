"""Rewrites that turn exporter idioms into plain tensor ops before shapes are resolved.

* ``SplitToSequence`` whose every consumer is ``SequenceAt`` with a constant position (what
  ``torch.split`` becomes in unoptimized dynamo exports) -> one ``Split`` with an output per chunk
  (plus ``Squeeze`` for ``keepdims=0``); each ``SequenceAt`` becomes an ``Identity`` of its chunk.
  Needs the input's shape along the split axis, so it runs after a shape-inference round.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def rewrite_sequences(
    graph: onnx.GraphProto, shapes: Mapping[str, list[int | str | None] | None], values: Mapping[str, np.ndarray]
) -> bool:
    """Lower SplitToSequence/SequenceAt pairs in place; True if anything changed."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    replace: dict[int, list[onnx.NodeProto]] = {}
    for pos, node in enumerate(graph.node):
        if node.op_type != "SplitToSequence" or node.domain not in ("", "ai.onnx"):
            continue
        users = consumers.get(node.output[0], [])
        dims = shapes.get(node.input[0])
        if not users or any(u.op_type != "SequenceAt" or u.input[1] not in values for u in users):
            continue
        if dims is None or not all(isinstance(d, int) for d in dims):
            continue
        rank = len(dims)
        axis = _attr(node, "axis", 0) % rank
        extent = int(dims[axis])  # type: ignore[arg-type]
        split = values.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        keepdims = _attr(node, "keepdims", 1) if split is None else 1
        if split is None:
            sizes = [1] * extent
        elif np.asarray(split).ndim == 0:
            chunk = int(split)
            sizes = [chunk] * (extent // chunk) + ([extent % chunk] if extent % chunk else [])
        elif len(node.input) > 1 and node.input[1] and node.input[1] not in values:
            continue
        else:
            sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        base = node.output[0]
        parts = [f"{base}__chunk{i}" for i in range(len(sizes))]
        sizes_name = f"{base}__sizes"
        graph.initializer.append(onnx.numpy_helper.from_array(np.array(sizes, dtype=np.int64), sizes_name))
        new = [helper.make_node("Split", [node.input[0], sizes_name], parts, name=node.name or base, axis=axis)]
        if not keepdims:
            axes_name = f"{base}__axes"
            graph.initializer.append(onnx.numpy_helper.from_array(np.array([axis], dtype=np.int64), axes_name))
            squeezed = [f"{p}__sq" for p in parts]
            new += [
                helper.make_node("Squeeze", [p, axes_name], [q], name=f"{base}__squeeze{i}")
                for i, (p, q) in enumerate(zip(parts, squeezed, strict=True))
            ]
            parts = squeezed
        replace[pos] = new
        for user in users:
            index = int(np.asarray(values[user.input[1]]).reshape(-1)[0]) % len(parts)
            user.op_type = "Identity"
            del user.input[:]
            user.input.append(parts[index])
    if not replace:
        return False
    nodes = []
    for pos, node in enumerate(graph.node):
        nodes.extend(replace.get(pos, [node]))
    del graph.node[:]
    graph.node.extend(nodes)
    return True
