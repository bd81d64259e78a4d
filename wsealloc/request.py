"""The solve request: one frozen, validated object for everything a solve needs.

Every entry point builds one at its boundary and hands it to :func:`wsealloc.api.run`:

- the CLI (``solve``, ``inspect``, ``compare``: ``wsealloc.cli.options.request_options``),
- the Python API (``wsealloc.solve(model, arch, **options)``: :func:`build_request`),
- a suite YAML instance (``wsealloc.bench.suite.Instance.request``),
- a sweep point (the base request with the point's arch).

A request carries the model *source* (a type, not a path string), the *resolved* :class:`Arch`
(presets, YAML files and ``--set`` overrides are applied here, once), the cost options, the solver
settings (backend, time limit, workers, seed), whether to place, and how many wafers. It is JSON
round-trippable (``to_json`` / ``from_json``): bench workers receive it that way and need neither
the arch YAML nor the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from typing_extensions import Unpack

from wsealloc.arch import Arch, load_arch
from wsealloc.arch.loader import arch_file
from wsealloc.arch.schema import wafer_count
from wsealloc.budget import DEFAULT_TIME_LIMIT_S
from wsealloc.constraints import Constraints, read_constraints
from wsealloc.cost import CostOptions, cost_model_name
from wsealloc.cost.model import Attention, Checkpoints, CostModelName, Optimizer, Recompute, Routing
from wsealloc.errors import UsageError, WseallocError, choices_message, excerpt
from wsealloc.files import check_distinct_outputs, check_writable
from wsealloc.frontend.kgraph import HEADER_INTS
from wsealloc.frontend.sources import (
    KgraphSource,
    ModelSource,
    OnnxSource,
    SyntheticSource,
    as_kgraph,
    as_onnx,
    parse_model_source,
)
from wsealloc.pipeline import parse_input_shapes
from wsealloc.problem.objective import ALL_BACKENDS, OBJECTIVES, ObjectiveKind
from wsealloc.strategy.modes import Mode, ShareMode, Sharing
from wsealloc.units import ascii_int

# the user's words for a way to run a model live with the strategies (``strategy.modes``); re-exported
__all__ = [
    "Generation",
    "Mode",
    "RequestOptions",
    "ShareMode",
    "Sharing",
    "SolveRequest",
    "StartKernel",
    "StartLayout",
    "build_request",
    "check_outputs",
    "parse_grid",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SolverSettings(_Frozen):
    """Which allocation backend, and the knobs of the run (the time limit is the whole run's budget)."""

    name: str = "cpsat"
    time_limit_s: float = Field(DEFAULT_TIME_LIMIT_S, strict=True, gt=0, allow_inf_nan=False)
    workers: int = Field(1, strict=True, ge=1, le=1024)  # 1 is reproducible
    seed: int = Field(0, strict=True, ge=0, lt=2**31)  # CP-SAT's random_seed is a 32-bit integer
    # contest instances: the largest kernel time at most this multiple of the proven lower bound (the
    # score is minimized within it); None: the score alone decides how much time to trade for wires
    time_cap: float | None = Field(None, ge=1.0, le=1e6, allow_inf_nan=False)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in ALL_BACKENDS:  # checked before any work, without importing the solvers
            raise ValueError(choices_message("solver", name, ALL_BACKENDS))
        return name


Wafers = Annotated[int | Literal["auto"], BeforeValidator(wafer_count)]


def parse_grid(text: str, option: str = "--grid") -> tuple[int, int]:
    """``--grid 420x420`` (or ``420``, a square) as (rows, cols); ``option`` names it in messages."""
    parts = str(text).lower().replace(",", "x").split("x")
    try:
        sides = [ascii_int(p.strip()) for p in parts]
    except ValueError:
        raise UsageError(f"{option} {excerpt(text)}: expected RxC, e.g. {option} 420x420") from None
    if len(sides) == 1:
        sides = sides * 2
    if len(sides) != 2 or min(sides) < 1:
        raise UsageError(f"{option} {excerpt(text)}: expected RxC with positive sides, e.g. {option} 420x420")
    return sides[0], sides[1]


Side = Annotated[int, Field(strict=True, ge=1, le=2**20)]


class Generation(_Frozen):
    """``--prompt IN --generate OUT``: one request's prefill of ``prompt`` tokens (the ``prefill``
    export, every kernel on one grid: ``prefill_grid``, or when None the fastest square whose regions
    fit the wafer, else the fastest tiling of it; ``strategy.generation.prefill_on_grid``), then
    ``generate`` decode steps of the request's model with the past growing from IN to IN + OUT - 1
    (the plan is solved at the last, whose cache is the largest). What it costs: ``plan.generation``."""

    prompt: int = Field(strict=True, ge=1, le=2**24)
    generate: int = Field(strict=True, ge=1, le=2**20)
    prefill: OnnxSource
    prefill_grid: tuple[Side, Side] | None = None

    @property
    def last_context(self) -> int:
        """The past length of the last decode step (the context the decode plan is solved at)."""
        return self.prompt + self.generate - 1


Corner = Annotated[int, Field(strict=True, ge=0, le=2**20)]


class StartKernel(_Frozen):
    """One kernel of a start layout: its grid, dataflow and top-left corner (row, col) on its wafer."""

    name: str = Field(min_length=1)
    grid: tuple[Side, Side]
    dataflow: str = Field(min_length=1)
    at: tuple[Corner, Corner]


class StartLayout(_Frozen):
    """A layout the placement search starts from (``--from-plan old.json``: the old plan's): where its
    kernels match the request's by name, with op models still legal and a layout still valid under
    the request's rules, the search's result is never worse than it (``driver``; else it is ignored and
    the progress says why). A hint, not a rule: the plan records it with the request."""

    source: str  # where it came from (the plan's path)
    kernels: tuple[StartKernel, ...] = Field(min_length=1)


class SolveRequest(_Frozen):
    """Everything one solve needs, validated (see the module docstring). A contest instance
    (``KgraphSource``) carries its machine in its header (``arch`` is None); every other source
    needs an ``arch``."""

    model: ModelSource
    arch: Arch | None
    cost: CostOptions = CostOptions()
    solver: SolverSettings = SolverSettings()
    place: bool = True
    wafers: Wafers = 1  # "auto": the fewest wafers that fit
    objective: ObjectiveKind = ObjectiveKind.THROUGHPUT  # what the allocation minimizes (problem.objective)
    sharing: Sharing = Sharing()  # kernels sharing cores in time (cost.region)
    requests: int = Field(1, strict=True, ge=1, le=2**20)  # sequences in flight, interleaved through the kernels
    mode: Mode = Mode.PIPELINED  # resident weights (a layer pipeline) or weight streaming
    stream_batch: int | None = Field(None, ge=1, le=2**20)  # samples per streamed pass (None: the training batch, or 1)
    # training: samples per micro-batch of the global batch (``cost.train.batch``); None: chosen by the
    # strategy when the global batch is over 1 (docs/cost-model.md, "Micro-batches")
    micro_batch: int | None = Field(None, ge=1, le=2**20)
    constraints: Constraints | None = None  # the user's rules (``--constraints``, ``--from-plan``; docs/constraints.md)
    generation: Generation | None = None  # --prompt IN --generate OUT: one request's prefill and decode steps
    start: StartLayout | None = None  # a layout the placement starts from (``--from-plan``)

    @model_serializer(mode="wrap")
    def _unset_micro(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # --micro-batch and a start layout appear only when given: every other request reads as before
        data: dict[str, Any] = handler(self)
        for key in ("micro_batch", "start"):
            if key in data and data[key] is None:
                del data[key]
        return data

    @field_validator("objective", mode="before")
    @classmethod
    def _known_objective(cls, value: object) -> object:
        if isinstance(value, str) and value not in OBJECTIVES:
            raise ValueError(choices_message("objective", value, list(OBJECTIVES)))
        return value

    @model_validator(mode="after")
    def _machine(self) -> SolveRequest:
        if self.model.carries_machine:
            if self.arch is not None:
                raise ValueError("a .kgraph instance carries its fabric in its header: give --arch/--set as header overrides")
            if self.wafers != 1:
                raise ValueError("a .kgraph instance is placed on one fabric: --wafers must be 1")
            if self.objective is not ObjectiveKind.THROUGHPUT:
                raise ValueError("a .kgraph instance is scored by the contest's objective: --objective does not apply")
            if self.start is not None:
                raise ValueError(
                    f"a .kgraph instance is placed by the contest engine: the start layout of {self.start.source} does not apply"
                )
        elif self.solver.time_cap is not None:
            raise ValueError("--time-cap bounds a .kgraph instance's largest kernel time; ONNX solves minimize it anyway")
        elif self.arch is None:
            raise ValueError(f"model {self.model.label}: an arch is needed (a preset name, a YAML path or an Arch)")
        if self.generation is not None:
            self._one_generation(self.generation)
        from wsealloc.strategy.registry import refuse  # (the strategies, with the solvers they run, load on first use)

        refuse(self)  # what the way of running it asks for cannot plan
        return self

    def _one_generation(self, gen: Generation) -> None:
        """A generation is one request's decode steps on one wafer, its cache at the last step's length."""
        onnx = as_onnx(self.model)
        why = (
            "a .kgraph instance has no KV cache"
            if onnx is None
            else "--wafers must be 1 (one wafer's plan decodes)"
            if self.wafers != 1
            else "--requests must be 1 (one request's tokens)"
            if self.requests != 1
            else "--batch must be 1 (one request's tokens)"
            if onnx.batch not in (None, 1)
            else "--train does not decode"
            if self.cost.train is not None
            else "--mode must be pipelined (the decode steps' weights stay on the wafer)"
            if self.mode is not Mode.PIPELINED
            else f"the decode export's past length is the last step's, {gen.last_context:,} "
            f"(--prompt + --generate - 1), not {onnx.context}"
            if onnx.context != gen.last_context
            else None
        )
        if why is not None:
            raise ValueError(f"--prompt {gen.prompt} --generate {gen.generate}: {why}")

    @property
    def onnx_model(self) -> OnnxSource | SyntheticSource:
        """The ONNX (or generated ONNX) source of the request; a contest instance is refused."""
        onnx = as_onnx(self.model)
        if onnx is None:
            raise UsageError(f"{self.model.label}: a .kgraph contest instance; this command works on ONNX models")
        return onnx

    @property
    def machine(self) -> Arch:
        """The arch of an ONNX or synthetic request (the contest's fabric lives in its source)."""
        if self.arch is None:
            raise UsageError(f"{self.model.label}: a .kgraph instance has no arch (its fabric is in its header)")
        return self.arch

    @property
    def stream_samples(self) -> int:
        """Samples per streamed pass: ``stream_batch``, else the training batch, else 1."""
        if self.stream_batch is not None:
            return self.stream_batch
        return self.cost.train.batch if self.cost.train is not None else 1

    @property
    def micro_batching(self) -> bool:
        """Whether the global batch runs as micro-batches: training with ``--micro-batch`` or a global batch
        over 1 (streamed, ``--stream-batch`` keeps a pass per update as before: ``streams_micro_batches``)."""
        train = self.cost.train
        if train is None:
            return False
        # (the other cost models keep a 1/batch share of the update per sample; --micro-batch is refused there)
        return self.micro_batch is not None or (train.batch > 1 and self.cost.model is CostModelName.STANDARD)

    @property
    def streams_micro_batches(self) -> bool:
        """Whether a streamed plan runs the global batch as micro-batches (``--stream-batch`` not given)."""
        return self.micro_batching and self.stream_batch is None

    @property
    def wafer_count(self) -> int | None:
        """Wafers to pipeline over (None: the fewest that fit)."""
        return None if self.wafers == "auto" else int(self.wafers)

    def to_json(self) -> str:
        """The wire form (bench workers, Dask tasks)."""
        return self.model_dump_json()

    @staticmethod
    def from_json(text: str) -> SolveRequest:
        """Inverse of :meth:`to_json` (validated again: a worker trusts nothing it is sent)."""
        try:
            return SolveRequest.model_validate_json(text)
        except ValidationError as exc:
            raise UsageError(f"solve request: {_first_error(exc)}") from exc


class RequestOptions(TypedDict, total=False):
    """The keyword arguments of the Python API (``wsealloc.solve``, ``compare``, ``sweep``); each maps
    onto one field of :class:`SolveRequest` (defaults: the request's own)."""

    dims: Mapping[str, int]
    input_shapes: Mapping[str, Sequence[int] | str]
    sets: Sequence[str]
    solver: str
    time_limit: float
    workers: int
    seed: int
    time_cap: float | None
    cost: str
    fuse: bool
    allow_unknown_ops: bool
    place: bool
    wafers: int | str | None
    objective: str
    share: str
    grid: str | tuple[int, int] | None
    requests: int
    routing: str
    train: bool
    optimizer: str
    train_batch: int
    recompute: str
    recompute_segment: int | None
    attention: str
    checkpoints: str
    mode: str
    stream_batch: int | None
    micro_batch: int | None
    context: int | None
    batch: int | None
    constraints: str | Path | Constraints | None
    prompt: int | None
    generate: int | None
    prefill: str | Path | None
    prefill_grid: str | tuple[int, int] | None
    start: StartLayout | None


def build_request(
    model: str | Path | OnnxSource | SyntheticSource | KgraphSource | SolveRequest,
    arch: str | Path | Arch | None = None,
    base: Path | None = None,
    **options: Unpack[RequestOptions],
) -> SolveRequest:
    """Validate user-level arguments into a :class:`SolveRequest` (the one builder every boundary uses).

    ``model`` is a path, ``synthetic:KIND:N`` or a source; ``arch`` a preset name, a YAML path or an
    :class:`Arch` (``sets`` are applied to it either way; None: ``wse2``); ``base`` resolves relative
    paths (a suite's folder). For a ``.kgraph`` contest instance, ``arch`` (when given) and ``sets``
    override its header instead (see :func:`kgraph_header`). ``wafers`` None means the arch's
    ``cluster.wafers``. Errors are one-line
    :class:`UsageError`/``ArchError``/``ModelLoadError`` messages naming the argument."""
    unknown = sorted(set(options) - set(RequestOptions.__annotations__))
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)}; choose from {', '.join(RequestOptions.__annotations__)}")
    opts: dict[str, object] = dict(options)
    if isinstance(model, SolveRequest):
        if options or arch is not None:
            given = ", ".join([*(["arch"] if arch is not None else []), *options])
            raise UsageError(f"{given} given with a SolveRequest, which is already complete; build a new request instead")
        return model
    dims = opts.get("dims") or {}
    if not isinstance(dims, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in dims.items()
    ):
        raise UsageError(f"dims {excerpt(dims)}: expected a mapping of dim names to positive integers, e.g. {{'batch': 8}}")
    shapes = _input_shapes(opts.get("input_shapes") or {})
    fuse = bool(opts.get("fuse", True))
    if isinstance(model, (str, Path)):
        try:
            source = parse_model_source(model, dict(dims), fuse, base, shapes)
        except ValidationError as exc:
            raise UsageError(f"model {model}: {_first_error(exc)}") from exc
    elif (onnx := as_onnx(model)) is not None:
        source = _with_shapes(onnx, shapes) if shapes else onnx
    elif as_kgraph(model) is not None:
        source = model
    else:
        raise UsageError(f"model {excerpt(model)}: expected a file path, synthetic:KIND:N or a model source")
    generation = _generation(opts, source, base)
    if generation is not None:
        opts["context"] = generation.last_context
    llm = {key: opts[key] for key in ("context", "batch") if opts.get(key) is not None}
    if llm:
        onnx_source = as_onnx(source)
        if onnx_source is None:
            raise UsageError(f"{source.label}: --context and --batch bind an LLM export's cache dims; a .kgraph has none")
        try:
            source = type(onnx_source).model_validate({**onnx_source.model_dump(), **llm})
        except ValidationError as exc:
            raise UsageError(f"{_first_error(exc)}") from exc
    sets = opts.get("sets") or ()
    if isinstance(sets, str) or not isinstance(sets, Sequence):
        raise UsageError(f"sets {excerpt(sets)}: expected a list of FIELD=VALUE strings, e.g. ['core.sram_bytes=96KiB']")
    if isinstance(arch, (str, Path)) and base is not None and str(arch).endswith((".yaml", ".yml")):
        arch = base / arch if not Path(arch).is_absolute() else arch
    wafers = opts.get("wafers", 1)  # None: the arch's cluster.wafers (the CLI's default)
    resolved: Arch | None
    contest = as_kgraph(source)
    if contest is not None:
        onnx_only = [
            name
            for name, given in (
                ("dims", bool(dims)),
                ("input_shapes", bool(shapes)),
                ("fuse", not fuse),
                ("allow_unknown_ops", bool(opts.get("allow_unknown_ops", False))),
                # given at all, whatever the value (``--solver cpsat`` names the ONNX backend too)
                ("cost", opts.get("cost") is not None),
                ("solver", opts.get("solver") is not None),
            )
            if given
        ]
        if onnx_only:
            raise UsageError(
                f"{source.label}: a .kgraph instance is costed by the contest's kernel library; "
                f"{', '.join(onnx_only)} (--dim, --input-shape, --no-fuse, --allow-unknown-ops, --cost-model, --solver) "
                "apply to ONNX models (the contest placement runs its own strips + CP-SAT engine)"
            )
        header = {**contest.header, **kgraph_header(arch, [str(s) for s in sets])}
        try:  # validated like any source (a zero width is refused here)
            source = KgraphSource.model_validate({**contest.model_dump(), "header": header})
        except ValidationError as exc:
            raise UsageError(f"{contest.label}: {_first_error(exc)}") from exc
        resolved, wafers = None, 1 if wafers is None else wafers
    else:
        resolved = load_arch("wse2" if arch is None else arch, tuple(str(s) for s in sets))
        wafers = resolved.cluster.wafers if wafers is None else wafers
    data = {
        "model": source,
        "arch": resolved,
        "cost": {
            "model": cost_model_name(str(opts.get("cost", "standard"))),
            "allow_unknown_ops": opts.get("allow_unknown_ops", False),
            "state_copies": opts.get("requests", 1),  # every sequence in flight keeps its KV cache
            "train": _training(opts),
            "routing": _choice("routing", opts.get("routing", "uniform"), [r.value for r in Routing]),
        },
        "solver": {
            key: opts[arg]
            for key, arg in (
                ("name", "solver"),
                ("time_limit_s", "time_limit"),
                ("workers", "workers"),
                ("seed", "seed"),
                ("time_cap", "time_cap"),
            )
            if arg in opts
        },
        "place": opts.get("place", True),
        "wafers": wafers,
        "objective": opts.get("objective", "throughput"),
        "sharing": _sharing(opts),
        "requests": opts.get("requests", 1),
        "mode": _choice("mode", opts.get("mode", "pipelined"), [m.value for m in Mode]),
        "stream_batch": opts.get("stream_batch"),
        "micro_batch": opts.get("micro_batch"),
        "constraints": _constraints(opts.get("constraints"), base),
        "generation": generation,
        "start": opts.get("start"),
    }
    if data["stream_batch"] is not None and data["mode"] == Mode.PIPELINED.value:
        # one rule for inference and training alike: only a streamed pass (--mode streaming, or auto when it
        # streams) has a batch of its own; a layer pipeline would plan without it and drop it unsaid. Refused
        # where a request is built, not where one is read: a plan the previous release wrote with it still verifies
        raise UsageError("--stream-batch sets the samples of a streamed pass: give --mode streaming or auto with it")
    try:
        return SolveRequest.model_validate(data)
    except ValidationError as exc:
        raise UsageError(_first_error(exc)) from exc
    except WseallocError:
        raise


