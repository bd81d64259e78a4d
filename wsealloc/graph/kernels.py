"""Group ONNX nodes into kernels: the units that each get their own rectangle of cores.

The rule (``fuse=True``, the default), applied in topological order:

1. A MAC op (MatMul, Gemm, Conv, ConvTranspose, Einsum) or a vector op (Softmax, a normalization,
   a reduction, pooling, Gather) starts a new kernel: its *anchor*.
2. An elementwise op (bias Add, activation, residual Add, scaling Mul, ...) joins, as an epilogue,
   the kernel that produced all of its activation inputs (a decomposed GELU reads the matmul output
   several times), or else the kernel that produced one input nobody else reads (a residual Add),
   provided it does not broadcast that input to a larger shape. Otherwise it starts an elementwise
   kernel of its own (which later elementwise ops can join).
3. A layout-only op (Reshape, Transpose, Squeeze, Concat, Slice, Cast, ...) does no arithmetic: it is
   absorbed into the kernel that produced its input, or, when that input is a graph input, into the
   first kernel that reads its output.
4. An op unknown to the cost model forms a kernel of its own (kind ``OTHER``).

With ``fuse=False`` every node is its own kernel (the notebook's view, layout ops included).
Every ONNX node of the :class:`OpGraph` is covered by exactly one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wsealloc.graph.ir import OpGraph, OpNode, TensorKind
from wsealloc.graph.opclass import KernelKind, OpClass, kernel_kind, op_class


@dataclass(frozen=True)
class Kernel:
    """A fused group of ONNX nodes resident on one rectangle of cores."""

    name: str
    kind: KernelKind
    anchor: str  # name of the node that defines the kernel's tiling
    nodes: tuple[str, ...]  # every ONNX node covered, in topological order
    inputs: tuple[str, ...]  # activation/input tensors read from outside the kernel
    outputs: tuple[str, ...]  # tensors read by other kernels or returned by the graph
    weights: tuple[str, ...]  # parameter tensors read by any node of the kernel
    anchor_op: str = ""  # the anchor's op type (what later layers need of the ONNX node; they never read it)
    state: tuple[str, ...] = ()  # resident state it reads or writes: the roots of KV caches (graph.state)


@dataclass(frozen=True)
class Edge:
    """Activation traffic from one kernel to another, per sample."""

    src: str
    dst: str
    tensor: str


@dataclass(frozen=True)
class KernelGraph:
    """Kernels in topological order, with the op graph they came from."""

    ops: OpGraph
    kernels: tuple[Kernel, ...]
    edges: tuple[Edge, ...]
    fused: bool

    def kernel(self, name: str) -> Kernel:
        """Look up a kernel by name (raises KeyError)."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


@dataclass
class _Group:
    anchor: OpNode
    kind: KernelKind
    nodes: list[OpNode] = field(default_factory=list)


def build_kernels(graph: OpGraph, *, fuse: bool = True) -> KernelGraph:
    """Group the op graph's nodes into kernels following the module's documented rule."""
    groups: list[_Group] = []
    owner: dict[str, int] = {}  # tensor -> index of the group that produced it
    pending: dict[str, list[OpNode]] = {}  # layout nodes waiting for a consumer (input was a graph input)
    consumers = graph.consumers()

    def is_data(name: str) -> bool:
        return bool(name) and graph.tensors[name].kind in (TensorKind.INPUT, TensorKind.ACTIVATION)

    def is_state(name: str) -> bool:
        return bool(name) and graph.tensors[name].kind is TensorKind.STATE

    def start(node: OpNode, kind: KernelKind) -> int:
        groups.append(_Group(anchor=node, kind=kind))
        return len(groups) - 1

    def adopt_pending(idx: int, node: OpNode) -> None:
        for name in node.inputs:
            for waiting in pending.pop(name, []):
                groups[idx].nodes.append(waiting)

    for node in graph.nodes:
        cls = op_class(node.op_type, node.domain)
        data_inputs = [n for n in node.inputs if is_data(n)]
        idx: int | None = None
        if not fuse:
            idx = start(node, kernel_kind(node.op_type, node.domain))
        elif cls is OpClass.LAYOUT:
            # a layout op over state (appending to a KV cache, its GQA repeat) belongs to the kernel that
            # reads the state: it waits for that consumer, and the new rows it appends become its input
            stateful = any(is_state(n) for n in (*node.inputs, *node.outputs))
            src = None if stateful else next((owner[n] for n in data_inputs if n in owner), None)
            if src is None:
                waiting = [w for n in node.inputs if is_data(n) or is_state(n) for w in pending.pop(n, [])]
                for out in node.outputs:
                    if out:
                        pending[out] = waiting + [node]
                continue
            idx = src
        elif cls is OpClass.ELEMENTWISE:
            idx = _epilogue_target(node, data_inputs, owner, consumers, graph, groups)
            if idx is None:
                idx = start(node, KernelKind.ELEMENTWISE)
        else:
            idx = start(node, kernel_kind(node.op_type, node.domain))
        adopt_pending(idx, node)
        groups[idx].nodes.append(node)
        for out in node.outputs:
            if out:
                owner[out] = idx
    # Layout nodes whose output nobody reads (graph outputs of pure reshapes): attach to the last
    # kernel; one over a KV cache (appending to it, handing it out as the present output) to the
    # kernel that holds that cache.
    roots = graph.state_roots
    holder: dict[str, int] = {}
    for i, g in enumerate(groups):
        for n in g.nodes:
            for t in (*n.inputs, *n.outputs):
                if t in roots:
                    holder.setdefault(roots[t], i)
    leftovers = [w for lst in pending.values() for w in lst]
    if leftovers:
        if not groups:
            groups.append(_Group(anchor=leftovers[0], kind=KernelKind.DATA_MOVEMENT))
        for w in leftovers:
            cache = [roots[t] for t in (*w.inputs, *w.outputs) if t in roots and roots[t] in holder]
            groups[holder[cache[0]] if cache else len(groups) - 1].nodes.append(w)
    return _finish(graph, groups, fuse)


