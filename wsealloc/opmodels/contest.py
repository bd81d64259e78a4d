"""Op models of an ISPD-2020 contest kernel: execution arguments with height, width, time, memory and orientation.

The raw space (H x W x C x K per conv, (H x W) x prod(C_i x K_i) per block) is far too large to
list, and nearly all of it is useless. The enumeration keeps, per kernel, the Pareto frontier over
(height, width, time) of the legal models, in both orientations, and loses no optimum: a model is
dropped only when another legal one is at most as tall, as wide and as fast. Why each step keeps
every optimum (details in ``docs/ispd2020.md``, "Enumeration"):

1. *Height classes.* A kernel's height is h * w * (max_i c_i + 1). Fix (h, w, m = max_i c_i): every
   sub-conv can then take c_i = min(m, C_i) without changing the height, and a larger c_i never
   raises a conv's time or memory. So the candidates are the triples (h, w, m) with
   h * w * (m + 1) within the fabric, each sub-conv at c_i = min(m, C_i).
2. *Memory.* Memory falls as k grows, so each sub-conv has a least k_i (exact integer arithmetic);
   a triple where some sub-conv exceeds its memory limit even at k_i = K_i is rejected (memory).
3. *Equivalent triples.* Two triples whose sub-convs have the same iteration counts
   ceil(H_i/h) ceil(W_i/w) ceil(C_i/c_i) and least k_i offer exactly the same (width, time)
   choices; only the lower one is kept.
4. *Time targets.* A sub-conv's time depends on k_i only through ceil(K_i/k_i): its distinct times
   come from the smallest k_i of each quotient value (O(sqrt K_i) of them). The block's time is one of
   its sub-convs' times, so for every such time target t each sub-conv takes the least k_i meeting t
   (and its memory); any other choice with time t is at least as wide. Only k_i whose width can fit
   the fabric are listed, plus the first one past it (so the report shows a "wider than" example).
5. *Orientation and frontier.* Every model is placed R0 (width along x) and R90 (height and width
   swap); geometry is checked per orientation; among the legal rows, one per (height, width) cell
   with the least time, kept when no cell at most as tall and as wide is as fast (a prefix-minimum
   over the grid of distinct heights x widths, exact).

Rejection counts are over the candidates this enumeration examines, not over the raw space (whose
size ``raw_space`` reports): memory counts the triples where no k fits and the refused (triple,
sub-conv, k representative) choices; taller, wider and dominated count rows (execution arguments x
orientation).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from wsealloc.cost.ispd2020 import (
    conv_memory,
    conv_memory_array,
    conv_min_k_array,
    kernel_convs,
    max_tiles_within,
    smallest_memory,
    time_of_tiles_array,
)
from wsealloc.errors import InfeasibleError, ModelLoadError
from wsealloc.graph.contest import ContestGraph, ContestKernel, ContestKind, ConvArgs, ExecArgs, Fabric, FormalArgs, Orientation

EXAMPLES_PER_REASON = 3
_INF = np.iinfo(np.int64).max
# The enumeration computes times, tile counts and memory bounds exactly in int64 arrays: every product
# it forms is at most (H+R-1)(W+S-1) C K R S T U of a sub-conv, which must stay below this (the
# solvers' largest latency too, ``problem.allocation.MAX_CYCLES``); the published instances stay below 2^34.
MAX_CONV_SIZE = 2**50


class ContestReason(enum.IntEnum):
    """Why a candidate is not on the kernel's frontier (``LEGAL`` when it is)."""

    LEGAL = 0
    MEMORY_OVER_LIMIT = 1
    TALLER_THAN_FABRIC = 2
    WIDER_THAN_FABRIC = 3
    DOMINATED = 4

    @property
    def label(self) -> str:
        """Human-readable reason."""
        return _LABELS[self]


