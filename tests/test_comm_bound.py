"""The bound that counts communication (issue 37, ``problem/comm_bound.py``): never above the best
layout of a tiny wafer found by trying every layout, never below the allocation bound, the same number
from the verifier's own code, and checked by ``verify`` in a plan (``tests/test_plan.py``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from wsealloc.cost.comm import MeshParams, comm_costs
from wsealloc.problem.comm_bound import CommBoundProblem, Shapes, comm_bound_problem, communication_bound
from wsealloc.problem.dual_feasible import side_functions
from wsealloc.problem.flows import Flows

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = ROOT / "models" / "tiny" / "attention.onnx"


def _mesh(rows: int, cols: int, die: tuple[int, int] = (100, 100), penalty: int = 0) -> MeshParams:
    return MeshParams(rows, cols, die[0], die[1], 4.0, 1, die[0], die[1], penalty)


def overlap(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether rectangles (row, col, rows, cols) share a core."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def best_layout(p: CommBoundProblem) -> int | None:
    """The least bottleneck over every layout (every legal shape of every kernel at every corner, at its
    fixed corner if it has one, no two overlapping, none over an obstacle) by the communication model
    itself (``cost.comm``), without the bound's reasoning."""
    rows, cols = p.mesh.rows, p.mesh.cols
    options = []
    pins = p.pins or (None,) * len(p.shapes)
    for s, pin in zip(p.shapes, pins, strict=True):
        options.append(
            [
                (y, x, int(r), int(c), int(lat))
                for r, c, lat in zip(s.r.tolist(), s.c.tolist(), s.latency.tolist(), strict=True)
                for y in range(rows - r + 1)
                for x in range(cols - c + 1)
                if (pin is None or (y, x) == pin) and not any(overlap((y, x, r, c), o) for o in p.obstacles)
            ]
        )
    fl = p.flows
    best: int | None = None

    def walk(chosen: list[tuple[int, ...]]) -> None:
        nonlocal best
        k = len(chosen)
        if k == len(options):
            rects = np.array([o[:4] for o in chosen], dtype=np.int64)
            latency = np.array([o[4] for o in chosen], dtype=np.int64)
            if sum(o[2] * o[3] for o in chosen) > p.total_cores:
                return
            comm = comm_costs(rects, latency, fl.src, fl.dst, fl.nbytes, p.mesh, fl.group)
            value = int((latency + comm.comm_cycles).max())
            best = value if best is None else min(best, value)
            return
        for o in options[k]:
            if not any(overlap(o, q) for q in chosen):
                walk([*chosen, o])

    walk([])
    return best


def allocation_bound(p: CommBoundProblem) -> int:
    """The least T whose fewest cores with latency <= T fit (the allocation bound, by a scan)."""
    for t in sorted({int(v) for s in p.shapes for v in s.latency.tolist()}):
        need = [s.cores[s.latency <= t] for s in p.shapes]
        if all(n.size for n in need) and sum(int(n.min()) for n in need) <= p.total_cores:
            return t
    raise AssertionError("no allocation fits")


def _shapes(rng: np.random.Generator, rows: int, cols: int, work: int) -> Shapes:
    """A few grids of a kernel with latency falling as it grows (work / cores + the fill r + c)."""
    grids = sorted({(int(rng.integers(1, rows + 1)), int(rng.integers(1, cols + 1))) for _ in range(4)})
    r = np.array([g[0] for g in grids], dtype=np.int64)
    c = np.array([g[1] for g in grids], dtype=np.int64)
    cores = r * c
    latency = work // cores + r + c
    return Shapes(r, c, latency, cores)


