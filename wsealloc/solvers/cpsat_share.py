"""CP-SAT closing the sharing search's Lagrangian gap exactly (``solvers.share``).

The candidate runs (i, j, g) that survive reduced-cost fixing form a path from kernel 0 to kernel n:
Boolean ``y[t]`` per run, flow conservation at every cut (runs ending at p = runs starting at p), one
run leaving 0 and one entering n, the runs' cores within the wafer, minimize the runs' latency. Every
plan better than the hint uses only these runs, so CP-SAT's optimum here is the optimum over every
partition and candidate grid. Integer scale: 1 unit = 1 cycle. The hint is complete; explicit time
limit, one worker and a seed for reproducibility.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.sat.python import cp_model

from wsealloc.budget import Deadline
from wsealloc.solvers.base import Status

_STATUS = {cp_model.OPTIMAL: Status.OPTIMAL, cp_model.FEASIBLE: Status.FEASIBLE, cp_model.INFEASIBLE: Status.INFEASIBLE}


def solve_partition(
    n: int,
    runs: Sequence[tuple[int, int, int]],
    latency: Sequence[int],
    cores: Sequence[int],
    total_cores: int,
    hint: set[tuple[int, int, int]],
    deadline: Deadline,
    lower_bound: int,
    seed: int = 0,
) -> tuple[Status, list[int], int | None]:
    """(status, indices of the chosen runs, proven bound) of the path model over ``runs``."""
    m = cp_model.CpModel()
    y = [m.new_bool_var(f"run_{i}_{j}_g{g}") for i, j, g in runs]
    starts: list[list[cp_model.IntVar]] = [[] for _ in range(n + 1)]
    ends: list[list[cp_model.IntVar]] = [[] for _ in range(n + 1)]
    for var, (i, j, _) in zip(y, runs, strict=True):
        starts[i].append(var)
        ends[j].append(var)
    m.add(sum(starts[0]) == 1)
    m.add(sum(ends[n]) == 1)
    for p in range(1, n):
        m.add(sum(ends[p]) == sum(starts[p]))
    m.add(cp_model.LinearExpr.weighted_sum(y, [int(c) for c in cores]) <= total_cores)
    objective = cp_model.LinearExpr.weighted_sum(y, [int(v) for v in latency])
    m.add(objective >= lower_bound)
    m.minimize(objective)
    for var, run in zip(y, runs, strict=True):
        m.add_hint(var, run in hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = deadline.seconds_for_solver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.catch_sigint_signal = False  # see cpsat._solver
    with deadline.stop.active(solver.stop_search):
        raw = solver.solve(m)
    status = _STATUS.get(raw, Status.UNKNOWN)
    if status not in (Status.OPTIMAL, Status.FEASIBLE):
        return status, [], None
    chosen = [t for t, var in enumerate(y) if solver.boolean_value(var)]
    bound = int(np.ceil(solver.best_objective_bound - 1e-6))
    return status, chosen, bound
