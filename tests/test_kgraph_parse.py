"""The .kgraph reader: the project's own instances, the shared contest instances, and every malformed case with its message."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHARED_LETTERS, shared_instance

from wsealloc.errors import ModelLoadError
from wsealloc.frontend.kgraph import looks_like_kgraph, parse_kgraph, parse_kgraph_text
from wsealloc.graph.contest import BlockArgs, ContestKind, ConvArgs, Fabric

DATA = Path(__file__).resolve().parent / "data" / "kgraph"

HEADER = "(*\ntest=t\nwidth=64\nheight=48\nwdeltat=1\nwlength=2\nwadapter=0\nmemlimit=1024\n*)\n"
CONV = "conv[1] W=4 H=4 R=1 S=1 C=4 K=4 T=1 U=1 name='k1'\n"


def test_tiny_chain_reads_every_field() -> None:
    g = parse_kgraph(DATA / "tiny_chain.kgraph")
    assert g.fabric == Fabric("tiny-chain", 120, 96, 4096, 1, 2, 0)
    assert [k.name for k in g.kernels] == ["k1", "k2", "k3", "k4", "k5"]
    assert [k.kind for k in g.kernels] == [
        ContestKind.CONV,
        ContestKind.CBLOCK,
        ContestKind.DBLOCK,
        ContestKind.CONV,
        ContestKind.CONV,
    ]
    # conv params are written W H ..., the args are typed H W ...
    assert g.kernels[0].args == ConvArgs(H=16, W=16, R=3, S=3, C=8, K=16, T=1, U=1)
    assert g.kernels[1].args == BlockArgs(F=32, H=16, W=16)
    assert [k.index for k in g.kernels] == [0, 1, 2, 3, 4]
    # io nodes are kept apart and not placed; the repeated name= keeps the last one
    assert [(n.kind, n.name, n.shape) for n in g.io_nodes] == [("input", "k0", (16, 16, 8)), ("output", "k6", (4, 4, 64))]
    assert not g.has_kernel("k0")
    # five edges between placed kernels (one residual: cblock k2 -> conv k4), two with io nodes
    assert [(e.src, e.dst) for e in g.edges] == [(1, 2), (2, 3), (3, 4), (2, 4), (4, 5)]
    assert g.edge_pairs() == ((0, 1), (1, 2), (2, 3), (1, 3), (3, 4))
    assert [(e.src, e.dst) for e in g.io_edges] == [(0, 1), (5, 6)]
    assert g.edges[0].shape == (16, 16, 16) and g.edges[0].ports == ("y", "x")
    assert g.kernels[1].line == 14 and g.edges[0].line == 22


def test_one_line_header_and_names_that_are_not_kN() -> None:
    g = parse_kgraph(DATA / "tiny_fabric.kgraph")
    assert g.fabric == Fabric("tiny-fabric", 24, 18, 64, 2, 1, 0)
    assert [k.name for k in g.kernels] == ["a", "b", "c"] and len(g.edges) == 3 and not g.io_nodes


def test_whitespace_variants_parse_alike() -> None:
    tight = HEADER + CONV + "dblock[2] f=8 h=4 w=4 name='k2'\nconv[1]:y -> dblock[2]:x, shape:[4][4][4]\n"
    loose = (
        HEADER.replace("width=64", "width = 64")
        + "conv[ 1]  W=4   H=4 R=1 S=1 C=4 K=4 T=1 U=1   name='k1'\n"
        + "\tdblock[  2 ] f=8 h=4 w=4 name='k2'  \n\n(* Connectivity *)\n"
        + "conv[ 1]:y\t->\tdblock[ 2]:x ,  shape: [4] [4] [4]\n"
    )
    a, b = parse_kgraph_text(tight, "a"), parse_kgraph_text(loose, "b")
    assert a.fabric == b.fabric and a.kernels == b.kernels and a.edges == b.edges
    crlf = parse_kgraph_text(tight.replace("\n", "\r\n"), "crlf")
    assert crlf.kernels == a.kernels and crlf.edges == a.edges


def test_name_defaults_to_k_id_and_fabric_stands_in_for_a_missing_header() -> None:
    fab = Fabric("given", 633, 633, 24576, 1, 1, 0)
    g = parse_kgraph_text("\ufeff(* Node Definitions *)\ndblock[3] f=512 h=28 w=28\n", "ex", fabric=fab)
    assert g.fabric is fab and g.kernels[0].name == "k3"


COUNTS = {"A": 16, "B": 32, "C": 100, "D": 52, "I": 25, "J": 79, "K": 16, "L": 52}
TWINS = {"E": "A", "F": "B", "G": "C", "H": "D", "O": "I", "P": "J", "Q": "K", "R": "L"}  # the same graphs, other weights


@pytest.mark.parametrize("letter", SHARED_LETTERS)
def test_shared_instances_parse(letter: str) -> None:
    g = parse_kgraph(shared_instance(f"{letter}.kgraph"))
    assert len(g.kernels) == COUNTS[TWINS.get(letter, letter)]
    assert g.fabric.width == g.fabric.height == 633 and g.fabric.memlimit == 24576
    assert all(n.kind in ("input", "output") for n in g.io_nodes) and len(g.io_nodes) == 2


def test_shared_instance_details() -> None:
    a = parse_kgraph(shared_instance("A.kgraph"))
    assert a.kernels[0].args == BlockArgs(F=2048, H=14, W=14) and a.fabric.test == "compact-balanced-router"


def test_looks_like_kgraph(tmp_path: Path, model_dir: Path) -> None:
    assert looks_like_kgraph(DATA / "tiny_chain.kgraph")
    text = tmp_path / "instance.txt"
    text.write_text((DATA / "tiny_fabric.kgraph").read_text())
    assert looks_like_kgraph(text)  # by content: a (* header *) with width= and height=
    assert not looks_like_kgraph(model_dir / "mlp.onnx")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    assert not looks_like_kgraph(binary)
    other = tmp_path / "notes.txt"
    other.write_text("(* a comment without a fabric *)\nhello\n")
    assert not looks_like_kgraph(other)
    assert not looks_like_kgraph(tmp_path / "missing.txt")


BAD = [
    ("", "empty file", 0),
    ("   \n\n", "empty file", 0),
    ("conv[1] W=4 H=4 R=1 S=1 C=4 K=4 T=1 U=1\n", "no header", 1),
    (HEADER.replace("memlimit=1024\n", ""), "header field 'memlimit=' is missing", 8),
    (HEADER.replace("width=64", "width=6x4"), "header field 'width' must be an integer, got '6x4'", 3),
    (HEADER.replace("height=48", "height=0"), "header field 'height' must be positive, got 0", 4),
    ("(*\nwidth=4\nheight=4\n", "never closed", 1),
    (HEADER + "pool[2] W=4 name='p'\n", "unknown node type 'pool'; known types: cblock, conv, dblock, input, output", 10),
    (HEADER + CONV + CONV.replace("'k1'", "'k9'"), "duplicate node id 1 (already conv[1] at line 10)", 11),
    (HEADER + CONV + CONV.replace("conv[1]", "conv[2]"), "duplicate kernel name 'k1'", 11),
    (HEADER + "conv[1] W=4 H=4 R=1 S=1 C=4 T=1 U=1\n", "conv[1]: missing K; a conv needs W H R S C K T U", 10),
    (HEADER + "dblock[1] f=8 h=4\n", "dblock[1]: missing w", 10),
    (HEADER + "conv[1] W=4 H=0 R=1 S=1 C=4 K=4 T=1 U=1\n", "conv[1] H must be positive, got 0", 10),
    (HEADER + "conv[1] W=4 H=4 R=1 S=1 C=-4 K=4 T=1 U=1\n", "conv[1] C must be positive, got -4", 10),
    (HEADER + "conv[1] W=4 H=4 R=1 S=1 C=four K=4 T=1 U=1\n", "conv[1] C must be an integer, got 'four'", 10),
    (HEADER + "conv[1] W=4 H=4 R=1 S=1 C=4 K=4 T=1 U=1 P=2\n", "unknown field(s) P", 10),
    (HEADER + "dblock[1] f=10 h=4 w=4\n", "f=10 must be a multiple of 4", 10),
    (HEADER + "conv[x] W=4\n", "conv node id must be an integer, got 'x'", 10),
    (HEADER + CONV + "conv[1]:y -> conv[7]:x, shape:[4][4][4]\n", "edge references conv[7], which no node line defines", 11),
    (HEADER + CONV + "dblock[1]:y -> conv[1]:x, shape:[4][4][4]\n", "edge says dblock[1] but node 1 is a conv", 11),
    (
        HEADER + CONV + CONV.replace("[1]", "[2]").replace("k1", "k2") + "conv[1]:y -> conv[2]:x\n",
        "edge without ', shape:[H][W][C]'",
        12,
    ),
    (HEADER + CONV + "conv[1]:y -> conv[1]:x, shape:[4][4]\n", "must have three dims", 11),
    (HEADER + CONV + "conv[1]:y => conv[2]:x\n", "expected a node", 11),
    (HEADER + CONV + "conv[1] -> conv[2]\n", "expected an edge", 11),
    (HEADER + "input[0] n=[4 4 4]\n", "no conv, dblock or cblock node", 0),
    # numbers beyond 64 bits were an internal error (OverflowError in the enumeration), fabrics beyond an
    # arch's largest wafer a MemoryError in the placement
    (HEADER.replace("width=64", "width=99999999999999999999"), "over the largest number a .kgraph may hold", 3),
    (HEADER + "conv[1] W=4 H=4 R=1 S=1 C=4 K=2147483648 T=1 U=1\n", "conv[1] K is 2147483648, over the largest", 10),
    (HEADER + CONV + "conv[1]:y -> conv[1]:x, shape:[4][4][4294967296]\n", "edge shape dim is 4294967296", 11),
    (HEADER.replace("width=64", "width=2147483647"), "fabric has 103,079,215,056 tiles, over the 16,777,216", 3),
]


@pytest.mark.parametrize(("text", "message", "line"), BAD, ids=[b[1][:40] for b in BAD])
def test_malformed_instances_fail_on_one_line(text: str, message: str, line: int) -> None:
    with pytest.raises(ModelLoadError) as err:
        parse_kgraph_text(text, "bad.kgraph")
    msg = str(err.value)
    assert message in msg and "\n" not in msg
    assert msg.startswith(f"bad.kgraph:{line}: " if line else "bad.kgraph: ")


def test_malformed_files(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"bad_unknown_type.kgraph:11: unknown node type 'pool'"):
        parse_kgraph(DATA / "bad_unknown_type.kgraph")
    with pytest.raises(ModelLoadError, match=r"bad_edge.kgraph:13: edge references conv\[7\]"):
        parse_kgraph(DATA / "bad_edge.kgraph")
    with pytest.raises(ModelLoadError, match="binary file"):
        parse_kgraph(model_dir / "mlp.onnx")
    latin = tmp_path / "latin.kgraph"
    latin.write_bytes(HEADER.encode() + b"conv[1] name='\xe9'\n")
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        parse_kgraph(latin)
    with pytest.raises(ModelLoadError, match="no such file"):
        parse_kgraph(tmp_path / "absent.kgraph")
    with pytest.raises(ModelLoadError, match="is a directory"):
        parse_kgraph(tmp_path)


def test_header_overrides_are_held_to_the_fabric_limit() -> None:
    # --set width=100000 --set height=1000 made the placement allocate arrays of 10^8 tiles per kernel class
    from wsealloc.errors import UsageError
    from wsealloc.frontend.sources import KgraphSource

    source = KgraphSource(path=str(DATA / "tiny_chain.kgraph"), header={"width": 100_000, "height": 1000})
    with pytest.raises(UsageError, match=r"header overrides \(--arch/--set\): a 100,000 x 1,000 fabric has 100,000,000 tiles"):
        source.read()
    assert KgraphSource(path=str(DATA / "tiny_chain.kgraph"), header={"width": 4096, "height": 4096}).read().fabric.width == 4096


def test_a_missing_shared_instance_skips_or_fails_under_require(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the shared folder the tests that read it skip, saying why; .ci/run (WSEALLOC_REQUIRE_SHARED=1)
    turns that into a failure, so CI never passes without having checked them."""
    monkeypatch.delenv("WSEALLOC_REQUIRE_SHARED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="shared ISPD-2020 instances absent"):
        shared_instance("no-such-instance.kgraph")
    monkeypatch.setenv("WSEALLOC_REQUIRE_SHARED", "1")
    with pytest.raises(pytest.fail.Exception, match="WSEALLOC_REQUIRE_SHARED=1 makes that an error"):
        shared_instance("no-such-instance.kgraph")
