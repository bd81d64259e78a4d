"""What every plan document reports the same way (``Plan.headline()``, ``ContestPlan.headline()``):
the objective's value and proven bound, gap, status and the baseline, so the bench rows and reports
read any plan without asking which kind it is."""

from __future__ import annotations

from dataclasses import dataclass

from wsealloc.solvers.base import Status


@dataclass(frozen=True)
class Headline:
    """The numbers a bench row or a one-line summary needs of a plan."""

    kernels: int
    value: int  # the objective's value in cycles (the bottleneck, a token's time, the contest's max time)
    bound: int | None  # its proven lower bound
    gap: float | None
    status: Status
    baseline: int | None = None  # the greedy baseline's value (placed, for placed plans)
    wirelength: float | None = None  # the contest's
    score: float | None = None  # the contest's
    # LLM exports: one request's tokens per second and every request's, on how many wafers
    tokens_per_s_per_request: float | None = None
    aggregate_tokens_per_s: float | None = None
    wafers: int = 1

    @property
    def speedup(self) -> float | None:
        """Baseline / value (a throughput ratio); None without a baseline."""
        return None if not self.baseline else self.baseline / max(self.value, 1)
