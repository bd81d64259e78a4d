"""The branching contest instances of ``benchmarks/branching.py`` (GoogLeNet and DenseNet written in
the contest format): their kernel and edge counts by hand, and a small one of each solved under a
time cap, legal by the engine's verifier and by the benchmark's independent check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from wsealloc.api import run
from wsealloc.contest import ContestOutcome
from wsealloc.frontend.kgraph import parse_kgraph
from wsealloc.plan.contest_solution import format_solution
from wsealloc.request import build_request

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its neighbours
    try:
        spec = importlib.util.spec_from_file_location(f"bench_script_{name}", ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_instances_have_the_networks_kernels_and_edges(tmp_path: Path) -> None:
    branching = _script("branching")
    paths = {p.stem: p for p in branching.write(tmp_path)}
    google = parse_kgraph(paths["googlenet"])
    # stem: 3 convs, 2 edges between them; 9 modules of 6 convs; the first module's 4 branch heads
    # read the stem (4 edges), every later module's 4 heads read the 4 branch ends before it (16);
    # 2 edges inside each module (3x3 and 5x5 reduce): 2 + (4 + 2) + 8 x (16 + 2) = 152
    assert (len(google.kernels), len(google.edges)) == (3 + 9 * 6, 152)
    dense = parse_kgraph(paths["densenet121"])
    # a block of m layers over one input tensor: layer i's bottleneck reads i + 1 tensors, plus the
    # bottleneck -> 3x3 edge: m (m + 1) / 2 + m; a transition reads m + 1 tensors
    blocks = (6, 12, 24, 16)
    edges = sum(m * (m + 1) // 2 + m for m in blocks) + sum(m + 1 for m in blocks[:-1])
    assert (len(dense.kernels), len(dense.edges)) == (1 + 2 * sum(blocks) + 3, edges) == (120, 638)
    # fan-in: the transition after the third block reads its input and its 24 layers
    fan_in = max(sum(1 for e in dense.edges if e.dst == k.node_id) for k in dense.kernels)
    assert fan_in == 25


def test_small_branching_instances_solve_legally_under_a_time_cap(tmp_path: Path) -> None:
    branching = _script("branching")
    ispd = _script("ispd2020")
    small = {
        "inception": branching.googlenet(branching.GOOGLENET[:2], "inception"),
        "dense": branching.densenet((3, 3), 16, "dense"),
    }
    for name, text in small.items():
        path = tmp_path / f"{name}.kgraph"
        path.write_text(text)
        out = run(build_request(path, time_limit=3, time_cap=1.05))
        assert isinstance(out, ContestOutcome) and out.report.ok, name
        obj = out.plan.objective
        assert obj.lower_bound <= obj.max_time, name  # (the cap ranks layouts; a small graph may not reach it)
        sol = tmp_path / f"{name}.sol"
        sol.write_text(format_solution(out.solution))
        legal, problem, max_time, wirelength = ispd.independent_check(path, sol)
        assert legal, (name, problem)
        assert max_time == obj.max_time and wirelength == obj.wirelength, name
