"""Plans as constraints (``--from-plan old.json [--keep GLOB]``) and what a re-solve moved.

A previous plan's decisions for the selected kernels become rules: each kernel's grid and dataflow
(a ``grid`` rule with its shape) and, for a placed plan, its top-left corner (a ``place ... at``
rule); for a plan over several wafers, its cuts after the kept kernels. Each rule names the plan and
the kernel it came from (``old.json (node_addmm_2)``), so a conflict with the user's own rules reads
as one. The rules are ``optional``: a kernel the edited model no longer has drops its rules (the
plan is read before the model). :func:`moved` lists what the new plan changed for every kernel the
two plans share, and the kernels either plan lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from pydantic import ValidationError

from wsealloc.constraints import Constraints, CutRule, GridRule, PlaceRule, Selector
from wsealloc.cost import Dataflow
from wsealloc.errors import ConstraintError, PlanError, excerpt
from wsealloc.plan.io import read_plan
from wsealloc.plan.schema import Plan
from wsealloc.request import StartKernel, StartLayout


def constraints_from_plan(path: str | Path, keep: Sequence[str] = ()) -> Constraints:
    """The rules that pin what plan ``path`` decided for the kernels matching ``keep`` (globs; none: all)."""
    plan = read_plan(Path(path))
    label = str(path)
    if plan.regions:
        raise ConstraintError(
            f"{label}: its kernels share regions of cores in time; --from-plan pins kernels that own their rectangle"
        )
    names = [k.name for k in plan.kernels]
    for pattern in keep:
        if not any(fnmatchcase(n, pattern) for n in names):
            raise ConstraintError(
                f"--keep {pattern!r} matches no kernel of {label} (its kernels are named like {', '.join(names[:3])})"
            )
    kept = [k for k in plan.kernels if not keep or any(fnmatchcase(k.name, p) for p in keep)]
    rules: list[GridRule | PlaceRule | CutRule] = []
    for k in kept:
        source = f"{label} ({k.name})"
        select = Selector(names=(k.name,))
        try:
            dataflow = Dataflow(k.dataflow)
        except ValueError:
            known = ", ".join(d.value for d in Dataflow)
            raise PlanError(f"{label}: kernel {k.name}: dataflow {excerpt(k.dataflow)} is not one of {known}") from None
        rules.append(GridRule(source=source, select=select, shape=k.grid, dataflow=dataflow, optional=True))
        if k.placement is not None:
            rules.append(PlaceRule(source=source, select=select, at=k.placement, optional=True))
    if len(plan.stages) > 1:
        kept_names = {k.name for k in kept}
        order = {k.name: k.stage for k in plan.kernels}
        for before, after in zip(plan.kernels, plan.kernels[1:], strict=False):
            if order[before.name] != order[after.name] and before.name in kept_names:
                rules.append(CutRule(source=f"{label} (cut after {before.name})", after=before.name, optional=True))
    return Constraints(source=label, sha256=plan.model.sha256, rules=tuple(rules))


def start_from_plan(path: str | Path) -> StartLayout | None:
    """Plan ``path``'s layout as a start of the placement search: every placed kernel's grid, dataflow
    and corner. None for a plan that placed nothing or shares regions. Over several wafers each
    kernel's corner is on its own wafer: each wafer of the re-solve starts from the corners of its
    kernels, so where the cuts stay (``--from-plan`` pins them with the kernels) each wafer starts
    from its old layout, and where they move, kernels from two old wafers that would overlap are
    fitted anew (``driver.start_layout``)."""
    plan = read_plan(Path(path))
    if plan.regions or any(k.placement is None for k in plan.kernels) or not plan.kernels:
        return None
    kernels = []
    for k in plan.kernels:
        try:
            kernels.append(StartKernel(name=k.name, grid=k.grid, dataflow=k.dataflow, at=k.placement))
        except ValidationError as exc:  # (a corner past any wafer: the plan's schema bounds it less)
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise PlanError(f"{path}: kernel {k.name}: {field} {first['msg'].lower()}; re-run solve for a new plan") from None
    return StartLayout(source=str(path), kernels=tuple(kernels))


def moved(old: Plan, new: Plan) -> list[str]:
    """One line per kernel whose grid, dataflow, corner or wafer differs between the plans, per kernel
    the old plan lacks (new to it: the model gained it, or the plan lost it; the re-solve fitted it
    anew) and per kernel of the old plan the new one lacks (the model no longer has it): a re-solve
    that fitted 100 kernels the plan lacked is not "nothing moved"."""
    before = {k.name: k for k in old.kernels}
    out = []
    for k in new.kernels:
        o = before.get(k.name)
        if o is None:
            where = f" at {list(k.placement)}" if k.placement is not None else ""
            out.append(f"{k.name}: new to the old plan, grid {k.grid[0]}x{k.grid[1]}{where}")
            continue
        changes = []
        if o.grid != k.grid:
            changes.append(f"grid {o.grid[0]}x{o.grid[1]} -> {k.grid[0]}x{k.grid[1]}")
        if o.dataflow != k.dataflow:
            changes.append(f"dataflow {o.dataflow} -> {k.dataflow}")
        if o.placement != k.placement and o.placement is not None and k.placement is not None:
            changes.append(f"corner {list(o.placement)} -> {list(k.placement)}")
        if o.stage != k.stage:
            changes.append(f"wafer {o.stage} -> {k.stage}")
        if changes:
            out.append(f"{k.name}: {', '.join(changes)}")
    now = {k.name for k in new.kernels}
    out += [f"{k.name}: in the old plan, not in this model" for k in old.kernels if k.name not in now]
    return out
