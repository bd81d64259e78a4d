"""The seed notebook's own estimates (``--cost-model seed``), reproduced for comparison.

Faithful to ``../shared/seeds/000_*`` per ONNX node, quirks included (see docs/cost-model.md):

* compute: Conv ``prod(x.shape + w.shape) // x.shape[1] + sum(y.shape)``; Gemm ``a0 * (a1 + 1) * b1``;
  Add/Sub/Mul/Div the broadcast element count (a tensor-vs-scalar op returns the tensor's *bytes*);
  every other op (MatMul included) **0**.
* memory: bytes of the node's outputs; comm: bytes of its inputs that are intermediate tensors.
* on n cores: compute latency ``compute // (macs_per_cycle * n)``, comm latency
  ``comm // (link_bytes_per_cycle * n)``; wsealloc takes the larger of the two as the latency.

A kernel's estimate is the sum over its nodes (use ``--no-fuse`` for the notebook's node-per-kernel view).
"""

from __future__ import annotations

from functools import reduce
from math import prod

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import CostOptions, Dataflow, GridCosts, SeedWork
from wsealloc.cost.ops import op_work
from wsealloc.cost.standard import tensor_bytes
from wsealloc.graph.ir import OpGraph, OpNode, TensorKind
from wsealloc.graph.kernels import Kernel


def node_compute(node: OpNode, graph: OpGraph, arch: Arch) -> int:
    """The notebook's ``get_compute_cost`` for one node."""
    shape = lambda name: graph.tensors[name].shape  # noqa: E731 - mirrors the notebook's lookup table
    if node.op_type == "Conv":
        x, w = node.inputs[0], node.inputs[1]
        x_shape, w_shape = shape(x), shape(w)
        total = reduce(lambda a, b: a * b, (*x_shape, *w_shape)) // x_shape[1]
        return int(total + sum(shape(node.outputs[0])))
    if node.op_type == "Gemm":
        a_shape, b_shape = shape(node.inputs[0]), shape(node.inputs[1])
        return int(a_shape[0] * (a_shape[1] + 1) * b_shape[1])
    if node.op_type in ("Add", "Sub", "Mul", "Div"):
        a, b = node.inputs[0], node.inputs[1]
        a_shape, b_shape = shape(a), shape(b)
        if not a_shape and not b_shape:
            return 1
        if not a_shape:
            return tensor_bytes(graph, b, arch)
        if not b_shape:
            return tensor_bytes(graph, a, arch)
        # the notebook zips the two shapes, truncating to the shorter rank
        return prod(max(i, j) for i, j in zip(a_shape, b_shape, strict=False))
    return 0


def kernel_work(kernel: Kernel, graph: OpGraph, arch: Arch, options: CostOptions) -> SeedWork:
    """Sum the notebook's per-node estimates over a kernel."""
    nodes = graph.node_by_name
    compute = comm = memory = macs = vec = 0
    for name in kernel.nodes:
        node = nodes[name]
        compute += node_compute(node, graph, arch)
        memory += sum(tensor_bytes(graph, o, arch) for o in node.outputs if o)
        comm += sum(tensor_bytes(graph, i, arch) for i in node.inputs if i and graph.tensors[i].kind is TensorKind.ACTIVATION)
        w = op_work(node, graph, allow_unknown=options.allow_unknown_ops)
        macs += w.macs
        vec += w.vector_ops
    return SeedWork(
        kind=kernel.kind,
        compute=compute,
        comm=comm,
        memory=memory,
        macs=macs,
        vector_ops=vec,
        weight_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.weights),
        in_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.inputs),
        out_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.outputs),
    )


def grid_costs(work: SeedWork, arch: Arch, options: CostOptions, dataflow: Dataflow, r: np.ndarray, c: np.ndarray) -> GridCosts:
    """Notebook latency on n = r * c cores (floor divisions as in the notebook)."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    n = (r * c).astype(np.float64)
    compute = np.floor(work.compute / (arch.core.macs_per_cycle * n))
    comm = np.floor(work.comm / (arch.noc.link_bytes_per_cycle * n))
    return GridCosts(
        rows=r,
        cols=c,
        compute_cycles=compute,
        noc_cycles=comm,
        sram_bytes=np.ceil(work.memory / n),
        latency=np.maximum(compute, comm).astype(np.int64),
        waste=np.zeros_like(n),
    )
