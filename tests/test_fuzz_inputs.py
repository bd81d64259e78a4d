"""Fuzzing the inputs other than ONNX models (issue 36, deliverable 6): constraints files, option
strings, and plans with regions, training, streaming and constraints edited as JSON and fed to
``verify`` and ``solve --from-plan`` (the corpora: tests/fuzz_inputs.py, the issue's mutations first).

Each case ends in exit 0, or in one line ``wsealloc: error: ...`` (at most 1,200 characters) with an
exit code docs/errors.md documents; never an internal error (exit 70), a traceback, a crash, a hang or
a memory blow-up. The cases run in forked children (tests/test_fuzz.py's harness): each child's
address space is capped at what it has plus 4 GiB, and a case still running ``CASE_LIMIT_S`` after
the previous one is killed and fails alone. The default pytest runs the first cases of each corpus
(the issue's seeds, with ``--time-limit 2``); the slow group the rest of a larger corpus, with the
issue's ``--time-limit 5``. ``benchmarks/reliability.py`` runs all of them, each in its own process,
and prints the issue's counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fuzz_inputs import KINDS, PLAN_SEEDS, Case, base_plans, corpus, judge, with_time_limit
from test_fuzz import _cli, in_children

CASE_LIMIT_S = 60  # a case takes a few seconds at most (--time-limit 5): a hang is anything far beyond
QUICK = {"constraints": 12, "options": 12, "plans": len(PLAN_SEEDS)}  # the default pytest's cases of each kind
CORPUS = {"constraints": 120, "options": 120, "plans": 120}  # the slow group's (and the benchmark's default)


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The base plans: regions, a fixed grid, training, streaming, constraints, two wafers."""
    return base_plans(tmp_path_factory.mktemp("base-plans"), time_limit="1")


def _check(cases: list[Case], folder: Path, seconds: float | None) -> None:
    runs = []
    for case in cases:
        argv = case.materialize(folder / f"{case.kind}-{case.index}")
        argv = with_time_limit(argv, seconds) if seconds is not None else argv
        runs.append(lambda argv=argv: _cli(argv))
    failures = []
    for case, result in zip(cases, in_children(runs, CASE_LIMIT_S), strict=True):
        problem = judge(None, result) if isinstance(result, str) else judge(*result)
        if problem is not None:
            failures.append(f"{case.name} ({case.what[:160]}): {problem}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


# (the plans' and constraints' seeds in the slow group: each case solves, 6 s and 2 s in all)
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k != "options" else k for k in KINDS])
def test_fuzz_inputs(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The issue's seeds of each corpus (and the first drawn cases), with --time-limit 2."""
    given = request.getfixturevalue("plans") if kind == "plans" else None
    _check(corpus(kind, 0, QUICK[kind], given), tmp_path, 2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_fuzz_inputs_corpus(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The rest of each corpus, with the issue's --time-limit 5."""
    given = request.getfixturevalue("plans") if kind == "plans" else None
    _check(corpus(kind, QUICK[kind], CORPUS[kind], given), tmp_path, None)


def test_cases_are_deterministic_and_the_judge_is_strict() -> None:
    assert corpus("constraints", 30, 33) == corpus("constraints", 30, 33)
    assert corpus("options", 30, 33) == corpus("options", 30, 33)
    assert judge(0, "") is None and judge(3, "wsealloc: error: x: conflict\n") is None
    assert "exit 70" in str(judge(70, "wsealloc: internal error: KeyError\n"))
    assert "exactly one error line" in str(judge(2, "wsealloc: error: a\nwsealloc: error: b\n"))
    assert "1,301-character line" in str(judge(2, "wsealloc: error: " + "x" * 1284))
    assert "exit 1" in str(judge(1, "Usage: ...\n"))
    assert "traceback" in str(judge(2, "Traceback (most recent call last):\n  ...\n"))
    assert judge(None, "still running after 60 s (hang; its process was killed)") is not None
