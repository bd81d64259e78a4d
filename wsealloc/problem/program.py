"""The allocation program, stated once and rendered by each exact backend (CPMpy's way: the model is
separate from the solvers; ``solvers/cpsat.py`` and ``solvers/pulp_backend.py`` only translate it).

For each *group* g (a class of identical kernels with its multiplicity when the objective allows
class symmetry, else one kernel) and each kept candidate j:

* Boolean ``x[g, j]`` ("pick candidate j"), named ``x_<first kernel>_<j>``; ``sum_j x[g, j] == 1``;
* ``sum_g mult[g] * sum_j cores[g, j] * x[g, j] <= total_cores``, and the same sum over the kernels of
  each of the user's areas at most its free cores (``budgets``);
* the objective variable ``T`` (``bottleneck_cycles`` or ``latency_cycles``) in [lower, upper]:
  - ``Aggregate.MAX`` (min-max): ``T >= sum_j latency[g, j] * x[g, j]`` for every group (one linear
    row per group; docs/sources.md, "Solver pitfalls", on AddMaxEquality);
  - ``Aggregate.PATH`` on a chain: ``T >= sum_g sum_j latency[g, j] * x[g, j]`` (one row);
  - ``Aggregate.PATH`` on a DAG: a finish variable per kernel, ``F[k] >= F[p] + lat[k]`` for each
    producer p (and the kernel run before it on shared cores), ``F[k] >= lat[k]``, ``T >= F[k]``;
  - ``Aggregate.PATH`` with ``pace`` > 1 (requests in flight, ``objective.Latency``): also the slowest
    kernel ``S >= lat[g]`` (a row per group) and ``T >= pace * S``;
* lexicographic objective: minimize T; then, T fixed at its best, minimize the cores used.

Integer scale: 1 unit = 1 cycle (latencies are whole cycles already). Candidates no optimal solution
needs are left out (``keep``): slower than the hint's value can never be chosen (a kernel's latency
is at most the value under either aggregate); for min-max, faster than the fewest-core candidate
meeting the proven lower bound can be swapped for it (``Choices.window``). Hints are complete and
mapped by candidate index (r x c and c x r can tie on cores and latency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.problem.allocation import AllocationProblem, Choices
from wsealloc.problem.objective import Aggregate


@dataclass(frozen=True)
class Group:
    """One group of the program: kernels sharing a choice, and the candidates kept for them."""

    name: str  # the first member kernel's name (variables are named after it)
    mult: int  # kernels in the group
    keep: np.ndarray  # original candidate indices kept (ascending)
    cores: np.ndarray  # cores of the kept candidates
    latency: np.ndarray  # latency of the kept candidates


@dataclass(frozen=True)
class AllocationProgram:
    """The backend-neutral program (see the module docstring)."""

    aggregate: Aggregate
    value_name: str  # the objective variable's name
    groups: tuple[Group, ...]
    group_of: tuple[int, ...]  # group of each kernel
    total_cores: int
    lower: int  # T's lower bound
    upper: int  # T's upper bound
    hint: tuple[int, ...] | None  # per group, an original candidate index (a complete start)
    hint_value: int | None  # the objective of the hint
    preds: tuple[tuple[int, ...], ...]  # PATH on a DAG: producers of each kernel (empty otherwise)
    serial: tuple[int, ...]  # PATH on a DAG: the kernel before each one on shared cores (-1: none)
    # the user's areas: (kernels of each group inside the area, its free cores):
    # sum_g count[g] * sum_j cores[g, j] * x[g, j] <= cores
    budgets: tuple[tuple[tuple[int, ...], int], ...] = ()
    pace: int = 1  # PATH: T >= pace x the slowest kernel too (requests in flight; 1: no such row)

    @property
    def paced(self) -> bool:
        """PATH whose value is also ``pace`` times the slowest kernel."""
        return self.aggregate is Aggregate.PATH and self.pace > 1

    @property
    def chain(self) -> bool:
        """PATH whose kernels run one after another: the sum is one row."""
        return self.aggregate is Aggregate.PATH and not self.preds

    def kernel_choice(self, group_choice: list[int] | tuple[int, ...]) -> tuple[int, ...]:
        """Per-kernel choice from a per-group one."""
        return tuple(int(group_choice[g]) for g in self.group_of)

    def hint_position(self, g: int, original: int) -> int:
        """Position in group g's kept candidates of an original index (clipped into the kept range)."""
        keep = self.groups[g].keep
        return int(np.clip(original, keep[0], keep[-1]) - keep[0])

    def read(self, picked: list[int]) -> tuple[int, ...]:
        """Per-kernel original indices from the picked position in each group's kept candidates."""
        return self.kernel_choice([int(self.groups[g].keep[j]) if self.groups[g].keep.size else 0 for g, j in enumerate(picked)])


