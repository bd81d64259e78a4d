"""``wsealloc bench`` and ``wsealloc sweep`` (thin wrappers over :func:`wsealloc.bench.results.run_suite`
and :func:`wsealloc.bench.sweep.sweep`)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from click.core import ParameterSource
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from wsealloc.bench.runner import BenchRow
from wsealloc.budget import DEFAULT_TIME_LIMIT_S
from wsealloc.cli.options import (
    ASCII_FLOAT,
    ASCII_INT,
    debug_option,
    objective_sweep_options,
    serving_model_options,
    solver_settings_options,
    sweep_model_options,
    wafers_option,
    with_request,
)
from wsealloc.errors import OutputError, RegressionError, SweepError, UsageError
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.report.console import console as make_console
from wsealloc.request import SolveRequest


class _Advance:
    """A progress bar's hook: called once per finished instance; ``expect(n)`` adds n instances to its
    total (a frontier's or pools' solves are known round by round, after the checks that skip some)."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress, self.task, self.total = progress, task, 0

    def __call__(self, row: BenchRow) -> None:
        self.progress.update(self.task, advance=1, last=f"{row.instance}: {row.status}")

    def expect(self, count: int) -> None:
        self.total += count
        self.progress.update(self.task, total=self.total)


@contextmanager
def _progress(total: int | None, label: str) -> Iterator[_Advance]:
    """A rich progress bar on stderr (a TTY; silent otherwise) advanced once per finished instance
    (``total`` None: not known yet, ``expect`` adds to it); SIGTERM is turned into KeyboardInterrupt
    so the runner stops its workers like on Ctrl-C."""

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=make_console(err=True),
        disable=not sys.stderr.isatty(),
    )
    try:
        with progress:
            advance = _Advance(progress, progress.add_task(label, total=total, last=""))
            advance.total = total or 0
            yield advance
    finally:
        signal.signal(signal.SIGTERM, previous)


def _prepare_out(out_dir: str | Path) -> Path:
    """Create the results folder up front, so a bad ``--out`` fails before anything is solved."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: is a file; give a folder for the results")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--out {out}: cannot create the folder ({exc.strerror}); choose another --out") from None
    if not os.access(out, os.W_OK):
        raise OutputError(f"--out {out}: not writable; choose another --out")
    return out


def _jobs_option(default: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "-j", "--jobs", default=default, show_default=True, type=ASCII_INT, help="Instances run in parallel (one process each)."
    )


def _runner_options(default_jobs: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``-j`` and ``--scheduler``: where a command's solves run (worker processes, or a Dask cluster)."""
    scheduler = click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", help="Run on this Dask distributed cluster.")

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        return _jobs_option(default_jobs)(scheduler(fn))

    return decorate


@click.command()
@click.argument("suite")
@click.option("--out", "out_dir", default="bench-results", show_default=True, help="Folder for CSV, JSON and Markdown results.")
@_runner_options(1)
@click.option("--update-best", is_flag=True, help="Record results better than the suite's best-known values.")
@click.option(
    "--time-limit",
    default=None,
    type=ASCII_FLOAT,
    help=f"A folder of .kgraph instances: each instance's time limit [default: {DEFAULT_TIME_LIMIT_S:g}] "
    "(a YAML suite sets its own).",
)
@click.option("--time-cap", default=None, type=ASCII_FLOAT, help="A folder of .kgraph instances: see solve --time-cap.")
@click.option(
    "--best",
    "best_file",
    default=None,
    help="A folder of .kgraph instances: the suite YAML holding their best-known values [default: OUT/FOLDER.yaml].",
)
@debug_option
def bench(
    suite: str,
    out_dir: str,
    jobs: int,
    scheduler: str | None,
    update_best: bool,
    time_limit: float | None,
    time_cap: float | None,
    best_file: str | None,
    debug: bool,
) -> None:
    """Run every instance of SUITE (a name in instances/, a YAML path, or a folder of .kgraph contest
    instances); exit 5 on regressions."""
    from wsealloc.bench.results import run_suite, to_markdown
    from wsealloc.bench.suite import folder_suite, load_suite

    if Path(suite).is_dir():  # a folder of contest instances (the user's; the project ships none)
        best = Path(best_file) if best_file else Path(out_dir) / f"{Path(suite).resolve().name}.yaml"
        loaded = folder_suite(Path(suite), best, DEFAULT_TIME_LIMIT_S if time_limit is None else time_limit, time_cap)
    else:
        if best_file is not None or time_cap is not None or time_limit is not None:
            # a YAML suite's instances carry their own time limits: an option it would ignore is an error
            raise UsageError(
                "--best, --time-limit and --time-cap apply to a folder of .kgraph instances; "
                "a YAML suite sets its own (time_limit, time_cap per instance)"
            )
        loaded = load_suite(suite)  # a bad suite, -j or --out fails before anything runs
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    _prepare_out(out_dir)
    with _progress(len(loaded.tasks), f"bench {loaded.suite.name}") as advance:
        run = run_suite(loaded, out=out_dir, jobs=jobs, scheduler=scheduler, update_best=update_best, on_done=advance)
    click.echo(to_markdown(run.rows), nl=False)
    click.echo(f"results written to {', '.join(str(p) for p in run.written)}")
    if run.improved:
        click.echo(f"recorded new best-known values in {run.path}: {', '.join(run.improved)}")
    if not run.passed:
        for message in run.failures:
            click.echo(f"wsealloc: failed: {message}", err=True)
        for message in run.regressions:
            click.echo(f"wsealloc: regression: {message}", err=True)
        raise RegressionError(run.gate_message())


