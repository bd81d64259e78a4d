"""The ``wsealloc`` command group: ``inspect``, ``solve``, ``verify``, ``arch`` here; ``compare`` in
``cli/reports.py``; ``bench`` and ``sweep`` in ``cli/bench.py``; ``export-llm`` in ``cli/llm.py``;
:func:`build_cli` assembles them.

Errors: one line on stderr (``wsealloc: error: ...``) and a non-zero exit code; ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
from pydantic import ValidationError
from rich.console import Console

from wsealloc.arch import PRESETS, load_arch
from wsealloc.arch.loader import arch_to_dict
from wsealloc.budget import StopHook
from wsealloc.cli.options import (
    ASCII_FLOAT,
    debug_option,
    model_options,
    option_given,
    solver_options,
    wafers_option,
    with_request,
)
from wsealloc.errors import InputShapeError, Interrupted, ModelLoadError, OutputError, UsageError, WseallocError
from wsealloc.frontend.kgraph import looks_like_kgraph
from wsealloc.frontend.sources import KgraphSource, as_kgraph
from wsealloc.graph.opclass import KernelKind
from wsealloc.opmodels import CostTable, KernelCosts, enumerate_op_models, pareto_frontier
from wsealloc.pipeline import build_costs
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.report.console import console as make_console
from wsealloc.request import SolveRequest, check_outputs, kgraph_header

if TYPE_CHECKING:  # the API is imported lazily: it pulls in the solvers
    from wsealloc.api import SolveOutcome
    from wsealloc.contest import ContestOutcome


@click.command()
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of tables.")
@click.option("--kernel", "kernel_name", default=None, help="List one kernel's op models with rejection reasons.")
@click.option("--all", "show_all", is_flag=True, help="Show every kernel, not the first 60.")
@with_request
def inspect(request: SolveRequest, model: str, arch: str | None, as_json: bool, kernel_name: str | None, show_all: bool) -> None:
    """Show the kernels of MODEL: work, weights, activations, minimum cores; or one kernel's op models.

    For a .kgraph contest instance: its header, every kernel's frontier and the lower bounds."""
    contest = as_kgraph(request.model)
    if contest is not None:
        _inspect_contest(contest, as_json, kernel_name, show_all)
        return
    from wsealloc.report.inspect import inputs_json, inspect_json, op_model_rows, print_inputs, print_inspect, print_op_models

    console = make_console()
    try:
        costs = _costs(request, check_feasible=False)
    except InputShapeError as err:  # list the inputs and the command that fixes them, then the error line
        if as_json:
            click.echo(json.dumps(inputs_json(model, err), indent=1))
        else:
            print_inputs(model, err, console)
        raise
    if kernel_name is not None:
        names = [kc.kernel.name for kc in costs.kernels]
        if kernel_name not in names:
            # substrings first (``fc`` lists every fc kernel), then the names a typo is close to (``l0.fcx``)
            similar = [n for n in names if kernel_name.lower() in n.lower()] + difflib.get_close_matches(kernel_name, names, n=5)
            close = list(dict.fromkeys(similar))[:8]
            hint = f"; similar: {', '.join(close)}" if close else f"; e.g. {', '.join(names[:5])}"
            raise UsageError(f"--kernel {kernel_name!r}: no such kernel in {model}{hint}")
        kc = costs.by_name(kernel_name)
        full = enumerate_op_models(kc.work, costs.arch, request.cost, beyond_wafer=True)
        kc_full = KernelCosts(kc.kernel, kc.work, full, pareto_frontier(full), kc.signature)
        if as_json:
            rows = op_model_rows(kc_full, costs.arch.usable_sram_bytes, costs.arch, request.cost)
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["reason"]] = counts.get(r["reason"], 0) + 1
            click.echo(json.dumps({"kernel": kernel_name, "counts": counts, "op_models": rows}, indent=1))
        else:
            print_op_models(kc_full, costs.arch.usable_sram_bytes, console, arch=costs.arch, options=request.cost)
        return
    if as_json:
        click.echo(json.dumps(inspect_json(costs), indent=1))
    else:
        print_inspect(costs, console, limit=None if show_all else 60)


def _inspect_contest(source: KgraphSource, as_json: bool, kernel_name: str | None, show_all: bool) -> None:
    """``inspect X.kgraph``: the instance (header overrides applied), or one kernel's models (``--kernel``)."""
    from wsealloc.report.contest import (
        inspect_instance,
        inspection_json,
        kernel_entry,
        kernel_json,
        print_inspection,
        print_kernel,
    )

    graph = source.read()
    limit = None if show_all else 60
    if kernel_name is not None:
        entry = kernel_entry(graph, kernel_name)
        if as_json:
            click.echo(json.dumps(kernel_json(graph, entry), indent=1))
        else:
            print_kernel(graph, entry, make_console(), limit=limit)
        return
    inspection = inspect_instance(graph, source.header)
    if as_json:
        click.echo(json.dumps(inspection_json(inspection), indent=1))
    else:
        print_inspection(inspection, make_console(), limit=limit)


