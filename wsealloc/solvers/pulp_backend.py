"""PuLP backend: the allocation program (``wsealloc.problem.program``, the one statement of the model
the CP-SAT backend renders too) rendered for CBC (bundled with pulp) or HiGHS.

``pulp`` uses CBC; ``pulp-highs`` uses the ``highs`` executable through ``HiGHS_CMD`` (a separate
process: highspy and ortools 9.15 cannot be imported into one process: whichever comes second fails with an undefined symbol).

CBC under a time limit can report "Infeasible" for a feasible model, and PuLP maps "stopped on time
with a solution" to status Optimal: we never trust the status alone. The returned values are checked
against the constraints; if they do not check out, the warm start (best known solution) is returned
with status FEASIBLE and the reason in the message.
"""

from __future__ import annotations

import itertools
import shutil
import time
from typing import Any

import numpy as np
import pulp

from wsealloc.errors import SolverError
from wsealloc.problem import AllocationProblem
from wsealloc.problem.objective import Aggregate
from wsealloc.problem.program import build_program
from wsealloc.solvers.base import SolveOptions, SolverResult, Status, result_from_choice

INTEGRAL = 1e-6  # a binary's value this near 0 or 1 is read as that
MAX_REPAIRS = 256  # choices tried where CBC returned fractional values


def _backend(name: str, options: SolveOptions, time_limit: float, preprocess: bool = True) -> Any:
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
        options=[f"randomCbcSeed {options.seed + 1}"] + ([] if preprocess else ["preprocess off"]),
    )


def _solve(problem: AllocationProblem, options: SolveOptions, backend: str) -> SolverResult:
    start = time.perf_counter()
    name = "pulp" if backend == "cbc" else f"pulp-{backend}"
    hint = options.hint if options.hint is not None and problem.feasible(options.hint) else None
    program = build_program(problem, options.lower_bound, hint, options.exploit_symmetry)
    prob = pulp.LpProblem("wsealloc", pulp.LpMinimize)
    x = [[pulp.LpVariable(f"x_{g}_{j}", cat="Binary") for j in gr.keep.tolist()] for g, gr in enumerate(program.groups)]
    # No upper bound on T: CBC 2.10 reported "Infeasible" for a feasible model whose optimum sat exactly
    # on T's upper bound (reproduced on a 6-Boolean instance; see tests/test_solvers.py).
    T = pulp.LpVariable(program.value_name, lowBound=program.lower)
    prob += T
    lat: list[Any] = []
    for g, gr in enumerate(program.groups):
        if not x[g]:
            lat.append(None)
            continue
        prob += pulp.lpSum(x[g]) == 1
        lat.append(pulp.lpSum(int(v) * var for v, var in zip(gr.latency, x[g], strict=True)))
        if program.aggregate is Aggregate.MAX:
            prob += lat[g] <= T
    if program.aggregate is Aggregate.PATH and program.chain:
        prob += pulp.lpSum(gr.mult * lat[g] for g, gr in enumerate(program.groups) if x[g]) <= T
    elif program.aggregate is Aggregate.PATH:
        finish = [pulp.LpVariable(f"finish_{k}", lowBound=0) for k in range(len(program.groups))]
        for k in range(len(program.groups)):
            before = list(program.preds[k]) + ([program.serial[k]] if program.serial and program.serial[k] >= 0 else [])
            prob += finish[k] >= lat[k]
            for q in before:
                prob += finish[k] >= finish[q] + lat[k]
            prob += finish[k] <= T
    if program.paced:  # requests in flight: T is also pace x the slowest kernel
        slowest = pulp.LpVariable("slowest_cycles", lowBound=0)
        for lat_g in lat:
            if lat_g is not None:
                prob += lat_g <= slowest
        prob += program.pace * slowest <= T
    cores = pulp.lpSum(gr.mult * int(c) * v for g, gr in enumerate(program.groups) for c, v in zip(gr.cores, x[g], strict=True))
    prob += cores <= program.total_cores
    for counts, cap in program.budgets:  # the user's areas
        prob += (
            pulp.lpSum(
                n * int(c) * v for g, n in enumerate(counts) if n for c, v in zip(program.groups[g].cores, x[g], strict=True)
            )
            <= cap
        )

    def start_from(gc: list[int] | tuple[int, ...]) -> None:
        for g, j in enumerate(gc):
            if x[g]:
                pos = program.hint_position(g, j)
                for jj, var in enumerate(x[g]):
                    var.setInitialValue(1 if jj == pos else 0)

    if program.hint is not None:
        start_from(program.hint)
        T.setInitialValue(program.hint_value)

    repaired = False

    def read() -> list[int] | None:
        """The choice CBC returned; where a group's values are fractional (CBC 2.10 has returned its
        root LP point with status Optimal after its preprocessing made one binary of a two-way group
        continuous), the best feasible choice among the group options it left positive (a few)."""
        nonlocal repaired
        options_of: list[list[int]] = []
        for g, row in enumerate(x):
            if not row:
                options_of.append([0])
                continue
            vals = [v.varValue if v.varValue is not None else 0.0 for v in row]
            whole = [j for j, val in enumerate(vals) if val > 1.0 - INTEGRAL]
            some = whole if len(whole) == 1 else [j for j, val in enumerate(vals) if val > INTEGRAL]
            if not some:
                return None
            repaired |= len(some) > 1
            options_of.append([int(program.groups[g].keep[j]) for j in some])
        best: tuple[int, list[int]] | None = None
        for combo in itertools.islice(itertools.product(*options_of), MAX_REPAIRS):
            kernel = program.kernel_choice(list(combo))
            if problem.feasible(kernel):
                value = problem.evaluate(kernel)[0]
                if best is None or value < best[0]:
                    best = (value, list(combo))
        return best[1] if best is not None else None

    prob.solve(_backend(backend, options, options.deadline.seconds_for_solver(1.0)))
    chosen = read()
    if repaired and backend == "cbc":  # CBC's preprocessing lost integrality: once more without it
        repaired = False
        prob.solve(_backend(backend, options, options.deadline.seconds_for_solver(1.0), preprocess=False))
        chosen = read()
    proven = prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal
    if chosen is None:
        if prob.status == pulp.LpStatusInfeasible and program.hint is None:
            return SolverResult(
                name,
                Status.INFEASIBLE,
                None,
                None,
                None,
                time.perf_counter() - start,
                message=f"{name}: {pulp.LpStatus[prob.status]}",
            )
        if program.hint is None:
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
            program.kernel_choice(program.hint),
            Status.FEASIBLE,
            options.lower_bound,
            time.perf_counter() - start,
            message=f"{name} returned no valid solution ({pulp.LpStatus[prob.status]}); kept the warm start",
        )
    t_best = problem.evaluate(program.kernel_choice(chosen))[0]
    if repaired:  # CBC's optimum proves a repaired choice only when the choice reaches it
        proven = proven and prob.objective is not None and t_best <= np.ceil(pulp.value(prob.objective) - 1e-6)
    bound = t_best if proven else options.lower_bound
    remaining = options.deadline.remaining()
    if options.minimize_cores and remaining > 0.5 and not options.deadline.stopped:
        prob += t_best >= T
        prob.setObjective(cores)
        start_from(chosen)
        prob.solve(_backend(backend, options, remaining))
        second = read()
        if second is not None and problem.evaluate(program.kernel_choice(second))[0] <= t_best:
            chosen = second
    choice = program.kernel_choice(chosen)
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
