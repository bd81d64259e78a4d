"""wsealloc's standard cost model: kernel work from its ONNX nodes, and costs on an r x c grid.

All formulas are stated, with their reasons, in ``docs/cost-model.md``; keep the two in step.
Everything here is a pure function of (work, arch, options, dataflow, r, c), vectorized over arrays
of grid shapes. Arithmetic is in float64 (exact for integers below 2**53) so absurd shapes cannot
overflow; latencies are rounded up to whole cycles.
"""

from __future__ import annotations

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import CostOptions, Dataflow, GridCosts, KernelWork, SramParts
from wsealloc.cost.ops import OpWork, op_work
from wsealloc.graph.ir import OpGraph
from wsealloc.graph.kernels import Kernel
from wsealloc.graph.opclass import KernelKind


def tensor_bytes(graph: OpGraph, name: str, arch: Arch) -> int:
    """Bytes of a tensor on the machine: floats in the arch's datatype, others in their own size."""
    t = graph.tensors[name]
    return t.numel * (arch.dtype.bytes if t.is_float else t.elem_bytes)


_SELECTIONS = frozenset({"Gather", "GatherElements", "GatherND"})


def ingress_bytes(kernel: Kernel, graph: OpGraph, tensor: str, arch: Arch) -> int:
    """Bytes of ``tensor`` the kernel must receive per sample.

    A kernel anchored by a gather of activations (the class token, a last-token slice) needs only the
    rows it picks: the producer sends those, not the whole tensor.
    """
    anchor = graph.node_by_name[kernel.anchor]
    if anchor.op_type in _SELECTIONS and anchor.inputs[0] == tensor:
        return min(tensor_bytes(graph, tensor, arch), sum(tensor_bytes(graph, o, arch) for o in anchor.outputs if o))
    return tensor_bytes(graph, tensor, arch)


def kernel_work(kernel: Kernel, graph: OpGraph, arch: Arch, options: CostOptions) -> KernelWork:
    """Aggregate the work of a kernel's nodes (anchor tiling + epilogue vector ops + bytes)."""
    nodes = graph.node_by_name
    works: list[OpWork] = [op_work(nodes[name], graph, allow_unknown=options.allow_unknown_ops) for name in kernel.nodes]
    anchor = op_work(nodes[kernel.anchor], graph, allow_unknown=options.allow_unknown_ops)
    macs = sum(w.macs for w in works)
    vector_ops = sum(w.vector_ops for w in works)
    gemm = anchor.gemm if anchor.macs > 0 else None
    stacked = [n for n in gemm.also if n] if gemm else []  # R under W: resident with B
    b_bytes = (tensor_bytes(graph, gemm.b, arch) + sum(tensor_bytes(graph, n, arch) for n in stacked)) if gemm else 0
    main_weight = gemm.weight if gemm else None
    tables = {w.table for w in works if w.table}
    col_w = shard_w = 0
    for name in kernel.weights:
        if name == main_weight or name in stacked:
            continue
        size = tensor_bytes(graph, name, arch)
        if name not in tables and graph.tensors[name].numel <= anchor.cols:
            col_w += size
        else:
            shard_w += size
    in_bytes = sum(ingress_bytes(kernel, graph, t, arch) for t in kernel.inputs)
    if gemm is not None and gemm.weight is None:
        in_bytes = max(in_bytes - b_bytes, 0)  # the B operand enters through the top edge instead
    state_bytes = sum(tensor_bytes(graph, root, arch) for root in kernel.state)
    table_rows = 0
    if anchor.table and shard_w > arch.usable_sram_bytes * max(anchor.rows, 1) * min(max(anchor.cols, 1), arch.cols):
        table_rows = graph.tensors[anchor.table].shape[0]  # the table cannot live on the output's grid
    b_root = graph.state_roots.get(gemm.b) if gemm is not None and gemm.weight is not None else None
    return KernelWork(
        state_bytes=state_bytes,
        b_state_bytes=tensor_bytes(graph, b_root, arch) if b_root is not None else 0,
        table_rows=table_rows,
        kind=kernel.kind,
        macs=macs,
        vector_ops=vector_ops,
        g=gemm.g if gemm else 1,
        m=gemm.m if gemm else anchor.rows,
        n=gemm.n if gemm else anchor.cols,
        k=gemm.k if gemm else 0,
        weight_b=main_weight is not None,
        b_bytes=b_bytes,
        rows=max(anchor.rows, 1),
        cols=max(anchor.cols, 1),
        row_reduce=any(w.row_reduce for w in works) and kernel.kind is not KernelKind.ELEMENTWISE,
        col_weight_bytes=col_w,
        shard_weight_bytes=shard_w,
        in_bytes=in_bytes,
        out_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.outputs),
        weight_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.weights),
        steps=anchor.steps,
        step_syncs=anchor.step_syncs,
        feedback_bytes=anchor.state_elems * arch.dtype.bytes,
    )


def _cdiv(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    return np.ceil(np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64))


