"""CP-SAT backend (OR-Tools), the default solver: renders the allocation program
(``wsealloc.problem.program``, where the model is stated and explained) as a CP-SAT model.

Integer scale: 1 unit = 1 cycle (latencies are whole cycles already). Hints are complete (every
variable) and mapped by candidate index. Explicit time limit, workers and random seed; on timeout
the best solution is returned with status FEASIBLE, its bound and gap.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from wsealloc.errors import SolverError
from wsealloc.problem import AllocationProblem
from wsealloc.problem.objective import Aggregate
from wsealloc.problem.program import AllocationProgram, build_program, finish_times
from wsealloc.solvers.base import SolveOptions, SolverResult, Status

PATH_PRESOLVE_MOST = 20_000  # Booleans of a path model above which CP-SAT's presolve is skipped

_STATUS = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}  # MODEL_INVALID is a bug in the model this module built: raised, never a status


class _Model:
    """The program rendered for CP-SAT."""

    def __init__(self, problem: AllocationProblem, program: AllocationProgram):
        self.problem = problem
        self.program = program
        self.model = cp_model.CpModel()
        m = self.model
        self.x = [[m.new_bool_var(f"x_{gr.name}_{j}") for j in gr.keep.tolist()] if gr.mult else [] for gr in program.groups]
        self.T = m.new_int_var(program.lower, program.upper, program.value_name)
        core_vars: list[cp_model.IntVar] = []
        core_coeffs: list[int] = []
        self.lat: list[cp_model.LinearExpr | None] = []
        path_vars: list[cp_model.IntVar] = []
        path_coeffs: list[int] = []
        for g, gr in enumerate(program.groups):
            if not self.x[g]:
                self.lat.append(None)
                continue
            m.add_exactly_one(self.x[g])
            lat = [int(v) for v in gr.latency]
            expr = cp_model.LinearExpr.weighted_sum(self.x[g], lat)
            self.lat.append(expr)
            if program.aggregate is Aggregate.MAX:
                m.add(expr <= self.T)
            else:
                path_vars += self.x[g]
                path_coeffs += [gr.mult * v for v in lat]
            core_vars += self.x[g]
            core_coeffs += [gr.mult * int(v) for v in gr.cores]
        self.finish: list[cp_model.IntVar] = []
        if program.aggregate is Aggregate.PATH and program.chain:
            m.add(cp_model.LinearExpr.weighted_sum(path_vars, path_coeffs) <= self.T)
        elif program.aggregate is Aggregate.PATH:
            # one token's finish time per kernel (kernels are their own groups here)
            self.finish = [m.new_int_var(0, program.upper, f"finish_{gr.name}") for gr in program.groups]
            for k, lat_k in enumerate(self.lat):
                assert lat_k is not None
                before = list(program.preds[k]) + ([program.serial[k]] if program.serial and program.serial[k] >= 0 else [])
                m.add(self.finish[k] >= lat_k)
                for p in before:
                    m.add(self.finish[k] >= self.finish[p] + lat_k)
                m.add(self.finish[k] <= self.T)
        self.slowest: cp_model.IntVar | None = None
        if program.paced:  # requests in flight: T is also pace x the slowest kernel
            self.slowest = m.new_int_var(0, program.upper, "slowest_cycles")
            for lat_g in self.lat:
                if lat_g is not None:
                    m.add(lat_g <= self.slowest)
            m.add(program.pace * self.slowest <= self.T)
        self.cores = cp_model.LinearExpr.weighted_sum(core_vars, core_coeffs)
        m.add(self.cores <= program.total_cores)
        for counts, cap in program.budgets:  # the user's areas
            inside = [
                (v, n * int(c))
                for g, n in enumerate(counts)
                if n
                for v, c in zip(self.x[g], program.groups[g].cores, strict=True)
            ]
            m.add(cp_model.LinearExpr.weighted_sum([v for v, _ in inside], [w for _, w in inside]) <= cap)

    def hint(self, group_choice: list[int] | tuple[int, ...]) -> None:
        """A complete hint: every Boolean, the finish times and T (original indices, clipped into the kept range)."""
        self.model.clear_hints()
        worst = 0
        chosen: list[int] = []
        for g, j in enumerate(group_choice):
            if not self.x[g]:
                chosen.append(0)
                continue
            pos = self.program.hint_position(g, j)
            for jj, var in enumerate(self.x[g]):
                self.model.add_hint(var, jj == pos)
            lat = int(self.program.groups[g].latency[pos])
            chosen.append(lat)
            worst = max(worst, lat)
        if self.program.aggregate is Aggregate.PATH:
            lat_k = [chosen[g] for g in self.program.group_of]
            finish = finish_times(self.program, lat_k)
            for var, value in zip(self.finish, finish, strict=False):
                self.model.add_hint(var, value)
            worst = max(finish, default=0) if self.finish else sum(lat_k)
            if self.slowest is not None:
                slowest = max(lat_k, default=0)
                self.model.add_hint(self.slowest, slowest)
                worst = max(worst, self.program.pace * slowest)
        self.model.add_hint(self.T, worst)

    def read(self, solver: cp_model.CpSolver) -> list[int]:
        """Per-group chosen original index from the solver's current solution."""
        return [
            int(self.program.groups[g].keep[next(j for j, var in enumerate(row) if solver.boolean_value(var))]) if row else 0
            for g, row in enumerate(self.x)
        ]


