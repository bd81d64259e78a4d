"""``wsealloc inspect X.kgraph`` and ``wsealloc verify X.sol --kgraph X.kgraph``: tables, JSON documents,
rejection reasons, tampered solutions (each rejected with its reason, exit 4) and usage errors.

Commands run in this process (``main(argv)`` with stdout/stderr captured). The instances are the
project's own (``tests/data/kgraph``); ``tiny_chain.sol`` beside them is a legal solution written by
hand, whose figures are computed by hand below. The shared contest instances are read where present.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import Result, run, shared_instance
from test_kgraph_enum import brute, frontier_size

from wsealloc.cost.ispd2020 import kernel_perf
from wsealloc.frontend.kgraph import parse_kgraph
from wsealloc.graph.contest import ContestGraph, ContestKind, ExecArgs
from wsealloc.opmodels.contest import ContestReason, enumerate_contest, enumerate_graph
from wsealloc.plan.contest_solution import Solution, format_solution, read_solution, solution_kernel
from wsealloc.plan.contest_verify import verify_solution
from wsealloc.problem.contest_bounds import contest_bounds

DATA = Path(__file__).resolve().parent / "data" / "kgraph"
CHAIN = str(DATA / "tiny_chain.kgraph")
FABRIC = str(DATA / "tiny_fabric.kgraph")
CHAIN_SOL = str(DATA / "tiny_chain.sol")
ATTENTION = str(Path(__file__).resolve().parents[1] / "models" / "tiny" / "attention.onnx")


def run_json(*args: str) -> dict:
    out = run(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def one_line_error(out: Result, code: int) -> str:
    """The command failed with ``code`` and said why on exactly one line."""
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wsealloc: error: "), out.stderr
    return lines[0]


# -- inspect -------------------------------------------------------------------------------------
def test_inspect_table_needs_no_arch() -> None:
    out = run("inspect", CHAIN)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long lines at 160 columns
    assert "tiny-chain" in text and "fabric 120 x 96 tiles, memlimit 4,096" in text
    assert "wdeltat 1, wlength 2, wadapter 0 (adapter term: not modelled)" in text
    for name, kind in (("k1", "conv"), ("k2", "cblock"), ("k3", "dblock"), ("k4", "conv"), ("k5", "conv")):
        assert f"│ {name} " in out.stdout and kind in out.stdout
    assert "H=16 W=16 C=8 K=16 R=3 S=3 T=1 U=1" in text  # formal arguments in solution order
    assert "lower bound on the largest kernel time: 288 = the largest of: single kernel 216 (k1's" in text
    assert "area 288" in text and "fabric midline 288" in text
    assert "enumeration: 5 kernels (5 distinct), 1,354 frontier models" in text
    assert "rejected: memory over limit" in text and not out.stderr


def test_inspect_json_document() -> None:
    doc = run_json("inspect", CHAIN)
    graph = parse_kgraph(CHAIN)
    models = enumerate_graph(graph)
    bounds = contest_bounds(graph, models)
    assert set(doc) == {"instance", "kernels", "bounds", "infeasible", "totals"}
    assert doc["instance"] == {
        "path": CHAIN,
        "test": "tiny-chain",
        "width": 120,
        "height": 96,
        "memlimit": 4096,
        "wdeltat": 1,
        "wlength": 2,
        "wadapter": 0,
        "header_overrides": {},
        "adapter": doc["instance"]["adapter"],
    }
    assert "not modelled" in doc["instance"]["adapter"]
    assert doc["bounds"] == bounds.to_dict() and doc["bounds"]["value"] == 288 and doc["infeasible"] is None
    assert [k["name"] for k in doc["kernels"]] == ["k1", "k2", "k3", "k4", "k5"]
    for row, m in zip(doc["kernels"], models, strict=True):
        assert row["kind"] == m.kernel.kind.value and row["id"] == m.kernel.node_id
        assert row["frontier"] == len(m) and row["fastest_time"] == m.fastest_time
        assert row["raw_space"] == m.raw_space and row["examined"] == m.examined
        assert row["rejected"] == {r.name.lower(): n for r, n in m.rejected}
        small = row["smallest_at_bound"]
        assert small["area"] == m.min_area_within(288) == small["height"] * small["width"] and small["time"] <= 288
        assert row["infeasible"] is None
    assert doc["kernels"][0]["formal"] == {"H": 16, "W": 16, "C": 8, "K": 16, "R": 3, "S": 3, "T": 1, "U": 1}
    assert doc["kernels"][1]["formal"] == {"H": 16, "W": 16, "F": 32}
    totals = doc["totals"]
    assert totals["kernels"] == 5 and totals["distinct_kernels"] == 5 and totals["edges"] == 5 and totals["io_nodes"] == 2
    assert totals["frontier_models"] == sum(len(m) for m in models) == 1354
    # the three convs' frontiers counted by brute force over every execution argument (the blocks'
    # spaces are too large to list: 2^39 and 2^29)
    for m in models:
        if m.kernel.kind is ContestKind.CONV:
            grid, _ = brute(m.kernel.kind, m.kernel.args, graph.fabric)
            assert len(m) == frontier_size(grid), m.kernel.name
    assert totals["rejected"] == {
        r.name.lower(): sum(m.rejected_counts()[r] for m in models) for r in ContestReason if r is not ContestReason.LEGAL
    }
    assert totals["infeasible_kernels"] == []


def test_inspect_header_overrides() -> None:
    """--arch/--set override the header; without them the header stands (the default arch is not applied)."""
    doc = run_json("inspect", CHAIN, "--set", "wlength=7", "--set", "memlimit=2048")
    assert doc["instance"]["wlength"] == 7 and doc["instance"]["memlimit"] == 2048 and doc["instance"]["width"] == 120
    assert doc["instance"]["header_overrides"] == {"wlength": 7, "memlimit": 2048}
    tiny = run_json("inspect", CHAIN, "--arch", "tiny")
    assert (tiny["instance"]["width"], tiny["instance"]["height"]) != (120, 96)
    text = run("inspect", CHAIN, "--set", "wlength=7").stdout
    assert "header overridden: wlength=7" in " ".join(text.split())
    assert run_json("inspect", ATTENTION)["summary"]["arch"] == "wse2"  # an ONNX model still defaults to wse2


def test_inspect_kernel_frontier_and_rejections() -> None:
    out = run("inspect", CHAIN, "--kernel", "k5")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    m = enumerate_contest(parse_kgraph(CHAIN).by_name("k5"), parse_kgraph(CHAIN).fabric)
    assert "Op models of k5 (conv H=4 W=4 C=32 K=64 R=3 S=3 T=1 U=1) on the 120 x 96 fabric, memlimit 4,096" in text
    assert "h w c k" in text  # the execution arguments in the solution's order
    assert f"... {len(m) - 60} more frontier models (use --all or --json)" in text
    first = " ".join(str(v) for v in m.exec_args(0).solution_order())
    assert first in out.stdout
    for label in ("memory over limit (", "taller than the fabric (", "wider than the fabric (", "dominated: by"):
        assert label in text
    assert "counts by reason: legal (on the frontier) 332, memory over limit 48, taller than the fabric 39" in text
    # 332 counted by brute force over all 32,768 execution arguments x 2 orientations (the other counts are over the
    # candidates the enumeration examines, which no brute force reproduces)
    assert frontier_size(brute(ContestKind.CONV, m.kernel.args, parse_kgraph(CHAIN).fabric)[0]) == len(m) == 332
    every = run("inspect", CHAIN, "--kernel", "k5", "--all")
    assert every.returncode == 0 and "more frontier models" not in every.stdout
    assert f"│ {len(m)} │" in every.stdout  # the last row is shown


def test_inspect_kernel_json_rows_match_the_formulas() -> None:
    doc = run_json("inspect", CHAIN, "--kernel", "k2")
    graph = parse_kgraph(CHAIN)
    k2 = graph.by_name("k2")
    m = enumerate_contest(k2, graph.fabric)
    assert doc["kernel"] == "k2" and doc["kind"] == "cblock" and doc["formal"] == {"H": 16, "W": 16, "F": 32}
    assert doc["exec_names"] == ["h", "w", "c1", "c2", "c3", "c4", "k1", "k2", "k3", "k4"]
    assert doc["fabric"] == {"width": 120, "height": 96, "memlimit": 4096}
    assert doc["frontier"] == len(doc["models"]) == len(m) == doc["counts"]["legal"]
    assert doc["counts"] == {"legal": len(m), **{r.name.lower(): n for r, n in m.rejected}}
    assert doc["raw_space"] == m.raw_space and doc["examined"] == m.examined and doc["infeasible"] is None
    times = [row["time"] for row in doc["models"]]
    assert times == sorted(times)  # fastest first
    for row in doc["models"]:
        ex = row["exec"]
        perf = kernel_perf(k2.kind, k2.args, ExecArgs(ex[0], ex[1], tuple(ex[2:6]), tuple(ex[6:10])))
        placed = (perf.width, perf.height) if row["orientation"] == "R90" else (perf.height, perf.width)
        assert (row["height"], row["width"]) == placed and row["time"] == perf.time
        assert row["memory"] == pytest.approx(float(perf.memory)) and perf.memory <= 4096
    reasons = {e["reason"] for e in doc["rejected_examples"]}
    assert reasons == {key for key, n in doc["counts"].items() if n and key != "legal"}
    for e in doc["rejected_examples"]:
        assert len(e["exec"]) == 10 and e["reason_label"]
        if e["reason"] == "memory_over_limit":
            assert e["memory"] > 4096
        if e["reason"] == "taller_than_fabric":
            assert e["height"] > 96


def test_inspect_infeasible_kernel_shows_why() -> None:
    """A kernel with no legal model is reported with its rejections (like an ONNX kernel without a grid)."""
    out = run("inspect", CHAIN, "--set", "memlimit=10", "--kernel", "k1")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "k1 has no legal model" in text and "over memlimit 10" in text and "memory over limit (" in text
    doc = run_json("inspect", CHAIN, "--set", "memlimit=10", "--kernel", "k1")
    assert doc["frontier"] == 0 and doc["models"] == [] and "over memlimit 10" in doc["infeasible"]
    assert doc["counts"]["memory_over_limit"] > 0
    whole = run_json("inspect", CHAIN, "--set", "memlimit=10")
    assert whole["bounds"] is None and "k1" in whole["infeasible"]
    assert "k1" in whole["totals"]["infeasible_kernels"] and "k4" not in whole["totals"]["infeasible_kernels"]
    table = run("inspect", CHAIN, "--set", "memlimit=10")
    assert table.returncode == 0 and "no lower bound: no legal solution exists" in " ".join(table.stdout.split())


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("k9", "similar: k5, k4, k3, k2, k1"),
        ("K1", "similar: k1"),
        ("k0", "k0 is an input node: it is not placed"),
        ("zzz", "e.g. k1, k2, k3, k4, k5"),
    ],
)
def test_inspect_unknown_kernel(name: str, needle: str) -> None:
    line = one_line_error(run("inspect", CHAIN, "--kernel", name), 2)
    assert f"--kernel {name!r}: no such kernel in {CHAIN}" in line and needle in line


# -- verify: a legal solution ---------------------------------------------------------------------
# tiny_chain.sol, by hand (fabric 120 x 96, memlimit 4,096, wdeltat 1, wlength 2):
#   k1 conv h1 w4 c8 k16: 1*4*9 = 36 tall, 3*16 = 48 wide, time 16*4*1*1*9 = 576; R0 at (0, 0), centre (24, 18)
#   k2 cblock h1 w2 c8.. k4 4 2 4: 18 tall, 3*14 = 42 wide, time 576; R0 at (48, 0), centre (69, 9)
#   k3 dblock h1 w2 c8.. k2 4 2: 18 tall, 24 wide, time 576; R0 at (90, 0), centre (102, 9)
#   k4 conv h1 w1 c8 k4: 9 tall, 12 wide, time 8*8*4*8/(2*2) = 512; R90 at (48, 18): 9 wide, 12 tall, centre (52.5, 24)
#   k5 conv h1 w1 c32 k16: 33 tall, 48 wide, time 4*4*1*4*9 = 576; R0 at (60, 18), centre (84, 34.5)
# edges k1-k2 45+9, k2-k3 33+0, k3-k4 49.5+15, k2-k4 16.5+15, k4-k5 31.5+10.5: wirelength 225
# score 1 x 576 + 2 x 225 = 1,026; the bound is 288, time / bound 2
def test_verify_hand_written_solution() -> None:
    out = run("verify", CHAIN_SOL, "--kgraph", CHAIN)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"{CHAIN_SOL}: OK (5 kernels of tiny-chain on the 120 x 96 fabric" in text
    assert "max kernel time 576 (k1); wirelength 225 over 5 edges" in text
    assert "score = wdeltat x max time + wlength x wirelength = 1 x 576 + 2 x 225 = 1,026" in text
    assert "adapter term: not modelled" in text
    assert "lower bound on the largest kernel time 288; time / bound 2.0000" in text


def test_verify_json_document() -> None:
    doc = run_json("verify", CHAIN_SOL, "--kgraph", CHAIN)
    assert doc["solution"] == CHAIN_SOL and doc["instance"]["path"] == CHAIN and doc["instance"]["wlength"] == 2
    assert doc["ok"] is True and doc["violations"] == []
    assert (doc["max_time"], doc["max_time_kernel"], doc["wirelength"], doc["edges_counted"]) == (576, "k1", 225.0, 5)
    assert doc["score"] == 1026.0 and doc["score_terms"] == {"time": 576, "wirelength": 450.0}
    assert doc["lower_bound"] == 288 and doc["time_over_bound"] == 2.0 and "not modelled" in doc["adapter"]
    k4 = next(k for k in doc["kernels"] if k["name"] == "k4")
    assert (k4["x"], k4["y"], k4["width"], k4["height"], k4["time"], k4["memory"]) == (48, 18, 9, 12, 512, 544.0)
    direct = verify_solution(read_solution(CHAIN_SOL), parse_kgraph(CHAIN)).to_dict()
    assert {k: v for k, v in doc.items() if k not in ("solution", "instance", "score_terms")} == direct


def test_verify_header_overrides() -> None:
    cheaper = run_json("verify", CHAIN_SOL, "--kgraph", CHAIN, "--set", "wlength=1")
    assert cheaper["score"] == 576 + 225 and cheaper["instance"]["header_overrides"] == {"wlength": 1}
    narrow = run("verify", CHAIN_SOL, "--kgraph", CHAIN, "--set", "width=100")
    line = one_line_error(narrow, 4)
    assert "2 violation(s): line 8: k3 at (90, 0) R0 spans x 90..114, y 0..18: outside the 100x96 fabric (and 1 more)" in line


def _shelf_solution(graph: ContestGraph) -> Solution:
    """A legal solution built from the enumerated models: each kernel at its smallest model within a time
    target, packed in shelves; the target doubles until the shelves fit."""
    models = enumerate_graph(graph)
    fab = graph.fabric
    target = contest_bounds(graph, models).value
    for _ in range(12):
        picks = []
        for m in models:
            idx = np.flatnonzero(m.time <= target)
            i = int(idx[np.argmin(m.area[idx])])
            picks.append((m, i))
        picks.sort(key=lambda p: -int(p[0].height[p[1]]))
        x = y = shelf = 0
        kernels = []
        for m, i in picks:
            h, w = int(m.height[i]), int(m.width[i])
            if x + w > fab.width:
                x, y, shelf = 0, y + shelf, 0
            if y + h > fab.height or w > fab.width:
                break
            k = m.kernel
            kernels.append(solution_kernel(k.name, k.kind, k.args, m.exec_args(i), x, y, m.orientation_of(i)))
            x, shelf = x + w, max(shelf, h)
        else:
            return Solution(tuple(kernels))
        target *= 2
    pytest.fail(f"no shelf packing of {graph.source}")


@pytest.mark.parametrize("instance", [CHAIN, FABRIC])
def test_verify_computed_solution(instance: str, tmp_path: Path) -> None:
    graph = parse_kgraph(instance)
    solution = _shelf_solution(graph)
    path = tmp_path / "computed.sol"
    path.write_text(format_solution(solution))
    out = run("verify", str(path), "--kgraph", instance)
    assert out.returncode == 0, out.stderr
    assert f"{path}: OK ({len(graph)} kernels" in out.stdout
    doc = run_json("verify", str(path), "--kgraph", instance)
    report = verify_solution(solution, graph)
    assert doc["ok"] and doc["max_time"] == report.max_time and doc["score"] == float(report.score)  # type: ignore[arg-type]


# -- verify: tampered solutions, each rejected with its reason -------------------------------------
def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _append(extra: str) -> Callable[[str], str]:
    return lambda text: text + extra


K5 = "k5 = conv( 4 4 32 64 3 3 1 1 1 1 32 16 )\n"
TAMPERED = [
    ("missing kernel", _replace(K5 + "k5 : place( 60 18 R0 )\n", ""), "k5 (conv) is in the instance but not in the solution"),
    ("unknown kernel", _append(K5.replace("k5", "k9") + "k9 : place( 0 90 R0 )\n"), "k9 is not a placed kernel of the instance"),
    ("duplicate kernel", _append("k3 = dblock( 8 8 32 1 2 8 8 8 2 4 2 )\n"), "k3 is instantiated 2 times"),
    ("not placed", _replace("k5 : place( 60 18 R0 )\n", ""), "k5 is instantiated but never placed"),
    ("duplicate placement", _append("k4 : place( 0 90 R0 )\n"), "k4 is placed more than once"),
    ("placed not instantiated", _append("k7 : place( 0 90 R0 )\n"), "k7 is placed but never instantiated"),
    (
        "wrong kind",
        _replace("k3 = dblock( 8 8 32 1 2 8 8 8 2 4 2 )", "k3 = cblock( 8 8 32 1 2 8 8 8 8 2 4 2 2 )"),
        "k3 is a dblock in the instance, not a cblock",
    ),
    (
        "wrong formal args",
        _replace("conv( 16 16 8 16", "conv( 16 16 9 16"),
        "k1 formal arguments differ from the instance: C=9 (instance: 8)",
    ),
    (
        "exec out of range",
        _replace("3 3 1 1 1 4 8 16 )", "3 3 1 1 1 4 9 16 )"),
        "k1 execution arguments out of range: c=9 not in [1, 8]",
    ),
    ("bad orientation", _replace("k1 : place( 0 0 R0 )", "k1 : place( 0 0 R45 )"), "k1 orientation 'R45' is not R0 or R90"),
    (
        "memory over limit",  # h = w = c = k = 1: 8*16*9 + 18*18*16 = 6,336 per tile
        _replace("3 3 1 1 1 4 8 16 )", "3 3 1 1 1 1 1 1 )"),
        "k1 needs 6,336.00 memory per tile, over memlimit 4,096",
    ),
    (
        "outside fabric",
        _replace("k5 : place( 60 18 R0 )", "k5 : place( 100 18 R0 )"),
        "k5 at (100, 18) R0 spans x 100..148, y 18..51: outside the 120x96 fabric",
    ),
    ("overlap", _replace("k4 : place( 48 18 R90 )", "k4 : place( 60 18 R0 )"), "k4 and k5 overlap on 12x9 tiles"),
]


@pytest.mark.parametrize(("kind", "edit", "needle"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_verify_tampered_solution(kind: str, edit: Callable[[str], str], needle: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sol"
    bad.write_text(edit(Path(CHAIN_SOL).read_text()))
    line = one_line_error(run("verify", str(bad), "--kgraph", CHAIN), 4)
    assert f"{bad}: " in line and " violation(s): " in line and needle in line
    out = run("verify", str(bad), "--kgraph", CHAIN, "--json")
    assert out.returncode == 4 and out.stderr.strip().splitlines() == [line]  # the JSON on stdout, the verdict on stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] is False and doc["violations"][0]["kind"] == kind and needle in doc["violations"][0]["message"]


def test_verify_reports_the_root_cause_first(tmp_path: Path) -> None:
    text = Path(CHAIN_SOL).read_text()
    text = text.replace("k1 : place( 0 0 R0 )", "k1 : place( 0 0 R45 )")
    text = text.replace("k2 = cblock( 16 16 32 1 2 8 8 8 8 4 4 2 4 )\n", "")
    bad = tmp_path / "two.sol"
    bad.write_text(text)
    line = one_line_error(run("verify", str(bad), "--kgraph", CHAIN), 4)
    # k2's placement is now stray (placed, never instantiated) and k2 is missing: the missing kernel comes first
    assert "3 violation(s): k2 (cblock) is in the instance but not in the solution (and 2 more)" in line
    kinds = [v["kind"] for v in json.loads(run("verify", str(bad), "--kgraph", CHAIN, "--json").stdout)["violations"]]
    assert kinds == ["missing kernel", "placed not instantiated", "bad orientation"]


def test_verify_unreadable_solution_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "short.sol"
    bad.write_text("k1 = conv( 16 16 8 16 3 3 1 1 1 4 8 16 )\n\nk2 = conv( 1 2 3 )\n")
    line = one_line_error(run("verify", str(bad), "--kgraph", CHAIN), 2)
    assert f"{bad}:3: a conv takes 12 integers" in line


# -- usage errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["verify", CHAIN_SOL], f"{CHAIN_SOL}: a contest solution; pass its instance: wsealloc verify {CHAIN_SOL} --kgraph"),
        (["verify", "plan.json", "--kgraph", CHAIN], "plan.json: a plan JSON records its own model and arch; drop --kgraph"),
        (["verify", "plan.json", "--set", "width=3"], "--set overrides a .kgraph header and needs --kgraph X.kgraph"),
        (["verify", CHAIN_SOL, "--kgraph", CHAIN, "--model", "m.onnx"], "--model names a plan's model"),
        (["verify", CHAIN_SOL, "--kgraph", ATTENTION], f"--kgraph {ATTENTION}: not a .kgraph contest instance"),
        (["verify", CHAIN_SOL, "--kgraph", "/no/such.kgraph"], "--kgraph /no/such.kgraph: no such file"),
        (["verify", CHAIN_SOL, "--kgraph", CHAIN, "--set", "fabric=3"], "a .kgraph header field is one of width, height"),
        (["verify", CHAIN_SOL, "--kgraph", CHAIN, "--set", "width=0"], "--set width=0: width must be positive"),
        (["verify", CHAIN_SOL, "--kgraph", CHAIN, "--set", "wlength=x"], "'x' is not a whole number"),
        (["verify", "/no/such.sol", "--kgraph", CHAIN], "/no/such.sol: no such solution file"),
        (["verify", "/no/plan.json"], "no such plan file"),  # the plan verifier, unchanged
    ],
)
def test_verify_usage_errors(args: list[str], needle: str) -> None:
    out = run(*args)
    assert out.returncode == 2
    line = one_line_error(out, 2)
    assert needle in line, line


def test_verify_recognises_files_by_content(tmp_path: Path) -> None:
    """A solution without the .sol suffix still needs --kgraph; a plan JSON under another name refuses it."""
    sol = tmp_path / "solution.txt"
    sol.write_text(Path(CHAIN_SOL).read_text())
    assert "a contest solution; pass its instance" in one_line_error(run("verify", str(sol)), 2)
    assert run("verify", str(sol), "--kgraph", CHAIN).returncode == 0
    plan = tmp_path / "plan.out"
    plan.write_text('{"schema": "wsealloc.plan/1"}\n')
    assert "a plan JSON records its own model" in one_line_error(run("verify", str(plan), "--kgraph", CHAIN), 2)


# -- the shared contest instances ------------------------------------------------------------------
def test_inspect_shared_instance_reproduces_the_readme_bound() -> None:
    doc = run_json("inspect", str(shared_instance("A.kgraph")))
    instance = doc["instance"]
    assert instance["test"] == "compact-balanced-router" and (instance["width"], instance["height"]) == (633, 633)
    assert doc["bounds"]["value"] == doc["bounds"]["area"] == 33_152  # the README's figure for A
    assert doc["bounds"]["single_kernel"] == 3_360 and doc["bounds"]["single_kernel_name"] == "k3"
    assert doc["totals"]["kernels"] == 16 and doc["totals"]["distinct_kernels"] == 8
    # a regression figure (recorded from the code): A's blocks have raw spaces no brute force can list; the
    # frontier itself is checked against brute force on small kernels (test_kgraph_enum) and tiny_chain's convs
    assert doc["totals"]["frontier_models"] == 156_234


def test_the_solvers_outputs_verify_alike(tmp_path: Path) -> None:
    """``solve X.kgraph -o plan.json --solution X.sol``: the plan (plan.verify) and the solution file (this
    command) verify, with the same figures; a plan never takes --kgraph."""
    plan, sol = tmp_path / "plan.json", tmp_path / "out.sol"
    out = run("solve", CHAIN, "--time-limit", "1", "-o", str(plan), "--solution", str(sol))
    assert out.returncode == 0, out.stderr
    assert run("verify", str(plan)).stdout.startswith(f"{plan}: OK (5 kernels, ")
    recorded = json.loads(plan.read_text())["objective"]
    doc = run_json("verify", str(sol), "--kgraph", CHAIN)
    assert doc["ok"] and (doc["max_time"], doc["wirelength"], doc["score"]) == (
        recorded["max_time"],
        recorded["wirelength"],
        recorded["score"],
    )
    assert doc["lower_bound"] == recorded["lower_bound"] == 288
    assert "a plan JSON records its own model" in one_line_error(run("verify", str(plan), "--kgraph", CHAIN), 2)
