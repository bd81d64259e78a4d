"""CLI commands for reports, benchmark suites and architecture sweeps (``compare``, ``bench``, ``sweep``).

Kept apart from ``wsealloc/cli.py`` so the report layer can grow without touching the core commands;
``register`` attaches them to the main click group.
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from wsealloc.arch.loader import arch_file
from wsealloc.cli_options import model_options
from wsealloc.errors import UsageError
from wsealloc.report.console import console as make_console


def _compare(
    model: str,
    arch: str,
    sets: tuple[str, ...],
    dims: tuple[str, ...],
    cost_model: str,
    no_fuse: bool,
    allow_unknown_ops: bool,
    debug: bool,
    solver: str,
    time_limit: float,
    workers: int,
    seed: int,
    no_place: bool,
    report_path: str | None,
    md_path: str | None,
    as_json: bool,
) -> None:
    """Greedy vs. solver vs. exact bound for MODEL on the same cost model: table, HTML and Markdown reports."""
    from wsealloc.pipeline import parse_dims
    from wsealloc.plan.io import check_distinct_outputs, check_writable, write_atomic
    from wsealloc.report.compare import COLUMNS, cells, to_html, to_markdown
    from wsealloc.report.compare import compare as run_compare

    check_distinct_outputs({"model": model, "arch": arch_file(arch)}, {"--report": report_path, "--md": md_path})

    for option, path, suffixes in (("--report", report_path, (".html", ".htm")), ("--md", md_path, (".md", ".markdown"))):
        if path is not None:
            if not path.lower().endswith(suffixes):
                raise UsageError(f"{option} {path}: expected a {suffixes[0]} file name")
            check_writable(path)
    result = run_compare(
        model,
        arch,
        dims=parse_dims(dims),
        sets=sets,
        solver=solver,
        time_limit=time_limit,
        place=not no_place,
        seed=seed,
        workers=workers,
        cost=cost_model,
        fuse=not no_fuse,
        allow_unknown_ops=allow_unknown_ops,
    )
    if report_path is not None:
        write_atomic(report_path, to_html(result))
    if md_path is not None:
        write_atomic(md_path, to_markdown(result))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
        return
    table = Table(title=f"{model} on {result.arch}: solver speed-up over greedy {result.speedup:.2f}x")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("allocation", "bottleneck kernel", "bound by", "status") else "right")
    for row in result.rows:
        table.add_row(*cells(row))
    console = make_console()
    console.print(table)
    for label, path in (("HTML report", report_path), ("Markdown report", md_path)):
        if path:
            console.print(f"{label} written to {path}", highlight=False)


def compare_command() -> click.Command:
    """The ``compare`` command, with the model options every model command shares."""
    options = [
        click.option(
            "--solver", default="cpsat", show_default=True, help="cpsat, pulp, pulp-highs, bisect, greedy, greedy-seed."
        ),
        click.option("--time-limit", default=30.0, show_default=True, type=float, help="Seconds per solver stage."),
        click.option("--workers", default=1, show_default=True, type=int, help="CP-SAT search workers."),
        click.option("--seed", default=0, show_default=True, type=int, help="Random seed of the solvers."),
        click.option("--no-place", is_flag=True, help="Compare allocations only (no floorplan)."),
        click.option("--report", "report_path", default=None, help="Write a self-contained HTML report here."),
        click.option("--md", "md_path", default=None, help="Write a Markdown report here (pictures as data URIs)."),
        click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of a table."),
    ]
    fn = _compare
    for option in reversed(options):
        fn = option(fn)
    return click.command("compare")(model_options(fn))


def register(group: click.Group) -> None:
    """Attach the report commands (``compare``, ``bench``, ``sweep``) to ``group``."""
    from wsealloc.bench.cli import bench, sweep

    for command in (compare_command(), bench, sweep):
        group.add_command(command)


__all__ = ["UsageError", "register"]
