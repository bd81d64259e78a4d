"""``wsealloc inspect X.kgraph`` and ``wsealloc verify X.sol --kgraph X.kgraph``: tables and JSON documents
for ISPD-2020 contest instances and solutions.

The CLI only dispatches: it reads the instance (``KgraphSource.read``) and the solution, and calls
:func:`inspect_instance` / :func:`print_inspection` / :func:`inspection_json`, :func:`kernel_entry` /
:func:`print_kernel` / :func:`kernel_json`, or :func:`print_verified` / :func:`verify_json`. The
numbers come from the library half of the contest support (``opmodels.contest``,
``problem.contest_bounds``, ``plan.contest_verify``); nothing here computes a figure of its own.

JSON contracts (documented in docs/cli.md, "Contest instances")::

    inspect:   {"instance": {...}, "kernels": [...], "bounds": {...} | null, "infeasible": str | null, "totals": {...}}
    --kernel:  {"kernel", "id", "kind", "formal", "exec_names", "fabric", "frontier", "examined", "raw_space",
                "counts", "models": [...], "rejected_examples": [...], "infeasible"}
    verify:    {"solution", "instance": {...}, "ok", "violations", "max_time", ..., "kernels": [...]}
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from wsealloc.cost.ispd2020 import LIBRARY
from wsealloc.errors import InfeasibleError, UsageError
from wsealloc.graph.contest import ContestGraph, ContestKernel, Fabric
from wsealloc.opmodels.contest import (
    ContestOpModels,
    ContestReason,
    ContestRejections,
    RejectedExample,
    contest_rejections,
    enumerate_contest,
)
from wsealloc.plan.contest_verify import ContestReport
from wsealloc.problem.contest_bounds import ContestBounds, contest_bounds

ADAPTER_SHORT = "adapter term: not modelled"
ADAPTER_TERM = f"{ADAPTER_SHORT} (wadapter has no public definition; scores leave it out)"

# A kernel's enumeration: its frontier, or (no legal model at all) only what was rejected and why.
KernelEnumeration = ContestOpModels | ContestRejections

_REJECTED = tuple(r for r in ContestReason if r is not ContestReason.LEGAL)


def _key(reason: ContestReason) -> str:
    """The JSON key of a reason: stable snake case (``memory_over_limit``), not the prose label."""
    return reason.name.lower()


def _label(reason: ContestReason) -> str:
    """A reason's label without its explanation ('dominated', not 'dominated (another legal model ...)')."""
    return reason.label.split(" (")[0]


def _int(n: int) -> str:
    return f"{n:,}"


def _big(n: int) -> str:
    """Raw spaces reach 10^20 and more: thousands separators up to a million, then scientific notation."""
    return f"{n:,}" if n < 10**6 else f"{n:.2e}"


def _mem(m: float) -> str:
    return f"{m:,.2f}"


# -- the instance ---------------------------------------------------------------------------------
def formal_args(kernel: ContestKernel) -> dict[str, int]:
    """A kernel's formal arguments by name, in the order of a solution line (``H W C K R S T U`` / ``H W F``)."""
    return {name: int(getattr(kernel.args, name)) for name in LIBRARY[kernel.kind].formal_names}


def _formal_text(kernel: ContestKernel) -> str:
    return " ".join(f"{k}={v}" for k, v in formal_args(kernel).items())


def fabric_dict(fabric: Fabric) -> dict[str, Any]:
    """The instance header as JSON (``test``, the fabric, the memory limit, the score weights)."""
    return {
        "test": fabric.test,
        "width": fabric.width,
        "height": fabric.height,
        "memlimit": fabric.memlimit,
        "wdeltat": fabric.wdeltat,
        "wlength": fabric.wlength,
        "wadapter": fabric.wadapter,
    }


