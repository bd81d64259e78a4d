"""Structural checks of an ONNX graph with precise diagnoses (the ONNX checker uses one message for all).

Distinguishes a node reading an undefined tensor, a cycle, and a merely unsorted node list (which
we sort instead of rejecting).
"""

from __future__ import annotations

from collections import deque

import onnx

from wsealloc.errors import ModelLoadError


def node_label(node: onnx.NodeProto, index: int) -> str:
    """A readable handle for a node: its name, or op type and index when unnamed."""
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def sorted_nodes(graph: onnx.GraphProto, source: str) -> list[onnx.NodeProto]:
    """Return the graph's nodes in a topological order, or raise a precise ModelLoadError."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    producer: dict[str, int] = {}
    for idx, node in enumerate(graph.node):
        for out in node.output:
            if out:
                if out in producer:
                    other = graph.node[producer[out]]
                    raise ModelLoadError(
                        f"{source}: tensor {out!r} is produced twice (by {node_label(other, producer[out])} "
                        f"and {node_label(node, idx)}); the graph is not valid SSA"
                    )
                producer[out] = idx
    for name in (*available, *producer):
        if type(name) is bytes:  # protobuf hands back strings that are not valid UTF-8 as bytes
            raise ModelLoadError(f"{source}: tensor name {name!r} is not valid UTF-8: the file is corrupt; re-export the model")
    for idx, node in enumerate(graph.node):
        for name in node.input:
            if name not in available and name not in producer:
                if type(name) is bytes:
                    raise ModelLoadError(
                        f"{source}: node {node_label(node, idx)} reads tensor {name!r}, a name that is not valid UTF-8: "
                        "the file is corrupt; re-export the model"
                    )
                raise ModelLoadError(
                    f"{source}: node {node_label(node, idx)} reads tensor {name!r}, which no node, input or "
                    "initializer defines (dangling input); re-export the model"
                )
    indegree = [0] * len(graph.node)
    users: dict[int, list[int]] = {}
    for idx, node in enumerate(graph.node):
        deps = {producer[n] for n in node.input if n in producer and n not in available}
        indegree[idx] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(idx)
    ready = deque(i for i, d in enumerate(indegree) if d == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users.get(i, ()):
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if len(order) != len(graph.node):
        stuck = next(i for i, d in enumerate(indegree) if d > 0)
        cycle = _find_cycle(graph, producer, stuck, available, indegree)
        raise ModelLoadError(f"{source}: the graph has a cycle: {' -> '.join(cycle)}; ONNX graphs must be acyclic")
    return [graph.node[i] for i in order]


def _find_cycle(
    graph: onnx.GraphProto, producer: dict[str, int], start: int, available: set[str], indegree: list[int]
) -> list[str]:
    """Walk producer links among nodes stuck in Kahn's algorithm until a node repeats.

    Every stuck node has a stuck producer, so the walk must close a cycle.
    """
    seen: dict[int, int] = {}
    path: list[int] = []
    current = start
    while current not in seen:
        seen[current] = len(path)
        path.append(current)
        preds = [
            producer[n] for n in graph.node[current].input if n in producer and n not in available and indegree[producer[n]] > 0
        ]
        if not preds:
            break
        current = preds[0]
    loop = path[seen.get(current, 0) :] + [current]
    return [node_label(graph.node[i], i) for i in reversed(loop)]
