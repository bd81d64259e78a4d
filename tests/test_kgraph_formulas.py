"""The kernel library's formulas against hand-computed values (the arithmetic is in the comments)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from wsealloc.cost.ispd2020 import (
    LIBRARY,
    conv_height,
    conv_memory,
    conv_memory_array,
    conv_min_k,
    conv_time,
    conv_time_array,
    conv_width,
    exec_range_errors,
    exec_ranges,
    kernel_convs,
    kernel_perf,
    max_tiles_within,
    smallest_memory,
    time_of_tiles,
)
from wsealloc.graph.contest import BlockArgs, ContestKind, ConvArgs, ExecArgs

STRIDED = ConvArgs(H=14, W=14, R=3, S=3, C=512, K=512, T=2, U=2)


def test_conv_geometry() -> None:
    assert conv_height(2, 3, 4) == 30  # 2 * 3 * (4 + 1)
    assert conv_width(7) == 21  # 3 * 7


def test_conv_time_exact_case() -> None:
    # ceil(14/1) * ceil(14/2) * ceil(512/54) * ceil(512/25) = 14 * 7 * 10 * 21 = 20,580 iterations per tile
    # times R * S / (T * U) = 9 / 4: 20,580 * 9 / 4 = 46,305 exactly
    assert conv_time(STRIDED, 1, 2, 54, 25) == 46305


def test_conv_time_rounds_down_and_u_is_the_second_stride() -> None:
    odd = ConvArgs(H=7, W=7, R=3, S=3, C=3, K=3, T=2, U=2)
    # 7 * 7 * 3 * 3 = 441 iterations; 441 * 9 / 4 = 992.25 -> 992 (reading 2: floor)
    assert conv_time(odd, 1, 1, 1, 1) == 992
    # T = 2, U = 1: 441 * 9 / (2 * 1) = 1,984.5 -> 1,984 (reading 1: time / (T * U))
    assert conv_time(ConvArgs(H=7, W=7, R=3, S=3, C=3, K=3, T=2, U=1), 1, 1, 1, 1) == 1984
    # every split at its top: one iteration per tile, 1 * 9 / 4 = 2.25 -> 2
    assert conv_time(odd, 7, 7, 3, 3) == 2
    assert time_of_tiles(odd, 441) == 992
    # the inverse: floor(P * 9 / 4) <= 992  <=>  9 P < 993 * 4 = 3,972  <=>  P <= 441 (9 * 441 = 3,969; 9 * 442 = 3,978)
    assert int(max_tiles_within(odd, np.array(992))) == 441


def test_conv_memory_is_exact() -> None:
    # C/c * K/k * R * S = 512/54 * 512/25 * 9 = 2,359,296 / 1,350
    # (W+S-1)/w * (H+R-1)/h * K/k = 16/2 * 16/1 * 512/25 = 65,536 / 25
    # sum = 65,536 / 15 = 4,369.0666...
    assert conv_memory(STRIDED, 1, 2, 54, 25) == Fraction(65536, 15)
    one = np.array([1])
    assert conv_memory_array(STRIDED, one, 2 * one, 54 * one, 25 * one)[0] == pytest.approx(65536 / 15)


def test_least_k_for_memory_is_exact() -> None:
    conv = ConvArgs(H=14, W=14, R=1, S=1, C=1024, K=512, T=1, U=1)
    # h = w = 14, c = 1: memory = 1024 * 512 / k + 1 * 1 * 512 / k = 524,800 / k <= 24,576  <=>  k >= 21.35..: k = 22
    assert conv_min_k(conv, 14, 14, 1, 24576) == 22
    assert conv_memory(conv, 14, 14, 1, 22) <= 24576 < conv_memory(conv, 14, 14, 1, 21)
    # a limit met exactly: memory = 524,800 / k = 26,240 at k = 20
    assert conv_min_k(conv, 14, 14, 1, 26240) == 20


def test_dblock_by_hand() -> None:
    args = BlockArgs(F=32, H=8, W=8)
    convs = kernel_convs(ContestKind.DBLOCK, args)
    assert convs == (
        ConvArgs(8, 8, 1, 1, 32, 8, 1, 1),  # 1x1 F -> F/4
        ConvArgs(8, 8, 3, 3, 8, 8, 1, 1),  # 3x3 F/4 -> F/4
        ConvArgs(8, 8, 1, 1, 8, 32, 1, 1),  # 1x1 F/4 -> F
    )
    p = kernel_perf(ContestKind.DBLOCK, args, ExecArgs(2, 2, (4, 2, 2), (2, 2, 8)))
    # times: 4*4*ceil(32/4)*ceil(8/2) = 512; 4*4*4*4*9 = 2,304; 4*4*4*ceil(32/8) = 256 -> max 2,304
    assert p.conv_times == (512, 2304, 256) and p.time == 2304
    # heights 2*2*(c+1): 20, 12, 12 -> 20; widths 3*(2 + 2 + 8) = 36
    assert (p.height, p.width) == (20, 36)
    # memories: 32/4*8/2 + 8/2*8/2*8/2 = 32 + 64 = 96; 8/2*8/2*9 + 10/2*10/2*8/2 = 144 + 100 = 244;
    #           8/2*32/8 + 4*4*32/8 = 16 + 64 = 80
    assert p.conv_memories == (96, 244, 80) and p.memory == 244


def test_cblock_by_hand() -> None:
    args = BlockArgs(F=32, H=8, W=8)
    assert kernel_convs(ContestKind.CBLOCK, args) == (
        ConvArgs(8, 8, 1, 1, 16, 8, 1, 1),  # 1x1 F/2 -> F/4
        ConvArgs(8, 8, 3, 3, 8, 8, 2, 2),  # 3x3 F/4 -> F/4, stride 2
        ConvArgs(4, 4, 1, 1, 8, 32, 1, 1),  # 1x1 F/4 -> F on the H/2 x W/2 image
        ConvArgs(8, 8, 1, 1, 16, 32, 2, 2),  # 1x1 F/2 -> F, stride 2
    )
    p = kernel_perf(ContestKind.CBLOCK, args, ExecArgs(2, 2, (4, 2, 2, 4), (2, 2, 8, 8)))
    # times: 4*4*4*4 = 256; 4*4*4*4*9/4 = 576; 2*2*4*4 = 64; 4*4*4*4/4 = 64 -> 576
    assert p.conv_times == (256, 576, 64, 64) and p.time == 576
    # height 2*2*(4+1) = 20, width 3*(2 + 2 + 8 + 8) = 60
    assert (p.height, p.width) == (20, 60)
    # memories: 16/4*8/2 + 4*4*8/2 = 16 + 64 = 80; 4*4*9 + 5*5*4 = 244; 4*4 + 2*2*4 = 32; 4*4 + 4*4*4 = 80
    assert p.conv_memories == (80, 244, 32, 80) and p.memory == 244


def test_cblock_half_image_rounds_up() -> None:
    # reading 5: a 7x7 cblock's third conv runs on ceil(7/2) = 4
    assert kernel_convs(ContestKind.CBLOCK, BlockArgs(F=8, H=7, W=7))[2] == ConvArgs(4, 4, 1, 1, 2, 8, 1, 1)


def test_contest_example_solution_figures() -> None:
    # the Example Benchmark's 'dblock( 56 56 256 4 4 8 8 8 8 64 16 )': height 4*4*9 = 144, width 3*(8+64+16) = 264
    p = kernel_perf(ContestKind.DBLOCK, BlockArgs(F=256, H=56, W=56), ExecArgs(4, 4, (8, 8, 8), (8, 64, 16)))
    assert (p.height, p.width) == (144, 264) and p.memory <= 24576
    # conv1: ceil(56/4)^2 * ceil(256/8) * ceil(64/8) = 196 * 32 * 8 = 50,176
    assert p.conv_times[0] == 50176


def test_exec_ranges_and_errors() -> None:
    args = BlockArgs(F=32, H=8, W=8)
    assert exec_ranges(ContestKind.DBLOCK, args) == (
        ("h", 1, 8), ("w", 1, 8), ("c1", 1, 32), ("c2", 1, 8), ("c3", 1, 8), ("k1", 1, 8), ("k2", 1, 8), ("k3", 1, 32)
    )  # fmt: skip
    assert exec_range_errors(ContestKind.DBLOCK, args, ExecArgs(1, 1, (1, 1, 1), (1, 1, 1))) == ()
    assert exec_range_errors(ContestKind.DBLOCK, args, ExecArgs(0, 9, (1, 9, 1), (1, 1, 1))) == (
        "h=0 not in [1, 8]", "w=9 not in [1, 8]", "c2=9 not in [1, 8]"
    )  # fmt: skip
    assert "takes 3 c and 3 k" in exec_range_errors(ContestKind.DBLOCK, args, ExecArgs(1, 1, (1,), (1,)))[0]
    assert LIBRARY[ContestKind.CONV].exec_names == ("h", "w", "c", "k")
    with pytest.raises(ValueError, match="k=9 not in"):
        kernel_perf(ContestKind.CONV, ConvArgs(4, 4, 1, 1, 4, 8, 1, 1), ExecArgs(1, 1, (1,), (9,)))


def test_smallest_memory_is_at_the_top_of_every_argument() -> None:
    conv = ConvArgs(H=4, W=4, R=3, S=3, C=8, K=8, T=1, U=1)
    # 8/8 * 8/8 * 9 + 6/4 * 6/4 * 8/8 = 9 + 2.25
    assert smallest_memory(ContestKind.CONV, conv) == Fraction(45, 4)


def test_vectorised_formulas_match_the_scalar_ones() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        conv = ConvArgs(*(int(x) for x in rng.integers(1, 20, size=6)), T=int(rng.integers(1, 4)), U=int(rng.integers(1, 4)))
        h, w = rng.integers(1, conv.H + 1, 8), rng.integers(1, conv.W + 1, 8)
        c, k = rng.integers(1, conv.C + 1, 8), rng.integers(1, conv.K + 1, 8)
        times = conv_time_array(conv, h, w, c, k)
        for i in range(8):
            assert times[i] == conv_time(conv, int(h[i]), int(w[i]), int(c[i]), int(k[i]))
            assert int(max_tiles_within(conv, times[i : i + 1])[0]) >= 1