def _choice(kind: str, value: object, choices: list[str]) -> str:
    """A named choice, or a one-line error listing the choices."""
    if str(value) not in choices:
        raise UsageError(choices_message(kind, str(value), choices))
    return str(value)


# the options that say how training runs: without ``train`` each is refused when given (a value other
# than None), whatever its value; ``--optimizer adam`` is no less a mistake than ``--optimizer sgd``
# (the CLI passes only the options the user gave: ``cli.options.with_request``, suites only the fields set)
TRAINING_OPTIONS = ("optimizer", "train_batch", "recompute", "recompute_segment", "attention", "checkpoints")


def _training(opts: Mapping[str, object]) -> dict[str, object] | None:
    """``train``, ``optimizer``, ``train_batch``, ``recompute``, ``recompute_segment``, ``attention``,
    ``checkpoints`` as the cost options' training record (None: inference)."""
    if not opts.get("train", False):
        given = [f"--{k.replace('_', '-')}" for k in TRAINING_OPTIONS if opts.get(k) is not None]
        if given:
            raise UsageError(f"{', '.join(given)} set(s) how training runs: give --train with it")
        return None
    return {
        "optimizer": _choice("optimizer", opts.get("optimizer", "adam"), [o.value for o in Optimizer]),
        "batch": opts.get("train_batch", 1),
        "recompute": _choice("recompute", opts.get("recompute", "auto"), [r.value for r in Recompute]),
        "segment": opts.get("recompute_segment"),
        "attention": _choice("attention", opts.get("attention", "stored"), [a.value for a in Attention]),
        "checkpoints": _choice("checkpoints", opts.get("checkpoints", "wafer"), [c.value for c in Checkpoints]),
    }