@click.command()
@sweep_model_options
@click.option(
    "--set",
    "axes",
    multiple=True,
    required=True,
    metavar="FIELD=V1,V2,...",
    help="A swept arch field, or context=S1,S2,... / grid=R1xC1,... (repeatable).",
)
@solver_settings_options("Seconds for each point's whole solve.")
@objective_sweep_options
@wafers_option(
    "Pipeline every point over N wafers, or 'auto' for the fewest that fit (default: each point's cluster.wafers, "
    "so --set cluster.wafers=1,2,4 sweeps the wafer count)."
)
@click.option("--place", is_flag=True, help="Place every point too (slower; the result then includes communication).")
@_runner_options(os.cpu_count() or 1)
@click.option(
    "--out",
    "out_dir",
    default="bench-results",
    show_default=True,
    help="Folder for sweep-MODEL-ARCH.{csv,json,md,png}.",
)
@click.option("--plot", "plot_path", default=None, help="Write the throughput plot here instead (.png or .svg).")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON instead of a table.")
@with_request
def sweep(
    request: SolveRequest,
    model: str,
    arch: str | None,
    axes: tuple[str, ...],
    jobs: int,
    scheduler: str | None,
    out_dir: str,
    plot_path: str | None,
    as_json: bool,
) -> None:
    """Solve MODEL on the grid of --set values and warn where a strictly better machine does worse."""
    from wsealloc.bench.sweep import grid, parse_axes, refuse_fixed_wafers
    from wsealloc.bench.sweep import sweep as run_sweep
    from wsealloc.plan.io import write_atomic
    from wsealloc.request import check_outputs

    parsed = parse_axes(axes)  # bad values fail before anything is written or solved
    if click.get_current_context().get_parameter_source("wafers") is ParameterSource.COMMANDLINE:
        # (the request cannot tell "--wafers 1" from the default on an arch of one wafer: the command line can)
        refuse_fixed_wafers(parsed, request.wafers)
    arch_name = "wse2" if arch is None else arch
    stem = f"sweep-{Path(model).stem}-{Path(arch_name).stem}"
    plot_file = Path(plot_path) if plot_path is not None else Path(out_dir) / f"{stem}.png"
    if plot_file.suffix not in (".png", ".svg"):
        raise UsageError(f"--plot {plot_file}: expected a .png or .svg file")
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    out = _prepare_out(out_dir)
    check_outputs(model, arch_name, {"--plot": plot_file})
    with _progress(len(grid(parsed)), "sweep") as advance:
        result = run_sweep(request, axes=parsed, jobs=jobs, scheduler=scheduler, on_done=advance)
    write_atomic(out / f"{stem}.csv", result.to_csv())
    write_atomic(out / f"{stem}.json", json.dumps(result.to_dict(), indent=1) + "\n")
    write_atomic(out / f"{stem}.md", result.to_markdown())
    write_atomic(plot_file, result.plot(plot_file.suffix[1:]))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        kind = "throughput" if result.objective is ObjectiveKind.THROUGHPUT else result.labels[0].removeprefix("cycles ")
        table = Table(title=f"sweep of {model} on {arch_name}: {kind} per point")
        for a in result.axes:
            table.add_column(a.field)
        for col in (*result.labels, "status"):
            table.add_column(col, justify="right")
        for p in result.points:
            table.add_row(
                *p.values,
                "-" if p.cycles is None else f"{p.cycles:,}",
                "-" if p.throughput is None else f"{p.throughput:,.1f}",
                p.row.status if not p.row.error else f"{p.row.status}: {p.row.error}",
            )
        console = make_console()
        console.print(table)
        console.print(f"results written to {out / stem}.{{csv,json,md}}; plot {plot_file}", highlight=False)
    for w in result.warnings:
        click.echo(f"wsealloc: WARNING: {w}", err=True)
    if all(p.cycles is None for p in result.points):
        first = result.points[0].row
        raise SweepError(
            f"no point of the sweep produced a plan; {', '.join(result.points[0].sets)}: {first.status}: {first.error}"
        )


