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
    time_limit: 10                           # seconds per solver stage
    timeout: 120                             # wall-clock limit of the worker (default 4 x time_limit + 300)
    best: {objective: 661, bound: 661}       # best known (the regression gate); bench --update-best
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from wsealloc.arch.schema import wafer_count
from wsealloc.bench.synthetic import PREFIX, parse_spec
from wsealloc.errors import UsageError, WseallocError
from wsealloc.yamlload import load_yaml

SUITES_DIR = Path(__file__).resolve().parents[2] / "instances"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Best(_Frozen):
    """Best known result of an instance."""

    objective: int = Field(gt=0)
    bound: int | None = None


# A suite's name becomes the file name of its results: no path separators, not "." or "..".
def _file_name(name: str) -> str:
    if not name or name in (".", "..") or any(ch in name for ch in "/\\\0") or len(name) > 200:
        raise ValueError(f"{name!r} is not usable as a file name (no '/' or '\\', not '.' or '..', at most 200 characters)")
    return name


FileName = Annotated[str, AfterValidator(_file_name)]


class Instance(_Frozen):
    """One benchmark instance."""

    name: str = Field(min_length=1)
    note: str = ""  # why the instance is there (kept when --update-best rewrites the file, unlike comments)
    model: str
    arch: str = "wse2"
    sets: tuple[str, ...] = ()
    dims: dict[str, Annotated[int, Field(gt=0, lt=2**31)]] = {}
    solver: str = "cpsat"
    place: bool = False
    allow_unknown_ops: bool = False  # cost ops the model does not know as 1 vector op per output element
    wafers: Annotated[int | Literal["auto"], BeforeValidator(wafer_count)] = 1
    time_limit: float = Field(default=30.0, gt=0)
    # Wall-clock limit of a local worker (seconds); default 4 x time_limit + 300. Past it: a TIMEOUT row.
    timeout: float | None = Field(default=None, gt=0)
    best: Best | None = None

    def resolved(self, base: Path) -> dict[str, Any]:
        """Plain data for a worker, with paths resolved against the suite's folder."""
        data = self.model_dump(mode="json")
        if not self.model.startswith(PREFIX):
            data["model"] = str((base / self.model).resolve()) if not Path(self.model).is_absolute() else self.model
        arch = base / self.arch
        if self.arch.endswith((".yaml", ".yml")) and not Path(self.arch).is_absolute():
            data["arch"] = str(arch.resolve())
        return data


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


def load_suite(spec: str) -> tuple[Suite, Path]:
    """Load and validate a suite; errors name the file and the field."""
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
    try:
        data = load_yaml(path.read_text(), str(path))
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
            raise UsageError(f"{path}: instances.{i}.name: {inst.name!r} is used twice; instance names must be unique")
        seen.add(inst.name)
        try:
            check_instance(inst, path.parent)
        except WseallocError as exc:
            raise UsageError(f"{path}: instances.{i} ({inst.name}): {exc}") from exc
    return suite, path


def check_instance(inst: Instance, base: Path) -> None:
    """What can be checked without solving: the model exists (or is a valid synthetic spec), the solver
    is known, and the arch with its overrides loads (so a typo fails before a long run, not in it)."""
    from wsealloc.arch import load_arch
    from wsealloc.solvers import get_solver

    data = inst.resolved(base)
    if inst.model.startswith(PREFIX):
        parse_spec(inst.model)
    elif not Path(data["model"]).is_file():
        raise UsageError(f"model {inst.model}: no such file (paths are relative to the suite file)")
    get_solver(inst.solver)
    load_arch(data["arch"], inst.sets)


def suite_document(suite: Suite) -> str:
    """YAML text of a suite (used to record improved best-known values)."""
    return yaml.safe_dump(suite.model_dump(mode="json", exclude_defaults=True), sort_keys=False, width=120)
