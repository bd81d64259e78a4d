"""How the placement engine shares its time under the user's rules (``place.RULED_CONSTRUCTION_SHARE``,
``place.baseline_share``): the construction leaves the moves after it their share."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from wsealloc.budget import Deadline
from wsealloc.cost.comm import MeshParams
from wsealloc.problem.flows import Flows
from wsealloc.problem.placement import INF, PlacementProblem, shape_table
from wsealloc.solvers import place
from wsealloc.solvers.strips import Stacking, Style


def _chain(n: int = 6, rows: int = 8, cols: int = 64) -> PlacementProblem:
    """``n`` chained kernels: any rectangle of at least 8 columns on 2, 4 or 8 rows computes in 100 cycles."""
    heights = np.array([2, 4, 8])
    best = np.full((heights.size, cols + 1), INF, dtype=np.int64)
    best[:, 8:] = 100
    table = shape_table(heights, best, np.zeros_like(best, dtype=np.int32))
    mesh = MeshParams(rows, cols, rows, cols, 4.0, 1, rows, cols, 0)
    src = np.arange(n - 1)
    fl = Flows(src, src + 1, np.full(n - 1, 4.0), src.copy())
    return PlacementProblem(
        tuple(f"k{i}" for i in range(n)), (0,) * n, (table,), mesh, np.zeros((rows, cols), bool), "ignore", fl, 100
    )


def _ruled(problem: PlacementProblem) -> PlacementProblem:
    """The same problem with a keep-out of one core in its top-left corner (a user rule)."""
    blocked = problem.blocked.copy()
    blocked[0, 0] = True
    return replace(problem, keep_out=((0, 0, 1, 1),), blocked=blocked)


def test_the_baseline_takes_less_of_the_time_under_the_users_rules() -> None:
    problem = _chain()
    assert not problem.ruled and place.baseline_share(problem) == place.BASELINE_SHARE
    ruled = _ruled(problem)
    assert ruled.ruled and place.baseline_share(ruled) == place.RULED_BASELINE_SHARE < place.BASELINE_SHARE


def test_under_the_users_rules_the_construction_stops_at_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    # with a vanishing share the multi-start ends after its first layout under the rules (the first
    # style's search runs unbounded until a layout exists), but tries every style without them
    calls: list[Style] = []
    real = place.smallest_target

    def counted(
        problem: PlacementProblem, margins: np.ndarray, lo: int, deadline: Deadline, style: Style, first: bool = False
    ) -> object:
        calls.append(style)
        return real(problem, margins, lo, deadline, style, first)

    monkeypatch.setattr(place, "smallest_target", counted)
    monkeypatch.setattr(place, "RULED_CONSTRUCTION_SHARE", 1e-9)
    ruled = _ruled(_chain())
    built = place.construct_best(ruled, Deadline.after(30))
    placed = None if built is None else built.placed
    assert placed is not None and not ruled.violations(placed.rects)
    assert len(calls) == 1
    calls.clear()
    free = _chain()
    assert place.construct_best(free, Deadline.after(30)) is not None
    # (every style but the turns, which pack no tighter than the plain runs here: ``test_turns``)
    every = {(s.min_band, s.stack) for s in place.styles(free) if s.stack is not Stacking.TURNS}
    assert {(s.min_band, s.stack) for s in calls} == every and len(every) > 1


def test_the_construction_offers_its_runners_up_to_the_moves() -> None:
    """The construction hands the moves its next best-ranked distinct band layouts (``Built.others``:
    at most ``PROBES`` - 1, none equal to the best, each valid), with or without the user's rules
    (they take only the time the best start's moves leave), each honouring the rules."""
    for problem in (_chain(), _ruled(_chain())):
        built = place.construct_best(problem, Deadline.after(30))
        assert built is not None and 1 <= len(built.others) <= place.PROBES - 1
        seen = [built.placed.rects, *(other.rects for other in built.others)]
        assert all(not np.array_equal(a, b) for i, a in enumerate(seen) for b in seen[i + 1 :])
        assert all(not problem.violations(other.rects) and not problem.layout_errors(other.rects) for other in built.others)


def test_the_runners_up_are_improved_on_the_time_the_best_start_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The construction's best is improved on all the time, as without runners-up; what its moves
    leave (here all of it: they end at once) is shared equally among the runners-up, each a share of
    what is left, and the best result by the objective's rank is kept: here the second runner-up's,
    whose moves made it fastest."""
    from wsealloc.solvers.base import SolveOptions
    from wsealloc.solvers.strips import Placed

    problem = _chain()
    built = place.construct_best(problem, Deadline.after(30))
    assert built is not None
    layouts = [built.placed, *built.others]
    # three starts: the runner-up offered, and the best layout shifted right by a column as a third
    third = Placed(built.placed.rects + np.array([0, 1, 0, 0]), built.placed.dataflow, built.placed.latency)
    layouts.append(third)
    monkeypatch.setattr(place, "construct_best", lambda *_, **__: place.Built(layouts[0], "strips", others=tuple(layouts[1:])))
    fast = Placed(layouts[0].rects, layouts[0].dataflow, layouts[0].latency - 1)  # every kernel a cycle faster
    calls: list[tuple[int, float]] = []

    def moves(problem: PlacementProblem, placed: Placed, options: SolveOptions, made_by: str = "strips") -> tuple[Placed, str]:
        which = next((i for i, layout in enumerate(layouts) if placed is layout), -1)
        calls.append((which, options.deadline.remaining()))
        return (fast, f"{made_by}+relocate") if which == 2 else (placed, made_by)

    monkeypatch.setattr(place, "improve", moves)
    result = place.solve(problem, SolveOptions(deadline=Deadline.after(30)))
    assert [which for which, _ in calls] == [0, 1, 2]  # the best, then the runners-up; no more moves
    assert all(abs(left - want) < 0.5 for (_, left), want in zip(calls, [30, 15, 30], strict=True))
    assert result.solver == "strips+relocate" and result.objective == int(problem.evaluate(fast.rects, fast.latency)[0].max())
