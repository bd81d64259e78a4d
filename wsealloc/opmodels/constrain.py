"""The user's constraints applied to a cost table: the one legality point learns the user's rules.

Every rule that says which grids a kernel may take is folded into its op-model table: a legal op
model a rule forbids is rejected with ``Reason.CONSTRAINED``, and every op model a rule forbids has
that rule's number in ``OpModelTable.rule`` (so an explanation can tell "the rules allow only grids
that are over SRAM" from "the rules allow nothing"); the frontier is recomputed. Every later layer
then honours it without knowing it exists: the allocation backends (CP-SAT, PuLP, the bisection,
the greedy) choose among the frontier, the placement reads its shape tables from the op-model
tables, ``verify`` judges each grid on the table it rebuilds. Per op model, first failing rule wins:

* keep-outs: the rectangle must fit somewhere on the wafer clear of every keep-out area;
* ``grid``: shape, rows, cols, cores, dataflow;
* ``place at``: the rectangle from its corner lies on the wafer, clear of keep-outs, of defective cores
  and (``die_boundary: forbid``) of die boundaries;
* ``place within``: it fits inside the area (all its areas intersected), clear of keep-outs.

Kernels a ``grid`` or ``place`` rule names get their own class (signature): identical layers stay
one class only while the same rules apply to them. What a table cannot express (the cores the
keep-outs take, fixed corners, areas, cuts, groups) is recorded in :class:`Applied` for the problem
and solver layers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.defects import defect_mask
from wsealloc.arch.schema import DieBoundary
from wsealloc.constraints.geometry import Box, fits_at, fits_within, union_cores
from wsealloc.constraints.schema import Constraints, CutRule, GridRule, KeepOut, PlaceRule, Together, TogetherHow
from wsealloc.constraints.select import members as rule_members
from wsealloc.constraints.select import present
from wsealloc.errors import ConflictError, ConstraintError
from wsealloc.opmodels.applied import Applied
from wsealloc.opmodels.enumerate import DATAFLOW_CODES, Frontier, OpModelTable, Reason, pareto_frontier
from wsealloc.opmodels.table import CostTable, KernelCosts


def resolve(costs: CostTable, constraints: Constraints) -> Applied:
    """Which kernels each rule applies to, and the geometric facts of the rules (on this wafer)."""
    arch = costs.arch
    kernels = [kc.kernel for kc in costs.kernels]
    names = [k.name for k in kernels]
    constraints = present(constraints, kernels)
    per_rule = rule_members(constraints, kernels)
    keep_out: list[tuple[int, Box]] = []
    pins: dict[str, tuple[int, tuple[int, int]]] = {}
    fences: dict[str, tuple[tuple[int, ...], Box]] = {}
    cuts: list[tuple[str, int, bool]] = []
    wafer_groups: list[tuple[int, tuple[str, ...]]] = []
    region_groups: list[tuple[int, tuple[str, ...]]] = []
    touch_groups: list[tuple[int, tuple[str, ...]]] = []
    for index, (rule, picked) in enumerate(zip(constraints.rules, per_rule, strict=True)):
        where = constraints.where(rule)
        if isinstance(rule, KeepOut):
            box = rule.area.box(arch.rows, arch.cols)
            if box[2] <= 0 or box[3] <= 0:
                raise ConstraintError(
                    f"{where}: keep-out {rule.area.text()} lies off the {arch.rows}x{arch.cols} wafer of {arch.name}"
                )
            keep_out.append((index, box))
        elif isinstance(rule, PlaceRule) and rule.at is not None:
            if rule.at[0] >= arch.rows or rule.at[1] >= arch.cols:
                raise ConflictError(
                    f"{where} places {rule.select.text()} at row {rule.at[0]}, col {rule.at[1]}, beyond the "
                    f"{arch.rows}x{arch.cols} wafer of {arch.name} (rows 0-{arch.rows - 1}, cols 0-{arch.cols - 1})"
                )
            if len(picked) > 1:
                raise ConstraintError(
                    f"{where}: at [{rule.at[0]}, {rule.at[1]}] fixes one kernel's corner, but {rule.select.text()} selects "
                    f"{len(picked)} ({', '.join(names[k] for k in picked[:3])}...); select one kernel, or use within"
                )
            name = names[picked[0]]
            if name in pins and pins[name][1] != rule.at:
                other = constraints.where(constraints.rules[pins[name][0]])
                raise ConflictError(
                    f"{other} places {name} at {list(pins[name][1])}; {where} places it at {list(rule.at)}: "
                    "a kernel has one corner"
                )
            pins[name] = (index, rule.at)
        elif isinstance(rule, PlaceRule) and rule.within is not None:
            area = rule.within.box(arch.rows, arch.cols)
            if area[2] <= 0 or area[3] <= 0:
                raise ConflictError(
                    f"{where}: within {rule.within.text()} lies off the {arch.rows}x{arch.cols} wafer of {arch.name}"
                )
            for k in picked:
                lines, box = fences.get(names[k], ((), area))
                y0, x0 = max(box[0], area[0]), max(box[1], area[1])
                y1, x1 = min(box[0] + box[2], area[0] + area[2]), min(box[1] + box[3], area[1] + area[3])
                if y0 >= y1 or x0 >= x1:
                    others = "; ".join(f"{constraints.where(constraints.rules[i])} {constraints.rules[i].text()}" for i in lines)
                    raise ConflictError(f"{others}; {where} {rule.text()}: the areas do not meet, {names[k]} has nowhere to go")
                fences[names[k]] = ((*lines, index), (y0, x0, y1 - y0, x1 - x0))
        elif isinstance(rule, CutRule):
            after = picked[0]
            if after == len(names) - 1:
                raise ConstraintError(f"{where}: {names[after]} is the last kernel; there is no pipeline after it to cut")
            cuts.append((names[after], index, rule.must))
        elif isinstance(rule, Together):
            group = tuple(names[k] for k in picked)
            if rule.how is TogetherHow.TOUCH:  # side by side is on one wafer too
                touch_groups.append((index, group))
            (region_groups if rule.how is TogetherHow.REGION else wafer_groups).append((index, group))
    boxes = [box for _, box in keep_out]
    return Applied(
        constraints=constraints,
        members=tuple(tuple(names[k] for k in picked) for picked in per_rule),
        keep_out=tuple(keep_out),
        pins=tuple((name, i, at) for name, (i, at) in pins.items()),
        fences=tuple((name, lines, box) for name, (lines, box) in fences.items()),
        cuts=tuple(cuts),
        wafer_groups=tuple(wafer_groups),
        region_groups=tuple(region_groups),
        touch_groups=tuple(touch_groups),
        kept_out_cores=union_cores(boxes, (arch.rows, arch.cols)),
    )


@dataclass(frozen=True)
class _Wafer:
    """What a rectangle at a fixed corner must also miss: the wafer's size, its defective cores (as a
    2D prefix sum: the cores of any rectangle in O(1)) and, where the arch forbids crossing them, the
    die boundaries."""

    rows: int
    cols: int
    defects: np.ndarray | None  # [rows + 1, cols + 1] prefix sum of the defect mask; None: no defects
    die: tuple[int, int] | None  # (die rows, die cols) when crossing is forbidden

    @staticmethod
    def of(arch: Arch) -> _Wafer:
        d = arch.wafer.defects
        mask = defect_mask(arch.rows, arch.cols, d.cores, d.rate, d.seed) if (d.cores or d.rate > 0) else None
        prefix = None
        if mask is not None and mask.any():
            prefix = np.zeros((arch.rows + 1, arch.cols + 1), dtype=np.int64)
            prefix[1:, 1:] = mask.cumsum(0).cumsum(1)
        forbid = arch.wafer.die_boundary is DieBoundary.FORBID
        return _Wafer(arch.rows, arch.cols, prefix, (arch.wafer.die_cores.rows, arch.wafer.die_cores.cols) if forbid else None)

    def blocked_at(self, r: np.ndarray, c: np.ndarray, at: tuple[int, int]) -> np.ndarray:
        """Per shape, whether the rectangle from corner ``at`` covers a defective core or crosses a die
        boundary the arch forbids (shapes past the wafer's edge: judged by ``fits_at``)."""
        y, x = at
        bad = np.zeros(r.size, dtype=bool)
        if self.defects is not None:
            y1, x1 = np.minimum(y + r, self.rows), np.minimum(x + c, self.cols)
            p = self.defects
            bad |= (p[y1, x1] - p[y, x1] - p[y1, x] + p[y, x]) > 0
        if self.die is not None:
            dr, dc = self.die
            bad |= ((y + r - 1) // dr != y // dr) | ((x + c - 1) // dc != x // dc)
        return bad


def _excluded(table: OpModelTable, rule: GridRule | PlaceRule, applied: Applied, name: str, wafer: _Wafer | None) -> np.ndarray:
    """Op models of a kernel that ``rule`` forbids (``wafer``: given whenever a rule fixes a corner)."""
    r, c = table.r, table.c
    if isinstance(rule, GridRule):
        bad = np.zeros(r.size, dtype=bool)
        if rule.shape is not None:
            bad |= (r != rule.shape[0]) | (c != rule.shape[1])
        for span, values in ((rule.rows, r), (rule.cols, c), (rule.cores, r * c)):
            if span is not None:
                bad |= (values < (span.min or 0)) | (values > (span.max if span.max is not None else np.iinfo(np.int64).max))
        if rule.dataflow is not None:
            bad |= table.dataflow != DATAFLOW_CODES.index(rule.dataflow)
        return bad
    if rule.at is not None:
        assert wafer is not None  # (``apply`` makes it when a corner is fixed)
        # from its corner the rectangle is known: it must miss the keep-outs, the defective cores and (where
        # forbidden) the die boundaries, else no layout holds it there (a pin on a defective core was a
        # placement failure naming no rule)
        bad = ~fits_at(r, c, rule.at, (wafer.rows, wafer.cols), applied.obstacles) | wafer.blocked_at(r, c, rule.at)
        fence = applied.fence_of(name)
        if fence is not None:  # from its corner, the rectangle must also stay inside its area
            fy, fx, fr, fc = fence[1]
            y, x = rule.at
            bad |= (y < fy) | (x < fx) | (y + r > fy + fr) | (x + c > fx + fc)
        return bad
    fence = applied.fence_of(name)
    assert fence is not None  # resolve() recorded every within rule's kernels
    return ~fits_within(r, c, fence[1], applied.obstacles)


def apply(costs: CostTable, constraints: Constraints) -> CostTable:
    """``costs`` with the user's constraints applied (module docstring); ``unconstrained`` keeps the
    table before them. No check that a kernel keeps an op model here: the conflict explanation
    (``solvers.conflicts``) says which rules leave it none."""
    if not constraints.rules:
        return costs
    applied = resolve(costs, constraints)
    constraints = applied.constraints  # (without an old plan's rules for kernels the model lost: ``select.present``)
    arch = costs.arch
    wafer = (arch.rows, arch.cols)
    corners = _Wafer.of(arch) if applied.pins else None  # (what a fixed corner's rectangle must miss)
    specific: dict[str, list[int]] = {}
    for index, (rule, names) in enumerate(zip(constraints.rules, applied.members, strict=True)):
        if isinstance(rule, (GridRule, PlaceRule)):
            for name in names:
                specific.setdefault(name, []).append(index)
    keep_lines = [i for i, _ in applied.keep_out]
    cache: dict[tuple[int, tuple[int, ...]], tuple[OpModelTable, Frontier, int]] = {}
    next_signature = max((kc.signature for kc in costs.kernels), default=-1) + 1
    out: list[KernelCosts] = []
    for kc in costs.kernels:
        rules = tuple(specific.get(kc.kernel.name, ()))
        if not rules and not keep_lines:
            out.append(kc)
            continue
        # a fence or a pin belongs to one kernel, so its table does too (``rules`` names the kernel's rules)
        key = (
            (kc.signature, rules)
            if not any(isinstance(constraints.rules[i], PlaceRule) for i in rules)
            else (-1 - len(cache), rules)
        )
        if key not in cache:
            table = kc.table
            reason = table.reason.copy()
            number = np.zeros(reason.size, dtype=np.int64)  # every op model a rule forbids, legal or not
            legal = reason == Reason.LEGAL
            checks: list[tuple[int, np.ndarray]] = []
            if keep_lines:  # fits nowhere clear of the keep-outs
                fits = fits_within(table.r, table.c, (0, 0, *wafer), applied.obstacles)
                checks.append((keep_lines[0] + 1, ~fits))
            for index in rules:
                rule = constraints.rules[index]
                assert isinstance(rule, (GridRule, PlaceRule))
                checks.append((index + 1, _excluded(table, rule, applied, kc.kernel.name, corners)))
            for which, bad in checks:  # the first rule a model breaks names it
                number[(number == 0) & bad] = which
            reason[legal & (number > 0)] = Reason.CONSTRAINED
            sig = kc.signature if not rules else next_signature + len(cache)
            constrained = replace(table, reason=reason, rule=number)
            cache[key] = (constrained, pareto_frontier(constrained), sig)
        table, frontier, sig = cache[key]
        out.append(KernelCosts(kc.kernel, kc.work, table, frontier, sig))
    return replace(costs, kernels=tuple(out), applied=applied, unconstrained=costs)