_LABELS = {
    ContestReason.LEGAL: "legal",
    ContestReason.MEMORY_OVER_LIMIT: "memory over limit",
    ContestReason.TALLER_THAN_FABRIC: "taller than the fabric",
    ContestReason.WIDER_THAN_FABRIC: "wider than the fabric",
    ContestReason.DOMINATED: "dominated (another legal model is at most as tall, as wide and as fast)",
}

ORIENTATIONS = (Orientation.R0, Orientation.R90)  # orientation codes 0 and 1 in the arrays


@dataclass(frozen=True)
class RejectedExample:
    """One rejected candidate with its figures and reason (for ``inspect --kernel``)."""

    exec_args: ExecArgs
    orientation: Orientation
    height: int  # as placed
    width: int  # as placed
    time: int
    memory: float
    reason: ContestReason
    note: str = ""  # e.g. the model that dominates it


@dataclass(frozen=True)
class _Core:
    """The kernel-independent result for one (kind, formal args, fabric, memlimit)."""

    h: np.ndarray
    w: np.ndarray
    c: np.ndarray  # (n, n_convs)
    k: np.ndarray  # (n, n_convs)
    height: np.ndarray  # as placed
    width: np.ndarray  # as placed
    time: np.ndarray
    memory: np.ndarray  # float64, for display
    orientation: np.ndarray  # 0 = R0, 1 = R90
    examined: int
    rejected: tuple[tuple[ContestReason, int], ...]
    examples: tuple[RejectedExample, ...]
    least_memory_in_fabric: float  # least memory (k at its top) of the (h, w, m) where no k fits memory (inf: none)
    smallest_rect: tuple[int, int] | None  # when nothing is legal: the smallest-area candidate within memory


@dataclass(frozen=True)
class ContestOpModels:
    """The legal op models of one kernel on the (height, width, time) Pareto frontier, fastest first.

    Parallel arrays, one row per model (execution arguments x orientation); ``height`` and ``width``
    are as placed (R90 rows already swapped).
    """

    kernel: ContestKernel
    fabric: Fabric
    h: np.ndarray
    w: np.ndarray
    c: np.ndarray  # (n, n_convs)
    k: np.ndarray  # (n, n_convs)
    height: np.ndarray
    width: np.ndarray
    time: np.ndarray
    memory: np.ndarray
    orientation: np.ndarray  # 0 = R0, 1 = R90
    examined: int
    raw_space: int
    rejected: tuple[tuple[ContestReason, int], ...]
    rejected_examples: tuple[RejectedExample, ...]
    _area_prefix_min: np.ndarray = field(repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.time.size)

    @property
    def area(self) -> np.ndarray:
        """Tiles of each model's rectangle."""
        return self.height * self.width

    @property
    def fastest_time(self) -> int:
        """The least time of any legal model."""
        return int(self.time[0])

    def rejected_counts(self) -> dict[ContestReason, int]:
        """Candidates rejected per reason (see the module docstring for what is counted)."""
        return dict(self.rejected)

    def exec_args(self, i: int) -> ExecArgs:
        """Execution arguments of model ``i``."""
        return ExecArgs(int(self.h[i]), int(self.w[i]), tuple(int(x) for x in self.c[i]), tuple(int(x) for x in self.k[i]))

    def orientation_of(self, i: int) -> Orientation:
        """Orientation of model ``i``."""
        return ORIENTATIONS[int(self.orientation[i])]

    def min_area_within(self, time_target: int) -> int | None:
        """Smallest rectangle area of a legal model with time <= ``time_target`` (None: none is that fast)."""
        pos = int(np.searchsorted(self.time, time_target, side="right")) - 1
        return None if pos < 0 else int(self._area_prefix_min[pos])

    def fastest_fitting(self, max_height: int, max_width: int) -> int | None:
        """Index of the fastest model with height <= ``max_height`` and width <= ``max_width`` (None: none fits).

        Ties on time go to the smaller area, then to R0, then to the lower index.
        """
        fit = np.flatnonzero((self.height <= max_height) & (self.width <= max_width))
        if fit.size == 0:
            return None
        best = fit[self.time[fit] == self.time[fit].min()]
        order = np.lexsort((best, self.orientation[best], self.area[best]))
        return int(best[order[0]])

    def staircase(self, max_height: int) -> np.ndarray:
        """Indices of the models at most ``max_height`` tall that no narrower-or-equal one beats: width up, time down."""
        idx = np.flatnonzero(self.height <= max_height)
        if idx.size == 0:
            return idx
        idx = idx[np.lexsort((self.area[idx], self.time[idx], self.width[idx]))]
        t = self.time[idx]
        best_before = np.minimum.accumulate(np.concatenate(([_INF], t[:-1])))
        return idx[t < best_before]

    def row(self, i: int) -> dict[str, object]:
        """Model ``i`` as a plain dict (for reports and ``--json``)."""
        return {
            "exec": self.exec_args(i).solution_order(),
            "orientation": self.orientation_of(i).value,
            "height": int(self.height[i]),
            "width": int(self.width[i]),
            "time": int(self.time[i]),
            "memory": float(self.memory[i]),
        }


