"""Which recomputation segments recompute: chosen exactly for min-max, then fixed in the op-model tables.

Recomputation is a property of a *segment* (``cost.training``, "Recomputation": runs of about
``segment_length`` pipeline stages, cut where the least is live and again at wafer boundaries), not
of one kernel: a kernel that drops the inputs its segment
produced needs its producers in the segment to replay their forwards, so either every kernel of a
segment recomputes or none does. Each kernel's op models list both ways (dataflows ``train`` and
``train-recompute``); this module picks one way per segment and marks the other way's op models
illegal (:attr:`Reason.SEGMENT`), so every later layer (the exact backends, the greedy, the placement,
the verifier) sees per-kernel frontiers again: the one legality point stays the op-model table.

The choice is exact for the min-max objective under one core budget: given a bottleneck T every
segment independently takes the way whose kernels' fewest cores meeting T sum lowest, so T is
feasible iff those minima fit, feasibility is monotone in T, and bisection over the candidate latencies
finds the optimum (the bisection of ``solvers.bisect`` with a segment's two ways in place of a kernel's
one frontier). With the user's areas (budgets) or another objective the choice is the same rule's and
the caller proves its bound on the table before the choice (every kernel free: a relaxation).

A segment found with kernels outside the table keeps its stash (its part on a later wafer could not
replay its producers on an earlier one); tables over several wafers cut their segments at the wafer
boundaries first (``pipeline.over_wafers``), so this is a safeguard. ``--recompute none`` has no
recomputing op models; ``--recompute all`` recomputes every segment the table holds whole.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from wsealloc.cost.model import Dataflow, Recompute, TrainingWork
from wsealloc.opmodels.enumerate import DATAFLOW_CODES, Frontier, OpModelTable, Reason, pareto_frontier
from wsealloc.opmodels.table import CostTable, KernelCosts
from wsealloc.search import first_true

RECOMPUTE_CODE = DATAFLOW_CODES.index(Dataflow.TRAIN_RECOMPUTE)


@dataclass(frozen=True)
class RecomputeChoice:
    """One way per segment of a table: per kernel whether it recomputes, and what the choice proves."""

    recompute: tuple[bool, ...]  # per kernel of the table
    value: int | None  # the min-max optimum over every segment choice (None: nothing fits, or not exact)
    exact: bool  # the choice is part of a min-max optimum under the table's one core budget


def choosable(costs: CostTable) -> bool:
    """Whether the table's kernels are training kernels with recomputing op models to choose from."""
    return any(isinstance(kc.work, TrainingWork) and kc.work.recompute is not Recompute.NONE for kc in costs.kernels)


def segment_ways(costs: CostTable) -> dict[int, tuple[bool, ...]]:
    """The ways each segment of the table may take (False: keep the stash; True: recompute): both
    under ``auto``, recompute under ``all``, keep under ``none`` and for a segment split off the table."""
    here = Counter(kc.work.segment for kc in costs.kernels if isinstance(kc.work, TrainingWork))
    ways: dict[int, tuple[bool, ...]] = {}
    for kc in costs.kernels:
        w = kc.work
        if not isinstance(w, TrainingWork):
            continue
        whole = here[w.segment] == w.segment_kernels
        mode = w.recompute if whole else Recompute.NONE
        ways[w.segment] = {Recompute.NONE: (False,), Recompute.ALL: (True,), Recompute.AUTO: (False, True)}[mode]
    return ways


def flag_table(table: OpModelTable, recompute: bool) -> OpModelTable:
    """``table`` with the other way's legal op models marked :attr:`Reason.SEGMENT`."""
    other = (table.dataflow == RECOMPUTE_CODE) != recompute
    reason = table.reason.copy()
    reason[other & (reason == Reason.LEGAL)] = Reason.SEGMENT
    return replace(table, reason=reason)


def stuck(costs: CostTable) -> str | None:
    """A segment none of whose ways gives every one of its kernels an op model, said with a kernel
    that blocks each way (and the user's rule that does, if one does); None when every segment has a way."""
    ways = segment_ways(costs)
    for s, allowed in sorted(ways.items()):
        members = [kc for kc in costs.kernels if isinstance(kc.work, TrainingWork) and kc.work.segment == s]
        blocks: list[str] = []
        for way in allowed:
            bad = next((kc for kc in members if not len(pareto_frontier(flag_table(kc.table, way)))), None)
            if bad is None:
                break
            blocks.append(
                f"{bad.kernel.name} has no op model that {'recomputes' if way else 'keeps its stash'}{_rule_of(bad, costs, way)}"
            )
        else:
            return f"recomputation segment {s} ({len(members)} kernels) recomputes whole or not at all, but " + "; ".join(blocks)
    return None