def _random_problem(seed: int, kernels: int, rows: int, cols: int) -> CommBoundProblem:
    rng = np.random.default_rng(seed)
    shapes = tuple(_shapes(rng, rows, cols, int(rng.integers(20, 200))) for _ in range(kernels))
    src, dst = [], []
    for k in range(1, kernels):
        src.append(int(rng.integers(0, k)))
        dst.append(k)
    if kernels > 2 and rng.random() < 0.5:  # a skip: fan-out of kernel 0's tensor (one multicast group)
        src.append(0)
        dst.append(kernels - 1)
    nbytes = rng.choice([4.0, 400.0, 4000.0], size=len(src))
    group = np.arange(len(src))
    if len(src) > kernels - 1:
        group[-1] = 0 if src[0] == 0 else group[-1]
        nbytes[-1] = nbytes[0] if src[0] == 0 else nbytes[-1]
    die = (2, 2) if seed % 3 == 0 else (100, 100)
    mesh = _mesh(rows, cols, die, penalty=5 if seed % 3 == 0 else 0)
    fl = Flows(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.asarray(nbytes, dtype=np.float64), group)
    return CommBoundProblem(shapes, fl, mesh, rows * cols)


@pytest.mark.parametrize("seed", [s for s in range(25) if s != 6])  # seed 6 has no layout at all
def test_never_above_every_layout_of_a_tiny_wafer(seed: int) -> None:
    """24 random tiny instances (2-3 kernels, 3 x 4 or 4 x 4 cores, a skip tensor, die penalties on
    every third): the bound lies between the allocation bound and the best layout; measured, it
    reaches the best layout on 21 of them and exceeds the allocation bound on 22."""
    kernels, rows, cols = (2, 4, 4) if seed % 2 else (3, 3, 4)
    p = _random_problem(seed, kernels, rows, cols)
    optimum = best_layout(p)
    assert optimum is not None
    bound = communication_bound(p, optimum)
    assert bound is not None, "the best layout passes every test of the bound"
    assert allocation_bound(p) <= bound <= optimum


def test_a_heavy_tensor_lifts_the_bound_to_the_best_layout() -> None:
    """Two kernels on a 1 x 4 wafer can only lie side by side: 4,000 bytes cross one link (a row), 1,000
    cycles of congestion; the bound proves what the best layout reaches, 983 cycles over the
    allocation bound."""
    one = Shapes(np.array([1, 1]), np.array([1, 2]), np.array([30, 20]), np.array([1, 2]))
    fl = Flows(np.array([0]), np.array([1]), np.array([4000.0]), np.array([0]))
    p = CommBoundProblem((one, one), fl, _mesh(1, 4), 4)
    optimum = best_layout(p)
    assert optimum is not None
    assert allocation_bound(p) == 20
    assert communication_bound(p, optimum) == optimum == 30 + 1 + (1000 - (30 - 2))


def test_tall_kernels_share_a_row() -> None:
    """Three kernels that can only be 3 rows tall on a 4 x 5 wafer: their row spans share a row, so
    their widths (2 each) add up to more than the 5 columns whatever the cores say (18 of 20)."""
    tall = Shapes(np.array([3]), np.array([2]), np.array([10]), np.array([6]))
    none = Flows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    p = CommBoundProblem((tall, tall, tall), none, _mesh(4, 5), 20)
    assert best_layout(p) is None
    assert communication_bound(p, 1000) is None  # no T passes: no layout exists
    assert communication_bound(p, None) is None  # (the doubling search for an upper end gives up)
    assert allocation_bound(p) == 10


