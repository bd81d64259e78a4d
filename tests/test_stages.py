"""Multi-wafer stage partition: the DP equals brute force over cut points; one wafer that fits equals
the single-wafer optimum; a kernel larger than a wafer is diagnosed."""

from __future__ import annotations

import numpy as np
from exhaustive import pipeline_by_cuts
from hypothesis import given, settings
from hypothesis import strategies as st
from test_solvers import problems

from wsealloc.problem import AllocationProblem
from wsealloc.problem.stages import StageProblem
from wsealloc.solvers import SolveOptions, Status, get_solver
from wsealloc.solvers.stages import solve


def brute_force(sp: StageProblem, wafers: int) -> int | None:
    """Every set of cut points, each stage's optimum by a linear scan (tests/exhaustive.py, no solver)."""
    return pipeline_by_cuts(sp, wafers)


@st.composite
def stage_problems(draw: st.DrawFn, short_by: int = 0) -> tuple[StageProblem, int]:
    p = draw(problems(max_kernels=6, short_by=short_by))
    n = p.n_kernels
    cut = np.array([0.0] + [float(draw(st.integers(0, 5000))) for _ in range(n - 1)] + [0.0])
    sp = StageProblem(p, cut, cycles_per_byte=draw(st.sampled_from([0.01, 0.1, 1.0])), latency_cycles=draw(st.integers(0, 50)))
    return sp, draw(st.integers(1, 4))


def test_dp_equals_brute_force() -> None:
    """Wafer sizes drawn from well below the kernels' total to above it: a kernel alone too big for a
    wafer, too few wafers, and feasible partitions; the infeasible and the feasible branch must both run."""
    seen = {"infeasible": 0, "feasible": 0}

    @settings(max_examples=150, deadline=None)
    @given(stage_problems(short_by=40))
    def check(case: tuple[StageProblem, int]) -> None:
        sp, wafers = case
        expected = brute_force(sp, wafers)
        seen["infeasible" if expected is None else "feasible"] += 1
        got = solve(sp, wafers)
        if expected is None:
            assert got.status is Status.INFEASIBLE and got.objective is None
        else:
            assert got.status is Status.OPTIMAL and got.objective == expected
            assert got.cuts[0] == 0 and got.cuts[-1] == sp.n_kernels and got.wafers <= wafers

    check()
    assert seen["infeasible"] > 0 and seen["feasible"] > 0, seen


@settings(max_examples=80, deadline=None)
@given(problems())
def test_one_wafer_that_fits_equals_single_wafer_plan(p: AllocationProblem) -> None:
    sp = StageProblem(p, np.zeros(p.n_kernels + 1), 1.0, 0)
    single = get_solver("bisect")(p, SolveOptions())
    staged = solve(sp, 1)
    assert staged.objective == single.objective and staged.cuts == (0, p.n_kernels)
    auto = solve(sp, None)
    assert auto.wafers == 1 and auto.objective == single.objective


@settings(max_examples=60, deadline=None)
@given(stage_problems())
def test_more_wafers_never_worse(case: tuple[StageProblem, int]) -> None:
    sp, wafers = case
    a, b = solve(sp, wafers), solve(sp, wafers + 1)
    if a.objective is not None:
        assert b.objective is not None and b.objective <= a.objective