def _header_line(graph: ContestGraph, overrides: dict[str, int]) -> str:
    f = graph.fabric
    over = f"; header overridden: {', '.join(f'{k}={v}' for k, v in overrides.items())}" if overrides else ""
    return (
        f"{f.test} ({graph.source}): fabric {f.width} x {f.height} tiles, memlimit {f.memlimit:,}; score weights "
        f"wdeltat {f.wdeltat}, wlength {f.wlength}, wadapter {f.wadapter} ({ADAPTER_SHORT}){over}"
    )


@dataclass(frozen=True)
class ContestInspection:
    """Everything ``inspect X.kgraph`` shows: per kernel its enumeration, the instance's lower bounds."""

    graph: ContestGraph
    header_overrides: dict[str, int]
    kernels: tuple[KernelEnumeration, ...]  # file order; ContestRejections for a kernel with no legal model
    bounds: ContestBounds | None
    infeasible: str  # why there is no bound (a kernel or the instance has no legal solution), else ""
    seconds: float  # enumeration and bounds, for the text report only

    @property
    def distinct_kernels(self) -> int:
        """Kernels with different kind or formal arguments (identical ones share one enumeration)."""
        return len({(k.kind, k.args) for k in self.graph.kernels})


def inspect_instance(graph: ContestGraph, header_overrides: dict[str, int] | None = None) -> ContestInspection:
    """Enumerate every kernel and bound the instance; an infeasible kernel or instance is reported, not raised."""
    start = time.perf_counter()
    entries: list[KernelEnumeration] = []
    why = ""
    for kernel in graph.kernels:
        try:
            entries.append(enumerate_contest(kernel, graph.fabric))
        except InfeasibleError:
            rej = contest_rejections(kernel, graph.fabric)
            entries.append(rej)
            why = why or rej.infeasible
    bounds = None
    if not why:
        models = [e for e in entries if isinstance(e, ContestOpModels)]
        try:
            bounds = contest_bounds(graph, models)
        except InfeasibleError as exc:
            why = str(exc)
    return ContestInspection(graph, dict(header_overrides or {}), tuple(entries), bounds, why, time.perf_counter() - start)


def _smallest_at(m: KernelEnumeration, t: int | None) -> dict[str, Any] | None:
    """The smallest-area legal model with time <= t (ties: the faster, then R0): what the area bound counts."""
    if t is None or not isinstance(m, ContestOpModels):
        return None
    idx = np.flatnonzero(m.time <= t)
    if idx.size == 0:
        return None
    i = int(idx[np.lexsort((m.orientation[idx], m.time[idx], m.area[idx]))[0]])
    return {
        "height": int(m.height[i]),
        "width": int(m.width[i]),
        "area": int(m.area[i]),
        "time": int(m.time[i]),
        "orientation": m.orientation_of(i).value,
    }


def _kernel_row(m: KernelEnumeration, bound: int | None) -> dict[str, Any]:
    k = m.kernel
    return {
        "name": k.name,
        "id": k.node_id,
        "kind": k.kind.value,
        "formal": formal_args(k),
        "frontier": len(m) if isinstance(m, ContestOpModels) else 0,
        "fastest_time": m.fastest_time if isinstance(m, ContestOpModels) else None,
        "smallest_at_bound": _smallest_at(m, bound),
        "raw_space": m.raw_space,
        "examined": m.examined,
        "rejected": {_key(r): n for r, n in m.rejected},
        "infeasible": None if isinstance(m, ContestOpModels) else m.infeasible,
    }


def inspection_json(ins: ContestInspection) -> dict[str, Any]:
    """The ``inspect X.kgraph --json`` document."""
    bound = ins.bounds.value if ins.bounds is not None else None
    rows = [_kernel_row(m, bound) for m in ins.kernels]
    rejected = {_key(r): sum(row["rejected"].get(_key(r), 0) for row in rows) for r in _REJECTED}
    g = ins.graph
    return {
        "instance": {
            "path": g.source,
            **fabric_dict(g.fabric),
            "header_overrides": dict(ins.header_overrides),
            "adapter": ADAPTER_TERM,
        },
        "kernels": rows,
        "bounds": None if ins.bounds is None else ins.bounds.to_dict(),
        "infeasible": ins.infeasible or None,
        "totals": {
            "kernels": len(g.kernels),
            "distinct_kernels": ins.distinct_kernels,
            "edges": len(g.edges),
            "io_nodes": len(g.io_nodes),
            "frontier_models": sum(row["frontier"] for row in rows),
            "examined": sum(row["examined"] for row in rows),
            "raw_space": sum(row["raw_space"] for row in rows),
            "rejected": rejected,
            "infeasible_kernels": [row["name"] for row in rows if row["infeasible"]],
        },
    }