def _constraints(value: object, base: Path | None) -> Constraints | None:
    """``constraints``: a YAML path (relative to ``base``, a suite's folder) or parsed :class:`Constraints`."""
    if value is None or isinstance(value, Constraints):
        return value
    if isinstance(value, (str, Path)):
        path = Path(value)
        return read_constraints(base / path if base is not None and not path.is_absolute() else path)
    raise UsageError(f"constraints {excerpt(value)}: expected the path of a constraints YAML (docs/constraints.md)")


def _sharing(opts: Mapping[str, object]) -> dict[str, object]:
    """``share`` and ``grid`` as a :class:`Sharing` (``grid`` alone means share mode ``grid``; latency
    plans share by default, throughput plans do not)."""
    grid = opts.get("grid")
    if grid is not None:
        sides = parse_grid(grid) if isinstance(grid, str) else tuple(grid)  # type: ignore[arg-type]
        share = str(opts.get("share") or "grid")
        if share != "grid":
            raise UsageError(f"--grid {grid} fixes every kernel's grid: --share {share} does not apply with it")
        return {"mode": "grid", "grid": sides}
    default = "auto" if str(opts.get("objective", "throughput")) == "latency" else "none"
    share = str(opts.get("share") or default)
    if share not in ("none", "auto"):
        raise UsageError(choices_message("share", share, ["none", "auto"]) + " (or --grid RxC)")
    return {"mode": share}


