"""The objective as one object (problem/objective.py) and the one allocation program both backends
render (problem/program.py): the latency objective (a token's path) solved by CP-SAT and PuLP equals
brute force on small random chains and DAGs; its LP bound never exceeds the optimum; backends that
cannot solve it exactly refuse it by name; hand-computed values of the path and the bound."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from test_solvers import problems

from wsealloc.api import build_request
from wsealloc.budget import Deadline
from wsealloc.errors import UsageError
from wsealloc.pipeline import build_costs
from wsealloc.problem import AllocationProblem, Choices, GreedyHints
from wsealloc.problem.objective import (
    ContestScore,
    Latency,
    Throughput,
    latency_lp_bound,
    objective_named,
    path_length,
    path_relaxation,
)
from wsealloc.solvers import SolveOptions, Status, get_solver


def brute_latency(p: AllocationProblem) -> int | None:
    """The least token path over every combination of op models that fits the cores."""
    best = None
    for choice in itertools.product(*(range(len(p.choices(i))) for i in range(p.n_kernels))):
        value, cores = p.evaluate(choice)
        if cores <= p.total_cores and (best is None or value < best):
            best = value
    return best


@st.composite
def latency_problems(draw: st.DrawFn) -> AllocationProblem:
    """Random problems under the latency objective: a chain, or a DAG (each kernel reads some earlier ones)."""
    p = draw(problems(max_kernels=5))
    n = p.n_kernels
    if draw(st.booleans()):
        preds = tuple(tuple(sorted(draw(st.sets(st.integers(0, k - 1), max_size=2)))) if k else () for k in range(n))
    else:
        preds = tuple(((k - 1,) if k else ()) for k in range(n))
    return replace(p, objective=Latency(), preds=preds)


def test_path_by_hand() -> None:
    # a -> b, a -> c, (b, c) -> d: the path is a + max(b, c) + d
    assert path_length(((), (0,), (0,), (1, 2)), (), [5, 7, 3, 2]) == 5 + 7 + 2
    assert path_length((), (), [5, 7, 3, 2]) == 17  # no graph: one after another
    # c runs after b on shared cores (serial), so the path is a + b + c + d
    assert path_length(((), (0,), (0,), (1, 2)), (-1, -1, 1, -1), [5, 7, 3, 2]) == 17


def test_lp_bound_by_hand() -> None:
    # two kernels, 10 cores: each (2 cores, 100) or (6 cores, 40): the LP buys 6 extra cores at 15/core
    ch = Choices(np.array([2, 6]), np.array([100, 40]))
    hints = GreedyHints((1.0, 1.0), (0, 0), (False, False), (0, 0), 1)
    p = AllocationProblem(("a", "b"), (0, 0), (ch,), 10, hints, Latency())
    # base 200 at 4 cores; 6 more cores save 15 each = 90 -> 110; the integer optimum is 140
    assert latency_lp_bound(p) == 110
    assert brute_latency(p) == 140


def test_lp_bound_counts_parallel_branches_by_hand() -> None:
    """a -> (b, c) -> d, b and c in parallel: each (1 core, 100 cycles) or (3 cores, 40), a and d one
    core at 10; 6 cores, so 2 beyond the fewest. The critical chain a, b, d alone would give b both
    (60 saved: 10 + 40 + 10 = 60, the bound before). Any token waits for the slower of b and c, so the
    relaxation splits the 2 cores between them, 1 each at 30 saved: 10 + 70 + 10 = 90, which the flow
    of half a token through each branch proves (0.5 x 100 + 0.5 x 100 - 2 x 15 + 20). The optimum
    is 120 (one branch on 3 cores, the other on 1)."""
    fixed = Choices(np.array([1]), np.array([10]))
    branch = Choices(np.array([1, 3]), np.array([100, 40]))
    hints = GreedyHints((1.0,) * 4, (0,) * 4, (False,) * 4, (0,) * 4, 1)
    p = AllocationProblem(
        ("a", "b", "c", "d"), (0, 1, 1, 0), (fixed, branch), 6, hints, Latency(), preds=((), (0,), (0,), (1, 2))
    )
    assert latency_lp_bound(p) == 90
    assert brute_latency(p) == 120


@settings(max_examples=40, deadline=None)
@given(latency_problems())
def test_the_relaxation_rounded_is_an_allocation_within_the_cores(p: AllocationProblem) -> None:
    """``path_relaxation``'s allocation gives back the fractional segment: every kernel on a frontier
    point, within the cores, never faster than the bound; ``exact_bound``'s start is the faster of it
    and ``latency_start``'s, and fits."""
    relaxed = path_relaxation(p)
    if relaxed is None:
        assert p.min_cores() > p.total_cores
        return
    bound, rounded = relaxed
    value, cores = p.evaluate(rounded)
    assert p.feasible(rounded) and cores <= p.total_cores and bound <= value
    proven = Latency().exact_bound(replace(p, objective=Latency()))
    assert proven.start is not None and p.feasible(proven.start) and p.evaluate(proven.start)[0] <= value


