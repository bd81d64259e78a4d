"""The objective as one object: how an allocation or a layout is valued, how two are ranked, what
bound proves a value optimal, and which backends can solve it exactly.

Every stage that judges a solution asks the objective; none tests which objective it is:

* the allocation backends (``solvers/``) render the one allocation program (``problem.program``),
  whose objective row the objective states (``aggregate``: the slowest kernel, or a token's path);
* the placement engine ranks layouts with :meth:`Objective.rank` and reads its construction policy
  from :attr:`Objective.charges_communication` (ONNX stage times include the communication a
  placement causes; the ISPD-2020 contest charges only the op model's time and scores wires);
* ``api.solve_costs`` takes the proven bound from :meth:`Objective.exact_bound` and refuses a
  backend the objective cannot be solved exactly by (:meth:`Objective.check_backend`);
* plans record ``kind``, the value and its bound (``plan.rules``).

Three objectives today:

* :class:`Throughput` (``--objective throughput``, the default): minimize the slowest kernel's stage
  time (the layer pipeline's rate), then the cores used. Separable given the bottleneck T, so the
  bisection is exact and kernels of one class may share a choice.
* :class:`Latency` (``--objective latency``): minimize the time one token (or one prompt) takes
  through the kernels: the longest path of kernel latencies through the kernel graph (kernels on one
  time-shared region run one after another). With ``requests`` sequences in flight (``--requests
  N``), interleaved through the kernels, a new pass enters every ``slowest`` cycles at most, so each
  request's token takes ``max(path, requests x slowest)`` (``plan.llm``): that is the value, so that
  the plan proven best is the one each request is served fastest by (the path alone would be blind
  to the one slow region that paces every request). Not separable: no bisection, no class symmetry;
  its bound is the LP relaxation (:func:`latency_lp_bound`) and ``requests`` times the least
  bottleneck (:func:`optimal_bottleneck`) until a backend proves better.
* :class:`ContestScore` (the ISPD-2020 contest): the largest kernel time bounds the allocation; a
  layout's score is ``time_weight * max time + wire_weight * wirelength`` (centre distances), layouts
  beyond ``time_cap`` ranked after every layout within it.

A new objective is one more subclass here (its value, rank, bound, exact backends), one line in
``OBJECTIVES``, and its row in ``problem.program.build_program``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from wsealloc.cost.comm import CommCosts
from wsealloc.errors import UsageError, choices_message
from wsealloc.problem.latency_start import latency_start, lower_hull
from wsealloc.search import first_true

if TYPE_CHECKING:
    from wsealloc.problem.allocation import AllocationProblem


class ObjectiveKind(str, enum.Enum):
    """Which objective (a str enum: plans store the value)."""

    THROUGHPUT = "throughput"
    LATENCY = "latency"
    CONTEST = "contest"


class Aggregate(enum.Enum):
    """How kernel latencies combine into an allocation's value."""

    MAX = "max"  # the slowest kernel (a pipeline's period)
    PATH = "path"  # the longest path through the kernel graph (one token's time)


# The backends that exist, named here, below both the request (which checks --solver against them
# without importing the solvers) and the registry in solvers.base (which holds exactly these); which of
# them an objective admits is its own.
ALL_BACKENDS = ("cpsat", "pulp", "pulp-highs", "bisect", "greedy", "greedy-seed")
HEURISTICS = frozenset({"greedy", "greedy-seed"})  # give a plan, prove nothing, run under every objective


@dataclass(frozen=True)
class ProvenBound:
    """A lower bound an objective proves without a solver backend: its method, its value (None: no
    allocation fits) and, when the method constructs one, an allocation reaching it (optimal)."""

    method: str
    value: int | None
    choice: tuple[int, ...] | None
    start: tuple[int, ...] | None = None  # a feasible allocation found on the way (a backend's warm start)
    final: bool = False  # the allocation is the answer as it is (the table offers no other choice to make)
    wall_s: float = 0.0  # seconds the proof took (a sharing search run before the table was built)
    # the same bound without the user's constraints (the price's reference), where the search proved it
    unconstrained: int | None = None

    @property
    def optimal(self) -> bool:
        """Whether the bound comes with an allocation that reaches it."""
        return self.choice is not None