def _counts(text: str, option: str) -> list[int]:
    """``1,2,4`` as positive integers (a frontier's axis), naming the option when one is not."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected whole numbers separated by commas, e.g. {option} 1,2,4") from None
    if not values or min(values) < 1:
        raise UsageError(f"{option} {text!r}: expected positive whole numbers, e.g. {option} 1,2,4")
    return values


@click.command()
@serving_model_options
@solver_settings_options("Seconds for each point's whole solve.")
@click.option(
    "--wafers", "wafer_counts", default="1", show_default=True, metavar="W1,W2,...", help="Wafer counts (one line each)."
)
@click.option(
    "--requests",
    "request_counts",
    default="auto",
    show_default=True,
    metavar="N1,N2,...|auto",
    help="Requests in flight; auto: 1, 2, 4, ... up to the most whose caches fit at --context.",
)
@click.option("--place", is_flag=True, help="Place every point too (slower; the rates then include communication).")
@_runner_options(os.cpu_count() or 1)
@click.option(
    "--out",
    "out_dir",
    default="bench-results",
    show_default=True,
    help="Folder for frontier-MODEL-ARCH.{csv,json,md,png,svg,html}.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the frontier as JSON instead of a table.")
@with_request
def frontier(
    request: SolveRequest,
    model: str,
    arch: str | None,
    wafer_counts: str,
    request_counts: str,
    jobs: int,
    scheduler: str | None,
    out_dir: str,
    as_json: bool,
) -> None:
    """The serving frontier of an LLM export: tokens/s per request against tokens/s in all, over requests
    in flight and wafer counts, every point a proven plan (one token's time, --objective latency)."""
    from wsealloc.bench.frontier import FRONTIER_PLANS, check_solver
    from wsealloc.bench.frontier import frontier as run_frontier
    from wsealloc.bench.tables import percent
    from wsealloc.plan.io import write_atomic

    wafers = _counts(wafer_counts, "--wafers")
    counts = None if request_counts.strip() == "auto" else _counts(request_counts, "--requests")
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    check_solver(request, FRONTIER_PLANS)  # (before the results folder is made: a refusal leaves no empty folder)
    out = _prepare_out(out_dir)
    arch_name = "wse2" if arch is None else arch
    stem = f"frontier-{Path(model).stem}-{Path(arch_name).stem}"
    with _progress(None, "frontier") as advance:  # (each round of solves adds its count)
        result = run_frontier(request, wafers, counts, jobs=jobs, scheduler=scheduler, on_done=advance, on_planned=advance.expect)
    write_atomic(out / f"{stem}.csv", result.to_csv())
    write_atomic(out / f"{stem}.json", json.dumps(result.to_dict(), indent=1) + "\n")
    write_atomic(out / f"{stem}.md", result.to_markdown())
    write_atomic(out / f"{stem}.png", result.plot("png"))
    write_atomic(out / f"{stem}.svg", result.plot("svg"))
    write_atomic(out / f"{stem}.html", result.to_html())
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        table = Table(title=f"serving frontier of {model} on {arch_name}, context {result.context:,}")
        for col in ("wafers", "used", "requests", "tokens/s per request", "tokens/s in all", "frontier", "status", "gap"):
            table.add_column(col, justify="right", overflow="fold")  # (wrapped on a narrow terminal, never cut)
        for p in result.points:
            table.add_row(
                str(p.wafers),
                "-" if p.wafers_used is None else str(p.wafers_used),
                str(p.requests),
                "-" if p.tokens_per_s_per_request is None else f"{p.tokens_per_s_per_request:,.1f}",
                "-" if p.aggregate_tokens_per_s is None else f"{p.aggregate_tokens_per_s:,.1f}",
                "yes" if p.on_frontier else "",
                result.status_cell(p, 72),
                "-" if p.gap is None else percent(p.gap),  # (as the .csv and .md print it)
            )
        console = make_console()
        console.print(table)
        console.print(f"results written to {out / stem}.{{csv,json,md,png,svg,html}}", highlight=False)
    if all(p.tokens_per_s_per_request is None for p in result.points):
        # each distinct reason once, at the first point that gave it: the first point alone could be one the
        # fit check skipped while every later point's solve failed for a reason the user never saw
        reasons: dict[str, int] = {}
        for p in result.points:
            reasons.setdefault(f"{p.status}: {p.error or p.skipped}", p.requests)
        said = "; ".join(f"requests={n}: {why}" for why, n in list(reasons.items())[:3])
        raise SweepError(f"no point of the frontier produced a plan; {said}{'; ...' if len(reasons) > 3 else ''}")


@click.command()
@serving_model_options
@click.argument("prefill", metavar="PREFILL.onnx", type=click.Path(dir_okay=False))
@solver_settings_options("Seconds for each plan's whole solve.")
@click.option("--cluster", "cluster", required=True, type=int, metavar="W", help="Wafers in the cluster (at least 2).")
@click.option(
    "--prompt",
    default=None,
    type=int,
    metavar="T",
    help="Prompt tokens: the prefill export's own (input_ids [1, T]); given, it must equal that.",
)
@click.option("--output", "output_tokens", required=True, type=int, metavar="O", help="Output tokens per request.")
@click.option("--ttft", required=True, type=float, metavar="S", help="Limit on the time to first token, seconds.")
@click.option("--tpot", required=True, type=float, metavar="S", help="Limit on the time per output token, seconds.")
@click.option(
    "--requests",
    "request_counts",
    default="auto",
    show_default=True,
    metavar="N1,N2,...|auto",
    help="Decode requests in flight; auto: 1, 2, 4, ... up to the most whose caches fit on the cluster.",
)
@_runner_options(os.cpu_count() or 1)
@click.option("--out", "out_dir", default="bench-results", show_default=True, help="Folder for pools-DECODE-ARCH.{csv,json,md}.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of a table.")
@with_request
def pools(
    request: SolveRequest,
    model: str,
    arch: str | None,
    prefill: str,
    cluster: int,
    prompt: int | None,
    output_tokens: int,
    ttft: float,
    tpot: float,
    request_counts: str,
    jobs: int,
    scheduler: str | None,
    out_dir: str,
    as_json: bool,
) -> None:
    """Prefill and decode on separate wafers: how many of --cluster wafers serve PREFILL.onnx's prompts and
    how many decode MODEL's tokens, for the most requests/s within --ttft and --tpot, every number from a
    proven plan; beside both phases sharing every wafer."""
    from wsealloc.bench.frontier import POOLS_PLANS, check_solver
    from wsealloc.bench.pools import Workload, plan_cell
    from wsealloc.bench.pools import pools as run_pools
    from wsealloc.plan.io import write_atomic

    counts = None if request_counts.strip() == "auto" else _counts(request_counts, "--requests")
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    if prompt is not None and prompt < 1:
        raise UsageError(f"--prompt {prompt}: expected at least 1 token")
    if not Path(prefill).is_file():
        raise UsageError(f"PREFILL.onnx {prefill}: no such file; give the prefill export beside the decode one")
    check_solver(request, POOLS_PLANS)  # (before the results folder is made)
    out = _prepare_out(out_dir)
    arch_name = "wse2" if arch is None else arch
    stem = f"pools-{Path(model).stem}-{Path(arch_name).stem}"
    work = Workload(output_tokens, ttft, tpot, prompt)
    with _progress(None, "pools") as advance:  # (the plans the fit checks leave set the total)
        result = run_pools(
            request, prefill, cluster, work, counts, jobs=jobs, scheduler=scheduler, on_done=advance, on_planned=advance.expect
        )
    write_atomic(out / f"{stem}.csv", result.to_csv())
    write_atomic(out / f"{stem}.json", json.dumps(result.to_dict(), indent=1) + "\n")
    write_atomic(out / f"{stem}.md", result.to_markdown())
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1))
    else:
        table = Table(title=f"prefill and decode pools of {cluster} {arch_name} wafers: {model} + {prefill}")
        # (the headers of short cells wrap, so the reasons in binds get the room; on a narrow terminal
        # every cell wraps, at spaces where it has them, and none is cut)
        for col in ("prefill wafers", "decode wafers", "requests in flight"):
            table.add_column(col, justify="right", max_width=8, overflow="fold")
        for col in ("TTFT ms", "TPOT ms", "requests/s", "feasible"):
            table.add_column(col, justify="right", overflow="fold")
        table.add_column("binds", overflow="fold")
        table.add_column("best", justify="right", overflow="fold")
        for col in ("prefill plan: p', status, gap", "decode plan: d', status, gap"):
            table.add_column(col, justify="right", max_width=18, overflow="fold")
        for r, cells in zip(result.rows, result.table(), strict=True):
            table.add_row(
                *("-" if cells[c] is None else str(cells[c]) for c in list(cells)[:7]),
                r.binds,
                "yes" if r.best else "",
                plan_cell(r.prefill_plan_wafers, r.prefill_status, r.prefill_gap),
                plan_cell(r.decode_plan_wafers, r.decode_status, r.decode_gap),
            )
        console = make_console()
        console.print(table)
        for line in result.summary():
            console.print(line, highlight=False)
        console.print(f"results written to {out / stem}.{{csv,json,md}}", highlight=False)
    # (a split or the shared wafers meeting both limits is an answer: exit 0; none, the table says why)
    failure = result.failure(f"--ttft {ttft:g} s, --tpot {tpot:g} s")
    if failure is not None:
        raise failure
