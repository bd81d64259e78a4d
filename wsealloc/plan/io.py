"""Plan reading with clear errors (atomic output and hashes: ``wsealloc.files``, re-exported here)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from wsealloc.errors import PlanError
from wsealloc.files import binary_kind, check_distinct_outputs, check_writable, file_sha256, write_atomic
from wsealloc.plan.schema import SCHEMA, SCHEMAS, Plan

__all__ = ["check_distinct_outputs", "check_writable", "file_sha256", "read_plan", "write_atomic"]


def read_plan(path: str | Path) -> Plan:
    """Read and validate a plan file."""
    p = Path(path)
    kind = binary_kind(p)
    if kind is not None:
        raise PlanError(f"{p}: looks like {kind}, not a plan JSON; give the plan written by wsealloc solve -o")
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{p}: cannot read ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise PlanError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg}); was the file truncated?") from exc
    except RecursionError:  # Python's JSON reader recurses once per level: no plan nests so deep
        raise PlanError(f"{p}: JSON nested too deep for a plan (arrays or objects nested about 1,000 levels or more)") from None
    if not isinstance(data, dict) or data.get("schema") not in SCHEMAS:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise PlanError(f"{p}: not a {SCHEMA} plan (schema: {found!r})")
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise PlanError(f"{p}: field {where}: {err['msg']}") from exc
