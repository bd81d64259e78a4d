"""The multi-wafer problem: cut the kernels (in topological order) into contiguous pipeline stages,
one per wafer, each stage an allocation problem of its own, with the tensors crossing a cut sent over
the inter-wafer link.

A stage's load is max(its optimal bottleneck, the transfer cycles of the cut in front of it, the
transfer cycles of the cut behind it): link transfers are pipelined like compute. Transfer cycles of a
cut = ceil(bytes crossing it x clock / link bandwidth) + link latency x clock. A tensor that skips
several stages crosses every cut in between (intermediate wafers forward it), once however many
kernels behind the cut read it (multicast, see ``wsealloc.problem.flows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.arch import Arch
from wsealloc.errors import InfeasibleError
from wsealloc.opmodels import CostTable
from wsealloc.problem.allocation import MAX_CYCLES, AllocationProblem, build_problem
from wsealloc.problem.flows import crossing_bytes, flows


@dataclass(frozen=True)
class StageProblem:
    """Kernels in topological order with their candidates, and the cost of cutting between them."""

    alloc: AllocationProblem  # total_cores = cores of ONE wafer
    cut_bytes: np.ndarray  # [n + 1]: bytes crossing the cut in front of kernel i (0 at both ends)
    cycles_per_byte: float  # clock / inter-wafer link bandwidth
    latency_cycles: int  # inter-wafer link latency in cycles
    # the user's cut rules (``opmodels.constrain``), per cut position (in front of kernel i): a cut may
    # be made there / must be made there. None: anywhere / nowhere in particular
    cut_allowed: np.ndarray | None = None
    cut_required: np.ndarray | None = None

    @property
    def n_kernels(self) -> int:
        """Number of kernels."""
        return self.alloc.n_kernels

    def transfer_cycles(self) -> np.ndarray:
        """[n + 1] cycles per sample to send what crosses each cut (0 at both ends: no cut)."""
        return transfer_cycles(self.cut_bytes, self.cycles_per_byte, self.latency_cycles)


def transfer_cycles(cut: np.ndarray, cycles_per_byte: float, latency_cycles: int) -> np.ndarray:
    """Cycles per sample to send each cut's bytes over the inter-wafer link (0 at both ends)."""
    raw = np.ceil(cut * cycles_per_byte) + latency_cycles
    raw[0] = raw[-1] = 0
    if raw.max(initial=0) >= MAX_CYCLES:
        # the cast below would overflow, and no solver handles such numbers
        raise InfeasibleError(
            f"sending a cut between wafers takes {raw.max():.3g} cycles per sample, beyond the {MAX_CYCLES:,} the "
            "solvers handle; check cluster.link_bytes_per_s and cluster.link_latency_s"
        )
    return raw.astype(np.int64)


def link_params(arch: Arch) -> tuple[float, int]:
    """(cycles per byte, latency cycles) of the arch's inter-wafer link."""
    return arch.clock_hz / arch.cluster.link_bytes_per_s, int(np.ceil(arch.cluster.link_latency_s * arch.clock_hz))


def cut_bytes(costs: CostTable) -> np.ndarray:
    """Bytes crossing each cut position of the kernel sequence (every flow between s and t crosses
    the cuts between them, whichever way it runs; a tensor read by several kernels behind the cut
    crosses it once)."""
    return crossing_bytes(len(costs.kernels), flows(costs))


def cut_rules(costs: CostTable) -> tuple[np.ndarray, np.ndarray] | None:
    """([n + 1] a cut may be made in front of kernel i, [n + 1] one must be) from the user's ``cut``
    rules and ``together: ... how: wafer`` groups (no cut between a group's first and last kernel);
    None without such rules."""
    applied = costs.applied
    if applied is None or not (applied.cuts or applied.wafer_groups):
        return None
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    n = len(costs.kernels)
    allowed = np.ones(n + 1, dtype=bool)
    required = np.zeros(n + 1, dtype=bool)
    for name, _, must in applied.cuts:
        if name in index:  # a stage's table holds only its own kernels
            (required if must else allowed)[index[name] + 1] = must
    for _, group in applied.wafer_groups:
        inside = [index[g] for g in group if g in index]
        if inside:
            allowed[min(inside) + 1 : max(inside) + 1] = False
    return allowed, required


def build_stage_problem(costs: CostTable) -> StageProblem:
    """The stage-partition problem of a cost table on its arch's cluster (with the user's cut rules)."""
    per_byte, latency = link_params(costs.arch)
    rules = cut_rules(costs)
    return StageProblem(
        alloc=build_problem(costs),
        cut_bytes=cut_bytes(costs),
        cycles_per_byte=per_byte,
        latency_cycles=latency,
        cut_allowed=rules[0] if rules else None,
        cut_required=rules[1] if rules else None,
    )