def test_the_relaxation_rounded_by_hand() -> None:
    """The diamond of ``test_lp_bound_counts_parallel_branches_by_hand``: half a token through each
    branch, the 2 cores bought for b first (a tie with c, in order), c's segment not bought: b on 3
    cores, c on 1, 120 cycles, the optimum, where the chain's start gives the same."""
    fixed = Choices(np.array([1]), np.array([10]))
    branch = Choices(np.array([1, 3]), np.array([100, 40]))
    hints = GreedyHints((1.0,) * 4, (0,) * 4, (False,) * 4, (0,) * 4, 1)
    preds = ((), (0,), (0,), (1, 2))
    p = AllocationProblem(("a", "b", "c", "d"), (0, 1, 1, 0), (fixed, branch), 6, hints, Latency(), preds=preds)
    relaxed = path_relaxation(p)
    assert relaxed is not None and relaxed[0] == 90
    assert sorted(relaxed[1][1:3]) == [0, 1] and p.evaluate(relaxed[1]) == (120, 6)


def _relaxation(p: AllocationProblem) -> float:
    """The LP relaxation ``latency_lp_bound`` climbs to, solved independently (PuLP, CBC): every kernel's
    latency on or above its frontier's lower hull, finish times along the graph, the cores within the
    budget."""
    import pulp

    from wsealloc.problem.latency_start import lower_hull

    m = pulp.LpProblem("relaxation", pulp.LpMinimize)
    top = pulp.LpVariable("top")
    cores, finish = [], []
    for k in range(p.n_kernels):
        ch = p.choices(k)
        h = lower_hull(ch.cores, ch.latency)
        hc, hl = ch.cores[h].astype(float), ch.latency[h].astype(float)
        c = pulp.LpVariable(f"c{k}", float(hc[0]), float(hc[-1]))
        lat = pulp.LpVariable(f"l{k}", float(hl[-1]))
        for j in range(1, hc.size):
            m += lat >= hl[j - 1] + (hl[j] - hl[j - 1]) / (hc[j] - hc[j - 1]) * (c - hc[j - 1])
        f = pulp.LpVariable(f"f{k}")
        before = list(p.preds[k]) if p.preds else ([k - 1] if k else [])
        m += f >= lat
        for q in before:
            m += f >= finish[q] + lat
        m += top >= f
        cores.append(c)
        finish.append(f)
    m += pulp.lpSum(cores) <= p.total_cores
    m += top
    assert m.solve(pulp.PULP_CBC_CMD(msg=0)) == pulp.LpStatusOptimal
    return float(pulp.value(top))


