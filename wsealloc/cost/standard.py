"""wsealloc's standard cost model: kernel work from its ONNX nodes, and costs on an r x c grid.

All formulas are stated, with their reasons, in ``docs/cost-model.md``; keep the two in step.
Everything here is a pure function of (work, arch, options, dataflow, r, c), vectorized over arrays
of grid shapes. Arithmetic is in float64 (exact for integers below 2**53) so absurd shapes cannot
overflow; latencies are rounded up to whole cycles.
"""

from __future__ import annotations

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import Execution, ReductionTree
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
# row reductions that take two dependent collectives (softmax: the max, then the sum; a layer norm:
# the mean, then the variance); every other reducing op takes one
_TWO_COLLECTIVES = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "SkipLayerNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "MeanVarianceNormalization",
    }
)


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
    row_reduce = any(w.row_reduce for w in works) and kernel.kind is not KernelKind.ELEMENTWISE
    reducing = [name for name, w in zip(kernel.nodes, works, strict=True) if w.row_reduce]
    reductions = sum(2 if nodes[name].op_type in _TWO_COLLECTIVES else 1 for name in reducing)
    return KernelWork(
        state_bytes=state_bytes,
        b_state_bytes=tensor_bytes(graph, b_root, arch) if b_root is not None else 0,
        table_rows=table_rows,
        state_copies=options.state_copies if kernel.state else 1,
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
        row_reduce=row_reduce,
        col_weight_bytes=col_w,
        shard_weight_bytes=shard_w,
        in_bytes=in_bytes,
        out_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.outputs),
        weight_bytes=sum(tensor_bytes(graph, t, arch) for t in kernel.weights),
        steps=anchor.steps,
        step_syncs=anchor.step_syncs,
        feedback_bytes=anchor.state_elems * arch.dtype.bytes,
        reductions=reductions if row_reduce else 0,
    )


def _parts(
    work: KernelWork, weights_core: np.ndarray, resident: np.ndarray, other_state: np.ndarray, buffers: np.ndarray
) -> SramParts:
    """The SRAM by part: the stationary operand's tile (``resident``) counts as state when it is a KV
    cache (``b_state_bytes``), as weights otherwise."""
    zeros = np.zeros_like(np.asarray(resident, dtype=np.float64))
    stationary_state = work.b_state_bytes > 0
    return SramParts(
        weights=weights_core + (zeros if stationary_state else resident),
        state=other_state + (resident if stationary_state else zeros),
        buffers=buffers,
    )