@dataclass(frozen=True)
class Objective:
    """Base class: see the module docstring. Subclasses set the class attributes and override the
    methods whose default does not hold for them."""

    kind: ClassVar[ObjectiveKind]
    aggregate: ClassVar[Aggregate]
    exact_backends: ClassVar[frozenset[str]]
    # kernels with identical candidates may be solved as one class with a multiplicity (exact only
    # when some optimum gives every member the same choice: true for min-max)
    symmetric_classes: ClassVar[bool]
    # a kernel's stage time includes the communication its placement causes (ONNX models); False: the
    # op model's time alone, wires priced in the score (the contest)
    charges_communication: ClassVar[bool] = True
    unit: ClassVar[str] = "cycles"

    @property
    def time_cap(self) -> int | None:
        """Layouts whose slowest kernel exceeds this rank after every layout within it (None: no cap)."""
        return None

    @property
    def wire_weight(self) -> float:
        """Weight of the wirelength in the layout's value (0: wires only break ties)."""
        return 0.0

    @property
    def time_weight(self) -> float:
        """Weight of the time in the layout's value."""
        return 1.0

    def check_backend(self, name: str, asked: str = "") -> None:
        """Refuse, by name, a backend that cannot solve this objective (heuristics always run).
        ``asked``: what the command asked for, in its own words, where it has no ``--objective`` to name
        (``frontier`` and ``pools`` plan one token's time, the latency objective, always)."""
        if name in HEURISTICS or name in self.exact_backends:
            return
        allowed = sorted(self.exact_backends | HEURISTICS)
        raise UsageError(
            f"--solver {name} cannot solve {asked or f'--objective {self.kind.value}'} "
            f"({'it is exact for min-max only' if name == 'bisect' else 'not supported'}); "
            + choices_message("solver", name, allowed).split("; ", 1)[-1]
        )

    # -- allocations ----------------------------------------------------------------------------
    @property
    def pace(self) -> int:
        """How many passes share the slowest kernel's time in the value (``Latency.requests``; 1: the
        aggregate alone)."""
        return 1

    def allocation_value(self, problem: AllocationProblem, latency: Sequence[int]) -> int:
        """The value of per-kernel latencies (cycles)."""
        if self.aggregate is Aggregate.MAX:
            return int(max(latency, default=0))
        return paced(path_length(problem.preds, problem.serial, latency), max(latency, default=0), self.pace)

    def exact_bound(self, problem: AllocationProblem, allocate: bool = True) -> ProvenBound:
        """A proven lower bound on the optimum (with an optimal allocation when the method gives one);
        value None when no allocation fits. ``allocate``: find an allocation on the way too where the
        method's bound does not give one at once (False: the caller uses the value alone)."""
        raise NotImplementedError

    # -- layouts --------------------------------------------------------------------------------
    def layout_value(self, stage: np.ndarray, comm: CommCosts, problem_preds: Sequence[Sequence[int]] = ()) -> float:
        """The value of a layout's stage times (what the plan reports)."""
        return float(stage.max(initial=0))

    def rank(self, stage: np.ndarray, comm: CommCosts, preds: Sequence[Sequence[int]] = ()) -> tuple[float, ...]:
        """How layouts compare (smaller first)."""
        worst = int(stage.max(initial=0))
        return (worst, int((stage == worst).sum()), comm.traffic_distance)

    def proven(self, value: float, bound: float | None) -> bool:
        """A value at a proven lower bound is optimal."""
        return bound is not None and value <= bound