def _solver(options: SolveOptions, presolve: bool = True) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.cp_model_presolve = presolve
    s.parameters.max_time_in_seconds = options.deadline.seconds_for_solver()
    s.parameters.num_workers = max(1, options.workers)
    s.parameters.random_seed = options.seed
    s.parameters.log_search_progress = options.log
    # wsealloc handles SIGINT/SIGTERM itself (StopHook); CP-SAT's own handler aborts the process when
    # the signal arrives while it solves in a worker thread (std::bad_function_call, ortools 9.15).
    s.parameters.catch_sigint_signal = False
    return s


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """Minimize the objective (the bottleneck, or a token's path), then the cores used at its optimum."""
    start = time.perf_counter()
    hint = options.hint if options.hint is not None and problem.feasible(options.hint) else None
    program = build_program(problem, options.lower_bound, hint, options.exploit_symmetry)
    model = _Model(problem, program)
    if program.hint is not None:
        model.hint(program.hint)
    model.model.minimize(model.T)
    # a token's path over many op models: CP-SAT's presolve ran past the whole limit and no solution was
    # found (GPT-2, 61k Booleans, 20 s; Llama-3-8B decode, 95k); without it the hint is improved and the
    # bound raised (GPT-2 2,443,363 -> 2,442,393 cycles at a 0.00% gap; BERT-base's bound 560,346 -> 638,087)
    booleans = sum(len(row) for row in model.x)
    presolve = not (program.aggregate is Aggregate.PATH and booleans > PATH_PRESOLVE_MOST)
    s1 = _solver(options, presolve)
    with options.stop.active(s1.stop_search):
        raw = s1.solve(model.model)
    if raw == cp_model.MODEL_INVALID:
        raise SolverError(f"CP-SAT rejected the allocation model as invalid: {model.model.validate()}; please report this bug")
    status = _STATUS[raw]
    if status not in (Status.OPTIMAL, Status.FEASIBLE):
        bound = int(np.ceil(s1.best_objective_bound - 1e-6)) if status is Status.UNKNOWN and s1.best_objective_bound > 0 else None
        if status is Status.UNKNOWN and options.lower_bound is not None:
            bound = max(bound or 0, options.lower_bound)
        return SolverResult(
            "cpsat",
            status,
            None,
            None,
            bound,
            time.perf_counter() - start,
            message=f"CP-SAT: {s1.status_name(raw)} after {s1.wall_time:.2f}s",
        )
    best = model.read(s1)
    # objective_value is a float (900.9999999999999 for 901): read T itself, round the bound.
    t_best = int(s1.value(model.T))
    bound = int(np.ceil(s1.best_objective_bound - 1e-6))
    if options.lower_bound is not None:
        bound = max(bound, options.lower_bound)
    if status is Status.OPTIMAL:
        bound = t_best
    if options.minimize_cores and not options.deadline.stopped and options.deadline.remaining() > 0.05:
        model.model.add(t_best >= model.T)
        model.model.minimize(model.cores)
        model.hint(best)
        s2 = _solver(options, presolve)
        with options.stop.active(s2.stop_search):
            st2 = s2.solve(model.model)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = model.read(s2)
    choice = program.kernel_choice(best)
    objective, cores = problem.evaluate(choice)
    if bound >= objective:
        status = Status.OPTIMAL
    return SolverResult(
        "cpsat",
        status,
        choice,
        objective,
        min(bound, objective),
        time.perf_counter() - start,
        cores,
        message=f"CP-SAT {len(program.groups)} groups, {sum(len(r) for r in model.x)} Booleans",
    )
