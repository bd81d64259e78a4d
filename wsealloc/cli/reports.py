"""``wsealloc compare``: greedy vs. solver vs. exact bound, as a table, JSON, HTML and Markdown."""

from __future__ import annotations

import json

import click
from rich.table import Table

from wsealloc.cli.options import model_options, solver_options, with_request
from wsealloc.errors import UsageError
from wsealloc.report.console import console as make_console
from wsealloc.request import SolveRequest, check_outputs


@click.command("compare")
@model_options
@solver_options
@click.option("--report", "report_path", default=None, help="Write a self-contained HTML report here.")
@click.option("--md", "md_path", default=None, help="Write a Markdown report here (pictures as data URIs).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of a table.")
@with_request
def compare(
    request: SolveRequest,
    model: str,
    arch: str | None,
    no_place: bool,
    from_plan: str | None,
    report_path: str | None,
    md_path: str | None,
    as_json: bool,
) -> None:
    """Greedy vs. solver vs. exact bound for MODEL on the same cost model: table, HTML and Markdown reports."""
    from wsealloc.plan.io import write_atomic
    from wsealloc.report.compare import COLUMNS, cells, to_html, to_markdown
    from wsealloc.report.compare import compare as run_compare

    for option, path, suffixes in (("--report", report_path, (".html", ".htm")), ("--md", md_path, (".md", ".markdown"))):
        if path is not None and not path.lower().endswith(suffixes):
            raise UsageError(f"{option} {path}: expected a {suffixes[0]} file name")
    check_outputs(model, arch, {"--report": report_path, "--md": md_path})
    result = run_compare(request)
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