@pytest.mark.parametrize(
    "sets",
    [[], ["wafer.die_boundary=penalty", "wafer.die_crossing_penalty_cycles=50"], ["noc.link_bytes_per_cycle=0.05"]],
)
def test_the_verifier_derives_the_same_bound(sets: list[str]) -> None:
    from wsealloc.arch import load_arch
    from wsealloc.cost import CostOptions
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.pipeline import build_costs
    from wsealloc.plan.verify import allocation_optimum
    from wsealloc.plan.verify_bounds import communication_bound as recomputed

    costs = build_costs(OnnxSource(path=str(ATTENTION)), load_arch("tiny", sets), CostOptions())
    alloc = allocation_optimum(costs)
    assert alloc is not None
    mine = communication_bound(comm_bound_problem(costs), 50 * alloc)
    assert mine is not None and mine >= alloc
    assert recomputed(costs, 50 * alloc) == mine
    for lo in (0, alloc):  # where the bisection starts changes nothing, nor an upper end found by doubling
        assert communication_bound(comm_bound_problem(costs), 50 * alloc, lo) == mine
        assert communication_bound(comm_bound_problem(costs), None, lo) == mine
    asked: list[int] = []

    def third() -> bool:  # stop before the third test
        asked.append(1)
        return len(asked) >= 3

    # asked to stop: no bound at all, never one short of the least T
    assert communication_bound(comm_bound_problem(costs), 50 * alloc, alloc, stop=third) is None
    assert len(asked) == 3


def test_every_layout_of_a_real_model_on_a_tiny_wafer() -> None:
    """The tiny MLP's kernels on a 3 x 4 wafer with slow links: every layout tried."""
    from wsealloc.arch import load_arch
    from wsealloc.cost import CostOptions
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.pipeline import build_costs

    sets = ["wafer.dies.rows=1", "wafer.dies.cols=1", "wafer.die_cores.rows=3", "wafer.die_cores.cols=4"]
    sets += ["noc.link_bytes_per_cycle=0.5"]
    model = ROOT / "models" / "tiny" / "mlp.onnx"  # (committed: never skipped)
    costs = build_costs(OnnxSource(path=str(model)), load_arch("tiny", sets), CostOptions(), check_feasible=False)
    p = comm_bound_problem(costs)
    assert len(p.shapes) <= 3 and all(s.r.size for s in p.shapes)  # small enough to try every layout
    optimum = best_layout(p)
    assert optimum is not None
    bound = communication_bound(p, optimum)
    assert bound is not None and allocation_bound(p) <= bound <= optimum
    for combo in itertools.islice(itertools.product(*[range(s.r.size) for s in p.shapes]), 1):
        assert len(combo) == len(p.shapes)


NO_FLOWS = Flows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))


def _partitions(total: int, largest: int) -> list[list[int]]:
    """Every multiset of positive sides adding up to at most ``total`` (parts at most ``largest``)."""
    out: list[list[int]] = [[]]
    for x in range(min(total, largest), 0, -1):
        out += [[x, *rest] for rest in _partitions(total - x, x)]
    return out


@pytest.mark.parametrize("side", range(1, 13))
def test_every_function_of_the_family_is_dual_feasible(side: int) -> None:
    """The bound is only as sound as its functions: each of the family (every parameter the sides
    1..side give) never falls as a side grows, and on every multiset of sides that fits ``side`` its
    values add up to at most its value at ``side``."""
    table = side_functions(side, range(1, side + 1))
    assert (table[0] == np.arange(side + 1)).all()  # the identity first (the area pair)
    assert (np.diff(table, axis=1) >= 0).all()
    for parts in _partitions(side, side):
        assert (table[:, parts].sum(axis=1) <= table[:, side]).all(), parts


def test_five_squares_of_two_do_not_fit_five_by_five() -> None:
    """Five 2 x 2 kernels on a 5 x 5 wafer: 20 cores of 25, none taller or wider than half the wafer,
    yet no layout exists (a row or column of the wafer crosses at most two of them). u^(2) counts each
    side of 2 as half of 5: five quarters of the wafer."""
    square = Shapes(np.array([2]), np.array([2]), np.array([10]), np.array([4]))
    p = CommBoundProblem((square,) * 5, NO_FLOWS, _mesh(5, 5), 25)
    assert allocation_bound(p) == 10
    assert best_layout(p) is None
    assert communication_bound(p, 1000) is None
    four = CommBoundProblem((square,) * 4, NO_FLOWS, _mesh(5, 5), 25)
    assert communication_bound(four, 1000) == best_layout(four) == 10