def raw_space(kind: ContestKind, args: FormalArgs) -> int:
    """Size of the unpruned execution-argument space (times two orientations)."""
    size = args.H * args.W
    for cv in kernel_convs(kind, args):
        size *= cv.C * cv.K
    return 2 * size


def check_kernel_size(kernel: ContestKernel) -> None:
    """ModelLoadError naming the kernel (and its line) when a sub-conv is too large for the exact
    64-bit arithmetic of the enumeration (see ``MAX_CONV_SIZE``)."""
    for cv in kernel_convs(kernel.kind, kernel.args):
        size = (cv.H + cv.R - 1) * (cv.W + cv.S - 1) * cv.C * cv.K * cv.R * cv.S * cv.T * cv.U
        if size >= MAX_CONV_SIZE:
            raise ModelLoadError(
                f"kernel {kernel.name} (line {kernel.line}: {kernel.kind.value} {_args_text(kernel.args)}) is too large: "
                f"a conv of it spans (H+R-1)(W+S-1) C K R S T U = {size:.3g} loop iterations, over the {MAX_CONV_SIZE:.3g} "
                "the kernel library's arithmetic is exact for"
            )


def enumerate_contest(kernel: ContestKernel, fabric: Fabric) -> ContestOpModels:
    """The legal op models of one kernel on the frontier (InfeasibleError naming it when none is legal)."""
    check_kernel_size(kernel)
    core = _enumerate(kernel.kind, kernel.args, fabric.height, fabric.width, fabric.memlimit)
    if core.time.size == 0:
        raise InfeasibleError(_infeasible_message(kernel, fabric, core))
    area = core.height * core.width
    return ContestOpModels(
        kernel,
        fabric,
        core.h,
        core.w,
        core.c,
        core.k,
        core.height,
        core.width,
        core.time,
        core.memory,
        core.orientation,
        core.examined,
        raw_space(kernel.kind, kernel.args),
        core.rejected,
        core.examples,
        np.minimum.accumulate(area),
    )


@dataclass(frozen=True)
class ContestRejections:
    """What the enumeration of a kernel examined and rejected, also when no model is legal (for reports)."""

    kernel: ContestKernel
    examined: int
    raw_space: int
    rejected: tuple[tuple[ContestReason, int], ...]
    rejected_examples: tuple[RejectedExample, ...]
    infeasible: str  # the InfeasibleError message of enumerate_contest when nothing is legal, else ""

    def rejected_counts(self) -> dict[ContestReason, int]:
        """Candidates rejected per reason."""
        return dict(self.rejected)


