"""Bench results: CSV, JSON and Markdown tables (written atomically), the regression gate against the
suite's best-known values, and recording improvements."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from wsealloc.bench.runner import ROW_FIELDS
from wsealloc.bench.suite import Best, Suite, suite_document
from wsealloc.plan.io import write_atomic


def to_csv(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV (the fixed columns plus the error text)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*ROW_FIELDS, "error"], extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """Rows as a Markdown table."""
    head = "| " + " | ".join(ROW_FIELDS) + " |\n|" + "---|" * len(ROW_FIELDS) + "\n"

    def cell(v: Any) -> str:
        return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

    return head + "".join("| " + " | ".join(cell(r.get(f)) for f in ROW_FIELDS) + " |\n" for r in rows)


def write_results(out: Path, suite: str, rows: list[dict[str, Any]]) -> list[Path]:
    """Write ``<suite>.csv``, ``<suite>.json`` and ``<suite>.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{suite}.csv", out / f"{suite}.json", out / f"{suite}.md"]
    write_atomic(paths[0], to_csv(rows))
    write_atomic(paths[1], json.dumps({"suite": suite, "results": rows}, indent=1))
    write_atomic(paths[2], to_markdown(rows))
    return paths


def regressions(suite: Suite, rows: list[dict[str, Any]]) -> list[str]:
    """Instances worse than their best-known objective, or failed: one message each."""
    out = []
    for inst, row in zip(suite.instances, rows, strict=True):
        if row["solver"] is None:
            out.append(f"{inst.name}: {row['status']} ({row.get('error', '')})")
        elif inst.best is not None and row["solver"] > inst.best.objective:
            out.append(f"{inst.name}: {row['solver']:,} cycles, worse than the best known {inst.best.objective:,}")
    return out


def with_improvements(suite: Suite, rows: list[dict[str, Any]]) -> tuple[Suite, list[str]]:
    """The suite with every better (or first) result recorded as its best known."""
    changed = []
    instances = []
    for inst, row in zip(suite.instances, rows, strict=True):
        if row["solver"] is not None and (inst.best is None or row["solver"] < inst.best.objective):
            inst = inst.model_copy(update={"best": Best(objective=row["solver"], bound=row["bound"])})
            changed.append(inst.name)
        instances.append(inst)
    return suite.model_copy(update={"instances": tuple(instances)}), changed


def record(path: Path, suite: Suite) -> None:
    """Rewrite the suite file (atomically) with its best-known values."""
    write_atomic(path, suite_document(suite))