@click.command()
@model_options
@solver_options
@click.option("-o", "--output", default=None, help="Write the plan JSON here (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of the summary.")
@click.option("--floorplan", default=None, help="Draw the placed wafer to this .svg or .png file.")
@click.option(
    "--solution", default=None, help="A .kgraph instance: write the contest solution here (kN = conv(...), kN : place(...))."
)
@click.option(
    "--time-cap",
    default=None,
    type=ASCII_FLOAT,
    help="A .kgraph instance: keep the largest kernel time within this multiple of the proven lower bound (e.g. 1.05); "
    "the score is minimized within it [default: the score alone].",
)
@click.option("-v", "--verbose", is_flag=True, help="Report progress on stderr.")
@wafers_option("Pipeline over N wafers, or 'auto' for the fewest that fit (default: the arch's cluster.wafers).")
@with_request
def solve(
    request: SolveRequest,
    model: str,
    arch: str,
    no_place: bool,
    from_plan: str | None,
    output: str | None,
    as_json: bool,
    floorplan: str | None,
    solution: str | None,
    verbose: bool,
) -> None:
    """Allocate the wafer's cores to MODEL's kernels: minimize the slowest kernel, prove it, write the plan.

    MODEL may also be an ISPD-2020 contest instance (.kgraph): its kernels are sized and placed for the
    contest's score; --solution writes the contest's solution format."""
    from wsealloc.api import SolveOutcome, run
    from wsealloc.contest import ContestOutcome
    from wsealloc.plan.io import write_atomic
    from wsealloc.report.summary import print_summary

    check_outputs(model, arch, {"-o": output, "--floorplan": floorplan, "--solution": solution})  # fail before any work
    if not request.model.reads_onnx:  # a contest instance
        if floorplan is not None:
            raise UsageError("--floorplan draws ONNX plans; a contest layout is in the --solution / -o files")
        if not request.place:
            raise UsageError("a .kgraph instance is a placement problem: drop --no-place")
    elif solution is not None:
        raise UsageError("--solution writes the contest format of a .kgraph instance; for ONNX models use -o plan.json")
    if floorplan is not None and not request.place:
        raise UsageError("--floorplan needs a placement; drop --no-place")
    if floorplan is not None and not floorplan.lower().endswith((".svg", ".png")):
        raise OutputError(f"--floorplan {floorplan}: expected a .svg or .png file name")
    stop = StopHook()
    with _stop_on_signals(stop):
        outcome = run(request, stop, _progress(verbose))
    if outcome.kind == "contest":
        assert isinstance(outcome, ContestOutcome)  # narrows the type: the kinds are api.RUNNERS'
        _finish_contest(outcome, output, solution, as_json)
        return
    assert isinstance(outcome, SolveOutcome)
    _warn_unknown_ops(request, outcome.costs)
    _warn_unused_routing(request, outcome.costs)
    if output is not None:
        write_atomic(output, outcome.plan.to_json())
    if floorplan is not None and outcome.plan.objective.placed:
        from wsealloc.report.floorplan import write_floorplan

        drawn = write_floorplan(outcome.plan, outcome.flows(), floorplan)
        if len(drawn) > 1 and not as_json:  # (the names are not the one given: say which they are)
            make_console().print(f"floorplan: one file per wafer: {', '.join(map(str, drawn))}", highlight=False, soft_wrap=True)
    elif floorplan is not None and not outcome.interrupted:
        why = "its regions need more cores than the wafer" if not outcome.plan.objective.fits_wafer else "no layout was found"
        make_console().print(f"note: --floorplan {floorplan} not drawn: the plan is not placed ({why})", highlight=False)
    if as_json:
        click.echo(outcome.plan.to_json())
    else:
        console = make_console()
        print_summary(outcome, console)
        if from_plan is not None:
            _print_moved(from_plan, outcome, console)
        if (
            outcome.partition is not None
            and request.wafer_count is None
            and outcome.plan.objective.kind is ObjectiveKind.THROUGHPUT
        ):
            _print_wafer_sweep(outcome, console)  # (the slowest stage against the wafer count: a throughput table)
        console.print(f"plan written to {output}" if output else "(add -o plan.json to save the plan)", highlight=False)
    if outcome.interrupted:
        raise Interrupted(
            "interrupted: " + (f"the best plan so far was written to {output}" if output else "no -o given, nothing written")
        )