def _chain_bound(p: AllocationProblem) -> int:
    """The bound before the flows of paths: Dantzig's over the critical chain alone, the kernels beside it
    on their fewest cores (written out here as it was)."""
    from wsealloc.problem.latency_start import lower_hull
    from wsealloc.problem.objective import critical_chain

    chain = critical_chain(p)
    budget = float(p.total_cores) - sum(float(p.choices(i).cores[0]) for i in range(p.n_kernels) if i not in chain)
    base, slopes = 0.0, []
    for i in chain:
        ch = p.choices(i)
        h = lower_hull(ch.cores, ch.latency)
        hc, hl = ch.cores[h].astype(float), ch.latency[h].astype(float)
        base, budget = base + hl[0], budget - hc[0]
        slopes += [((hl[j - 1] - hl[j]) / (hc[j] - hc[j - 1]), hc[j] - hc[j - 1]) for j in range(1, hc.size)]
    for rate, dc in sorted(slopes, key=lambda s: -s[0]):
        take = min(dc, max(budget, 0.0))
        base, budget = base - rate * take, budget - take
    return max(0, int(np.ceil(base - 1e-6 * max(1.0, base))))


@settings(max_examples=60, deadline=None)
@given(latency_problems())
def test_lp_bound_climbs_from_the_chain_and_stays_within_the_relaxation(p: AllocationProblem) -> None:
    """The flows of paths start at the critical chain (the bound before) and climb, every step a valid
    bound: never below the chain's bound, never above the LP relaxation of the longest path (solved
    independently by CBC), rounded up (latencies are whole cycles)."""
    bound = latency_lp_bound(p)
    if bound is None:
        assert p.min_cores() > p.total_cores
        return
    relaxed = _relaxation(p)
    # (a cycle's slack below the chain's: near 2**50 cycles the sums in another order round apart: a review)
    assert _chain_bound(p) - 1 <= bound <= np.ceil(relaxed + 1e-6 * max(1.0, relaxed)), (bound, relaxed)


def test_lp_bound_reaches_the_relaxation_on_branching_models() -> None:
    """On the models' graphs (layers in sequence, branches within them) the climb reaches the LP
    relaxation, as CBC solves it, within 0.1%: the tiny decode at 16 requests (exactly, 1,345) and the
    tiny prefill (13,810 for 13,813.9; the zoo within 1e-5: docs/benchmarks.md, session 42). Where
    many branches tie at once (equal independent kernels) it may
    stop short of it, still a valid bound (the property above); four equal kernels sharing one core
    reach it (the tied segments share the core, so the climb does not zig-zag between them)."""
    from wsealloc.problem import build_problem

    for name, requests in (("llm_decode", 16), ("llm_prefill", 1)):
        options = {"objective": "latency", "requests": requests, "place": False}
        if name == "llm_decode":
            options["context"] = 16
        req = build_request(str(MODELS / "tiny" / f"{name}.onnx"), "tiny", **options)  # type: ignore[arg-type]
        costs = build_costs(req.onnx_model, req.machine, req.cost)
        p = build_problem(costs, objective=Latency(requests=requests))
        assert not p.is_chain()
        relaxed = _relaxation(p)
        bound = latency_lp_bound(p)
        assert bound is not None and relaxed * (1 - 1e-3) <= bound <= np.ceil(relaxed + 1e-6 * relaxed), (name, bound, relaxed)
    one = Choices(np.array([23, 24]), np.array([4, 2]))
    fixed = Choices(np.array([1]), np.array([2]))
    hints = GreedyHints((1.0,) * 4, (0,) * 4, (False,) * 4, (0,) * 4, 1)
    p = AllocationProblem(("k0", "k1", "k2", "k3"), (0, 0, 0, 1), (one, fixed), 71, hints, Latency(), preds=((),) * 4)
    assert latency_lp_bound(p) == 4  # each kernel a third of the core: 4 - 2/3 = 3.33, rounded up
    assert brute_latency(p) == 4


