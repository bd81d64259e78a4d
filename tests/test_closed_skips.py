"""The strip construction's second ONNX sequence (``place.closed_skips``): a skip's source laid just
before the skip's consumer. By hand, and a layout where only that order reaches the best bottleneck."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.objective import Latency
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers.place import SKIP_SPAN, closed_skips, construct_best, sequences


def _problem(flows: list[tuple[int, int]], n: int, cols: int = 80, fast: tuple[int, ...] = ()) -> PlacementProblem:
    """``n`` kernels on an 8 x ``cols`` mesh, each on all 8 rows and at least 20 columns: 100 cycles
    (50 for the kernels in ``fast``); every flow 4 bytes (no congestion: hops decide)."""
    heights = np.array([8])

    def table(cycles: int) -> object:
        best = np.full((1, cols + 1), INF, dtype=np.int64)
        best[:, 20:] = cycles
        return shape_table(heights, best, np.zeros_like(best, dtype=np.int32))

    mesh = MeshParams(8, cols, 8, cols, 4.0, 1, 8, cols, 0)
    src, dst = (np.array(v, dtype=np.int64) for v in zip(*flows, strict=True))
    fl = Flows(src, dst, np.full(src.size, 4.0), np.arange(src.size))
    classes = tuple(1 if k in fast else 0 for k in range(n))
    tables = (table(100), table(50))
    return PlacementProblem(tuple(f"k{i}" for i in range(n)), classes, tables, mesh, np.zeros((8, cols), bool), "ignore", fl, 100)  # type: ignore[arg-type]


def test_closed_skips_by_hand() -> None:
    # a chain 0 -> 1 -> ... -> 7 with skips 1 -> 4 (around 2, 3) and 4 -> 6 (around 5): 1 moves just
    # before 4; 4 ends a moved chain, so it stays (moves would cascade down a residual stream)
    chain = [(k, k + 1) for k in range(7)]
    problem = _problem([*chain, (1, 4), (4, 6)], 8, cols=200)
    order = closed_skips(problem)
    assert order is not None and order.tolist() == [0, 2, 3, 1, 4, 5, 6, 7]
    found = sequences(problem)
    assert len(found) == 2 and found[0] is None and np.array_equal(found[1], order)  # type: ignore[arg-type]
    # no skip: the dataflow order only
    plain = _problem(chain, 8, cols=200)
    assert closed_skips(plain) is None and sequences(plain) == [None]


def test_closed_skips_leaves_fan_outs_and_long_chains() -> None:
    # 0 feeds 1, 2 and 3 (a norm feeding three projections), none reading the one before it: no chain
    fan = _problem([(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)], 5, cols=200)
    assert closed_skips(fan) is None
    # a skip around more than SKIP_SPAN kernels stays where the dataflow order has it
    n = SKIP_SPAN + 3
    long = _problem([*((k, k + 1) for k in range(n - 1)), (0, SKIP_SPAN + 1)], n, cols=400)
    assert closed_skips(long) is None
    # a source also read by a kernel before it (a backward pass's flow) stays
    back = _problem([(0, 1), (1, 2), (2, 3), (3, 4), (1, 4), (1, 0)], 5, cols=200)
    assert closed_skips(back) is None


def test_the_closed_order_wins_where_the_skip_consumer_has_no_cycles_to_spare() -> None:
    # one band of four 20-column kernels (every kernel needs all 8 rows): in the dataflow order 0 1 2 3
    # the skip 0 -> 3 crosses kernels 1 and 2 (41 hops: kernel 3 at 141 cycles); laid 1 2 0 3 it is
    # one hop and 3 reads 2 over 21 (121), while kernel 1 (50 cycles) reads 0 over 21 hops (71)
    problem = _problem([(0, 1), (1, 2), (2, 3), (0, 3)], 4, fast=(1,))
    assert closed_skips(problem) is not None
    built = construct_best(problem, Deadline.after(10))
    placed = None if built is None else built.placed
    assert placed is not None and not problem.violations(placed.rects)
    stage, _ = problem.evaluate(placed.rects, placed.latency)
    assert int(stage.max()) == 121
    left_to_right = np.argsort(placed.rects[:, 1], kind="stable").tolist()
    assert left_to_right in ([1, 2, 0, 3], [3, 0, 2, 1])


def test_a_sequence_renumbers_the_users_rules_with_the_kernels() -> None:
    # kernel i of the sequence is kernel order[i]: corners, areas and touch groups follow their kernels
    problem = _problem([(0, 1), (1, 2), (2, 3), (0, 3)], 4, fast=(1,))
    ruled = replace(problem, pins=((0, 0), None, None, (0, 60)), fences=(None, (0, 0, 8, 40), None, None), touch=((0, 3),))
    seq = ruled.in_sequence(np.array([1, 2, 0, 3]))
    assert seq.names == ("k1", "k2", "k0", "k3")
    assert seq.pins == (None, None, (0, 0), (0, 60)) and seq.fences == ((0, 0, 8, 40), None, None, None)
    assert seq.touch == ((2, 3),)


def test_a_skip_around_exactly_skip_span_kernels_closes_and_a_tokens_path_keeps_its_order() -> None:
    n = SKIP_SPAN + 2
    chain = [(k, k + 1) for k in range(n - 1)]
    problem = _problem([*chain, (0, SKIP_SPAN)], n, cols=400)
    order = closed_skips(problem)
    assert order is not None and order.tolist() == [*range(1, SKIP_SPAN), 0, *range(SKIP_SPAN, n)]
    # a token's path (``path_length`` reads producers in index order): the dataflow order only
    preds = tuple(tuple(sorted({s for s, t in [*chain, (0, SKIP_SPAN)] if t == k})) for k in range(n))
    assert sequences(replace(problem, objective=Latency(), preds=preds)) == [None]
