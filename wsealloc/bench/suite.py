"""Instance suites: YAML files validated once into frozen objects (``instances/*.yaml``).

name: smoke
description: ...
instances:
  - name: attention-tiny
    note: why it is in the suite             # optional; kept by --update-best (comments are not)
    model: ../models/tiny/attention.onnx     # relative to the suite file, or synthetic:chain:N | synthetic:transformer:L
    arch: tiny                               # preset or YAML path (relative to the suite file)
    sets: [core.sram_bytes=24KiB]            # --set overrides
    dims: {seq: 64}
    solver: cpsat
    place: false
    allow_unknown_ops: false                 # cost unknown ops as 1 vector op per output element
    wafers: 1                                # or auto
    time_limit: 10                           # seconds for the whole solve (default 30)
    time_cap: 1.05                           # .kgraph instances: largest kernel time within 1.05 x the bound
    timeout: 120                             # wall-clock limit of the worker (default time_limit + 300)
    best: {objective: 661, bound: 661}       # best known (the regression gate); bench --update-best
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from wsealloc.arch.schema import wafer_count
from wsealloc.bench.runner import Task
from wsealloc.budget import DEFAULT_TIME_LIMIT_S
from wsealloc.errors import UsageError, WseallocError, excerpt
from wsealloc.files import binary_kind
from wsealloc.request import SolveRequest, build_request
from wsealloc.yamlload import StrictYamlError, load_yaml

SUITES_DIR = Path(__file__).resolve().parents[2] / "instances"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Best(_Frozen):
    """Best known result of an instance."""

    # bottleneck cycles (ONNX, at least 1), or the score of a contest instance (0 is a legal score:
    # wdeltat=0 with one kernel, or wlength=0 with a zero time)
    objective: int | float = Field(ge=0)
    bound: int | None = None  # the proven lower bound (cycles; a contest instance's: on its largest kernel time)


# A suite's name becomes the file name of its results: no path separators, not "." or "..".
def _file_name(name: str) -> str:
    if not name or name in (".", "..") or any(ch in name for ch in "/\\\0") or len(name) > 200:
        raise ValueError(
            f"{excerpt(name)} is not usable as a file name (no '/' or '\\', not '.' or '..', at most 200 characters)"
        )
    return name


FileName = Annotated[str, AfterValidator(_file_name)]


# Instance fields handed to build_request only when the suite file sets them (see Instance.request)
_GIVEN_ONLY = ("solver", "optimizer", "recompute", "recompute_segment", "train_batch")


class Instance(_Frozen):
    """One benchmark instance: a name, a note, the best known values, and the fields of a solve
    request as users write them (:meth:`request` validates them into one)."""

    name: str = Field(min_length=1)
    note: str = ""  # why the instance is there (kept when --update-best rewrites the file, unlike comments)
    model: str
    arch: str | None = None  # None: wse2 for ONNX models; a .kgraph instance keeps its header
    sets: tuple[str, ...] = ()
    dims: dict[str, Annotated[int, Field(gt=0, lt=2**31)]] = {}
    # whole input shapes (--input-shape): a list of sizes or "1x3x48x320"
    input_shapes: dict[str, list[int] | str] = {}
    solver: str = "cpsat"
    place: bool = False
    allow_unknown_ops: bool = False  # cost ops the model does not know as 1 vector op per output element
    wafers: Annotated[int | Literal["auto"], BeforeValidator(wafer_count)] = 1
    time_limit: float = Field(default=DEFAULT_TIME_LIMIT_S, gt=0)
    time_cap: float | None = None  # contest instances only (see wsealloc.request.SolverSettings)
    # Wall-clock limit of a local worker (seconds); default time_limit + 300. Past it: a TIMEOUT row.
    timeout: float | None = Field(default=None, gt=0)
    # the user's rules (docs/constraints.md): a constraints YAML, relative to the suite file
    constraints: str | None = None
    # training in the layer pipeline (docs/cost-model.md, section 11): the optimizer and recomputation
    train: bool = False
    optimizer: str = "adam"
    recompute: str = "auto"
    recompute_segment: int | None = None
    train_batch: int = 1
    mode: str = "pipelined"  # or streaming, auto (docs/cost-model.md, section 12)
    stream_batch: int | None = None
    micro_batch: int | None = None
    best: Best | None = None

    def request(self, base: Path) -> SolveRequest:
        """The solve request of this instance, paths resolved against the suite's folder ``base``."""
        # fields the request refuses where they cannot apply, whatever their value (the training ones
        # without train, solver on a .kgraph): passed only when the suite sets them, as the CLI does
        given = {key: getattr(self, key) for key in _GIVEN_ONLY if key in self.model_fields_set}
        request = build_request(
            self.model,
            self.arch,
            base=base,
            dims=self.dims,
            input_shapes=self.input_shapes,
            sets=self.sets,
            time_limit=self.time_limit,
            time_cap=self.time_cap,
            place=self.place,
            allow_unknown_ops=self.allow_unknown_ops,
            wafers=self.wafers,
            constraints=self.constraints,
            train=self.train,
            mode=self.mode,
            stream_batch=self.stream_batch,
            micro_batch=self.micro_batch,
            **given,
        )
        source = request.model
        if source.file is not None and not Path(source.file).is_file():
            raise UsageError(f"model {self.model}: no such file (paths are relative to the suite file)")
        return request

    def task(self, base: Path) -> Task:
        """What a worker runs for this instance."""
        return Task.of(self.name, self.request(base), self.timeout)


