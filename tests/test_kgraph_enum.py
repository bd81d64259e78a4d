"""Op-model enumeration of contest kernels against brute force: the pruned frontier loses no optimum."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from wsealloc.cost.ispd2020 import kernel_convs, kernel_perf
from wsealloc.errors import InfeasibleError
from wsealloc.frontend.kgraph import parse_kgraph
from wsealloc.graph.contest import BlockArgs, ContestKernel, ContestKind, ConvArgs, ExecArgs, Fabric, FormalArgs, Orientation
from wsealloc.opmodels.contest import ContestOpModels, ContestReason, enumerate_contest, enumerate_graph

DATA = Path(__file__).resolve().parent / "data" / "kgraph"
NONE = np.iinfo(np.int64).max


def fabric(width: int, height: int, memlimit: int) -> Fabric:
    return Fabric("t", width, height, memlimit, 1, 1, 0)


def kernel(kind: ContestKind, args: FormalArgs) -> ContestKernel:
    return ContestKernel(0, 1, "k1", kind, args)


def brute(kind: ContestKind, args: FormalArgs, fab: Fabric, *, memory: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Every execution argument through the scalar spec: best time for each (height bound, width bound), and min area per time."""
    convs = kernel_convs(kind, args)
    side = max(fab.width, fab.height)
    best = np.full((fab.height + 1, fab.width + 1), NONE, dtype=np.int64)
    legal: list[tuple[int, int]] = []  # (time, area)
    for h, w in itertools.product(range(1, args.H + 1), range(1, args.W + 1)):
        for cs in itertools.product(*(range(1, cv.C + 1) for cv in convs)):
            if h * w * (max(cs) + 1) > side:  # taller than the fabric's longer side: illegal either way
                continue
            for ks in itertools.product(*(range(1, cv.K + 1) for cv in convs)):
                if 3 * sum(ks) > side:
                    continue
                p = kernel_perf(kind, args, ExecArgs(h, w, cs, ks))
                if memory and p.memory > fab.memlimit:
                    continue
                for ph, pw in ((p.height, p.width), (p.width, p.height)):
                    if ph <= fab.height and pw <= fab.width:
                        best[ph, pw] = min(best[ph, pw], p.time)
                        legal.append((p.time, p.area))
    grid = np.minimum.accumulate(np.minimum.accumulate(best, axis=0), axis=1)
    return grid, np.array(sorted(legal), dtype=np.int64).reshape(-1, 2)


def frontier_size(grid: np.ndarray) -> int:
    """Models on the frontier of a brute-force ``grid`` (best time within each height x width bound):
    one per (height, width) cell strictly faster than every cell at most as tall and as wide."""
    above = np.full_like(grid, NONE)
    above[1:, :] = grid[:-1, :]
    left = np.full_like(grid, NONE)
    left[:, 1:] = grid[:, :-1]
    return int(((grid < NONE) & (grid < np.minimum(above, left))).sum())


def check_against_brute(kind: ContestKind, args: FormalArgs, fab: Fabric) -> ContestOpModels:
    m = enumerate_contest(kernel(kind, args), fab)
    grid, legal = brute(kind, args, fab)
    assert len(m) == frontier_size(grid)  # no more models than the frontier, and none of it missing
    # every kept model is legal and its figures are the spec's
    for i in range(len(m)):
        p = kernel_perf(kind, args, m.exec_args(i))
        dims = (p.height, p.width) if m.orientation_of(i) is Orientation.R0 else (p.width, p.height)
        assert dims == (m.height[i], m.width[i]) and p.time == m.time[i] and p.memory <= fab.memlimit
        assert m.height[i] <= fab.height and m.width[i] <= fab.width
        assert m.memory[i] == pytest.approx(float(p.memory))
    # no kept model is dominated by another kept one
    hh, ww, tt = m.height, m.width, m.time
    dominated = (hh[:, None] <= hh[None, :]) & (ww[:, None] <= ww[None, :]) & (tt[:, None] <= tt[None, :])
    np.fill_diagonal(dominated, False)
    assert not dominated.any()
    # for every (height bound, width bound) the frontier is as fast as the brute-force best
    for hb in range(1, fab.height + 1):
        for wb in range(1, fab.width + 1):
            i = m.fastest_fitting(hb, wb)
            assert (NONE if i is None else int(m.time[i])) == grid[hb, wb], (hb, wb)
    # and the smallest area within each time target too
    for t in np.unique(legal[:, 0]):
        assert m.min_area_within(int(t)) == legal[legal[:, 0] <= t, 1].min()
    assert m.min_area_within(int(legal[:, 0].min()) - 1) is None
    return m


