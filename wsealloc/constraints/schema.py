"""Typed, frozen constraints from the user (validated once at the boundary, recorded in plans).

A constraints file is a YAML list; each entry is one *rule* with the line it starts on (messages and
conflict explanations name it). Five kinds (``docs/constraints.md`` has an example of each):

* ``grid``: the selected kernels' grids: a fixed ``shape`` RxC, or bounds on ``rows``, ``cols``,
  ``cores``; a ``dataflow``;
* ``place``: the selected kernels' rectangles: top-left corner ``at`` [row, col], or ``within`` an
  area of the wafer;
* ``keep-out``: an area of the wafer no kernel may use;
* ``together``: the selected kernels stay on one wafer (``how: wafer``) or share one region of cores
  in time (``how: region``, with ``--share``);
* ``cut``: the pipeline over several wafers must (``must: true``) or must not be cut after a kernel.

Areas are inclusive ``[first, last]`` row and column ranges (``rows: [0, 99]`` is 100 rows), as a
user reads them off a floorplan; :class:`Area` turns them into half-open numbers.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from wsealloc.cost.model import Dataflow
from wsealloc.errors import shorten

Index = Annotated[int, Field(strict=True, ge=0, le=2**24)]
Count = Annotated[int, Field(strict=True, ge=1, le=2**48)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Rule(_Frozen):
    """What every rule has: the line it starts on (0: not from a file) and, for rules not from the
    constraints file itself (``--from-plan``), where they come from."""

    line: int = Field(0, strict=True, ge=0)
    source: str = ""
    # a rule an old plan gave (``--from-plan``) for a kernel the model may no longer have: such a rule is
    # dropped for that model (``select.present``), and the re-solve lists the kernel as gone
    optional: bool = False

    @model_serializer(mode="wrap")
    def _without_default(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A plan records ``optional`` only where it is true: a rule of the user's file reads as the
        previous release wrote it (which refuses fields it does not know)."""
        data: dict[str, Any] = handler(self)
        if not self.optional:
            data.pop("optional", None)
        return data


class Selector(_Frozen):
    """Which kernels a rule applies to: every kernel meeting all the given parts.

    ``names``: exact kernel names or globs (``node_addmm_*``), any of them; ``ops``: the anchor's ONNX
    op type (``MatMul``) or the kernel's type as ``inspect`` shows it (``matmul``, ``norm``), any of
    them, case-insensitive; ``range``: the first and last kernel (names or positions in dataflow
    order, inclusive)."""

    names: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    range: tuple[str | Index, str | Index] | None = None

    @model_validator(mode="after")
    def _something(self) -> Selector:
        if not (self.names or self.ops or self.range is not None):
            raise ValueError("selects nothing: give kernel names or globs, {op: TYPE} or {range: [FIRST, LAST]}")
        return self

    def text(self) -> str:
        """How the selection reads in a message (each name or op as much of it as a message quotes)."""
        parts = []
        if self.names:
            names = [shorten(n) for n in self.names[:3]]
            parts.append(", ".join(names) if len(self.names) <= 3 else f"{', '.join(names)}, ...")
        if self.ops:
            parts.append(f"op {'/'.join(shorten(op) for op in self.ops[:3])}{'/...' if len(self.ops) > 3 else ''}")
        if self.range is not None:
            parts.append(f"{shorten(str(self.range[0]))}..{shorten(str(self.range[1]))}")
        return " ".join(parts)


