"""The contest verifier: a legal solution passes with hand-checked figures, each tampered one fails with its own reason."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from wsealloc.frontend.kgraph import parse_kgraph
from wsealloc.graph.contest import ContestGraph
from wsealloc.opmodels.contest import enumerate_graph
from wsealloc.plan.contest_solution import Solution, format_solution, parse_solution, solution_kernel
from wsealloc.plan.contest_verify import ViolationKind, verify_solution
from wsealloc.problem.contest_bounds import contest_bounds

DATA = Path(__file__).resolve().parent / "data" / "kgraph"

# tiny_fabric: 24 x 18 tiles, memlimit 64, wdeltat 2, wlength 1.
# a: conv 4x4, 3x3 filter, C=2 K=4; h=w=2 c=2 k=2: 2*2*3 = 12 tall, 6 wide; time 2*2*1*2*9 = 72;
#    memory 2/2*4/2*9 + 6/2*6/2*4/2 = 18 + 18 = 36.
# b: dblock f=8 on 2x2; h=w=1 c=(4,2,2) k=(1,1,2): 5 tall, 12 wide, placed R90 (5 along x, 12 along y);
#    times 16, 72, 16; memories 12, 50, 20.
# c: conv 4x4, 1x1, C=4 K=2, stride 2; h=w=c=k=1: 2 tall, 3 wide; time 4*4*4*2/4 = 32; memory 8 + 32 = 40.
LEGAL = """\
a = conv( 4 4 2 4 3 3 1 1 2 2 2 2 )
a : place( 0 0 R0 )
b = dblock( 2 2 8 1 1 4 2 2 1 1 2 )
b : place( 6 0 R90 )
c = conv( 4 4 4 2 1 1 2 2 1 1 1 1 )
c : place( 11 0 R0 )
"""


@pytest.fixture(scope="module")
def tiny() -> ContestGraph:
    return parse_kgraph(DATA / "tiny_fabric.kgraph")


def test_legal_solution_and_its_figures(tiny: ContestGraph) -> None:
    r = verify_solution(parse_solution(LEGAL, "legal"), tiny, bound=None)
    assert r.ok and r.violations == ()
    assert r.max_time == 72 and r.max_time_kernel == "a"
    # centres, doubled: a (0+6, 0+12) = (6, 12); b (12+5, 0+12) = (17, 12); c (22+3, 0+2) = (25, 2)
    # a-b: 11/2; b-c: (8 + 10)/2 = 9; a-c: (19 + 10)/2 = 29/2; total 29
    assert r.wirelength == 29 and r.edges_counted == 3
    assert r.score == 2 * 72 + 1 * 29
    assert [(k.name, k.x, k.y, k.width, k.height, k.time) for k in r.kernels] == [
        ("a", 0, 0, 6, 12, 72), ("b", 6, 0, 5, 12, 72), ("c", 11, 0, 3, 2, 32)
    ]  # fmt: skip
    assert r.kernels[1].memory == 50
    assert "not modelled" in r.adapter and r.lower_bound is None and r.time_over_bound is None


def test_half_tile_wirelength_stays_exact(tiny: ContestGraph) -> None:
    # move c to (12, 0): its doubled centre is (27, 2); a-c becomes (21 + 10)/2 = 31/2, b-c (10 + 10)/2 = 10
    r = verify_solution(parse_solution(LEGAL.replace("place( 11 0 R0 )", "place( 12 0 R0 )"), "s"), tiny, bound=18)
    assert r.ok and r.wirelength == Fraction(11, 2) + 10 + Fraction(31, 2)
    assert r.lower_bound == 18 and r.time_over_bound == 4.0
    d = r.to_dict()
    json.dumps(d)
    assert d["wirelength"] == 31.0 and d["ok"] is True and d["time_over_bound"] == 4.0


TAMPERED = {
    ViolationKind.OVERLAP: LEGAL.replace("place( 11 0 R0 )", "place( 10 0 R0 )"),
    ViolationKind.OUTSIDE_FABRIC: LEGAL.replace("place( 11 0 R0 )", "place( 22 0 R0 )"),
    ViolationKind.MISSING_KERNEL: LEGAL.split("c = conv")[0],
    ViolationKind.DUPLICATE_KERNEL: LEGAL + "c = conv( 4 4 4 2 1 1 2 2 1 1 1 1 )\n",
    ViolationKind.WRONG_FORMAL_ARGS: LEGAL.replace("c = conv( 4 4 4 2", "c = conv( 4 4 8 2"),
    ViolationKind.MEMORY_OVER_LIMIT: LEGAL.replace("1 1 2 2 2 2 )", "1 1 2 2 2 1 )"),  # a at k = 1: 36 + 36 = 72 > 64
    ViolationKind.BAD_ORIENTATION: LEGAL.replace("place( 11 0 R0 )", "place( 11 0 R45 )"),
    ViolationKind.EXEC_OUT_OF_RANGE: LEGAL.replace("2 2 1 1 1 1 )", "2 2 1 1 1 3 )"),  # c: k = 3 > K = 2
    ViolationKind.UNKNOWN_KERNEL: LEGAL + "z = conv( 4 4 4 2 1 1 2 2 1 1 1 1 )\nz : place( 20 10 R0 )\n",
    ViolationKind.DUPLICATE_PLACEMENT: LEGAL + "c : place( 20 10 R0 )\n",
    ViolationKind.NOT_PLACED: LEGAL.replace("c : place( 11 0 R0 )\n", ""),
    ViolationKind.PLACED_NOT_INSTANTIATED: LEGAL.replace("c = conv( 4 4 4 2 1 1 2 2 1 1 1 1 )\n", ""),
    ViolationKind.WRONG_KIND: LEGAL.replace("c = conv( 4 4 4 2 1 1 2 2 1 1 1 1 )", "c = dblock( 4 4 8 1 1 1 1 1 1 1 1 )"),
}


@pytest.mark.parametrize("kind", list(TAMPERED), ids=[k.label for k in TAMPERED])
def test_tampered_solutions_fail_with_their_own_reason(tiny: ContestGraph, kind: ViolationKind) -> None:
    r = verify_solution(parse_solution(TAMPERED[kind], "tampered"), tiny, bound=None)
    assert not r.ok
    expected = {kind}
    if kind is ViolationKind.PLACED_NOT_INSTANTIATED:
        expected.add(ViolationKind.MISSING_KERNEL)  # c is also absent from the instantiations
    assert {v.kind for v in r.violations} == expected, [v.message for v in r.violations]
    v = r.violations[0]
    assert "\n" not in v.message and v.kernel
    assert json.dumps(r.to_dict())


def test_messages_name_the_fault(tiny: ContestGraph) -> None:
    def first(kind: ViolationKind) -> str:
        return verify_solution(parse_solution(TAMPERED[kind], "t"), tiny, bound=None).violations[0].message

    assert first(ViolationKind.OVERLAP) == "b and c overlap on 1x2 tiles"
    assert first(ViolationKind.OUTSIDE_FABRIC) == "c at (22, 0) R0 spans x 22..25, y 0..2: outside the 24x18 fabric"
    assert first(ViolationKind.MEMORY_OVER_LIMIT) == "a needs 72.00 memory per tile, over memlimit 64; raise c or k"
    assert first(ViolationKind.EXEC_OUT_OF_RANGE) == "c execution arguments out of range: k=3 not in [1, 2]"
    assert first(ViolationKind.WRONG_FORMAL_ARGS) == "c formal arguments differ from the instance: C=8 (instance: 4)"
    assert first(ViolationKind.BAD_ORIENTATION) == "c orientation 'R45' is not R0 or R90"
    assert first(ViolationKind.MISSING_KERNEL) == "c (conv) is in the instance but not in the solution"


def test_root_cause_comes_first(tiny: ContestGraph) -> None:
    # c missing AND a overlapping b: the missing kernel is reported before the geometry
    text = LEGAL.split("c = conv")[0].replace("place( 6 0 R90 )", "place( 5 0 R90 )")
    kinds = [v.kind for v in verify_solution(parse_solution(text, "t"), tiny, bound=None).violations]
    assert kinds == [ViolationKind.MISSING_KERNEL, ViolationKind.OVERLAP]


def _shelf(graph: ContestGraph) -> Solution:
    """A legal solution for tests: each kernel's smallest model, packed left to right in shelves."""
    kernels = []
    x = y = shelf = 0
    for m in enumerate_graph(graph):
        i = int(np.argmin(m.area))
        w, h = int(m.width[i]), int(m.height[i])
        if x + w > graph.fabric.width:
            x, y, shelf = 0, y + shelf, 0
        kernels.append(solution_kernel(m.kernel.name, m.kernel.kind, m.kernel.args, m.exec_args(i), x, y, m.orientation_of(i)))
        x, shelf = x + w, max(shelf, h)
    return Solution(tuple(kernels))