@dataclass(frozen=True)
class Throughput(Objective):
    """Minimize the slowest kernel (a layer pipeline's period), then the cores used."""

    kind: ClassVar[ObjectiveKind] = ObjectiveKind.THROUGHPUT
    aggregate: ClassVar[Aggregate] = Aggregate.MAX
    exact_backends: ClassVar[frozenset[str]] = frozenset({"cpsat", "pulp", "pulp-highs", "bisect"})
    symmetric_classes: ClassVar[bool] = True

    def exact_bound(self, problem: AllocationProblem, allocate: bool = True) -> ProvenBound:
        """The bisection's optimum: exact (the problem is separable given the bottleneck); every kernel
        on its fewest-core candidate meeting it is an optimal allocation (also the fewest cores)."""
        target = optimal_bottleneck(problem)
        if target is None:
            return ProvenBound("bisect", None, None)
        choice = tuple(problem.choices(i).fewest_cores_within(target) for i in range(problem.n_kernels))
        return ProvenBound("bisect", target, choice)


@dataclass(frozen=True)
class Latency(Objective):
    """Minimize each request's token time: the longest path of kernel latencies through the kernel
    graph (kernels sharing a region in sequence: ``AllocationProblem.serial``), or ``requests`` times
    the slowest kernel when that is longer (``requests`` sequences in flight: the module docstring)."""

    requests: int = 1

    kind: ClassVar[ObjectiveKind] = ObjectiveKind.LATENCY
    aggregate: ClassVar[Aggregate] = Aggregate.PATH
    exact_backends: ClassVar[frozenset[str]] = frozenset({"cpsat", "pulp", "pulp-highs"})
    symmetric_classes: ClassVar[bool] = False

    @property
    def pace(self) -> int:
        """The requests in flight."""
        return self.requests

    def exact_bound(self, problem: AllocationProblem, allocate: bool = True) -> ProvenBound:
        """The LP relaxation of the longest path (``latency_lp_bound``) and, with several
        requests in flight, ``requests`` times the least bottleneck any allocation has (the slowest
        kernel of every allocation is at least it); the exact backends prove the optimum itself. Without
        ``allocate`` the start (``latency_start``, 0.02-2 s on the zoo) is not made."""
        relaxed = path_relaxation(problem)
        if relaxed is None:
            return ProvenBound("lp", None, None)
        lp, rounded = relaxed
        least = optimal_bottleneck(problem) if self.requests > 1 else None
        bound = max(lp, self.requests * least) if least is not None else lp
        if not allocate:
            return ProvenBound("lp", bound, None)
        # an allocation found on the way (``latency_start``, or the relaxation's rounded where faster): the
        # backends' hint, and the optimum where it meets the bound
        start = latency_start(problem, self.requests, least, critical_chain(problem))
        if problem.feasible(rounded) and (start is None or problem.evaluate(rounded)[0] < problem.evaluate(start)[0]):
            start = rounded
        if start is not None and problem.evaluate(start)[0] <= bound:
            return ProvenBound("lp", bound, start, start=start)
        return ProvenBound("lp", bound, None, start=start)

    def rank(self, stage: np.ndarray, comm: CommCosts, preds: Sequence[Sequence[int]] = ()) -> tuple[float, ...]:
        """The value first (the path with one request in flight), then the slowest kernel, then traffic x distance."""
        worst = int(stage.max(initial=0))
        return (paced(path_length(preds, (), stage.tolist()), worst, self.requests), worst, comm.traffic_distance)


@dataclass(frozen=True)
class ContestScore(Objective):
    """The ISPD-2020 contest: score = time_weight * max stage + wire_weight * wirelength; with a
    ``cap``, layouts whose max stage exceeds it rank after every layout within it."""

    weight_time: float = 1.0
    wires: float = 0.0
    cap: int | None = None

    kind: ClassVar[ObjectiveKind] = ObjectiveKind.CONTEST
    aggregate: ClassVar[Aggregate] = Aggregate.MAX
    exact_backends: ClassVar[frozenset[str]] = frozenset()  # the contest path places; its bound is contest_bounds
    symmetric_classes: ClassVar[bool] = True
    charges_communication: ClassVar[bool] = False

    @property
    def time_cap(self) -> int | None:
        """The time cap (a multiple of the proven bound, in cycles)."""
        return self.cap

    @property
    def wire_weight(self) -> float:
        """The contest's wire weight."""
        return self.wires

    @property
    def time_weight(self) -> float:
        """The contest's time weight."""
        return self.weight_time

    def score(self, max_stage: float, wirelength: float) -> float:
        """The weighted score of a layout."""
        return self.weight_time * max_stage + self.wires * wirelength

    def layout_value(self, stage: np.ndarray, comm: CommCosts, problem_preds: Sequence[Sequence[int]] = ()) -> float:
        """The contest score (``comm.traffic_distance`` holds the wirelength for the contest)."""
        return self.score(int(stage.max(initial=0)), comm.traffic_distance)

    def rank(self, stage: np.ndarray, comm: CommCosts, preds: Sequence[Sequence[int]] = ()) -> tuple[float, ...]:
        """How far the bottleneck exceeds the cap (0 within it), the score, the bottleneck, how many sit at it."""
        worst = int(stage.max(initial=0))
        over = max(0, worst - self.cap) if self.cap is not None else 0
        return (over, self.score(worst, comm.traffic_distance), worst, int((stage == worst).sum()))


