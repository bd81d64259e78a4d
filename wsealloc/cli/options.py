"""Click options shared by the commands, and the one place the command line becomes a request.

``model_options`` (model, ``--arch``, ``--set``, ``--dim``, ``--input-shape``, ``--cost-model``, ``--no-fuse``,
``--allow-unknown-ops``, and the training and streaming group; ``serving_model_options`` without that
group, for commands that plan only one token's time) and ``solver_options`` (``--solver``, ``--time-limit``, ``--workers``,
``--seed``, ``--no-place``) are spelled here once; :func:`with_request` turns them into a validated
:class:`~wsealloc.request.SolveRequest` before the command runs, so a command function receives
``request`` (and the raw ``model``/``arch`` text, for the output-path guard) instead of a dozen
parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from wsealloc.arch import PRESETS
from wsealloc.budget import DEFAULT_TIME_LIMIT_S
from wsealloc.constraints import Constraints, read_constraints
from wsealloc.errors import UsageError, excerpt
from wsealloc.pipeline import parse_dims, parse_input_shapes
from wsealloc.plan.pins import constraints_from_plan, start_from_plan
from wsealloc.request import build_request
from wsealloc.solvers import solver_names
from wsealloc.units import ascii_int

F = TypeVar("F", bound=Callable[..., Any])


class AsciiInt(click.ParamType):
    """An integer option written in ASCII digits: click's ``int`` reads any script's digits (``--context ٣``
    is 3), which no message or plan would write back as the user typed it."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return ascii_int(str(value).strip())
        except ValueError:
            self.fail(f"{excerpt(value)} is not an integer in ASCII digits", param, ctx)


