"""The user's constraints as a wrapper around any strategy: the rules live in the cost table's op-model
tables already (``opmodels.constrain``: every solver honours them there); the wrapper refuses, up
front, a rule the wrapped strategy cannot honour, explains conflicting rules before any solver runs
(``solvers.conflicts``), and adds the price: the wrapped strategy's proven bound without the rules
beside the plan's bound with them."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from wsealloc.budget import Deadline
from wsealloc.constraints import Together, TogetherHow
from wsealloc.opmodels import CostTable
from wsealloc.solvers.conflicts import check as check_conflicts
from wsealloc.strategy.base import Prepared, Price, Progress, Wrapper, quiet

if TYPE_CHECKING:
    from wsealloc.request import SolveRequest


def refuse_rules(request: SolveRequest, shares_cores: bool, chooses_regions: bool) -> None:
    """Refuse, with the reason, a rule no solver of this way of running can honour: rules on kernels'
    own rectangles when kernels share regions, region groups where no sharing search runs."""
    constraints = request.constraints
    if constraints is None:
        return
    for rule in constraints.rules:
        touch = isinstance(rule, Together) and rule.how is TogetherHow.TOUCH
        if shares_cores and (rule.kind in ("grid", "place", "keep-out") or touch):
            raise ValueError(
                f"{constraints.where(rule)}: a {'together-touch' if touch else rule.kind} rule applies to kernels that own "
                "their rectangle; with --share/--grid "
                "kernels share regions whose grids the sharing search chooses (use --share none, or group kernels "
                "with 'together: ... how: region')"
            )
        if isinstance(rule, Together) and rule.how is TogetherHow.REGION and not chooses_regions:
            raise ValueError(
                f"{constraints.where(rule)}: 'how: region' puts kernels in one region of cores shared in time, which only "
                "--share auto chooses (with --objective latency); use 'how: wafer' for a pipeline over wafers"
            )


class Constrained(Wrapper):
    """``inner`` under the user's rules (see the module docstring). Everything but the conflict test and
    the price is the inner strategy's."""

    def decide(self, costs: CostTable, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> Prepared:
        if costs.applied is not None:  # a conflict is explained before any solver runs
            say(f"constraints: testing {len(costs.applied.constraints.rules):,} rules for conflicts")
            check_conflicts(costs, request.wafer_count, shared=self.shares_cores, deadline=deadline)
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