def _input_shapes(shapes: object) -> dict[str, tuple[int, ...]]:
    """``input_shapes`` of the Python API and suites: a mapping of input names to sizes (a list of
    integers, or the command line's ``"1x3x48x320"``)."""
    example = "e.g. {'x': [1, 3, 48, 320]}"
    if not isinstance(shapes, Mapping):
        raise UsageError(f"input_shapes {excerpt(shapes)}: expected a mapping of input names to shapes, {example}")
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes.items():
        if isinstance(shape, str):
            out.update(parse_input_shapes([f"{name}={shape}"]))
            continue
        if (
            not isinstance(name, str)
            or isinstance(shape, (str, bytes))
            or not isinstance(shape, Sequence)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
        ):
            raise UsageError(f"input_shapes {excerpt(name)}: {excerpt(shape)} is not a list of sizes, {example}")
        out[name] = tuple(int(v) for v in shape)
    return out


def _with_shapes(source: OnnxSource | SyntheticSource, shapes: dict[str, tuple[int, ...]]) -> OnnxSource | SyntheticSource:
    """A source given as an object, with the request's ``input_shapes`` (validated like any source's)."""
    try:
        return type(source).model_validate({**source.model_dump(), "input_shapes": {**source.input_shapes, **shapes}})
    except ValidationError as exc:
        raise UsageError(f"model {source.label}: {_first_error(exc)}") from exc


