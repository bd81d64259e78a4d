"""Resident state: the KV cache of an LLM export, found in the graph and marked as state (a transform
on the :class:`OpGraph`, before kernels are grouped).

A KV cache is per-request data that lives in SRAM next to the attention kernels and grows with the
context. Exports show it in one of two forms (the standard "with past" form of optimum, onnxruntime
GenAI and torch.onnx exports of ``use_cache=True``):

* **decode** (a step with past): a graph input (the past keys or values of one layer) that a
  ``Concat`` appends the new token's row to, the result being a graph output (the present cache,
  directly or through layout ops such as ``Identity``);
* **prefill** (the cache written from the prompt): a graph output named like a cache (``present``,
  ``past``, ``key_cache``, ``value_cache``, ``kv_cache``), produced by a node (the attention that
  follows may read it).

Each cache has a *root*: the tensor that holds it after this step (the ``Concat`` output, or the
prefill's output). The past input and every tensor that layout ops derive from a root (the GQA
``Expand``/``Reshape`` of the keys, a ``Transpose``) are marked :attr:`TensorKind.STATE` and map to
their root (``OpGraph.state_roots``). Kernels then hold their roots resident (counted once per
kernel, in the SRAM part "state", never as NoC ingress); a MatMul whose operand is state keeps it
stationary like a weight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from wsealloc.graph.ir import OpGraph, OpNode, TensorInfo, TensorKind
from wsealloc.graph.opclass import OpClass, op_class

# a graph output named like a cache (prefill exports have no past input to recognise it by)
CACHE_NAME = re.compile(r"(?i)(present|past|key_cache|value_cache|kv_cache|\bcache\b)")


def _past_inputs(graph: OpGraph) -> dict[str, str]:
    """Past-cache graph inputs -> the Concat output that appends to them (decode form)."""
    outputs = set(graph.outputs)
    consumers = graph.consumers()
    reaches_output: dict[str, bool] = {}

    def to_output(name: str, depth: int = 0) -> bool:
        # the Concat's result is a graph output, directly or through layout ops (Identity, Cast, ...)
        if name in outputs:
            return True
        if depth > 8 or name in reaches_output:
            return reaches_output.get(name, False)
        found = any(
            op_class(n.op_type, n.domain) is OpClass.LAYOUT and any(to_output(o, depth + 1) for o in n.outputs if o)
            for n in consumers.get(name, [])
        )
        reaches_output[name] = found
        return found

    found: dict[str, str] = {}
    for name in graph.inputs:
        t = graph.tensors.get(name)
        if t is None or not t.is_float or len(t.shape) < 3:
            continue
        for node in consumers.get(name, []):
            if node.op_type == "Concat" and node.outputs and node.outputs[0] and to_output(node.outputs[0]):
                found[name] = node.outputs[0]
                break
    return found


def mark_state(graph: OpGraph) -> OpGraph:
    """``graph`` with its KV caches marked as state (see the module docstring); unchanged without one."""
    roots: dict[str, str] = {}
    for past, concat_out in _past_inputs(graph).items():
        roots[past] = concat_out
        roots[concat_out] = concat_out
    produced = {o for n in graph.nodes for o in n.outputs if o}
    for name in graph.outputs:
        t = graph.tensors.get(name)
        if name in roots or t is None or not t.is_float or len(t.shape) < 3 or name not in produced:
            continue
        if CACHE_NAME.search(name):
            roots[name] = name  # a prefill's written cache
    if not roots:
        return graph
    graph = _hand_over(graph, roots)
    # layout ops carry state: what they derive from a root is the same cache (the GQA repeat, a transpose)
    for node in graph.nodes:
        if op_class(node.op_type, node.domain) is not OpClass.LAYOUT:
            continue
        root = next((roots[i] for i in node.inputs if i in roots), None)
        if root is None:
            continue
        for out in node.outputs:
            if out and out not in roots:
                roots[out] = root
    tensors = dict(graph.tensors)
    for name in roots:
        t = tensors[name]
        tensors[name] = TensorInfo(t.name, t.shape, t.elem_bytes, t.is_float, TensorKind.STATE)
    return replace(graph, tensors=tensors, state_roots=roots)


WRITTEN = "#written"  # suffix of the activation a node computes before it becomes a cache


def _hand_over(graph: OpGraph, roots: dict[str, str]) -> OpGraph:
    """A cache that an arithmetic node writes (a prefill's keys after RoPE) is computed as an
    activation and handed over to the cache: the node writes ``<name>#written`` and an ``Identity``
    moves it into ``<name>``, so the bytes travel (producer -> the kernel holding the cache) and the
    cache is counted where it lives, once."""
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    moved: dict[str, str] = {}
    for root in sorted(set(roots.values())):
        node = producer.get(root)
        if node is not None and op_class(node.op_type, node.domain) is not OpClass.LAYOUT:
            moved[root] = root + WRITTEN
    if not moved:
        return graph
    nodes: list[OpNode] = []
    tensors = dict(graph.tensors)
    for node in graph.nodes:
        outs = tuple(moved.get(o, o) for o in node.outputs)
        if outs == node.outputs:
            nodes.append(node)
            continue
        nodes.append(replace(node, outputs=outs))
        for old, new in moved.items():
            if old in node.outputs:
                t = tensors[old]
                tensors[new] = TensorInfo(new, t.shape, t.elem_bytes, t.is_float, TensorKind.ACTIVATION)
                nodes.append(OpNode(name=old + "#cache", op_type="Identity", domain="", inputs=(new,), outputs=(old,)))
    return replace(graph, nodes=tuple(nodes), tensors=tensors)


@dataclass(frozen=True)
class CacheShape:
    """An LLM export as its KV cache shows it: the phase, the requests decoded together, the new
    tokens of a pass per request, the context, and the cache elements one more token adds."""

    phase: str  # "decode" (a step with past) or "prefill" (the prompt writes the cache)
    batch: int
    tokens: int
    context: int
    elems_per_token: int  # over every cache (all layers, K and V) and the whole batch


def cache_shape(graph: OpGraph) -> CacheShape | None:
    """The cache shape of a graph whose state was marked (``mark_state``); None without a cache. The
    token input is the first integer graph input of rank 2 ([batch, tokens]); a cache's sequence axis
    is its dim -2 (``[batch, kv_heads, sequence, head_dim]``)."""
    roots = sorted(set(graph.state_roots.values()))
    if not roots:
        return None
    ids = next(
        (graph.tensors[n] for n in graph.inputs if not graph.tensors[n].is_float and len(graph.tensors[n].shape) == 2), None
    )
    pasts = [graph.tensors[n] for n in graph.inputs if graph.tensors[n].kind is TensorKind.STATE]
    batch, tokens = (ids.shape[0], ids.shape[1]) if ids is not None else (graph.tensors[roots[0]].shape[0], 1)
    context = pasts[0].shape[-2] if pasts else tokens
    per_token = sum(graph.tensors[r].numel // max(graph.tensors[r].shape[-2], 1) for r in roots)
    return CacheShape("decode" if pasts else "prefill", int(batch), int(tokens), int(context), int(per_token))