class AsciiFloat(click.ParamType):
    """A number option written in ASCII (``float`` reads any script's digits too)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            if not text.isascii():
                raise ValueError(text)
            return float(text)
        except ValueError:
            self.fail(f"{excerpt(value)} is not a number in ASCII digits", param, ctx)


ASCII_INT, ASCII_FLOAT = AsciiInt(), AsciiFloat()


def _apply(fn: F, decorators: list[Callable[[F], F]]) -> F:
    for deco in reversed(decorators):
        fn = deco(fn)
    return fn


def debug_option(fn: F) -> F:
    """``--debug``: tracebacks on errors (read by ``wsealloc.cli.app.main`` from argv)."""
    return click.option("--debug", is_flag=True, help="Show tracebacks.")(fn)


def _model_argument(fn: F) -> F:
    return click.argument("model", type=click.Path(dir_okay=True, path_type=str))(fn)


def _arch_option(help_text: str) -> Callable[[F], F]:
    presets = ", ".join(PRESETS)
    return click.option("--arch", "arch", default=None, help=f"Architecture preset ({presets}) or YAML path {help_text}")


def _set_option(fn: F) -> F:
    return click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="FIELD=VALUE",
        help="Override an arch field, e.g. --set core.sram_bytes=96KiB, or a .kgraph header field, e.g. "
        "--set wlength=4 (repeatable).",
    )(fn)


def _costing_options(fn: F) -> F:
    """How a model becomes costed kernels: ``--dim``, ``--input-shape``, ``--cost-model``, ``--no-fuse``,
    ``--context``, ``--batch``, ``--allow-unknown-ops``."""
    return _apply(
        fn,
        [
            click.option("--dim", "dims", multiple=True, metavar="NAME=VALUE", help="Bind a named input dim (repeatable)."),
            click.option(
                "--input-shape",
                "input_shapes",
                multiple=True,
                metavar="NAME=1x3x48x320",
                help="Set a model input's whole shape, whatever its dims are (named, unnamed, -1, 0); repeatable.",
            ),
            click.option(
                "--cost-model",
                "cost",
                default="standard",
                show_default=True,
                help="standard (wsealloc's tiled model), seed (the notebook's estimates) or ispd2020 (Conv kernels by the "
                "ISPD-2020 contest's conv formula, Cerebras' published model; other kernels standard).",
            ),
            click.option("--no-fuse", is_flag=True, help="One kernel per ONNX node (no epilogue/layout fusion)."),
            click.option(
                "--context",
                type=ASCII_INT,
                default=None,
                metavar="S",
                help="An LLM decode export's past length: binds its KV-cache inputs' past dim (tokens already decoded).",
            ),
            click.option(
                "--batch",
                type=ASCII_INT,
                default=None,
                metavar="B",
                help="Requests decoded together: binds an LLM export's batch dim (tokens and KV caches).",
            ),
            click.option(
                "--allow-unknown-ops",
                is_flag=True,
                help="Cost ops the model does not know as 1 vector op per output element (with a warning).",
            ),
        ],
    )


def _training_options(fn: F) -> F:
    """How the model runs when it trains or streams its weights: ``--train`` with ``--optimizer``,
    ``--train-batch``, ``--micro-batch``, ``--recompute``, ``--attention``, ``--checkpoints``,
    ``--recompute-segment``, and ``--mode`` with ``--stream-batch``. A group of its own so that commands
    that plan only one token's time (``frontier``, ``pools``: --objective latency, which neither training
    nor weight streaming plans) do not offer options they would always refuse."""
    return _apply(
        fn,
        [
            click.option(
                "--train",
                is_flag=True,
                help="Plan training in the layer pipeline: each kernel's forward, backward and weight update on its "
                "rectangle, with gradients, optimizer state and the stash in SRAM (docs/cost-model.md, section 11).",
            ),
            click.option(
                "--optimizer",
                default="adam",
                show_default=True,
                help="With --train: sgd, momentum or adam (state bytes per parameter: 4, 8, 12; mixed precision).",
            ),
            click.option(
                "--train-batch",
                default=1,
                show_default=True,
                type=ASCII_INT,
                help="With --train: samples per weight update, the global batch (1: every sample, as pipelined "
                "backpropagation; more: micro-batches run in turn, gradients accumulated).",
            ),
            click.option(
                "--micro-batch",
                default=None,
                type=ASCII_INT,
                help="With --train: samples per micro-batch of the global batch (default: chosen, proven fastest).",
            ),
            click.option(
                "--recompute",
                default="auto",
                show_default=True,
                help="With --train: none (every kernel keeps its stash), all (every recomputation segment keeps "
                "its checkpoint and replays its forward) or auto (the allocation chooses per segment, exactly).",
            ),
            click.option(
                "--attention",
                default="stored",
                show_default=True,
                help="With --train: stored (attention's S x S scores and probabilities are stashed whole, and pass whole "
                "when streamed) or recomputed (not stashed, recomputed in the backward, as FlashAttention).",
            ),
            click.option(
                "--checkpoints",
                default="wafer",
                show_default=True,
                help="With --train: where a recomputing segment's checkpoint is kept: wafer (its SRAM) or offwafer "
                "(streamed out to off-wafer memory in the forward and in again for the backward).",
            ),
            click.option(
                "--recompute-segment",
                default=None,
                type=ASCII_INT,
                help="With --train: pipeline stages per recomputation segment (default: about sqrt(D), and a solve "
                "on one wafer tries a few lengths around it and keeps the fastest).",
            ),
            click.option(
                "--mode",
                default="pipelined",
                show_default=True,
                help="pipelined (every kernel resident on its rectangle), streaming (one kernel at a time on the whole "
                "wafer, weights streamed from off-wafer memory) or auto (the faster that fits; the summary says why).",
            ),
            click.option(
                "--stream-batch",
                default=None,
                type=ASCII_INT,
                help="With --mode streaming or auto: samples per streamed pass (default: --train-batch when training, else 1).",
            ),
        ],
    )


def model_options(fn: F) -> F:
    """Options of every command that reads a model and may train or stream it (``solve``, ``inspect``,
    ``compare``)."""
    arch = _arch_option("[default: wse2; for a .kgraph instance: its header, which --arch and --set override].")
    return _apply(fn, [_model_argument, arch, _set_option, _costing_options, _training_options, debug_option])


def serving_model_options(fn: F) -> F:
    """The model options of ``frontier`` and ``pools``: as :func:`model_options` without the training and
    streaming group. Every plan they make is one token's time of an LLM export (``--objective latency``),
    which neither trains nor streams weights: offered, those options could only be refused (and the refusal
    named an ``--objective`` these commands do not have); left out, click says "No such option"."""
    arch = _arch_option("[default: wse2].")
    return _apply(fn, [_model_argument, arch, _set_option, _costing_options, debug_option])


def sweep_model_options(fn: F) -> F:
    """The model options of ``sweep``: as :func:`model_options` but without ``--set``, which a sweep
    spells as its axes (``FIELD=V1,V2,...``)."""
    arch = _arch_option("[default: wse2]: the base machine whose --set fields are swept.")
    return _apply(fn, [_model_argument, arch, _costing_options, _training_options, debug_option])


def _wafers_value(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """``--wafers 3`` as the number 3; ``auto`` (and anything else) as given, for the request to validate
    and name (ASCII digits only: ``str.isdigit`` would read ``٣`` as 3, which no plan writes back as typed)."""
    text = value.strip() if value is not None else None
    return int(text) if text is not None and text.isascii() and text.isdigit() else value


def wafers_option(help_text: str) -> Callable[[F], F]:
    """``--wafers N|auto`` (``solve``, ``sweep``): at most N wafers, or the fewest that fit; not given (None),
    the arch's ``cluster.wafers`` (``build_request`` resolves it)."""
    return click.option("--wafers", default=None, metavar="N|auto", callback=_wafers_value, help=help_text)