CASES = [
    (ContestKind.CONV, ConvArgs(H=4, W=3, R=3, S=3, C=5, K=6, T=1, U=1), fabric(20, 14, 60)),
    (ContestKind.CONV, ConvArgs(H=5, W=5, R=3, S=3, C=4, K=7, T=2, U=2), fabric(30, 9, 40)),
    (ContestKind.CONV, ConvArgs(H=6, W=6, R=1, S=1, C=8, K=5, T=2, U=1), fabric(12, 40, 30)),
    (ContestKind.CONV, ConvArgs(H=3, W=7, R=2, S=1, C=6, K=4, T=1, U=2), fabric(25, 25, 1000)),
    (ContestKind.DBLOCK, BlockArgs(F=8, H=3, W=2), fabric(40, 30, 35)),
    (ContestKind.DBLOCK, BlockArgs(F=4, H=2, W=4), fabric(25, 21, 30)),
    (ContestKind.CBLOCK, BlockArgs(F=4, H=3, W=4), fabric(30, 18, 30)),
    (ContestKind.CBLOCK, BlockArgs(F=8, H=2, W=2), fabric(24, 20, 60)),
    (ContestKind.CBLOCK, BlockArgs(F=4, H=5, W=3), fabric(36, 36, 1000)),
]


@pytest.mark.parametrize(("kind", "args", "fab"), CASES, ids=[f"{c[0].value}-{i}" for i, c in enumerate(CASES)])
def test_frontier_matches_brute_force(kind: ContestKind, args: FormalArgs, fab: Fabric) -> None:
    check_against_brute(kind, args, fab)


def test_tiny_fabric_instance_against_brute_force() -> None:
    g = parse_kgraph(DATA / "tiny_fabric.kgraph")
    for k in g.kernels:
        check_against_brute(k.kind, k.args, g.fabric)


def test_both_orientations_on_a_narrow_fabric() -> None:
    # 12 wide, 40 tall: widths 3k <= 12 at R0, so the wider shapes only fit turned (R90: height along x)
    args = ConvArgs(H=6, W=6, R=1, S=1, C=8, K=5, T=2, U=1)
    m = enumerate_contest(kernel(ContestKind.CONV, args), fabric(12, 40, 30))
    turned = [i for i in range(len(m)) if m.orientation_of(i) is Orientation.R90]
    assert turned and any(m.orientation_of(i) is Orientation.R0 for i in range(len(m)))
    for i in turned:
        p = kernel_perf(ContestKind.CONV, args, m.exec_args(i))
        assert (m.height[i], m.width[i]) == (p.width, p.height)
    counts = m.rejected_counts()
    assert counts[ContestReason.WIDER_THAN_FABRIC] > 0  # R0 shapes wider than 12


def test_memory_filter_removes_faster_models() -> None:
    kind, args = ContestKind.CONV, ConvArgs(H=4, W=3, R=3, S=3, C=5, K=6, T=1, U=1)
    tight, loose = fabric(20, 14, 60), fabric(20, 14, 10**6)
    with_memory, _ = brute(kind, args, tight)
    without, _ = brute(kind, args, tight, memory=False)
    assert (with_memory > without).any()  # the limit binds somewhere
    m = enumerate_contest(kernel(kind, args), tight)
    assert m.rejected_counts()[ContestReason.MEMORY_OVER_LIMIT] > 0
    assert all(e.memory > 60 for e in m.rejected_examples if e.reason is ContestReason.MEMORY_OVER_LIMIT)
    assert len(enumerate_contest(kernel(kind, args), loose)) >= len(m)


def test_rejected_examples_carry_their_reason() -> None:
    g = parse_kgraph(DATA / "tiny_chain.kgraph")
    m = enumerate_contest(g.by_name("k1"), g.fabric)
    counts = m.rejected_counts()
    assert set(counts) == {
        ContestReason.MEMORY_OVER_LIMIT,
        ContestReason.TALLER_THAN_FABRIC,
        ContestReason.WIDER_THAN_FABRIC,
        ContestReason.DOMINATED,
    }
    assert m.examined >= sum(counts.values()) + len(m) - counts[ContestReason.MEMORY_OVER_LIMIT]
    assert m.raw_space == 2 * 16 * 16 * 8 * 16
    for e in m.rejected_examples:
        p = kernel_perf(ContestKind.CONV, g.by_name("k1").args, e.exec_args)
        assert e.time == p.time and e.memory == pytest.approx(float(p.memory))
        if e.reason is ContestReason.TALLER_THAN_FABRIC:
            assert e.height > g.fabric.height
        if e.reason is ContestReason.WIDER_THAN_FABRIC:
            assert e.width > g.fabric.width
        if e.reason is ContestReason.MEMORY_OVER_LIMIT:
            assert p.memory > g.fabric.memlimit
        if e.reason is ContestReason.DOMINATED:
            assert e.note.startswith("by ")


def test_queries() -> None:
    g = parse_kgraph(DATA / "tiny_chain.kgraph")
    for m in enumerate_graph(g):
        assert m.fastest_time == int(m.time.min()) and (np.diff(m.time) >= 0).all()
        assert m.fastest_fitting(1, 1) is None
        i = m.fastest_fitting(g.fabric.height, g.fabric.width)
        assert i is not None and m.time[i] == m.fastest_time
        for hb in (10, 40, g.fabric.height):
            stair = m.staircase(hb)
            if stair.size == 0:
                continue
            assert (m.height[stair] <= hb).all()
            assert (np.diff(m.width[stair]) > 0).all() and (np.diff(m.time[stair]) < 0).all()
            j = m.fastest_fitting(hb, g.fabric.width)
            assert j is not None and m.time[j] == m.time[stair[-1]]
        row = m.row(0)
        assert row["orientation"] in ("R0", "R90") and row["time"] == m.fastest_time