def test_a_packed_solution_round_trips_and_passes() -> None:
    g = parse_kgraph(DATA / "tiny_chain.kgraph")
    solution = parse_solution(format_solution(_shelf(g)), "shelf")
    r = verify_solution(solution, g)
    assert r.ok, [v.message for v in r.violations]
    assert r.lower_bound == contest_bounds(g).value and r.max_time is not None and r.max_time >= r.lower_bound
    assert r.edges_counted == len(g.edges) == 5
    assert r.score == g.fabric.wdeltat * r.max_time + g.fabric.wlength * r.wirelength


def test_solutions_built_in_code_are_judged_alike(tiny: ContestGraph) -> None:
    legal = parse_solution(LEGAL, "legal")
    again = legal.kernels[2]
    doubled = Solution((*legal.kernels, again))  # c twice, both placed, no line numbers
    r = verify_solution(doubled, tiny, bound=None)
    assert [v.kind for v in r.violations] == [ViolationKind.DUPLICATE_KERNEL]
    on_top = Solution((*legal.kernels[:2], solution_kernel("c", again.kind, again.args, again.exec_args, 0, 0, "R0")))
    assert verify_solution(on_top, tiny, bound=None).violations[0].kind is ViolationKind.OVERLAP


@pytest.mark.parametrize("x", [10**20, -(10**20), 2**63 - 8])
def test_coordinates_beyond_64_bits_are_judged_not_crashed(tiny: ContestGraph, x: int) -> None:
    """A solution may state any integer: a corner beyond int64 is outside the fabric (it was an
    OverflowError in the overlap sweep, exit 70), and the rectangles inside are still checked."""
    text = LEGAL.replace("a : place( 0 0 R0 )", f"a : place( {x} 0 R0 )")
    report = verify_solution(parse_solution(text, "t.sol"), tiny, bound=None)
    assert [v.kind for v in report.violations] == [ViolationKind.OUTSIDE_FABRIC]
    overlapping = text.replace("c : place( 11 0 R0 )", "c : place( 6 0 R0 )")  # c onto b
    kinds = [v.kind for v in verify_solution(parse_solution(overlapping, "t.sol"), tiny, bound=None).violations]
    assert kinds == [ViolationKind.OUTSIDE_FABRIC, ViolationKind.OVERLAP]
