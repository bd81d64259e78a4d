"""ONNX Runtime's contrib operators (``com.microsoft``) that ONNX's shape inference does not know.

``MoE`` and ``QMoE`` (a mixture-of-experts layer, as ONNX Runtime's model builder exports Mixtral,
Phi-3.5-MoE and gpt-oss) return a tensor of their input's shape and type. ONNX's inference has no
schema for them and leaves their output, and everything after it, unsized; so inference runs on a
copy of the model in which each such node is an ``Identity`` of its input (the same output name),
which sizes exactly what ONNX Runtime's own shape function would. The nodes themselves are kept.

A mixture of experts whose dispatch has data-dependent shapes (the experts' token sets taken with
``NonZero`` of the router's ``TopK`` indices, as a plain torch export of a Hugging Face MoE block
writes it) cannot be sized ahead: it is named as such (:func:`dynamic_dispatch`), never costed as a
dense layer.
"""

from __future__ import annotations

import onnx
from onnx import helper

SAME_SHAPE: frozenset[tuple[str, str]] = frozenset({("com.microsoft", "MoE"), ("com.microsoft", "QMoE")})


def shape_stand_ins(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself when it has no node of :data:`SAME_SHAPE`, else a copy where each is an Identity
    of its first input (for shape inference only)."""
    if not any((n.domain, n.op_type) in SAME_SHAPE for n in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = [
        helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name) if (n.domain, n.op_type) in SAME_SHAPE else n
        for n in copy.graph.node
    ]
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def dynamic_dispatch(graph: onnx.GraphProto) -> tuple[str, str] | None:
    """(TopK node, NonZero node) when a NonZero reads, through any nodes, the indices of a TopK: an
    expert dispatch whose token sets only a run knows; None otherwise."""
    producer = {out: n for n in graph.node for out in n.output if out}
    memo: dict[str, str | None] = {}

    def topk_behind(tensor: str) -> str | None:
        """The TopK whose indices ``tensor`` is computed from (iteratively, graphs are deep)."""
        stack, seen = [tensor], set()
        while stack:
            t = stack.pop()
            if t in memo:
                if memo[t] is not None:
                    return memo[t]
                continue
            if t in seen or t not in producer:
                continue
            seen.add(t)
            node = producer[t]
            if node.op_type == "TopK" and len(node.output) > 1 and node.output[1] == t:
                return node.name or node.output[1]
            stack.extend(i for i in node.input if i)
        return None

    for node in graph.node:
        if node.op_type == "NonZero" and node.input:
            found = topk_behind(node.input[0])
            memo[node.input[0]] = found
            if found is not None:
                return found, node.name or node.output[0]
    return None