def time_limit_option(help_text: str) -> Callable[[F], F]:
    """``--time-limit`` with the one default of every command."""
    return click.option("--time-limit", default=DEFAULT_TIME_LIMIT_S, show_default=True, type=ASCII_FLOAT, help=help_text)


def solver_settings_options(time_limit_help: str) -> Callable[[F], F]:
    """``--solver``, ``--time-limit``, ``--workers``, ``--seed``: how each solve runs."""

    def decorate(fn: F) -> F:
        return _apply(
            fn,
            [
                click.option("--solver", default="cpsat", show_default=True, help=", ".join(solver_names()) + "."),
                time_limit_option(time_limit_help),
                click.option(
                    "--workers", default=1, show_default=True, type=ASCII_INT, help="Solver threads (1 is reproducible)."
                ),
                click.option("--seed", default=0, show_default=True, type=ASCII_INT, help="Solver random seed."),
            ],
        )

    return decorate


def solver_options(fn: F) -> F:
    """Options of every command that solves."""
    return _apply(
        fn,
        [
            solver_settings_options("Seconds for the whole solve (front end, allocation, placement share it)."),
            click.option("--no-place", is_flag=True, help="Allocation only: core counts and grid shapes, no positions."),
            *objective_options(),
            *generation_options(),
            *constraint_options(),
        ],
    )


def generation_options() -> list[Callable[[Any], Any]]:
    """``--prompt``, ``--generate``, ``--prefill``, ``--prefill-grid``: one request's generation end to end
    (``solve`` and ``compare``; ``pools`` has a ``--prompt`` of its own)."""
    return [
        click.option(
            "--prompt",
            "generation_prompt",
            type=ASCII_INT,
            default=None,
            metavar="IN",
            help="Generation end to end: one request's prompt of IN tokens (the --prefill export's own length), "
            "then --generate OUT decode steps of MODEL, planned at the last step's past length IN + OUT - 1.",
        ),
        click.option(
            "--generate",
            "generation_steps",
            type=ASCII_INT,
            default=None,
            metavar="OUT",
            help="Generation end to end: OUT decode steps after the prompt (time to first token, time per output "
            "token first/last/mean, end-to-end tokens/s in the summary and the plan's llm.generation).",
        ),
        click.option(
            "--prefill",
            "prefill_model",
            default=None,
            metavar="PREFILL.onnx",
            help="Generation end to end: the prefill export of --prompt tokens (wsealloc export-llm --prompt IN).",
        ),
        click.option(
            "--prefill-grid",
            default=None,
            metavar="RxC",
            help="Generation end to end: every prefill kernel on one R x C grid, one after another (WaferLLM's "
            "prefill), its weights and cache in regions of that grid side by side on the wafer (refused when they "
            "do not fit); default: the fastest square whose regions fit, else the fastest tiling of the wafer.",
        ),
    ]


def constraint_options() -> list[Callable[[Any], Any]]:
    """``--constraints``, ``--from-plan``, ``--keep``: the user's rules (docs/constraints.md)."""
    return [
        click.option(
            "--constraints",
            "constraints",
            default=None,
            type=click.Path(dir_okay=False, path_type=str),
            metavar="C.yaml",
            help="Rules every solver honours: grids, corners, areas, keep-outs, kernels together, cuts (docs/constraints.md).",
        ),
        click.option(
            "--from-plan",
            "from_plan",
            default=None,
            type=click.Path(dir_okay=False, path_type=str),
            metavar="PLAN.json",
            help="Pin what a previous plan decided (grids, corners, cuts) and re-solve the rest; the summary says what moved.",
        ),
        click.option(
            "--keep",
            "keep",
            multiple=True,
            metavar="GLOB",
            help="With --from-plan: pin only these kernels (repeatable; default: all of them).",
        ),
    ]


