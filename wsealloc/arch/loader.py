"""Load an architecture by preset name or YAML path, apply ``--set`` overrides, validate once.

All problems surface as :class:`~wsealloc.errors.ArchError` naming the file, the field and the
bad value, e.g. ``wse.yaml: core.sram_bytes: -4 must be > 0``.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from wsealloc.arch.schema import Arch
from wsealloc.errors import ArchError, UsageError, excerpt
from wsealloc.files import binary_kind
from wsealloc.yamlload import StrictYamlError, load_yaml

PRESETS: tuple[str, ...] = ("tiny", "wse2", "wse3", "wse2-measured", "wse3-measured")


def _preset_text(name: str) -> str:
    return resources.files("wsealloc.arch").joinpath("presets").joinpath(f"{name}.yaml").read_text()


def arch_file(spec: str) -> Path | None:
    """The file ``--arch spec`` reads, or None for a preset (the rule ``load_arch`` follows)."""
    return None if spec in PRESETS or not Path(spec).is_file() else Path(spec)


def _read_yaml(spec: str) -> tuple[str, Any]:
    """Return (label for messages, parsed YAML) for a preset name or a path."""
    if spec in PRESETS:
        label = f"preset {spec}"
        try:
            return label, load_yaml(_preset_text(spec), label)
        except StrictYamlError as exc:
            raise ArchError(str(exc)) from exc
    path = Path(spec)
    looks_like_path = path.suffix in (".yaml", ".yml") or "/" in spec or path.exists()
    if not looks_like_path:
        close = difflib.get_close_matches(spec, PRESETS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ArchError(f"--arch {spec!r} is neither a preset nor a file{hint}; presets: {', '.join(PRESETS)}")
    if not path.exists():
        raise ArchError(f"{spec}: architecture file not found; pass a YAML path or a preset ({', '.join(PRESETS)})")
    if path.is_dir():
        raise ArchError(f"{spec}: is a directory, expected an architecture YAML file")
    kind = binary_kind(path)
    if kind is not None:
        raise ArchError(
            f"{spec}: looks like {kind}, not an architecture YAML; give --arch a preset ({', '.join(PRESETS)}) "
            "or an arch YAML (start from wsealloc arch show wse2)"
        )
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchError(f"{spec}: cannot read architecture file ({exc.__class__.__name__}: {exc})") from exc
    try:
        data = load_yaml(text, spec)
    except StrictYamlError as exc:
        raise ArchError(str(exc)) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ArchError(f"{spec}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    return spec, data


def parse_set_option(option: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``--set a.b.c=VALUE`` into (path, YAML-typed value)."""
    if "=" not in option:
        raise UsageError(f"--set {option!r}: expected FIELD=VALUE, e.g. --set core.sram_bytes=96KiB")
    key, _, raw = option.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")) or raw.strip() == "":
        raise UsageError(f"--set {option!r}: expected FIELD=VALUE with a dotted field, e.g. noc.link_bytes_per_cycle=8")
    try:
        value = load_yaml(raw, f"--set {key}")
    except StrictYamlError as exc:
        raise UsageError(str(exc)) from exc
    except yaml.YAMLError:
        value = raw
    return tuple(key.split(".")), value


def _apply_override(data: dict[str, Any], path: tuple[str, ...], value: Any, label: str) -> None:
    node: Any = data
    for i, part in enumerate(path[:-1]):
        if not isinstance(node, dict):
            raise ArchError(f"{label}: --set {'.'.join(path)}: {'.'.join(path[:i])} is not a section")
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        raise ArchError(f"{label}: --set {'.'.join(path)}: {'.'.join(path[:-1])} is not a section")
    node[path[-1]] = value


def _known_fields(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Field names valid at the parent of ``loc`` (for 'did you mean' hints)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = field.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _describe(err: Any, data: Any) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    field = ".".join(str(p) for p in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        known = _known_fields(Arch, loc)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else (f"; known fields here: {', '.join(known)}" if known else "")
        return f"unknown field {excerpt(field)}{hint}"
    if kind == "missing":
        return f"missing required field {excerpt(field)}"
    value = err.get("input")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(value, (dict, list)):
        # A whole-section check (e.g. reserve vs SRAM): the message already names the values.
        return f"{field}: {msg}"
    return f"{field}: {excerpt(value)}: {msg}"


def load_arch(spec: str | Path | Arch, overrides: Sequence[str] = ()) -> Arch:
    """Load a preset (``wse2``, ``wse3``, ``tiny``) or a YAML path, apply ``--set`` overrides, validate.

    ``spec`` may also be an ``Arch`` already (the Python API): the overrides then apply to a copy."""
    if isinstance(spec, Path):
        spec = str(spec)
    if isinstance(spec, Arch):
        if not overrides:
            return spec
        return _validated(f"arch {spec.name}", _with_overrides(spec.model_dump(mode="json"), overrides, f"arch {spec.name}"))
    if not isinstance(spec, str):
        raise UsageError(f"arch {spec!r}: expected a preset name ({', '.join(PRESETS)}), a YAML path or an Arch")
    label, data = _read_yaml(spec)
    if data is None:
        raise ArchError(f"{label}: architecture file is empty; start from a preset, e.g. `wsealloc arch show wse2 > my.yaml`")
    if not isinstance(data, dict):
        raise ArchError(f"{label}: expected a mapping of fields at the top level, got {type(data).__name__}")
    data = copy.deepcopy(data)
    # `wsealloc arch show` prints the derived sizes too; a file saved from it loads as it is (they are
    # recomputed from the fields, never read)
    data.pop("derived", None)
    data = _with_overrides(data, overrides, label)
    data.setdefault("name", Path(spec).stem if label == spec else spec)
    return _validated(label, data)


def _with_overrides(data: dict[str, Any], overrides: Sequence[str], label: str) -> dict[str, Any]:
    """``data`` with every ``--set FIELD=VALUE`` applied (a sequence of options, not one string)."""
    if isinstance(overrides, str):
        raise UsageError(f"sets {overrides!r}: expected a list of FIELD=VALUE strings, e.g. ['{overrides}']")
    for option in overrides:
        path, value = parse_set_option(option)
        _apply_override(data, path, value, label)
    return data


def _validated(label: str, data: dict[str, Any]) -> Arch:
    """The arch of ``data``; a validation error names the field and the value, on one line."""
    try:
        return Arch.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = _describe(errors[0], data)
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise ArchError(f"{label}: {first}{more}") from exc


def arch_to_dict(arch: Arch) -> dict[str, Any]:
    """The arch as plain data (for plan files and ``arch show``), including derived sizes."""
    out = arch.model_dump(mode="json")
    out["derived"] = {
        "rows": arch.rows,
        "cols": arch.cols,
        "total_cores": arch.total_cores,
        "usable_sram_bytes_per_core": arch.usable_sram_bytes,
        "wafer_sram_bytes": arch.wafer_sram_bytes,
        "vector_ops_per_cycle": arch.vector_ops_per_cycle,
    }
    return out