def _group_choice(group_of: list[int], n_groups: int, choice: tuple[int, ...]) -> list[int]:
    """A per-kernel choice as a per-group one (the fewest cores among members keeps it feasible)."""
    out = [10**9] * n_groups
    for i, j in enumerate(choice):
        out[group_of[i]] = min(out[group_of[i]], j)
    return [0 if v == 10**9 else v for v in out]


def build_program(
    problem: AllocationProblem, lower_bound: int | None, hint: tuple[int, ...] | None, symmetry: bool = True
) -> AllocationProgram:
    """The program of ``problem`` under its objective, with a proven ``lower_bound`` (or None) and a
    feasible per-kernel ``hint`` (or None). ``symmetry`` (the caller's option) groups identical
    kernels when the objective allows it."""
    objective = problem.objective
    grouped = symmetry and objective.symmetric_classes
    if grouped:
        group_of = list(problem.kernel_class)
        choices: list[Choices] = list(problem.classes)
    else:
        group_of = list(range(problem.n_kernels))
        choices = [problem.choices(i) for i in range(problem.n_kernels)]
    mult = np.bincount(np.asarray(group_of, dtype=np.int64), minlength=len(choices))
    hinted = _group_choice(group_of, len(choices), hint) if hint is not None else None
    upper = problem.evaluate(tuple(hinted[g] for g in group_of))[0] if hinted is not None else None
    exact_window = objective.aggregate is Aggregate.MAX
    # a kernel slower than the hint's value / pace makes the value worse (pace x slowest > the hint's)
    most = upper // objective.pace if upper is not None else None
    keep = [ch.window(lower_bound if exact_window else None, most) if mult[g] else np.arange(0) for g, ch in enumerate(choices)]
    first_kernel = {g: i for i, g in reversed(list(enumerate(group_of)))}
    groups = tuple(
        Group(
            problem.names[first_kernel[g]] if g in first_kernel else f"group{g}",
            int(mult[g]),
            k,
            ch.cores[k].astype(np.int64),
            ch.latency[k].astype(np.int64),
        )
        for g, (ch, k) in enumerate(zip(choices, keep, strict=True))
    )
    used = [gr for gr in groups if gr.mult]
    if objective.aggregate is Aggregate.MAX:
        hi = int(max(int(gr.latency[0]) for gr in used))
    else:
        # every kernel on its slowest kept candidate, one after another: no path is longer
        hi = int(sum(int(gr.latency[0]) * gr.mult for gr in used))
        hi = max(hi, objective.pace * int(max(int(gr.latency[0]) for gr in used)))
    lo = min(lower_bound if lower_bound is not None else 0, hi)
    dag = objective.aggregate is Aggregate.PATH and not problem.is_chain()
    return AllocationProgram(
        aggregate=objective.aggregate,
        value_name="bottleneck_cycles" if objective.aggregate is Aggregate.MAX else "latency_cycles",
        groups=groups,
        group_of=tuple(group_of),
        total_cores=problem.total_cores,
        lower=lo,
        upper=hi,
        hint=tuple(hinted) if hinted is not None else None,
        hint_value=upper,
        preds=problem.preds if dag else (),
        serial=problem.serial if dag else (),
        budgets=tuple(
            (
                tuple(np.bincount(np.array([group_of[k] for k in b.kernels], dtype=np.int64), minlength=len(groups)).tolist()),
                b.cores,
            )
            for b in problem.budgets
        ),
        pace=objective.pace if objective.aggregate is Aggregate.PATH else 1,
    )


def finish_times(program: AllocationProgram, latency: list[int]) -> list[int]:
    """Each kernel's finish time for one token (PATH on a DAG): its latency after the latest of its
    producers and of the kernel run before it on shared cores (a chain: the running sum)."""
    finish: list[int] = []
    for k, lat in enumerate(latency):
        if program.preds:
            before = list(program.preds[k]) + ([program.serial[k]] if program.serial and program.serial[k] >= 0 else [])
        else:
            before = [k - 1] if k else []
        finish.append(lat + max((finish[p] for p in before), default=0))
    return finish
