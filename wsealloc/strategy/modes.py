"""The user's words for a way to run a model, as a request states them (``--mode``, ``--share``,
``--grid``): which strategy a request asks for (``strategy.registry.strategy_for``) is read from these
and nothing else. They live here, below the request, because a strategy reads them and the request
records them as the user gave them."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Side = Annotated[int, Field(strict=True, ge=1, le=2**24)]
Family = Literal["squares", "shelves", "columns", "stacked"]


class ShareMode(str, enum.Enum):
    """How kernels may share cores in time (``cost.region``)."""

    NONE = "none"  # every kernel owns its rectangle (a layer pipeline)
    AUTO = "auto"  # the solver chooses runs of consecutive kernels and each run's grid (solvers.share)
    GRID = "grid"  # every kernel on one fixed R x C grid, runs packed by SRAM (WaferLLM's mapping)


class Mode(str, enum.Enum):
    """How the model runs on the wafer: resident or streamed weights."""

    PIPELINED = "pipelined"  # every kernel resident on its own rectangle (the layer pipeline)
    STREAMING = "streaming"  # one kernel at a time on the whole wafer, weights streamed in (cost.streaming)
    AUTO = "auto"  # the faster of the two that fits (strategy.auto: their proven bounds compared)


class Sharing(BaseModel):
    """Cores shared in time: the mode, the grid of ``GRID``, and the region grids ``AUTO`` chooses from
    (``problem.sharing.candidate_shapes``: ``stacked``, the default, columns of 1-4 regions one above
    the other, which always pack side by side; ``squares``, squares and 4:3 rectangles, a little faster
    for a token's collectives but not always packable, so a solve falls back to ``stacked`` when they
    do not pack (the plan's decision says which family its regions are of); ``shelves`` and
    ``columns``, regions of half and all of the wafer's height)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: ShareMode = ShareMode.NONE
    grid: tuple[Side, Side] | None = None
    family: Family = "stacked"

    @model_validator(mode="after")
    def _grid_given(self) -> Sharing:
        if (self.mode is ShareMode.GRID) != (self.grid is not None):
            raise ValueError("--grid RxC fixes every kernel's grid; it comes with share mode 'grid' only")
        return self