@settings(max_examples=40, deadline=None)
@given(latency_problems())
def test_latency_backends_equal_brute_force(p: AllocationProblem) -> None:
    best = brute_latency(p)
    bound = latency_lp_bound(p)
    if best is None:
        assert bound is None or p.min_cores() > p.total_cores
        return
    assert bound is not None and bound <= best  # the LP relaxation is a valid bound
    opts = SolveOptions(deadline=Deadline.after(20), lower_bound=bound)
    for name in ("cpsat", "pulp"):
        result = get_solver(name)(p, opts)
        assert result.status is Status.OPTIMAL, (name, result)
        assert result.objective == best, (name, result.objective, best)
        assert p.feasible(result.choice)
    greedy = get_solver("greedy")(p, opts)
    if greedy.status is Status.FEASIBLE:
        assert greedy.objective >= best


@settings(max_examples=25, deadline=None)
@given(problems(max_kernels=5))
def test_latency_and_throughput_differ_only_in_the_objective(p: AllocationProblem) -> None:
    """Under min-max the program gives today's optimum; under latency a plan is never worse on its own
    objective than the min-max plan is."""
    if p.min_cores() > p.total_cores:
        return
    opts = SolveOptions(deadline=Deadline.after(20))
    mm = get_solver("cpsat")(p, opts)
    lat = get_solver("cpsat")(replace(p, objective=Latency()), opts)
    assert mm.status is Status.OPTIMAL and lat.status is Status.OPTIMAL
    assert lat.objective <= replace(p, objective=Latency()).evaluate(mm.choice)[0]
    assert mm.objective <= p.evaluate(lat.choice)[0]


def test_bisection_and_stage_cut_refuse_latency_by_name() -> None:
    ch = Choices(np.array([1, 2]), np.array([10, 6]))
    hints = GreedyHints((1.0,), (0,), (False,), (0,), 1)
    p = AllocationProblem(("a",), (0,), (ch,), 4, hints, Latency())
    with pytest.raises(UsageError, match="bisect cannot solve --objective latency.*min-max only"):
        get_solver("bisect")(p, SolveOptions())
    from wsealloc.problem.stages import StageProblem
    from wsealloc.solvers.stages import solve as stage_solve

    with pytest.raises(UsageError, match="--wafers.*latency"):
        stage_solve(StageProblem(p, np.zeros(2), 0.0, 0), 2)


def test_objectives_by_name_and_contest_rank() -> None:
    assert isinstance(objective_named("throughput"), Throughput) and isinstance(objective_named("latency"), Latency)
    with pytest.raises(UsageError, match="unknown objective .speed.; choose one of: latency, throughput"):
        objective_named("speed")
    contest = ContestScore(1.0, 40.0, cap=105)
    from wsealloc.cost.comm import CommCosts

    zero = np.zeros(2, dtype=np.int64)
    within = contest.rank(np.array([100, 90]), CommCosts(zero, zero, zero, zero, 14.0))
    over = contest.rank(np.array([110, 90]), CommCosts(zero, zero, zero, zero, 1.0))
    assert within[1] == 100 + 40 * 14 and within < over  # a layout within the cap ranks first, whatever its score


@pytest.mark.parametrize(("small", "total"), [((2, 2), 10), ((3, 2), 11)])
def test_pulp_reads_an_integral_optimum_where_cbc_preprocessing_lost_it(small: tuple[int, int], total: int) -> None:
    """Two independent kernels of one class and a third of two choices: CBC 2.10's preprocessing made one
    binary of the two-way group continuous and returned its root LP point (0.5, 0.5) with status
    Optimal (found by the property above); the backend solves once more without preprocessing and reads
    the integral optimum (3 cycles: 4 + 4 cores for the pair, the third on its larger choice)."""
    pair = Choices(np.array([1, 2, 3, 4, 5]), np.array([6, 5, 4, 3, 2]))
    third = Choices(np.array([1, small[0]]), np.array([4, small[1]]))
    hints = GreedyHints((1.0, 1.0, 1.0), (0, 0, 0), (False, False, False), (0, 0, 0), 1)
    p = AllocationProblem(("k0", "k1", "k2"), (1, 1, 0), (third, pair), total, hints, Latency(), preds=((), (), ()))
    result = get_solver("pulp")(p, SolveOptions(deadline=Deadline.after(20), lower_bound=latency_lp_bound(p)))
    assert result.status is Status.OPTIMAL and result.objective == brute_latency(p) == 3