def _generation(opts: Mapping[str, object], source: ModelSource, base: Path | None) -> Generation | None:
    """``--prompt IN --generate OUT --prefill P.onnx [--prefill-grid RxC]`` as a :class:`Generation`
    (None when none is given): all three named, ``--context`` left to them, the prefill export's own
    prompt IN tokens long."""
    from wsealloc.frontend.llm import prompt_length

    given = {key: opts.get(key) for key in ("prompt", "generate", "prefill", "prefill_grid")}
    if all(v is None for v in given.values()):
        return None
    flags = {"prompt": "--prompt IN", "generate": "--generate OUT", "prefill": "--prefill PREFILL.onnx"}
    missing = [flag for key, flag in flags.items() if given[key] is None]
    if missing:
        raise UsageError(f"generation end to end needs {', '.join(flags.values())}: {', '.join(missing)} missing")
    if opts.get("context") is not None:
        raise UsageError(
            f"--context {opts['context']} with --prompt and --generate: the decode plan's past length is the last "
            "step's (--prompt + --generate - 1); leave --context out"
        )
    if as_onnx(source) is None:
        raise UsageError(f"{source.label}: --prompt and --generate decode an LLM export; a .kgraph has none")
    for key in ("prompt", "generate"):
        value = given[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"--{key} {excerpt(value)}: expected a positive number of tokens")
    path = Path(str(given["prefill"]))
    if base is not None and not path.is_absolute():
        path = base / path
    if not path.is_file():
        raise UsageError(f"--prefill {excerpt(given['prefill'])}: no such file (the prefill export of the decode model)")
    tokens = prompt_length(path)
    if tokens != given["prompt"]:
        raise UsageError(
            f"--prompt {given['prompt']}: the prefill export {path} runs a prompt of {tokens if tokens else 'unknown'} tokens "
            "(its input_ids [1, T]); export one of --prompt tokens (wsealloc export-llm --prompt)"
        )
    grid = given["prefill_grid"]
    side = parse_grid(grid, "--prefill-grid") if isinstance(grid, str) else grid
    try:
        return Generation.model_validate(
            {
                "prompt": given["prompt"],
                "generate": given["generate"],
                "prefill": OnnxSource(path=str(path)),
                "prefill_grid": side,
            }
        )
    except ValidationError as exc:
        raise UsageError(f"--prompt/--generate: {_first_error(exc)}") from exc


