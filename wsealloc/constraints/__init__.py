"""The user's constraints (``--constraints c.yaml``): typed rules read once at the boundary
(``load``), the kernels each selects (``select``) and where rectangles fit among keep-out areas
(``geometry``). The op-model tables learn them in ``opmodels.constrain``; docs/constraints.md has the
format."""

from wsealloc.constraints.load import parse_constraints, read_constraints
from wsealloc.constraints.schema import (
    Area,
    Constraints,
    CutRule,
    GridRule,
    KeepOut,
    PlaceRule,
    Rule,
    Selector,
    Span,
    Together,
    TogetherHow,
)

__all__ = [
    "Area",
    "Constraints",
    "CutRule",
    "GridRule",
    "KeepOut",
    "PlaceRule",
    "Rule",
    "Selector",
    "Span",
    "Together",
    "TogetherHow",
    "parse_constraints",
    "read_constraints",
]