# -- requests in flight (``--requests N``): each request's token takes max(path, N x slowest) ------------


def test_paced_value_by_hand() -> None:
    from wsealloc.plan import rules
    from wsealloc.problem.objective import ObjectiveKind, paced

    # a chain of 10, 30, 20: one pass 60; 4 requests in flight wait for the 30-cycle stage 4 times: 120
    assert paced(60, 30, 1) == 60
    assert paced(60, 30, 2) == 60
    assert paced(60, 30, 4) == 120
    assert rules.objective_value(ObjectiveKind.LATENCY, [10, 30, 20], [[], [0], [1]], 4) == 120
    assert rules.objective_value(ObjectiveKind.LATENCY, [10, 30, 20], [[], [0], [1]]) == 60
    assert rules.objective_value(ObjectiveKind.THROUGHPUT, [10, 30, 20], [[], [0], [1]], 4) == 30  # a rate's value is its slowest
    # two wafers of paths 60 and 50 and a 5-cycle link, the slowest stage 30: 115 alone, 3 x 30 = 90 < 115, 4 x 30 = 120
    assert rules.wafers_value(ObjectiveKind.LATENCY, 30, [60, 50], [5], 3) == 115
    assert rules.wafers_value(ObjectiveKind.LATENCY, 30, [60, 50], [5], 4) == 120
    assert objective_named("latency", 4) == Latency(requests=4)
    assert objective_named("throughput", 4) == Throughput()


def test_paced_bound_by_hand() -> None:
    # two kernels, 10 cores, each (2 cores, 100) or (6 cores, 40): one of them on 6 cores at most.
    ch = Choices(np.array([2, 6]), np.array([100, 40]))
    hints = GreedyHints((1.0, 1.0), (0, 0), (False, False), (0, 0), 1)
    p = AllocationProblem(("a", "b"), (0, 0), (ch,), 10, hints, Latency(requests=3))
    # every allocation has a 100-cycle kernel: 3 requests wait 300 for it; the LP path bound is 110
    assert Latency(requests=3).exact_bound(p).value == 300
    assert brute_latency(p) == 300  # (2, 2): path 200, 3 x 100; (2, 6): path 140, 3 x 100
    for name in ("cpsat", "pulp"):
        result = get_solver(name)(p, SolveOptions(deadline=Deadline.after(20), lower_bound=300))
        assert result.status is Status.OPTIMAL and result.objective == 300, (name, result)


@settings(max_examples=40, deadline=None)
@given(latency_problems(), st.integers(2, 6))
def test_paced_backends_equal_brute_force(p: AllocationProblem, requests: int) -> None:
    """With requests in flight both exact backends find the least max(path, requests x slowest) of every
    allocation, and the objective's bound never exceeds it."""
    p = replace(p, objective=Latency(requests=requests))
    best = brute_latency(p)
    bound = p.objective.exact_bound(p).value
    if best is None:
        return
    assert bound is not None and bound <= best
    opts = SolveOptions(deadline=Deadline.after(20), lower_bound=bound)
    for name in ("cpsat", "pulp"):
        result = get_solver(name)(p, opts)
        assert result.status is Status.OPTIMAL, (name, result)
        assert result.objective == best, (name, result.objective, best)
        assert p.evaluate(result.choice)[0] == best
    greedy = get_solver("greedy")(p, opts)
    if greedy.status is Status.FEASIBLE:
        assert greedy.objective >= best
        hinted = get_solver("cpsat")(p, replace(opts, hint=greedy.choice))  # the hint's value prunes slow candidates
        assert hinted.objective == best