OBJECTIVES: dict[str, type[Objective]] = {"throughput": Throughput, "latency": Latency}  # user-selectable


def objective_named(name: str | ObjectiveKind, requests: int = 1) -> Objective:
    """The objective called ``name`` (``throughput`` or ``latency``); unknown names list the choices.
    ``requests``: sequences in flight (``--requests``), which pace a latency plan (``Latency``); a
    throughput plan's slowest kernel is its value whatever the requests."""
    key = name.value if isinstance(name, ObjectiveKind) else str(name)
    if key not in OBJECTIVES:
        raise UsageError(choices_message("objective", key, list(OBJECTIVES)))
    if key == ObjectiveKind.LATENCY.value:
        return Latency(requests=requests)
    return OBJECTIVES[key]()


def paced(path: int, slowest: int, requests: int) -> int:
    """Each request's token time with ``requests`` sequences in flight: one pass takes ``path``, and a
    new pass enters every ``slowest`` cycles at most, so ``requests`` passes take ``requests x slowest``
    at least (``plan.llm``: passes complete at ``min(requests / path, 1 / slowest)`` per cycle)."""
    return max(int(path), int(requests) * int(slowest)) if requests > 1 else int(path)


# -- values and bounds ---------------------------------------------------------------------------


def path_length(preds: Sequence[Sequence[int]], serial: Sequence[int], weight: Sequence[int | float]) -> int:
    """Longest path of node weights through a DAG whose nodes are numbered in a topological order:
    ``finish[k] = weight[k] + max(finish of preds[k], finish of serial[k])``. ``serial[k]`` (when
    given) is the kernel run just before k on the same cores (-1: none). Without ``preds`` every
    kernel follows the one before it (a chain: the sum)."""
    n = len(weight)
    if not preds:
        return int(round(sum(float(w) for w in weight)))
    finish = [0.0] * n
    for k in range(n):
        start = max((finish[p] for p in preds[k]), default=0.0)
        if serial and serial[k] >= 0:
            start = max(start, finish[serial[k]])
        finish[k] = start + float(weight[k])
    return int(round(max(finish, default=0.0)))


def cores_needed(problem: AllocationProblem, target: int, mult: np.ndarray) -> int | None:
    """Fewest total cores meeting latency <= target (None if some kernel cannot meet it)."""
    total = 0
    for cls, m in zip(problem.classes, mult, strict=True):
        if m == 0:
            continue
        idx = cls.fewest_cores_within(target)
        if idx < 0:
            return None
        total += int(cls.cores[idx]) * int(m)
    return total


def optimal_bottleneck(problem: AllocationProblem) -> int | None:
    """The optimal bottleneck latency of a min-max allocation, or None when even the fewest cores do
    not fit: bisection over the sorted distinct candidate latencies (feasibility is monotone in T and
    each kernel takes its fewest-core candidate meeting T; Ibaraki & Katoh 1988)."""
    mult = problem.multiplicity()
    values = np.unique(np.concatenate([c.latency for c, m in zip(problem.classes, mult, strict=True) if m > 0]))

    def fits(target: int) -> bool:
        need = cores_needed(problem, target, mult)
        if need is None or need > problem.total_cores:
            return False
        if problem.budgets:  # the user's areas: each kernel on its fewest cores meeting the target
            fewest = [
                int(problem.choices(i).cores[problem.choices(i).fewest_cores_within(target)]) for i in range(problem.n_kernels)
            ]
            return problem.within_budgets(fewest)
        return True

    return first_true(values, fits)


