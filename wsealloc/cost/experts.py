"""Mixture-of-experts layers: every expert resident on its own tile of the kernel's grid (or several
sharing one in time), k of E at work per token (docs/cost-model.md, section 14).

A ``com.microsoft`` ``MoE`` / ``QMoE`` node is one kernel (:class:`ExpertsWork`). Its grid R x C is cut
into ``ta x tb`` tiles of ``R // ta`` x ``C // tb`` cores (cores left over idle); the E experts are dealt
to the ``t = ta tb`` tiles, ``m = E / t`` to a tile (t divides E), each tile holding its experts'
weights at once and running the ones at work one after another. Per step:

1. **dispatch**: the tokens enter the kernel's edge and each is sent to its k experts' tiles;
2. **the experts**: each tile runs its active experts, each on its tokens, as a region of the expert's
   matrices (``cost.region``: fc1, fc3, fc2 on the tile, operands in place);
3. **combine**: each token's k outputs come back, scaled by their routing weights and summed.

The busiest tile sets the time. Under ``Routing.UNIFORM`` every token picks k distinct experts
uniformly at random. One token (a decode step at batch 1): the busiest tile's count of its experts is
computed exactly. Several: a tile's count of the (token, expert) picks it serves is the sum over tokens
of a hypergeometric count (E experts, m of them the tile's, k drawn), its count of experts at work
binomial (m experts, each at work with probability ``1 - (1 - k/E)^T``); the busiest of ``t`` tiles is
bounded above by the union bound, E[max] <= sum over x of min(1, t P(count > x)), which holds however
the tiles' counts depend on one another and is close for the many tokens of a prefill. ``Routing.WORST``,
the bound on any routing: the busiest tile serves every pick it can, min(m, k) of each token's (every
token on the same experts, a tile's), on as many of its experts as there are (min(m, T min(m, k)): a
tile shared in time runs them all); with one expert a tile, every token on that expert.

The tiling is chosen per grid shape like a dataflow: among the factorizations, one that fits the SRAM
over one that does not, then the fastest (:func:`experts_layout` says which, for reports).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import (
    NO_FIT_WASTE,
    CostOptions,
    ExpertsWork,
    GridCosts,
    KernelWork,
    RegionWork,
    Routing,
    SramParts,
)
from wsealloc.cost.ops import MOE_ACTIVATIONS, OpWork, moe_shape, op_work
from wsealloc.cost.region import region_grid_costs
from wsealloc.graph.ir import OpGraph
from wsealloc.graph.kernels import Kernel
from wsealloc.graph.opclass import KernelKind

GridFn = Callable[..., GridCosts]  # cost.grid_costs


def is_experts(kernel: Kernel) -> bool:
    """Whether the kernel is a mixture-of-experts layer (anchored by a com.microsoft MoE / QMoE)."""
    return kernel.kind is KernelKind.EXPERTS


def experts_work(kernel: Kernel, graph: OpGraph, arch: Arch, options: CostOptions) -> ExpertsWork:
    """The work of a MoE kernel: its node read by ``cost.ops.moe_shape``, bytes in the arch's datatype
    (QMoE's packed integers as stored), the elementwise nodes fused after it as an epilogue."""
    node = graph.node_by_name[kernel.anchor]
    op_work(node, graph)  # the node's checks, with ``op_work``'s one-line error naming it
    m = moe_shape(node, graph)

    def stored(name: str) -> int:
        t = graph.tensors[name]
        return t.numel * (arch.dtype.bytes if t.is_float else t.elem_bytes)

    others: list[OpWork] = [
        op_work(graph.node_by_name[n], graph, allow_unknown=options.allow_unknown_ops) for n in kernel.nodes if n != kernel.anchor
    ]
    return ExpertsWork(
        experts=m.experts,
        top_k=m.top_k,
        tokens=m.tokens,
        hidden=m.hidden,
        expert_ffn=m.ffn,
        gated=m.gated,
        routing=options.routing,
        expert_weight_bytes=sum(stored(n) for n in m.matrices) // m.experts,
        expert_col_bytes=sum(stored(n) for n in m.columns) // m.experts,
        act_ops=MOE_ACTIVATIONS[m.activation],
        in_bytes=sum(stored(t) for t in kernel.inputs),
        out_bytes=sum(stored(t) for t in kernel.outputs),
        epilogue_ops=sum(w.vector_ops for w in others),
        dtype_bytes=arch.dtype.bytes,
    )


def shard_work(work: ExpertsWork, shards: int, shard: int) -> ExpertsWork:
    """Shard ``shard`` of ``shards`` of a whole MoE layer (``ExpertsWork.shards``): E / S experts held,
    every token entering (with the partial sum after the first shard), the partial sum leaving (the
    layer's output after the last). ValueError when the experts do not split so."""
    if work.shards != 1:
        raise ValueError(f"a shard of a MoE layer cannot be split again (it is shard {work.shard} of {work.shards})")
    if shards < 1 or work.experts % shards or not 0 <= shard < shards:
        raise ValueError(f"a MoE layer of {work.experts} experts has no shard {shard} of {shards} (S must divide E)")
    partial = work.tokens * work.hidden * work.dtype_bytes  # the layer's output, summed so far
    last = shard == shards - 1
    return replace(
        work,
        shards=shards,
        shard=shard,
        in_bytes=work.in_bytes + (partial if shard else 0),
        out_bytes=work.out_bytes if last else partial,
    )


def expert_region(work: ExpertsWork, tokens: int) -> RegionWork:
    """One expert's matrices for ``tokens`` tokens, in the order they run on its tile: the input
    projection(s) with the activation (and the gate product) as epilogue, then the output projection
    with the routing weight's scale. Weights and biases are one expert's share of the stored bytes."""
    n, d, f, b = tokens, work.hidden, work.expert_ffn, work.dtype_bytes
    inputs = 2 if work.gated else 1
    per_matrix = work.expert_weight_bytes // (inputs + 1)
    per_cols = work.expert_col_bytes // (inputs + 1)

    def matrix(k: int, cols: int, ops: int, weight: int, col_bytes: int) -> KernelWork:
        return KernelWork(
            kind=KernelKind.MATMUL,
            macs=n * k * cols,
            vector_ops=ops,
            g=1,
            m=n,
            n=cols,
            k=k,
            weight_b=True,
            b_bytes=weight,
            rows=n,
            cols=cols,
            row_reduce=False,
            col_weight_bytes=col_bytes,
            shard_weight_bytes=0,
            in_bytes=n * k * b,
            out_bytes=n * cols * b,
            weight_bytes=weight + col_bytes,
        )

    first = matrix(d, inputs * f, n * f * (work.act_ops + int(work.gated)), inputs * per_matrix, inputs * per_cols)
    return RegionWork((first, matrix(f, d, n * d, per_matrix, per_cols)))


@dataclass(frozen=True)
class TileLoad:
    """The busiest tile of a tiling with ``tiles`` tiles of ``per_tile`` experts each."""

    tiles: int
    per_tile: int
    active: float  # experts at work on it (expected maximum, or the worst case)
    pairs: float  # (token, expert) picks it serves
    tokens: int  # tokens per active expert: ceil(pairs / active)


@lru_cache(maxsize=4096)
def tile_load(experts: int, top_k: int, tokens: int, tiles: int, routing: Routing, held: int = 0) -> TileLoad:
    """The busiest of ``tiles`` tiles (module docstring): expected under uniform routing, the bound
    under the worst. ``held``: the experts the tiles hold (a shard's E / S; 0: all E), the picks drawn
    from all E."""
    m = (held or experts) // tiles
    if routing is Routing.WORST:  # every pick a tile can take from each token, on as many of its experts as exist
        most = min(m, top_k) * tokens
        return TileLoad(tiles, m, float(min(m, most)), float(most), -(-most // min(m, most)))
    active: float
    pairs: float
    if tokens == 1:  # one token: its k picks are k experts; the busiest tile's count exactly
        pairs = active = _one_token_max(experts, m, top_k, tiles)
    else:
        pairs = _max_bound(_power(_hypergeometric(experts, m, top_k), tokens), tiles)
        p = 1.0 - (1.0 - top_k / experts) ** tokens
        active = min(_max_bound(_binomial(m, p), tiles), pairs)
    active = max(active, 1e-9)
    return TileLoad(tiles, m, active, pairs, max(1, math.ceil(pairs / active - 1e-9)))


def routing_stats(work: ExpertsWork) -> tuple[float, float]:
    """Under uniform routing, per step: the expected experts at work, E(1 - (1 - k/E)^T), and the
    tokens an expert serves on average, T k / E."""
    e, k, t = work.experts, work.top_k, work.tokens
    return e * (1.0 - (1.0 - k / e) ** t), t * k / e


def _hypergeometric(total: int, marked: int, drawn: int) -> np.ndarray:
    """P(h marked among ``drawn`` of ``total`` without replacement), h = 0 .. min(marked, drawn)."""
    top = min(marked, drawn)
    ways = math.comb(total, drawn)
    return np.array([math.comb(marked, h) * math.comb(total - marked, drawn - h) / ways for h in range(top + 1)])


def _binomial(n: int, p: float) -> np.ndarray:
    """P(h of ``n`` independent events of probability ``p``), h = 0 .. n (in logs: n reaches hundreds)."""
    out = np.zeros(n + 1)
    if p >= 1.0 or p <= 0.0:
        out[n if p >= 1.0 else 0] = 1.0
        return out
    logs = np.array(
        [
            math.lgamma(n + 1) - math.lgamma(h + 1) - math.lgamma(n - h + 1) + h * math.log(p) + (n - h) * math.log1p(-p)
            for h in range(n + 1)
        ]
    )
    out = np.exp(logs - logs.max())
    return out / out.sum()


def _power(pmf: np.ndarray, times: int) -> np.ndarray:
    """The distribution of a sum of ``times`` independent draws of ``pmf`` (FFT; tiny negatives of
    round-off clipped)."""
    if times == 1 or pmf.size == 1:
        return pmf if times == 1 else np.array([1.0])
    size = (pmf.size - 1) * times + 1
    n = 1 << (size - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(pmf, n) ** times, n)[:size]
    out = np.clip(out, 0.0, None)
    return out / out.sum()


def _max_bound(pmf: np.ndarray, copies: int) -> float:
    """An upper bound on the expected maximum of ``copies`` draws of ``pmf``, however they depend on
    one another: E[max] = sum over x of P(max > x), and P(max > x) <= min(1, copies P(X > x))."""
    tail = np.clip(1.0 - np.cumsum(pmf), 0.0, 1.0)
    return float(np.sum(np.minimum(1.0, copies * tail[:-1])))


def _one_token_max(experts: int, per_tile: int, top_k: int, tiles: int) -> float:
    """E[the most of one token's k distinct experts on any one of ``tiles`` tiles of ``per_tile``]:
    P(max <= x) counts the k-subsets with at most x in every tile, the coefficient of z^k in
    (sum_{j <= x} C(m, j) z^j)^tiles (1 + z)^rest, over C(E, k) (exact integers; ``rest``: the experts
    on no tile of these, another shard's)."""
    total = math.comb(experts, top_k)
    rest = experts - per_tile * tiles
    expected = 0.0
    for x in range(min(per_tile, top_k)):
        row = [math.comb(per_tile, j) for j in range(x + 1)]
        poly = [math.comb(rest, j) for j in range(min(rest, top_k) + 1)]
        for _ in range(tiles):
            out = [0] * min(len(poly) + x, top_k + 1)
            for i, a in enumerate(poly):
                for j, b in enumerate(row):
                    if i + j <= top_k:
                        out[i + j] += a * b
            poly = out
        within = poly[top_k] if len(poly) > top_k else 0
        expected += 1.0 - within / total
    return expected


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tilings(experts: int) -> list[tuple[int, int]]:
    """Every ``(ta, tb)``: ta rows by tb columns of tiles, ta tb dividing the experts."""
    return [(ta, t // ta) for t in _divisors(experts) for ta in _divisors(t)]


def experts_grid_costs(
    work: ExpertsWork,
    arch: Arch,
    options: CostOptions,
    r: np.ndarray,
    c: np.ndarray,
    grid_fn: GridFn,
    *,
    in_place: bool = False,
    tiling: tuple[int, int] | None = None,
) -> GridCosts:
    """Costs of a MoE layer on every grid shape: the best tiling of each (module docstring), or the
    given ``tiling`` (``ta``, ``tb``: the plan's, costed under another routing). A few shapes at once
    (a region's own grid, as each wafer's regions are lowered) are remembered: a model's identical
    layers ask for the same ones (Qwen3-235B: 94 layers on a handful of region grids)."""
    r, c = np.asarray(r, dtype=np.int64), np.asarray(c, dtype=np.int64)
    if r.size <= MEMO_SHAPES:
        return _remembered(work, arch, options, tuple(r.tolist()), tuple(c.tolist()), grid_fn, in_place, tiling)
    return _tiled(work, arch, options, r, c, grid_fn, in_place, tiling)[1]


MEMO_SHAPES = 4  # grid shapes per call below which a MoE layer's costs are remembered


@lru_cache(maxsize=1024)
def _remembered(
    work: ExpertsWork,
    arch: Arch,
    options: CostOptions,
    r: tuple[int, ...],
    c: tuple[int, ...],
    grid_fn: GridFn,
    in_place: bool,
    tiling: tuple[int, int] | None,
) -> GridCosts:
    """``_tiled`` on a few shapes, its arrays read-only (shared by every caller that asks again)."""
    out = _tiled(work, arch, options, np.array(r, dtype=np.int64), np.array(c, dtype=np.int64), grid_fn, in_place, tiling)[1]
    parts = (out.parts.weights, out.parts.state, out.parts.buffers) if out.parts is not None else ()
    for arr in (out.rows, out.cols, out.compute_cycles, out.noc_cycles, out.sram_bytes, out.latency, out.waste, *parts):
        if isinstance(arr, np.ndarray):
            arr.setflags(write=False)
    return out


@dataclass(frozen=True)
class ExpertsLayout:
    """How a MoE layer lies on its grid: ``ta x tb`` tiles of ``tile`` cores, ``load`` the busiest."""

    ta: int
    tb: int
    tile: tuple[int, int]
    load: TileLoad


def experts_layout(
    work: ExpertsWork, arch: Arch, options: CostOptions, r: int, c: int, grid_fn: GridFn, *, in_place: bool = False
) -> ExpertsLayout:
    """The tiling ``experts_grid_costs`` chose on ``r x c`` cores (for the summary and the plan)."""
    choice, _ = _tiled(work, arch, options, np.array([r], dtype=np.int64), np.array([c], dtype=np.int64), grid_fn, in_place, None)
    ta, tb = tilings(work.held)[int(choice[0])]
    load = tile_load(work.experts, work.top_k, work.tokens, ta * tb, work.routing, work.held)
    return ExpertsLayout(ta, tb, (max(r // ta, 1), max(c // tb, 1)), load)


def _tiled(
    work: ExpertsWork,
    arch: Arch,
    options: CostOptions,
    r: np.ndarray,
    c: np.ndarray,
    grid_fn: GridFn,
    in_place: bool,
    tiling: tuple[int, int] | None,
) -> tuple[np.ndarray, GridCosts]:
    rf, cf = r.astype(np.float64), c.astype(np.float64)
    b, link = float(work.dtype_bytes), float(arch.noc.link_bytes_per_cycle)
    hop, vec = float(arch.noc.hop_latency_cycles), float(arch.vector_ops_per_cycle)
    d, t_all = float(work.hidden), float(work.tokens)
    usable = arch.usable_sram_bytes
    # outside the experts' tiles: each token's k outputs summed, the routing's softmax and top-k over
    # its E logits, the epilogue; spread over every core of the grid
    routing = np.ceil(float(work.outside_ops) / (rf * cf * vec))
    cross = 0.5 if work.routing is Routing.UNIFORM else 1.0
    best: GridCosts | None = None
    best_rank = np.full(r.size, -1, dtype=np.int64)
    choice = np.zeros(r.size, dtype=np.int64)
    entering = (1 + int(work.receives_partial)) * t_all * d * b  # the tokens (and a shard's partial sum)
    for i, (ta, tb) in enumerate(tilings(work.held)):
        if tiling is not None and (ta, tb) != tiling:
            continue
        load = tile_load(work.experts, work.top_k, work.tokens, ta * tb, work.routing, work.held)
        tr, tc = np.maximum(r // ta, 1), np.maximum(c // tb, 1)
        fits = (r >= ta) & (c >= tb)
        g = region_grid_costs(expert_region(work, load.tokens), arch, options, tr, tc, grid_fn)
        parts = g.sram_parts()
        # dispatch and combine: the tokens in through the kernel's edge rows (unless in place), the
        # busiest tile's picks in through its rows, the picks that cross the grid's middle through its
        # narrower side (half of them under uniform routing; the worst case, all)
        edge = np.zeros_like(rf) if in_place else np.ceil(entering / rf / link)
        to_tile = np.ceil(load.pairs * d * b / tr / link)
        bisect = np.where(ta * tb > 1, np.ceil(cross * work.picks * d * b / np.minimum(rf, cf) / link), 0.0)
        move = np.maximum.reduce([edge, to_tile, bisect]) + hop * (rf + cf)
        latency = np.ceil(2 * move + load.active * g.latency + routing)
        weights = (work.held // (ta * tb)) * parts.weights
        sram = weights + parts.state + parts.buffers
        waste = 1.0 - (ta * tr) * (tb * tc) / (rf * cf)
        here = GridCosts(
            rows=r,
            cols=c,
            compute_cycles=np.ceil(load.active * g.compute_cycles + routing),
            noc_cycles=np.ceil(2 * move + load.active * g.noc_cycles),
            sram_bytes=sram,
            latency=np.minimum(latency, 2.0**62).astype(np.int64),
            waste=np.where(fits, waste, NO_FIT_WASTE),
            parts=SramParts(weights, parts.state, parts.buffers),
        )
        # a tiling that exists, then one within the padding rule, then one that fits the SRAM, then the fastest
        rank = fits * 4 + (waste <= options.max_padding_waste) * 2 + (sram <= usable)
        take = (rank > best_rank) | ((rank == best_rank) & (here.latency < (best.latency if best is not None else 0)))
        if best is None:
            best, best_rank = here, rank
            continue
        choice = np.where(take, i, choice)
        best = best.where(take, here)
        best_rank = np.where(take, rank, best_rank)
    assert best is not None
    return choice, best


__all__ = [
    "ExpertsLayout",
    "TileLoad",
    "expert_region",
    "experts_grid_costs",
    "experts_layout",
    "experts_work",
    "is_experts",
    "routing_stats",
    "shard_work",
    "tile_load",
    "tilings",
]
