"""Cores shared in time: runs of consecutive kernels, each run a region whose kernels take turns on one
grid (``cost.region``, ``opmodels.regions``).

Two strategies: :class:`SharedRegions` (``--share auto``: the runs and grids ``solvers.share`` proves
best for one token's time among a family of region grids, falling back to stacked columns when the
chosen regions do not pack) and :class:`FixedGrid` (``--grid RxC``: every region on one grid, the runs
SRAM packing gives; WaferLLM's mapping). Their decision
(:class:`~wsealloc.strategy.decision.RegionsDecision`) is the runs and, where fixed, each run's grid,
else the family the allocation chose grids from."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline, run_stoppable
from wsealloc.errors import InfeasibleError, Interrupted, UsageError
from wsealloc.graph.state import cache_shape
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.experts import shard_counts, split_experts
from wsealloc.opmodels.regions import region_table
from wsealloc.problem import build_problem
from wsealloc.problem.objective import ObjectiveKind, ProvenBound, objective_named, paced
from wsealloc.problem.sharing import INF as SHARING_INF
from wsealloc.problem.sharing import SharingProblem, build_sharing_problem, candidate_shapes, grid_allowed
from wsealloc.solvers import SolveOptions, Status, get_solver
from wsealloc.solvers.base import SolverResult, result_from_choice
from wsealloc.solvers.share import SharingResult, none_within
from wsealloc.solvers.share import solve as share_solver
from wsealloc.solvers.share import solve_paced as share_paced
from wsealloc.strategy.base import Part, Prepared, Progress, Strategy, quiet
from wsealloc.strategy.constrained import rectangle_rule
from wsealloc.strategy.decision import Decision, RegionsDecision
from wsealloc.strategy.modes import Family, ShareMode
from wsealloc.strategy.pipeline import pipeline_bound, refuse_seed_training, wafer_part
from wsealloc.units import format_bytes

if TYPE_CHECKING:
    from wsealloc.plan.schema import Plan
    from wsealloc.request import SolveRequest

# expert parallelism (``opmodels.experts``): the shard counts tried beside the MoE layers kept whole, on
# one wafer with requests in flight (``SharedRegions``) and over wafers (``strategy.wafers``). Two halves
# let a cut fall inside a layer and halve a layer's slowest region; more shards lengthen every layer's
# path by a shard's dispatch and combine for finer cuts the wafers' SRAM rarely needs (docs/cost-model.md,
# section 14)
EXPERT_SHARDS = (2,)
# --share auto: regions that fill the wafer may not pack; choose again among this region family
FALLBACK_FAMILY: Family = "stacked"  # (stacked columns always pack: only another family falls back)
# the share of the wafer's cores regions of a family may take: two shelves of regions need a little
# slack to split their widths into rows of the wafer's width; columns (stacked or not) always pack
FAMILY_BUDGET = {"squares": 1.0, "shelves": 0.98, "columns": 1.0, "stacked": 1.0}
FREE_SHARE = 0.2  # --share auto, rules on own rectangles: the regions' search without them (the price's reference)
OWN_SHARE = 0.1  # --share auto: own rectangles allocated where they may beat the regions (``own_rectangles``)
# --share auto: own rectangles allocated this many times faster than the regions' bound are solved alone,
# the regions not beside them (``own_rectangles``): placement adds 1.11-1.18x to an own-rectangle
# allocation on the zoo (1.49x before session 39's path placement; docs/benchmarks.md), and the regions'
# placement took the own rectangles' time (Llama-3-8B decode, 64 requests on wse3: 562,562 allocated
# against the regions' bound of 2,752,192; 13.6 s of a 60 s solve placing regions that could not win)
OUT_OF_REACH = 2.0
SHARING_SHARE = 0.6  # --share auto: the search for runs and grids (LLaMA decodes: about 10 s; the rest allocates and places)


def pack_runs(costs: CostTable, r: int, c: int) -> list[tuple[int, int]]:
    """Consecutive kernels packed into as few ``r x c`` regions as SRAM allows (first fit in dataflow
    order: the fewest regions of a sequence); a kernel that alone needs more is an error naming it."""
    if r > costs.arch.rows or c > costs.arch.cols:
        raise UsageError(f"--grid {r}x{c}: larger than the {costs.arch.rows}x{costs.arch.cols} wafer of {costs.arch.name}")
    if not grid_allowed(costs.arch, r, c):
        die = costs.arch.wafer.die_cores
        raise UsageError(
            f"--grid {r}x{c}: crosses a die boundary, which {costs.arch.name} forbids (dies are {die.rows}x{die.cols})"
        )
    sp = build_sharing_problem(costs, np.array([[r, c]]))
    usable = float(sp.usable_sram)
    runs: list[tuple[int, int]] = []
    first, held, peak = 0, 0.0, 0.0
    for k in range(sp.n_kernels):
        resident, buffers = float(sp.resident[k, 0]), float(sp.buffers[k, 0])
        if sp.latency[k, 0] >= SHARING_INF or resident + buffers > usable:
            why = (
                f"cannot be laid on {r}x{c}"
                if sp.latency[k, 0] >= SHARING_INF
                else f"needs {format_bytes(int(resident + buffers))} per core on {r}x{c}, more than the usable "
                f"{format_bytes(sp.usable_sram)}"
            )
            raise InfeasibleError(
                f"{costs.kgraph.ops.source}: kernel {sp.names[k]} {why}: a kernel cannot span regions; use a larger --grid"
            )
        if held + resident + max(peak, buffers) > usable:  # resident parts add up, one kernel's buffers at a time
            runs.append((first, k))
            first, held, peak = k, 0.0, 0.0
        held += resident
        peak = max(peak, buffers)
    runs.append((first, sp.n_kernels))
    return runs


def prefill_tiles(arch: Arch, r: int, c: int) -> int:
    """How many ``r x c`` regions lie side by side on the wafer without overlap: ``(R // r) x (C // c)``,
    within each die where the arch forbids crossing one. Translates of one rectangle pack no better
    than in rows and columns (each crosses exactly one of the ``C // c`` columns ``x = k c - 1``, and
    each such column crosses at most ``R // r`` of them), so a prefill's regions fit the wafer exactly
    when they are at most this many; a count of cores alone would pass 3 squares of 450 on a 768 x
    1,176 WSE-3, which holds 2. (Defective cores are not taken out, as the cores of a plan's regions
    are not before placement.)"""
    if arch.wafer.die_boundary is DieBoundary.FORBID:
        die, dies = arch.wafer.die_cores, arch.wafer.dies
        return (die.rows // r) * (die.cols // c) * dies.rows * dies.cols
    return (arch.rows // r) * (arch.cols // c)


def regions_fit(arch: Arch, grids: Sequence[tuple[int, int]]) -> bool:
    """Whether regions of these grids lie side by side on the wafer: of one grid, at most the
    ``prefill_tiles`` of it (translates of one rectangle pack no better than in rows and columns: three
    420 x 420 regions do not fit 750 x 994 although their cores do); of several, their cores within the
    wafer's (where a layout is then searched for)."""
    shapes = set(grids)
    if len(shapes) == 1:
        ((r, c),) = shapes
        return len(grids) <= prefill_tiles(arch, r, c)
    return sum(r * c for r, c in grids) <= arch.total_cores


def resident_bytes(costs: CostTable) -> tuple[int, int]:
    """The weights and the KV caches of the table's kernels, in bytes: a cache once per request in
    flight (``--requests N``: ``state_copies``, as the op models hold them)."""
    weights = sum(int(kc.work.weight_bytes) for kc in costs.kernels)
    caches = sum(int(getattr(kc.work, "state_bytes", 0)) * int(getattr(kc.work, "state_copies", 1)) for kc in costs.kernels)
    return weights, caches


def fewest_by_sram(costs: CostTable) -> int:
    """The fewest wafers any plan needs: its weights and KV caches live somewhere, and a wafer holds at
    most its usable SRAM (a lower bound whatever regions share cores)."""
    return max(1, -(-sum(resident_bytes(costs)) // (costs.arch.usable_sram_bytes * costs.total_cores)))


def more_room(costs: CostTable, request: SolveRequest) -> str:
    """What gives a model too large for one wafer room: ``--wafers auto`` (unless the user's rules hold
    it to one wafer: latency over wafers takes none yet) and, for a decode export's KV caches, a shorter
    ``--context`` or fewer ``--requests``."""
    wafers = request.constraints is None or not request.constraints.rules
    cache = cache_shape(costs.kgraph.ops)
    caches = cache is not None and cache.phase == "decode"  # (a prefill's caches are its prompt's)
    if wafers:
        return "; use --wafers auto" + (" (or a shorter --context, fewer --requests)" if caches else "")
    return "; give a shorter --context or fewer --requests" if caches else ""


def too_large_for_a_wafer(costs: CostTable, request: SolveRequest) -> InfeasibleError | None:
    """The error for a model whose weights and KV caches alone exceed one wafer's usable SRAM (no
    partition into regions can fit: ``fewest_by_sram``); None when they fit. A sum over the kernels,
    checked before the search for regions, which takes seconds to find the same (Llama-3.1-70B's decode
    on wse3: 12 s)."""
    wafers = fewest_by_sram(costs)
    if wafers <= 1:
        return None
    weights, caches = resident_bytes(costs)
    held = f"its weights ({format_bytes(weights)}) and KV caches ({format_bytes(caches)})" if caches else "its weights"
    return InfeasibleError(
        f"{costs.kgraph.ops.source}: {held} need {format_bytes(weights + caches)}, more than the "
        f"{format_bytes(costs.arch.usable_sram_bytes * costs.total_cores)} of usable SRAM one {costs.arch.name} wafer has "
        f"(at least {wafers} wafers){more_room(costs, request)}"
    )


def packed_regions(costs: CostTable, shapes: np.ndarray) -> np.ndarray:
    """How many regions :func:`pack_runs` packs the kernels into on each of ``shapes`` ([G, 2] rows x
    cols), 0 where a kernel alone does not fit a region of it (or cannot be laid on it, or the arch
    forbids the grid): the same first fit, run on every grid at once. A choice among many grids (the
    prefill's, ``plan.generation``) costs one pass over the kernels instead of one per grid; the
    arithmetic is ``pack_runs``' own, float for float, so the counts are equal (tests hold them so)."""
    shapes = np.asarray(shapes, dtype=np.int64).reshape(-1, 2)
    inside = (shapes[:, 0] <= costs.arch.rows) & (shapes[:, 1] <= costs.arch.cols)
    sp = build_sharing_problem(costs, np.where(inside[:, None], shapes, 1))
    usable = float(sp.usable_sram)
    count = np.ones(len(shapes), dtype=np.int64)
    held = np.zeros(len(shapes))
    peak = np.zeros(len(shapes))
    fits = inside.copy()
    for k in range(sp.n_kernels):
        resident, buffers = sp.resident[k], sp.buffers[k]
        fits &= (sp.latency[k] < SHARING_INF) & (resident + buffers <= usable)
        new = held + resident + np.maximum(peak, buffers) > usable  # as pack_runs: a new region from k on
        count += new
        held = np.where(new, 0.0, held) + resident
        peak = np.maximum(np.where(new, 0.0, peak), buffers)
    return np.where(fits, count, 0)


def share_cores(
    costs: CostTable,
    request: SolveRequest,
    family: Family,
    deadline: Deadline,
    say: Progress = quiet,
    known_bound: int | None = None,
    given: SharingResult | None = None,
    pace: int | None = None,
) -> tuple[CostTable, ProvenBound | None, tuple[tuple[int, int], ...] | None]:
    """The table of regions ``solvers.share`` proves best for a token's time among ``family``'s region
    grids, its proven bound (the least of it and ``known_bound``, another family's, when a solve fell
    back) and each region's fixed grid (stacked columns; None: the allocation chooses among the
    family's). No regions found in time: the kernel table, no bound. ``given``: runs and grids found
    already, with their status and bound (a search over several wafers; this table's kernels, no user
    groups): only made a table. ``pace``: the requests in flight the regions are valued with (None: the
    request's; 1: one pass, for one wafer of several, whose merged plan they pace once)."""
    latency_only(request)
    if given is None and (large := too_large_for_a_wafer(costs, request)) is not None:
        raise large
    sp = build_sharing_problem(costs, family=family)
    sp = replace(sp, total_cores=int(sp.total_cores * FAMILY_BUDGET[family]))
    groups = region_spans(costs)
    kernel_sp = sp
    sp, bounds = sp.merged([span for span, _ in groups]) if groups else (sp, np.arange(sp.n_kernels + 1))
    say(f"sharing: choosing regions of {sp.n_kernels:,} units on {family} grids")
    share = deadline.share(SHARING_SHARE)  # the runs and grids; the allocation and placement take the rest
    # requests in flight: each waits its turn at the slowest region (``objective.Latency``)
    pace = request.requests if pace is None else pace

    def search(problem: SharingProblem, within: Deadline) -> SharingResult:
        return share_solver(problem, within) if pace == 1 else share_paced(problem, pace, within)

    found = given if given is not None else run_stoppable(lambda: search(sp, share), deadline)
    if found is None:
        raise Interrupted(f"interrupted while choosing regions for {request.model.label}; nothing was solved")
    if found.status is Status.INFEASIBLE:
        named = "; ".join(where for _, where in groups)
        rules = f" with {named}" if named else ""
        raise InfeasibleError(f"{costs.kgraph.ops.source}: {found.message}{rules}{more_room(costs, request)}")
    found = replace(found, runs=tuple((int(bounds[i]), int(bounds[j])) for i, j in found.runs))
    sp = replace(kernel_sp, cap=found.cap)  # the runs are of kernels again (a stacked column's regions within the cap)
    free = None
    if groups:  # the price of the groups: the same search without them (a share of what is left)
        free_run = run_stoppable(lambda: search(kernel_sp, deadline.share(0.2)), deadline)
        free = free_run.bound if free_run is not None and free_run.status is not Status.INFEASIBLE else None
    if not found.runs:  # nothing found in time: every kernel keeps its own rectangle
        say(f"sharing: {found.message}; planning one kernel per region instead")
        return costs, None, None
    assert found.latency is not None
    say(f"sharing: {found.message}; {found.latency:,} cycles per token, bound {found.bound:,} ({found.wall_s:.1f} s)")
    bound = found.bound if known_bound is None else min(known_bound, found.bound or known_bound)

    def proves(units: CostTable, choice: tuple[int, ...]) -> bool:
        """Whether the bound proves the regions as made optimal: their path (one request in flight), or
        each request's token time recomputed from the units themselves (the slowest of them may differ
        from the search's where the user's groups moved a column's cuts; regions found over several
        wafers, ``given``, were searched for the path alone)."""
        if found.status is not Status.OPTIMAL:
            return False
        if pace == 1:
            return bound == found.latency
        lat = [int(u.frontier.latency[j]) for u, j in zip(units.kernels, choice, strict=True)]
        return bound is not None and bound >= paced(sum(lat), max(lat, default=0), pace)

    # stacked columns: each column's regions on its grid, as chosen (they pack as columns); regions found
    # within a cap (requests in flight) keep their grids too: an allocation of the path alone would give
    # cores back from a region past the cap (a review: 1,632 cycles a token chosen, 1,968 planned)
    if sp.pieces.size or found.cap is not None:
        single = sp.single_windows(found.grids)
        cut = np.zeros(sp.n_kernels + 1, dtype=bool)
        cut[bounds] = True  # a column's regions break only where the user's groups allow
        pieces = [
            (piece, g) for (i, j), g in zip(found.runs, found.grids, strict=True) for piece in sp.split(i, j, g, single[g], cut)
        ]
        runs = [piece for piece, _ in pieces]
        grids = tuple((int(sp.shapes[g, 0]), int(sp.shapes[g, 1])) for _, g in pieces)
        units = region_table(costs, runs, run_shapes=[np.array([grid], dtype=np.int64) for grid in grids])
        fixed = tuple(0 for _ in runs)
        optimal = proves(units, fixed)
        return (
            units,
            ProvenBound("share", bound, fixed if optimal else None, fixed, final=True, wall_s=found.wall_s, unconstrained=free),
            grids,
        )
    units = region_table(costs, found.runs, shapes=sp.shapes)
    start = []
    for i, ((first, end), g) in enumerate(zip(found.runs, found.grids, strict=True)):
        run_latency = int(sp.latency[first:end, g].sum())
        frontier = units.kernels[i].frontier
        within = np.flatnonzero(frontier.latency <= run_latency)
        start.append(int(within[0]) if within.size else len(frontier) - 1)
    choice = tuple(start)
    optimal = proves(units, choice)
    proven = ProvenBound("share", bound, choice if optimal else None, choice, wall_s=found.wall_s, unconstrained=free)
    return units, proven, None


class Own(NamedTuple):
    """Every kernel on its own rectangle, allocated faster than the regions (``own_rectangles``)."""

    part: Part
    # the regions' bound is ``OUT_OF_REACH`` times the allocation or more: no regions plan is expected to
    # beat its layout, so it is solved alone (a layout that does not pack still falls back on regions:
    # the strategy's ``retry``)
    alone: bool


def own_rectangles(
    costs: CostTable,
    request: SolveRequest,
    units: CostTable,
    proven: ProvenBound,
    deadline: Deadline,
    say: Progress,
    known: OwnFirst | None = None,
) -> tuple[ProvenBound, Own | None]:
    """The regions' bound holds over the family's grids; a plan with every kernel on its own rectangle
    may take any legal grid, and with requests in flight (its slowest kernel paces the token) it can be
    faster: the tiny decode at 16 requests allocates own rectangles at 1,568 cycles a token against the
    regions' 1,856, and a plan stated OPTIMAL at 1,872 was beaten by ``--share none`` at 1,776.

    The own rectangles' bound (the objective's, LP) is weighed against the regions' allocation: at or
    above it no own-rectangle plan is faster, and the regions' bound stands (Llama-3-8B decode: 1.15 M
    against 0.36 M cycles). Below it the exact backend allocates own rectangles in a share of the time,
    and the bound becomes the least of both families'. Where they allocate faster, their part is
    returned too: placement adds more communication to many small rectangles than to a few regions
    (12 requests: 1,410 against 1,494 allocated, 1,692 against 1,552 placed), so the driver solves both
    (``Prepared.rivals``) and keeps the faster plan. The user's region groups keep the regions.
    ``known``: the own rectangles allocated already (``own_first``), their time counted here."""
    if proven.value is None or proven.start is None or region_spans(costs):
        return proven, None
    t0 = time.perf_counter() - (known.wall_s if known is not None else 0.0)
    lat = [int(u.frontier.latency[j]) for u, j in zip(units.kernels, proven.start, strict=True)]
    regions = paced(sum(lat), max(lat, default=0), request.requests)
    lp = own_bound(costs, request) if known is None else known.lp
    if lp.value is None or lp.value >= regions:  # (the weighing's time counts in the regions' proof)
        return replace(proven, wall_s=proven.wall_s + time.perf_counter() - t0), None
    made = known.allocated if known is not None else None
    own, found, method = made if made is not None else own_allocation(costs, request, lp, deadline)
    bound = min(proven.value, own)
    # (the weighing's time, the own rectangles' allocation included, counts in the plan's proof)
    spent = time.perf_counter() - t0
    lowered = replace(proven, value=bound, choice=proven.choice if bound == proven.value else None, wall_s=proven.wall_s + spent)
    if found is None or found.objective is None or found.objective >= regions:
        say(f"sharing: every kernel on its own rectangle takes at least {own:,} cycles; the regions' {regions:,} stay")
        return lowered, None
    say(f"sharing: every kernel on its own rectangle allocates at {found.objective:,} cycles, the regions at {regions:,}")
    alone = proven.value >= OUT_OF_REACH * found.objective
    # (solved alone, its plan's time counts the regions' search and the weighing: no other decision does)
    wall = lowered.wall_s if alone else found.wall_s
    part = Part(costs, ProvenBound(method, bound, None, start=found.choice, wall_s=wall), wider=True)
    if alone:
        say(f"sharing: the regions take at least {proven.value:,} cycles; every kernel on its own rectangle is solved alone")
    return lowered, Own(part, alone)


def own_bound(costs: CostTable, request: SolveRequest) -> ProvenBound:
    """The objective's bound of every kernel on its own rectangle (LP), with its own allocation."""
    objective = objective_named(request.objective, request.requests)
    return objective.exact_bound(build_problem(costs, objective=objective))


def own_allocation(
    costs: CostTable, request: SolveRequest, lp: ProvenBound, deadline: Deadline, search: bool = True
) -> tuple[int, SolverResult | None, str]:
    """Every kernel on its own rectangle allocated, ``lp`` its bound (``own_bound``): the bound (the
    LP's, or the exact backend's where higher), the fastest allocation found (None: none) and the
    method that proved the bound. The greedy allocation first (at once: a plan where the exact backend
    finds none in its share, and its hint; Llama-3-8B decode on wse3 at 64 requests: 665,399 cycles
    greedy against 2,768,768 for the regions, where CP-SAT found nothing in a tenth of 30 s), the
    bound's own allocation (``latency_start``) where faster, then (``search``) the exact backend if the
    request's is one, in ``OWN_SHARE`` of the time."""
    objective = objective_named(request.objective, request.requests)
    problem = build_problem(costs, objective=objective)
    assert lp.value is not None
    knobs = SolveOptions(
        deadline=deadline.share(OWN_SHARE), workers=request.solver.workers, seed=request.solver.seed, lower_bound=lp.value
    )
    greedy = get_solver("greedy")(problem, knobs)
    found = greedy if greedy.has_solution and greedy.objective is not None else None
    if lp.start is not None:
        start = result_from_choice("lp", problem, lp.start, Status.OPTIMAL if lp.optimal else Status.FEASIBLE, lp.value, 0.0)
        if start.objective is not None and (found is None or start.objective < (found.objective or 0)):
            found = start
    own = lp.value
    solver = request.solver.name if request.solver.name in objective.exact_backends and search else None
    if solver is not None and not deadline.stopped and not lp.optimal:
        hinted = replace(knobs, hint=found.choice if found is not None else None)
        exact = run_stoppable(lambda: get_solver(solver)(problem, hinted), deadline)
        if exact is not None:
            own = max(own, exact.bound or 0)
            if exact.has_solution and exact.objective is not None and (found is None or exact.objective < (found.objective or 0)):
                found = exact
    return own, found, solver or "lp"


class OwnFirst(NamedTuple):
    """Every kernel on its own rectangle weighed before the regions are searched (``own_first``)."""

    lp: ProvenBound  # their bound (``own_bound``)
    # ``own_allocation``'s (the bound, the allocation, the method), None where not made (the regions
    # were not out of reach of the bound itself)
    allocated: tuple[int, SolverResult | None, str] | None
    wall_s: float
    # the regions were proven out of reach (``OUT_OF_REACH``) without their search: solved alone
    alone: Part | None


def own_first(costs: CostTable, request: SolveRequest, family: Family, deadline: Deadline, say: Progress) -> OwnFirst | None:
    """With requests in flight, every kernel on its own rectangle allocated before the regions are
    searched, and the regions weighed against it without their search where one program proves them
    out of reach: no plan of ``family`` whose every region takes at most ``OUT_OF_REACH`` x the
    allocation / N cycles fits the wafer (``solvers.share.none_within``; each token then waits N turns
    of a slower region). The own rectangles are then solved alone and the regions searched only if
    they do not pack (``RegionsLater``, the strategy's ``retry``). Llama-3-8B decode at 64 requests on
    wse3: the regions' search took 18.9 s of a 60 s solve for a bound of 2,752,192 cycles, against
    562,562 allocated on own rectangles; the program takes 0.4 s.

    The own rectangles' bound (LP) is weighed first: where regions fit within its cap, no allocation
    puts them out of reach, and the allocation waits for ``own_rectangles`` (which may find the
    regions faster and skip it). None where this does not apply (one request, the user's region
    groups, MoE layers, whose split is weighed after the regions' search: ``_with_split_experts``; a
    model too large for the wafer, which the regions' search reports). Else what was made, passed on
    to ``own_rectangles`` so that nothing is made twice."""
    if request.requests <= 1 or region_spans(costs) or too_large_for_a_wafer(costs, request) is not None:
        return None
    if next(iter(shard_counts(costs, max(EXPERT_SHARDS))), None) is not None:
        return None
    latency_only(request)
    t0 = time.perf_counter()
    lp = own_bound(costs, request)
    if lp.value is None:
        return None
    sp = build_sharing_problem(costs, family=family)
    sp = replace(sp, total_cores=int(sp.total_cores * FAMILY_BUDGET[family]))

    def cap_of(value: int) -> int:  # (the largest slowest region whose N turns stay below 2x ``value``)
        return -(-int(OUT_OF_REACH * value) // request.requests) - 1

    # (every allocation takes at least the bound: where regions fit within the bound's cap, they fit
    # within any allocation's)
    if not none_within(sp, cap_of(lp.value)):
        return OwnFirst(lp, None, time.perf_counter() - t0, None)

    def out_of_reach(found: SolverResult | None) -> bool:
        return found is not None and found.objective is not None and none_within(sp, cap_of(found.objective))

    # the greedy's and the bound's own allocations first: where they put the regions out of reach, so
    # does any faster one, and the own rectangles' solve runs the exact backend itself (hinted); the
    # exact backend here only where they do not (the 8B at 64 requests: 6 s of a 60 s solve saved)
    made = own_allocation(costs, request, lp, deadline, search=False)
    alone = out_of_reach(made[1])
    if not alone:
        made = own_allocation(costs, request, lp, deadline)
        alone = out_of_reach(made[1])
    own, found, method = made
    wall = time.perf_counter() - t0
    part = None
    if alone and found is not None and found.objective is not None:
        cap = cap_of(found.objective)
        say(
            f"sharing: every kernel on its own rectangle allocates at {found.objective:,} cycles or less; every plan of {family} "
            f"regions that fits the wafer has one slower than {cap:,} cycles ({request.requests} x {cap + 1:,}: "
            f"{request.requests * (cap + 1):,} cycles a token at least), so they are solved alone"
        )
        part = Part(costs, ProvenBound(method, own, None, start=found.choice, wall_s=wall), wider=True)
    return OwnFirst(lp, made, wall, part)


class RegionsLater(NamedTuple):
    """``Prepared.state`` of own rectangles solved alone before the regions were searched (``own_first``):
    the family whose regions a ``retry`` searches, should the own rectangles not pack, and what
    ``own_first`` made (not made again)."""

    family: Family
    weighed: OwnFirst


def free_bound(costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress) -> int | None:
    """What ``--share auto`` proves without the user's rules, where rules on own rectangles chose own
    rectangles: the least of the regions' bound (their search on the table without the rules, in a
    share of the time) and the own rectangles' (a review: a keep-out's price stated against own
    rectangles alone, 1,298 cycles, where the regions reach 1,025 without it). None: not known."""
    base = costs.unconstrained
    if base is None:
        return None
    own = pipeline_bound(base, objective_named(request.objective, request.requests), allocate=False).value
    try:
        _, proven, _ = share_cores(base, request, request.sharing.family, deadline.share(FREE_SHARE), say)
    except (InfeasibleError, Interrupted):  # (no regions fit without the rules, or a signal: own rectangles')
        return own
    regions = proven.value if proven is not None else None
    return min((v for v in (own, regions) if v is not None), default=None)


def latency_only(request: SolveRequest) -> None:
    """Regions are chosen for one token's time (``share_cores``; rules on own rectangles too)."""
    if request.objective is not ObjectiveKind.LATENCY:
        raise UsageError(
            "--share auto chooses regions for one token's time: add --objective latency "
            "(a throughput plan keeps every kernel on its own rectangle: --share none)"
        )


def own_reason(family: Family | None, alone: bool = False) -> str:
    """The decision's reason when every kernel on its own rectangle was solved beside the regions (or,
    ``alone``, instead of them: ``OUT_OF_REACH``)."""
    if alone:
        return f"every kernel on its own rectangle (allocated at least {OUT_OF_REACH:g}x faster than the {family} regions' bound)"
    return f"every kernel on its own rectangle (allocated faster than {family} regions, and solved beside them)"


def region_spans(costs: CostTable) -> list[tuple[tuple[int, int], str]]:
    """The user's ``together: ... how: region`` groups as kernel spans [first, last + 1) (a region is a
    run of consecutive kernels, so the kernels between a group's first and last share it too), each
    with the rule's file and line."""
    applied = costs.applied
    if applied is None:
        return []
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    spans = []
    for rule, group in applied.region_groups:
        members = [index[name] for name in group]
        spans.append(((min(members), max(members) + 1), f"{applied.where(rule)} ({applied.rule(rule).text()})"))
    return spans


def refuse_regions(request: SolveRequest) -> None:
    """What regions do not plan: several wafers, training (each kernel's phases share its own rectangle)."""
    if request.wafers != 1:
        raise ValueError("--share/--grid plan regions on one wafer: drop --wafers (or use --share none)")
    if request.cost.train is not None:
        if request.objective is not ObjectiveKind.THROUGHPUT:
            raise ValueError("--train plans training samples per second in the layer pipeline: use --objective throughput")
        raise ValueError("--train keeps each kernel's forward, backward and update on its own rectangle: use --share none")
    refuse_seed_training(request)


def _with_split_experts(
    prepared: Prepared, costs: CostTable, request: SolveRequest, family: Family, deadline: Deadline, say: Progress
) -> Prepared:
    """``prepared`` (the MoE layers kept whole) with every layer's experts split into shards as a rival
    decision, where their regions' bound is below its (``Prepared.rivals``: the driver solves both and
    keeps the faster plan), and every part's bound the least of both forms'. Only with requests in
    flight: each waits its turn at the slowest region, and a layer's shard is a region of its own half
    as slow; with one request a split only adds a shard's dispatch to the path. The tiny MoE (8 experts,
    top 2) at 8 requests on one wafer stated 9,176 cycles a token OPTIMAL with its layers whole, where
    ``--wafers auto`` landed on one wafer with them split at 7,784. Not under the user's rules (their
    kernels are the kept table's; a split table is made before rules are applied, as over wafers, where
    they are refused)."""
    shards = next((n for n in shard_counts(costs, max(EXPERT_SHARDS)) if n in EXPERT_SHARDS), None)
    kept = prepared.parts[0].bound
    ruled = costs.applied is not None
    if shards is None or request.requests <= 1 or ruled or kept is None or kept.value is None or deadline.stopped:
        return prepared
    table = split_experts(costs, shards)
    say(f"sharing: every MoE layer's experts split into {shards} shards, beside the layers kept whole")
    try:
        units, proven, grids = share_cores(table, request, family, deadline, say)
    except (InfeasibleError, Interrupted):  # (the split form fits no better, or a signal: the kept form stands)
        return prepared
    if proven is None or proven.value is None or units.runs is None or proven.value >= kept.value:
        if proven is not None and proven.value is not None:
            say(f"sharing: split into {shards} shards, at least {proven.value:,} cycles; the layers kept whole stay")
        return prepared
    least = proven.value
    say(f"sharing: split into {shards} shards, at least {least:,} cycles against {kept.value:,} with the layers kept whole")

    def lowered(part: Part) -> Part:  # (a bound over both forms: one of the kept form no longer reaches it)
        b = part.bound
        if b is None or b.value is None or b.value <= least:
            return part
        return replace(part, bound=replace(b, value=least, choice=None, start=b.start or b.choice), wider=True)

    reason = f"experts split into {shards} shards (bound {least:,} cycles; kept whole {kept.value:,})"
    decision = RegionsDecision(family=family, runs=tuple(units.runs), grids=grids, expert_shards=shards, reason=reason)
    split = Prepared(decision, (Part(units, proven, wider=True),), units, table)
    rivals = tuple(replace(r, parts=tuple(lowered(p) for p in r.parts)) for r in prepared.rivals)
    # (own rectangles solved alone keep the regions for a retry in ``state``: lowered too, or a retry's
    # plan would state the kept form's bound, above a split plan that exists)
    waiting = prepared.state
    if isinstance(waiting, Prepared):
        waiting = replace(waiting, parts=tuple(lowered(p) for p in waiting.parts))
    return replace(prepared, parts=tuple(lowered(p) for p in prepared.parts), rivals=(*rivals, split), state=waiting)


class RegionsLowering(Strategy):
    """What both region strategies share: the decision, its lowering, the reports."""

    name = "regions"
    decision_type = RegionsDecision
    shares_cores = True

    def refuse(self, request: SolveRequest) -> None:
        refuse_regions(request)

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        assert isinstance(decision, RegionsDecision)
        if decision.expert_shards is not None:
            costs = split_experts(costs, decision.expert_shards)
        if not decision.runs:
            return costs  # no regions were found in time: every kernel kept its own rectangle
        if decision.grids is not None:
            return region_table(costs, decision.runs, run_shapes=[np.array([g], dtype=np.int64) for g in decision.grids])
        assert decision.family is not None
        return region_table(costs, decision.runs, shapes=candidate_shapes(costs.arch, decision.family))

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        return regions_lines(plan)


def regions_lines(plan: Plan) -> list[str]:
    """The regions of a plan: how many, of how many kernels, on which grids; whether they fit."""
    if not plan.regions:
        return []
    obj = plan.objective
    grids = sorted({f"{rg.grid[0]}x{rg.grid[1]}" for rg in plan.regions})
    over = (
        f"they need {obj.cores_used:,} cores, more than the wafer's {plan.arch.total_cores:,}"
        if obj.cores_used > plan.arch.total_cores
        else f"they do not lie side by side on the wafer (their {obj.cores_used:,} cores would fit)"
    )
    fit = "" if obj.fits_wafer else f"; {over}: not placed"
    return [
        f"regions: {len(plan.regions)} sharing cores in time ({len(plan.kernels)} kernels; grids {', '.join(grids[:6])}"
        f"{', ...' if len(grids) > 6 else ''}){fit}"
    ]


class SharedRegions(RegionsLowering):
    """``--share auto`` (see the module docstring)."""

    chooses_regions = True

    def applies(self, request: SolveRequest) -> bool:
        return request.sharing.mode is ShareMode.AUTO

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        pinned = rectangle_rule(request.constraints)
        if pinned is not None:  # (``refuse_rules`` refused them beside region groups)
            assert request.constraints is not None
            where = request.constraints.where(pinned)
            say(f"sharing: {where} applies to kernels on their own rectangles; no regions are chosen")
            latency_only(request)
            part = wafer_part(costs, objective_named(request.objective, request.requests))
            if part.bound is not None:  # the price's reference: the least of both families without the rules
                part = replace(part, bound=replace(part.bound, unconstrained=free_bound(costs, request, deadline, say)))
            reason = f"every kernel on its own rectangle ({where}: a {pinned.kind} rule applies to kernels that own theirs)"
            decision = RegionsDecision(family=request.sharing.family, runs=(), reason=reason)
            return Prepared(decision, (part,), part.table, costs)
        return self._share(costs, request, request.sharing.family, deadline, say)

    def _share(
        self,
        costs: CostTable,
        request: SolveRequest,
        family: Family,
        deadline: Deadline,
        say: Progress,
        known: int | None = None,
        first: bool = True,
        weighed: OwnFirst | None = None,
    ) -> Prepared:
        """The regions of ``family``, every kernel on its own rectangle beside them where that allocates
        faster (``own_rectangles``). ``first`` (not a retry, whose rivals the driver does not solve): the
        MoE layers split as a rival too (``_with_split_experts``), and own rectangles out of the regions'
        reach solved alone (a retry is the regions' turn: the own rectangles found no layout)."""
        if first:
            weighed = own_first(costs, request, family, deadline, say)
            if weighed is not None and weighed.alone is not None:  # (the regions out of reach, unsearched)
                alone = RegionsDecision(family=family, runs=(), reason=own_reason(family, alone=True))
                return Prepared(alone, (weighed.alone,), costs, costs, state=RegionsLater(family, weighed))
        units, proven, grids = share_cores(costs, request, family, deadline, say, known)
        if proven is None:  # every kernel on its own rectangle
            part = wafer_part(costs, objective_named(request.objective, request.requests))
            if part.bound is not None and weighed is not None:  # (the weighing's time counts in the proof)
                part = replace(part, bound=replace(part.bound, wall_s=part.bound.wall_s + weighed.wall_s))
            return Prepared(RegionsDecision(family=family, runs=()), (part,), part.table, costs)
        assert units.runs is not None
        bound, own = own_rectangles(costs, request, units, proven, deadline, say, weighed)
        decision = RegionsDecision(family=family, runs=tuple(units.runs), grids=grids)
        regions = Prepared(decision, (Part(units, bound, wider=True),), units, costs)
        if own is None:
            prepared = regions
        elif own.alone and first:  # (the regions out of reach: the own rectangles' plan gets all the time)
            alone = RegionsDecision(family=family, runs=(), reason=own_reason(family, alone=True))
            prepared = Prepared(alone, (own.part,), costs, costs, state=regions)  # (the retry's: ``retry``)
        else:
            mine = Prepared(RegionsDecision(family=family, runs=(), reason=own_reason(family)), (own.part,), costs, costs)
            prepared = replace(regions, rivals=(mine,))
        return _with_split_experts(prepared, costs, request, family, deadline, say) if first else prepared

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        decision = prepared.decision
        if not isinstance(decision, RegionsDecision) or deadline.stopped:
            return None
        if rectangle_rule(request.constraints) is not None:  # the user's rules keep own rectangles
            return None
        if isinstance(prepared.state, Prepared):  # own rectangles solved alone found no layout: the regions' turn
            say("sharing: every kernel on its own rectangle found no layout; the regions are solved after all")
            return prepared.state
        if isinstance(prepared.state, RegionsLater):  # ... before the regions were searched: searched now
            say("sharing: every kernel on its own rectangle found no layout; the regions are searched after all")
            later = prepared.state
            return self._share(costs, request, later.family, deadline, say, first=False, weighed=later.weighed)
        if decision.family == FALLBACK_FAMILY:
            return None
        # the regions chosen do not pack: choose again among shapes that do (the plan's decision records
        # the family; its bound stays the least of the families searched, so the plan reports the price)
        say(f"sharing: no layout packs those regions; choosing again among {FALLBACK_FAMILY} regions")
        bound = prepared.parts[0].bound
        known = bound.value if bound is not None else None
        return self._share(costs, request, FALLBACK_FAMILY, deadline, say, known, first=False)

    def price_reference(self, request: SolveRequest, prepared: Prepared) -> ProvenBound:
        bound = prepared.parts[0].bound
        free = bound.unconstrained if bound is not None else None
        if rectangle_rule(request.constraints) is not None:  # (``free_bound``: a lower bound, not an optimum)
            return ProvenBound("share", free, None)
        return ProvenBound("share", free, ()) if free else ProvenBound("share", None, None)

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is not None or not isinstance(decision, RegionsDecision):
            return wrong
        asked = request.sharing.family
        if decision.family not in (asked, FALLBACK_FAMILY):
            choices = f"{asked!r} or {FALLBACK_FAMILY!r}"
            return f"decision.family is {decision.family!r}; --share auto with family {asked!r} chooses {choices}"
        if decision.family == FALLBACK_FAMILY and decision.runs:
            grids = {tuple(s) for s in candidate_shapes(request.machine, FALLBACK_FAMILY).tolist()}
            if decision.grids is None or any(tuple(g) not in grids for g in decision.grids):
                return "decision.grids: a stacked region's grid is not one of the stacked family's (rows // k x width)"
        if decision.expert_shards is not None and (
            decision.expert_shards not in EXPERT_SHARDS or not decision.runs or request.requests <= 1
        ):
            return (
                f"decision.expert_shards is {decision.expert_shards}: --share auto splits MoE layers into "
                f"{', '.join(map(str, EXPERT_SHARDS))} shards, as regions, with requests in flight (--requests 2 or more)"
            )
        return None


class FixedGrid(RegionsLowering):
    """``--grid RxC`` (see the module docstring): no choice is left, so no backend runs."""

    def applies(self, request: SolveRequest) -> bool:
        return request.sharing.mode is ShareMode.GRID

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        assert request.sharing.grid is not None
        r, c = request.sharing.grid
        runs = pack_runs(costs, r, c)
        units = region_table(costs, runs, shapes=np.array([[r, c]]))
        decision = RegionsDecision(family=None, runs=tuple(runs), grids=tuple((r, c) for _ in runs))
        return Prepared(decision, (Part(units, None, fixed=True),), units, costs)

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is None and isinstance(decision, RegionsDecision):
            grid = request.sharing.grid
            if decision.family is not None or decision.grids is None or any(tuple(g) != grid for g in decision.grids):
                return f"decision.grids: --grid {grid} puts every region on that grid"
            if decision.expert_shards is not None:
                return "decision.expert_shards: --grid keeps the MoE layers whole (--share auto splits them)"
        return wrong
