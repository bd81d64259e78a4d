"""Seeded random contest instances solved end to end: every layout the engine hands out (both kernel
sequences, pairs and deep slots, exchanges, CP-SAT windows) passes the independent contest verifier.
Every seed in the suite has a legal solution, so each must be solved (an InfeasibleError fails it)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from wsealloc.api import run
from wsealloc.contest import ContestOutcome
from wsealloc.plan.contest_solution import format_solution, parse_solution
from wsealloc.plan.contest_verify import verify_solution
from wsealloc.request import build_request

CASES = 6


def _instance(rng: random.Random) -> str:
    """A random chain of convs, dblocks and cblocks with a few skip edges, on a random fabric."""
    n = rng.randint(4, 10)
    width, height = rng.choice([60, 90, 150, 240]), rng.choice([60, 90, 150, 240])
    header = (
        f"(*\ntest=random\nwidth={width}\nheight={height}\nwdeltat=1\nwlength={rng.choice([0, 1, 4, 40])}\n"
        f"wadapter=0\nmemlimit={rng.choice([4096, 24576])}\n*)\n"
    )
    nodes = []
    for i in range(1, n + 1):
        kind = rng.choice(["conv", "conv", "dblock", "cblock"])
        if kind == "conv":
            side, rs, stride = rng.choice([4, 8, 14]), rng.choice([1, 3]), rng.choice([1, 2])
            c, k = rng.choice([8, 16, 32, 64]), rng.choice([8, 16, 32, 64])
            nodes.append(f"conv[{i}] W={side} H={side} R={rs} S={rs} C={c} K={k} T={stride} U={stride} name='k{i}'")
        else:
            nodes.append(f"{kind}[{i}] f={rng.choice([32, 64])} h=8 w=8 name='k{i}'")
    kinds = {i: line.split("[", 1)[0] for i, line in enumerate(nodes, start=1)}
    edges = [f"{kinds[i]}[{i}]:y -> {kinds[i + 1]}[{i + 1}]:x, shape:[8][8][16]" for i in range(1, n)]
    for _ in range(rng.randint(0, 3)):
        s = rng.randint(1, n - 2)
        t = rng.randint(s + 2, n)
        edges.append(f"{kinds[s]}[{s}]:y -> {kinds[t]}[{t}]:x, shape:[8][8][16]")
    return header + "\n".join(nodes) + "\n" + "\n".join(edges) + "\n"


@pytest.mark.parametrize("seed", range(CASES))
def test_random_instances_solve_to_legal_solutions(seed: int, tmp_path: Path) -> None:
    path = tmp_path / f"random{seed}.kgraph"
    path.write_text(_instance(random.Random(seed)))
    # every seed here has a legal solution (the 40 seeds checked by hand all did): a refusal is a failure
    outcome = run(build_request(path, time_limit=0.5))
    assert isinstance(outcome, ContestOutcome) and outcome.report.ok
    # the written solution reads back and verifies on its own (as another tool's would)
    text = format_solution(outcome.solution)
    again = verify_solution(parse_solution(text, "random.sol"), outcome.graph, bound=outcome.bounds.value)
    assert again.ok and again.max_time == outcome.report.max_time and again.score == outcome.report.score
    assert outcome.report.max_time is not None and outcome.report.max_time >= outcome.bounds.value