def _rule_of(kc: KernelCosts, costs: CostTable, way: bool) -> str:
    """`` (c.yaml line 4)``: the user's rule that forbids a kernel's op models of one way, if one does."""
    table = kc.table
    if table.rule is None or costs.applied is None:
        return ""
    rows = ((table.dataflow == RECOMPUTE_CODE) == way) & (table.rule > 0)
    return f" ({costs.applied.where(int(table.rule[rows][0]) - 1)})" if rows.any() else ""


def choose(costs: CostTable, total_cores: int | None = None) -> RecomputeChoice:
    """The exact min-max choice of each segment's way (module docstring) under ``total_cores`` (the
    table's by default); when nothing fits, each segment's way with the fewest cores."""
    total = costs.total_cores if total_cores is None else total_cores
    ways = segment_ways(costs)
    segment = [kc.work.segment if isinstance(kc.work, TrainingWork) else -1 for kc in costs.kernels]
    fronts: dict[tuple[int, bool], Frontier] = {}  # (kernel, way) -> its frontier
    for k, kc in enumerate(costs.kernels):
        for way in ways.get(segment[k], (False,)):
            fronts[(k, way)] = pareto_frontier(flag_table(kc.table, way))
    values = np.unique(np.concatenate([f.latency for f in fronts.values()] + [np.zeros(0, dtype=np.int64)]))

    def cost(target: int) -> dict[int, tuple[int, bool]]:
        """Per segment (-1: the kernels outside any), the fewest cores meeting ``target`` and its way."""
        need: dict[tuple[int, bool], int] = {}
        for (k, way), f in fronts.items():
            i = int(np.searchsorted(-f.latency, -target, side="left"))
            key = (segment[k], way)
            need[key] = need.get(key, 0) + (int(f.cores[i]) if i < len(f) else 1 << 62)
        best: dict[int, tuple[int, bool]] = {}
        for (s, way), n in sorted(need.items()):  # False first: a tie keeps the stash
            if s not in best or n < best[s][0]:
                best[s] = (n, way)
        return best

    def fits(target: int) -> bool:
        return sum(n for n, _ in cost(target).values()) <= total

    def flags(best: dict[int, tuple[int, bool]]) -> tuple[bool, ...]:
        return tuple(best[s][1] if s >= 0 else False for s in segment)

    target = first_true(values, fits)
    if target is None:
        return RecomputeChoice(flags(cost(int(values[-1]) if values.size else 0)), None, True)
    return RecomputeChoice(flags(cost(target)), target, True)


def fewest_cores(costs: CostTable) -> tuple[bool, ...]:
    """Per kernel, the way of its segment whose kernels' smallest op models take the fewest cores (what
    fits when anything does, budgets aside)."""
    return choose(costs, 0).recompute  # no target fits 0 cores: the fewest-core ways at the largest one


def fix(costs: CostTable, recompute: tuple[bool, ...]) -> CostTable:
    """``costs`` with each kernel's other way marked illegal (:func:`flag_table`); kernels that share
    work and way share the restricted table (and a signature: class symmetry stays)."""
    cache: dict[tuple[int, bool], tuple[OpModelTable, Frontier, int]] = {}
    base = max((kc.signature for kc in costs.kernels), default=-1) + 1  # new signatures clear of the old
    out: list[KernelCosts] = []
    for kc, way in zip(costs.kernels, recompute, strict=True):
        if not isinstance(kc.work, TrainingWork):
            out.append(kc)
            continue
        key = (kc.signature, way)
        if key not in cache:
            table = flag_table(kc.table, way)
            cache[key] = (table, pareto_frontier(table), base + 2 * kc.signature + int(way))
        table, frontier, sig = cache[key]
        out.append(KernelCosts(kc.kernel, kc.work, table, frontier, sig))
    unconstrained = costs.unconstrained
    if unconstrained is not None:
        unconstrained = fix(unconstrained, recompute)
    return replace(costs, kernels=tuple(out), unconstrained=unconstrained)


def settle(costs: CostTable, total_cores: int | None = None) -> tuple[CostTable, RecomputeChoice | None]:
    """The table with each segment's way fixed by :func:`choose` (unchanged, None: nothing to choose)."""
    if not choosable(costs):
        return costs, None
    choice = choose(costs, total_cores)
    return fix(costs, choice.recompute), choice