def test_a_faster_shape_is_proven_unusable_by_packing() -> None:
    """Three kernels 3 x 2 (10 cycles) or 2 x 2 (20) and one 2 x 3 (10) or 1 x 3 (25) on a 4 x 6 wafer:
    the fast shapes take exactly the 24 cores and the three tall ones exactly the 6 columns, so area
    and the strip argument both allow 10 cycles; but the tall ones leave one row, where 2 rows do not
    fit. f_0 at l = 2 (rows over 2 count as 4, rows of 2 as 2) charges 3 x 8 + 6 = 30 of 24: the bound
    is 20, what trying every layout finds."""
    tall = Shapes(np.array([3, 2]), np.array([2, 2]), np.array([10, 20]), np.array([6, 4]))
    flat = Shapes(np.array([2, 1]), np.array([3, 3]), np.array([10, 25]), np.array([6, 3]))
    p = CommBoundProblem((tall, tall, tall, flat), NO_FLOWS, _mesh(4, 6), 24)
    optimum = best_layout(p)
    assert optimum is not None
    assert allocation_bound(p) == 10 < optimum
    assert communication_bound(p, optimum) == optimum


def test_a_keep_out_area_is_packed_with_the_kernels() -> None:
    """A 4 x 4 wafer whose top 3 rows are kept out: a kernel 2 rows tall has 4 free cores by area but
    no room; the keep-out counts whole under f_0 (3 rows > 4 - 2) and the kernel's 2 rows as 2."""
    two = Shapes(np.array([2]), np.array([1]), np.array([10]), np.array([2]))
    p = CommBoundProblem((two,), NO_FLOWS, _mesh(4, 4), 4, obstacles=((0, 0, 3, 4),))
    assert communication_bound(p, 1000) is None
    assert communication_bound(CommBoundProblem((two,), NO_FLOWS, _mesh(4, 4), 4, obstacles=((0, 0, 2, 4),)), 1000) == 10


