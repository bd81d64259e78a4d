"""``--cost-model ispd2020``: ONNX Conv kernels costed with the ISPD-2020 contest's conv formula.

The contest (set by Cerebras) publishes its own model of a conv kernel on its fabric
(``wsealloc/cost/ispd2020.py``, readings in ``docs/ispd2020.md``): execution arguments h', w', c',
k' lay the conv out as a rectangle of h'w'(c'+1) rows x 3k' columns, and

    time   = floor( ceil(H/h') ceil(W/w') ceil(C/c') ceil(K/k') R S / (T U) )
    memory = C/c' K/k' R S + (W+S-1)/w' (H+R-1)/h' K/k'      (16-bit words per tile)

Here an op model is a grid of r x c cores, so on each grid the conv takes the execution arguments
of least time whose rectangle fits r rows x c columns, upright (R0: its height along the grid's
rows) or turned (R90), as the contest allows, and whose memory is within the usable SRAM. Everything
else stays the standard model's: a kernel not anchored by a 1-D/2-D Conv is a plain
:class:`KernelWork`, and the epilogue fused into a conv kernel (bias, BatchNorm, ReLU, a residual
Add) costs the standard model's vector work per output element, done by the tiles that hold the
outputs: the h'w'k' tiles of the (c'+1)-th row, where the partial sums of the c' MAC tiles above
them meet. Those tiles do no MACs, so the epilogue runs beside the conv: latency = max(conv,
epilogue), not the sum (the standard model's one core does both, so it adds them).

The ONNX mapping and the unit (docs/cost-model.md, section 8):

- X is (N, C_in, H, W) and the weight (C_out, C_in/group, R, S): H, W, R, S as they are, C = C_in
  / group (the reduction length of one output, so grouped and depthwise convs keep their exact MAC
  and weight counts), K = C_out, T and U the two strides (reading 1 of docs/ispd2020.md). A 1-D
  conv is the 2-D one with W = S = U = 1. Pads are not read: the formula's halo (R-1 rows, S-1
  columns) stands for 'same' padding. Dilation d widens the halo to (R-1) d (the taps, hence the
  time and the weights, are unchanged). 3-D and higher convs keep the standard model.
- N > 1 images per sample run one after another on the same tiles: time x N, memory of one image.
- One contest time unit is one MAC of one tile (the formula counts a tile's forward-pass MACs:
  its pixels x input features x filters x taps, over the strides), so cycles =
  ceil(N x time / macs_per_cycle), the rate the standard model divides its MACs by.
- Memory in bytes is the formula's words x the datatype's bytes, exact (no rounding of quotients).

The per-grid minimum is exact and vectorized over all grids at once; see :func:`best_args`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import NO_FIT_WASTE, CostOptions, Dataflow, GridCosts, IspdConvWork, KernelWork
from wsealloc.cost.standard import kernel_work as standard_work
from wsealloc.graph.contest import ConvArgs
from wsealloc.graph.ir import OpGraph, OpNode
from wsealloc.graph.kernels import Kernel

# Ties in the total cycles are broken by a rank packed into the same int64 key, cycles x
# _MAX_TRIPLES + rank. Fixed constants, so the comparison is the same whatever the set of triples
# (the verifier recomputes one grid); cycles above the cap (2**41: over half an hour per sample at 1 GHz)
# only tie with other such absurd ones.
_MAX_TRIPLES = 1 << 21
_KEY_CYCLES_CAP = (1 << 62) // _MAX_TRIPLES
_NONE = np.iinfo(np.int64).max


class Fit(enum.IntEnum):
    """How a grid holds the conv: some arguments fit, only over the memory limit, or none at all."""

    FITS = 0
    MEMORY = 1  # rectangles fit the grid, none within the memory limit (figures: least-memory ones)
    NO_FIT = 2  # fewer than 2 rows or 3 columns (figures: h' = w' = c' = k' = 1)


@dataclass(frozen=True)
class Machine:
    """What turns contest figures into wsealloc's units."""

    word_bytes: int  # the contest counts memory in words of the datatype (16 bits for bf16)
    limit_bytes: int  # usable SRAM per core: memory x word_bytes must not exceed it
    macs_per_cycle: int  # contest time units (MACs of one tile) per cycle
    vector_ops_per_cycle: int  # for the fused epilogue, as in the standard model

    @classmethod
    def of(cls, arch: Arch) -> Machine:
        """The machine numbers of an arch."""
        return cls(arch.dtype.bytes, arch.usable_sram_bytes, arch.core.macs_per_cycle, arch.vector_ops_per_cycle)


