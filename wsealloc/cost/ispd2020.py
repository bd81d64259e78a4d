"""The ISPD-2020 kernel library as pure functions: the spec every other contest module calls.

A conv with formal arguments (H, W, R, S, C, K, T, U) and execution arguments (h, w, c, k) has

- height = h * w * (c + 1) tiles, width = 3 * k tiles (forward, backward and weight-update copies);
- time = floor( ceil(H/h) * ceil(W/w) * ceil(C/c) * ceil(K/k) * R * S / (T * U) );
- memory per tile = C/c * K/k * R * S + (W+S-1)/w * (H+R-1)/h * K/k, exact (a rational number),
  legal when memory <= memlimit.

A dblock (F, H, W) is three convs sharing h and w, each with its own c_i and k_i:
1x1 F->F/4, 3x3 F/4->F/4, 1x1 F/4->F, all stride 1. A cblock (F, H, W) is four: 1x1 F/2->F/4
stride 1; 3x3 F/4->F/4 stride 2; 1x1 F/4->F on the ceil(H/2) x ceil(W/2) image; 1x1 F/2->F
stride 2. A block's height is the largest sub-conv height, its width the sum of the widths, its
time the largest time and its memory the largest memory.

Readings of what the contest's Example Benchmark leaves open (decided once, here; the evidence is
in ``docs/ispd2020.md``, section "Readings of the kernel library"):

1. U is the second stride: time divides by T * U. Every published instance has T = U, where this
   is the document's ``/ T / T``; the public entrant ignores U except to echo it.
2. Time is rounded down to an integer (the public entrant assigns the real value to an ``int``).
   floor <= exact <= ceil, so bounds computed with floor times also bound the other readings.
3. Memory is exact (no rounding of the quotients) and legal when <= memlimit; the entrant also
   divides in floating point (its commented-out variant with ceil was abandoned).
4. Execution arguments are in range 1 <= h <= H, 1 <= w <= W, 1 <= c_i <= C_i, 1 <= k_i <= K_i
   (a loop of X iterations split into more than X parts leaves tiles idle; the entrant never goes
   past the dimension). A block's h and w range over the block's H and W, also for the cblock's
   half-size conv (where h > H/2 only leaves tiles idle).
5. ``H/2`` and ``W/2`` of the cblock's third conv round up (a stride-2 'same' conv of an odd
   image); F must be a multiple of 4 (checked by the reader), so F/4 and F/2 are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from wsealloc.graph.contest import BlockArgs, ContestKind, ConvArgs, ExecArgs, FormalArgs

IntArray = np.ndarray


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# -- one conv, scalar ---------------------------------------------------------------------------
def conv_height(h: int, w: int, c: int) -> int:
    """Tiles along the kernel's height: h * w * (c + 1)."""
    return h * w * (c + 1)


def conv_width(k: int) -> int:
    """Tiles along the kernel's width: 3 * k (forward, backward and weight-update copies side by side)."""
    return 3 * k


def conv_tiles(conv: ConvArgs, h: int, w: int, c: int, k: int) -> int:
    """Loop iterations one tile owns, before the filter and stride factors: ceil(H/h) ceil(W/w) ceil(C/c) ceil(K/k)."""
    return _cdiv(conv.H, h) * _cdiv(conv.W, w) * _cdiv(conv.C, c) * _cdiv(conv.K, k)


def time_of_tiles(conv: ConvArgs, tiles: int) -> int:
    """Time of a conv whose tiles own ``tiles`` iterations: floor(tiles * R * S / (T * U)) (readings 1 and 2)."""
    return (tiles * conv.R * conv.S) // (conv.T * conv.U)


def conv_time(conv: ConvArgs, h: int, w: int, c: int, k: int) -> int:
    """Time of a conv: floor(ceil(H/h) ceil(W/w) ceil(C/c) ceil(K/k) R S / (T U)); usable on its own for any conv."""
    return time_of_tiles(conv, conv_tiles(conv, h, w, c, k))


def conv_memory(conv: ConvArgs, h: int, w: int, c: int, k: int) -> Fraction:
    """Memory per tile, exact: C/c * K/k * R * S + (W+S-1)/w * (H+R-1)/h * K/k."""
    weights = Fraction(conv.C * conv.K * conv.R * conv.S, c * k)
    activations = Fraction((conv.W + conv.S - 1) * (conv.H + conv.R - 1) * conv.K, w * h * k)
    return weights + activations