def _packing_problem(seed: int) -> CommBoundProblem:
    """3-4 kernels without flows on a 4 x 5 wafer, each with three random grids (packing alone)."""
    rng = np.random.default_rng(seed)
    shapes = []
    for _ in range(3 + seed % 2):
        grids = sorted({(int(rng.integers(1, 5)), int(rng.integers(1, 6))) for _ in range(3)})
        r = np.array([g[0] for g in grids], dtype=np.int64)
        c = np.array([g[1] for g in grids], dtype=np.int64)
        shapes.append(Shapes(r, c, int(rng.integers(20, 120)) // (r * c) + r + c, r * c))
    return CommBoundProblem(tuple(shapes), NO_FLOWS, _mesh(4, 5), 20)


@pytest.mark.slow  # every layout of 40 tiny wafers: 14 s (run by .ci/run's slow group)
def test_packing_never_above_every_layout_of_a_tiny_wafer() -> None:
    """40 random packing instances (no flows: the dual-feasible functions alone above the area): the
    bound never exceeds the best layout of the 35 that have one and proves 4 of the other 5 have none;
    measured, it equals the best layout on 29 of the 35 and exceeds the allocation bound on 2 (the
    strip argument alone, before issue 37's packing bound, on 1 of them)."""
    equal = above = layouts = none = 0
    for seed in range(40):
        p = _packing_problem(seed)
        optimum = best_layout(p)
        bound = communication_bound(p, 10_000)
        if optimum is None:
            none += bound is None
            continue
        layouts += 1
        assert bound is not None and allocation_bound(p) <= bound <= optimum
        equal += bound == optimum
        above += bound > allocation_bound(p)
    assert (layouts, equal, above, none) == (35, 29, 2, 4)


def test_two_fixed_corners_pay_the_hops_between_them() -> None:
    """A producer fixed at [0, 0] and its consumer at [0, 6] on a 2 x 8 wafer, each 1 or 2 columns wide
    (and 1 or 2 rows tall): the consumer's stage is at least its latency plus the hops to the nearest
    column the producer can reach (5 from a 2-wide producer). The free pair pays one hop."""
    one = Shapes(np.array([1, 2, 1, 2]), np.array([1, 1, 2, 2]), np.array([40, 30, 30, 20]), np.array([1, 2, 2, 4]))
    fl = Flows(np.array([0]), np.array([1]), np.array([4.0]), np.array([0]))
    pinned = CommBoundProblem((one, one), fl, _mesh(2, 8), 16, pins=((0, 0), (0, 6)))
    optimum = best_layout(pinned)
    assert optimum is not None
    assert communication_bound(pinned, optimum) == optimum == 20 + 5
    free = CommBoundProblem((one, one), fl, _mesh(2, 8), 16)
    assert communication_bound(free, 1000) == best_layout(free) == 20 + 1


def test_a_fixed_corner_keeps_its_shapes_off_the_keep_outs() -> None:
    """A kernel fixed at [1, 0] on a 3 x 3 wafer whose top row is kept out may be 2 rows tall, not 3:
    its fast shape (3 x 1, 10 cycles) is out, the bound is the 2 x 1 shape's 30."""
    one = Shapes(np.array([3, 2]), np.array([1, 1]), np.array([10, 30]), np.array([3, 2]))
    p = CommBoundProblem((one,), NO_FLOWS, _mesh(3, 3), 6, obstacles=((0, 0, 1, 3),), pins=((1, 0),))
    assert communication_bound(p, 1000) == best_layout(p) == 30


@pytest.mark.parametrize("seed", [s for s in range(30) if s not in (0, 6)])  # 0 and 6: no layout found to pin
def test_fixed_corners_never_above_every_layout(seed: int) -> None:
    """The random instances of the first test with one or two kernels fixed at the corner of some
    layout of them (so one exists): the bound lies between the allocation bound and the best layout
    with those corners. Measured on these 28: the bound is the best layout on 23, and the corners lift
    it above the same instance's free bound on 10."""
    kernels, rows, cols = (2, 4, 4) if seed % 2 else (3, 3, 4)
    free = _random_problem(seed, kernels, rows, cols)
    rng = np.random.default_rng(1000 + seed)
    layout = _some_layout(free, rng)
    assert layout is not None
    fixed = rng.choice(kernels, size=1 + seed % 2, replace=False).tolist()
    pins = tuple((layout[k][0], layout[k][1]) if k in fixed else None for k in range(kernels))
    p = CommBoundProblem(free.shapes, free.flows, free.mesh, free.total_cores, pins=pins)
    optimum = best_layout(p)
    assert optimum is not None
    bound = communication_bound(p, optimum)
    assert bound is not None and allocation_bound(p) <= bound <= optimum


def _some_layout(p: CommBoundProblem, rng: np.random.Generator) -> list[tuple[int, int, int, int]] | None:
    """Random rectangles of the kernels, none overlapping (200 tries), or None."""
    for _ in range(200):
        rects: list[tuple[int, int, int, int]] = []
        for s in p.shapes:
            i = int(rng.integers(s.r.size))
            r, c = int(s.r[i]), int(s.c[i])
            rect = (int(rng.integers(p.mesh.rows - r + 1)), int(rng.integers(p.mesh.cols - c + 1)), r, c)
            if any(overlap(rect, q) for q in rects):
                break
            rects.append(rect)
        else:
            return rects
    return None


@pytest.mark.parametrize(
    ("second", "at", "expected"),
    [
        ("qk", ((0, 0), (12, 20)), 4109),
        ("qk", ((0, 0), (0, 6)), 1422),
        ("qk", ((12, 0), (0, 18)), 1427),
        ("qk", ((3, 5), (10, 2)), 1385),
        ("softmax", ((0, 0), (0, 2)), 4106),
        ("softmax", ((4, 4), (0, 0)), 1044),
    ],
)
def test_the_verifier_prices_the_same_corners(second: str, at: tuple[tuple[int, int], tuple[int, int]], expected: int) -> None:
    """The tiny attention on the tiny wafer (16 x 24) with q_proj and its consumer qk (or softmax, two
    kernels later, close by) at fixed corners and two rows kept out: the verifier's own code finds the
    same bound, which the corners lift from 726 cycles (free) to 1,044-4,109 (measured)."""
    from wsealloc.arch import load_arch
    from wsealloc.constraints.load import parse_constraints
    from wsealloc.cost import CostOptions
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.pipeline import build_costs
    from wsealloc.plan.verify import allocation_optimum
    from wsealloc.plan.verify_bounds import communication_bound as recomputed

    (y0, x0), (y1, x1) = at
    text = f"- place: q_proj\n  at: [{y0}, {x0}]\n- place: {second}\n  at: [{y1}, {x1}]\n- keep-out: {{rows: [8, 9]}}\n"
    rules = parse_constraints(text, "c.yaml")
    costs = build_costs(OnnxSource(path=str(ATTENTION)), load_arch("tiny", []), CostOptions(), constraints=rules)
    alloc = allocation_optimum(costs)
    assert alloc is not None
    p = comm_bound_problem(costs)
    assert tuple(q for q in p.pins if q is not None) == at and p.obstacles == ((8, 0, 2, 24),)
    mine = communication_bound(p, 50 * alloc)
    assert mine is not None and recomputed(costs, 50 * alloc) == mine == expected


def test_a_fixed_corner_is_covered_whatever_shape_its_kernel_takes() -> None:
    """Two kernels fixed at [0, 0] and [0, 2] of a 1 x 4 wafer: the first may be 1 x 3 in 10 cycles or
    1 x 1 in 20, the second covers [0, 2] on either of its shapes, so the first's fast shape is out."""
    a = Shapes(np.array([1, 1]), np.array([1, 3]), np.array([20, 10]), np.array([1, 3]))
    b = Shapes(np.array([1, 1]), np.array([1, 2]), np.array([15, 12]), np.array([1, 2]))
    p = CommBoundProblem((a, b), NO_FLOWS, _mesh(1, 4), 4, pins=((0, 0), (0, 2)))
    assert allocation_bound(p) == 15
    assert communication_bound(p, 1000) == best_layout(p) == 20


def test_the_verifier_packs_the_same_obstacles() -> None:
    """5% of the tiny wafer's cores defective, two keep-outs that overlap (the second is left out of
    the packing, its cores still off the fixed corners' shapes), q_proj and qk at fixed corners: the
    obstacles are the first keep-out and the 17 defective cores outside it, and the verifier's own
    code finds the same bound (q_proj at [0, 0] is at most 2 columns wide: a defect sits at [0, 2])."""
    from wsealloc.arch import load_arch
    from wsealloc.constraints.load import parse_constraints
    from wsealloc.cost import CostOptions
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.pipeline import build_costs
    from wsealloc.plan.verify_bounds import communication_bound as recomputed

    text = "- place: q_proj\n  at: [0, 0]\n- place: qk\n  at: [3, 7]\n- keep-out: {rows: [8, 9]}\n"
    text += "- keep-out: {rows: [7, 12], cols: [0, 3]}\n"
    arch = load_arch("tiny", ["wafer.defects.rate=0.05"])
    rules = parse_constraints(text, "c.yaml")
    costs = build_costs(OnnxSource(path=str(ATTENTION)), arch, CostOptions(), constraints=rules, check_feasible=False)
    p = comm_bound_problem(costs)
    assert p.obstacles[0] == (8, 0, 2, 24) and len(p.obstacles) == 18 and (0, 2, 1, 1) in p.obstacles
    assert communication_bound(p, 50_000) == recomputed(costs, 50_000) == 5129