class Span(_Frozen):
    """Inclusive bounds ``[min, max]`` (either may be open: None)."""

    min: Count | None = None
    max: Count | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.min is None and self.max is None:
            raise ValueError("bounds [null, null] bound nothing; give a min, a max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"bounds [{self.min}, {self.max}]: min is above max")
        return self

    def text(self) -> str:
        """``64..256``, ``>= 64`` or ``<= 256``."""
        if self.min is not None and self.max is not None:
            return str(self.min) if self.min == self.max else f"{self.min:,}..{self.max:,}"
        return f">= {self.min:,}" if self.min is not None else f"<= {self.max:,}"


class Area(_Frozen):
    """An area of the wafer: inclusive row and column ranges ``[first, last]``; a range left out is
    the whole wafer's (``rows: [0, 99]`` alone is the top 100 rows)."""

    rows: tuple[Index, Index] | None = None
    cols: tuple[Index, Index] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Area:
        if self.rows is None and self.cols is None:
            raise ValueError("an area needs rows: [first, last], cols: [first, last] or both")
        for name, span in (("rows", self.rows), ("cols", self.cols)):
            if span is not None and span[0] > span[1]:
                raise ValueError(f"{name} [{span[0]}, {span[1]}]: the first is after the last")
        return self

    def box(self, wafer_rows: int, wafer_cols: int) -> tuple[int, int, int, int]:
        """(row, col, rows, cols) on a wafer of that size: the top-left core and the size, half-open,
        clipped to the wafer (a range past its edge keeps only what lies on it)."""
        r0, r1 = self.rows if self.rows is not None else (0, wafer_rows - 1)
        c0, c1 = self.cols if self.cols is not None else (0, wafer_cols - 1)
        r1, c1 = min(r1, wafer_rows - 1), min(c1, wafer_cols - 1)
        return r0, c0, max(0, r1 - r0 + 1), max(0, c1 - c0 + 1)

    def text(self) -> str:
        """``rows 0-99, cols 0-993`` (a range left out: ``all cols``)."""
        rows = f"rows {self.rows[0]}-{self.rows[1]}" if self.rows is not None else "all rows"
        cols = f"cols {self.cols[0]}-{self.cols[1]}" if self.cols is not None else "all cols"
        return f"{rows}, {cols}"


class GridRule(_Rule):
    """The selected kernels' grids (every given part must hold)."""

    kind: Literal["grid"] = "grid"
    select: Selector
    shape: tuple[Count, Count] | None = None
    rows: Span | None = None
    cols: Span | None = None
    cores: Span | None = None
    dataflow: Dataflow | None = None

    @model_validator(mode="after")
    def _something(self) -> GridRule:
        if self.shape is None and self.rows is None and self.cols is None and self.cores is None and self.dataflow is None:
            raise ValueError("a grid rule needs shape: RxC, rows/cols/cores: [min, max] or dataflow")
        if self.shape is not None and (self.rows is not None or self.cols is not None or self.cores is not None):
            raise ValueError("shape fixes rows and cols: drop rows/cols/cores beside it")
        return self

    def text(self) -> str:
        """What the rule says, for messages."""
        parts = []
        if self.shape is not None:
            parts.append(f"to {self.shape[0]} x {self.shape[1]}")
        for name, span in (("rows", self.rows), ("cols", self.cols), ("cores", self.cores)):
            if span is not None:
                parts.append(f"{name} {span.text()}")
        if self.dataflow is not None:
            parts.append(f"dataflow {self.dataflow.name.lower()}")
        return (
            f"pins {self.select.text()} {' '.join(parts)}" if self.shape else f"bounds {self.select.text()}: {', '.join(parts)}"
        )


class PlaceRule(_Rule):
    """The selected kernels' rectangles: a fixed top-left corner, or an area they stay inside."""

    kind: Literal["place"] = "place"
    select: Selector
    at: tuple[Index, Index] | None = None
    within: Area | None = None

    @model_validator(mode="after")
    def _one(self) -> PlaceRule:
        if (self.at is None) == (self.within is None):
            raise ValueError("a place rule takes at: [row, col] or within: {rows: [a, b], cols: [c, d]} (one of them)")
        return self

    def text(self) -> str:
        """What the rule says, for messages."""
        if self.at is not None:
            return f"places {self.select.text()} at row {self.at[0]}, col {self.at[1]}"
        assert self.within is not None
        return f"keeps {self.select.text()} within {self.within.text()}"


class KeepOut(_Rule):
    """An area of the wafer no kernel may use (reserved cores, a known-bad region)."""

    kind: Literal["keep-out"] = "keep-out"
    area: Area

    def text(self) -> str:
        """What the rule says, for messages."""
        return f"keeps {self.area.text()} out"


class TogetherHow(str, enum.Enum):
    """What ``together`` asks of its kernels."""

    WAFER = "wafer"  # one wafer of a pipeline over several (no cut between them)
    REGION = "region"  # one region of cores shared in time (--share)
    TOUCH = "touch"  # rectangles side by side, one connected group on one wafer (placement)


class Together(_Rule):
    """The selected kernels stay together (one wafer, one shared region, or side by side)."""

    kind: Literal["together"] = "together"
    select: Selector
    how: TogetherHow = TogetherHow.WAFER

    def text(self) -> str:
        """What the rule says, for messages."""
        if self.how is TogetherHow.TOUCH:
            return f"keeps {self.select.text()} side by side (touching)"
        return f"keeps {self.select.text()} on one {self.how.value}"


class CutRule(_Rule):
    """The pipeline over several wafers is (``must``) or is not cut right after kernel ``after``."""

    kind: Literal["cut"] = "cut"
    after: str | Index
    must: bool = True

    def text(self) -> str:
        """What the rule says, for messages."""
        return f"{'cuts' if self.must else 'forbids a cut'} after {shorten(str(self.after))}"


Rule = Annotated[GridRule | PlaceRule | KeepOut | Together | CutRule, Field(discriminator="kind")]
KINDS: tuple[str, ...] = ("grid", "place", "keep-out", "together", "cut")


class Constraints(_Frozen):
    """Every rule of one constraints file (or of a previous plan, ``--from-plan``), in file order.

    ``source`` names where they come from in messages (a path, or ``old.json`` for pins taken from a
    plan); ``sha256`` is the file's (plans record it, verify checks the rules themselves, not the file)."""

    source: str
    sha256: str = ""
    rules: tuple[Rule, ...] = ()

    def where(self, rule: Rule) -> str:
        """``c.yaml line 4`` (a rule taken from a plan: ``old.json``, as its ``source`` says)."""
        source = rule.source or self.source
        return f"{source} line {rule.line}" if rule.line else source

    def of_kind(self, kind: str) -> tuple[Rule, ...]:
        """The rules of one kind, in file order."""
        return tuple(r for r in self.rules if r.kind == kind)

    def merged(self, other: Constraints) -> Constraints:
        """These rules and ``other``'s (a file and pins from a plan), each still naming where it came
        from; the sources joined."""
        own = tuple(r if r.source else r.model_copy(update={"source": self.source}) for r in self.rules)
        theirs = tuple(r if r.source else r.model_copy(update={"source": other.source}) for r in other.rules)
        return Constraints(source=f"{self.source} + {other.source}", sha256=self.sha256, rules=own + theirs)
