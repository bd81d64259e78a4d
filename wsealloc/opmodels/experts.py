"""Expert parallelism: every mixture-of-experts layer of a cost table split into consecutive shards.

``split_experts(costs, S)`` is a graph transform on the table of kernels: each MoE kernel (an
:class:`~wsealloc.cost.ExpertsWork` of E experts) becomes S kernels in dataflow order, shard i holding
experts [i E/S, (i + 1) E/S) (``cost.experts.shard_work``). Every shard receives the layer's inputs
(the tokens and their router logits: the producer multicasts them), shard i > 0 also the partial sum
of the layer's output from shard i - 1 (a tensor ``<kernel>/partial<i-1>``, tokens x hidden), and the
last shard's output is the layer's. So a cut between wafers may fall between two shards: the link then
carries the tokens and the partial sum (``problem.stages.cut_bytes`` reads the edges), and each wafer
holds only its shards' experts. Nothing else changes: the other kernels, their op models and edges are
the table's own. ``layers`` splits only some layers (those the exact search chose to split:
``problem.expert_pairs``), keeping the others whole.

On one wafer the split form is never faster (the shards run one after another, each busiest tile on
its own); over several it can let a cut balance the wafers' SRAM, or take fewer wafers, which the
strategy decides by comparing the two forms' proven optima (``strategy.wafers``). The plan records S
(``WafersDecision.expert_shards``) and ``verify`` replays the transform from it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from wsealloc.cost import ExpertsWork, Work
from wsealloc.cost.experts import shard_work
from wsealloc.graph.kernels import Edge, Kernel, KernelGraph
from wsealloc.opmodels.enumerate import Frontier, OpModelTable, enumerate_op_models, pareto_frontier
from wsealloc.opmodels.table import CostTable, EdgeBytes, KernelCosts


def shard_name(kernel: str, shard: int) -> str:
    """The kernel name of a MoE layer's shard (unique: ``/`` never ends an ONNX-derived kernel name here)."""
    return f"{kernel}/shard{shard}"


def partial_name(kernel: str, shard: int) -> str:
    """The tensor carrying the partial sum shard ``shard`` passes on."""
    return f"{kernel}/partial{shard}"


def moe_experts(costs: CostTable) -> tuple[int, ...]:
    """The expert counts of the table's whole MoE layers (empty: nothing to split)."""
    return tuple(kc.work.experts for kc in costs.kernels if isinstance(kc.work, ExpertsWork) and kc.work.shards == 1)


def shard_counts(costs: CostTable, most: int) -> tuple[int, ...]:
    """Every shard count S in 2..``most`` that splits every MoE layer of the table evenly."""
    counts = moe_experts(costs)
    if not counts:
        return ()
    return tuple(s for s in range(2, most + 1) if all(e % s == 0 for e in counts))


def moe_layers(costs: CostTable) -> tuple[int, ...]:
    """The indices of the table's whole MoE layers."""
    return tuple(i for i, kc in enumerate(costs.kernels) if isinstance(kc.work, ExpertsWork) and kc.work.shards == 1)