def _before(problem: AllocationProblem, k: int) -> list[int]:
    """The kernels k waits for: its producers, and the kernel before it on a shared region."""
    return list(problem.preds[k]) + ([problem.serial[k]] if problem.serial and problem.serial[k] >= 0 else [])


def _longest(problem: AllocationProblem, latency: Sequence[float]) -> tuple[float, list[int]]:
    """The longest path through the kernel graph under ``latency`` (its length, its kernels in order)."""
    finish = [0.0] * problem.n_kernels
    came: list[int] = [-1] * problem.n_kernels
    for k in range(problem.n_kernels):
        before = _before(problem, k)
        if before:
            best = max(before, key=lambda p: finish[p])
            finish[k], came[k] = finish[best] + latency[k], best
        else:
            finish[k] = latency[k]
    k = max(range(problem.n_kernels), key=lambda i: finish[i])
    length = finish[k]
    chain = []
    while k >= 0:
        chain.append(k)
        k = came[k]
    return length, chain[::-1]


def critical_chain(problem: AllocationProblem) -> list[int]:
    """A chain of kernels every token passes through in order: all kernels when they run in sequence
    (no ``preds``, or a chain), else the longest path under every kernel's fastest latency."""
    if problem.is_chain():
        return list(range(problem.n_kernels))
    return _longest(problem, [float(problem.choices(i).latency[-1]) for i in range(problem.n_kernels)])[1]


# ``latency_lp_bound`` over a flow of paths: Frank-Wolfe steps at most, and the relative gain a step must
# make (each step's bound is valid; on the zoo it settles within 2-8 steps to within 1e-5 of the LP's
# optimum, measured against CBC on the same LP)
PATH_FLOW_STEPS = 40
# ... and fewer where the hulls are long: about this many segment evaluations in all (each step evaluates
# the weighed bound about 38 times), so that no model spends more than about a second here (the 405B
# decode over 30 wafers' cores, 85k segments: 4 steps; the zoo reaches the relaxation in 2-4)
PATH_FLOW_WORK = 12_000_000
PATH_FLOW_GAP = 1e-5  # within this share of an allocation's longest path, the climb has reached the optimum
PATH_FLOW_SETTLED = 1e-7
PATH_FLOW_STALLS = 3  # steps in a row that gain less: it stops
LINE_SEARCH = 16  # bisection rounds of each step's length (to 2**-16 of it)
TIED = 0.02  # segments saving within this share of the marginal rate share the cores, for the direction


