"""CP-SAT backend (OR-Tools), the default solver.

Model, for each kernel class c (or each kernel with ``exploit_symmetry=False``) and candidate j:

* Boolean ``x[c,j]`` ("pick op model j"), ``sum_j x[c,j] == 1``;
* ``T >= sum_j latency[c,j] * x[c,j]``: one linear row per class. (We measured per-op latency
  variables with AddMaxEquality stalling in presolve on 200k Booleans; this form solves.)
* ``sum_c mult[c] * sum_j cores[c,j] * x[c,j] <= total_cores``;
* ``T`` in [lower bound, upper bound]: the exact bound (bisection) when given, the hint's bottleneck
  as the upper bound;
* minimize T; then, with T fixed at its best value, minimize the cores used.

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
from wsealloc.solvers.base import SolveOptions, SolverResult, Status

_STATUS = {
    cp_model.OPTIMAL: Status.OPTIMAL,
    cp_model.FEASIBLE: Status.FEASIBLE,
    cp_model.INFEASIBLE: Status.INFEASIBLE,
    cp_model.UNKNOWN: Status.UNKNOWN,
}  # MODEL_INVALID is a bug in the model this module built: raised, never a status


class _Model:
    """The CP-SAT model over groups (classes of identical kernels, or single kernels).

    Candidates outside the proven bounds are left out, which keeps exactness: with T <= U (the hint's
    bottleneck) a candidate slower than U can never be chosen, and with T >= L (the exact bound) a
    candidate faster than the fewest-core one meeting L can always be swapped for it (fewer cores,
    same T). ``keep[g]`` lists the original candidate indices kept for group g.
    """

    def __init__(self, problem: AllocationProblem, options: SolveOptions, hint: tuple[int, ...] | None):
        self.problem = problem
        if options.exploit_symmetry:
            self.group_of = list(problem.kernel_class)
            self.groups = list(problem.classes)
        else:
            self.group_of = list(range(problem.n_kernels))
            self.groups = [problem.choices(i) for i in range(problem.n_kernels)]
        self.mult = np.bincount(np.asarray(self.group_of, dtype=np.int64), minlength=len(self.groups))
        self.hinted = self.group_choice(hint) if hint is not None else None
        upper = problem.evaluate(self.kernel_choice(self.hinted))[0] if self.hinted is not None else None
        lower = options.lower_bound
        self.keep = [ch.window(lower, upper) if self.mult[g] else np.arange(0) for g, ch in enumerate(self.groups)]
        self.model = cp_model.CpModel()
        m = self.model
        # Variables are named after the group's first kernel; groups without kernels get none.
        first_kernel = {g: i for i, g in reversed(list(enumerate(self.group_of)))}
        self.x = [
            [m.new_bool_var(f"x_{problem.names[first_kernel[g]]}_{j}") for j in keep.tolist()] if g in first_kernel else []
            for g, keep in enumerate(self.keep)
        ]
        hi = int(max(int(ch.latency[k[0]]) for ch, k in zip(self.groups, self.keep, strict=True) if k.size))
        lo = min(lower if lower is not None else 0, hi)
        self.T = m.new_int_var(lo, hi, "bottleneck_cycles")
        core_vars: list[cp_model.IntVar] = []
        core_coeffs: list[int] = []
        for g, ch in enumerate(self.groups):
            if not self.x[g]:
                continue
            m.add_exactly_one(self.x[g])
            lat = [int(v) for v in ch.latency[self.keep[g]]]
            m.add(cp_model.LinearExpr.weighted_sum(self.x[g], lat) <= self.T)
            core_vars += self.x[g]
            core_coeffs += [int(self.mult[g]) * int(v) for v in ch.cores[self.keep[g]]]
        self.cores = cp_model.LinearExpr.weighted_sum(core_vars, core_coeffs)
        m.add(self.cores <= problem.total_cores)

    def group_choice(self, choice: tuple[int, ...]) -> list[int]:
        """Map a per-kernel choice to a per-group one (fewest cores among members keeps it feasible)."""
        out = [10**9] * len(self.groups)
        for i, j in enumerate(choice):
            g = self.group_of[i]
            out[g] = min(out[g], j)
        return [0 if v == 10**9 else v for v in out]

    def hint(self, group_choice: list[int]) -> None:
        """A complete hint: every Boolean and T (original indices, clipped into the kept range)."""
        self.model.clear_hints()
        worst = 0
        for g, j in enumerate(group_choice):
            if not self.x[g]:
                continue
            keep = self.keep[g]
            pos = int(np.clip(j, keep[0], keep[-1]) - keep[0])
            for jj, var in enumerate(self.x[g]):
                self.model.add_hint(var, jj == pos)
            worst = max(worst, int(self.groups[g].latency[keep[pos]]))
        self.model.add_hint(self.T, worst)

    def read(self, solver: cp_model.CpSolver) -> list[int]:
        """Per-group chosen original index from the solver's current solution."""
        return [
            int(self.keep[g][next(j for j, var in enumerate(row) if solver.boolean_value(var))]) if row else 0
            for g, row in enumerate(self.x)
        ]

    def kernel_choice(self, group_choice: list[int]) -> tuple[int, ...]:
        """Per-kernel choice from a per-group one."""
        return tuple(group_choice[g] for g in self.group_of)


def _solver(options: SolveOptions) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = options.deadline.seconds_for_solver()
    s.parameters.num_workers = max(1, options.workers)
    s.parameters.random_seed = options.seed
    s.parameters.log_search_progress = options.log
    # wsealloc handles SIGINT/SIGTERM itself (StopHook); CP-SAT's own handler aborts the process when
    # the signal arrives while it solves in a worker thread (std::bad_function_call, ortools 9.15).
    s.parameters.catch_sigint_signal = False
    return s


def solve(problem: AllocationProblem, options: SolveOptions) -> SolverResult:
    """Minimize the bottleneck, then the cores used at that bottleneck."""
    start = time.perf_counter()
    hint = options.hint if options.hint is not None and problem.feasible(options.hint) else None
    model = _Model(problem, options, hint)
    if model.hinted is not None:
        model.hint(model.hinted)
    model.model.minimize(model.T)
    s1 = _solver(options)
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
        s2 = _solver(options)
        with options.stop.active(s2.stop_search):
            st2 = s2.solve(model.model)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = model.read(s2)
    choice = model.kernel_choice(best)
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
        message=f"CP-SAT {len(model.groups)} groups, {sum(len(r) for r in model.x)} Booleans",
    )
