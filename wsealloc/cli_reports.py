"""CLI commands for reports, benchmark suites and architecture sweeps (``compare``, ``bench``, ``sweep``).

Kept apart from ``wsealloc/cli.py`` so the report layer can grow without touching the core commands;
``register`` attaches them to the main click group.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from wsealloc.errors import UsageError


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 160)


@click.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("--arch", default="wse2", show_default=True, help="Architecture preset or YAML path.")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help="Override an arch field (repeatable).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE", help="Bind a symbolic input dim (repeatable).")
@click.option("--solver", default="cpsat", show_default=True)
@click.option("--time-limit", default=30.0, show_default=True, type=float)
@click.option("--no-place", is_flag=True, help="Compare allocations only (no floorplan).")
@click.option("--report", "report_path", default=None, help="Write a self-contained HTML report here.")
@click.option("--md", "md_path", default=None, help="Write a Markdown report here.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def compare(
    model: str,
    arch: str,
    sets: tuple[str, ...],
    dims: tuple[str, ...],
    solver: str,
    time_limit: float,
    no_place: bool,
    report_path: str | None,
    md_path: str | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Greedy vs. solver vs. exact bound for MODEL: table, HTML and Markdown reports."""
    from wsealloc.pipeline import parse_dims
    from wsealloc.plan.io import check_writable, write_atomic
    from wsealloc.report.compare import _COLUMNS, _cells, to_html, to_markdown
    from wsealloc.report.compare import compare as run_compare

    for path in (report_path, md_path):
        if path is not None:
            check_writable(path)
    result = run_compare(model, arch, dims=parse_dims(dims), sets=sets, solver=solver, time_limit=time_limit, place=not no_place)
    if report_path is not None:
        write_atomic(report_path, to_html(result))
    if md_path is not None:
        write_atomic(md_path, to_markdown(result))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
        return
    table = Table(title=f"{model} on {result.arch}: solver speed-up over greedy {result.speedup:.2f}x")
    for col in _COLUMNS:
        table.add_column(col, justify="left" if col in ("allocation", "bottleneck kernel", "bound by", "status") else "right")
    for row in result.rows:
        table.add_row(*_cells(row))
    console = _console()
    console.print(table)
    for label, path in (("HTML report", report_path), ("Markdown report", md_path)):
        if path:
            console.print(f"{label} written to {path}", highlight=False)


def register(group: click.Group) -> None:
    """Attach the report commands to ``group``."""
    from wsealloc.bench.cli import bench, sweep

    for command in (compare, bench, sweep):
        group.add_command(command)


__all__ = ["UsageError", "register"]