def _print_moved(from_plan: str, outcome: SolveOutcome, console: Console) -> None:
    """What the re-solve changed against the plan it started from (``--from-plan``)."""
    from wsealloc.plan.io import read_plan
    from wsealloc.plan.pins import moved

    changes = moved(read_plan(Path(from_plan)), outcome.plan)
    total = len(outcome.plan.kernels)
    if not changes:
        console.print(f"moved: nothing (all {total} kernels as in {from_plan})", highlight=False)
        return
    # (a line per kernel changed, new to the old plan, or gone from the model: more lines than this
    # plan's kernels where the model lost kernels)
    console.print(f"moved: {len(changes)} kernel(s) against {from_plan} ({total} in this plan):", highlight=False)
    for line in changes[:20]:
        console.print(f"  {line}", highlight=False)
    if len(changes) > 20:
        console.print(f"  ... and {len(changes) - 20} more", highlight=False)


def _finish_contest(outcome: ContestOutcome, output: str | None, solution: str | None, as_json: bool) -> None:
    """Write a contest solve's plan and solution, print its summary."""
    from wsealloc.plan.contest_solution import format_solution
    from wsealloc.plan.io import write_atomic
    from wsealloc.report.contest_summary import print_contest_summary

    if output is not None:
        write_atomic(output, outcome.plan.to_json())
    if solution is not None:
        write_atomic(solution, format_solution(outcome.solution))
    if as_json:
        click.echo(outcome.plan.to_json())
    else:
        console = make_console()
        print_contest_summary(outcome, console)
        written = [f"plan written to {output}"] * (output is not None) + [f"solution written to {solution}"] * (
            solution is not None
        )
        console.print("; ".join(written) or "(add -o plan.json and --solution X.sol to save them)", highlight=False)
    if outcome.interrupted:
        raise Interrupted("interrupted: " + ("the best layout so far was written" if output or solution else "nothing written"))


