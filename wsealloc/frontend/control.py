"""Control flow read as what a run executes: ``If`` branches and ``Loop`` bodies inlined into the graph.

wsealloc plans a dataflow graph, so subgraphs become plain nodes of the main graph before shapes are
resolved (``frontend.importer`` calls these between its folding rounds):

- ``If`` whose condition is known (a constant, or folded from shapes): the branch it takes is inlined
  (:func:`inline_branch`): its nodes and initializers join the graph, names it defines that the graph
  already uses are renamed (references in nested subgraphs too), and its outputs become ``Identity``
  nodes writing the ``If``'s outputs. A condition known only at run time is weighed by the importer:
  each branch is inlined into its own copy of the graph and the costlier one is kept (and said).
- ``Loop`` with a known trip count ``M`` (and a condition that is absent or true on entry): the body is
  unrolled ``M`` times (:func:`unroll_loop`): iteration ``i`` reads ``i`` as its iteration number and
  the previous iteration's carried values; scan outputs are stacked along a new first axis
  (``Unsqueeze`` + ``Concat``), as ONNX defines them. A body whose condition may end the loop early is
  counted for all ``M`` iterations (the most a run executes). Without a known ``M`` the loop is refused.
- ``Scan`` (opset 9 on) once its scan inputs' shapes are known: unrolled over their length
  (:func:`unroll_scan`), each iteration reading its slice (``Gather``) and the previous states, scan
  outputs stacked along their axes (reversed where a direction says so).
- Any other op holding a graph is refused with a one-line reason (:func:`refusal`).

Never silently nothing: a node holding a subgraph is never dropped as shape-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from wsealloc.frontend.load import strip_weight_data

# Unrolled iterations x body nodes beyond this are refused: a loop that long is no dataflow graph
# (one kernel per iteration), and its import would take minutes.
MAX_UNROLLED_NODES = 20_000

_DEFAULT = ("", "ai.onnx")


def holds_graph(node: onnx.NodeProto) -> bool:
    """True for a node with a subgraph attribute (If, Loop, Scan, or a custom op carrying one)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def graph_attr(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    """The subgraph attribute ``name`` of ``node`` (``then_branch``, ``else_branch``, ``body``)."""
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    raise KeyError(name)


def count_nodes(graph: onnx.GraphProto) -> int:
    """Nodes of a graph and of every subgraph it holds (what the file holds, for reports)."""
    total = 0
    for node in graph.node:
        total += 1
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                total += count_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                total += sum(count_nodes(g) for g in a.graphs)
    return total


def is_if(node: onnx.NodeProto) -> bool:
    """An ONNX ``If`` node."""
    return node.op_type == "If" and node.domain in _DEFAULT


def is_loop(node: onnx.NodeProto) -> bool:
    """An ONNX ``Loop`` node."""
    return node.op_type == "Loop" and node.domain in _DEFAULT


def truth(value: np.ndarray) -> bool:
    """The boolean a condition tensor holds (a scalar or one element)."""
    return bool(np.asarray(value).reshape(-1)[0])


def _locals(graph: onnx.GraphProto) -> set[str]:
    return {o for n in graph.node for o in n.output if o} | {t.name for t in graph.initializer} | {i.name for i in graph.input}


def _rename_refs(graph: onnx.GraphProto, rename: Mapping[str, str]) -> None:
    """Rename, in place, the outer-scope names a (nested) subgraph reads, unless it defines them itself."""
    shadowed = _locals(graph)
    live = {k: v for k, v in rename.items() if k not in shadowed}
    if not live:
        return
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in live:
                node.input[i] = live[name]
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_refs(a.g, live)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _rename_refs(g, live)
    for out in graph.output:
        if out.name in live:
            out.name = live[out.name]


class _Names:
    """Fresh tensor names: ``base__tag`` (then ``__tag2``...), never one the graph already uses."""

    def __init__(self, taken: Iterable[str]):
        self.taken = set(taken)

    def fresh(self, base: str, tag: str) -> str:
        name, count = f"{base}__{tag}", 1
        while name in self.taken:
            count += 1
            name = f"{base}__{tag}{count}"
        self.taken.add(name)
        return name


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = _locals(graph) | {o.name for o in graph.output} | {v.name for v in graph.value_info}
    for node in graph.node:
        names.update(i for i in node.input if i)
    return names


def _copy_body(
    body: onnx.GraphProto, names: _Names, tag: str, bind: Mapping[str, str], graph: onnx.GraphProto, rename_all: bool
) -> tuple[list[onnx.NodeProto], dict[str, str]]:
    """Copies of ``body``'s nodes for the main graph: the body's inputs read ``bind``'s tensors, names it
    defines are renamed (all of them with ``rename_all``, as each loop iteration needs; else only those
    the graph already uses), its initializers (weight data stripped) join ``graph``. Returns the nodes
    and the renaming, which maps the body's names to the main graph's."""
    rename: dict[str, str] = dict(bind)
    defined = [o for n in body.node for o in n.output if o] + [t.name for t in body.initializer]
    for name in defined:
        if rename_all or name in names.taken:
            rename[name] = names.fresh(name, tag)
        else:
            names.taken.add(name)
    inits = onnx.GraphProto()
    inits.initializer.extend(body.initializer)
    strip_weight_data(inits)
    for init in inits.initializer:
        init.name = rename.get(init.name, init.name)
        graph.initializer.append(init)
    nodes: list[onnx.NodeProto] = []
    for node in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for i, name in enumerate(copy.input):
            copy.input[i] = rename.get(name, name)
        for i, name in enumerate(copy.output):
            copy.output[i] = rename.get(name, name)
        for a in copy.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_refs(a.g, rename)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _rename_refs(g, rename)
        if rename_all and copy.name:
            copy.name = f"{copy.name}@{tag}"
        nodes.append(copy)
    return nodes, rename


def inline_branch(graph: onnx.GraphProto, node: onnx.NodeProto, branch_name: str) -> list[onnx.NodeProto]:
    """The nodes that replace ``If`` node ``node`` when it takes ``branch_name`` (``then_branch`` or
    ``else_branch``): the branch's nodes, and an ``Identity`` per output writing the If's output.
    The branch's initializers are added to ``graph``."""
    branch = graph_attr(node, branch_name)
    names = _Names(_all_names(graph))
    nodes, rename = _copy_body(branch, names, node.name or "if", {}, graph, rename_all=False)
    label = node.name or node.output[0]
    for i, (inner, outer) in enumerate(zip(branch.output, node.output, strict=False)):
        if outer:
            nodes.append(helper.make_node("Identity", [rename.get(inner.name, inner.name)], [outer], name=f"{label}/out{i}"))
    return nodes


def loop_trip_count(node: onnx.NodeProto, values: Mapping[str, np.ndarray]) -> tuple[int | None, str]:
    """The number of iterations a ``Loop`` runs, or None and why it is not known before the run."""
    m_name = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and cond in values and not truth(values[cond]):
        return 0, "its condition is false on entry"
    if not m_name:
        return None, "it has no trip count M and runs while a condition computed in its body holds"
    if m_name not in values:
        return None, f"its trip count M ({m_name!r}) is computed from data at run time"
    if cond and cond not in values:
        return None, f"its entry condition ({cond!r}) is computed from data at run time"
    return int(np.asarray(values[m_name]).reshape(-1)[0]), ""


def _body_may_stop(body: onnx.GraphProto) -> bool:
    """False when the body's condition output is just its condition input (torch's ``for`` loops)."""
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out == cond_in:
        return False
    producer = next((n for n in body.node if cond_out in n.output), None)
    return not (producer is not None and producer.op_type == "Identity" and producer.input[0] == cond_in)


def unroll_loop(graph: onnx.GraphProto, node: onnx.NodeProto, trips: int, opset: int) -> tuple[list[onnx.NodeProto], str]:
    """The nodes that replace ``Loop`` node ``node`` run ``trips`` times, and a sentence saying so."""
    body = graph_attr(node, "body")
    carried_in = list(node.input[2:])
    n_carried = len(carried_in)
    scan_count = len(body.output) - 1 - n_carried
    names = _Names(_all_names(graph))
    label = node.name or node.output[0]
    nodes: list[onnx.NodeProto] = []
    current = carried_in
    scans: list[list[str]] = [[] for _ in range(scan_count)]
    axes_name = names.fresh(f"{label}/axis0", "const")
    if opset >= 13:
        graph.initializer.append(numpy_helper.from_array(np.array([0], dtype=np.int64), axes_name))
    for i in range(trips):
        tag = f"it{i}"
        iter_name = names.fresh(f"{label}/iter", tag)
        cond_name = names.fresh(f"{label}/cond", tag)
        graph.initializer.append(numpy_helper.from_array(np.array(i, dtype=np.int64), iter_name))
        graph.initializer.append(numpy_helper.from_array(np.array(True), cond_name))
        bind = {body.input[0].name: iter_name, body.input[1].name: cond_name}
        bind.update({b.name: outer for b, outer in zip(body.input[2:], current, strict=False)})
        copies, rename = _copy_body(body, names, tag, bind, graph, rename_all=True)
        nodes.extend(copies)
        outs = [rename.get(o.name, o.name) for o in body.output]
        current = outs[1 : 1 + n_carried]
        for s, name in enumerate(outs[1 + n_carried :]):
            stacked = names.fresh(f"{name}/stack", tag)
            if opset >= 13:
                nodes.append(helper.make_node("Unsqueeze", [name, axes_name], [stacked], name=f"{label}/unsqueeze{s}@{tag}"))
            else:
                nodes.append(helper.make_node("Unsqueeze", [name], [stacked], name=f"{label}/unsqueeze{s}@{tag}", axes=[0]))
            scans[s].append(stacked)
    for outer, value in zip(node.output[:n_carried], current, strict=False):
        if outer:
            nodes.append(helper.make_node("Identity", [value], [outer], name=f"{label}/{outer}"))
    for s, outer in enumerate(node.output[n_carried:]):
        if outer:
            nodes.append(helper.make_node("Concat", scans[s], [outer], name=f"{label}/scan{s}", axis=0))
    early = " (its body may end it sooner: counted as the most a run executes)" if _body_may_stop(body) else ""
    note = f"Loop {label!r}: body of {len(body.node)} nodes unrolled {trips} times (trip count {trips}){early}"
    return nodes, note


def is_scan(node: onnx.NodeProto) -> bool:
    """An ONNX ``Scan`` node."""
    return node.op_type == "Scan" and node.domain in _DEFAULT


def _ints_attr(node: onnx.NodeProto, name: str, count: int) -> list[int]:
    for a in node.attribute:
        if a.name == name:
            return list(a.ints) + [0] * (count - len(a.ints))
    return [0] * count


def scan_length(node: onnx.NodeProto, shapes: Mapping[str, list[int | str | None] | None], opset: int) -> tuple[int | None, str]:
    """How many iterations a ``Scan`` runs (its scan inputs' length along their axes), or None and why."""
    if opset < 9:
        return None, "Scan before opset 9 carries a batch axis of its own"
    m = next((int(a.i) for a in node.attribute if a.name == "num_scan_inputs"), 0)
    scanned = list(node.input[len(node.input) - m :])
    axes = _ints_attr(node, "scan_input_axes", m)
    lengths: set[int] = set()
    for name, axis in zip(scanned, axes, strict=True):
        dims = shapes.get(name)
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None, f"the shape of its scan input {name!r} is not known yet"
        lengths.add(int(dims[axis % len(dims)]))  # type: ignore[arg-type]
    if len(lengths) != 1:
        return None, f"its scan inputs have different lengths {sorted(lengths)}"
    return lengths.pop(), ""


def unroll_scan(graph: onnx.GraphProto, node: onnx.NodeProto, trips: int, opset: int) -> tuple[list[onnx.NodeProto], str]:
    """The nodes that replace ``Scan`` node ``node`` (``trips`` iterations), and a sentence saying so:
    iteration ``i`` reads slice ``i`` of every scan input (``Gather`` along its axis, from the end for a
    reverse direction) and the previous states; scan outputs are stacked along their axes."""
    body = graph_attr(node, "body")
    m = next((int(a.i) for a in node.attribute if a.name == "num_scan_inputs"), 0)
    n_state = len(node.input) - m
    k = len(body.output) - n_state
    in_axes, in_dirs = _ints_attr(node, "scan_input_axes", m), _ints_attr(node, "scan_input_directions", m)
    out_axes, out_dirs = _ints_attr(node, "scan_output_axes", k), _ints_attr(node, "scan_output_directions", k)
    names = _Names(_all_names(graph))
    label = node.name or node.output[0]
    nodes: list[onnx.NodeProto] = []
    current = list(node.input[:n_state])
    scans: list[list[str]] = [[] for _ in range(k)]
    for i in range(trips):
        tag = f"it{i}"
        bind = {b.name: outer for b, outer in zip(body.input[:n_state], current, strict=True)}
        for j, (b, outer) in enumerate(zip(body.input[n_state:], node.input[n_state:], strict=True)):
            index = names.fresh(f"{label}/index{j}", tag)
            graph.initializer.append(numpy_helper.from_array(np.array(trips - 1 - i if in_dirs[j] else i, dtype=np.int64), index))
            part = names.fresh(f"{outer}/slice", tag)
            nodes.append(helper.make_node("Gather", [outer, index], [part], name=f"{label}/slice{j}@{tag}", axis=in_axes[j]))
            bind[b.name] = part
        copies, rename = _copy_body(body, names, tag, bind, graph, rename_all=True)
        nodes.extend(copies)
        outs = [rename.get(o.name, o.name) for o in body.output]
        current = outs[:n_state]
        for s, name in enumerate(outs[n_state:]):
            stacked = names.fresh(f"{name}/stack", tag)
            if opset >= 13:
                axis_name = names.fresh(f"{label}/axis{s}", tag)
                graph.initializer.append(numpy_helper.from_array(np.array([out_axes[s]], dtype=np.int64), axis_name))
                nodes.append(helper.make_node("Unsqueeze", [name, axis_name], [stacked], name=f"{label}/unsqueeze{s}@{tag}"))
            else:
                unsqueeze = helper.make_node(
                    "Unsqueeze", [name], [stacked], name=f"{label}/unsqueeze{s}@{tag}", axes=[out_axes[s]]
                )
                nodes.append(unsqueeze)
            scans[s].append(stacked)
    for outer, value in zip(node.output[:n_state], current, strict=False):
        if outer:
            nodes.append(helper.make_node("Identity", [value], [outer], name=f"{label}/{outer}"))
    for s, outer in enumerate(node.output[n_state:]):
        if outer:
            parts = scans[s][::-1] if out_dirs[s] else scans[s]
            nodes.append(helper.make_node("Concat", parts, [outer], name=f"{label}/scan{s}", axis=out_axes[s]))
    note = f"Scan {label!r}: body of {len(body.node)} nodes unrolled {trips} times (the length of its scan inputs)"
    return nodes, note


def refusal(node: onnx.NodeProto, why: str = "") -> str:
    """Why a node holding a subgraph cannot be costed (the tail of a one-line error)."""
    label = f"{node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"
    if is_loop(node):
        return (
            f"{label} cannot be costed: {why}, so how often its body runs is unknown; re-export with the loop "
            "unrolled (a fixed trip count), or give the input shapes that fix it"
        )
    if is_if(node) or is_scan(node):
        return f"{label} cannot be costed: {why}"
    return (
        f"{label} holds a subgraph ({node.op_type} is not costed: wsealloc inlines If branches and unrolls Loops and "
        "Scans with a known length); re-export the model without it"
    )
