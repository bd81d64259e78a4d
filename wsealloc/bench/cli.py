"""``wsealloc bench`` and ``wsealloc sweep``."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from wsealloc.errors import UsageError, WseallocError


class RegressionError(WseallocError):
    """A bench result is worse than the suite's best-known value (or failed)."""

    exit_code = 5


def _console(err: bool = False) -> Console:
    stream = sys.stderr if err else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else 160)


def _progress(total: int, label: str) -> Progress:
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(err=True),
        transient=False,
        disable=not sys.stderr.isatty(),
    )
    return progress


def _run(instances: list[dict[str, Any]], jobs: int, scheduler: str | None, label: str) -> list[dict[str, Any]]:
    from wsealloc.bench.runner import run_all

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM like Ctrl-C: the runner stops its workers

    signal.signal(signal.SIGTERM, terminate)
    with _progress(len(instances), label) as progress:
        task = progress.add_task(label, total=len(instances))
        return run_all(instances, jobs=jobs, scheduler=scheduler, on_done=lambda row: progress.advance(task))


@click.command()
@click.argument("suite")
@click.option("--out", "out_dir", default="bench-results", show_default=True, help="Folder for CSV, JSON and Markdown results.")
@click.option("-j", "--jobs", default=1, show_default=True, type=int, help="Instances run in parallel (one process each).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", help="Run on this Dask distributed cluster.")
@click.option("--update-best", is_flag=True, help="Record results better than the suite's best-known values.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def bench(suite: str, out_dir: str, jobs: int, scheduler: str | None, update_best: bool, debug: bool) -> None:
    """Run every instance of SUITE (a name in instances/ or a YAML path); fail on regressions."""
    from wsealloc.bench.results import record, regressions, to_markdown, with_improvements, write_results
    from wsealloc.bench.suite import load_suite

    loaded, path = load_suite(suite)
    instances = [inst.resolved(path.parent) for inst in loaded.instances]
    rows = _run(instances, jobs, scheduler, f"bench {loaded.name}")
    written = write_results(Path(out_dir), loaded.name, rows)
    click.echo(to_markdown(rows), nl=False)
    click.echo(f"results written to {', '.join(str(p) for p in written)}")
    if update_best:
        improved, names = with_improvements(loaded, rows)
        if names:
            record(path, improved)
            click.echo(f"recorded new best-known values in {path}: {', '.join(names)}")
        loaded = improved
    bad = regressions(loaded, rows)
    if bad:
        raise RegressionError(f"{len(bad)} instance(s) regressed: {'; '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}")


@click.command()
@click.argument("model", type=click.Path(dir_okay=True, path_type=str))
@click.option("--arch", default="wse2", show_default=True, help="Base architecture (preset or YAML path).")
@click.option("--set", "sets", multiple=True, required=True, metavar="FIELD=V1,V2,...", help="A swept field (repeatable).")
@click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE")
@click.option("--solver", default="cpsat", show_default=True)
@click.option("--place", is_flag=True, help="Place every point too (slower).")
@click.option("--time-limit", default=30.0, show_default=True, type=float)
@click.option("-j", "--jobs", default=1, show_default=True, type=int)
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT")
@click.option("--plot", "plot_path", default=None, help="Write the throughput plot here (.png or .svg).")
@click.option("--json", "as_json", is_flag=True)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def sweep(
    model: str,
    arch: str,
    sets: tuple[str, ...],
    dims: tuple[str, ...],
    solver: str,
    place: bool,
    time_limit: float,
    jobs: int,
    scheduler: str | None,
    plot_path: str | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Solve MODEL on a grid of architectures and warn where a better machine does worse."""
    from wsealloc.arch import load_arch
    from wsealloc.bench.sweep import grid, non_monotone, parse_axes, point_sets
    from wsealloc.pipeline import parse_dims
    from wsealloc.plan.io import check_writable, write_atomic

    axes = parse_axes(sets)
    points = grid(axes)
    if plot_path is not None:
        check_writable(plot_path)
        if not plot_path.endswith((".png", ".svg")):
            raise UsageError(f"--plot {plot_path}: expected a .png or .svg file")
    for point in points:  # fail on a bad value before solving anything
        load_arch(arch, point_sets(axes, point))
    model_path = str(Path(model).resolve()) if Path(model).exists() else model
    base_arch = str(Path(arch).resolve()) if arch.endswith((".yaml", ".yml")) else arch
    instances = [
        {
            "name": ",".join(point_sets(axes, p)),
            "model": model_path,
            "arch": base_arch,
            "sets": point_sets(axes, p),
            "dims": parse_dims(dims),
            "solver": solver,
            "place": place,
            "wafers": 1,
            "time_limit": time_limit,
        }
        for p in points
    ]
    rows = _run(instances, jobs, scheduler, "sweep")
    cycles = [r["solver"] for r in rows]
    clock = load_arch(arch).clock_hz
    warnings = [
        f"warning: non-monotone: {rows[j]['instance']} is a better machine than {rows[i]['instance']} but gives "
        f"{cycles[j]:,} cycles vs {cycles[i]:,}"
        for i, j in non_monotone(axes, points, cycles)
    ]
    if plot_path is not None:
        write_atomic(plot_path, plot(axes, points, cycles, clock, plot_path.endswith(".png")))
    if as_json:
        click.echo(json.dumps({"axes": [a.field for a in axes], "points": rows, "warnings": warnings}, indent=1))
    else:
        table = Table(title=f"sweep of {model} on {arch}")
        for a in axes:
            table.add_column(a.field)
        for col in ("bottleneck cycles", "samples/s", "status"):
            table.add_column(col, justify="right")
        for p, r in zip(points, rows, strict=True):
            tput = "-" if r["solver"] is None else f"{clock / r['solver']:,.1f}"
            table.add_row(
                *(a.values[i] for a, i in zip(axes, p, strict=True)),
                "-" if r["solver"] is None else f"{r['solver']:,}",
                tput,
                r["status"],
            )
        _console().print(table)
    for w in warnings:
        click.echo(f"wsealloc: {w}", err=True)


def plot(axes: list[Any], points: list[tuple[int, ...]], cycles: list[int | None], clock: float, png: bool) -> bytes | str:
    """Throughput per grid point: one line per value of the second axis (if any) over the first axis."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    first = axes[0]
    groups: dict[tuple[int, ...], list[tuple[int, float]]] = {}
    for p, c in zip(points, cycles, strict=True):
        if c is not None:
            groups.setdefault(p[1:], []).append((p[0], clock / c))
    for rest, series in sorted(groups.items()):
        label = ", ".join(f"{a.field}={a.values[i]}" for a, i in zip(axes[1:], rest, strict=True)) or "throughput"
        xs, ys = zip(*sorted(series), strict=True)
        ax.plot([first.values[x] for x in xs], ys, marker="o", label=label)
    ax.set_xlabel(first.field)
    ax.set_ylabel("samples/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png" if png else "svg", dpi=120)
    plt.close(fig)
    return buf.getvalue() if png else buf.getvalue().decode("utf-8")