@settings(max_examples=60, deadline=None)
@given(latency_problems(), st.integers(1, 6))
def test_the_latency_start_fits_and_is_optimal_only_where_it_is(p: AllocationProblem, requests: int) -> None:
    """``latency_start`` (the bound's own allocation): it fits the cores, its value is never below the
    optimum (brute force), and where the bound calls it optimal (``choice``) it is the optimum."""
    p = replace(p, objective=Latency(requests=requests))
    best = brute_latency(p)
    proven = p.objective.exact_bound(p)
    if best is None:
        assert proven.start is None
        return
    assert proven.start is not None and p.feasible(proven.start)
    value = p.evaluate(proven.start)[0]
    assert value >= best and proven.value is not None and proven.value <= best
    if proven.choice is not None:
        assert value == best == proven.value
    # the value alone (``allocate=False``): the same bound, no allocation made
    alone = p.objective.exact_bound(p, allocate=False)
    assert alone.value == proven.value and alone.start is None and alone.choice is None


def test_the_latency_start_by_hand() -> None:
    """A chain of two kernels of one class and one of another, 20 cores: each of the first on (2, 100)
    or (6, 40), the third on (2, 300) or (10, 60). The least sum: the third on 10 cores (240 cycles
    saved for 8 cores, 30 a core, before the 15 a core of the first two): 100 + 100 + 60 on 14 cores,
    then the 6 left buy one of the first two its 6 cores (4 more; 18 in all): 40 + 100 + 60 = 200, the optimum
    (brute force). With 4 requests in flight every allocation waits 4 x 100 at least: the value 400."""
    first = Choices(np.array([2, 6]), np.array([100, 40]))
    third = Choices(np.array([2, 10]), np.array([300, 60]))
    hints = GreedyHints((1.0, 1.0, 1.0), (0, 0, 0), (False, False, False), (0, 0, 0), 1)
    p = AllocationProblem(("a", "b", "c"), (0, 0, 1), (first, third), 20, hints, Latency(), preds=((), (0,), (1,)))
    proven = p.objective.exact_bound(p)
    assert proven.start is not None and p.evaluate(proven.start) == (200, 18) and brute_latency(p) == 200
    paced = replace(p, objective=Latency(requests=4))
    start = paced.objective.exact_bound(paced).start
    assert start is not None and paced.evaluate(start)[0] == 400 == brute_latency(paced)


def test_cores_move_from_beside_the_path_to_it() -> None:
    """a -> (b, c) -> d on 16 cores: b on 2 cores takes 1,000 cycles, c on 10 cores 50. c has 950 cycles
    of slack: back on 2 cores (100) it frees the 8 that take b to 200; the path 1,020 -> 220."""
    from wsealloc.problem.latency_start import _reclaim

    edge = Choices(np.array([2]), np.array([10]))
    slow = Choices(np.array([2, 10]), np.array([1000, 200]))
    side = Choices(np.array([2, 10]), np.array([100, 50]))
    hints = GreedyHints((1.0,) * 4, (0,) * 4, (False,) * 4, (0,) * 4, 1)
    preds = ((), (0,), (0,), (1, 2))
    p = AllocationProblem(("a", "b", "c", "d"), (0, 1, 2, 0), (edge, slow, side), 16, hints, Latency(), preds=preds)
    assert p.evaluate([0, 0, 1, 0]) == (1020, 16)
    moved = _reclaim(p, [0, 0, 1, 0], 1020, 1)
    assert moved == [0, 1, 0, 0] and p.evaluate(moved) == (220, 16)


def test_the_hull_of_a_frontier_with_latencies_near_the_cycle_limit_keeps_its_points() -> None:
    """Latencies near 2**50 times a wafer's cores pass 2**63: the hull test in int64 wrapped and dropped
    the middle point (a review), which raised the LP bound above the optimum."""
    from wsealloc.problem.latency_start import lower_hull

    hull = lower_hull(np.array([1, 2, 900_000], dtype=np.int64), np.array([2**50 - 1, 2**40, 1], dtype=np.int64))
    assert hull.tolist() == [0, 1, 2]