def print_inspection(ins: ContestInspection, console: Console, limit: int | None = 60) -> None:
    """The header line, the kernel table (the first ``limit`` kernels; None: all), the bounds and the totals."""
    doc = inspection_json(ins)
    console.print(_header_line(ins.graph, ins.header_overrides), highlight=False)
    b = ins.bounds
    at = f"smallest at {b.value:,}" if b is not None else "smallest at bound"
    table = Table(title=f"Kernels of {ins.graph.fabric.test}")
    for col, just in (
        ("kernel", "left"),
        ("kind", "left"),
        ("formal arguments", "left"),
        ("frontier", "right"),
        ("fastest time", "right"),
        (at, "right"),
        ("raw space", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    rows = doc["kernels"]
    for row in rows if limit is None else rows[:limit]:
        small = row["smallest_at_bound"]
        table.add_row(
            row["name"],
            row["kind"],
            " ".join(f"{k}={v}" for k, v in row["formal"].items()),
            _int(row["frontier"]) if row["frontier"] else "[red]none[/red]",
            _int(row["fastest_time"]) if row["fastest_time"] is not None else "[red]-[/red]",
            f"{small['area']:,} ({small['height']}x{small['width']})" if small else "-",
            _big(row["raw_space"]),
        )
    console.print(table)
    if limit is not None and len(rows) > limit:
        console.print(f"... {len(rows) - limit} more kernels (use --all or --json)")
    if b is not None:
        console.print(
            f"lower bound on the largest kernel time: [bold]{b.value:,}[/bold] = the largest of: single kernel "
            f"{b.single_kernel:,} ({b.single_kernel_name}'s fastest legal model), area {b.area:,} (the smallest "
            f"rectangles cover {b.area_used:,} of {b.fabric_area:,} tiles), fabric midline {b.fabric:,}",
            highlight=False,
        )
    else:
        console.print(f"[red]no lower bound: no legal solution exists[/red]: {ins.infeasible}", highlight=False)
    t = doc["totals"]
    rejected = ", ".join(f"{_label(r)} {t['rejected'][_key(r)]:,}" for r in _REJECTED)
    console.print(
        f"enumeration: {t['kernels']} kernels ({t['distinct_kernels']} distinct), {t['frontier_models']:,} frontier "
        f"models; {t['examined']:,} candidates examined of a raw space of {_big(t['raw_space'])}; rejected: {rejected} "
        f"({ins.seconds:.2f} s; --kernel NAME lists one kernel's models and rejections)",
        highlight=False,
    )


# -- one kernel -----------------------------------------------------------------------------------
def find_kernel(graph: ContestGraph, name: str) -> ContestKernel:
    """The placed kernel called ``name``; a UsageError listing similar names (or the first ones) otherwise."""
    if graph.has_kernel(name):
        return graph.by_name(name)
    names = [k.name for k in graph.kernels]
    close = [n for n in names if name.lower() in n.lower()]
    close += [n for n in difflib.get_close_matches(name, names, n=8, cutoff=0.5) if n not in close]
    hint = f"; similar: {', '.join(close[:8])}" if close else f"; e.g. {', '.join(names[:5])}"
    io = next((n for n in graph.io_nodes if n.name == name), None)
    if io is not None:
        hint = f" ({name} is an {io.kind} node: it is not placed){hint}"
    raise UsageError(f"--kernel {name!r}: no such kernel in {graph.source}{hint}")


def kernel_entry(graph: ContestGraph, name: str) -> KernelEnumeration:
    """One kernel's frontier (or, when it has no legal model, its rejections), for ``inspect --kernel``."""
    kernel = find_kernel(graph, name)
    try:
        return enumerate_contest(kernel, graph.fabric)
    except InfeasibleError:
        return contest_rejections(kernel, graph.fabric)


def _exec_names(kernel: ContestKernel) -> tuple[str, ...]:
    return LIBRARY[kernel.kind].exec_names


def _example_dict(e: RejectedExample) -> dict[str, Any]:
    return {
        "exec": list(e.exec_args.solution_order()),
        "orientation": e.orientation.value,
        "height": e.height,
        "width": e.width,
        "time": e.time,
        "memory": float(e.memory),
        "reason": _key(e.reason),
        "reason_label": e.reason.label,
        "note": e.note,
    }


def _model_dicts(m: ContestOpModels, indices: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    for i in indices:
        row = m.row(i)
        row["exec"] = list(row["exec"])  # type: ignore[call-overload]
        out.append(row)
    return out


def kernel_json(graph: ContestGraph, m: KernelEnumeration) -> dict[str, Any]:
    """The ``inspect X.kgraph --kernel NAME --json`` document: every frontier model, the rejected counts and examples."""
    k = m.kernel
    f = graph.fabric
    n = len(m) if isinstance(m, ContestOpModels) else 0
    return {
        "kernel": k.name,
        "id": k.node_id,
        "kind": k.kind.value,
        "formal": formal_args(k),
        "exec_names": list(_exec_names(k)),
        "fabric": {"width": f.width, "height": f.height, "memlimit": f.memlimit},
        "frontier": n,
        "examined": m.examined,
        "raw_space": m.raw_space,
        "counts": {"legal": n, **{_key(r): c for r, c in m.rejected}},
        "models": _model_dicts(m, range(n)) if isinstance(m, ContestOpModels) else [],
        "rejected_examples": [_example_dict(e) for e in m.rejected_examples],
        "infeasible": None if isinstance(m, ContestOpModels) else m.infeasible,
    }


def print_kernel(graph: ContestGraph, m: KernelEnumeration, console: Console, limit: int | None = 60) -> dict[str, int]:
    """One kernel's frontier (the first ``limit`` rows, fastest first; None: all), then its rejected candidates:
    counts per reason and the fastest examples of each with their reason. Returns the counts (JSON keys)."""
    k = m.kernel
    f = graph.fabric
    names = " ".join(_exec_names(k))
    title = (
        f"Op models of {k.name} ({k.kind.value} {_formal_text(k)}) on the {f.width} x {f.height} fabric, memlimit "
        f"{f.memlimit:,}: the (height, width, time) Pareto frontier, fastest first"
    )
    n = len(m) if isinstance(m, ContestOpModels) else 0
    if isinstance(m, ContestOpModels):
        table = Table(title=title)
        for col, just in (
            ("#", "right"),
            (names, "left"),
            ("orientation", "left"),
            ("height", "right"),
            ("width", "right"),
            ("time", "right"),
            ("memory", "right"),
        ):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        shown = range(n) if limit is None else range(min(n, limit))
        for i in shown:
            table.add_row(
                str(i + 1),
                " ".join(str(v) for v in m.exec_args(i).solution_order()),
                m.orientation_of(i).value,
                str(int(m.height[i])),
                str(int(m.width[i])),
                _int(int(m.time[i])),
                _mem(float(m.memory[i])),
            )
        console.print(table)
        if limit is not None and n > limit:
            console.print(f"... {n - limit:,} more frontier models (use --all or --json)")
    else:
        console.print(f"[red]{k.name} has no legal model[/red]: {m.infeasible}", highlight=False)
    if m.rejected_examples:
        rej = Table(title=f"Rejected candidates of {k.name}: the fastest examples of each reason")
        for col, just in (
            (names, "left"),
            ("orientation", "left"),
            ("height", "right"),
            ("width", "right"),
            ("time", "right"),
            ("memory", "right"),
            ("reason", "left"),
        ):
            rej.add_column(col, justify=just)  # type: ignore[arg-type]
        for e in m.rejected_examples:
            numbers = _detail(e, f)
            reason = f"[red]{_label(e.reason)}[/red]" + (f" ({numbers})" if numbers else "")
            detail = f": {e.note}" if e.note else ""
            rej.add_row(
                " ".join(str(v) for v in e.exec_args.solution_order()),
                e.orientation.value,
                str(e.height),
                str(e.width),
                _int(e.time),
                _mem(e.memory),
                reason + detail,
            )
        console.print(rej)
    counts = {"legal": n, **{_key(r): c for r, c in m.rejected}}
    text = ", ".join([f"legal (on the frontier) {n:,}"] + [f"{_label(r)} {c:,}" for r, c in m.rejected if c])
    console.print(
        f"counts by reason: {text}; {m.examined:,} candidates examined of a raw space of {_big(m.raw_space)} "
        "(rows = execution arguments x orientation; see docs/ispd2020.md, 'Enumerating a kernel's op models')",
        highlight=False,
    )
    return counts


def _detail(e: RejectedExample, f: Fabric) -> str:
    """The numbers behind a rejection without a note of its own."""
    if e.reason is ContestReason.MEMORY_OVER_LIMIT:
        return f"{_mem(e.memory)} > {f.memlimit:,}"
    if e.reason is ContestReason.TALLER_THAN_FABRIC:
        return f"{e.height} > {f.height}"
    if e.reason is ContestReason.WIDER_THAN_FABRIC:
        return f"{e.width} > {f.width}"
    return ""


# -- a solution -----------------------------------------------------------------------------------
def _num(x: float) -> str:
    """A score or wirelength: an integer when whole, else one decimal (centres are half-integers)."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def verify_json(
    report: ContestReport, graph: ContestGraph, solution: str, overrides: dict[str, int] | None = None
) -> dict[str, Any]:
    """The ``verify X.sol --kgraph X.kgraph --json`` document: the solution and instance named, then the report
    (``ContestReport.to_dict``: verdict, violations root cause first, figures, bound, per-kernel rectangles)."""
    f = graph.fabric
    terms = None
    if report.max_time is not None:
        terms = {"time": f.wdeltat * report.max_time, "wirelength": float(f.wlength * report.wirelength)}
    return {
        "solution": solution,
        "instance": {"path": graph.source, **fabric_dict(f), "header_overrides": dict(overrides or {})},
        **report.to_dict(),
        "score_terms": terms,
    }


def print_verified(report: ContestReport, graph: ContestGraph, solution: str, console: Console) -> None:
    """The OK verdict of a legal solution with its figures, the score's terms and the gap to the lower bound."""
    f = graph.fabric
    assert report.ok and report.max_time is not None and report.score is not None
    console.print(
        f"{solution}: OK ({len(graph.kernels)} kernels of {f.test} on the {f.width} x {f.height} fabric, memlimit "
        f"{f.memlimit:,}; every kernel placed once, inside, no overlap, memory within the limit)",
        highlight=False,
    )
    console.print(
        f"max kernel time {report.max_time:,} ({report.max_time_kernel}); wirelength {_num(float(report.wirelength))} "
        f"over {report.edges_counted} edges",
        highlight=False,
    )
    console.print(
        f"score = wdeltat x max time + wlength x wirelength = {f.wdeltat} x {report.max_time:,} + {f.wlength} x "
        f"{_num(float(report.wirelength))} = [bold]{_num(float(report.score))}[/bold]; {ADAPTER_TERM}",
        highlight=False,
    )
    if report.lower_bound is not None and report.time_over_bound is not None:
        console.print(
            f"lower bound on the largest kernel time {report.lower_bound:,}; time / bound {report.time_over_bound:.4f}",
            highlight=False,
        )
    else:
        console.print("lower bound: none (the instance's bound could not be computed)", highlight=False)
