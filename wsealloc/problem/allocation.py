"""The allocation problem every solver backend sees: no ONNX, no YAML, only numbers.

Kernel ``i`` picks one of its candidate op models ``j`` (cores ``cores[i][j]``, latency
``latency[i][j]`` in cycles, cores ascending and latency strictly descending: the legal Pareto
frontier). Constraint: total cores <= ``total_cores``. Objective: the problem's
:class:`~wsealloc.problem.objective.Objective` (the bottleneck ``max_i latency`` by default; a
token's path for ``Latency``), then the cores used. SRAM and per-die rules are already folded into
which op models are legal.

Kernels with identical work share a *class*: they have the same candidates. For min-max the problem
is separable given the bottleneck T (each kernel takes its fewest-core candidate meeting T), so some
optimal solution gives every member of a class the same choice, and backends may solve over classes
with multiplicities and stay exact; the objective says whether that holds
(``Objective.symmetric_classes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from wsealloc.constraints.geometry import contains, free_cores
from wsealloc.errors import InfeasibleError
from wsealloc.opmodels import CostTable
from wsealloc.problem.objective import Objective, Throughput


@dataclass(frozen=True)
class Choices:
    """Candidate op models of one kernel class (Pareto frontier)."""

    cores: np.ndarray  # int64, ascending
    latency: np.ndarray  # int64, strictly descending

    def __len__(self) -> int:
        return int(self.cores.size)

    def fewest_cores_within(self, target: int) -> int:
        """Index of the fewest-core candidate with latency <= target, or -1 if none."""
        # latency is descending: the first index where latency <= target
        idx = int(np.searchsorted(-self.latency, -target, side="left"))
        return idx if idx < len(self) else -1

    def window(self, lower: int | None, upper: int | None) -> np.ndarray:
        """Candidate indices an optimal solution may need when lower <= T <= upper.

        Slower than ``upper`` is never chosen; faster than the fewest-core candidate meeting ``lower``
        can always be swapped for that one (fewer cores, same T). Exact given valid bounds.
        """
        last = len(self) - 1
        if lower is not None:
            at_lower = self.fewest_cores_within(lower)
            last = at_lower if at_lower >= 0 else last
        first = 0 if upper is None else max(0, self.fewest_cores_within(upper))
        return np.arange(min(first, last), last + 1)


@dataclass(frozen=True)
class GreedyHints:
    """Per-kernel facts the notebook's greedy rule needs (both its faithful and sound variants)."""

    compute: tuple[float, ...]  # single-core compute cycles (MACs / MAC rate + vector ops / vector rate)
    seed_compute: tuple[int, ...]  # the notebook's compute estimate
    seed_compute_bound: tuple[bool, ...]  # the notebook: only Gemm is compute-bound
    seed_memory_bytes: tuple[int, ...]  # the notebook's memory estimate (output bytes)
    sram_bytes_per_core: int  # the notebook divides by the full SRAM size


@dataclass(frozen=True)
class Budget:
    """At most ``cores`` cores for the ``kernels`` together (the user's area they stay within: its free
    cores). Every kernel's fewest-core candidate meeting a target minimizes every sum it is in, so
    min-max stays separable: the bisection stays exact with budgets."""

    kernels: tuple[int, ...]
    cores: int
    label: str  # what it is, for messages (the rule's file and line)


@dataclass(frozen=True)
class AllocationProblem:
    """Min-max allocation of cores to kernels under a total-core budget."""

    names: tuple[str, ...]
    kernel_class: tuple[int, ...]  # class index of each kernel
    classes: tuple[Choices, ...]
    total_cores: int
    hints: GreedyHints
    objective: Objective = field(default_factory=Throughput)
    # producers of each kernel (indices, kernels in a topological order): a token's path (Latency)
    preds: tuple[tuple[int, ...], ...] = ()
    # the kernel run just before each one on the same time-shared cores (-1: none); empty: none share
    serial: tuple[int, ...] = ()
    budgets: tuple[Budget, ...] = ()  # the user's areas: cores for groups of kernels

    def within_budgets(self, cores_of: list[int] | np.ndarray) -> bool:
        """Whether per-kernel cores ``cores_of`` keep every budget."""
        return all(sum(int(cores_of[k]) for k in b.kernels) <= b.cores for b in self.budgets)

    def with_objective(self, objective: Objective) -> AllocationProblem:
        """The same problem under another objective."""
        return replace(self, objective=objective)

    def is_chain(self) -> bool:
        """Whether every kernel runs after the one before it (a token's path is the sum)."""
        n = self.n_kernels
        if not self.preds:
            return True
        after_previous = [k == 0 or (k - 1) in self.preds[k] or bool(self.serial and self.serial[k] == k - 1) for k in range(n)]
        return all(after_previous)

    @property
    def n_kernels(self) -> int:
        """Number of kernels."""
        return len(self.names)

    def choices(self, kernel: int) -> Choices:
        """Candidates of one kernel."""
        return self.classes[self.kernel_class[kernel]]

    def multiplicity(self) -> np.ndarray:
        """How many kernels belong to each class."""
        return np.bincount(np.asarray(self.kernel_class, dtype=np.int64), minlength=len(self.classes))

    def latencies(self, choice: tuple[int, ...] | list[int]) -> list[int]:
        """Each kernel's latency under a choice vector."""
        return [int(self.choices(i).latency[j]) for i, j in enumerate(choice)]

    def evaluate(self, choice: tuple[int, ...] | list[int]) -> tuple[int, int]:
        """(objective value, cores used) of a choice vector (one candidate index per kernel); the value
        is the bottleneck latency under min-max."""
        cores = sum(int(self.choices(i).cores[j]) for i, j in enumerate(choice))
        return self.objective.allocation_value(self, self.latencies(choice)), cores

    def feasible(self, choice: tuple[int, ...] | list[int]) -> bool:
        """True if every index is in range and the cores fit."""
        if len(choice) != self.n_kernels:
            return False
        if any(not 0 <= j < len(self.choices(i)) for i, j in enumerate(choice)):
            return False
        if self.budgets and not self.within_budgets([int(self.choices(i).cores[j]) for i, j in enumerate(choice)]):
            return False
        return self.evaluate(choice)[1] <= self.total_cores

    def min_cores(self) -> int:
        """Cores needed with every kernel on its smallest legal op model."""
        return int(sum(int(self.choices(i).cores[0]) for i in range(self.n_kernels)))