def split_experts(costs: CostTable, shards: int, layers: Collection[int] | None = None) -> CostTable:
    """``costs`` with each MoE layer (or those at the kernel indices ``layers``) split into ``shards``
    consecutive kernels (module docstring). ValueError when the table has no whole MoE layer (or
    ``layers`` names a kernel that is not one), a layer's experts do not split into ``shards``, or the
    table is not one of kernels (regions, user constraints: split before them)."""
    if costs.runs is not None or costs.applied is not None:
        raise ValueError("expert shards split a table of kernels, before regions or constraints are applied")
    whole = moe_layers(costs)
    chosen = set(whole) if layers is None else set(layers)
    if not chosen <= set(whole) or (layers is not None and not chosen):
        wrong = sorted(chosen - set(whole))[:3]
        raise ValueError(f"decision.split_layers {wrong or '[]'}: not the kernel indices of whole MoE layers of the model")
    counts = tuple(e for i, e in zip(whole, moe_experts(costs), strict=True) if i in chosen)
    if shards < 2 or not counts or any(e % shards for e in counts):
        raise ValueError(
            f"decision.expert_shards {shards}: "
            + (f"the MoE layers' {sorted(set(counts))} experts do not split into it" if counts else "the model has no MoE layer")
        )
    cache: dict[Work, tuple[OpModelTable, Frontier, int]] = {
        kc.work: (kc.table, kc.frontier, kc.signature) for kc in costs.kernels
    }
    top = max((kc.signature for kc in costs.kernels), default=-1)
    names = {costs.kernels[i].kernel.name for i in chosen}
    kgraph = _split_graph(costs.kgraph, names, shards)
    kernels: list[KernelCosts] = []
    index: list[list[int]] = []  # new indices of each old kernel (its shards)
    for kc in costs.kernels:
        work = kc.work
        if kc.kernel.name not in names or not isinstance(work, ExpertsWork):
            index.append([len(kernels)])
            kernels.append(kc)
            continue
        mine = []
        for i in range(shards):
            part = shard_work(work, shards, i)
            if part not in cache:
                top += 1
                table = enumerate_op_models(part, costs.arch, costs.options)
                cache[part] = (table, pareto_frontier(table), top)
            table, frontier, sig = cache[part]
            mine.append(len(kernels))
            kernels.append(KernelCosts(kgraph.kernels[len(kernels)], part, table, frontier, sig))
        index.append(mine)
    return replace(
        costs,
        kgraph=kgraph,
        kernels=tuple(kernels),
        edges=_split_edges(costs, index),
        members=None,
        runs=None,
        unconstrained=None,
    )


def _split_graph(kgraph: KernelGraph, names: set[str], shards: int) -> KernelGraph:
    """The kernel graph with each split kernel's shards: its inputs to every shard, its outputs from the
    last, the partial sums between consecutive shards."""
    kernels: list[Kernel] = []
    for k in kgraph.kernels:
        if k.name not in names:
            kernels.append(k)
            continue
        for i in range(shards):
            kernels.append(
                replace(
                    k,
                    name=shard_name(k.name, i),
                    inputs=k.inputs + ((partial_name(k.name, i - 1),) if i else ()),
                    outputs=k.outputs if i == shards - 1 else (partial_name(k.name, i),),
                )
            )
    edges: list[Edge] = []
    for e in kgraph.edges:
        src = shard_name(e.src, shards - 1) if e.src in names else e.src
        if e.dst in names:
            edges += [Edge(src, shard_name(e.dst, i), e.tensor) for i in range(shards)]
        else:
            edges.append(Edge(src, e.dst, e.tensor))
    for name in names:
        edges += [Edge(shard_name(name, i), shard_name(name, i + 1), partial_name(name, i)) for i in range(shards - 1)]
    return replace(kgraph, kernels=tuple(kernels), edges=tuple(edges))


def _split_edges(costs: CostTable, index: list[list[int]]) -> tuple[EdgeBytes, ...]:
    """The table's edges in the new indices: into a split kernel, to each of its shards (the producer
    multicasts); out of it, from its last shard; between its shards, the partial sum (tokens x hidden)."""
    out: set[EdgeBytes] = set()
    for e in costs.edges:
        src = index[e.src][-1]
        for dst in index[e.dst]:
            out.add(EdgeBytes(src, dst, e.tensor, e.nbytes))
    for old, new in enumerate(index):
        if len(new) < 2:
            continue
        work = costs.kernels[old].work
        assert isinstance(work, ExpertsWork)
        nbytes = work.tokens * work.hidden * work.dtype_bytes
        name = costs.kernels[old].kernel.name
        out |= {EdgeBytes(a, b, partial_name(name, i), nbytes) for i, (a, b) in enumerate(zip(new, new[1:], strict=False))}
    return tuple(sorted(out, key=lambda e: (e.src, e.dst, e.tensor)))


__all__ = ["moe_experts", "moe_layers", "partial_name", "shard_counts", "shard_name", "split_experts"]
