"""Bench results: CSV, JSON and Markdown tables (written atomically), the regression gate against the
suite's best-known values, recording improvements, and :func:`run_suite` (the ``bench`` command as
a function)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsealloc.bench.runner import CONTEST_FIELDS, ROW_FIELDS, WORKER_COMMAND, BenchRow, run_all
from wsealloc.bench.suite import Best, Suite, SuiteFile, load_suite, suite_document
from wsealloc.plan.io import write_atomic


def _contest(rows: Sequence[BenchRow]) -> bool:
    return any(r.contest for r in rows)


def _contest_dict(r: BenchRow) -> dict[str, Any]:
    """A contest row under its table's column names."""
    ratio = None if r.solver is None or not r.bound else round(r.solver / r.bound, 4)
    return {
        "instance": r.instance,
        "kernels": r.kernels,
        "max_time": r.solver,
        "lower_bound": r.bound,
        "time_over_bound": ratio,
        "wirelength": r.wirelength,
        "score": r.score,
        "status": r.status,
        "wall_s": r.wall_s,
        "error": r.error,
    }


def _table(rows: Sequence[BenchRow]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The columns and records of a results table: the contest's for contest suites, else the allocation's."""
    if _contest(rows):
        return CONTEST_FIELDS, [_contest_dict(r) for r in rows]
    return ROW_FIELDS, [r.to_dict() for r in rows]


def to_csv(rows: Sequence[BenchRow]) -> str:
    """Rows as CSV (the fixed columns plus the error text)."""
    fields, data = _table(rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*fields, "error"], lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(data)
    return buf.getvalue()


def _cell(v: Any) -> str:
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def to_markdown(rows: Sequence[BenchRow]) -> str:
    """Rows as a Markdown table (failed instances carry their error after the table)."""
    fields, data = _table(rows)
    head = "| " + " | ".join(fields) + " |\n|" + "---|" * len(fields) + "\n"
    table = head + "".join("| " + " | ".join(_cell(r[f]) for f in fields) + " |\n" for r in data)
    errors = "".join(f"\n- {r.instance}: {r.status}: {r.error}" for r in rows if r.error)
    return table + (f"\nFailed:\n{errors}\n" if errors else "")


def rows_as_dicts(rows: Sequence[BenchRow]) -> list[dict[str, Any]]:
    """Rows as plain dicts (the JSON document's ``results``)."""
    return [r.to_dict() for r in rows]


def write_results(out: Path, suite: str, rows: Sequence[BenchRow]) -> list[Path]:
    """Write ``<suite>.csv``, ``<suite>.json`` and ``<suite>.md`` into ``out`` (each atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{suite}.csv", out / f"{suite}.json", out / f"{suite}.md"]
    write_atomic(paths[0], to_csv(rows))
    write_atomic(paths[1], json.dumps({"suite": suite, "results": rows_as_dicts(rows)}, indent=1) + "\n")
    write_atomic(paths[2], to_markdown(rows))
    return paths


def failures(suite: Suite, rows: Sequence[BenchRow]) -> list[str]:
    """One message per instance that gave no result (ERROR, CRASHED, TIMEOUT): a failure whether or not
    a best-known value was recorded for it, so never called a regression against one."""
    return [
        f"{inst.name}: {row.status} ({row.error})" for inst, row in zip(suite.instances, rows, strict=True) if row.solver is None
    ]


def regressions(suite: Suite, rows: Sequence[BenchRow]) -> list[str]:
    """One message per instance with a result that is worse than its best-known objective, proves a
    weaker bound than the recorded one, or claims a bound above the best known objective (an unsound
    bound). Instances without a result are :func:`failures`."""
    out = []
    for inst, row in zip(suite.instances, rows, strict=True):
        best = inst.best
        if row.solver is None or best is None:
            continue
        what = "score" if row.contest else "cycles"
        bound_what = "on the largest kernel time" if row.contest else "cycles"  # a contest bound is on the time
        objective = row.objective
        assert objective is not None
        if objective > best.objective:
            out.append(f"{inst.name}: {objective:,} {what}, worse than the best known {best.objective:,}")
        if row.bound is not None and best.bound is not None and row.bound < best.bound:
            out.append(f"{inst.name}: bound {row.bound:,} {bound_what}, weaker than the recorded {best.bound:,}")
        # a bound above what was achieved is unsound (a contest bound is on the time, the achieved time is ``solver``)
        achieved = row.solver if row.contest else best.objective
        if row.bound is not None and row.bound > achieved:
            reached = f"this run's largest kernel time {achieved:,}" if row.contest else f"the best known objective {achieved:,}"
            out.append(f"{inst.name}: bound {row.bound:,} {bound_what} exceeds {reached} (unsound)")
    return out


def with_improvements(suite: Suite, rows: Sequence[BenchRow]) -> tuple[Suite, list[str]]:
    """The suite with every better (or first) objective and every tighter bound recorded as best known."""
    changed = []
    instances = []
    for inst, row in zip(suite.instances, rows, strict=True):
        if row.objective is not None and row.solver is not None:
            old = inst.best
            objective = row.objective if old is None else min(old.objective, row.objective)
            bound = row.bound if old is None or old.bound is None else max(old.bound, row.bound or 0)
            if bound is not None and bound > (row.solver if row.contest else objective):  # never record an unsound pair
                bound = old.bound if old is not None else None
            best = Best(objective=objective, bound=bound)
            if best != old:
                inst = inst.model_copy(update={"best": best})
                changed.append(inst.name)
        instances.append(inst)
    return suite.model_copy(update={"instances": tuple(instances)}), changed


def record(path: Path, suite: Suite) -> None:
    """Rewrite the suite file (atomically) with its best-known values, keeping its permissions (a
    folder suite's best file is created on its first ``--update-best``)."""
    mode = path.stat().st_mode & 0o777 if path.exists() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, suite_document(suite))
    if mode is not None:
        path.chmod(mode)


@dataclass(frozen=True)
class BenchRun:
    """The outcome of running a suite: rows in suite order, regressions against best-known values and
    failed instances (both empty when the gate holds), the instances whose best-known values were
    recorded, and the files written (``path``: the suite file holding the best-known values, which a
    folder suite's first run has not written yet)."""

    suite: Suite
    path: Path
    rows: tuple[BenchRow, ...]
    regressions: tuple[str, ...]
    improved: tuple[str, ...]
    written: tuple[Path, ...]
    failures: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when no instance regressed or failed."""
        return not self.regressions and not self.failures

    def gate_message(self) -> str:
        """The gate's verdict on one line: the failed instances, then the regressions against the
        best-known values (the file holding them named only where it exists); "" when it holds."""
        parts = []
        for count, what, items in (
            (len(self.failures), "instance(s) failed", self.failures),
            (len(self.regressions), "regression(s) against the best-known values", self.regressions),
        ):
            if count:
                where = f" in {self.path}" if items is self.regressions and self.path.is_file() else ""
                parts.append(f"{count} {what}{where}: {'; '.join(items[:3])}{' ...' if count > 3 else ''}")
        return "; and ".join(parts)


def run_suite(
    suite: str | Path | SuiteFile,
    *,
    out: str | Path | None = None,
    jobs: int = 1,
    scheduler: str | None = None,
    update_best: bool = False,
    on_done: Callable[[BenchRow], None] | None = None,
    worker: Sequence[str] = WORKER_COMMAND,
) -> BenchRun:
    """Run a suite (a name in ``instances/`` or a YAML path): locally with ``jobs`` worker processes,
    or on the Dask cluster at ``scheduler``; write CSV/JSON/Markdown into ``out`` when given; with
    ``update_best``, record improvements into the suite file. Never raises on a regression or a failed
    instance: see :attr:`BenchRun.regressions`, :attr:`BenchRun.failures` and :attr:`BenchRun.passed`."""
    file = suite if isinstance(suite, SuiteFile) else load_suite(str(suite))
    loaded, path = file.suite, file.path
    rows = run_all(file.tasks, jobs=jobs, scheduler=scheduler, on_done=on_done, worker=worker)
    written = write_results(Path(out), loaded.name, rows) if out is not None else []
    names: list[str] = []
    if update_best:
        loaded, names = with_improvements(loaded, rows)
        if names:
            record(path, file.to_record(loaded))
    return BenchRun(
        loaded, path, tuple(rows), tuple(regressions(loaded, rows)), tuple(names), tuple(written), tuple(failures(loaded, rows))
    )