class _Segments:
    """Every kernel's frontier as its lower convex hull: the kernel's fewest cores and their latency,
    and the hull's segments (their kernel, cores, latency saved per core), for the LP relaxation."""

    def __init__(self, problem: AllocationProblem):
        base_cores, base_latency, kernel, cores, rate = [], [], [], [], []
        self.hulls: list[np.ndarray] = []  # each kernel's hull points as indices of its frontier
        for i in range(problem.n_kernels):
            ch = problem.choices(i)
            self.hulls.append(lower_hull(ch.cores, ch.latency))
            hc, hl = ch.cores[self.hulls[-1]].astype(np.float64), ch.latency[self.hulls[-1]].astype(np.float64)
            base_cores.append(hc[0])
            base_latency.append(hl[0])
            kernel += [i] * (hc.size - 1)
            cores += np.diff(hc).tolist()
            rate += (-np.diff(hl) / np.diff(hc)).tolist()
        self.budget = float(problem.total_cores) - float(sum(base_cores))
        self.base = np.array(base_latency, dtype=np.float64)
        self.kernel = np.array(kernel, dtype=np.int64)
        self.cores = np.array(cores, dtype=np.float64)
        self.rate = np.array(rate, dtype=np.float64)

    def _bought(self, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each segment's weighted latency saved per core, the segments in the order they are bought
        (most saved first), and the cores each of them takes in that order (the last one bought in part)."""
        saved = weight[self.kernel] * self.rate
        order = np.argsort(-saved, kind="stable")
        cores = self.cores[order]
        return saved, order, np.clip(self.budget - (np.cumsum(cores) - cores), 0.0, cores)

    def weighed(self, weight: np.ndarray, share_ties: bool = True) -> tuple[float, np.ndarray]:
        """min over allocations in the hulls with the whole budget of sum(weight x latency) (Dantzig's
        bound for the multiple-choice knapsack: the segments with the most weighted latency saved per
        core bought first, the last one fractionally), and every kernel's latency there (``share_ties``:
        with the near-tied segments sharing the cores, below; else at that least, whose latencies are
        the value's gradient in the weights)."""
        saved, order, take = self._bought(weight)
        cores = self.cores[order]
        value = float(weight @ self.base - saved[order] @ take)
        short = np.flatnonzero(take < cores)
        if share_ties and short.size:
            # the latencies (the climb's direction; not the value): the segments within ``TIED`` of the
            # rate where the budget runs out (the kernels off the flow: none) share what they take, in
            # proportion to their cores. They are an allocation of the relaxation too (the whole budget
            # within the hulls), so their longest path bounds its optimum from above. With one
            # of them taking it all the longest path is the others' kernel, the next flow gives it the
            # cores, and the climb zig-zags between them (three equal kernels sharing one core: stuck at
            # 3 cycles for 3.33)
            margin = saved[order[short[0]]]
            tied = np.abs(saved[order] - margin) <= TIED * margin
            if cores[tied].sum() > 0:  # (a budget of 0 left over: nothing to share)
                take[tied] = cores[tied] * (take[tied].sum() / cores[tied].sum())
        latency = self.base.copy()
        np.subtract.at(latency, self.kernel[order], self.rate[order] * take)
        return value, latency

    def rounded(self, weight: np.ndarray) -> tuple[int, ...]:
        """The allocation ``weighed`` finds for ``weight`` with its one fractional segment (and any it
        shares) left out: every kernel on the hull point its whole segments reach, as a frontier
        index. Within the budget, since it only gives back cores."""
        _, order, take = self._bought(weight)
        whole = take >= self.cores[order]
        reached = np.zeros(len(self.hulls), dtype=np.int64)
        np.add.at(reached, self.kernel[order], whole.astype(np.int64))
        # (segments are bought in hull order within a kernel, their rates falling along its hull)
        return tuple(int(hull[j]) for hull, j in zip(self.hulls, reached.tolist(), strict=True))


def _line_search(segments: _Segments, flow: np.ndarray, toward: np.ndarray, most: float) -> tuple[float, float]:
    """The step in [0, most] along ``toward`` from ``flow`` that weighs most, and that value. The weighed
    bound is concave along it, and its slope at a step is ``toward`` times the latencies of the least
    allocation there (the envelope theorem), so a bisection on the slope's sign finds the top."""
    lo, hi = 0.0, most
    for _ in range(LINE_SEARCH):
        middle = (lo + hi) / 2
        slope = float(toward @ segments.weighed(flow + middle * toward, share_ties=False)[1])
        if slope > 0:
            lo = middle
        elif slope < 0:
            hi = middle
        else:  # (flat: a step half-way in mixes the path in, where a step of 0 would stop)
            lo = hi = middle
            break
    middle = (lo + hi) / 2
    value, whole = segments.weighed(flow + middle * toward)[0], segments.weighed(flow + most * toward)[0]
    # (the whole way, a path's share all moved, only where it weighs more: on a plateau a flow on one path
    # alone would start again)
    return (most, whole) if whole > value + 1e-9 * max(1.0, abs(value)) else (middle, value)


def latency_lp_bound(problem: AllocationProblem) -> int | None:
    """``path_relaxation``'s bound alone (None: the fewest cores do not fit)."""
    relaxed = path_relaxation(problem)
    return None if relaxed is None else relaxed[0]


def path_relaxation(problem: AllocationProblem) -> tuple[int, tuple[int, ...]] | None:
    """A lower bound on the latency optimum, and an allocation rounded from it (below).

    The bound: the LP relaxation of the longest path, every kernel a
    convex combination of its candidates (its frontier's lower hull) within the whole core budget.

    For any unit flow w of paths through the kernel graph (a convex combination of paths), the longest
    path is at least sum(w x latency), whose least over the relaxed allocations is separable given
    the budget (``_Segments.weighed``: Dantzig's bound). That least is concave in w, and its maximum
    over the flows is the relaxation's optimum (the minimax theorem: the latencies are convex in the
    cores); Frank-Wolfe climbs to it from the critical chain (``critical_chain``: with the kernels
    beside it on their fewest cores, the bound used alone before), each step towards the longest
    path under the current allocation's latencies, its length by a line search. Every step's value is
    a valid bound; the best is returned. A chain of kernels is its own flow (one step). The parallel
    branches count: BERT-base's bound 560,346 -> 638,085 cycles, ViT-B/16's 281,145 -> 317,463, the
    8B decode at 64 requests on wse3 556,926 -> 561,090 (its best allocation found: 562,562), within
    1e-5 of the LP solved by CBC. None: the fewest cores do not fit.

    The allocation: the best flow's least allocation with its fractional segment given back
    (``_Segments.rounded``), within the budget (not always within the user's areas: the caller checks).
    On graphs with branches it is far better than the chain's start (``latency_start``): LLaMA-7B
    577,581,077 cycles against 637,425,587, 0.47% over the bound; BERT-base 642,975 against 651,572."""
    if problem.min_cores() > problem.total_cores:
        return None
    segments = _Segments(problem)
    n = problem.n_kernels
    chain = tuple(critical_chain(problem))
    paths: dict[tuple[int, ...], float] = {chain: 1.0}  # the flow: its paths and their shares
    flow = np.zeros(n, dtype=np.float64)
    flow[list(chain)] = 1.0
    best, latency = segments.weighed(flow)
    best_flow = flow
    if not problem.is_chain():
        stalled, above = 0, float("inf")
        steps = max(4, min(PATH_FLOW_STEPS, PATH_FLOW_WORK // (38 * max(1, segments.kernel.size))))
        for _ in range(steps):
            # two steps towards the longest path under the current latencies, the better taken: Frank-Wolfe's
            # (every path's share diluted) and the pairwise one (share moved from the flow's shortest path
            # alone). Frank-Wolfe's alone crawls where the first chain's share must go (four independent
            # kernels at 3.66 cycles after 15 steps for 4.25); the pairwise alone stalls where several
            # paths must give share at once (four equal kernels sharing a core: 8 for 10.5)
            length, path = _longest(problem, latency.tolist())
            above = min(above, length)  # (the relaxation's optimum is at most this)
            if above - best <= PATH_FLOW_GAP * above:
                break
            longest = tuple(path)
            shortest = min(paths, key=lambda q: (float(latency[list(q)].sum()), q))
            target = np.zeros(n, dtype=np.float64)
            target[list(longest)] = 1.0
            away = np.zeros(n, dtype=np.float64)
            away[list(shortest)] = 1.0
            diluted, diluted_at = _line_search(segments, flow, target - flow, 1.0)
            moved, moved_at = _line_search(segments, flow, target - away, paths[shortest]) if longest != shortest else (0.0, -1.0)
            if diluted_at >= moved_at:
                flow = flow + diluted * (target - flow)
                paths = {q: share * (1.0 - diluted) for q, share in paths.items()}
                paths[longest] = paths.get(longest, 0.0) + diluted
            else:
                flow = flow + moved * (target - away)
                paths[longest] = paths.get(longest, 0.0) + moved
                paths[shortest] -= moved
            paths = {q: share for q, share in paths.items() if share > 1e-12}
            value, latency = segments.weighed(flow)
            stalled = stalled + 1 if value - best <= PATH_FLOW_SETTLED * max(1.0, best) else 0
            if value > best:
                best, best_flow = value, flow
            if stalled >= PATH_FLOW_STALLS:
                break
    return max(0, int(np.ceil(best - 1e-6 * max(1.0, best)))), segments.rounded(best_flow)