def kgraph_header(arch: str | Path | Arch | None, sets: Sequence[str]) -> dict[str, int]:
    """Header overrides of a contest instance: an ``arch`` gives the fabric (its rows x cols) and the
    memory limit (usable SRAM per core in words of ``dtype.bytes``: 48 KiB of 16-bit words is the
    contest's 24,576); ``--set FIELD=N`` sets one header field (``width``, ``height``, ``memlimit``,
    ``wdeltat``, ``wlength``, ``wadapter``), after the arch."""
    header: dict[str, int] = {}
    if arch is not None:
        machine = load_arch(arch)
        header.update(width=machine.cols, height=machine.rows, memlimit=machine.usable_sram_bytes // machine.dtype.bytes)
    for option in sets:
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep or key not in HEADER_INTS:
            raise UsageError(f"--set {option!r}: a .kgraph header field is one of {', '.join(HEADER_INTS)}, e.g. --set wlength=4")
        try:
            header[key] = ascii_int(value.strip().replace("_", ""))
        except ValueError:
            raise UsageError(f"--set {option!r}: {value.strip()!r} is not a whole number") from None
    return header


def check_outputs(
    model: str | Path | OnnxSource | SyntheticSource | KgraphSource | SolveRequest,
    arch: str | Path | Arch | None,
    outputs: Mapping[str, str | Path | None],
) -> None:
    """Before any work: every output path is writable, and none would overwrite the model, the arch
    YAML or another output (the one check of ``solve``, ``compare``, ``sweep`` and the Python API)."""
    if isinstance(model, SolveRequest):
        model = model.model
    model_path = model if isinstance(model, (str, Path)) else model.file
    arch_path = arch_file(str(arch)) if isinstance(arch, (str, Path)) else None
    check_distinct_outputs({"model": model_path, "arch": arch_path}, outputs)
    for path in outputs.values():
        if path is not None:
            check_writable(path)


# what a request field is called where users set it
_OPTION_NAMES = {
    "solver.name": "--solver",
    "solver.time_limit_s": "--time-limit",
    "solver.workers": "--workers",
    "solver.seed": "--seed",
    "solver.time_cap": "--time-cap",
    "wafers": "--wafers",
    "objective": "--objective",
    "requests": "--requests",
    "cost.state_copies": "--requests",  # every sequence in flight keeps its KV cache (build_request)
    "cost.train.batch": "--train-batch",
    "cost.routing": "--routing",
    "cost.train.segment": "--recompute-segment",
    "stream_batch": "--stream-batch",
    "micro_batch": "--micro-batch",
    "mode": "--mode",
    "sharing": "--share",
    "sharing.grid": "--grid",
    "model.context": "--context",
    "model.batch": "--batch",
    "context": "--context",
    "batch": "--batch",
    "place": "place",
    "cost.allow_unknown_ops": "allow_unknown_ops",
    "constraints": "--constraints",
}


def _first_error(exc: ValidationError) -> str:
    """One line for the first problem of a validation error, naming the option."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "union[")))
    message = str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    shown = f" {excerpt(value)}" if not isinstance(value, (dict, list, BaseModel)) else ""
    head = f"{_OPTION_NAMES.get(where, where)}{shown}"
    return f"{head}: {message}" if head else message  # a whole-request rule names its options itself
