"""The user's constraints as a wrapper around any strategy: the rules live in the cost table's op-model
tables already (``opmodels.constrain``: every solver honours them there); the wrapper refuses, up
front, a rule the wrapped strategy cannot honour, explains conflicting rules before any solver runs
(``solvers.conflicts``), and adds the price: the wrapped strategy's proven bound without the rules
beside the plan's bound with them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from wsealloc.budget import Deadline
from wsealloc.constraints import Constraints, Rule, Together, TogetherHow
from wsealloc.opmodels import CostTable
from wsealloc.solvers.conflicts import check as check_conflicts
from wsealloc.strategy.base import Prepared, Price, Progress, Wrapper, quiet

if TYPE_CHECKING:
    from wsealloc.request import SolveRequest


def rectangle_rule(constraints: Constraints | None) -> Rule | None:
    """The first of the user's rules that applies to kernels on their own rectangles (a grid, a corner,
    a keep-out, a touch group), or None: under ``--share auto`` such rules choose own rectangles."""
    for rule in constraints.rules if constraints is not None else ():
        if rule.kind in ("grid", "place", "keep-out") or (isinstance(rule, Together) and rule.how is TogetherHow.TOUCH):
            return rule
    return None


def refuse_rules(request: SolveRequest, shares_cores: bool, chooses_regions: bool) -> None:
    """Refuse, with the reason, a rule no solver of this way of running can honour: rules on kernels'
    own rectangles when kernels share regions of a fixed grid (``--grid``) or of the user's region
    groups, region groups where no sharing search runs. Under ``--share auto`` rules on own
    rectangles alone choose own rectangles (``SharedRegions``): a plan made so, re-solved with
    ``--from-plan``, pins its kernels again."""
    constraints = request.constraints
    if constraints is None:
        return
    pinned = rectangle_rule(constraints)
    grouped = next((r for r in constraints.rules if isinstance(r, Together) and r.how is TogetherHow.REGION), None)
    if shares_cores and pinned is not None and (not chooses_regions or grouped is not None):
        rule = f"{constraints.where(pinned)}: a {'together-touch' if isinstance(pinned, Together) else pinned.kind} rule"
        if grouped is not None:
            raise ValueError(
                f"{rule} applies to kernels that own their rectangle and {constraints.where(grouped)} puts kernels in one "
                "region of cores shared in time: one plan cannot have both (drop one of the two rules)"
            )
        raise ValueError(
            f"{rule} applies to kernels that own their rectangle; with --grid kernels share regions of that grid "
            "(use --share auto or none for it, or drop the rule)"
        )
    if grouped is not None and not chooses_regions:
        raise ValueError(
            f"{constraints.where(grouped)}: 'how: region' puts kernels in one region of cores shared in time, which only "
            "--share auto chooses (with --objective latency); use 'how: wafer' for a pipeline over wafers"
        )


class Constrained(Wrapper):
    """``inner`` under the user's rules (see the module docstring). Everything but the conflict test and
    the price is the inner strategy's."""

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        if costs.applied is not None:  # a conflict is explained before any solver runs
            say(f"constraints: testing {len(costs.applied.constraints.rules):,} rules for conflicts")
            # (rules on own rectangles under --share auto choose own rectangles: their cores add up)
            shared = self.shares_cores and rectangle_rule(request.constraints) is None
            check_conflicts(costs, request.wafer_count, shared=shared, deadline=deadline)
        return self._priced(request, self.inner.decide(costs, request, deadline, say))

    def retry(
        self, costs: CostTable, request: SolveRequest, prepared: Prepared, deadline: Deadline, say: Progress = quiet
    ) -> Prepared | None:
        again = self.inner.retry(costs, request, prepared, deadline, say)
        return self._priced(request, again) if again is not None else None

    def _priced(self, request: SolveRequest, prepared: Prepared) -> Prepared:
        applied = prepared.base.applied
        if applied is None:
            return prepared
        reference = self.inner.price_reference(request, prepared)
        price = Price(applied.constraints.source, len(applied.constraints.rules), reference.value, reference.optimal)
        return replace(prepared, price=price)