def grid_costs(work: KernelWork, arch: Arch, options: CostOptions, dataflow: Dataflow, r: np.ndarray, c: np.ndarray) -> GridCosts:
    """Costs of ``work`` on every grid shape (r[i], c[i]) under ``dataflow``."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    rf, cf = r.astype(np.float64), c.astype(np.float64)
    b, acc = float(arch.dtype.bytes), float(arch.dtype.accum_bytes)
    link = float(arch.noc.link_bytes_per_cycle)
    macs_pc, vec_pc = float(arch.core.macs_per_cycle), float(arch.vector_ops_per_cycle)
    blk = float(options.stream_block_rows)
    rows, cols = float(work.rows), float(work.cols)
    tile_rows, tile_cols = _cdiv(rows, rf), _cdiv(cols, cf)
    # A recurrent kernel's steps run one after the other: everything below is one step (its share of
    # the vector work and of the bytes in and out, plus the hidden state fed back); 1 step otherwise.
    steps = float(work.steps)
    vector_ops, in_bytes, out_bytes = (float(x) / steps for x in (work.vector_ops, work.in_bytes, work.out_bytes))
    # Vector work (epilogues, or all of a vector kernel) spreads over the output tile of each core.
    vec_core = _cdiv(vector_ops * tile_rows * tile_cols, rows * cols)
    zeros = np.zeros_like(rf)
    weights_core = _cdiv(float(work.col_weight_bytes), cf) + _cdiv(float(work.shard_weight_bytes), rf * cf)
    # a stationary B operand that is a KV cache: its tile shrinks by the cache / view ratio (the GQA
    # repeat is a view: 32 query heads read 8 cached ones); other state is sharded over every core
    b_scale = min(1.0, work.b_state_bytes / work.b_bytes) if work.b_state_bytes and work.b_bytes else 1.0
    other_state = _cdiv(float(work.state_bytes - work.b_state_bytes), rf * cf)
    in_row = _cdiv(_cdiv(in_bytes + float(work.feedback_bytes), rf), link)

    if dataflow is Dataflow.WEIGHT_STATIONARY:
        k_tile = _cdiv(float(work.k), rf)
        mac_core = rows * k_tile * tile_cols
        useful = float(work.k) * cols * rows
        padded = rf * k_tile * cf * tile_cols * rows
        resident = np.ceil(k_tile * tile_cols * b * b_scale)
        buffers = 2 * blk * (k_tile * b + tile_cols * acc)
        reduce = np.where(r > 1, _cdiv(rows * tile_cols * acc, link), zeros)
        noc = np.maximum.reduce([in_row, reduce, _cdiv(_cdiv(out_bytes, cf), link)])
    elif dataflow is Dataflow.OUTPUT_STATIONARY:
        k = float(work.k)
        mac_core = tile_rows * tile_cols * k
        useful = rows * cols * k
        padded = rf * tile_rows * cf * tile_cols * k
        if work.weight_b:
            resident = np.ceil(k * tile_cols * b * b_scale)
            in_b = zeros
        else:
            m = float(max(work.m, 1))
            straddle = np.where((np.mod(tile_rows, m) == 0) | (np.mod(m, tile_rows) == 0), 0.0, 1.0)
            groups = np.minimum(float(work.g), _cdiv(tile_rows, m) + straddle)
            resident = groups * k * _cdiv(float(work.n), cf) * b
            in_b = _cdiv(_cdiv(float(work.b_bytes), cf), link)
        buffers = 2 * blk * (k * b + tile_cols * b)
        noc = np.maximum.reduce([in_row, in_b, _cdiv(_cdiv(out_bytes, rf), link)])
    elif dataflow is Dataflow.VECTOR:
        mac_core = zeros
        # a table spread over more rows than the output has: the grid is sized for its storage
        stored = float(max(work.rows, work.table_rows))
        useful = stored * cols
        padded = rf * _cdiv(stored, rf) * cf * tile_cols
        resident = zeros
        io_row = _cdiv(in_bytes + out_bytes, rows)
        buffers = 2 * blk * _cdiv(io_row, cf)
        reduce = np.where((c > 1) & work.row_reduce, _cdiv(2 * tile_rows * acc, link), zeros)
        noc = np.maximum.reduce([in_row, reduce, _cdiv(_cdiv(out_bytes, rf), link)])
    else:
        raise ValueError(f"standard cost model has no dataflow {dataflow}")

    compute = _cdiv(mac_core, macs_pc) + _cdiv(vec_core, vec_pc)
    fill = float(arch.noc.hop_latency_cycles) * (rf + cf)
    latency = np.maximum(compute, noc) + fill
    if work.steps > 1:  # every step waits for the one before: steps x (one step, its fill per dependent phase)
        latency = steps * (np.maximum(compute, noc) + float(work.step_syncs) * fill)
        compute, noc = steps * compute, steps * noc
    waste = np.where(padded > 0, 1.0 - useful / np.maximum(padded, 1.0), 0.0)
    stationary_state = work.b_state_bytes > 0
    parts = SramParts(
        weights=weights_core + (zeros if stationary_state else resident),
        state=other_state + (resident if stationary_state else zeros),
        buffers=buffers,
    )
    return GridCosts(
        rows=r,
        cols=c,
        compute_cycles=compute,
        noc_cycles=noc,
        sram_bytes=resident + weights_core + buffers + other_state,
        latency=np.minimum(latency, 2.0**62).astype(np.int64),
        waste=waste,
        parts=parts,
    )


def describe(work: KernelWork) -> str:
    """One-line description of a kernel's tiling for reports."""
    if work.is_mac:
        return f"g={work.g} m={work.m} n={work.n} k={work.k}"
    return f"{work.rows}x{work.cols}"
