"""One token's time over several wafers (``--objective latency --wafers N|auto``, with ``--share auto``
or ``none``): the kernels cut over wafers in dataflow order, each wafer holding its kernels' weights
and the KV caches of every request in flight, each wafer's regions chosen as on one wafer; the token
crosses every wafer boundary once, paying the link (its latency, and the bytes crossing the cut over
the link's bandwidth: ``problem.stages.transfer_cycles``).

The plan's time is the sum of every wafer's token path and of the transfers at its cuts. Its proof
covers the cut too: with the W wafers' cores as one budget (every cut's wafers are within it: a
relaxation of the cut), the sharing search (or, every kernel on its own rectangle, the latency
objective's LP bound) proves a lower bound on the sum of the wafers' paths, and a token crosses W - 1
distinct cuts, each at least the cheapest transfer. The cut itself packs the regions of that relaxed
optimum onto the wafers in order (each wafer's cores within one wafer); when they do not pack into W
wafers, the exact min-max cut of the kernels' fewest cores is taken.

``solvers.share_wafers`` then searches every cut and every wafer's regions at once in its share of
the time (with bounds per segment where layers repeat: Llama-3.1-70B over four wafers is proven
optimal in about 20 s). Its optimum is the plan: the cut, and on each wafer its part of the optimum
(the restriction of an optimum over every cut to one wafer is that wafer's optimum), the bound its
value. It starts from a plan in hand, the faster of the relaxed optimum's regions packed in order
onto the wafers (where they fit ``count`` of them) and, under ``--wafers N``, a plan on the fewest
wafers whose cut fits the kernels' regions (``fitting_cuts``; that count of links is also in the
bound): those wafers' joint regions packed, or each wafer's own (fewer links: ``--wafers N`` plans over
at most N wafers, and a search out of time is not to fall back on a slower cut than those wafers'),
then on one wafer more and so on while the best is far from the bound (those wafers may hold the
kernels only with their SRAM full: ``_fewest_first``).
When time runs out first, the bound it proved raises ours and the plan is the best in hand; each
wafer's regions are then searched again on the wafer's own kernels (a proof per wafer, in the small
share of the time the forms leave, ``FINISH_SHARE``; with none left, only the bound of the wafer's
fastest partition), its part of that plan kept where the search finds none as fast. With no plan in
hand, the cut whose wafers' bounds and links add up least (the exact search's proof names it), where
every wafer of it fits, else the cut wished before (the relaxed regions packed, or even resident bytes)
moved where every wafer fits, and each wafer's own regions on it, searched in what remains of the
form's time, are the plan in hand. ``auto``: the fewest wafers whose kernels'
smallest op models fit. Every kernel on its own rectangle, a wafer whose rectangles do not pack is
cut over one wafer more (``retry``, up to the request's count). With regions, where that is one wafer,
the plan is that wafer's and is decided as ``--wafers 1`` decides it (``_on_one_wafer``): no search
over cuts, every kernel on its own rectangle weighed before the regions with requests in flight.

A mixture-of-experts model's layers (with regions) may each be kept whole or split into two
consecutive shards (``opmodels.experts``), so that a cut may fall inside a layer and each wafer hold
half its experts. The exact search chooses each layer's form (``problem.expert_pairs``: the table with
every layer split, a run holding both shards of a layer charged as the whole layer); beside it the
layers all kept whole are cut and proven as above (that search judges the SRAM exactly where the
paired one is conservative), each in its share of the time, and the better is kept (``_Cut.rank``:
the fewest wafers first under ``auto``, then the least proven time). Where the paired search cannot
run (its programs too large), every layer split is the second form. The decision records the shard
count and the layers split, and its reason what each form gave."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from wsealloc.budget import Deadline, run_stoppable
from wsealloc.errors import InfeasibleError, Interrupted, NoLayoutError, SolverError
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.experts import moe_layers, shard_counts, shard_name, split_experts
from wsealloc.opmodels.regions import region_table
from wsealloc.problem import build_problem
from wsealloc.problem.expert_pairs import Paired, paired_problem
from wsealloc.problem.objective import ObjectiveKind, objective_named, paced
from wsealloc.problem.sharing import INF, SharingProblem, build_sharing_problem, candidate_shapes
from wsealloc.problem.stages import StageProblem, build_stage_problem, cut_bytes, link_params, transfer_cycles
from wsealloc.solvers import Status
from wsealloc.solvers.share import SharingResult, fitting_cap, least_slowest, slowest_region, unbudgeted
from wsealloc.solvers.share import solve as share_solver
from wsealloc.solvers.share_wafers import WaferSharing, fitting_cuts, plan_time
from wsealloc.solvers.share_wafers import solve as wafer_sharing
from wsealloc.solvers.stages import StagePartition
from wsealloc.solvers.stages import solve as stage_solver
from wsealloc.strategy.base import Part, Prepared, Progress, Strategy, quiet
from wsealloc.strategy.decision import Decision, Index, RegionsDecision
from wsealloc.strategy.modes import Family, ShareMode, Side
from wsealloc.strategy.pipeline import stage_infeasibility, wafer_part
from wsealloc.strategy.regions import (
    EXPERT_SHARDS,
    FAMILY_BUDGET,
    Own,
    RegionsLater,
    SharedRegions,
    fewest_by_sram,
    own_reason,
    own_rectangles,
    regions_lines,
    share_cores,
)

if TYPE_CHECKING:
    from wsealloc.plan.schema import Plan
    from wsealloc.request import SolveRequest

# expert parallelism (``opmodels.experts``): the shard counts tried beside the layers kept whole
# (``strategy.regions.EXPERT_SHARDS``)
MOST_SHARDS = max(EXPERT_SHARDS)
RELAXED_SHARE = 0.3  # of the run's time: the search over every wafer's cores at once (the proof of the cut)
EXACT_SHARE = 0.75  # of what remains: the exact search over every cut and every wafer's regions (its optimum leaves little)
# of the run's time: each wafer's regions (its own search where the cut's found none as fast: a proof per
# wafer) and the plan; the forms' searches leave it (Qwen3-235B's 13 wafers took 3-5 s more after a 20 s
# search had spent it all). Small: where time runs out every form has a plan in hand, kept as it is
FINISH_SHARE = 0.08
# of that: the wafers' own searches; the wafers' tables of regions and their plans take the rest (about
# 0.7 ms a kernel here, 1.2 s for Qwen3-235B's 1,602)
FINISH_SEARCH_SHARE = 0.4
APART_LEAST_S = 0.3  # seconds a wafer's own search needs to find more than its fewest cores (Qwen3-235B's: 0.14 s at least)
# of the forms' time, the MoE layers kept whole where other forms follow: that form is tried first and
# its plan is the one in hand when the others find none in time (none did below 60 s on Qwen3-235B),
# so its wafers' own regions get time to be searched (with half of it, at 15 s, they took their fewest
# cores: 1,869,235 cycles against 1,523,713 at 10 s)
KEPT_SHARE = 0.65
# under --wafers N, a plan in hand this close to the bound over at most N wafers is not sought on more
# wafers than the fewest that fit (``_fewest_first``; those are always tried: they cross the fewest links)
FEWER_SLACK = 0.02


class WafersDecision(Decision):
    """The cut over wafers (``cuts``: kernel indices, wafer w holds [cuts[w], cuts[w+1])) and the
    regions of every wafer (``runs`` in kernel indices, none crossing a cut; empty with ``--share
    none``: every kernel on its own rectangle), each on its fixed grid (``grids``) or on one of
    ``family``'s the allocation chose."""

    strategy: Literal["wafers"] = "wafers"
    wafers: Annotated[int, Field(strict=True, ge=1, le=2**16)]
    cuts: tuple[Index, ...]
    family: Family | None = None
    runs: tuple[tuple[Index, Index], ...] = ()
    grids: tuple[tuple[Side, Side], ...] | None = None
    # each MoE layer's experts split into this many consecutive kernels (``opmodels.experts``: the cuts
    # and runs index the split table); None: the layers kept whole
    expert_shards: Annotated[int, Field(strict=True, ge=2, le=2**10)] | None = None
    # ... of these MoE layers only (kernel indices of the model's table; the search kept the others
    # whole); None: every MoE layer
    split_layers: tuple[Index, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> WafersDecision:
        ordered = all(a < b for a, b in zip(self.cuts, self.cuts[1:], strict=False))
        if len(self.cuts) != self.wafers + 1 or not self.cuts or self.cuts[0] != 0 or not ordered:
            raise ValueError(f"decision.cuts {list(self.cuts)}: expected {self.wafers + 1} increasing kernel indices from 0")
        if self.grids is not None and len(self.grids) != len(self.runs):
            raise ValueError(f"decision.grids has {len(self.grids)} grids for {len(self.runs)} runs")
        if self.runs:
            starts = {a for a, _ in self.runs}
            at = 0
            for first, end in self.runs:
                if first != at or end <= first:
                    raise ValueError(f"decision.runs: [{first}, {end}) does not follow [.., {at}) (runs are consecutive)")
                at = end
            if at != self.cuts[-1] or any(c not in starts for c in self.cuts[:-1]):
                raise ValueError("decision.runs: a region crosses a cut between wafers (each region lies on one wafer)")
        return self

    def stage_cuts(self, units: int) -> tuple[int, ...]:
        if not self.runs:
            return self.cuts
        start = {a: i for i, (a, _) in enumerate(self.runs)}
        return (*(start[c] for c in self.cuts[:-1]), len(self.runs))


@dataclass(frozen=True)
class _Cut:
    """One form of the table (``shards``: 0, the MoE layers kept whole) cut over wafers: the cut, the
    bound over every cut (the optimum when ``exact`` is the exact search's), the sharing problem it
    searched (regions) and the seconds the searches took."""

    costs: CostTable
    shards: int
    layers: tuple[int, ...] | None  # the layers the search split (indices of the model's table); None: all or none
    cuts: tuple[int, ...]
    bound: int
    exact: WaferSharing | None
    sharing: SharingProblem | None
    wall_s: float
    chosen: bool = False  # each layer's form chosen by the search (``problem.expert_pairs``)
    # the best plan over the cut found but not proven least (the exact search ran out of time): each
    # wafer keeps its part where the wafer's own search finds none as fast; None with ``exact``
    found: WaferSharing | None = None
    # every kernel on its own rectangle: each wafer's part, proven while the cut was chosen (empty: none yet)
    parts: tuple[Part, ...] = ()
    # seconds the wafers' own regions took as the plan in hand (``_apart``: in what was left of the form's
    # share, as long as it allowed): a form's least time is the rest of its time
    apart_s: float = 0.0
    # each wafer's own search where those regions are the plan in hand (``found``): their proofs
    own: tuple[SharingResult, ...] = ()
    # the fewest wafers any plan of this form takes, and the cheapest transfer a cut between two costs
    # (with requests in flight a transfer is a stage they take turns at: ``_finish``'s bound)
    fewest: int = 1
    cheapest: int = 0

    @property
    def planned(self) -> bool:
        """Whether a plan over the cut is in hand (the exact optimum, one found otherwise, or each wafer's
        part proven while the cut was chosen)."""
        return self.exact is not None or self.found is not None or bool(self.parts)

    @property
    def form(self) -> str:
        if self.chosen:
            split = f"{len(self.layers)} layer(s) split into {self.shards} shards" if self.layers else "none split"
            return f"each layer kept whole or split by the search ({split})"
        return f"experts split into {self.shards} shards" if self.shards else "experts kept whole"

    def rank(self, fewest_first: bool, requests: int = 1) -> tuple[int, int, int]:
        """The order of the forms: the fewest wafers first under ``--wafers auto``, then a proven optimum
        before a bound, then the least time of a token per request (the first form on a tie: the layers
        kept whole)."""
        return (len(self.cuts) - 1 if fewest_first else 0, 0 if self.exact is not None else 1, self.paced(requests))

    def paced(self, requests: int, fewest: int | None = None) -> int:
        """The bound of each request's token with ``requests`` in flight (``objective.paced``): they take
        turns at the least slowest region any plan of this form has (a split shard's is less than its
        whole layer's), and at a cut's transfer where every plan crosses one (the cheapest). ``fewest``:
        the bound of the plans on at least that many wafers (None: the fewest any plan takes)."""
        if requests <= 1:
            return self.bound
        # (a paired form's charges only add to its kernels' latencies)
        slowest = least_slowest(self.sharing) if self.sharing is not None else 0
        crossing = self.cheapest if (fewest or self.fewest) > 1 else 0
        return max(self.bound, requests * max(slowest if slowest < INF else 0, crossing))

    def words(self) -> str:
        proof = "optimum" if self.exact is not None else "at least"
        return f"{self.form}: {len(self.cuts) - 1} wafers, {proof} {self.bound:,} cycles"


def _forms_reason(chosen: _Cut, forms: list[_Cut]) -> str:
    """The decision's reason when the MoE layers had two forms: which was taken, beside what each gave."""
    if len(forms) < 2:
        return ""
    return f"{chosen.form} ({'; '.join(f.words() for f in forms)})"


def _untried(shards: int) -> str:
    """The decision's words for a form of the MoE layers left untried for lack of time."""
    return (
        f"the experts split into {shards} shards were not tried in the time left (the bound is over the forms tried): "
        "they may take fewer wafers or be faster, give a longer --time-limit to try them"
    )


def _paired(costs: CostTable, table: CostTable, family: Family) -> Paired:
    """The paired problem of ``table`` (``costs`` with every MoE layer in two shards) on ``family``'s
    grids: each layer kept or split by the search (``problem.expert_pairs``)."""
    whole = build_sharing_problem(costs, family=family)
    split = build_sharing_problem(table, family=family)
    index = {kc.kernel.name: i for i, kc in enumerate(table.kernels)}
    pairs = [(index[shard_name(costs.kernels[w].kernel.name, 0)], w) for w in moe_layers(costs)]
    return paired_problem(split, whole, pairs)


def _chosen(cut: _Cut, paired: Paired, model: CostTable, family: Family) -> _Cut | None:
    """The paired form's optimum as the table it stands for: the layers the search kept whole one
    kernel again, the others split (``split_layers``), the cut and runs in that table's kernels, its
    time checked against the search's. None when the search did not prove an optimum."""
    exact = cut.exact
    if exact is None or exact.latency is None or not exact.runs:
        return None
    kept = paired.kept(exact.runs, exact.grids)
    layers = tuple(int(w) for w in paired.layer[~kept])
    table = split_experts(model, 2, layers) if layers else model
    at = paired.positions(kept)
    cuts = tuple(int(at[c]) for c in exact.cuts)
    runs = tuple((int(at[i]), int(at[j])) for i, j in exact.runs)
    sp = build_sharing_problem(table, family=family)
    sp = replace(sp, total_cores=int(sp.total_cores * FAMILY_BUDGET[family]))
    value = plan_time(sp, link_cycles(table), cuts, runs, exact.grids)
    if value != exact.latency:
        raise SolverError(f"internal: the paired search's optimum {exact.latency:,} is {value:,} once its layers are lowered")
    lowered = replace(exact, cuts=cuts, runs=runs)
    return _Cut(table, 2 if layers else 0, layers or None, cuts, cut.bound, lowered, sp, cut.wall_s, chosen=True)


def _fewest_fitting(sp: SharingProblem, family: Family, wafer_cores: int) -> int | None:
    """The fewest wafers some cut into wafers that each fit their kernels' regions takes (None: no
    cut fits; each wafer as far as its fewest-core partition reaches, ``fitting_cuts``): no plan
    takes fewer."""
    one = replace(sp, total_cores=int(wafer_cores * FAMILY_BUDGET[family]))
    reach = fitting_cuts(one, sp.n_kernels, (0, sp.n_kernels))
    return len(reach) - 1 if reach is not None else None


def _cuts_to_try(costs: CostTable, sproblem: StageProblem, count: int) -> Iterator[tuple[int, ...]]:
    """Cuts of the kernels, each on its own rectangle, into ``count`` wafers, in the order tried: even
    resident bytes, then (a wafer of it past its cores: the tiny decode at 40 requests and 4,500 B of
    SRAM, 464 cores on a wafer of 384) the min-max stage cut, which fits every wafer (made only then)."""
    even = resident_cut(costs, count)
    if even:
        yield tuple(even)
    least = stage_solver(sproblem, count).cuts
    if least:
        yield tuple(least)


def _fits(plan: WaferSharing | None, wafers: int) -> bool:
    """Whether ``plan`` is a plan of known time on at most ``wafers`` wafers."""
    return plan is not None and plan.latency is not None and len(plan.cuts) - 1 <= wafers


def _time(plan: WaferSharing) -> int:
    """A plan's time (a plan without one, found nowhere here, never wins)."""
    return plan.latency if plan.latency is not None else np.iinfo(np.int64).max


def _packed(sp: SharingProblem, found: SharingResult, links: np.ndarray, wafer: int) -> WaferSharing | None:
    """A sharing search's regions (``found``, on several wafers' cores as one budget) packed onto wafers
    in order, each region starting the next wafer where the current one's ``wafer`` cores would not
    hold it, as a plan over the wafers (its cut may take more wafers than the budget's). Its time counts
    the links; None without runs or where the runs pay charges that search did not see (a paired
    problem: its cut is still the caller's wish, the time is not known)."""
    if not found.runs:
        return None
    charged = sp.cores()
    cuts = [0]
    held = 0
    for (first, _), g in zip(found.runs, found.grids, strict=True):
        need = int(charged[g])
        if held and held + need > wafer:  # this region starts the next wafer
            cuts.append(first)
            held = 0
        held += need
    cuts.append(sp.n_kernels)
    cut = tuple(cuts)
    value = None if sp.charged else plan_time(sp, links, cut, found.runs, found.grids)
    return WaferSharing(Status.FEASIBLE, cut, found.runs, found.grids, value, None, found.wall_s, "relaxed regions packed")


def _segment_key(sp: SharingProblem) -> tuple[object, ...]:
    """What a wafer's own search depends on (its kernels' numbers; the grids, the SRAM and the charges'
    kinds are the whole problem's): wafers with equal keys have equal searches. A model's repeated
    layers make most wafers of a cut alike (Qwen3-235B's 14 wafers hold 5 distinct problems)."""
    arrays = (sp.latency, sp.resident, sp.buffers, sp.ends, sp.starts, sp.unbroken)
    return (sp.total_cores, *(None if x is None else (x.shape, x.tobytes()) for x in arrays))


def _own_regions(one: SharingProblem, cut: tuple[int, ...], deadline: Deadline, held: bool) -> list[SharingResult] | None:
    """Each wafer of ``cut`` its own regions (``one``: the problem on one wafer's cores), each distinct
    wafer searched once in an equal share of what remains (the others take its result, at no time).
    ``held``: every wafer's part of a plan is in hand, so a wafer with no time left only proves the
    bound of its fastest partition (``share.unbudgeted``: one program, a third of a search's least
    work; searches run after their time had passed added 2 s to a 20 s solve). None: a signal."""
    segments = [one.segment(a, b) for a, b in zip(cut[:-1], cut[1:], strict=True)]
    keys = [_segment_key(sp) for sp in segments]
    distinct = list(dict.fromkeys(keys))
    found: dict[tuple[object, ...], SharingResult] = {}
    for i, key in enumerate(distinct):
        sp = segments[keys.index(key)]
        share = deadline.share(1.0 / (len(distinct) - i))
        quick = held and share.expired() and not deadline.stopped
        result = run_stoppable(partial(unbudgeted, sp) if quick else partial(share_solver, sp, share), deadline)
        if result is None or deadline.stopped:  # (a stopped search returns what it has, maybe nothing)
            return None
        found[key] = result
    first = {key: keys.index(key) for key in distinct}
    return [found[key] if first[key] == w else replace(found[key], wall_s=0.0) for w, key in enumerate(keys)]


def _paced_value(
    one: SharingProblem, cut: tuple[int, ...], parts: Sequence[SharingResult], links: np.ndarray, requests: int
) -> tuple[int, int]:
    """Each request's token time (``objective.paced``) of the wafers' regions ``parts`` on ``cut`` and
    one pass: their paths and the links a token crosses, or ``requests`` turns of the slowest region or
    link transfer."""
    inner = [int(links[c]) for c in cut[1:-1]]
    path = sum(int(p.latency or 0) for p in parts) + sum(inner)
    slowest = max(
        slowest_region(replace(one.segment(a, b), cap=p.cap), p.runs, p.grids)
        for (a, b), p in zip(zip(cut[:-1], cut[1:], strict=True), parts, strict=True)
    )
    return paced(path, max(slowest, *inner), requests), path


def _paced_parts(
    one: SharingProblem,
    cut: tuple[int, ...],
    parts: list[SharingResult],
    links: np.ndarray,
    requests: int,
    deadline: Deadline,
    say: Progress,
) -> list[SharingResult]:
    """The wafers' regions on ``cut`` for ``requests`` in flight: where N turns of the slowest region take
    longer than a pass, every wafer's regions searched again within one cap, ``ceil(pass / N)`` (at
    least the least slowest region any plan has, and the least cap each wafer's cores hold regions
    within: ``share.fitting_cap``), kept where each request's token is faster so. The cut
    and each wafer's proof stay the path's (the search over cuts minimizes the pass): a capped part keeps
    the path bound of its wafer's part (a bound on any plan of its kernels) and is not claimed optimal.
    Llama-3.1-70B on five wafers at 32 requests took 32 turns of a 41,500-cycle region, a pass 1.06 M."""
    if one.charged or any(p.bound is None or not p.runs for p in parts):
        return parts
    before, path = _paced_value(one, cut, parts, links, requests)
    if before <= path:  # the pass binds: nothing to gain
        return parts
    # the cap: a pass's share of each request, at least what every wafer's cores hold regions within
    # (each wafer's least such cap, one fewest-core program a probe)
    cap = max(least_slowest(one), -(-path // requests))
    for a, b in zip(cut[:-1], cut[1:], strict=True):
        if deadline.expired():
            return parts
        fits = fitting_cap(one.segment(a, b), cap, deadline)
        if fits is None:
            return parts
        cap = max(cap, fits)
    found = _own_regions(replace(one, cap=cap), cut, deadline.share(FINISH_SEARCH_SHARE), held=False)
    if found is None or any(not p.runs or p.latency is None for p in found):
        return parts
    capped = [replace(c, status=Status.FEASIBLE, bound=p.bound, cap=cap) for c, p in zip(found, parts, strict=True)]
    after, _ = _paced_value(one, cut, capped, links, requests)
    if after >= before:
        return parts
    say(f"wafers: every wafer's regions within {cap:,} cycles for {requests} requests: {before:,} -> {after:,} a token")
    return capped


def _distinct(one: SharingProblem, cut: tuple[int, ...]) -> int:
    """How many distinct wafers ``cut`` holds (``_segment_key``)."""
    return len({_segment_key(one.segment(a, b)) for a, b in zip(cut[:-1], cut[1:], strict=True)})


def _apart(
    one: SharingProblem, cut: tuple[int, ...], links: np.ndarray, deadline: Deadline
) -> tuple[WaferSharing, tuple[SharingResult, ...]] | None:
    """Each wafer of ``cut`` its own regions (``_own_regions``) as a plan over the wafers with the links
    in its time, and each wafer's search (its proof kept beside the plan); None: a wafer's search found
    none, or a signal stopped it."""
    own = _own_regions(one, cut, deadline, held=False)
    if own is None or any(not found.runs for found in own):
        return None
    runs = tuple((a + i, a + j) for a, found in zip(cut, own, strict=False) for i, j in found.runs)
    grids = tuple(g for found in own for g in found.grids)
    value = plan_time(one, links, cut, runs, grids)
    return WaferSharing(Status.FEASIBLE, cut, runs, grids, value, None, 0.0, "each wafer's own regions"), tuple(own)


def _faster(found: SharingResult, fallback: SharingResult, say: Progress) -> SharingResult:
    """``found``, or ``fallback``'s runs where they are faster, with the better of the two proofs (each a
    bound of the same table, whatever runs are kept: a search out of time proves less than the one that
    found the plan in hand)."""
    proof = max(found.bound or 0, fallback.bound or 0)
    if fallback.latency is None or (found.runs and found.latency is not None and found.latency <= fallback.latency):
        if found.latency is None or proof <= (found.bound or 0):
            return found
        keep = found
    else:
        here = f"{found.latency:,} cycles" if found.latency is not None and found.runs else "no plan"
        say(f"sharing: {here} found here, {fallback.latency:,} {fallback.message}")
        keep = fallback
    assert keep.latency is not None
    status = Status.OPTIMAL if proof >= keep.latency else Status.FEASIBLE
    return replace(keep, status=status, bound=min(proof, keep.latency), wall_s=found.wall_s)


def _wafer_part(plan: WaferSharing, sharing: SharingProblem, w: int, status: Status, whose: str) -> SharingResult:
    """Wafer w's part of a plan over several wafers as the result of a search on its own kernels."""
    a = plan.cuts[w]
    runs, grids = plan.wafer_runs(w)
    spent = sum(int(sharing.latency[a + i : a + j, g].sum()) for (i, j), g in zip(runs, grids, strict=True))
    used = sum(int(sharing.cores()[g]) for g in grids)
    return SharingResult(status, runs, grids, spent, used, spent if status is Status.OPTIMAL else None, 0.0, whose)


def link_cycles(costs: CostTable) -> np.ndarray:
    """[n + 1] cycles one token's data takes over the link at each cut position (0 at both ends)."""
    return transfer_cycles(cut_bytes(costs), *link_params(costs.arch))


def fewest_wafers(costs: CostTable, family: Family | None) -> int | None:
    """A lower bound on the wafers any plan of one token's time on ``costs`` takes, on one wafer
    (``strategy.regions``) or over several (this strategy), found without a search (a second or so for
    Llama-3.1-70B); None when no number of wafers holds it. Callers that plan many solves (``bench``:
    the serving frontier, prefill and decode pools) skip the wafer counts below it: no plan there.

    The most of: the wafers whose SRAM the weights and every request's caches fill
    (``regions.fewest_by_sram``: ``state_copies`` of each cache); with
    regions (``family``), the fewest wafers a cut into wafers that each fit their kernels' fewest-core
    regions takes (``_fewest_fitting``, on the budget one wafer's regions search has: that search
    finds no partition where the fewest-core one does not fit), except where MoE layers may be split
    into shards (``decide`` tries those forms: a cut inside a layer may take fewer wafers, so only the
    SRAM counts); without regions, the fewest wafers the kernels' smallest op models fit (the stage
    check ``_cut`` refuses fewer wafers with)."""
    fewest = fewest_by_sram(costs)
    if family is None:
        least = stage_solver(build_stage_problem(costs), None)
        if least.status is not Status.OPTIMAL or least.objective is None:
            return None
        return max(fewest, least.wafers)
    if any(n in EXPERT_SHARDS for n in shard_counts(costs, MOST_SHARDS)):
        return fewest
    fit = _fewest_fitting(build_sharing_problem(costs, family=family), family, costs.total_cores)
    return None if fit is None else max(fewest, fit)


@dataclass(frozen=True)
class _OneWafer:
    """``Prepared.state`` of a plan decided as one wafer's (``LatencyOverWafers._on_one_wafer``): the
    regions strategy's own decision, whose ``retry`` it continues (own rectangles solved alone that
    do not pack: the wafer's regions)."""

    regions: Prepared


def _as_one_wafer(prepared: Prepared, t0: float) -> Prepared:
    """A one-wafer decision of ``regions.SharedRegions`` (its rivals too) as a cut over one wafer: the
    same runs, grids, family and expert shards, the plan merged as every plan over wafers is (its part
    valued paced as the whole plan, ``driver.solve_prepared``), the bound the part's own (every plan on
    that wafer takes at least it). ``t0``: when the decision began (the partition's time is what its
    parts' proofs leave)."""
    decision = prepared.decision
    assert isinstance(decision, RegionsDecision)
    table = prepared.base  # (the model's table, or the one the MoE layers' split made: the runs index it)
    cuts = (0, len(table.kernels))
    wafers = WafersDecision(
        wafers=1,
        cuts=cuts,
        family=decision.family,
        runs=decision.runs,
        grids=decision.grids,
        expert_shards=decision.expert_shards,
        reason=decision.reason,
    )
    (part,) = prepared.parts
    bound = part.bound.value if part.bound is not None else None
    proofs = sum(p.bound.wall_s for p in prepared.parts if p.bound is not None)
    partition = StagePartition(Status.OPTIMAL, 1, cuts, bound, max(0.0, time.perf_counter() - t0 - proofs))
    waiting = prepared.state if isinstance(prepared.state, (Prepared, RegionsLater)) else None
    return Prepared(
        wafers,
        prepared.parts,
        table,
        table,
        partition,
        bound,
        state=_OneWafer(prepared) if waiting is not None else None,
        rivals=tuple(_as_one_wafer(r, time.perf_counter()) for r in prepared.rivals),
    )


def resident_cut(costs: CostTable, count: int) -> tuple[int, ...] | None:
    """The cut giving every wafer an even share of the kernels' resident bytes (weights and KV caches):
    a token's time on a wafer grows steeply as its SRAM fills (fewer, fuller regions), so a cut that
    balances the SRAM balances the wafers' paths. None when a wafer of it would not fit its kernels."""
    held = np.array([kc.work.weight_bytes + int(getattr(kc.work, "state_bytes", 0)) for kc in costs.kernels], dtype=float)
    total = np.concatenate(([0.0], np.cumsum(held)))
    inner = [int(np.searchsorted(total, total[-1] * k / count)) for k in range(1, count)]
    cuts = (0, *sorted(set(inner) - {0, len(held)}), len(held))
    capacity = costs.arch.usable_sram_bytes * costs.total_cores
    if len(cuts) != count + 1 or any(total[b] - total[a] > capacity for a, b in zip(cuts[:-1], cuts[1:], strict=True)):
        return None
    return cuts


class LatencyOverWafers(Strategy):
    """See the module docstring."""

    name = "wafers"
    decision_type = WafersDecision

    def applies(self, request: SolveRequest) -> bool:
        return request.objective is ObjectiveKind.LATENCY and request.wafers != 1

    def refuse(self, request: SolveRequest) -> None:
        if request.sharing.mode is ShareMode.GRID:
            raise ValueError("--grid fixes regions on one wafer: drop --wafers, or use --share auto to choose them per wafer")
        if request.cost.train is not None:
            raise ValueError("--train plans training samples per second in the layer pipeline: use --objective throughput")
        if request.constraints is not None and request.constraints.rules:
            raise ValueError(
                "--constraints with --objective latency over several wafers are not planned yet: plan one wafer, "
                "or the throughput pipeline over wafers"
            )

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        family = request.sharing.family if request.sharing.mode is ShareMode.AUTO else None
        one = self._on_one_wafer(costs, request, family, deadline, say)
        if one is not None:
            return one
        counts = [n for n in shard_counts(costs, MOST_SHARDS) if n in EXPERT_SHARDS] if family is not None else []
        # each form of the MoE layers in its share of the time: kept whole, then split into shards (a
        # form that fits no wafer count the request allows is left out; none fits: the kept form's error)
        forms: list[_Cut] = []
        refused: InfeasibleError | None = None
        t0 = time.perf_counter()
        # the forms' searches leave each wafer's regions and the plan their share
        search = deadline.share(1.0 - FINISH_SHARE)
        try:
            forms.append(self._cut(costs, request, family, 0, search.share(1.0 if not counts else KEPT_SHARE), say))
        except InfeasibleError as exc:
            if not counts:
                raise
            refused = exc
        # what a form takes (its problems, its searches): the first form's time but its wafers' own
        # regions, which only fill the rest of its share (with them counted, the first form always took
        # about all of its share and no later form was tried)
        first_s = time.perf_counter() - t0 - (forms[0].apart_s if forms else 0.0)
        skipped = ""  # the decision's reason says what was not tried (a user's pass saw 14 wafers at 30 s, 13 at 120 s)
        for i, shards in enumerate(counts):
            assert family is not None  # (the forms are tried only with regions)
            if deadline.stopped and forms:  # a signal: the forms in hand decide (the best plan so far)
                break
            if forms and search.remaining() < first_s:
                # building a form's problems takes about as long as the first form took, whatever its share
                # of the time (Qwen3-235B: 5 s each; a 10 s limit took 27 s): with less time left than that,
                # the forms in hand decide
                say(f"wafers: {search.remaining():.1f} s left; the MoE layers split into {shards} shards are not tried")
                skipped = _untried(shards)
                break
            if forms and not forms[0].planned:
                # the first form holds no plan yet: the time left is its wafers' own searches' (a second form
                # that found none either left them a few hundredths of a second each, and they took their
                # fewest cores: Qwen3-235B at 10 s, 1,869,235 cycles against 1,531,777)
                say(f"wafers: no plan in hand yet; the MoE layers split into {shards} shards are not tried")
                skipped = _untried(shards)
                break
            forms += self._split(costs, request, family, shards, search.share(1.0 / (len(counts) - i)), say)
        if not forms:
            assert refused is not None
            raise refused
        requests = request.requests
        best = min(forms, key=lambda c: c.rank(request.wafer_count is None, requests))
        least = None
        if len(forms) > 1:
            say(f"wafers: {best.form} chosen ({'; '.join(c.words() for c in forms)})")
            # a plan of another form may be faster than the chosen form's bound: the plan's bound is the
            # least over the forms tried that compete with it (under auto, those on as few wafers), each
            # paced by its own least slowest region
            rivals = [c for c in forms if request.wafer_count is not None or len(c.cuts) == len(best.cuts)]
            least = min(c.paced(requests) for c in rivals)
            best = replace(best, bound=min(c.bound for c in rivals))
        return self._finish(best, request, family, forms, deadline, say, t0, skipped, least)

    def _on_one_wafer(
        self, costs: CostTable, request: SolveRequest, family: Family | None, deadline: Deadline, say: Progress
    ) -> Prepared | None:
        """``--wafers auto --share auto`` where every kernel's smallest op model fits one wafer: auto takes
        the fewest wafers, and a plan with regions is never cut over more (``retry`` searches the wafer's
        regions), so the plan is one wafer's and is decided as ``--wafers 1`` decides it
        (``regions.SharedRegions``: with requests in flight every kernel on its own rectangle weighed
        first, the regions searched only where within its reach; the MoE layers split as a rival),
        recorded as a cut over one wafer (``_as_one_wafer``). Its retry is the regions' where own
        rectangles solved alone do not pack; regions that do not pack are not chosen again among another
        family, as ``--wafers 1`` would (the decision keeps the family asked for, as before). Through the
        search over every cut the 8B decode at 64 requests on wse3 spent 24 s of a 60 s solve on the
        regions (an unpaced search over the cut, then the wafer's paced one) and stated the regions'
        unpaced path, 321,517 cycles, as its bound (a 47.9% gap) where the wafer's own proof gives
        556,926. None: not so (``--wafers N``; own rectangles, which ``retry`` may cut over more wafers;
        a model that needs more)."""
        if family is None or request.wafer_count is not None:
            return None
        t0 = time.perf_counter()
        least = stage_solver(build_stage_problem(costs), None)
        # (and the weights and caches within one wafer's SRAM, which the regions' search needs: a review)
        if least.status is not Status.OPTIMAL or least.wafers != 1 or fewest_by_sram(costs) > 1:
            return None
        say("wafers: every kernel's smallest op model fits one wafer; --wafers auto plans it as --wafers 1 does")
        return _as_one_wafer(SharedRegions().decide(costs, request, deadline, say), t0)

    def _split(
        self, costs: CostTable, request: SolveRequest, family: Family, shards: int, deadline: Deadline, say: Progress
    ) -> list[_Cut]:
        """The MoE layers split into ``shards`` and cut over wafers (none: that form fits no wafer count
        the request allows). Two shards: each layer kept or split as the exact search chooses
        (``problem.expert_pairs``), where its programs allow; else, or with requests in flight, every
        layer split too. The search splits a layer only where a cut falls, keeping it whole within a
        wafer; every layer split runs both shards as regions of their own, whose slowest is less than a
        whole layer's, and with N requests in flight N turns of it may be faster (a review: a tiny MoE
        at 8 requests, 9,176 cycles a token kept whole, 7,784 with every layer split)."""
        table = split_experts(costs, shards)
        forms: list[_Cut] = []
        if shards == 2:
            say("wafers: each MoE layer kept whole or split into 2 shards, as the search chooses (expert parallelism)")
            t0 = time.perf_counter()
            paired = _paired(costs, table, family)
            try:  # (its SRAM judged more strictly than every layer split's: that form may still fit)
                cut = self._cut(table, request, family, shards, deadline.share(0.5), say, sharing=paired.problem)
            except InfeasibleError:
                cut = None
            chosen = _chosen(cut, paired, costs, family) if cut is not None and cut.exact is not None else None
            forms += [chosen] if chosen is not None else []
            if chosen is not None and request.requests == 1:
                return forms
            if deadline.remaining() < time.perf_counter() - t0:
                # every layer split takes at least about as long, whatever its share (its relaxed search's
                # least work on Qwen3-235B: 3 s): with less time left, the forms in hand decide
                say(f"wafers: {deadline.remaining():.1f} s left; every MoE layer split into {shards} shards is not tried")
                return forms
        say(f"wafers: every MoE layer's experts split into {shards} shards (expert parallelism)")
        try:
            return [*forms, self._cut(table, request, family, shards, deadline, say)]
        except InfeasibleError:
            return forms  # the split form fits no better: the kept one stands

    def _cut(
        self,
        costs: CostTable,
        request: SolveRequest,
        family: Family | None,
        shards: int,
        deadline: Deadline,
        say: Progress,
        sharing: SharingProblem | None = None,
        retried: int | None = None,
    ) -> _Cut:
        """The cut over wafers of one form of the table and the bound over every cut, exact where the
        search over every cut and every wafer's regions ends in time (module docstring). ``sharing``:
        the table's sharing problem when it is not the table's own (the paired form's charges).
        ``retried``: every kernel on its own rectangle, the wafers to cut into after fewer did not
        pack (``retry``; the bound then counts every plan on at most that many wafers, or the request's)."""
        sproblem = build_stage_problem(costs)
        least = stage_solver(sproblem, None)  # the fewest wafers whose kernels' smallest op models fit
        if least.status is not Status.OPTIMAL or least.objective is None:
            raise InfeasibleError(stage_infeasibility(costs, sproblem, request.wafer_count, least.message))
        count = request.wafer_count or least.wafers
        # the fewest wafers a plan may take: each kernel on its own rectangle, their smallest op models;
        # with regions, kernels share cores, so the fewest wafers whose cuts each fit their kernels'
        # fewest-core regions (the tiny decode at 24 requests and 4,700 B of SRAM: 3 wafers of own
        # rectangles, 2 of regions, and ``--wafers 2`` was refused though ``auto`` planned 2)
        need = least.wafers
        # (and where regions need more wafers than own rectangles, ``--wafers N`` between the two counts is
        # refused so too: a review saw "the wafer has 384 cores" for --wafers 4 where regions need 5)
        regions_fit: tuple[int | None] | None = None  # (computed once: 0.7 s on Llama-3.1-70B)
        if family is not None and (count < need or request.wafer_count is not None):
            regions_fit = (_fewest_fitting(sharing or build_sharing_problem(costs, family=family), family, costs.total_cores),)
            need = regions_fit[0] if regions_fit[0] is not None else need
        if count < need:
            raise InfeasibleError(
                f"{costs.kgraph.ops.source}: its {'regions' if family is not None else 'kernels'} need at least {need} "
                f"{costs.arch.name} wafers, --wafers {count} is fewer; use --wafers auto to find the fewest"
            )
        links = link_cycles(costs)
        if retried is not None:
            count = max(count, retried)
        relaxed, relaxed_plan, price, count, fit = self._relaxed(costs, request, family, count, links, deadline, sharing)
        packed = relaxed_plan.cuts if relaxed_plan is not None else None
        # a plan on w <= count wafers takes at least the relaxed optimum on count wafers' cores (fewer
        # cores cannot be faster) and crosses w - 1 cuts, each at least the cheapest; w is at least the
        # wafers its kernels' smallest op models need (each kernel on its own rectangle) or, when kernels
        # share regions, the wafers whose SRAM its weights and caches fill
        fewest = least.wafers if family is None else fewest_by_sram(costs)
        cheapest = int(links[1:-1].min()) if len(links) > 2 else 0
        bound = relaxed + (fewest - 1) * cheapest
        if fit is not None and fit > fewest and not (sharing is not None and sharing.charged):
            fewest, bound = fit, relaxed + (fit - 1) * cheapest  # (auto: no cut into fewer wafers fits)
        if packed is not None and len(packed) - 1 <= count:
            cuts = packed
        else:  # the relaxed regions do not pack in order: even resident bytes per wafer (what fills its SRAM)
            cuts = resident_cut(costs, count) or stage_solver(sproblem, count).cuts
        exact = found = None
        parts: tuple[Part, ...] = ()
        apart_s = 0.0
        own: tuple[SharingResult, ...] = ()
        if family is None and retried is not None:
            cuts, parts = self._own_rectangles(costs, request, sproblem, links, (retried,), say)
        elif family is None:
            counts = (count, least.wafers) if least.wafers < count else (count,)
            cuts, parts = self._own_rectangles(costs, request, sproblem, links, counts, say)
        if family is not None:  # the cut and every wafer's regions at once, exactly where time allows
            # the relaxed regions packed in order onto at most ``count`` wafers are a plan already, and so
            # are the regions of the fewest wafers' cores that can hold the kernels: the exact search
            # starts from the faster and keeps it when time runs out (without them, a search that found
            # nothing fell back on a cut whose wafers' regions were chosen in what time was left, slower
            # than the plan on fewer wafers: Llama-3-8B decode on 2 wafers 367,091 against 363,253 on
            # one; now 361,738)
            known = relaxed_plan if _fits(relaxed_plan, count) else None
            base = sharing if sharing is not None else build_sharing_problem(costs, family=family)
            if request.wafer_count is not None and fewest < count and not base.charged:  # (auto: ``count`` is that fewest)
                fit = regions_fit[0] if regions_fit is not None else _fewest_fitting(base, family, costs.total_cores)
                if fit is not None and fit > fewest:  # no plan takes fewer wafers: it crosses as many links
                    fewest, bound = fit, max(bound, relaxed + (fit - 1) * cheapest)
                if fit is not None and fit < count:
                    share = deadline.share(RELAXED_SHARE)
                    known = self._fewest_first(costs, family, (fit, count), links, share, base, known, bound, say)
            exact, sharing = self._exact(costs, family, links, count, price, deadline, say, base, known)
            if exact is not None and exact.status is Status.OPTIMAL and exact.latency is not None:
                cuts, bound = exact.cuts, exact.latency
            else:
                bound = max(bound, exact.bound or 0) if exact is not None else bound
                found = exact if exact is not None and exact.latency is not None and exact.runs else known
                # the cut of the least bound, where every wafer of it fits (its bounds price the cores but do
                # not hold them: a cut on fewer wafers than fit would be filled wafer by wafer)
                wish = exact.wish if exact is not None and found is None else ()
                wish = wish if wish and fitting_cuts(sharing, count, wish) == wish else ()
                if found is not None:
                    cuts = found.cuts
                elif wish:
                    cuts = wish
                elif packed is None or len(packed) - 1 > count:  # the wish (even bytes) moved where every wafer fits
                    cuts = fitting_cuts(sharing, count, tuple(cuts)) or cuts
                if found is None and not sharing.charged and deadline.remaining() >= APART_LEAST_S * _distinct(sharing, cuts):
                    # no plan in hand: each wafer's own regions on that cut, in what remains of this form's
                    # time, are one (a form whose plan was left to the wafers' searches after every form had
                    # spent its time got a tenth of a second a wafer: Qwen3-235B at 15 s, 1,869,235 cycles
                    # against 1,536,420 at 10 s); with less time than a search needs, their fewest cores
                    # (as slow) would be thrown away: the finish searches them
                    t_apart = time.perf_counter()
                    apart = _apart(sharing, tuple(cuts), links, deadline)
                    apart_s = time.perf_counter() - t_apart
                    found, own = apart if apart is not None else (None, ())
                exact = None
        how = (
            "the exact search's optimum"
            if exact is not None
            else f"at least {relaxed:,} on all {count} wafers' cores and {fewest - 1} link(s) of {cheapest:,}"
            + (f"; a plan of {found.latency:,} in hand" if found is not None and found.latency is not None else "")
        )
        say(f"wafers: {len(cuts) - 1} wafers, cuts {list(cuts[1:-1])}; bound {bound:,} cycles over every cut ({how})")
        searched = least.wall_s + (exact.wall_s if exact is not None else 0.0)
        return _Cut(
            costs,
            shards,
            None,
            tuple(cuts),
            bound,
            exact,
            sharing,
            searched,
            found=found,
            parts=parts,
            apart_s=apart_s,
            own=own,
            fewest=fewest,
            cheapest=cheapest,
        )

    def _own_rectangles(
        self,
        costs: CostTable,
        request: SolveRequest,
        sproblem: StageProblem,
        links: np.ndarray,
        counts: tuple[int, ...],
        say: Progress,
    ) -> tuple[tuple[int, ...], tuple[Part, ...]]:
        """Every kernel on its own rectangle (``--share none``): the cut into each of ``counts`` wafers
        (even resident bytes, else the min-max stage cut) with each wafer's proven bound, the cut whose
        bounds and links add up least taken (the first on a tie). Plans over at most N wafers: where the
        links cost more than the cores of more wafers gain, fewer wafers are faster (the tiny MLP: 194
        cycles on one wafer, 1,169 cut over two)."""
        objective = objective_named(request.objective)
        best: tuple[int, tuple[int, ...], tuple[Part, ...]] | None = None
        for count in counts:
            for cuts in _cuts_to_try(costs, sproblem, count):
                try:
                    parts = tuple(wafer_part(costs.subset(a, b), objective) for a, b in zip(cuts[:-1], cuts[1:], strict=True))
                    break
                except InfeasibleError:
                    continue
            else:
                continue
            proven = [p.bound.value if p.bound is not None and p.bound.value is not None else 0 for p in parts]
            value = sum(proven) + sum(int(links[c]) for c in cuts[1:-1])
            say(f"wafers: {len(cuts) - 1} wafer(s), each kernel on its own rectangle: at least {value:,} cycles")
            if best is None or value < best[0]:
                best = (value, tuple(cuts), parts)
        if best is None:  # (none fits: the first count's error, as before)
            cuts = resident_cut(costs, counts[0]) or stage_solver(sproblem, counts[0]).cuts
            return tuple(cuts), ()
        return best[1], best[2]

    def _finish(
        self,
        cut: _Cut,
        request: SolveRequest,
        family: Family | None,
        forms: list[_Cut],
        deadline: Deadline,
        say: Progress,
        t0: float,
        skipped: str = "",
        least: int | None = None,
    ) -> Prepared:
        """The parts of the chosen cut: each wafer's regions (its part of the exact optimum, or chosen on
        the wafer's own kernels), the decision and the bound over every cut. ``t0``: when the search
        began (the partition's wall time counts every form tried and the wafers' regions); ``skipped``:
        the forms not tried, for the decision's reason; ``least``: the least paced bound of the forms
        that compete with the chosen one (None: the chosen form's own)."""
        costs, cuts, exact, sharing = cut.costs, cut.cuts, cut.exact, cut.sharing
        objective = objective_named(request.objective)
        parts: list[Part] = []
        runs: list[tuple[int, int]] = []
        grids: list[tuple[int, int]] = []
        chosen: list[SharingResult] = []
        own_bound: int | None = None  # the one wafer's bound where own rectangles were weighed (``own_rectangles``)
        own_rects: Own | None = None  # and their part, where they allocate faster than the regions
        one_wafer: int | None = None  # the bound of every plan on one wafer, where the plan is one
        if exact is not None and sharing is not None:  # each wafer's part of the optimum over every cut is its optimum
            chosen = [_wafer_part(exact, sharing, w, Status.OPTIMAL, "the exact cut search's") for w in range(len(cuts) - 1)]
        elif sharing is not None:  # each wafer's own search (a proof per wafer), the plan in hand kept where faster
            own = _own_regions(sharing, tuple(cuts), deadline.share(FINISH_SEARCH_SHARE), held=cut.found is not None)
            held = []
            if cut.found is not None:
                found = cut.found
                held = list(cut.own) or [
                    _wafer_part(found, sharing, w, Status.FEASIBLE, "kept from the search over the wafers")
                    for w in range(len(cuts) - 1)
                ]
            if own is None and not held:
                raise Interrupted(f"interrupted while choosing regions for {request.model.label}; nothing was solved")
            if own is None:  # a signal during the wafers' own searches: the plan in hand, each part as found,
                # bounded by its kernels' least latencies on any grid (no time to prove more; the plan's
                # bound stays the one over every cut)
                fastest = sharing.latency.min(axis=1)
                chosen = [
                    replace(h, bound=max(h.bound or 0, int(fastest[a:b].sum())))
                    for h, a, b in zip(held, cuts[:-1], cuts[1:], strict=True)
                ]
            elif held:
                chosen = [_faster(mine, theirs, say) for mine, theirs in zip(own, held, strict=True)]
            else:
                chosen = own
        if chosen and sharing is not None and len(cuts) > 2 and request.requests > 1:
            chosen = _paced_parts(sharing, tuple(cuts), chosen, link_cycles(costs), request.requests, deadline, say)
        for w, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
            wafer = costs.subset(a, b)
            if family is None:
                if len(cuts) == 2 and request.requests > 1:
                    # the whole plan on one wafer: proven as the driver values it, paced by the requests in
                    # flight (the cut's parts are proven for a token's path alone; CP-SAT's paced optimum of
                    # a tiny MoE at 8 requests, 9,176 cycles, then contradicted the path's 1,223 and the
                    # solve ended in an error)
                    parts.append(wafer_part(wafer, objective_named(request.objective, request.requests)))
                    one_wafer = parts[-1].bound.value if parts[-1].bound is not None else None
                else:
                    parts.append(cut.parts[w] if cut.parts else wafer_part(wafer, objective))
                continue
            # each wafer's part is proven for its path (the requests in flight pace the merged plan once);
            # one wafer's plan is the whole plan: its regions searched again for its requests' tokens
            one = len(cuts) == 2 and request.requests > 1
            # (after a signal the plan in hand: a search now would find nothing and throw it away)
            given = None if one and not deadline.stopped else chosen[w]
            units, proven, fixed = share_cores(wafer, request, family, deadline, say, given=given, pace=None if one else 1)
            if proven is None or units.runs is None:
                raise SolverError(
                    f"{costs.kgraph.ops.source}: no regions were found in time for wafer {w}; give a larger --time-limit"
                )
            if one and not cut.shards:  # the whole plan on one wafer: weighed as ``--wafers 1`` weighs it
                weighed, own_rects = own_rectangles(wafer, request, units, proven, deadline, say)
                own_bound = weighed.value if weighed.value != proven.value else None
                proven = weighed
                one_wafer = proven.value
            elif one and cut.layers is None:
                # every layer split: that wafer's bound holds for every one-wafer plan of the form (not where the
                # search chose the layers to split: its table is one of the form's many)
                one_wafer = proven.value
            parts.append(Part(units, proven, wider=True))
            runs += [(a + i, a + j) for i, j in units.runs]
            grids += list(fixed) if fixed is not None else []
        decision = WafersDecision(
            wafers=len(cuts) - 1,
            cuts=tuple(cuts),
            family=family,
            runs=tuple(runs),
            grids=tuple(grids) if family is not None and len(grids) == len(runs) else None,
            expert_shards=cut.shards or None,
            split_layers=cut.layers,
            reason="; ".join(r for r in (_forms_reason(cut, forms), skipped) if r),
        )
        # the parts' proofs (each wafer's own search, made here or while the cut was chosen) count in each
        # part's time: the partition's is the rest, so that the plan's time adds up to the elapsed once
        # (it counted them twice: 36 s reported for a 30 s solve)
        proofs = sum(p.bound.wall_s for p in parts if p.bound is not None)
        # a plan on one wafer with every kernel on its own rectangle is outside the regions' family: the
        # bound is the least of the family's and theirs
        unpaced = cut.bound if own_bound is None else min(cut.bound, own_bound)
        partition = StagePartition(
            Status.OPTIMAL, len(cuts) - 1, tuple(cuts), unpaced, max(0.0, time.perf_counter() - t0 - proofs)
        )
        # requests in flight take turns at every stage (``_Cut.paced``); with several forms, the least of
        # theirs (``least``)
        bound = cut.paced(request.requests) if least is None else least
        bound = bound if own_bound is None else min(bound, own_bound)
        if one_wafer is not None and cut.fewest == 1:
            # a plan on one wafer takes at least that wafer's proven bound, a plan on two or more waits its
            # turn at a link's transfer too: the least of the two (the tiny decode at 16 requests on
            # --wafers 2 landed on one wafer at its optimum, 1,568, and stated the one-pass bound, 1,022)
            least_of = [one_wafer, cut.paced(request.requests, fewest=2)]
            if least is not None:
                # with the MoE layers' other forms, the least of theirs too, each paced over the plans the
                # caller's ``least`` counts (under auto those on as few wafers, so not this form's on two): the
                # tiny MoE at 8 requests landed on one wafer split at 7,784 and stated 4,896
                counted = request.wafer_count is not None
                others = [
                    c.paced(request.requests) for c in forms if c.form != cut.form and (counted or len(c.cuts) == len(cut.cuts))
                ]
                least_of = [one_wafer, *others] + ([cut.paced(request.requests, fewest=2)] if counted else [])
            bound = max(bound, min(least_of))
        # (every kernel on its own rectangle: the wafers cut into, for ``retry``)
        state = len(cuts) - 1 if family is None else None
        regions = Prepared(decision, tuple(parts), costs, costs, partition, bound, state=state)
        if own_rects is None:
            return regions
        # that one wafer's kernels each on its own rectangle: solved beside its regions, or alone where the
        # regions are out of reach (``regions.OUT_OF_REACH``; the regions then wait for ``retry``)
        why = "; ".join(r for r in (decision.reason, own_reason(family, alone=own_rects.alone)) if r)
        mine = decision.model_copy(update={"runs": (), "grids": (), "reason": why})
        if own_rects.alone:
            return Prepared(mine, (own_rects.part,), costs, costs, partition, bound, state=regions)
        return replace(regions, rivals=(Prepared(mine, (own_rects.part,), costs, costs, partition, bound),))

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        """Every kernel on its own rectangle, a wafer's part found no layout: its kernels' rectangles fill
        its cores without tiling them (the tiny decode at 40 requests and 4,700 B of SRAM: 384 of 384
        cores on its first wafer of three). The kernels are cut over one wafer more, up to the request's
        count (``auto``: a wafer per kernel at most), as long as time remains. With regions the wafers'
        regions are searched again only on one wafer (``regions.retry``)."""
        tried = prepared.state
        if isinstance(tried, _OneWafer):  # decided as one wafer's: its regions' retry (not a cut over more)
            if deadline.stopped or not isinstance(tried.regions.state, (Prepared, RegionsLater)):
                return None
            t0 = time.perf_counter()
            again = SharedRegions().retry(costs, request, tried.regions, deadline, say)
            return None if again is None else _as_one_wafer(again, t0)
        if isinstance(tried, Prepared) and not deadline.stopped:  # own rectangles solved alone: the regions' turn
            say("wafers: every kernel on its own rectangle found no layout; the wafer's regions are solved after all")
            return tried
        if not isinstance(tried, int) or deadline.stopped:
            return None
        if tried >= (request.wafer_count or len(costs.kernels)):
            raise NoLayoutError(
                f"{costs.kgraph.ops.source}: no placement fits {costs.arch.name} with every kernel on its own rectangle "
                f"cut over {tried} wafer(s); give more --wafers (auto cuts over more until they pack), use --share auto, "
                "or plan with --no-place"
            )
        say(f"wafers: the kernels cut over {tried} wafer(s) do not pack; cutting them over {tried + 1}")
        t0 = time.perf_counter()
        try:
            cut = self._cut(costs, request, None, 0, deadline.share(1.0 - FINISH_SHARE), say, retried=tried + 1)
            return self._finish(cut, request, None, [cut], deadline, say, t0)
        except InfeasibleError:
            return None  # (the driver's error stands: no layout on fewer wafers, none found on more)

    def _exact(
        self,
        costs: CostTable,
        family: Family,
        links: np.ndarray,
        count: int,
        price: float,
        deadline: Deadline,
        say: Progress,
        base: SharingProblem | None = None,
        known: WaferSharing | None = None,
    ) -> tuple[WaferSharing | None, SharingProblem]:
        """The least-time cut and regions over every cut (``solvers.share_wafers``), or the bound it
        proved in its share of the time and the best plan in hand (``known``, a plan found otherwise,
        when it found none better; None when a signal stopped it), and the problem it solved."""
        sp = base if base is not None else build_sharing_problem(costs, family=family)
        sp = replace(sp, total_cores=int(sp.total_cores * FAMILY_BUDGET[family]))
        found = run_stoppable(
            lambda: wafer_sharing(sp, links, count, deadline.share(EXACT_SHARE), known=known, price=price), deadline
        )
        if found is not None:
            proven = f"bound {found.bound:,} cycles" if found.bound is not None else "no bound"
            say(f"wafers: {found.status.value}, {proven} ({found.wall_s:.1f} s); {found.message}")
        return found, sp

    def _relaxed(
        self,
        costs: CostTable,
        request: SolveRequest,
        family: Family | None,
        count: int,
        links: np.ndarray,
        deadline: Deadline,
        sharing: SharingProblem | None = None,
    ) -> tuple[int, WaferSharing | None, float, int, int | None]:
        """A lower bound on the sum of the wafers' token paths over every cut (the count's cores as one
        budget), the relaxed regions packed onto wafers in order as a plan (its cut may take more than
        ``count`` wafers; its time counts the links; None: no regions found), the price of a core behind
        the bound (0 without regions), the wafer count and, under ``--wafers auto``, the fewest wafers
        any plan takes (None: not counted). ``--wafers auto``: the
        fewest wafers a cut into wafers that each fit their kernels' regions takes (``fitting_cuts``: each
        wafer as full as it fits), which can exceed the fewest the kernels' own smallest op models need."""
        if family is None:
            total = costs.total_cores * count
            problem = build_problem(costs, total_cores=total, objective=objective_named(ObjectiveKind.LATENCY))
            proven = objective_named(ObjectiveKind.LATENCY).exact_bound(problem, allocate=False)  # (the value alone)
            if proven.value is None:
                raise InfeasibleError(stage_infeasibility(costs, build_stage_problem(costs), count, "nothing fits"))
            return proven.value, None, 0.0, count, None
        # (a paired problem's charges are not seen here: its relaxed optimum is a bound all the same)
        base = sharing if sharing is not None else build_sharing_problem(costs, family=family)
        fit = None
        if request.wafer_count is None:  # auto: the fewest wafers some cut into fitting wafers takes
            fit = _fewest_fitting(base, family, costs.total_cores)
            count = max(count, fit) if fit is not None else count
        sp = replace(base, total_cores=int(costs.total_cores * count * FAMILY_BUDGET[family]))
        found = run_stoppable(lambda: share_solver(sp, deadline.share(RELAXED_SHARE)), deadline)
        if found is None:
            raise Interrupted(f"interrupted while choosing regions for {request.model.label}; nothing was solved")
        if found.status is Status.INFEASIBLE:  # not even with every wafer's cores as one budget
            raise InfeasibleError(
                f"{costs.kgraph.ops.source}: its regions do not fit {count} {costs.arch.name} wafers even with all their "
                f"cores as one budget ({found.message.replace('the wafer has', 'the wafers have')}); give more --wafers, "
                "fewer --requests or a shorter --context"
            )
        if found.bound is None:
            raise InfeasibleError(f"{costs.kgraph.ops.source}: {found.message}")
        packed = _packed(sp, found, links, int(costs.total_cores * FAMILY_BUDGET[family]))
        return int(found.bound), packed, found.price, count, fit

    def _fewest_first(
        self,
        costs: CostTable,
        family: Family,
        counts: tuple[int, int],
        links: np.ndarray,
        deadline: Deadline,
        sp: SharingProblem,
        known: WaferSharing | None,
        bound: int,
        say: Progress,
    ) -> WaferSharing | None:
        """The plan in hand under ``--wafers N`` (``counts``: the fewest wafers that fit, and N): ``known``
        or a plan on the fewest wafers (``_fewer``), whichever is faster, then on one wafer more and so on
        while the best is more than ``FEWER_SLACK`` above ``bound`` (a bound of every plan on at most N
        wafers) and time remains, the fastest kept. The fewest wafers cross the fewest links (the tiny decode: 1,022 cycles
        on one wafer, 2,979 over three), but where they hold the kernels only with their SRAM full, one
        wafer more is far faster (the Llama-3.1-70B prefill allowed eight: 1,499,712,605 cycles on the
        four that fit, 624,474,232 on five)."""
        fit, count = counts
        for wafers in range(fit, count):
            close = known is not None and _time(known) <= (1 + FEWER_SLACK) * bound
            if deadline.stopped or (wafers > fit and (close or deadline.expired())):
                break
            share = deadline if wafers == count - 1 else deadline.share(0.5)
            fewer = self._fewer(costs, family, wafers, links, share, sp, say)
            if fewer is not None and _fits(fewer, count) and (known is None or _time(fewer) < _time(known)):
                known = fewer
        return known

    def _fewer(
        self,
        costs: CostTable,
        family: Family,
        wafers: int,
        links: np.ndarray,
        deadline: Deadline,
        sp: SharingProblem,
        say: Progress,
    ) -> WaferSharing | None:
        """The regions of the sharing search on ``wafers`` wafers' cores (the fewest that can hold the
        kernels' regions), packed in order (None: none found in time; ``sp`` pays no charges at its
        runs' ends, which that search would not see: the caller asks only then). Fewer cores make
        smaller regions, which pack onto fewer wafers and cross fewer links: with the links costly
        beside the wafers' paths (the tiny decode: 1,022 cycles on one wafer, 1,976 with the relaxed
        regions of two wafers' cores packed onto two, 2,979 with three's onto three), this is the
        faster start."""
        wafer = int(costs.total_cores * FAMILY_BUDGET[family])
        say(f"wafers: the regions of {wafers} wafer(s)' cores, a plan on fewer wafers")
        joint = replace(sp, total_cores=wafer * wafers)
        found = run_stoppable(lambda: share_solver(joint, deadline.share(0.5 if wafers > 1 else 1.0)), deadline)
        packed = _packed(joint, found, links, wafer) if found is not None and found.status is not Status.INFEASIBLE else None
        if wafers == 1 or (packed is not None and len(packed.cuts) - 1 <= wafers) or deadline.stopped:
            return packed
        # they do not pack onto that many (regions fill a wafer's end unevenly): each wafer of the cut
        # into that many that fits, near even resident bytes, its own regions (the tiny decode on two
        # tiny wafers: 1,988 cycles, where its joint regions packed onto three took 2,991)
        one = replace(sp, total_cores=wafer)
        cut = fitting_cuts(one, wafers, resident_cut(costs, wafers) or (0, sp.n_kernels))
        planned = _apart(one, cut, links, deadline) if cut is not None else None
        apart = planned[0] if planned is not None else None  # (the exact search starts from it: its cut may move)
        if apart is None or apart.latency is None:
            return packed
        return apart if packed is None or packed.latency is None or apart.latency < packed.latency else packed

    def lower(self, decision: Decision, costs: CostTable) -> CostTable:
        assert isinstance(decision, WafersDecision)
        if decision.expert_shards is not None:
            costs = split_experts(costs, decision.expert_shards, decision.split_layers)
        elif decision.split_layers is not None:
            raise ValueError("decision.split_layers is given without decision.expert_shards")
        if not decision.runs:
            return costs
        if decision.grids is not None:
            return region_table(costs, decision.runs, run_shapes=[np.array([g], dtype=np.int64) for g in decision.grids])
        assert decision.family is not None
        return region_table(costs, decision.runs, shapes=candidate_shapes(costs.arch, decision.family))

    def admits(self, request: SolveRequest, decision: Decision, costs: CostTable) -> str | None:
        wrong = super().admits(request, decision, costs)
        if wrong is not None or not isinstance(decision, WafersDecision):
            return wrong
        count = request.wafer_count
        if count is not None and decision.wafers > count:
            return f"decision.wafers is {decision.wafers}, the request allows {count}"
        asked = request.sharing.family if request.sharing.mode is ShareMode.AUTO else None
        if decision.family != asked:
            return f"decision.family is {decision.family!r}, the request shares cores as {asked!r}"
        if decision.expert_shards is not None and (asked is None or decision.expert_shards not in EXPERT_SHARDS):
            return (
                f"decision.expert_shards is {decision.expert_shards}: the search splits MoE layers into "
                f"{', '.join(map(str, EXPERT_SHARDS))} shards, and only with regions (--share auto)"
            )
        return None

    def summary_lines(self, plan: Plan, costs: CostTable) -> list[str]:
        return regions_lines(plan)
