"""The contest solution format: exact writer output, round trip, a tolerant reader, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from wsealloc.errors import PlanError
from wsealloc.graph.contest import BlockArgs, ContestKind, ConvArgs, ExecArgs, Orientation
from wsealloc.plan.contest_solution import Placement, Solution, format_solution, parse_solution, read_solution, solution_kernel

CONV = solution_kernel(
    "k1",
    ContestKind.CONV,
    ConvArgs(H=14, W=12, R=3, S=1, C=512, K=256, T=2, U=1),
    ExecArgs(1, 2, (54,), (25,)),
    0,
    148,
    Orientation.R0,
)
DBLOCK = solution_kernel(
    "k2", ContestKind.DBLOCK, BlockArgs(F=256, H=56, W=28), ExecArgs(4, 3, (8, 7, 6), (5, 64, 16)), 150, 0, Orientation.R90
)
CBLOCK = solution_kernel(
    "k3", ContestKind.CBLOCK, BlockArgs(F=512, H=28, W=28), ExecArgs(4, 4, (8, 7, 6, 5), (32, 31, 8, 19)), 7, 9, "R0"
)
SOLUTION = Solution((CONV, DBLOCK, CBLOCK))
TEXT = """\
k1 = conv( 14 12 512 256 3 1 2 1 1 2 54 25 )
k1 : place( 0 148 R0 )
k2 = dblock( 56 28 256 4 3 8 7 6 5 64 16 )
k2 : place( 150 0 R90 )
k3 = cblock( 28 28 512 4 4 8 7 6 5 32 31 8 19 )
k3 : place( 7 9 R0 )
"""


def test_writer_argument_order() -> None:
    # conv: H W C K R S T U h w c k; blocks: H W F h w c1.. k1..; place: x y orientation
    assert format_solution(SOLUTION) == TEXT


def test_round_trip() -> None:
    parsed = parse_solution(format_solution(SOLUTION), "sol")
    assert parsed.kernels == SOLUTION.kernels and parsed.stray_placements == ()
    assert parsed.by_name("k2").placement == Placement(150, 0, "R90") and parsed.by_name("k2").placement.rotated
    assert parsed.kernels[1].line == 3 and parsed.kernels[1].placement.line == 4  # type: ignore[union-attr]


def test_reader_tolerates_other_tools(tmp_path: Path) -> None:
    other = """\
include "common.paint"
# a comment line
k3 : place(7 9 r0)          // placements may come first, in lower case
k3 = cblock(28 28 512 4 4 8 7 6 5 32 31 8 19)
k3 : name('k3)
(* a block comment
   over two lines *)
k1=conv(  14 12 512 256 3 1 2 1 1 2 54 25  )
k1 : place(0 148 R0)
\tk2 = dblock( 56, 28, 256, 4, 3, 8, 7, 6, 5, 64, 16 )
k2 :  place( 150 0 R90 )
kmap = union( k3 k1
   k2 )
"""
    parsed = parse_solution(other, "other")
    assert {k.name: k for k in parsed.kernels} == {k.name: k for k in SOLUTION.kernels}
    path = tmp_path / "sol.txt"
    path.write_text(other)
    assert read_solution(path).kernels == parsed.kernels


def test_reader_keeps_what_a_checker_must_judge() -> None:
    again = "k1 = conv( 14 12 512 256 3 1 2 1 1 2 54 25 )\nk1 : place( 5 5 R45 )\n"
    text = TEXT + again + "k9 : place( 1 1 R0 )\nk4 = conv( 1 1 1 1 1 1 1 1 1 1 1 1 )\n"
    parsed = parse_solution(text, "sol")
    assert [k.name for k in parsed.kernels] == ["k1", "k2", "k3", "k1", "k4"]
    assert parsed.kernels[3].placement is None and parsed.kernels[4].placement is None
    assert [(name, p.orientation, p.line) for name, p in parsed.stray_placements] == [("k1", "R45", 8), ("k9", "R0", 9)]
    assert "k9 : place( 1 1 R0 )" in format_solution(parsed)


BAD = [
    ("k1 = pool( 1 2 3 )", "unknown kernel kind 'pool'; known kinds: conv, dblock, cblock", 1),
    ("k1 = conv( 14 14 512 )", "a conv takes 12 integers (H W C K R S T U h w c k), got 3", 1),
    ("\nk1 = dblock( 1 2 3 4 5 6 7 8 9 10 )", "a dblock takes 11 integers (H W F h w c1 c2 c3 k1 k2 k3), got 10", 2),
    ("k1 = cblock( 1 2 3 4 5 6 7 8 9 10 11 12 x )", "cblock: 'x' is not an integer", 1),
    ("k1 : place( 1 2 )", "place takes 'x y R0|R90', got 2 value(s)", 1),
    ("k1 : place( 1 two R0 )", "place: 'two' is not an integer", 1),
    ("k1 = conv( 1 2 3", "'(' never closed", 1),
    ("\n\nwhat is this", "expected 'kN = kind( args )' or 'kN : place( x y R0|R90 )'", 3),
]


@pytest.mark.parametrize(("text", "message", "line"), BAD, ids=[b[1][:30] for b in BAD])
def test_unreadable_statements_name_the_line(text: str, message: str, line: int) -> None:
    with pytest.raises(PlanError) as err:
        parse_solution(text, "sol.txt")
    msg = str(err.value)
    assert msg.startswith(f"sol.txt:{line}: ") and message in msg and "\n" not in msg


def test_read_solution_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no such solution file"):
        read_solution(tmp_path / "absent.txt")
