"""Read a constraints file (``--constraints c.yaml``) into :class:`~wsealloc.constraints.schema.Constraints`.

Strict YAML (a key given twice is an error, as in arch files): a list of entries, each a mapping with
exactly one kind key (``grid``, ``place``, ``keep-out``, ``together``, ``cut``) whose value says what
the rule applies to, and the kind's fields beside it::

    - grid: node_addmm_2          # a kernel name, a glob, a list, {op: MatMul} or {range: [a, b]}
      shape: 24x32
    - keep-out: {rows: [0, 99]}    # the top 100 rows, every column

Every error names the file and the line of the entry, and says what would be valid.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from wsealloc.constraints.schema import KINDS, Constraints, CutRule, GridRule, KeepOut, PlaceRule, Together
from wsealloc.cost.model import Dataflow
from wsealloc.errors import ConstraintError, excerpt
from wsealloc.files import binary_kind
from wsealloc.yamlload import StrictYamlError, load_yaml_node

# the fields each kind takes beside its kind key
FIELDS: dict[str, tuple[str, ...]] = {
    "grid": ("shape", "rows", "cols", "cores", "dataflow"),
    "place": ("at", "within"),
    "keep-out": (),
    "together": ("how",),
    "cut": ("must",),
}
DATAFLOWS = {**{d.name.lower(): d for d in Dataflow}, **{d.value: d for d in Dataflow}}


def read_constraints(path: str | Path) -> Constraints:
    """Parse and validate a constraints file; :class:`ConstraintError` names the file and line."""
    path = Path(path)
    label = str(path)
    if not path.is_file():
        raise ConstraintError(f"{label}: constraints file not found (--constraints takes a YAML file; docs/constraints.md)")
    kind = binary_kind(path)
    if kind is not None:
        raise ConstraintError(
            f"{label}: looks like {kind}, not a constraints YAML; --constraints takes a YAML file (docs/constraints.md)"
        )
    try:
        raw = path.read_bytes()
        text = raw.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConstraintError(f"{label}: cannot read the constraints file ({exc.__class__.__name__}: {exc})") from exc
    return parse_constraints(text, label, hashlib.sha256(raw).hexdigest())


def parse_constraints(text: str, label: str, sha256: str = "") -> Constraints:
    """Parse the text of a constraints file (``label`` names it in messages)."""
    try:
        data, node = load_yaml_node(text, label)
    except StrictYamlError as exc:
        raise ConstraintError(str(exc)) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConstraintError(f"{label}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from exc
    if data is None:
        return Constraints(source=label, sha256=sha256)
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise ConstraintError(
            f"{label}: expected a list of rules (each '- grid: ...', '- place: ...', '- keep-out: ...', "
            "'- together: ...' or '- cut: ...'); see docs/constraints.md"
        )
    rules = [_rule(entry, item, label) for entry, item in zip(data, node.value, strict=True)]
    try:
        return Constraints(source=label, sha256=sha256, rules=tuple(rules))
    except ValidationError as exc:  # the rules were validated one by one; this is the whole file
        raise ConstraintError(f"{label}: {exc.errors()[0]['msg']}") from exc


def _rule(entry: Any, item: yaml.Node, label: str) -> Any:
    """One entry (``item``: its node) as a validated rule."""
    line = item.start_mark.line + 1
    where = f"{label} line {line}"
    if not isinstance(entry, Mapping):
        raise ConstraintError(f"{where}: expected a mapping such as 'grid: NAME' with its fields, got {excerpt(entry)}")
    kinds = [k for k in KINDS if k in entry]
    if len(kinds) != 1:
        found = f"both {kinds[0]!r} and {kinds[1]!r}" if len(kinds) > 1 else f"none of {', '.join(KINDS)}"
        raise ConstraintError(f"{where}: an entry has one kind key ({', '.join(KINDS)}); found {found}")
    kind = kinds[0]
    extra = sorted(str(k) for k in entry if k != kind and k not in FIELDS[kind])
    if extra:
        allowed = ", ".join(FIELDS[kind]) or "no other fields"
        raise ConstraintError(f"{where}: {kind} takes {allowed}; unknown field(s) {', '.join(extra)}")
    value = entry[kind]
    data: dict[str, Any] = {"kind": kind, "line": line}
    try:
        if kind == "keep-out":
            data["area"] = _area(value, where, "keep-out")
        elif kind == "cut":
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise ConstraintError(f"{where}: cut takes the kernel the pipeline is cut after (a name), got {excerpt(value)}")
            data["after"] = value
            if "must" in entry:
                data["must"] = entry["must"]
        else:
            data["select"] = _selector(value, where)
            written = _written(item)
            for name in FIELDS[kind]:
                if name in entry:
                    data[name] = _field(kind, name, entry[name], where, written.get(name))
        models: dict[str, type[GridRule | PlaceRule | KeepOut | Together | CutRule]] = {
            "grid": GridRule,
            "place": PlaceRule,
            "keep-out": KeepOut,
            "together": Together,
            "cut": CutRule,
        }
        return models[kind].model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConstraintError(f"{where}: {kind}{' ' + field if field else ''}: {message}") from exc


def _selector(value: Any, where: str) -> dict[str, Any]:
    """A kernel selection: a name or glob, a list of them, or a mapping of name(s)/op(s)/range."""
    if isinstance(value, str):
        return {"names": (value,)}
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return {"names": tuple(value)}
    if isinstance(value, Mapping):
        unknown = sorted(str(k) for k in value if k not in ("name", "names", "op", "ops", "range"))
        if unknown:
            raise ConstraintError(f"{where}: a selection takes name(s), op(s) or range; unknown key(s) {', '.join(unknown)}")
        out: dict[str, Any] = {}
        names = [*_strings(value.get("name"), where, "name"), *_strings(value.get("names"), where, "names")]
        ops = [*_strings(value.get("op"), where, "op"), *_strings(value.get("ops"), where, "ops")]
        if names:
            out["names"] = tuple(names)
        if ops:
            out["ops"] = tuple(ops)
        if "range" in value:
            span = value["range"]
            if not isinstance(span, list) or len(span) != 2:
                raise ConstraintError(f"{where}: range takes [FIRST, LAST] kernels (names or positions), got {excerpt(span)}")
            out["range"] = tuple(span)
        return out
    raise ConstraintError(
        f"{where}: expected the kernels a rule applies to: a name or glob ('node_addmm_*'), a list of them, "
        f"{{op: MatMul}} or {{range: [FIRST, LAST]}}; got {excerpt(value)}"
    )


def _strings(value: Any, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConstraintError(f"{where}: {key} takes a string or a list of strings, got {excerpt(value)}")


def _area(value: Any, where: str, what: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConstraintError(f"{where}: {what} takes an area {{rows: [FIRST, LAST], cols: [FIRST, LAST]}}, got {excerpt(value)}")
    return dict(value)


def _written(item: yaml.Node) -> dict[Any, str]:
    """The text of each scalar field of an entry as the file writes it: YAML reads ``0x8`` as the
    hexadecimal integer 8, and ``shape: 0x8`` means rows 0, cols 8."""
    if not isinstance(item, yaml.MappingNode):
        return {}
    return {
        key.value: value.value
        for key, value in item.value
        if isinstance(key, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode)
    }


def _field(kind: str, name: str, value: Any, where: str, written: str | None = None) -> Any:
    """A field of a grid, place or together rule, in the schema's form (``written``: the field's text in
    the file, for a scalar)."""
    if name == "shape":  # "RxC" as written (sizes in ASCII digits), or [R, C]
        text = written if written is not None else value if isinstance(value, str) else None
        parts = text.lower().replace(" ", "").split("x") if text is not None else []
        if len(parts) == 2 and all(p.isascii() and p.isdigit() and len(p) <= 15 and int(p) >= 1 for p in parts):
            return (int(parts[0]), int(parts[1]))
        sides = value if text is None and isinstance(value, list) else []
        if len(sides) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in sides):
            return tuple(sides)
        shown = excerpt(text if text is not None else value)
        raise ConstraintError(f"{where}: shape takes RxC (rows x cols, each at least 1, e.g. 24x32), got {shown}")
    if name == "at" and not (isinstance(value, list) and len(value) == 2):
        raise ConstraintError(f"{where}: at takes [ROW, COL] (the kernel's top-left core, e.g. [0, 0]), got {excerpt(value)}")
    if name in ("rows", "cols", "cores"):
        if isinstance(value, int) and not isinstance(value, bool):
            return {"min": value, "max": value}
        if isinstance(value, list) and len(value) == 2:
            return {"min": value[0], "max": value[1]}
        raise ConstraintError(f"{where}: {name} takes [MIN, MAX] (null for an open end) or one number, got {excerpt(value)}")
    if name == "dataflow":
        key = str(value).lower().replace("-", "_")
        if key not in DATAFLOWS:
            raise ConstraintError(
                f"{where}: unknown dataflow {excerpt(value)}; choose one of: {', '.join(d.name.lower() for d in Dataflow)}"
            )
        return DATAFLOWS[key]
    if name == "within":
        return _area(value, where, "within")
    return value
