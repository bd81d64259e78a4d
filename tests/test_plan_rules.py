"""The plan's summary rules (``wsealloc.plan.rules``), shared by the builder and the verifier: hand values."""

from __future__ import annotations

import pytest

from wsealloc.plan import rules
from wsealloc.plan.schema import BoundBy


@pytest.mark.parametrize(
    ("compute", "noc", "latency", "comm", "expected"),
    [
        (100, 50, 120, 0, BoundBy.COMPUTE),  # compute >= NoC, no communication
        (50, 100, 120, 0, BoundBy.NOC),
        (100, 100, 120, 0, BoundBy.COMPUTE),  # a tie goes to compute
        (100, 50, 120, 13, BoundBy.COMPUTE),  # 13 < 10% of 133
        (100, 50, 120, 14, BoundBy.COMPUTE_COMMUNICATION),  # 14 >= 13.4 = 10% of 134
        (50, 100, 120, 30, BoundBy.NOC_COMMUNICATION),
        (100, 50, 120, 101, BoundBy.COMMUNICATION),  # more than compute and NoC alone
    ],
)
def test_bound_by(compute: int, noc: int, latency: int, comm: int, expected: BoundBy) -> None:
    assert rules.bound_by(compute, noc, latency, comm) is expected


def test_bound_by_the_off_wafer_stream() -> None:
    # weight streaming: a turn of 300 cycles whose weights take 300 to stream in, 100 of compute
    assert rules.bound_by(100, 50, 300, 0, stream=300) is BoundBy.STREAM
    assert rules.bound_by(400, 50, 400, 0, stream=300) is BoundBy.COMPUTE  # the stream hides under compute
    assert rules.bound_by(10, 10, 100, 500, stream=100) is BoundBy.COMMUNICATION  # communication above all three


def test_bottleneck_is_the_first_of_the_slowest() -> None:
    assert rules.bottleneck_index([5, 9, 3, 9]) == 1
    assert rules.bottleneck_index([7]) == 0


def test_gap_and_optimality() -> None:
    assert rules.gap(200, 150) == 0.25  # (200 - 150) / 200
    assert rules.gap(0, 0) == 0.0 and rules.gap(100, None) is None
    assert rules.gap(100, 120) == 0.0  # never negative
    assert rules.proven_optimal(150, 150) and not rules.proven_optimal(151, 150) and not rules.proven_optimal(1, None)


def test_throughput_and_speedup() -> None:
    assert rules.throughput(1.1e9, 1100) == 1e6
    assert rules.throughput(1e9, 0) == 1e9  # a zero bottleneck counts as one cycle
    assert rules.speedup(300, 200) == 1.5 and rules.speedup(None, 200) is None and rules.speedup(300, 0) is None


def test_pipeline_stage_load_and_its_bottleneck() -> None:
    # a wafer whose kernels take 100 cycles, receiving its cut in 80 and sending the next in 120
    assert rules.stage_load(100, 80, 120) == 120
    assert rules.transfer_bound(100, 80, 120) and not rules.transfer_bound(100, 100, 100)
    assert rules.receives_slowest_cut(80, 120) == "next" and rules.receives_slowest_cut(120, 120) == "first"
