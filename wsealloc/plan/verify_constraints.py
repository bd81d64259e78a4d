"""``wsealloc verify``: every rule of the user's constraints, checked on the plan's own numbers.

Independent of the solvers: the kernels each rule selects are resolved again from the rebuilt kernel
graph (``constraints.select``), and every rule is read against the plan's grids, corners, stages and
regions. (A grid rule is also checked where every op model is, by ``opmodels.judge`` on the rebuilt
table; here it is checked again from the rule itself, so a table bug cannot hide a broken rule.)
A violation names the rule's file and line and the kernel that breaks it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from wsealloc.constraints import Constraints, CutRule, GridRule, KeepOut, PlaceRule, Together, TogetherHow
from wsealloc.constraints.geometry import connected, overlap
from wsealloc.constraints.select import members, present
from wsealloc.cost import Dataflow
from wsealloc.graph.kernels import Kernel
from wsealloc.plan.schema import KernelPlan, Plan

Check = Callable[[bool, str], bool]


def check_constraints(
    plan: Plan, constraints: Constraints, kernels: Sequence[Kernel], rows: int, cols: int, check: Check
) -> None:
    """Check every rule of ``constraints`` on ``plan`` (``kernels``: the model's, in dataflow order)."""
    by_name = {k.name: k for k in plan.kernels}
    names = [k.name for k in kernels]
    constraints = present(constraints, kernels)  # (an old plan's rules for kernels the model lost: dropped, as the solve did)
    picked = members(constraints, kernels)
    region_of = {k.name: k.region for k in plan.kernels}
    for rule, chosen in zip(constraints.rules, picked, strict=True):
        where = f"{constraints.where(rule)} ({rule.text()})"
        if isinstance(rule, KeepOut):
            box = rule.area.box(rows, cols)
            for k in plan.kernels:
                if k.placement is not None:
                    rect = (k.placement[0], k.placement[1], k.grid[0], k.grid[1])
                    check(not overlap(rect, box), f"{k.name}: rectangle at {list(k.placement)} enters {where}")
            continue
        if isinstance(rule, CutRule):
            after = names[chosen[0]]
            nxt = names[chosen[0] + 1]
            cut = by_name[after].stage != by_name[nxt].stage
            check(cut == rule.must, f"{where}: {after} and {nxt} are on {'different wafers' if cut else 'one wafer'}")
            continue
        for k in (by_name[names[i]] for i in chosen):
            if isinstance(rule, GridRule):
                _check_grid(rule, k, where, check)
            elif isinstance(rule, PlaceRule):
                _check_place(rule, k, rows, cols, where, check)
        if isinstance(rule, Together):
            group = [by_name[names[i]] for i in chosen]
            if rule.how in (TogetherHow.WAFER, TogetherHow.TOUCH):
                stages = sorted({k.stage for k in group})
                check(len(stages) == 1, f"{where}: its kernels are on wafers {stages}")
            if rule.how is TogetherHow.TOUCH:
                boxes = [(k.placement[0], k.placement[1], k.grid[0], k.grid[1]) for k in group if k.placement is not None]
                if len(boxes) == len(group):  # (an allocation-only plan has no rectangles to check)
                    names_text = ", ".join(k.name for k in group[:3]) + ("..." if len(group) > 3 else "")
                    check(connected(boxes), f"{where}: the rectangles of {names_text} do not touch")
            elif rule.how is TogetherHow.REGION:
                regions = {region_of[k.name] for k in group}
                check(
                    len(regions) == 1 and None not in regions, f"{where}: its kernels are in regions {sorted(map(str, regions))}"
                )


def _check_grid(rule: GridRule, k: KernelPlan, where: str, check: Check) -> None:
    r, c = k.grid
    if rule.shape is not None:
        check((r, c) == tuple(rule.shape), f"{k.name}: grid {r}x{c} breaks {where}")
    for name, span, value in (("rows", rule.rows, r), ("cols", rule.cols, c), ("cores", rule.cores, r * c)):
        if span is not None:
            low, high = span.min or 0, span.max if span.max is not None else value
            check(low <= value <= high, f"{k.name}: {name} {value:,} breaks {where}")
    if rule.dataflow is not None:
        check(k.dataflow == Dataflow(rule.dataflow).value, f"{k.name}: dataflow {k.dataflow} breaks {where}")


def _check_place(rule: PlaceRule, k: KernelPlan, rows: int, cols: int, where: str, check: Check) -> None:
    if k.placement is None:
        return  # an allocation-only plan has no corners to check
    y, x = k.placement
    r, c = k.grid
    if rule.at is not None:
        check((y, x) == tuple(rule.at), f"{k.name}: corner [{y}, {x}] breaks {where}")
    if rule.within is not None:
        ay, ax, ar, ac = rule.within.box(rows, cols)
        inside = ay <= y and ax <= x and y + r <= ay + ar and x + c <= ax + ac
        check(inside, f"{k.name}: rectangle {r}x{c} at [{y}, {x}] leaves the area of {where}")