@dataclass(frozen=True)
class Choice:
    """The execution arguments chosen on each grid, with their figures (parallel int64 arrays)."""

    h: np.ndarray
    w: np.ndarray
    c: np.ndarray
    k: np.ndarray
    units: np.ndarray  # contest time of one image (the formula, floored: reading 2)
    conv_cycles: np.ndarray  # ceil(N x units / macs_per_cycle)
    epilogue_cycles: np.ndarray  # the fused vector work of an output tile (the (c'+1)-th row)
    memory_bytes: np.ndarray  # ceil(words x word_bytes), exact
    fit: np.ndarray  # Fit codes
    rotated: np.ndarray  # bool: R90, the rectangle's height along the grid's columns

    @property
    def cycles(self) -> np.ndarray:
        """Latency of the kernel: the MAC tiles and the output tiles work side by side, so the larger of the two."""
        return np.maximum(self.conv_cycles, self.epilogue_cycles)

    @property
    def height(self) -> np.ndarray:
        """The rectangle's height (R0: along the grid's rows): h' w' (c' + 1)."""
        return self.h * self.w * (self.c + 1)

    @property
    def width(self) -> np.ndarray:
        """The rectangle's width: 3 k' (forward, backward and weight-update copies side by side)."""
        return 3 * self.k

    @property
    def grid_rows_used(self) -> np.ndarray:
        """Rows of the grid the rectangle covers, as placed."""
        return np.where(self.rotated, self.width, self.height)

    @property
    def grid_cols_used(self) -> np.ndarray:
        """Columns of the grid the rectangle covers, as placed."""
        return np.where(self.rotated, self.height, self.width)


# -- the ONNX mapping ----------------------------------------------------------------------------
def _ints(value: object, n: int) -> tuple[int, ...]:
    if isinstance(value, tuple) and len(value) == n:
        return tuple(int(v) for v in value)
    return (1,) * n


def contest_conv(node: OpNode, graph: OpGraph) -> tuple[ConvArgs, int, int, int] | None:
    """(conv, batch, halo_h, halo_w) of a 1-D or 2-D ONNX Conv, or None for any other node."""
    if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    x, wt = graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape
    spatial = len(x) - 2
    if spatial not in (1, 2) or len(wt) != len(x):
        return None
    strides, dil = _ints(node.attr("strides"), spatial), _ints(node.attr("dilations"), spatial)
    if spatial == 1:  # a 1-D conv is the 2-D one on an image one column wide
        x, wt, strides, dil = (*x, 1), (*wt, 1), (*strides, 1), (*dil, 1)
    conv = ConvArgs(H=x[2], W=x[3], R=wt[2], S=wt[3], C=wt[1], K=wt[0], T=strides[0], U=strides[1])
    if min(*conv.solution_order(), x[0], *dil) < 1:  # an empty tensor: nothing for the formula to split
        return None
    return conv, int(x[0]), (conv.R - 1) * dil[0], (conv.S - 1) * dil[1]


def kernel_work(kernel: Kernel, graph: OpGraph, arch: Arch, options: CostOptions) -> KernelWork:
    """The standard work; a kernel anchored by a 1-D/2-D Conv also carries the conv as the contest reads it."""
    work = standard_work(kernel, graph, arch, options)
    mapped = contest_conv(graph.node_by_name[kernel.anchor], graph)
    if mapped is None:
        return work
    conv, batch, halo_h, halo_w = mapped
    base = {f.name: getattr(work, f.name) for f in fields(KernelWork)}
    return IspdConvWork(**base, conv=conv, batch=batch, halo_h=halo_h, halo_w=halo_w)


# -- the per-grid minimum ------------------------------------------------------------------------
def _cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // b)