class Suite(_Frozen):
    """A named list of instances."""

    name: FileName
    description: str = ""
    instances: tuple[Instance, ...] = Field(min_length=1)


def suite_path(spec: str) -> Path:
    """A suite by name (``instances/<name>.yaml``) or by path."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return path
    return SUITES_DIR / f"{spec}.yaml"


@dataclass(frozen=True)
class SuiteFile:
    """A loaded suite: the document, where it lives, and its instances as validated tasks. ``prior``:
    a folder suite's best file as it was (None: not written yet); recording best-known values keeps
    its name, its order and the instances the folder does not hold (another folder's, or a file since
    removed)."""

    suite: Suite
    path: Path
    tasks: tuple[Task, ...]
    prior: Suite | None = None

    def to_record(self, suite: Suite) -> Suite:
        """The document to write when ``suite`` (this suite with new best values) is recorded."""
        if self.prior is None:
            return suite
        updated = {inst.name: inst for inst in suite.instances}
        known = [updated.pop(inst.name, inst) for inst in self.prior.instances]
        return self.prior.model_copy(update={"instances": (*known, *updated.values())})


def folder_suite(folder: Path, best: Path, time_limit: float, time_cap: float | None) -> SuiteFile:
    """A folder of contest instances (``*.kgraph``, sorted by name) as a suite named after the folder.

    Best-known values live in ``best``, a suite YAML of the same instances (the folder itself may be
    read-only, e.g. the contest's files): read when it exists (the regression gate), written by
    ``--update-best``; it is an ordinary suite file, runnable on its own."""
    files = sorted(folder.glob("*.kgraph"))
    if not files:
        raise UsageError(f"{folder}: no .kgraph files; a folder suite runs every contest instance it holds")
    known: dict[str, Best] = {}
    prior = read_suite(str(best)) if best.is_file() else None
    for inst in prior.instances if prior is not None else ():
        if inst.best is not None:
            known[inst.name] = inst.best
    try:
        instances = tuple(
            Instance(name=f.stem, model=str(f.resolve()), time_limit=time_limit, time_cap=time_cap, best=known.get(f.stem))
            for f in files
        )
    except ValidationError as exc:  # --time-limit 0 and the like: the option's fault, named as such
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        option = {"time_limit": "--time-limit", "time_cap": "--time-cap"}.get(field, field)
        raise UsageError(f"{option} {excerpt(err.get('input'))}: {str(err['msg']).removeprefix('Value error, ')}") from None
    suite = Suite(name=_folder_name(folder), description=f"contest instances in {folder}", instances=instances)
    tasks = tuple(inst.task(folder) for inst in instances)
    return SuiteFile(suite, best, tasks, prior)


def _folder_name(folder: Path) -> str:
    name = folder.resolve().name or "suite"
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def load_suite(spec: str) -> SuiteFile:
    """Load and validate a suite, every instance built into its task (a typo fails here, before anything
    runs); errors name the file, the instance and the field."""
    path = suite_path(spec)
    suite = read_suite(spec)
    tasks = []
    for i, inst in enumerate(suite.instances):
        try:
            tasks.append(inst.task(path.parent))
        except WseallocError as exc:
            raise UsageError(f"{path}: instances.{i} ({inst.name}): {exc}") from exc
    return SuiteFile(suite, path, tuple(tasks))


def read_suite(spec: str) -> Suite:
    """The suite document of ``spec`` (a name in ``instances/`` or a YAML path), validated (fields,
    unique names) but without building its instances' requests: a folder suite's best file may name
    instances whose files are gone."""
    path = suite_path(spec)
    if not path.is_file():
        if not SUITES_DIR.is_dir():
            # the named suites and the zoo they use are files of the source checkout, not of the package
            raise UsageError(
                f"suite {spec!r} not found: named suites live in the source checkout's instances/ folder "
                f"(with the models/ they use), and this installation has none; pass a suite YAML path"
            )
        names = sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))
        raise UsageError(f"suite {spec!r} not found ({path}); known suites: {', '.join(names)}")
    kind = binary_kind(path)
    if kind is not None:
        raise UsageError(f"{path}: looks like {kind}, not a suite YAML; give a suite name (instances/) or a suite YAML path")
    try:
        data = load_yaml(path.read_text(), str(path))
    except StrictYamlError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the suite ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a text file ({exc.reason}); a suite is a YAML file") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {exc}") from exc
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        message = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:
            message = "expected a mapping with 'name' and 'instances'"
        raise UsageError(f"{path}: {where}: {message}") from exc
    seen: set[str] = set()
    for i, inst in enumerate(suite.instances):
        if inst.name in seen:
            raise UsageError(f"{path}: instances.{i}.name: {excerpt(inst.name)} is used twice; instance names must be unique")
        seen.add(inst.name)
    return suite


def suite_document(suite: Suite) -> str:
    """YAML text of a suite (used to record improved best-known values)."""
    return yaml.safe_dump(suite.model_dump(mode="json", exclude_defaults=True), sort_keys=False, width=120)