def test_identical_kernels_share_one_enumeration() -> None:
    fab = fabric(64, 64, 1000)
    a = enumerate_contest(ContestKernel(0, 1, "a", ContestKind.DBLOCK, BlockArgs(8, 4, 4)), fab)
    b = enumerate_contest(ContestKernel(1, 2, "b", ContestKind.DBLOCK, BlockArgs(8, 4, 4)), fab)
    assert a.kernel.name == "a" and b.kernel.name == "b" and a.time is b.time
    assert not a.time.flags.writeable


def test_no_model_under_the_memory_limit_names_the_kernel() -> None:
    args = ConvArgs(H=4, W=4, R=3, S=3, C=8, K=8, T=1, U=1)  # least memory 8/8*8/8*9 + 6/4*6/4 = 11.25
    with pytest.raises(InfeasibleError, match=r"kernel k1 \(conv H=4 .*\) needs at least 11.25 memory .* memlimit 10"):
        enumerate_contest(kernel(ContestKind.CONV, args), fabric(633, 633, 10))


def test_no_model_within_the_fabric() -> None:
    args = ConvArgs(H=1, W=1, R=1, S=1, C=64, K=64, T=1, U=1)
    # every model is at least 3 wide and 2 tall: nothing fits 2 x 2
    with pytest.raises(InfeasibleError, match="fit the 2x2 fabric; the smallest is 2x3 tiles"):
        enumerate_contest(kernel(ContestKind.CONV, args), fabric(2, 2, 10**6))
    # memory-legal models exist (large k), but none fits 12 x 12
    with pytest.raises(InfeasibleError, match="within memlimit 100 fit the 12x12 fabric; the smallest is 6x27 tiles"):
        enumerate_contest(kernel(ContestKind.CONV, args), fabric(12, 12, 100))
    # K = 1: memory = 64/c + 1 <= 5 needs c >= 16, 17 tall; within 12 x 12 (c <= 11) the least is 64/11 + 1 = 6.8
    one = ConvArgs(H=1, W=1, R=1, S=1, C=64, K=1, T=1, U=1)
    with pytest.raises(InfeasibleError, match=r"within the 12x12 fabric it needs at least 6.82 memory per tile"):
        enumerate_contest(kernel(ContestKind.CONV, one), fabric(12, 12, 5))


def test_quotient_representatives_match_the_full_scan() -> None:
    """``_quotient_ks`` lists the same k as a scan over every k in 1..total (it was that scan: O(total)
    memory, 16 GB for K = 2^31 - 1), for every cap, below 1 and past the total included."""
    from wsealloc.opmodels.contest import _quotient_ks

    def scan(total: int, cap: int) -> np.ndarray:
        q = np.unique(-(-total // np.arange(1, total + 1, dtype=np.int64)))
        ks = np.unique(-(-total // q))
        return np.concatenate((ks[ks <= cap], ks[ks > cap][:1]))

    for total in range(1, 160):
        for cap in range(-2, 170):
            got = _quotient_ks(total, cap)
            assert got.dtype == np.int64 and np.array_equal(got, scan(total, cap)), (total, cap)
    for total, cap in ((1_000_003, 211), (999_999, 1000), (65_536, 7)):
        assert np.array_equal(_quotient_ks(total, cap), scan(total, cap))


def test_a_huge_k_enumerates_in_small_memory() -> None:
    """A conv with K near 2^31 (within the reader's limits) is enumerated without an O(K) array (it was
    killed for memory, 24 GB, in ``inspect``); it is infeasible there, and says why."""
    import resource

    from wsealloc.opmodels.contest import contest_rejections

    big = kernel(ContestKind.CONV, ConvArgs(H=4, W=4, R=1, S=1, C=4, K=2**31 - 1, T=1, U=1))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rejections = contest_rejections(big, fabric(633, 633, 24576))
    assert rejections.examined > 0 and "no execution arguments within memlimit 24,576" in rejections.infeasible
    with pytest.raises(InfeasibleError, match="kernel k1"):
        enumerate_contest(big, fabric(633, 633, 24576))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KiB: well under 0.5 GiB


def test_a_kernel_beyond_exact_arithmetic_is_refused_by_name() -> None:
    from wsealloc.errors import ModelLoadError
    from wsealloc.opmodels.contest import contest_rejections

    huge = ContestKernel(0, 2, "k2", ContestKind.CBLOCK, BlockArgs(F=2**31 - 4, H=16, W=16), line=14)
    for call in (enumerate_contest, contest_rejections):
        with pytest.raises(ModelLoadError, match=r"kernel k2 \(line 14: cblock F=2147483644 H=16 W=16\) is too large"):
            call(huge, fabric(633, 633, 24576))
