"""Click options shared by several commands (``cli.py`` and ``cli_reports.py`` both use them; a
module of its own keeps the two command modules from importing each other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from wsealloc.arch import PRESETS
from wsealloc.cost import CostOptions, cost_model_name

F = TypeVar("F", bound=Callable[..., Any])


def model_options(fn: F) -> F:
    """Options shared by every command that reads a model."""
    decorators = [
        click.argument("model", type=click.Path(dir_okay=True, path_type=str)),
        click.option(
            "--arch", "arch", default="wse2", show_default=True, help=f"Architecture preset ({', '.join(PRESETS)}) or YAML path."
        ),
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="FIELD=VALUE",
            help="Override an arch field, e.g. --set core.sram_bytes=96KiB (repeatable).",
        ),
        click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE", help="Bind a symbolic input dim (repeatable)."),
        click.option(
            "--cost-model",
            default="standard",
            show_default=True,
            help="standard (wsealloc's tiled model) or seed (the notebook's estimates).",
        ),
        click.option("--no-fuse", is_flag=True, help="One kernel per ONNX node (no epilogue/layout fusion)."),
        click.option(
            "--allow-unknown-ops",
            is_flag=True,
            help="Cost ops the model does not know as 1 vector op per output element (with a warning).",
        ),
        click.option("--debug", is_flag=True, help="Show tracebacks."),
    ]
    for deco in reversed(decorators):
        fn = deco(fn)
    return fn


def cost_options(cost_model_arg: str, allow_unknown: bool) -> CostOptions:
    """``--cost-model`` and ``--allow-unknown-ops`` as the cost model's options (unknown names list the choices)."""
    return replace(CostOptions(), model=cost_model_name(cost_model_arg), allow_unknown_ops=allow_unknown)