def conv_min_k(conv: ConvArgs, h: int, w: int, c: int, limit: int) -> int:
    """Smallest k >= 1 whose memory is within ``limit`` for this h, w, c (memory falls as k grows; may exceed K)."""
    return int(conv_min_k_array(conv, np.array([h]), np.array([w]), np.array([c]), limit)[0])


# -- one conv, vectorised (int64 arrays of equal shape; exact integer arithmetic) ---------------
def conv_tiles_array(conv: ConvArgs, h: IntArray, w: IntArray, c: IntArray, k: IntArray) -> IntArray:
    """:func:`conv_tiles` over arrays."""
    return -(-conv.H // h) * -(-conv.W // w) * -(-conv.C // c) * -(-conv.K // k)


def time_of_tiles_array(conv: ConvArgs, tiles: IntArray) -> IntArray:
    """:func:`time_of_tiles` over arrays."""
    return (tiles * (conv.R * conv.S)) // (conv.T * conv.U)


def conv_time_array(conv: ConvArgs, h: IntArray, w: IntArray, c: IntArray, k: IntArray) -> IntArray:
    """:func:`conv_time` over arrays."""
    return time_of_tiles_array(conv, conv_tiles_array(conv, h, w, c, k))


def max_tiles_within(conv: ConvArgs, time: IntArray) -> IntArray:
    """Largest tile iteration count P with time_of_tiles(P) <= ``time`` (the inverse of the floor in reading 2)."""
    # floor(P R S / (T U)) <= t  <=>  P R S < (t + 1) T U  <=>  P <= ((t + 1) T U - 1) // (R S)
    return ((time + 1) * (conv.T * conv.U) - 1) // (conv.R * conv.S)


def conv_memory_array(conv: ConvArgs, h: IntArray, w: IntArray, c: IntArray, k: IntArray) -> np.ndarray:
    """:func:`conv_memory` over arrays, as float64 (for display; legality is decided exactly by :func:`conv_min_k_array`)."""
    weights = (conv.C * conv.K * conv.R * conv.S) / (c * k)
    activations = ((conv.W + conv.S - 1) * (conv.H + conv.R - 1) * conv.K) / (w * h * k)
    return np.asarray(weights + activations, dtype=np.float64)


def conv_min_k_array(conv: ConvArgs, h: IntArray, w: IntArray, c: IntArray, limit: int) -> IntArray:
    """Smallest k >= 1 with memory <= ``limit``, exactly, over arrays of h, w, c (may exceed K: then none fits)."""
    # memory = K * (C R S w h + (W+S-1)(H+R-1) c) / (k c w h) <= L  <=>  k >= num / (L c w h)
    num = conv.K * (conv.C * conv.R * conv.S * w * h + (conv.W + conv.S - 1) * (conv.H + conv.R - 1) * c)
    den = limit * c * w * h
    return np.maximum(1, -(-num // den))


# -- kernels: the registry ----------------------------------------------------------------------
def _conv_convs(args: FormalArgs) -> tuple[ConvArgs, ...]:
    assert isinstance(args, ConvArgs), args
    return (args,)


def _dblock_convs(args: FormalArgs) -> tuple[ConvArgs, ...]:
    assert isinstance(args, BlockArgs), args
    f, h, w = args.F, args.H, args.W
    return (
        ConvArgs(H=h, W=w, R=1, S=1, C=f, K=f // 4, T=1, U=1),
        ConvArgs(H=h, W=w, R=3, S=3, C=f // 4, K=f // 4, T=1, U=1),
        ConvArgs(H=h, W=w, R=1, S=1, C=f // 4, K=f, T=1, U=1),
    )


def _cblock_convs(args: FormalArgs) -> tuple[ConvArgs, ...]:
    assert isinstance(args, BlockArgs), args
    f, h, w = args.F, args.H, args.W
    return (
        ConvArgs(H=h, W=w, R=1, S=1, C=f // 2, K=f // 4, T=1, U=1),
        ConvArgs(H=h, W=w, R=3, S=3, C=f // 4, K=f // 4, T=2, U=2),
        ConvArgs(H=_cdiv(h, 2), W=_cdiv(w, 2), R=1, S=1, C=f // 4, K=f, T=1, U=1),  # reading 5
        ConvArgs(H=h, W=w, R=1, S=1, C=f // 2, K=f, T=2, U=2),
    )


@dataclass(frozen=True)
class KernelSpec:
    """One kind of the kernel library: how many sub-convs, its formal argument names, and its sub-convs."""

    kind: ContestKind
    n_convs: int
    formal_names: tuple[str, ...]  # in solution order
    convs: Callable[[FormalArgs], tuple[ConvArgs, ...]]

    @property
    def exec_names(self) -> tuple[str, ...]:
        """Execution argument names in solution order: ``h w c k`` for a conv, ``h w c1 .. cn k1 .. kn`` for a block."""
        if self.n_convs == 1:
            return ("h", "w", "c", "k")
        return ("h", "w", *(f"c{i + 1}" for i in range(self.n_convs)), *(f"k{i + 1}" for i in range(self.n_convs)))


LIBRARY: dict[ContestKind, KernelSpec] = {
    ContestKind.CONV: KernelSpec(ContestKind.CONV, 1, ("H", "W", "C", "K", "R", "S", "T", "U"), _conv_convs),
    ContestKind.DBLOCK: KernelSpec(ContestKind.DBLOCK, 3, ("H", "W", "F"), _dblock_convs),
    ContestKind.CBLOCK: KernelSpec(ContestKind.CBLOCK, 4, ("H", "W", "F"), _cblock_convs),
}


def kernel_convs(kind: ContestKind, args: FormalArgs) -> tuple[ConvArgs, ...]:
    """The sub-convs of a kernel (one for a conv), in the order of the c_i and k_i of its execution arguments."""
    return LIBRARY[kind].convs(args)


def kernel_image(kind: ContestKind, args: FormalArgs) -> tuple[int, int]:
    """The (H, W) that bound the shared h and w (reading 4)."""
    return (args.H, args.W)


def exec_ranges(kind: ContestKind, args: FormalArgs) -> tuple[tuple[str, int, int], ...]:
    """(name, lowest, highest) of every execution argument, in solution order (reading 4)."""
    spec = LIBRARY[kind]
    convs = spec.convs(args)
    names = spec.exec_names
    hi = (args.H, args.W, *(cv.C for cv in convs), *(cv.K for cv in convs))
    return tuple((n, 1, top) for n, top in zip(names, hi, strict=True))


def exec_range_errors(kind: ContestKind, args: FormalArgs, ex: ExecArgs) -> tuple[str, ...]:
    """Every execution argument out of range or of the wrong count, as 'c2=600 not in [1, 512]' (empty: all fine)."""
    spec = LIBRARY[kind]
    if len(ex.c) != spec.n_convs or len(ex.k) != spec.n_convs:
        return (f"a {kind.value} takes {spec.n_convs} c and {spec.n_convs} k, got {len(ex.c)} and {len(ex.k)}",)
    errors = []
    for (name, lo, hi), value in zip(exec_ranges(kind, args), ex.solution_order(), strict=True):
        if not lo <= value <= hi:
            errors.append(f"{name}={value} not in [{lo}, {hi}]")
    return tuple(errors)


@dataclass(frozen=True)
class KernelPerf:
    """Height, width, time and memory of a kernel at given execution arguments (R0: width along x)."""

    height: int
    width: int
    time: int
    memory: Fraction
    conv_times: tuple[int, ...]
    conv_memories: tuple[Fraction, ...]

    @property
    def area(self) -> int:
        """Tiles of the kernel's rectangle."""
        return self.height * self.width


def kernel_perf(kind: ContestKind, args: FormalArgs, ex: ExecArgs) -> KernelPerf:
    """The kernel library's figures of one kernel (ValueError when an execution argument is out of range)."""
    errors = exec_range_errors(kind, args, ex)
    if errors:
        raise ValueError(f"{kind.value} {args}: {'; '.join(errors)}")
    convs = kernel_convs(kind, args)
    times = tuple(conv_time(cv, ex.h, ex.w, c, k) for cv, c, k in zip(convs, ex.c, ex.k, strict=True))
    mems = tuple(conv_memory(cv, ex.h, ex.w, c, k) for cv, c, k in zip(convs, ex.c, ex.k, strict=True))
    height = max(conv_height(ex.h, ex.w, c) for c in ex.c)
    width = sum(conv_width(k) for k in ex.k)
    return KernelPerf(height, width, max(times), max(mems), times, mems)


def smallest_memory(kind: ContestKind, args: FormalArgs) -> Fraction:
    """The least memory per tile any execution arguments reach (every argument at its top: memory falls in each)."""
    convs = kernel_convs(kind, args)
    return max(conv_memory(cv, args.H, args.W, cv.C, cv.K) for cv in convs)
