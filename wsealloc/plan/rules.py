"""The invariants a plan's summary numbers follow, in one place for the builder and the verifier.

Both sides call these on *their own* numbers: the builder on what the solvers returned, the verifier
on what it recomputed from the model and the cost model. A bug here would be shared, so every rule
is small, pure, and has hand-computed unit tests (tests/test_plan_rules.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from wsealloc.plan.schema import BoundBy
from wsealloc.problem.objective import ObjectiveKind, paced, path_length

# Communication is named beside the op model's own bound when it adds at least this share.
COMMUNICATION_SHARE = 0.1


def bound_by(compute: int, noc: int, latency: int, comm: int, stream: int = 0) -> BoundBy:
    """What dominates a kernel's stage time ``latency + comm``: compute or NoC (its op model), plus
    communication when that adds >= 10% of the stage, or communication alone when it exceeds both; the
    off-wafer weight stream (weight streaming) when it takes longer than compute and NoC."""
    if comm > max(compute, noc, stream):
        return BoundBy.COMMUNICATION
    if stream > max(compute, noc):
        return BoundBy.STREAM
    with_comm = comm >= COMMUNICATION_SHARE * (latency + comm)
    if compute >= noc:
        return BoundBy.COMPUTE_COMMUNICATION if with_comm else BoundBy.COMPUTE
    return BoundBy.NOC_COMMUNICATION if with_comm else BoundBy.NOC


def objective_value(kind: ObjectiveKind, stage_cycles: Sequence[int], preds: Sequence[Sequence[int]], requests: int = 1) -> int:
    """The objective's value of a plan's stage times: the slowest kernel (throughput), or each
    request's token time (latency: the longest path of stage times through ``preds``, or ``requests``
    times the slowest stage when that is longer: ``objective.paced``)."""
    if kind is ObjectiveKind.LATENCY:
        return paced(path_length(preds, (), list(stage_cycles)), max(stage_cycles, default=0), requests)
    return max(stage_cycles, default=0)


def wafers_value(
    kind: ObjectiveKind, slowest: int | None, wafer_values: Sequence[int | None], links: Sequence[int], requests: int = 1
) -> int | None:
    """The objective's value of a plan over several wafers: the slowest stage, transfers included
    (throughput: ``slowest``), or each request's token time (latency: one pass through every wafer and
    across every link between them, each wafer's path plus each cut's transfer, or ``requests`` times
    the slowest stage when that is longer). ``wafer_values``: each wafer's *path* (one pass). None when
    a wafer's value is."""
    if kind is not ObjectiveKind.LATENCY:
        return slowest
    if any(v is None for v in wafer_values):
        return None
    path = sum(int(v) for v in wafer_values if v is not None) + sum(links)
    return paced(path, slowest or 0, requests)


def bottleneck_index(stage_cycles: Sequence[int]) -> int:
    """The slowest kernel; among equals the first in the kernel order (deterministic)."""
    return max(range(len(stage_cycles)), key=lambda i: (stage_cycles[i], -i))


def gap(objective: int, bound: int | None) -> float | None:
    """(objective - bound) / objective, 0 when the objective is 0; None without a bound."""
    if bound is None:
        return None
    return 0.0 if objective == 0 else max(0.0, (objective - bound) / objective)


def proven_optimal(objective: int, bound: int | None) -> bool:
    """An objective at a proven lower bound is optimal, whatever the solver reported."""
    return bound is not None and objective <= bound


def throughput(clock_hz: float, bottleneck_cycles: int) -> float:
    """Samples per second of a pipeline whose slowest part takes ``bottleneck_cycles`` per sample."""
    return clock_hz / max(bottleneck_cycles, 1)


def stage_load(bottleneck_cycles: int, transfer_in: int, transfer_out: int) -> int:
    """Cycles per sample of one wafer of a pipeline: its slowest kernel, or receiving or sending
    what crosses its cuts, whichever is slowest."""
    return max(bottleneck_cycles, transfer_in, transfer_out)


def transfer_bound(bottleneck_cycles: int, transfer_in: int, transfer_out: int) -> bool:
    """Whether a wafer's load is a transfer (the kernels are faster than a cut)."""
    return max(transfer_in, transfer_out) > bottleneck_cycles


def receives_slowest_cut(transfer_in: int, transfer_out: int) -> str:
    """Which kernel a transfer-bound wafer names as its bottleneck: this wafer's ``first`` kernel when
    the incoming cut is at least as slow, else the ``next`` wafer's first (it receives the outgoing cut)."""
    return "first" if transfer_in >= transfer_out else "next"


def speedup(baseline_cycles: int | None, plan_cycles: int) -> float | None:
    """Baseline bottleneck / plan bottleneck (a throughput ratio); None without a baseline."""
    if baseline_cycles is None or plan_cycles == 0:
        return None
    return baseline_cycles / plan_cycles
