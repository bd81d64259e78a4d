"""Proven lower bounds on the largest kernel time of an ISPD-2020 instance, from the kernel library alone.

Three bounds, each valid for every legal solution (proofs in ``docs/ispd2020.md``, "Lower bounds"):

- **single kernel**: no solution is faster than its slowest kernel at its fastest legal model;
- **area**: at time T every kernel needs a legal model with time <= T, at least as large as its
  smallest such model, and the rectangles are disjoint inside the fabric: the smallest T at which
  the sum of those smallest areas is within width x height (the figure the contest's README quotes);
- **fabric**: the area condition, and also: a kernel whose every legal model with time <= T is wider
  than half the fabric crosses the fabric's vertical midline, so all such kernels are stacked one
  above the other and their smallest heights must sum to at most the fabric height (and the same
  with the roles of height and width swapped). The smallest T meeting all three conditions.

All three conditions only get easier as T grows (more models become eligible), so each bound is
found by bisection over the distinct model times. The module lives in ``problem`` because it is
numbers handed to solvers (a target floor, a gap to report); it reads op models, never a solver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wsealloc.errors import InfeasibleError
from wsealloc.graph.contest import ContestGraph
from wsealloc.opmodels.contest import ContestOpModels, enumerate_graph
from wsealloc.search import first_true


@dataclass(frozen=True)
class ContestBounds:
    """The lower bounds on the largest kernel time of one instance; ``value`` is the strongest."""

    single_kernel: int
    single_kernel_name: str  # the kernel whose fastest legal model sets the single-kernel bound
    area: int
    fabric: int  # the area bound strengthened by the midline stacking conditions
    fabric_area: int
    area_used: int  # sum of the smallest areas at the area bound (<= fabric_area)

    @property
    def value(self) -> int:
        """The strongest of the bounds."""
        return max(self.single_kernel, self.area, self.fabric)

    def to_dict(self) -> dict[str, object]:
        """Plain-dict form for reports and ``--json``."""
        return {
            "single_kernel": self.single_kernel,
            "single_kernel_name": self.single_kernel_name,
            "area": self.area,
            "fabric": self.fabric,
            "value": self.value,
            "fabric_area": self.fabric_area,
            "area_used": self.area_used,
        }


@dataclass(frozen=True)
class _Profile:
    """Per kernel class, over its models sorted by time: prefix minima of area, height and width."""

    time: np.ndarray
    area: np.ndarray
    height: np.ndarray
    width: np.ndarray
    count: int  # identical kernels sharing this class

    @classmethod
    def of(cls, m: ContestOpModels, count: int) -> _Profile:
        # models come fastest first; a dominated model never lowers these minima, so the frontier suffices
        return cls(
            m.time,
            np.minimum.accumulate(m.height * m.width),
            np.minimum.accumulate(m.height),
            np.minimum.accumulate(m.width),
            count,
        )

    def at(self, t: int) -> int:
        """Position of the last model with time <= t (-1: none)."""
        return int(np.searchsorted(self.time, t, side="right")) - 1


def min_total_area(models: Sequence[ContestOpModels], time_target: int) -> int | None:
    """Sum over kernels of the smallest legal area with time <= ``time_target`` (None: some kernel cannot be that fast)."""
    total = 0
    for m in models:
        a = m.min_area_within(time_target)
        if a is None:
            return None
        total += a
    return total


def contest_bounds(graph: ContestGraph, models: Sequence[ContestOpModels] | None = None) -> ContestBounds:
    """The single-kernel, area and fabric lower bounds of an instance (``models``: its op models, computed if absent)."""
    ms = enumerate_graph(graph) if models is None else tuple(models)
    fab = graph.fabric
    classes: dict[tuple[object, object], list[ContestOpModels]] = {}
    for m in ms:
        classes.setdefault((m.kernel.kind, m.kernel.args), []).append(m)
    profiles = [_Profile.of(group[0], len(group)) for group in classes.values()]
    slowest = max(ms, key=lambda m: m.fastest_time)
    single = slowest.fastest_time
    times = np.unique(np.concatenate([p.time for p in profiles]))
    times = times[times >= single]

    def area_ok(t: int) -> bool:
        return _area(profiles, t) <= fab.area

    def fabric_ok(t: int) -> bool:
        if not area_ok(t):
            return False
        stack_h = stack_w = 0
        for p in profiles:
            i = p.at(t)
            if 2 * int(p.width[i]) > fab.width:  # every eligible model crosses the vertical midline
                stack_h += p.count * int(p.height[i])
            if 2 * int(p.height[i]) > fab.height:  # every eligible model crosses the horizontal midline
                stack_w += p.count * int(p.width[i])
        return stack_h <= fab.height and stack_w <= fab.width

    area = first_true(times, area_ok)
    if area is None:
        least = _area(profiles, int(times[-1]))
        raise InfeasibleError(
            f"{graph.source}: the smallest legal rectangles of the {len(ms)} kernels cover {least:,} tiles, "
            f"more than the {fab.width}x{fab.height} fabric's {fab.area:,}; no placement exists"
        )
    fabric = first_true(times, fabric_ok)
    if fabric is None:
        raise InfeasibleError(
            f"{graph.source}: the kernels wider (or taller) than half the fabric cannot be stacked within it "
            "even at their smallest legal models; no placement exists"
        )
    return ContestBounds(single, slowest.kernel.name, area, fabric, fab.area, _area(profiles, area))


def _area(profiles: list[_Profile], t: int) -> int:
    total = 0
    for p in profiles:
        i = p.at(t)
        if i < 0:
            return np.iinfo(np.int64).max
        total += p.count * int(p.area[i])
    return total