MAX_CYCLES = 2**50  # largest latency a plan may have: solver domains and sums stay far inside int64


def build_problem(costs: CostTable, total_cores: int | None = None, objective: Objective | None = None) -> AllocationProblem:
    """The allocation problem of a cost table (kernels with equal work share a class) under
    ``objective`` (min-max by default)."""
    from wsealloc.cost import SeedWork

    class_of_sig: dict[int, int] = {}
    classes: list[Choices] = []
    kernel_class: list[int] = []
    compute: list[float] = []
    seed_compute: list[int] = []
    seed_bound: list[bool] = []
    seed_mem: list[int] = []
    for kc in costs.kernels:
        if len(kc.frontier) and int(kc.frontier.latency[-1]) >= MAX_CYCLES:
            # CP-SAT and the LP backends need the cycles (and their sums) inside 64-bit integers
            raise InfeasibleError(
                f"{kc.kernel.name}: even its fastest op model takes {int(kc.frontier.latency[-1]):,} cycles per sample, "
                f"beyond the {MAX_CYCLES:,} the solvers handle; check the arch numbers and the --dim values"
            )
        if kc.signature not in class_of_sig:
            class_of_sig[kc.signature] = len(classes)
            classes.append(Choices(kc.frontier.cores.copy(), kc.frontier.latency.copy()))
        kernel_class.append(class_of_sig[kc.signature])
        w = kc.work
        compute.append(int(w.macs) / costs.arch.core.macs_per_cycle + int(w.vector_ops) / costs.arch.vector_ops_per_cycle)
        seed_bound.append(kc.kernel.anchor_op == "Gemm")
        if isinstance(w, SeedWork):
            seed_compute.append(w.compute)
            seed_mem.append(w.memory)
        else:  # KernelWork, or a region of them (RegionWork: its members' MACs, its last member's output)
            seed_compute.append(int(w.macs))
            seed_mem.append(int(w.out_bytes))
    hints = GreedyHints(
        compute=tuple(compute),
        seed_compute=tuple(seed_compute),
        seed_compute_bound=tuple(seed_bound),
        seed_memory_bytes=tuple(seed_mem),
        sram_bytes_per_core=costs.arch.core.sram_bytes,
    )
    return AllocationProblem(
        names=tuple(kc.kernel.name for kc in costs.kernels),
        kernel_class=tuple(kernel_class),
        classes=tuple(classes),
        total_cores=costs.total_cores if total_cores is None else total_cores,
        hints=hints,
        objective=objective or Throughput(),
        preds=costs.preds(),
        budgets=area_budgets(costs),
    )


def area_budgets(costs: CostTable) -> tuple[Budget, ...]:
    """One budget per area of the user's ``place ... within`` rules: the kernels whose area lies inside
    it share its free cores (keep-outs subtracted)."""
    applied = costs.applied
    if applied is None or not applied.fences:
        return ()
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    out: list[Budget] = []
    for area in dict.fromkeys(box for _, _, box in applied.fences):
        inside = tuple(sorted(index[name] for name, _, box in applied.fences if name in index and contains(area, box)))
        lines = sorted({i for name, rules, box in applied.fences if contains(area, box) for i in rules})
        if inside:
            label = "; ".join(applied.where(i) for i in lines)
            out.append(Budget(inside, free_cores(area, applied.obstacles), label))
    return tuple(out)
