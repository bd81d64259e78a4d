"""Solver backends: agreement with brute force on small random instances, greedy as an upper bound,
monotonicity in resources, identical-kernel classes, and the infeasible case."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from exhaustive import bottleneck_by_scan
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.budget import Deadline
from wsealloc.errors import UsageError
from wsealloc.problem import AllocationProblem, Choices, GreedyHints
from wsealloc.problem.objective import ALL_BACKENDS, HEURISTICS, ContestScore, Latency, Throughput
from wsealloc.solvers import SolveOptions, Status, get_solver, solver_names


@st.composite
def frontiers(draw: st.DrawFn) -> Choices:
    n = draw(st.integers(1, 5))
    cores = np.cumsum(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))).astype(np.int64)
    drops = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    latency = (sum(drops) + 1 - np.cumsum([0, *drops[:-1]])).astype(np.int64)
    return Choices(cores, latency)


@st.composite
def problems(draw: st.DrawFn, max_kernels: int = 5, short_by: int = 0) -> AllocationProblem:
    """Random allocation problems; the core total is at least the kernels' smallest op models' sum
    (feasible), or with ``short_by`` > 0 up to that many cores below it (infeasible there)."""
    classes = draw(st.lists(frontiers(), min_size=1, max_size=3))
    n = draw(st.integers(1, max_kernels))
    kernel_class = tuple(draw(st.integers(0, len(classes) - 1)) for _ in range(n))
    minimum = sum(int(classes[c].cores[0]) for c in kernel_class)
    maximum = sum(int(classes[c].cores[-1]) for c in kernel_class)
    total = draw(st.integers(max(1, minimum - short_by), maximum + 5))
    hints = GreedyHints(
        compute=tuple(float(draw(st.integers(1, 100))) for _ in range(n)),
        seed_compute=(0,) * n,
        seed_compute_bound=(False,) * n,
        seed_memory_bytes=(0,) * n,
        sram_bytes_per_core=1,
    )
    return AllocationProblem(tuple(f"k{i}" for i in range(n)), kernel_class, tuple(classes), total, hints)


def brute_force(p: AllocationProblem) -> int:
    best = brute_force_or_none(p)
    assert best is not None
    return best


def brute_force_or_none(p: AllocationProblem) -> int | None:
    """The optimum over every combination of op models, None when none fits the cores."""
    best = None
    for choice in itertools.product(*(range(len(p.choices(i))) for i in range(p.n_kernels))):
        lat, cores = p.evaluate(choice)
        if cores <= p.total_cores and (best is None or lat < best):
            best = lat
    return best


@settings(max_examples=120, deadline=None)
@given(problems())
def test_bisect_and_cpsat_equal_brute_force(p: AllocationProblem) -> None:
    opt = brute_force(p)
    assert bottleneck_by_scan(p) == opt  # the tests' own exact optimum (tests/exhaustive.py) agrees too
    exact = get_solver("bisect")(p, SolveOptions())
    assert exact.status is Status.OPTIMAL and exact.objective == opt and exact.bound == opt
    for sym in (True, False):
        r = get_solver("cpsat")(p, SolveOptions(exploit_symmetry=sym, deadline=Deadline.after(30)))
        assert r.status is Status.OPTIMAL and r.objective == opt and p.feasible(r.choice or ())
        # second phase: no more cores than the bisection's fewest-core choice at the optimum
        assert r.cores_used == exact.cores_used


def _pulp_agrees(p: AllocationProblem) -> None:
    opt = brute_force(p)
    r = get_solver("pulp")(p, SolveOptions(deadline=Deadline.after(30)))
    assert r.status is Status.OPTIMAL and r.objective == opt and p.feasible(r.choice or ())


@settings(max_examples=8, deadline=None)
@given(problems(max_kernels=4))
def test_pulp_equals_brute_force(p: AllocationProblem) -> None:
    _pulp_agrees(p)  # (every CBC call is a process: 8 cases here, 25 more in the slow group)


@pytest.mark.slow  # 25 more CBC processes (10 s): run by .ci/run (pytest -m slow)
@settings(max_examples=25, deadline=None)
@given(problems(max_kernels=4))
def test_pulp_equals_brute_force_on_more_cases(p: AllocationProblem) -> None:
    _pulp_agrees(p)


@settings(max_examples=100, deadline=None)
@given(problems())
def test_solver_never_worse_than_greedy(p: AllocationProblem) -> None:
    greedy = get_solver("greedy")(p, SolveOptions())
    assert greedy.status is Status.FEASIBLE and p.feasible(greedy.choice or ())
    hinted = get_solver("cpsat")(p, SolveOptions(hint=greedy.choice))
    assert hinted.objective is not None and greedy.objective is not None
    assert hinted.objective <= greedy.objective


@settings(max_examples=100, deadline=None)
@given(problems(), st.integers(1, 50))
def test_more_cores_never_worse(p: AllocationProblem, extra: int) -> None:
    base = get_solver("bisect")(p, SolveOptions())
    more = AllocationProblem(p.names, p.kernel_class, p.classes, p.total_cores + extra, p.hints)
    bigger = get_solver("bisect")(more, SolveOptions())
    assert bigger.objective is not None and base.objective is not None and bigger.objective <= base.objective


def test_every_backend_reports_infeasible_exactly_when_brute_force_finds_nothing() -> None:
    """Totals drawn below and above the smallest op models' sum: each exact backend says INFEASIBLE
    exactly when no combination fits, greedy too; both outcomes must occur among the cases drawn."""
    seen = {"infeasible": 0, "feasible": 0}

    @settings(max_examples=80, deadline=None)
    @given(problems(short_by=60))
    def check(p: AllocationProblem) -> None:
        opt = brute_force_or_none(p)
        assert bottleneck_by_scan(p) == opt
        seen["infeasible" if opt is None else "feasible"] += 1
        backends = [get_solver("bisect")(p, SolveOptions()), get_solver("cpsat")(p, SolveOptions(deadline=Deadline.after(30)))]
        if seen["infeasible"] + seen["feasible"] <= 20:  # PuLP/CBC is slow to start: a share of the cases
            backends.append(get_solver("pulp")(p, SolveOptions(deadline=Deadline.after(30))))
        for r in backends:
            if opt is None:
                assert r.status is Status.INFEASIBLE, r
            else:
                assert r.status is Status.OPTIMAL and r.objective == opt, r
        greedy = get_solver("greedy")(p, SolveOptions())
        assert (greedy.status is Status.INFEASIBLE) == (opt is None)

    check()
    assert seen["infeasible"] > 0 and seen["feasible"] > 0, seen


def test_infeasible_is_reported() -> None:
    ch = Choices(np.array([10, 20]), np.array([100, 50]))
    hints = GreedyHints((1.0, 1.0), (0, 0), (False, False), (0, 0), 1)
    p = AllocationProblem(("a", "b"), (0, 0), (ch,), 15, hints)
    assert get_solver("bisect")(p, SolveOptions()).status is Status.INFEASIBLE
    assert get_solver("cpsat")(p, SolveOptions()).status is Status.INFEASIBLE
    assert get_solver("pulp")(p, SolveOptions()).status is Status.INFEASIBLE


def test_unknown_solver_lists_choices() -> None:
    with pytest.raises(UsageError, match="choose one of: .*bisect.*cpsat"):
        get_solver("gurobi")
    assert {"cpsat", "pulp", "bisect", "greedy", "greedy-seed"} <= set(solver_names())


def test_registry_holds_the_names_the_request_checks() -> None:
    """The request checks --solver against problem.objective's names (not importing the solvers); the
    registry holds exactly those, and every objective's exact backends and the heuristics are among them."""
    assert solver_names() == ALL_BACKENDS
    for name in ALL_BACKENDS:
        assert callable(get_solver(name))
    assert HEURISTICS.issubset(ALL_BACKENDS)
    assert all(cls.exact_backends <= set(ALL_BACKENDS) for cls in (Throughput, Latency, ContestScore))


def test_cpsat_is_deterministic_single_worker() -> None:
    ch = Choices(np.arange(1, 60, dtype=np.int64), (10_000 // np.arange(1, 60)).astype(np.int64) + np.arange(59, 0, -1))
    hints = GreedyHints((1.0,) * 6, (0,) * 6, (False,) * 6, (0,) * 6, 1)
    prob = AllocationProblem(tuple("abcdef"), (0,) * 6, (ch,), 200, hints)
    runs = {get_solver("cpsat")(prob, SolveOptions(exploit_symmetry=False, seed=3)).choice for _ in range(3)}
    assert len(runs) == 1
