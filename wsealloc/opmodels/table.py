"""The cost table of a whole model: every kernel's work, op models and legal frontier.

Identical kernels (the repeated layers of a transformer) have equal work descriptors; their op
models are computed once and shared.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost import (
    CostOptions,
    IspdConvWork,
    KernelWork,
    TrainingWork,
    Work,
    grid_costs,
    kernel_work,
    training_work,
)
from wsealloc.cost.model import Attention
from wsealloc.cost.standard import ingress_bytes
from wsealloc.cost.training import SegmentPlace, constants, in_flight, parameters, replay_window, segment_starts
from wsealloc.errors import InfeasibleError
from wsealloc.graph.kernels import Kernel, KernelGraph
from wsealloc.opmodels.applied import Applied
from wsealloc.opmodels.enumerate import DATAFLOW_CODES, Frontier, OpModelTable, Reason, enumerate_op_models, pareto_frontier
from wsealloc.units import format_bytes


@dataclass(frozen=True)
class KernelCosts:
    """One kernel with its work, all op models, and the legal Pareto frontier."""

    kernel: Kernel
    work: Work
    table: OpModelTable
    frontier: Frontier
    signature: int  # kernels with equal signature have identical work (same op models)

    @property
    def min_cores(self) -> int:
        """Fewest cores of any legal op model (0 when none is legal)."""
        return int(self.frontier.cores[0]) if len(self.frontier) else 0

    @property
    def min_sram_bytes(self) -> int:
        """Smallest per-core SRAM need over the op models that fit the wafer geometrically."""
        fits = self.table.reason != Reason.TALLER_THAN_WAFER
        fits &= self.table.reason != Reason.WIDER_THAN_WAFER
        return int(self.table.sram[fits].min()) if fits.any() else int(self.table.sram.min())


@dataclass(frozen=True)
class EdgeBytes:
    """One tensor sent from kernel ``src`` to kernel ``dst`` (indices in kernel order), bytes per
    sample: what every layer after the cost table needs of an edge (none of them reads ONNX nodes)."""

    src: int
    dst: int
    tensor: str
    nbytes: int


def edge_bytes(kgraph: KernelGraph, arch: Arch) -> tuple[EdgeBytes, ...]:
    """The kernel graph's edges with the bytes the consumer receives (``cost.standard.ingress_bytes``),
    one per (producer, consumer, tensor), sorted."""
    index = {k.name: i for i, k in enumerate(kgraph.kernels)}
    size: dict[tuple[int, int, str], int] = {}
    for e in kgraph.edges:
        key = (index[e.src], index[e.dst], e.tensor)
        size[key] = ingress_bytes(kgraph.kernels[index[e.dst]], kgraph.ops, e.tensor, arch)
    return tuple(EdgeBytes(s, t, tensor, size[(s, t, tensor)]) for s, t, tensor in sorted(size))


@dataclass(frozen=True)
class CostTable:
    """Costs of every kernel of a model on an arch under one cost model, and the bytes of every
    edge between kernels (``edges``; indices into ``kernels``)."""

    kgraph: KernelGraph
    arch: Arch
    options: CostOptions
    kernels: tuple[KernelCosts, ...]
    edges: tuple[EdgeBytes, ...] = ()
    # a table of regions (opmodels.regions): its units are runs [first, end) of ``members``' kernels
    members: CostTable | None = None
    runs: tuple[tuple[int, int], ...] | None = None
    # the user's constraints as applied to this table (``opmodels.constrain``; None: unconstrained)
    applied: Applied | None = None
    # the same table before the constraints (what the price of the constraints is measured against)
    unconstrained: CostTable | None = None

    @property
    def total_cores(self) -> int:
        """Cores the allocation may use on one wafer: the wafer's, less the user's keep-out areas."""
        return self.arch.total_cores - (self.applied.kept_out_cores if self.applied is not None else 0)

    def preds(self) -> tuple[tuple[int, ...], ...]:
        """The producers of each unit along a token's path: the forward edges for kernels; for a table
        of regions the run before (regions run one after another: a token visits them in order)."""
        if self.runs is not None:
            return tuple(((k - 1,) if k else ()) for k in range(len(self.kernels)))
        preds: list[set[int]] = [set() for _ in self.kernels]
        for e in self.edges:
            if e.src < e.dst:  # a token's path runs forward (a backward flow is another pass)
                preds[e.dst].add(e.src)
        return tuple(tuple(sorted(p)) for p in preds)

    def subset(self, first: int, end: int) -> CostTable:
        """The cost table of kernels [first, end) only (a pipeline stage), with the edges among them; of a
        table of regions, the regions [first, end) with their kernels (a token visits them in turn, as
        ``preds`` says: one wafer's regions of a plan over several are a table of regions too)."""
        kernels = self.kernels[first:end]
        names = {kc.kernel.name for kc in kernels}
        edges = tuple(e for e in self.kgraph.edges if e.src in names and e.dst in names)
        kgraph = KernelGraph(self.kgraph.ops, tuple(kc.kernel for kc in kernels), edges, self.kgraph.fused)
        inside = tuple(
            EdgeBytes(e.src - first, e.dst - first, e.tensor, e.nbytes)
            for e in self.edges
            if first <= e.src < end and first <= e.dst < end
        )
        unconstrained = self.unconstrained.subset(first, end) if self.unconstrained is not None else None
        members, runs = None, None
        if self.runs is not None and end > first:  # a table of regions stays one: its units run in turn
            base, top = self.runs[first][0], self.runs[end - 1][1]
            runs = tuple((a - base, b - base) for a, b in self.runs[first:end])
            members = self.members.subset(base, top) if self.members is not None else None
        return CostTable(
            kgraph, self.arch, self.options, kernels, inside, members, runs, applied=self.applied, unconstrained=unconstrained
        )

    def by_name(self, name: str) -> KernelCosts:
        """A kernel's costs by kernel name (KeyError if absent)."""
        for kc in self.kernels:
            if kc.kernel.name == name:
                return kc
        raise KeyError(name)


def attention_roles_of(works: Sequence[Work], edges: Sequence[EdgeBytes]) -> list[tuple[int, bool]]:
    """Per kernel (``works``: the forwards, in kernel order), with attention recomputed: the bytes per
    sample of its inputs that are attention's S x S scores or probabilities, and whether its output is
    one. Attention is found by its shape in the kernel graph: a vector kernel that reduces along its
    rows (the softmax), fed by a matmul of two activations (the scores, Q K^T) and feeding one (the
    context product, P V, which reads it as its first operand, ``in_bytes``). Every other kernel: (0, False)."""
    roles = [(0, False)] * len(works)
    into: dict[int, list[int]] = {}
    out_of: dict[int, list[int]] = {}
    for e in edges:
        into.setdefault(e.dst, []).append(e.src)
        out_of.setdefault(e.src, []).append(e.dst)

    def pairwise(k: int) -> bool:  # a matmul of two activations
        w = works[k]
        return isinstance(w, KernelWork) and w.is_mac and not w.weight_b

    for k, w in enumerate(works):
        if not isinstance(w, KernelWork) or w.is_mac or not w.row_reduce:
            continue
        scores = [p for p in into.get(k, []) if pairwise(p)]
        context = [q for q in out_of.get(k, []) if pairwise(q)]
        if len(scores) != 1 or len(into.get(k, [])) != 1 or not context:
            continue
        s = scores[0]
        roles[s] = (roles[s][0], True)
        roles[k] = (int(w.in_bytes), True)
        for q in context:
            roles[q] = (min(int(w.out_bytes), int(works[q].in_bytes)), roles[q][1])
    return roles


def build_cost_table(kgraph: KernelGraph, arch: Arch, options: CostOptions, *, check_feasible: bool = True) -> CostTable:
    """Cost every kernel; raise :class:`InfeasibleError` naming kernels with no legal op model."""
    cache: dict[Work, tuple[OpModelTable, Frontier, int]] = {}
    result: list[KernelCosts] = []
    edges = edge_bytes(kgraph, arch)
    shape = pipeline_shape(kgraph) if options.train is not None else None
    forwards = [kernel_work(kernel, kgraph.ops, arch, options) for kernel in kgraph.kernels]
    # the contest's conv keeps its own training formula (cost.training_work): in no recomputation segment
    member = [not isinstance(w, IspdConvWork) for w in forwards]
    length = options.train.segment if options.train is not None else None
    places = segment_places(shape, edges, member, length=length) if shape is not None else None
    fixed = constants(kgraph.ops) if shape is not None else frozenset()
    # weight streaming's memory forms, in the layer pipeline too (``cost.training``)
    recomputed = options.train is not None and options.train.attention is Attention.RECOMPUTED
    roles = attention_roles_of(forwards, edges) if recomputed else [(0, False)] * len(forwards)
    for i, kernel in enumerate(kgraph.kernels):
        work = forwards[i]
        if shape is not None and places is not None:
            depth, stages, has_pred, has_succ = shape
            work = training_work(
                work,
                options,
                input_grad=has_pred[i],
                loss=not has_succ[i],
                in_flight=in_flight(depth[i], stages),
                place=places[i],
                params=parameters(kernel.weights, kgraph.ops, fixed),
                dtype_bytes=arch.dtype.bytes,
                fill_drain=2 * (stages - 1),  # micro-batching: the first micro-batch's way to the loss and back
                probs=roles[i],
            )
        if work not in cache:
            table = enumerate_op_models(work, arch, options)
            cache[work] = (table, pareto_frontier(table), len(cache))
        table, frontier, sig = cache[work]
        result.append(KernelCosts(kernel, work, table, frontier, sig))
    costs = CostTable(kgraph, arch, options, tuple(result), edges)
    if check_feasible:
        check_each_kernel_fits(costs)
    return costs


def pipeline_shape(kgraph: KernelGraph) -> tuple[list[int], int, list[bool], list[bool]]:
    """Each kernel's pipeline stage (the longest path of kernels before it), the number of stages, and
    whether it has a producer and a consumer among the kernels (training: its input gradient, the loss)."""
    index = {k.name: i for i, k in enumerate(kgraph.kernels)}
    depth = [0] * len(kgraph.kernels)
    has_pred = [False] * len(kgraph.kernels)
    has_succ = [False] * len(kgraph.kernels)
    for e in sorted(kgraph.edges, key=lambda e: index[e.dst]):
        s, t = index[e.src], index[e.dst]
        if s < t:
            depth[t] = max(depth[t], depth[s] + 1)
            has_pred[t] = has_succ[s] = True
    return depth, max(depth, default=0) + 1, has_pred, has_succ


def with_link_stages(costs: CostTable, wafer_of: Sequence[int]) -> CostTable:
    """A training table pipelined over several wafers (``wafer_of``: each kernel's wafer, ascending):
    a sample's activation crosses each wafer boundary in one pipeline step (the link's transfer is at
    most the period: ``problem.stages``), and its gradient crosses back in another, so a kernel with b
    boundaries between it and the loss keeps 2 b more samples in flight (``cost.training``); its
    recomputation segments are cut again at the boundaries (``segment_places``). Every training
    kernel's op models are costed again so; the rest are kept as they are."""
    last = max(wafer_of, default=0)
    member = [isinstance(kc.work, TrainingWork) for kc in costs.kernels]
    length = costs.options.train.segment if costs.options.train is not None else None
    places = segment_places(pipeline_shape(costs.kgraph), costs.edges, member, wafer_of, length)
    cache: dict[Work, tuple[OpModelTable, Frontier, int]] = {}
    base = max((kc.signature for kc in costs.kernels), default=-1) + 1  # new signatures clear of the old
    out: list[KernelCosts] = []
    for k, (kc, wafer) in enumerate(zip(costs.kernels, wafer_of, strict=True)):
        work = kc.work
        if not isinstance(work, TrainingWork):
            out.append(kc)
            continue
        place = places[k]
        assert place is not None  # a training kernel is in a segment
        work = replace(
            work,
            in_flight=work.in_flight + 2 * (last - wafer),
            # micro-batching: the fill and drain cross every boundary both ways, one step each
            fill_drain=work.fill_drain + 2 * last if work.micro_batch is not None else 0,
            segment=place.segment,
            segment_kernels=place.kernels,
            segment_input_bytes=min(place.input_bytes * work.samples, work.stash_bytes),
            replay_window=place.replay_window,
            replays=place.replays,
        )
        if work not in cache:
            table = enumerate_op_models(work, costs.arch, costs.options)
            cache[work] = (table, pareto_frontier(table), base + len(cache))
        table, frontier, sig = cache[work]
        out.append(KernelCosts(kc.kernel, work, table, frontier, sig))
    return replace(costs, kernels=tuple(out))


def segment_places(
    shape: tuple[list[int], int, list[bool], list[bool]],
    edges: tuple[EdgeBytes, ...],
    member: Sequence[bool],
    wafer_of: Sequence[int] | None = None,
    length: int | None = None,
) -> list[SegmentPlace | None]:
    """Each kernel's place in its recomputation segment (``cost.training``, "Recomputation"): runs of
    about ``segment_length`` pipeline stages (``segment_starts``: boundaries where the least is live),
    cut again at every wafer boundary (``wafer_of``: a part on a later wafer cannot have its producers
    on an earlier one replay, so it is a segment of its own whose inputs from across the boundary are
    its checkpoint); the stash bytes its producers inside the segment send it, whether a consumer
    inside the segment needs its output replayed, and the samples its replayed inputs are kept (up to
    the segment's last stage). Kernels that are not ``member`` (the contest's conv, which keeps its own
    training formula) belong to none: None, their outputs a checkpoint of the segments that read them."""
    depth, stages, _, _ = shape
    crossing = [0] * (stages + 1)  # bytes live across the boundary in front of each stage
    for e in edges:
        if e.src < e.dst:
            for b in range(depth[e.src] + 1, depth[e.dst] + 1):
                crossing[b] += e.nbytes
    starts = segment_starts(crossing, stages, length)
    run = [bisect_right(starts, d) - 1 for d in range(stages)]  # each stage's segment
    wafers = max(wafer_of, default=0) + 1 if wafer_of is not None else 1
    segment = [run[d] * wafers + (wafer_of[i] if wafer_of is not None else 0) if member[i] else -1 for i, d in enumerate(depth)]
    members = Counter(s for s in segment if s >= 0)
    last: dict[int, int] = {}
    for s, d in zip(segment, depth, strict=True):
        last[s] = max(last.get(s, d), d)
    inside = [0] * len(depth)
    replays = [False] * len(depth)
    for e in edges:
        if e.src < e.dst and segment[e.src] >= 0 and segment[e.src] == segment[e.dst]:
            inside[e.dst] += e.nbytes
            replays[e.src] = True
    return [
        SegmentPlace(s, members[s], inside[i], replay_window(depth[i], last[s]), replays[i]) if s >= 0 else None
        for i, s in enumerate(segment)
    ]


# What fills a core's SRAM, the part's name in the message and what the user can change to shrink it
# (the arch's SRAM is always one way: the message ends with it). A kernel's parts at its leanest op model
# decide: "smaller --dim values" was the one fix offered when a training stash kept by --recompute none,
# or the KV caches of 100,000 requests in flight, filled the cores.
PART_FIXES: dict[str, tuple[str, str]] = {
    "stash": ("the training stash", "--recompute auto or all (checkpoints instead of the stash) or a smaller --micro-batch"),
    "state": ("the KV cache", "a shorter --context, fewer --requests or a smaller --batch"),
    "optimizer": ("the optimizer state", "--optimizer sgd or momentum (less state per parameter)"),
    "grads": ("the gradients", "--mode streaming (weights and their gradients kept off the wafer)"),
    "weights": ("the weights", "--mode streaming (weights streamed from off the wafer)"),
    "buffers": (
        "the activation buffers",
        "smaller input sizes (--dim, --input-shape, or --context and --batch, which bind them)",
    ),
}


def _largest_part(kc: KernelCosts, costs: CostTable) -> tuple[str, int]:
    """The part of a kernel's leanest op model (the fewest bytes a core) that takes most of a core,
    and its bytes (the table keeps totals only: the op model is costed once more for its parts)."""
    fits = (kc.table.reason != Reason.TALLER_THAN_WAFER) & (kc.table.reason != Reason.WIDER_THAN_WAFER)
    rows = np.flatnonzero(fits) if fits.any() else np.arange(len(kc.table.sram))
    i = int(rows[np.argmin(kc.table.sram[rows])])
    df = DATAFLOW_CODES[int(kc.table.dataflow[i])]
    g = grid_costs(kc.work, costs.arch, costs.options, df, np.array([kc.table.r[i]]), np.array([kc.table.c[i]]))
    parts = {name: getattr(g.parts, name) for name in PART_FIXES if getattr(g.parts, name) is not None}
    name = max(parts, key=lambda n: float(parts[n][0]))
    return name, int(parts[name][0])


def check_each_kernel_fits(costs: CostTable) -> None:
    """Every kernel needs at least one legal op model on the whole wafer. When one has none, the message
    names what fills its cores (``PART_FIXES``) and the option that shrinks it."""
    bad = sorted((kc for kc in costs.kernels if len(kc.frontier) == 0), key=lambda kc: -kc.min_sram_bytes)
    if not bad:
        return
    usable = costs.arch.usable_sram_bytes
    details, fixes = [], []
    for kc in bad[:3]:
        part, nbytes = _largest_part(kc, costs)
        what, fix = PART_FIXES[part]
        details.append(
            f"{kc.kernel.name} needs {format_bytes(kc.min_sram_bytes)} per core at best vs {format_bytes(usable)} usable "
            f"({what} {format_bytes(nbytes)} of it)"
        )
        fixes += [fix] if fix not in fixes else []
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    raise InfeasibleError(
        f"{costs.kgraph.ops.source}: {len(bad)} kernel(s) fit no grid on {costs.arch.name}: {'; '.join(details)}{more}; "
        f"give {'; or '.join(fixes)}, or an arch with more SRAM per core (--set core.sram_bytes=...) "
        "(a kernel cannot span wafers, so more wafers do not help)"
    )