def _epilogue_target(
    node: OpNode,
    data_inputs: list[str],
    owner: dict[str, int],
    consumers: dict[str, list[OpNode]],
    graph: OpGraph,
    groups: list[_Group],
) -> int | None:
    """The group an elementwise node may join as an epilogue, or None.

    It joins kernel K when every activation input comes from K (a decomposed GELU reading the matmul
    output three times), or else when one input comes from K and nobody else reads it (a residual
    Add). Either way the output may not be bigger than K's input (no broadcasting expansion).
    """
    out_numel = graph.tensors[node.outputs[0]].numel if node.outputs and node.outputs[0] else 0

    def fusable(name: str) -> int | None:
        idx = owner.get(name)
        if idx is None or groups[idx].kind in (KernelKind.DATA_MOVEMENT, KernelKind.OTHER):
            return None
        return idx if graph.tensors[name].numel == out_numel else None

    owners = {owner.get(name) for name in data_inputs}
    if len(owners) == 1 and data_inputs:
        idx = next(iter(owners))
        if idx is not None and any(fusable(name) == idx for name in data_inputs):
            return idx
    for name in data_inputs:
        idx = fusable(name)
        if idx is not None and len(consumers.get(name, [])) == 1:
            return idx  # nobody else needs the tensor: fusing removes its traffic
    return None


def _finish(graph: OpGraph, groups: list[_Group], fuse: bool) -> KernelGraph:
    consumers = graph.consumers()
    graph_outputs = set(graph.outputs)
    kernels: list[Kernel] = []
    produced_by: dict[str, str] = {}
    used_names: set[str] = set()
    for group in groups:
        order = sorted(group.nodes, key=lambda n: graph.node_index[n.name])
        produced = {o for n in order for o in n.outputs if o}
        member = {n.name for n in order}
        inputs: list[str] = []
        weights: list[str] = []
        for n in order:
            for t in n.inputs:
                if not t or t in produced:
                    continue
                kind = graph.tensors[t].kind
                target = (
                    inputs
                    if kind in (TensorKind.INPUT, TensorKind.ACTIVATION)
                    else (weights if kind is TensorKind.WEIGHT else None)
                )
                if target is not None and t not in target:
                    target.append(t)
        outputs = [
            o
            for n in order
            for o in n.outputs
            if o
            and graph.tensors[o].kind is not TensorKind.STATE  # a cache stays where it lives
            and (o in graph_outputs or any(c.name not in member for c in consumers.get(o, [])))
        ]
        roots = graph.state_roots
        state = sorted({roots[t] for n in order for t in (*n.inputs, *n.outputs) if t and t in roots})
        name = group.anchor.name if group.anchor.name not in used_names else f"{group.anchor.name}#{len(kernels)}"
        used_names.add(name)
        kernels.append(
            Kernel(
                name,
                group.kind,
                group.anchor.name,
                tuple(n.name for n in order),
                tuple(inputs),
                tuple(outputs),
                tuple(weights),
                group.anchor.op_type,
                tuple(state),
            )
        )
        for o in produced:
            produced_by[o] = name
    edges = tuple(
        Edge(produced_by[t], k.name, t) for k in kernels for t in k.inputs if t in produced_by and produced_by[t] != k.name
    )
    return KernelGraph(ops=graph, kernels=tuple(kernels), edges=edges, fused=fuse)