def objective_options() -> list[Callable[[Any], Any]]:
    """``--objective``, ``--share``, ``--grid``, ``--requests``: what the plan optimizes and how cores are shared."""
    return [
        click.option(
            "--objective",
            default="throughput",
            show_default=True,
            help="throughput (the slowest kernel: a layer pipeline's rate) or latency (one token's or one prompt's "
            "time through the kernels, in dataflow order; with --requests N, each request's: N turns of the slowest "
            "stage when longer).",
        ),
        click.option(
            "--share",
            default=None,
            help="Cores shared in time: none (every kernel its own rectangle; the default for throughput) or auto "
            "(consecutive kernels grouped into regions, each region's grid chosen; the default for latency).",
        ),
        click.option(
            "--grid",
            default=None,
            metavar="RxC",
            help="Every kernel on one R x C grid, run one after another (WaferLLM's mapping); weights and KV caches "
            "spread over as many R x C regions as SRAM needs.",
        ),
        click.option(
            "--requests",
            default=1,
            show_default=True,
            type=ASCII_INT,
            help="Sequences in flight, interleaved through the kernels: each request's token takes max(one pass, N x the "
            "slowest stage), the latency plan's value; aggregate tokens/s from it.",
        ),
        click.option(
            "--routing",
            default="uniform",
            show_default=True,
            help="Mixture-of-experts layers: uniform (each token's k experts at random: the expected busiest expert) or "
            "worst (every token on the same k experts: a bound on any routing). The plan reports the worst beside.",
        ),
    ]


# command-line parameter -> build_request keyword
_REQUEST_KEYS = {
    "sets": "sets",
    "cost": "cost",
    "allow_unknown_ops": "allow_unknown_ops",
    "solver": "solver",
    "time_limit": "time_limit",
    "workers": "workers",
    "seed": "seed",
    "wafers": "wafers",
    "time_cap": "time_cap",
    "objective": "objective",
    "share": "share",
    "grid": "grid",
    "requests": "requests",
    "routing": "routing",
    "train": "train",
    "optimizer": "optimizer",
    "train_batch": "train_batch",
    "recompute": "recompute",
    "recompute_segment": "recompute_segment",
    "attention": "attention",
    "checkpoints": "checkpoints",
    "mode": "mode",
    "stream_batch": "stream_batch",
    "micro_batch": "micro_batch",
    "context": "context",
    "batch": "batch",
    "generation_prompt": "prompt",  # (pools has a --prompt of its own, named prompt)
    "generation_steps": "generate",
    "prefill_model": "prefill",
    "prefill_grid": "prefill_grid",
}


# parameters handed to build_request only where the user gave them: the request refuses them where they
# cannot apply whatever their value (the training options without --train, --cost-model and --solver on a
# .kgraph), so the value click fills in from the default must not read as given. build_request's defaults
# are the same as these options' (adam, 1, auto, stored, wafer, standard, cpsat).
_GIVEN_ONLY = frozenset({"optimizer", "train_batch", "recompute", "attention", "checkpoints", "cost", "solver"})


def option_given(name: str) -> bool:
    """Whether the user gave parameter ``name`` (on the command line, or from the environment), not click's default."""
    ctx = click.get_current_context(silent=True)
    return ctx is None or ctx.get_parameter_source(name) is not ParameterSource.DEFAULT


def with_request(fn: F) -> F:
    """Build the :class:`SolveRequest` from the model/solver options, then call ``fn(request=...,
    model=..., arch=..., **its own options)``."""

    @functools.wraps(fn)
    def wrapper(**params: Any) -> Any:
        for name in _GIVEN_ONLY & params.keys():
            if not option_given(name):
                del params[name]
        options: dict[str, Any] = {key: params.pop(name) for name, key in _REQUEST_KEYS.items() if name in params}
        options["dims"] = parse_dims(params.pop("dims", ()))
        options["input_shapes"] = parse_input_shapes(params.pop("input_shapes", ()))
        options["fuse"] = not params.pop("no_fuse", False)
        if "no_place" in params:
            options["place"] = not params["no_place"]
        if "place" in params:  # sweep: placing is opt-in there
            options["place"] = params.pop("place")
        params.pop("debug", None)
        if "constraints" in params:  # (the commands get --from-plan too: solve says what moved)
            options["constraints"] = user_constraints(params.pop("constraints"), params.get("from_plan"), params.pop("keep", ()))
            if params.get("from_plan") is not None:  # the old plan's layout: the placement's start
                options["start"] = start_from_plan(params["from_plan"])
        request = build_request(params["model"], params["arch"], **options)
        return fn(request=request, **params)

    return wrapper  # type: ignore[return-value]


def user_constraints(path: str | None, from_plan: str | None, keep: tuple[str, ...]) -> Constraints | None:
    """The rules of ``--constraints`` and ``--from-plan`` (with ``--keep``) as one set."""
    if keep and from_plan is None:
        raise UsageError("--keep selects the kernels --from-plan pins: give --from-plan PLAN.json with it")
    rules = read_constraints(path) if path is not None else None
    if from_plan is not None:
        pins = constraints_from_plan(from_plan, keep)
        rules = pins if rules is None else rules.merged(pins)
    return rules


def objective_sweep_options(fn: F) -> F:
    """``--objective``, ``--share``, ``--grid``, ``--requests`` for ``sweep`` (the same spelling as ``solve``)."""
    return _apply(fn, objective_options())
