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