def _ragged(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, 1-based position) of every item when owner i has counts[i] items."""
    owner = np.repeat(np.arange(counts.size), counts)
    starts = np.cumsum(counts) - counts
    return owner, np.arange(owner.size, dtype=np.int64) - starts[owner] + 1


@dataclass(frozen=True)
class _Rows:
    """Every (h', w', c') whose rectangle is at most ``rmax`` rows tall, with its k'-free figures."""

    h: np.ndarray
    w: np.ndarray
    c: np.ndarray
    height: np.ndarray
    rows_iters: np.ndarray  # ceil(H/h') ceil(W/w') ceil(C/c'): the time's factors fixed by the rows
    pixels: np.ndarray  # ceil(H/h') ceil(W/w'): the output block of a tile (epilogue share)
    mem_num: np.ndarray  # memory words = K x mem_num / (k' x mem_den)
    mem_den: np.ndarray
    k_min: np.ndarray  # least k' within the memory limit (may exceed K: none fits)
    rank: np.ndarray  # tie-break order: least memory, then least height, then h', then w'
    by_rank: np.ndarray  # config index of each rank


def _rows(conv: ConvArgs, halo: tuple[int, int], machine: Machine, rmax: int) -> _Rows:
    # For fixed (w', c') both the time and the memory fall as h' grows, but a taller h' may not fit,
    # so every h' up to the grid counts: about rmax (ln rmax)^2 / 2 triples (17k for 792 rows).
    cs_top = min(conv.C, rmax - 1)  # h' = w' = 1: c' + 1 <= rmax
    w_top = min(conv.W, rmax // 2)  # c' >= 1: 2 w' <= rmax
    if cs_top < 1 or w_top < 1:
        empty = np.zeros(0, dtype=np.int64)
        return _Rows(*(empty,) * 11)
    ws = np.arange(1, w_top + 1, dtype=np.int64)
    owner, c = _ragged(np.clip(rmax // ws - 1, 0, cs_top))
    w = ws[owner]
    owner, h = _ragged(np.minimum(conv.H, rmax // (w * (c + 1))))
    w, c = w[owner], c[owner]
    area = w * h
    d = (conv.W + halo[1]) * (conv.H + halo[0])
    mem_num = conv.C * conv.R * conv.S * area + d * c  # memory = K (C R S w h + D c) / (k c w h)
    mem_den = c * area
    # memory x bytes <= limit  <=>  k' >= bytes K mem_num / (limit mem_den), exactly
    k_min = np.maximum(1, _cdiv(machine.word_bytes * conv.K * mem_num, machine.limit_bytes * mem_den))
    height = area * (c + 1)
    pixels = _cdiv(conv.H, h) * _cdiv(conv.W, w)
    by_rank = np.lexsort((w, h, height, mem_num / mem_den))  # a quotient of exact ints: equal rationals tie
    rank = np.empty_like(by_rank)
    rank[by_rank] = np.arange(by_rank.size)
    return _Rows(h, w, c, height, pixels * _cdiv(conv.C, c), pixels, mem_num, mem_den, k_min, rank, by_rank)


@dataclass(frozen=True)
class _ByHeight:
    """The triples grouped by height, for minima over 'at most r rows tall'."""

    order: np.ndarray  # triple indices sorted by height
    starts: np.ndarray  # first position of each distinct height in ``order``
    heights: np.ndarray  # the distinct heights
    rmax: int

    @classmethod
    def of(cls, rows: _Rows, rmax: int) -> _ByHeight:
        order = np.argsort(rows.height, kind="stable")
        sorted_h = rows.height[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_h[1:] > sorted_h[:-1]))) if order.size else order
        return cls(order, starts, sorted_h[starts], rmax)

    def prefix_min(self, values: np.ndarray) -> np.ndarray:
        """best[r] = least of ``values`` over the triples at most r rows tall (``_NONE`` when none)."""
        best = np.full(self.rmax + 1, _NONE, dtype=np.int64)
        if self.order.size:
            best[self.heights] = np.minimum.reduceat(values[self.order], self.starts)
        return np.minimum.accumulate(best)


def best_args(
    conv: ConvArgs,
    machine: Machine,
    r: np.ndarray,
    c: np.ndarray,
    *,
    batch: int = 1,
    halo: tuple[int, int] | None = None,
    vector_ops: int = 0,
) -> Choice:
    """The least-cycles execution arguments whose rectangle fits each grid ``r[i]`` x ``c[i]``.

    Exact, by this argument: on a grid of c columns, k' = min(K, c // 3) is best (time and memory
    both fall in k'), so a grid's answer depends on (r, k') only; for one k' the feasible triples
    (h', w', c') are those with k_min <= k', and the best of them at most r rows tall is a prefix
    minimum over heights. So: one pass over the triples per distinct k' (a few hundred at most),
    each a segmented minimum and a running minimum, O((triples + rows) x distinct k') in all.
    Ties on cycles go to the least memory (then the least height, h', w'): the choice is a function
    of the grid alone, so the verifier, recomputing one grid, picks the same arguments.
    """
    r = np.asarray(r, dtype=np.int64).ravel()
    c = np.asarray(c, dtype=np.int64).ravel()
    halo = halo if halo is not None else (conv.R - 1, conv.S - 1)
    rmax = max(int(min(r.max(initial=0), conv.H * conv.W * (conv.C + 1))), 0)
    rows = _rows(conv, halo, machine, rmax)
    if rows.h.size >= _MAX_TRIPLES:
        raise ValueError(f"{rows.h.size:,} row layouts of {conv} on {rmax} rows: over the {_MAX_TRIPLES:,} this search packs")
    by_height = _ByHeight.of(rows, rmax)
    least_memory = by_height.prefix_min(rows.rank)  # rank order is memory first

    k_grid = np.minimum(conv.K, c // 3)
    r_clip = np.minimum(r, rmax)
    pick = np.full(r.size, -1, dtype=np.int64)  # triple chosen per grid (-1: none fits)
    fit = np.full(r.size, Fit.NO_FIT, dtype=np.int8)
    outputs = conv.H * conv.W * conv.K
    valid = np.flatnonzero((k_grid >= 1) & (r >= 2))
    ks, which = np.unique(k_grid[valid], return_inverse=True)
    ends = np.cumsum(np.bincount(which, minlength=ks.size))[:-1]
    groups = np.split(valid[np.argsort(which, kind="stable")], ends) if ks.size else []
    for k, at in zip(ks.tolist(), groups, strict=True):
        kq = -(-conv.K // k)
        units = rows.rows_iters * kq * (conv.R * conv.S) // (conv.T * conv.U)
        conv_cycles = _cdiv(batch * units, machine.macs_per_cycle)
        total = np.maximum(conv_cycles, _epilogue(vector_ops, rows.pixels * kq, outputs, machine))
        key = np.where(rows.k_min <= k, np.minimum(total, _KEY_CYCLES_CAP) * _MAX_TRIPLES + rows.rank, _NONE)
        found = by_height.prefix_min(key)[r_clip[at]]
        ok = found != _NONE
        pick[at[ok]] = rows.by_rank[found[ok] % _MAX_TRIPLES]
        fit[at[ok]] = Fit.FITS
        # no triple within the memory limit: show the least-memory one (the op model is rejected)
        pick[at[~ok]] = rows.by_rank[least_memory[r_clip[at[~ok]]]]
        fit[at[~ok]] = Fit.MEMORY
    return _figures(conv, machine, rows, pick, fit, np.maximum(k_grid, 1), batch, halo, vector_ops)


def _epilogue(vector_ops: int, owned: np.ndarray, outputs: int, machine: Machine) -> np.ndarray:
    """Cycles of the fused vector work on an output tile owning ``owned`` of the ``outputs`` (pixels x filters).

    An output tile owns ceil(H/h') ceil(W/w') pixels (over the strides) of ceil(K/k') filters. The
    standard model's term, ceil(ceil(vector_ops x owned / outputs) / V), in float64 as there
    (exact below 2**53); zero for a bare conv."""
    if vector_ops == 0:
        return np.zeros(np.shape(owned), dtype=np.int64)
    per_tile = np.ceil(float(vector_ops) * owned.astype(np.float64) / float(outputs))
    return np.ceil(per_tile / float(machine.vector_ops_per_cycle)).astype(np.int64)


def memory_bytes(
    conv: ConvArgs, word_bytes: int, h: np.ndarray, w: np.ndarray, c: np.ndarray, k: np.ndarray, halo: tuple[int, int]
) -> np.ndarray:
    """ceil(word_bytes x memory words), exact: words = C/c' K/k' R S + (W + halo_w)/w' (H + halo_h)/h' K/k'."""
    area = w * h
    num = conv.K * (conv.C * conv.R * conv.S * area + (conv.W + halo[1]) * (conv.H + halo[0]) * c)
    return _cdiv(word_bytes * num, k * c * area)


def _figures(
    conv: ConvArgs,
    machine: Machine,
    rows: _Rows,
    pick: np.ndarray,
    fit: np.ndarray,
    k: np.ndarray,
    batch: int,
    halo: tuple[int, int],
    vector_ops: int,
) -> Choice:
    """The chosen arguments' figures; grids with no triple get h' = w' = c' = k' = 1."""
    has = pick >= 0
    idx = np.where(has, pick, 0)
    one = np.ones(pick.size, dtype=np.int64)

    def take(values: np.ndarray) -> np.ndarray:
        return np.where(has, values[idx], one) if values.size else one

    h, w, cc = take(rows.h), take(rows.w), take(rows.c)
    k = np.where(has, k, 1)
    kq = _cdiv(conv.K, k)
    pixels = _cdiv(conv.H, h) * _cdiv(conv.W, w)
    units = pixels * _cdiv(conv.C, cc) * kq * (conv.R * conv.S) // (conv.T * conv.U)
    return Choice(
        h=h,
        w=w,
        c=cc,
        k=k,
        units=units,
        conv_cycles=_cdiv(batch * units, machine.macs_per_cycle),
        epilogue_cycles=_epilogue(vector_ops, pixels * kq, conv.H * conv.W * conv.K, machine),
        memory_bytes=memory_bytes(conv, machine.word_bytes, h, w, cc, k, halo),
        fit=fit,
        rotated=np.zeros(pick.size, dtype=bool),
    )


def best_placed(
    conv: ConvArgs,
    machine: Machine,
    r: np.ndarray,
    c: np.ndarray,
    *,
    batch: int = 1,
    halo: tuple[int, int] | None = None,
    vector_ops: int = 0,
) -> Choice:
    """The better of R0 (height along the grid's rows: :func:`best_args` on r x c) and R90 (on c x r).

    The contest lets a kernel turn by 90 degrees, and nothing in the formula prefers one axis of
    the fabric. Better = fits before over-memory before no fit; then fewer cycles, then less memory
    (for grids over the limit: less memory); ties keep R0.
    """
    r = np.asarray(r, dtype=np.int64).ravel()
    c = np.asarray(c, dtype=np.int64).ravel()
    r0 = best_args(conv, machine, r, c, batch=batch, halo=halo, vector_ops=vector_ops)
    r90 = best_args(conv, machine, c, r, batch=batch, halo=halo, vector_ops=vector_ops)
    fits = r0.fit == Fit.FITS
    by_time = (r90.cycles < r0.cycles) | ((r90.cycles == r0.cycles) & (r90.memory_bytes < r0.memory_bytes))
    turn = (r90.fit < r0.fit) | ((r90.fit == r0.fit) & np.where(fits, by_time, r90.memory_bytes < r0.memory_bytes))
    turn &= r90.fit != Fit.NO_FIT

    def pick(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(turn, b, a)

    return Choice(
        h=pick(r0.h, r90.h),
        w=pick(r0.w, r90.w),
        c=pick(r0.c, r90.c),
        k=pick(r0.k, r90.k),
        units=pick(r0.units, r90.units),
        conv_cycles=pick(r0.conv_cycles, r90.conv_cycles),
        epilogue_cycles=pick(r0.epilogue_cycles, r90.epilogue_cycles),
        memory_bytes=pick(r0.memory_bytes, r90.memory_bytes),
        fit=pick(r0.fit, r90.fit),
        rotated=turn,
    )


def choice_of(work: IspdConvWork, arch: Arch, r: np.ndarray, c: np.ndarray) -> Choice:
    """The execution arguments, orientation and figures of a conv kernel on each grid r x c."""
    return best_placed(
        work.conv, Machine.of(arch), r, c, batch=work.batch, halo=(work.halo_h, work.halo_w), vector_ops=work.vector_ops
    )


def grid_costs(
    work: IspdConvWork, arch: Arch, options: CostOptions, dataflow: Dataflow, r: np.ndarray, c: np.ndarray
) -> GridCosts:
    """Costs of a conv kernel on every grid: compute = latency = the chosen arguments' cycles.

    The contest's model has no NoC term and no pipeline fill (noc = 0): its kernel is a steady
    state in which every tile's operands arrive in step. Memory is the contest's; tile padding is
    already inside the time (its ceilings), so the padding filter does not apply (waste 0), except
    that a grid holding no rectangle at all is all padding (waste 1: ``Reason.NO_FIT``).
    """
    if dataflow is not Dataflow.ISPD_CONV:
        raise ValueError(f"the ispd2020 conv model has no dataflow {dataflow}")
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    ch = choice_of(work, arch, r, c)
    cycles = ch.cycles.astype(np.float64)
    return GridCosts(
        rows=r,
        cols=c,
        compute_cycles=cycles,
        noc_cycles=np.zeros_like(cycles),
        sram_bytes=ch.memory_bytes.astype(np.float64),
        latency=np.minimum(ch.cycles, 1 << 62),
        waste=np.where(ch.fit == Fit.NO_FIT, NO_FIT_WASTE, 0.0),
    )
