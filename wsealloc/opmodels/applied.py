"""The user's constraints resolved against one model's kernels: what every later layer reads.

Kernels are named (not numbered), so the record survives a pipeline stage's subset of the table and a
renumbering; areas are boxes ``(row, col, rows, cols)`` on the wafer, half-open.
"""

from __future__ import annotations

from dataclasses import dataclass

from wsealloc.constraints.geometry import Box
from wsealloc.constraints.schema import Constraints, Rule


@dataclass(frozen=True)
class Applied:
    """The constraints of a request as they apply to one model (``opmodels.constrain.apply``)."""

    constraints: Constraints
    members: tuple[tuple[str, ...], ...]  # per rule (file order): the kernels it applies to
    keep_out: tuple[tuple[int, Box], ...]  # (rule index, box on the wafer)
    pins: tuple[tuple[str, int, tuple[int, int]], ...]  # (kernel, rule index, top-left corner)
    fences: tuple[tuple[str, tuple[int, ...], Box], ...]  # (kernel, rule indices, the area all of them leave it)
    cuts: tuple[tuple[str, int, bool], ...]  # (cut after this kernel, rule index, must)
    wafer_groups: tuple[tuple[int, tuple[str, ...]], ...]  # (rule index, kernels on one wafer)
    region_groups: tuple[tuple[int, tuple[str, ...]], ...]  # (rule index, kernels sharing one region)
    touch_groups: tuple[tuple[int, tuple[str, ...]], ...]  # (rule index, kernels side by side; also a wafer group)
    kept_out_cores: int  # cores of the wafer inside some keep-out area

    def where(self, index: int) -> str:
        """``c.yaml line 4`` for rule ``index``."""
        return self.constraints.where(self.constraints.rules[index])

    def rule(self, index: int) -> Rule:
        """Rule ``index`` (file order)."""
        return self.constraints.rules[index]

    def pin_of(self, name: str) -> tuple[int, tuple[int, int]] | None:
        """(rule index, corner) of a kernel's fixed corner, or None."""
        return next(((i, at) for k, i, at in self.pins if k == name), None)

    def fence_of(self, name: str) -> tuple[tuple[int, ...], Box] | None:
        """(rule indices, area) a kernel must stay within (the areas of all its ``within`` rules
        intersected), or None."""
        return next(((i, box) for k, i, box in self.fences if k == name), None)

    @property
    def obstacles(self) -> tuple[Box, ...]:
        """The keep-out boxes."""
        return tuple(box for _, box in self.keep_out)