def contest_rejections(kernel: ContestKernel, fabric: Fabric) -> ContestRejections:
    """The rejection counts and examples of one kernel without raising for an infeasible kernel: ``inspect``
    shows why a kernel has no legal model the way it shows any kernel's rejected candidates."""
    check_kernel_size(kernel)
    core = _enumerate(kernel.kind, kernel.args, fabric.height, fabric.width, fabric.memlimit)
    message = _infeasible_message(kernel, fabric, core) if core.time.size == 0 else ""
    return ContestRejections(kernel, core.examined, raw_space(kernel.kind, kernel.args), core.rejected, core.examples, message)


def enumerate_graph(graph: ContestGraph) -> tuple[ContestOpModels, ...]:
    """:func:`enumerate_contest` for every placed kernel, in file order (identical kernels computed once);
    an infeasible kernel is named after the file and its line, as the reader's errors are."""
    out = []
    for k in graph.kernels:
        try:
            out.append(enumerate_contest(k, graph.fabric))
        except InfeasibleError as exc:
            where = f"{graph.source}:{k.line}" if k.line else graph.source
            raise InfeasibleError(f"{where}: {exc}") from None
    return tuple(out)


def _memory_text(value: float) -> str:
    """A memory need as text: whole numbers as they are, others with two decimals (10.27 must not read 10)."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _infeasible_message(kernel: ContestKernel, fabric: Fabric, core: _Core) -> str:
    least = smallest_memory(kernel.kind, kernel.args)
    what = f"kernel {kernel.name} ({kernel.kind.value} {_args_text(kernel.args)})"
    size = f"{fabric.width}x{fabric.height}"
    if least > fabric.memlimit:
        return (
            f"{what} needs at least {_memory_text(float(least))} memory per tile (every execution argument at its top), "
            f"over memlimit {fabric.memlimit:,}; no placement exists"
        )
    if core.smallest_rect is not None:
        h, w = core.smallest_rect
        return (
            f"{what}: no execution arguments within memlimit {fabric.memlimit:,} fit the {size} fabric; "
            f"the smallest is {h}x{w} tiles"
        )
    return (
        f"{what}: within the {size} fabric it needs at least {_memory_text(core.least_memory_in_fabric)} memory per tile, "
        "over memlimit "
        f"{fabric.memlimit:,} (it would fit {_memory_text(float(least))} only on a rectangle larger than the fabric)"
    )


def _args_text(args: FormalArgs) -> str:
    return " ".join(f"{k}={v}" for k, v in vars(args).items())


# -- the enumeration ----------------------------------------------------------------------------
def _quotient_ks(total: int, cap: int) -> np.ndarray:
    """Smallest k of each distinct ceil(total/k), for k <= cap, plus the first one past ``cap`` (if <= total).

    In O(min(total, cap)): the quotients of k <= cap have their smallest k at most cap; past cap the first
    new quotient is q_cap - 1 (q_cap = ceil(total/cap) >= 2), first reached at k = ceil(total/(q_cap - 1))."""
    if cap < 1:
        return np.ones(1, dtype=np.int64)  # every k is past the cap: the first is k = 1
    q = np.unique(-(-total // np.arange(1, min(total, cap) + 1, dtype=np.int64)))
    inside = np.unique(-(-total // q))
    if cap >= total:
        return inside
    q_cap = -(-total // cap)
    return np.concatenate((inside, np.array([-(-total // (q_cap - 1))], dtype=np.int64)))


def _triples(hk: int, wk: int, cmax: int, dmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All (h, w, m) with h <= hk, w <= wk, m <= cmax and h * w * (m + 1) <= dmax."""
    hs = np.arange(1, min(hk, dmax // 2) + 1, dtype=np.int64)
    wtop = np.minimum(wk, dmax // (2 * hs))
    ph = np.repeat(hs, wtop)
    pw = np.arange(ph.size, dtype=np.int64) - np.repeat(np.cumsum(wtop) - wtop, wtop) + 1
    mtop = np.minimum(cmax, dmax // (ph * pw) - 1)
    keep = mtop >= 1
    ph, pw, mtop = ph[keep], pw[keep], mtop[keep]
    th = np.repeat(ph, mtop)
    tw = np.repeat(pw, mtop)
    tm = np.arange(th.size, dtype=np.int64) - np.repeat(np.cumsum(mtop) - mtop, mtop) + 1
    return th, tw, tm


@lru_cache(maxsize=256)  # a 2048-feature cblock's frontier is ~2 MB
def _enumerate(kind: ContestKind, args: FormalArgs, fab_h: int, fab_w: int, limit: int) -> _Core:
    convs = kernel_convs(kind, args)
    n = len(convs)
    dmax = max(fab_h, fab_w)
    kcap = dmax // 3 - (n - 1)  # a k_i above this makes the kernel wider than any fabric side
    examples: list[RejectedExample] = []
    counts = dict.fromkeys(ContestReason, 0)

    # step 1: height classes (h, w, m), each sub-conv at c_i = min(m, C_i)
    th, tw, tm = _triples(args.H, args.W, max(cv.C for cv in convs), dmax)
    cs = np.stack([np.minimum(tm, cv.C) for cv in convs], axis=1)
    tiles = np.stack([-(-cv.H // th) * -(-cv.W // tw) * -(-cv.C // cs[:, i]) for i, cv in enumerate(convs)], axis=1)
    kmin = np.stack([conv_min_k_array(cv, th, tw, cs[:, i], limit) for i, cv in enumerate(convs)], axis=1)
    height = th * tw * (cs.max(axis=1) + 1)

    # step 2: memory
    kmax = np.array([cv.K for cv in convs], dtype=np.int64)
    mem_ok = (kmin <= kmax).all(axis=1)
    n_mem = int((~mem_ok).sum())
    counts[ContestReason.MEMORY_OVER_LIMIT] = n_mem
    least_in_fabric = np.inf
    if n_mem:
        bad = np.flatnonzero(~mem_ok)
        least = _memory(convs, th[bad], tw[bad], cs[bad], np.broadcast_to(kmax, (bad.size, n)))
        # every triple is at most the fabric's longer side tall: with k at its top this is a lower bound on
        # the memory any execution arguments fitting the fabric need (narrower k only need more)
        least_in_fabric = float(least.min())
        for j in np.argsort(least, kind="stable")[:EXAMPLES_PER_REASON]:
            b = bad[j]
            ex = ExecArgs(int(th[b]), int(tw[b]), tuple(int(x) for x in cs[b]), tuple(int(x) for x in kmax))
            t = max(int(time_of_tiles_array(cv, tiles[b, i])) for i, cv in enumerate(convs))  # k_i = K_i: ceil(K/k) = 1
            reason = ContestReason.MEMORY_OVER_LIMIT
            examples.append(RejectedExample(ex, Orientation.R0, int(height[b]), 3 * int(kmax.sum()), t, float(least[j]), reason))
    th, tw, cs, tiles, kmin, height = th[mem_ok], tw[mem_ok], cs[mem_ok], tiles[mem_ok], kmin[mem_ok], height[mem_ok]

    # step 3: equivalent triples (same tile iterations ceil(H/h) ceil(W/w) ceil(C/c) and least k per sub-conv) keep the lowest
    key = np.concatenate((tiles, kmin), axis=1)
    if th.size:
        order = np.lexsort((height, *key.T[::-1]))
        sk = key[order]
        first = np.concatenate(([True], (sk[1:] != sk[:-1]).any(axis=1)))
        keep = np.sort(order[first])
        th, tw, cs, tiles, kmin, height = th[keep], tw[keep], cs[keep], tiles[keep], kmin[keep], height[keep]

    # step 4: time targets from every sub-conv's quotient representatives, then least k_i per target
    targets = []
    fastest_k = []  # per sub-conv: its largest listed k (the first past the width cap, or K)
    refused: list[tuple[int, np.ndarray, np.ndarray]] = []  # (sub-conv, triple, k) refused for memory
    for i, cv in enumerate(convs):
        reps = _quotient_ks(cv.K, kcap)
        fastest_k.append(int(reps[-1]))
        below = reps[None, :] < kmin[:, i : i + 1]
        counts[ContestReason.MEMORY_OVER_LIMIT] += int(below.sum())
        if below.any():
            t_idx, r_idx = np.nonzero(below)
            refused.append((i, t_idx, reps[r_idx]))
        k_i = np.minimum(np.maximum(kmin[:, i : i + 1], reps[None, :]), cv.K)
        targets.append(time_of_tiles_array(cv, tiles[:, i : i + 1] * -(-cv.K // k_i)))
    examples.extend(_memory_examples(convs, refused, th, tw, cs, kmin, tiles, height))
    tau = np.concatenate(targets, axis=1)
    tau.sort(axis=1)

    # Only targets in [lo, hi] can matter: above hi every sub-conv is already at its least k; below
    # lo some sub-conv needs a k past the width cap (lo uses the first listed k past the cap, so the
    # first too-wide rows are still listed as examples). Flatten to the surviving (triple, target)
    # pairs before the real work.
    def time_at(i: int, k: np.ndarray) -> np.ndarray:
        return time_of_tiles_array(convs[i], tiles[:, i] * -(-convs[i].K // k))

    lo = np.max([time_at(i, np.maximum(kmin[:, i], fastest_k[i])) for i in range(n)], axis=0)
    hi = np.max([time_at(i, kmin[:, i]) for i in range(n)], axis=0)
    valid = (tau >= lo[:, None]) & (tau <= hi[:, None])
    valid[:, 1:] &= tau[:, 1:] != tau[:, :-1]  # repeated targets
    rows_t, rows_j = np.nonzero(valid)  # row-major: per triple, targets ascending
    r_tau = tau[rows_t, rows_j]
    del tau, valid
    k_rows = np.empty((r_tau.size, n), dtype=np.int64)
    r_time = np.zeros(r_tau.size, dtype=np.int64)
    for i, cv in enumerate(convs):
        q = np.clip(max_tiles_within(cv, r_tau) // tiles[rows_t, i], 1, cv.K)  # >= 1 since the target >= lo
        k_i = np.maximum(kmin[rows_t, i], -(-cv.K // q))
        k_rows[:, i] = k_i
        r_time = np.maximum(r_time, time_of_tiles_array(cv, tiles[rows_t, i] * -(-cv.K // k_i)))
    r_width = 3 * k_rows.sum(axis=1)
    # within a triple, targets ascend and widths never grow: a row no narrower than the previous one
    # of its triple has the same height and is dominated by it (or shares its geometry rejection)
    stair = np.ones(r_tau.size, dtype=bool)
    stair[1:] = (rows_t[1:] != rows_t[:-1]) | (r_width[1:] < r_width[:-1])
    r_h, r_w, r_c = th[rows_t], tw[rows_t], cs[rows_t]
    r_height = height[rows_t]

    # step 5: both orientations, geometry per orientation, frontier on the fabric grid
    p_height = np.concatenate((r_height, r_width))
    p_width = np.concatenate((r_width, r_height))
    p_orient = np.concatenate((np.zeros(r_height.size, dtype=np.int8), np.ones(r_height.size, dtype=np.int8)))
    p_row = np.concatenate((np.arange(r_height.size), np.arange(r_height.size)))
    p_time = np.concatenate((r_time, r_time))
    p_stair = np.concatenate((stair, stair))

    def row_example(j: int, reason: ContestReason, note: str = "") -> RejectedExample:
        r = p_row[j]
        ex = ExecArgs(int(r_h[r]), int(r_w[r]), tuple(int(x) for x in r_c[r]), tuple(int(x) for x in k_rows[r]))
        mem = _kernel_memory(convs, ex)
        return RejectedExample(
            ex, ORIENTATIONS[int(p_orient[j])], int(p_height[j]), int(p_width[j]), int(p_time[j]), mem, reason, note
        )

    taller = p_height > fab_h
    wider = ~taller & (p_width > fab_w)
    counts[ContestReason.TALLER_THAN_FABRIC] = int(taller.sum())
    counts[ContestReason.WIDER_THAN_FABRIC] = int(wider.sum())
    for reason, mask in ((ContestReason.TALLER_THAN_FABRIC, taller), (ContestReason.WIDER_THAN_FABRIC, wider)):
        idx = np.flatnonzero(mask & p_stair)
        examples.extend(row_example(j, reason) for j in idx[_smallest(p_time[idx])])
    legal_mask = ~taller & ~wider
    legal = np.flatnonzero(legal_mask & p_stair)
    kept = legal[_frontier(p_height[legal], p_width[legal], p_time[legal], p_orient[legal])]
    on_front = np.zeros(p_time.size, dtype=bool)
    on_front[kept] = True
    dominated = np.flatnonzero(legal_mask & p_stair & ~on_front)
    counts[ContestReason.DOMINATED] = int(legal_mask.sum()) - int(kept.size)
    kept = kept[np.lexsort((kept, p_orient[kept], p_height[kept] * p_width[kept], p_time[kept]))]  # fastest first
    for j in dominated[_smallest(p_time[dominated])]:
        better = kept[(p_height[kept] <= p_height[j]) & (p_width[kept] <= p_width[j]) & (p_time[kept] <= p_time[j])]
        note = ""
        if better.size:
            b = better[0]
            note = f"by {p_height[b]}x{p_width[b]} time {p_time[b]:,} ({ORIENTATIONS[p_orient[b]].value})"
        examples.append(row_example(j, ContestReason.DOMINATED, note))
    rows = p_row[kept]
    smallest = None
    if kept.size == 0 and p_time.size:
        j = int(np.argmin(p_height * p_width))
        smallest = (int(p_height[j]), int(p_width[j]))
    memory = _memory(convs, r_h[rows], r_w[rows], r_c[rows], k_rows[rows])
    examined = counts[ContestReason.MEMORY_OVER_LIMIT] + int(p_time.size)
    core = _Core(
        r_h[rows], r_w[rows], r_c[rows], k_rows[rows], p_height[kept], p_width[kept], p_time[kept], memory, p_orient[kept],
        examined, tuple((r, counts[r]) for r in ContestReason if r is not ContestReason.LEGAL), tuple(examples), least_in_fabric,
        smallest,
    )  # fmt: skip
    for arr in (core.h, core.w, core.c, core.k, core.height, core.width, core.time, core.memory, core.orientation):
        arr.setflags(write=False)  # shared between identical kernels through the cache
    return core


def _smallest(values: np.ndarray, count: int = EXAMPLES_PER_REASON) -> np.ndarray:
    """Positions of the ``count`` smallest values, ascending (ties: the earlier first)."""
    if values.size > 4 * count:
        part = np.argpartition(values, count)[:count]
        threshold = values[part].max()
        cand = np.flatnonzero(values <= threshold)
    else:
        cand = np.arange(values.size)
    return cand[np.argsort(values[cand], kind="stable")][:count]


def _memory(convs: tuple[ConvArgs, ...], h: np.ndarray, w: np.ndarray, c: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Kernel memory (the largest sub-conv's) over rows, float64."""
    if h.size == 0:
        return np.zeros(0, dtype=np.float64)
    return np.max(np.stack([conv_memory_array(cv, h, w, c[:, i], k[:, i]) for i, cv in enumerate(convs)], axis=1), axis=1)


def _memory_examples(
    convs: tuple[ConvArgs, ...],
    refused: list[tuple[int, np.ndarray, np.ndarray]],
    th: np.ndarray,
    tw: np.ndarray,
    cs: np.ndarray,
    kmin: np.ndarray,
    tiles: np.ndarray,
    height: np.ndarray,
) -> list[RejectedExample]:
    """The fastest candidates refused for memory: one sub-conv at a k below its least, the others at theirs."""
    if not refused:
        return []
    cand: list[tuple[int, int, int, int]] = []  # (time of the refused sub-conv, sub-conv, triple, k)
    for i, t_idx, k_refused in refused:
        t_refused = time_of_tiles_array(convs[i], tiles[t_idx, i] * -(-convs[i].K // k_refused))
        for j in _smallest(t_refused):
            cand.append((int(t_refused[j]), i, int(t_idx[j]), int(k_refused[j])))
    out = []
    for _, i, row, k in sorted(cand)[:EXAMPLES_PER_REASON]:
        ks = [int(x) for x in np.minimum(kmin[row], [cv.K for cv in convs])]
        ks[i] = k
        ex = ExecArgs(int(th[row]), int(tw[row]), tuple(int(x) for x in cs[row]), tuple(ks))
        times = [int(time_of_tiles_array(cv, tiles[row, j] * -(-cv.K // ks[j]))) for j, cv in enumerate(convs)]
        note = f"sub-conv {i + 1} needs k >= {int(kmin[row, i])}"
        reason = ContestReason.MEMORY_OVER_LIMIT
        mem = _kernel_memory(convs, ex)
        out.append(RejectedExample(ex, Orientation.R0, int(height[row]), 3 * sum(ks), max(times), mem, reason, note))
    return out


def _kernel_memory(convs: tuple[ConvArgs, ...], ex: ExecArgs) -> float:
    """Exact kernel memory of one candidate, as a float."""
    return max(float(conv_memory(cv, ex.h, ex.w, c, k)) for cv, c, k in zip(convs, ex.c, ex.k, strict=True))


def _ranks(values: np.ndarray) -> tuple[np.ndarray, int]:
    """1-based rank of each value among the distinct values (rank 0 is left for an empty border), and their count."""
    present = np.bincount(values) > 0  # values are tile counts within the fabric: small non-negative integers
    rank = np.cumsum(present)
    return rank[values].astype(np.int64), int(rank[-1])


def _frontier(height: np.ndarray, width: np.ndarray, time: np.ndarray, orient: np.ndarray) -> np.ndarray:
    """Positions of the (height, width, time) Pareto frontier: one row per kept cell, the fastest (R0, then first) of it.

    Heights and widths are replaced by their ranks, so the grid is (distinct heights) x (distinct widths)
    whatever the fabric's size; dominance only compares them, so ranks decide it exactly as values do.
    """
    if time.size == 0:
        return np.zeros(0, dtype=np.int64)
    hr, n_h = _ranks(height)
    wr, n_w = _ranks(width)
    cell = hr * (n_w + 1) + wr
    if int(time.max()) < 1 << 40 and int(cell.max()) < 1 << 22:
        # one sort on a packed key (cell, time, orientation) is several times faster than a lexsort
        order = np.argsort((cell << 41) | (time << 1) | orient.astype(np.int64), kind="stable")
    else:
        order = np.lexsort((orient, time, cell))
    sc = cell[order]
    first = np.concatenate(([True], sc[1:] != sc[:-1]))
    best = order[first]  # the fastest row of each occupied cell (R0 first, then the earliest)
    grid = np.full((n_h + 1, n_w + 1), _INF, dtype=np.int64)
    grid[hr[best], wr[best]] = time[best]
    grid = np.minimum.accumulate(np.minimum.accumulate(grid, axis=0), axis=1)
    # a cell's row is dominated when a cell one rank lower or one rank narrower already reaches its time
    below = grid[hr[best] - 1, wr[best]]
    left = grid[hr[best], wr[best] - 1]
    keep = (time[best] < below) & (time[best] < left)
    return np.sort(best[keep])