def _cdiv(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    return np.ceil(np.asarray(a, dtype=np.float64) / np.asarray(b, dtype=np.float64))


def grid_costs(
    work: KernelWork,
    arch: Arch,
    options: CostOptions,
    dataflow: Dataflow,
    r: np.ndarray,
    c: np.ndarray,
    *,
    in_place: bool = False,
) -> GridCosts:
    """Costs of ``work`` on every grid shape (r[i], c[i]) under ``dataflow``.

    ``in_place``: the kernel's operands are already laid out on its cores, where the kernel before it
    on the same cores left them (kernels run one after another on one grid, ``--grid``): no edge
    ingress or egress, no pipeline fill. Only the calibrated execution model (``arch.execution``)
    tells the two apart; the streaming model always streams through the edges."""
    if arch.execution is not None:
        return _measured_costs(work, arch, arch.execution, options, dataflow, r, c, in_place)
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
    # (every request in flight keeps its own cache: ``state_copies`` of them)
    copies = float(work.state_copies)
    b_scale = (min(1.0, work.b_state_bytes / work.b_bytes) * copies) if work.b_state_bytes and work.b_bytes else 1.0
    other_state = _cdiv(float(work.state_bytes - work.b_state_bytes) * copies, rf * cf)
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
    parts = _parts(work, weights_core, resident, other_state, buffers)
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


def tree_shape(span: np.ndarray, tree: ReductionTree) -> tuple[np.ndarray, np.ndarray, float]:
    """Stages, hops and root passes of an allreduce over ``span`` cores of one line (reduce to a root,
    then broadcast back), vectorized.

    Stages: cores along the critical path that add (each a ramp in, add, ramp out). Hops: links the
    last partial sum travels to the root plus the links the broadcast travels from it to the farthest
    core. Passes: payloads that stream through the root one after the other (it receives each level
    from both sides, and broadcasts to both sides).

    * ``chain``: one bidirectional chain toward the middle core: ``S = max(m, n-1-m)``, m = floor(n/2);
      hops ``2 S``; passes 2 + 2.
    * ``two_level``: groups of ``g = ceil(sqrt(n))`` cores reduce toward their middle core, then the
      ``G = ceil(n/g)`` group roots toward the middle group's root ``r2``; ``S = D1 + D2`` with
      ``D1 = max(g//2, g-1-g//2)``, ``D2 = max(G//2, G-1-G//2)``; hops ``D1 + D2 g + max(r2, n-1-r2)``
      with ``r2 = (G//2) g + g//2``; passes 2 + 2 + 2. (WaferLLM's K-tree with K = 2: on 420 cores,
      20 stages and 440 hops, as its code's groups of 21.)
    """
    n = np.maximum(np.asarray(span, dtype=np.float64), 1.0)
    if tree is ReductionTree.CHAIN:
        mid = np.floor(n / 2)
        far = np.maximum(mid, n - 1 - mid)
        return far, 2 * far, 4.0
    g = np.ceil(np.sqrt(n))
    groups = np.ceil(n / g)
    r1 = np.floor(g / 2)
    d1 = np.maximum(r1, g - 1 - r1)
    half = np.floor(groups / 2)
    d2 = np.maximum(half, groups - 1 - half)
    r2 = half * g + r1
    return d1 + d2, d1 + d2 * g + np.maximum(r2, n - 1 - r2), 6.0


def _measured_costs(
    work: KernelWork,
    arch: Arch,
    ex: Execution,
    options: CostOptions,
    dataflow: Dataflow,
    r: np.ndarray,
    c: np.ndarray,
    in_place: bool,
) -> GridCosts:
    """The calibrated execution model (docs/cost-model.md, "Calibrated against WSE-2 measurements"):
    a kernel is vector instructions (lanes + issue), steps (task activations) and collectives (call,
    tree stages, hops, payload through the root)."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    rf, cf = r.astype(np.float64), c.astype(np.float64)
    b, acc = float(arch.dtype.bytes), float(arch.dtype.accum_bytes)
    link = float(arch.noc.link_bytes_per_cycle)
    lanes, vlanes = float(arch.core.macs_per_cycle), float(arch.vector_ops_per_cycle)
    hop = float(arch.noc.hop_latency_cycles)
    issue, step = float(ex.issue_cycles), float(ex.step_cycles)
    blk = float(options.stream_block_rows)
    rows, cols = float(work.rows), float(work.cols)
    tile_rows, tile_cols = _cdiv(rows, rf), _cdiv(cols, cf)
    zeros = np.zeros_like(rf)

    def vop(length: np.ndarray | float, width: float) -> np.ndarray:
        """Cycles of one vector instruction over ``length`` elements."""
        return _cdiv(np.maximum(length, 1.0), width) + issue

    def allreduce(span: np.ndarray, payload: np.ndarray | float) -> np.ndarray:
        """One collective over ``span`` cores of a line, ``payload`` partial sums per core."""
        stages, hops, passes = tree_shape(span, ex.tree)
        cost = ex.collective_cycles + ex.stage_cycles * stages + hop * hops + passes * _cdiv(np.multiply(payload, acc), link)
        return np.where(span > 1, cost, zeros)

    # vector ops per element of the output: each applied as one instruction over a tile (per row when
    # the kernel reduces along its rows: every row has its own statistic)
    ops = float(work.vector_ops) / (rows * cols)
    n_ops = float(np.ceil(ops)) if work.vector_ops else 0.0
    weights_core = _cdiv(float(work.col_weight_bytes), cf) + _cdiv(float(work.shard_weight_bytes), rf * cf)
    # (every request in flight keeps its own cache: ``state_copies`` of them)
    copies = float(work.state_copies)
    b_scale = (min(1.0, work.b_state_bytes / work.b_bytes) * copies) if work.b_state_bytes and work.b_bytes else 1.0
    other_state = _cdiv(float(work.state_bytes - work.b_state_bytes) * copies, rf * cf)
    in_row = _cdiv(_cdiv(float(work.in_bytes), rf), link)
    out_row = _cdiv(_cdiv(float(work.out_bytes), rf), link)
    collective = zeros

    if dataflow is Dataflow.WEIGHT_STATIONARY:
        # tokens stream one block a step; each core FMACs its k_tile rows of B into its output columns
        # (one instruction per row of B, as long as the columns), then the partial sums allreduce over
        # the rows holding K. With a batch of heads (a KV cache), the heads may go over the rows too:
        # (head, k) over rows, each head's reduction segmented to its own rows.
        m, k = rows, float(work.k)
        steps = _cdiv(m, blk)
        passes = tree_shape(np.ones(1), ex.tree)[2]

        reduce = np.where(r > 1, _cdiv(rows * tile_cols * acc, link), zeros)
        edge = zeros if in_place else np.maximum.reduce([in_row, reduce, _cdiv(_cdiv(float(work.out_bytes), cf), link)])

        def variant(k_tile: np.ndarray, width: np.ndarray, span: np.ndarray) -> dict[str, np.ndarray]:
            adds = np.where(span > 1, (m - 1) * vop(width, lanes), zeros)  # the later tokens' tree adds
            epilogue = m * n_ops * vop(width, vlanes)
            comp = m * k_tile * vop(width, lanes) + adds + epilogue + steps * step
            # the later tokens' partial sums stream through the root behind the first one's collective
            noc = np.maximum(edge, np.where(span > 1, passes * (m - 1) * _cdiv(width * acc, link), zeros))
            coll = allreduce(span, width)
            return {
                "compute": comp,
                "noc": noc,
                "collective": coll,
                "latency": np.maximum(comp, noc) + coll,
                "resident": np.ceil(k_tile * width * b * b_scale),
                "macs": m * k_tile * width,
                "buffers": 2 * blk * (k_tile * b + width * acc),
            }

        k_tile = _cdiv(k, rf)
        chosen = variant(k_tile, tile_cols, np.minimum(rf, _cdiv(k, k_tile)))
        if work.g > 1 and work.weight_b:
            kh = _cdiv(float(work.g) * k, rf)
            heads = variant(kh, _cdiv(float(work.n), cf), np.minimum(rf, _cdiv(k, kh)))
            better = heads["latency"] < chosen["latency"]
            chosen = {name: np.where(better, heads[name], value) for name, value in chosen.items()}
        compute, noc, collective = chosen["compute"], chosen["noc"], chosen["collective"]
        resident, buffers = chosen["resident"], chosen["buffers"]
        useful = k * cols * rows
        padded = rf * cf * chosen["macs"]
    elif dataflow is Dataflow.OUTPUT_STATIONARY:
        # a systolic matmul (Cannon, MeshGEMM): K in T chunks that shift between neighbours, one step a
        # chunk; each step FMACs, for every (k, column) of its chunk, the tile's column of tokens by one
        # element of B (WaferLLM's MeshGEMM: vectors along the tokens). A K shorter than the grid side is
        # broadcast a row at a time (T = K steps).
        k = float(work.k)
        t = np.minimum(k, np.maximum(rf, cf))
        kc = _cdiv(k, t)
        shift = np.where(t > 1, _cdiv(np.maximum(tile_rows, tile_cols) * kc * b, link) + 2 * hop, zeros)
        align = np.where(t > 1, np.floor(t / 2) * (_cdiv(tile_rows * kc * b, link) + 2 * hop + step), zeros)
        epilogue = n_ops * vop(tile_rows * tile_cols, vlanes)
        compute = t * (np.maximum(kc * tile_cols * vop(tile_rows, lanes), shift) + step) + align + epilogue
        mac_core = tile_rows * tile_cols * t * kc
        useful = rows * cols * k
        padded = rf * cf * mac_core
        if work.weight_b:
            resident = np.ceil(_cdiv(k, rf) * tile_cols * b * b_scale)
            in_b = zeros
        else:
            m = float(max(work.m, 1))
            straddle = np.where((np.mod(tile_rows, m) == 0) | (np.mod(m, tile_rows) == 0), 0.0, 1.0)
            groups = np.minimum(float(work.g), _cdiv(tile_rows, m) + straddle)
            resident = groups * _cdiv(k, rf) * _cdiv(float(work.n), cf) * b  # the core's share, rotating
            in_b = _cdiv(_cdiv(float(work.b_bytes), cf), link)
        buffers = 2 * (tile_rows * kc + kc * tile_cols) * b + tile_rows * tile_cols * acc
        noc = zeros if in_place else np.maximum.reduce([in_row, in_b, out_row])
    elif dataflow is Dataflow.VECTOR:
        mac_core = zeros
        stored = float(max(work.rows, work.table_rows))
        useful = stored * cols
        padded = rf * _cdiv(stored, rf) * cf * tile_cols
        resident = zeros
        vec_core = _cdiv(float(work.vector_ops) * tile_rows * tile_cols, rows * cols)
        instructions = n_ops * (tile_rows if work.row_reduce else 1.0)
        compute = _cdiv(vec_core, vlanes) + instructions * issue + step
        if work.row_reduce:
            collective = float(max(work.reductions, 1)) * allreduce(np.minimum(cf, cols), tile_rows)
        io_row = _cdiv(float(work.in_bytes + work.out_bytes), rows)
        buffers = 2 * blk * _cdiv(io_row, cf)
        noc = zeros if in_place else np.maximum(in_row, out_row)
    else:
        raise ValueError(f"standard cost model has no dataflow {dataflow}")

    fill = zeros if in_place else hop * (rf + cf)
    latency = np.ceil(np.maximum(compute, noc) + collective + fill)
    waste = np.where(padded > 0, 1.0 - useful / np.maximum(padded, 1.0), 0.0)
    parts = _parts(work, weights_core, resident, other_state, buffers)
    return GridCosts(
        rows=r,
        cols=c,
        compute_cycles=np.ceil(compute),
        noc_cycles=np.ceil(noc + collective),
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
