"""PuLP backend: the same MILP as the CP-SAT backend, solved by CBC (bundled with pulp) or HiGHS.

``pulp`` uses CBC; ``pulp-highs`` uses the ``highs`` executable through ``HiGHS_CMD`` (a separate
process: highspy and ortools 9.15 cannot be imported into one process: whichever comes second fails with an undefined symbol).

CBC under a time limit can report "Infeasible" for a feasible model, and PuLP maps "stopped on time
with a solution" to status Optimal: we never trust the status alone. The returned values are checked
against the constraints; if they do not check out, the warm start (best known solution) is returned
with status FEASIBLE and the reason in the message.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import numpy as np
import pulp

from wsealloc.errors import SolverError
from wsealloc.problem import AllocationProblem
from wsealloc.solvers.base import SolveOptions, SolverResult, Status, result_from_choice


def _backend(name: str, options: SolveOptions, time_limit: float) -> Any:
    if name == "highs":
        if shutil.which("highs") is None:
            raise SolverError(
                "solver pulp-highs needs the `highs` executable on PATH (e.g. from the HiGHS releases); "
                "use --solver pulp (CBC, bundled) instead"
            )
        return pulp.HiGHS_CMD(msg=options.log, timeLimit=time_limit, threads=max(1, options.workers))
    return pulp.PULP_CBC_CMD(
        msg=options.log,
        timeLimit=max(1, int(np.ceil(time_limit))),
        threads=max(1, options.workers),
        warmStart=True,
        options=[f"randomCbcSeed {options.seed + 1}"],
    )


def _groups(problem: AllocationProblem, options: SolveOptions) -> tuple[list[int], list[Any]]:
    if options.exploit_symmetry:
        return list(problem.kernel_class), list(problem.classes)
    return list(range(problem.n_kernels)), [problem.choices(i) for i in range(problem.n_kernels)]


def _solve(problem: AllocationProblem, options: SolveOptions, backend: str) -> SolverResult:
    start = time.perf_counter()
    group_of, groups = _groups(problem, options)
    mult = np.bincount(np.asarray(group_of, dtype=np.int64), minlength=len(groups))
    name = "pulp" if backend == "cbc" else f"pulp-{backend}"

    def to_kernels(gc: list[int]) -> tuple[int, ...]:
        return tuple(gc[g] for g in group_of)

    # Warm start per group: the member with the fewest cores keeps the start feasible.
    hint_groups: list[int] | None = None
    if options.hint is not None and problem.feasible(options.hint):
        hint_groups = [10**9] * len(groups)
        for i, j in enumerate(options.hint):
            hint_groups[group_of[i]] = min(hint_groups[group_of[i]], j)
        hint_groups = [0 if v == 10**9 else v for v in hint_groups]
    upper = problem.evaluate(to_kernels(hint_groups))[0] if hint_groups is not None else None
    # Same exact candidate window as the CP-SAT model (see Choices.window).
    keep = [ch.window(options.lower_bound, upper) if mult[g] else np.arange(0) for g, ch in enumerate(groups)]
    prob = pulp.LpProblem("wsealloc", pulp.LpMinimize)
    x = [[pulp.LpVariable(f"x_{g}_{j}", cat="Binary") for j in k.tolist()] for g, k in enumerate(keep)]
    hi = max(int(ch.latency[k[0]]) for ch, k in zip(groups, keep, strict=True) if k.size)
    lo = options.lower_bound or 0
    # No upper bound on T: CBC 2.10 reported "Infeasible" for a feasible model whose optimum sat exactly
    # on T's upper bound (reproduced on a 6-Boolean instance; see tests/test_solvers.py).
    T = pulp.LpVariable("bottleneck_cycles", lowBound=min(lo, hi))
    prob += T
    for g, ch in enumerate(groups):
        if not x[g]:
            continue
        prob += pulp.lpSum(x[g]) == 1
        prob += pulp.lpSum(int(lat) * v for lat, v in zip(ch.latency[keep[g]], x[g], strict=True)) <= T
    cores = pulp.lpSum(
        int(mult[g]) * int(c) * v for g, ch in enumerate(groups) for c, v in zip(ch.cores[keep[g]], x[g], strict=True)
    )
    prob += cores <= problem.total_cores

    def start_from(gc: list[int]) -> None:
        for g, j in enumerate(gc):
            if x[g]:
                pos = int(np.clip(j, keep[g][0], keep[g][-1]) - keep[g][0])
                for jj, var in enumerate(x[g]):
                    var.setInitialValue(1 if jj == pos else 0)

    if hint_groups is not None:
        start_from(hint_groups)
        T.setInitialValue(upper)

    def read() -> list[int] | None:
        chosen = []
        for g, row in enumerate(x):
            if not row:
                chosen.append(0)
                continue
            vals = [v.varValue if v.varValue is not None else 0.0 for v in row]
            ones = [j for j, val in enumerate(vals) if val > 0.5]
            if len(ones) != 1:
                return None
            chosen.append(int(keep[g][ones[0]]))
        return chosen if problem.feasible(to_kernels(chosen)) else None

    prob.solve(_backend(backend, options, options.deadline.seconds_for_solver(1.0)))
    chosen = read()
    proven = prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal
    if chosen is None:
        if prob.status == pulp.LpStatusInfeasible and hint_groups is None:
            return SolverResult(
                name,
                Status.INFEASIBLE,
                None,
                None,
                None,
                time.perf_counter() - start,
                message=f"{name}: {pulp.LpStatus[prob.status]}",
            )
        if hint_groups is None:
            return SolverResult(
                name,
                Status.UNKNOWN,
                None,
                None,
                options.lower_bound,
                time.perf_counter() - start,
                message=f"{name}: no valid solution ({pulp.LpStatus[prob.status]})",
            )
        return result_from_choice(
            name,
            problem,
            to_kernels(hint_groups),
            Status.FEASIBLE,
            options.lower_bound,
            time.perf_counter() - start,
            message=f"{name} returned no valid solution ({pulp.LpStatus[prob.status]}); kept the warm start",
        )
    t_best = problem.evaluate(to_kernels(chosen))[0]
    bound = t_best if proven else options.lower_bound
    remaining = options.deadline.remaining()
    if options.minimize_cores and remaining > 0.5 and not options.deadline.stopped:
        prob += t_best >= T
        prob.setObjective(cores)
        start_from(chosen)
        prob.solve(_backend(backend, options, remaining))
        second = read()
        if second is not None and problem.evaluate(to_kernels(second))[0] <= t_best:
            chosen = second
    choice = to_kernels(chosen)
    objective = problem.evaluate(choice)[0]
    status = Status.OPTIMAL if bound is not None and bound >= objective else Status.FEASIBLE
    return result_from_choice(
        name, problem, choice, status, bound, time.perf_counter() - start, message=f"{name}: {pulp.LpStatus[prob.status]}"
    )


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """CBC through PuLP."""
    return _solve(problem, options, "cbc")


def solve_highs(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """HiGHS (command-line executable) through PuLP."""
    return _solve(problem, options, "highs")