@click.command()
@click.argument("plan", metavar="PLAN|SOLUTION", type=click.Path(dir_okay=True, path_type=str))
@click.option("--model", "model_path", default=None, help="Model file, if it moved since the plan was made.")
@click.option("--kgraph", default=None, help="The .kgraph instance of a contest SOLUTION (ISPD-2020 format, e.g. X.sol).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="FIELD=N",
    help="With --kgraph: override a header field (width, height, memlimit, wdeltat, wlength, wadapter; repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@debug_option
def verify(plan: str, model_path: str | None, kgraph: str | None, sets: tuple[str, ...], as_json: bool, debug: bool) -> None:
    """Recompute every number of PLAN from its model and arch and check every constraint; or check a contest
    SOLUTION against its instance (--kgraph X.kgraph) and score it."""
    if kgraph is not None or _looks_like_solution(plan):
        _verify_contest(plan, kgraph, sets, model_path, as_json)
        return
    if sets:
        raise UsageError("--set overrides a .kgraph header and needs --kgraph X.kgraph; a plan records its own arch")
    from wsealloc.plan.verify import require_valid, verify_plan

    report = verify_plan(plan, model_path)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
        if not report.ok:
            sys.exit(4)
        return
    require_valid(report)
    click.echo(f"{plan}: OK ({report.kernels} kernels, {report.checks} checks)")


# a statement of the contest's solution format: 'kN = conv(', 'kN = dblock(', 'kN = cblock(' or 'kN : place('
_SOLUTION_STATEMENT = re.compile(r"^\s*[^\s=:()]+\s*(=\s*(conv|dblock|cblock)|:\s*place)\s*\(", re.IGNORECASE | re.MULTILINE)


def _looks_like_solution(path: str) -> bool:
    """A contest solution rather than a plan JSON: a ``.sol`` suffix, or text (not JSON) with a solution statement."""
    p = Path(path)
    if p.suffix.lower() == ".sol":
        return True
    if p.suffix.lower() == ".json" or not p.is_file():
        return False
    try:
        with p.open("rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    except OSError:
        return False
    return not head.startswith("{") and _SOLUTION_STATEMENT.search(head) is not None


def _is_plan_json(path: str) -> bool:
    """A plan JSON: a ``.json`` suffix, or a file whose text starts with '{'."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return True
    try:
        with p.open("rb") as f:
            return f.read(64).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n").startswith("{")
    except OSError:
        return False


def _verify_contest(solution: str, kgraph: str | None, sets: tuple[str, ...], model_path: str | None, as_json: bool) -> None:
    """``verify X.sol --kgraph X.kgraph``: check and score a contest solution with the independent verifier."""
    from wsealloc.plan.contest_solution import read_solution
    from wsealloc.plan.contest_verify import require_legal, verify_solution
    from wsealloc.report.contest import print_verified, verify_json

    if kgraph is None:
        raise UsageError(f"{solution}: a contest solution; pass its instance: wsealloc verify {solution} --kgraph X.kgraph")
    if _is_plan_json(solution):
        raise UsageError(f"{solution}: a plan JSON records its own model and arch; drop --kgraph (and --set) to verify it")
    if model_path is not None:
        raise UsageError("--model names a plan's model; a contest solution's instance is given with --kgraph")
    if not Path(kgraph).exists():
        raise ModelLoadError(f"--kgraph {kgraph}: no such file; check the path")
    if not looks_like_kgraph(kgraph):
        raise UsageError(
            f"--kgraph {kgraph}: not a .kgraph contest instance (a .kgraph file, or text opening with a '(* ... *)' header)"
        )
    try:
        source = KgraphSource(path=kgraph, header=kgraph_header(None, sets))  # --set FIELD=N: the header overrides
    except ValidationError as exc:
        raise UsageError(f"--set {' '.join(sets)}: {str(exc.errors()[0]['msg']).removeprefix('Value error, ')}") from None
    graph = source.read()
    report = verify_solution(read_solution(solution), graph)
    if as_json:
        click.echo(json.dumps(verify_json(report, graph, solution, source.header), indent=1))
    require_legal(report, solution)  # exit 4 with the first violation (after the JSON, when asked for)
    if not as_json:
        print_verified(report, graph, solution, make_console())


def _print_wafer_sweep(outcome: SolveOutcome, console: Console) -> None:
    """Throughput vs. wafer count around the fewest that fit (allocation-only optimum per count)."""
    from rich.table import Table

    from wsealloc.api import wafer_sweep

    assert outcome.partition is not None
    fewest = outcome.partition.wafers
    title = "throughput vs. wafers (allocation-only optimum)"
    if outcome.costs.options.train is not None:  # the samples in flight depend on the cuts: this plan's
        title = "throughput vs. wafers (allocation-only, each kernel's samples in flight as cut here: an estimate)"
    table = Table(title=title)
    for col in ("wafers", "bottleneck cycles", "samples/s", "vs. fewest"):
        table.add_column(col, justify="right")
    rows = wafer_sweep(outcome.costs, range(max(1, fewest - 1), fewest + 4))
    base = dict(rows).get(fewest)
    clock = outcome.costs.arch.clock_hz
    for n, cycles in rows:
        if cycles is None:
            table.add_row(str(n), "does not fit", "-", "-")
        else:
            ratio = f"{base / cycles:.2f}x" if base else "-"
            table.add_row(str(n), f"{cycles:,}", f"{clock / cycles:,.1f}", ratio)
    console.print(table)


def _progress(verbose: bool) -> Callable[[str], None] | None:
    if not verbose:
        return None
    start = time.perf_counter()

    def say(message: str) -> None:
        click.echo(f"[{time.perf_counter() - start:6.2f}s] {message}", err=True)

    return say


@contextlib.contextmanager
def _stop_on_signals(stop: StopHook) -> Iterator[None]:
    """While solving, SIGINT/SIGTERM ask the solver to stop and return its best solution so far."""

    def handler(signum: int, frame: object) -> None:
        if stop.stopped.is_set():
            raise KeyboardInterrupt  # a second signal: exit at once
        stop.stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@click.group()
def arch() -> None:
    """Architecture presets."""


@arch.command("show")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE")
def arch_show(name: str, sets: tuple[str, ...]) -> None:
    """Print a preset or YAML file, validated, with derived sizes (as JSON)."""
    click.echo(json.dumps(arch_to_dict(load_arch(name, sets)), indent=1))


@arch.command("list")
def arch_list() -> None:
    """List the presets."""
    for name in PRESETS:
        a = load_arch(name)
        click.echo(f"{name:6s} {a.rows}x{a.cols} cores ({a.total_cores:,}), {a.core.sram_bytes} B SRAM/core - {a.description}")


def _costs(request: SolveRequest, check_feasible: bool = True) -> CostTable:
    """The cost table of a request, with the warnings a user should see (ignored arch fields, fallback costs)."""
    costs = build_costs(request.onnx_model, request.machine, request.cost, check_feasible=check_feasible)
    _warn_unknown_ops(request, costs)
    return costs


def _warn_unknown_ops(request: SolveRequest, costs: CostTable) -> None:
    if request.cost.allow_unknown_ops:
        from wsealloc.graph.opclass import OpClass, op_class

        unknown = sorted({n.op_type for n in costs.kgraph.ops.nodes if op_class(n.op_type, n.domain) is OpClass.UNKNOWN})
        if unknown:
            click.echo(f"wsealloc: warning: fallback cost (1 op/element) for unknown ops: {', '.join(unknown)}", err=True)


def _warn_unused_routing(request: SolveRequest, costs: CostTable) -> None:
    """``--routing`` given for a model without a mixture-of-experts layer: nothing reads it. A warning, not
    an error: the plan is the one the request asks for (the routing only changes the MoE layers' costs),
    only the option said nothing; known once the model is read (``--requests``, whose plan would claim
    requests nothing planned for, is refused instead: ``api._refuse_unread_requests``)."""
    if not option_given("routing"):
        return
    base = costs.members if costs.members is not None else costs
    if not any(kc.kernel.kind is KernelKind.EXPERTS for kc in base.kernels):
        click.echo(
            f"wsealloc: warning: --routing {request.cost.routing.value} does not apply: {request.model.label} has no "
            "mixture-of-experts layer (a com.microsoft MoE / QMoE node)",
            err=True,
        )


def build_cli() -> click.Group:
    """The ``wsealloc`` command group with every command (built on call: importing this module
    registers nothing)."""
    from wsealloc.cli.bench import bench, frontier, pools, sweep
    from wsealloc.cli.llm import export_llm_command
    from wsealloc.cli.reports import compare

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
    @click.version_option(package_name="wsealloc")
    def cli(debug: bool) -> None:
        """Allocate the cores of a wafer-scale engine to the operators of an ONNX model."""

    for command in (inspect, solve, verify, arch, compare, bench, sweep, frontier, pools, export_llm_command):
        cli.add_command(command)
    return cli


# click >= 8.2 raises this for a group called without its subcommand (older click prints the help itself)
_NO_ARGS_IS_HELP: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", type("_Never", (Exception,), {}))


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning errors into one line on stderr and an exit code.

    ``--debug`` prints the traceback of an error as well, and keeps its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        build_cli().main(args=args, prog_name="wsealloc", standalone_mode=False)
    except WseallocError as err:
        if debug:
            traceback.print_exc()
        click.echo(f"wsealloc: error: {_bounded(str(err))}", err=True)
        return err.exit_code
    except _NO_ARGS_IS_HELP as err:
        # a group without its subcommand (``wsealloc``, ``wsealloc arch``): show its help as click would
        ctx = getattr(err, "ctx", None)
        click.echo(ctx.get_help() if ctx is not None else str(err))
        return 0
    except click.exceptions.Abort:
        click.echo("wsealloc: interrupted", err=True)
        return 130
    except click.ClickException as err:
        # command-line mistakes are never bugs: one line, even with --debug
        message = " ".join(err.format_message().split())
        choices = _command_choices(err)
        click.echo(f"wsealloc: error: {_bounded(message.rstrip('.') if choices else message)}{choices}", err=True)
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("wsealloc: interrupted", err=True)
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI contract: one line, no traceback without --debug
        if debug:
            traceback.print_exc()
        what = _bounded(f"{err.__class__.__name__}: {err}")
        click.echo(f"wsealloc: internal error: {what} (rerun with --debug and report it)", err=True)
        return 70
    return 0


# An error line longer than this is cut in its middle (its head names the file or option, its tail the fix):
# messages quote users' values as excerpts (errors.excerpt), and this keeps the promise where one does not.
LONGEST_MESSAGE = 1000


def _bounded(message: str) -> str:
    """``message`` on one line of at most ``LONGEST_MESSAGE`` characters (the middle cut, and said so)."""
    if "\n" in message:
        message = " ".join(message.split())
    if len(message) <= LONGEST_MESSAGE:
        return message
    cut = len(message) - LONGEST_MESSAGE + 40
    head = (LONGEST_MESSAGE - 40) * 2 // 3
    return f"{message[:head]} ... ({cut:,} characters cut) ... {message[head + cut :]}"


def _command_choices(err: click.ClickException) -> str:
    """The subcommands to choose from, after click's "No such command" (which lists none)."""
    ctx = getattr(err, "ctx", None)
    if ctx is None or not isinstance(ctx.command, click.Group) or "No such command" not in err.format_message():
        return ""
    return "; choose one of: " + ", ".join(sorted(ctx.command.list_commands(ctx)))


if __name__ == "__main__":
    sys.exit(main())
