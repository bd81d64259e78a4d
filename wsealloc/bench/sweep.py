"""Architecture sweeps: a grid of ``--set`` values, each point solved (same executors as ``bench``),
a table and a plot of throughput per point, and a warning for every pair of points where a strictly
better machine gives a worse result (the bug ZigZag users reported, ../shared/seeds/003_*: smaller
memories giving fewer load cycles).

Besides arch fields, two request fields can be swept (``REQUEST_AXES``): ``context`` (an LLM decode
export's past length, ``--context``; a longer context is more work) and ``grid`` (``--grid RxC``, a
square as ``R``; no direction: a larger grid is not a better machine for decode).

Each point plans on its own arch's ``cluster.wafers`` (as ``solve`` does without ``--wafers``), so
sweeping that field sweeps the wafer count; ``--wafers N|auto`` (``wafers=``) fixes the count of every
point instead, and is refused beside a ``cluster.wafers`` axis, which it would make moot."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from wsealloc.arch import Arch, load_arch
from wsealloc.arch.loader import parse_set_option
from wsealloc.bench.runner import BenchRow, Task, run_all
from wsealloc.bench.tables import csv_text, markdown_lines
from wsealloc.errors import UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.pipeline import build_costs
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.request import RequestOptions, ShareMode, Sharing, SolveRequest, build_request, parse_grid
from wsealloc.units import parse_bytes, parse_hz

# Fields where a larger value is a worse machine; every other numeric field is better when larger.
WORSE_WHEN_LARGER = frozenset(
    {
        "core.sram_reserve_bytes",
        "noc.hop_latency_cycles",
        "wafer.defects.rate",
        "wafer.die_crossing_penalty_cycles",
        "cluster.link_latency_s",
        "dtype.bytes",
        "dtype.accum_bytes",
    }
)
# Fields with no "better" direction: points that differ in one of them are not compared.
UNORDERED = frozenset({"wafer.defects.seed", "grid"})
# Request fields a sweep can span (the rest are arch fields)
REQUEST_AXES = frozenset({"context", "grid"})
# The arch field that is also the request's wafer count when --wafers is not given (more wafers: a better machine)
WAFERS_FIELD = "cluster.wafers"
WORSE_WHEN_LARGER = WORSE_WHEN_LARGER | {"context"}


@dataclass(frozen=True)
class Axis:
    """One swept field and its values (as given, and as numbers for comparing machines)."""

    field: str
    values: tuple[str, ...]
    numbers: tuple[float, ...]


def _number(text: str) -> float:
    """A swept value as a number: plain numbers, sizes (``48KiB``) and frequencies (``1.1GHz``)."""
    for parse in (float, parse_bytes, parse_hz):
        try:
            return float(parse(text))
        except ValueError:
            continue
    raise UsageError(f"--set value {text!r} is not a number, a size or a frequency; sweeps compare machines numerically")


def _grid_number(text: str) -> float:
    r, c = parse_grid(text)
    return float(r * c)


def parse_axes(options: Sequence[str]) -> list[Axis]:
    """``--set field=v1,v2,...`` options into axes (``context=`` and ``grid=`` sweep the request)."""
    axes: list[Axis] = []
    for opt in options:
        name, _, raw = opt.partition("=")
        if name.strip() in REQUEST_AXES:
            field, value = name.strip(), raw
        else:
            path, value = parse_set_option(opt)
            field = ".".join(path)
        values = tuple(v.strip() for v in str(value).split(",") if v.strip())
        if not values:
            raise UsageError(f"--set {opt!r}: no values to sweep")
        if field in {a.field for a in axes}:
            raise UsageError(f"--set {field} given twice; list its values once, comma-separated")
        if len(set(values)) != len(values):
            raise UsageError(f"--set {opt!r}: a value is listed twice")
        number = _grid_number if field == "grid" else _number
        axes.append(Axis(field, values, tuple(number(v) for v in values)))
    if not axes:
        raise UsageError("sweep needs at least one --set FIELD=V1,V2,...")
    return axes


def grid(axes: Sequence[Axis]) -> list[tuple[int, ...]]:
    """Every combination of value indices."""
    return list(itertools.product(*(range(len(a.values)) for a in axes)))


def point_sets(axes: Sequence[Axis], point: tuple[int, ...]) -> list[str]:
    """``--set`` overrides of one grid point."""
    return [f"{a.field}={a.values[i]}" for a, i in zip(axes, point, strict=True)]


def better_or_equal(axes: Sequence[Axis], a: tuple[int, ...], b: tuple[int, ...]) -> tuple[bool, bool]:
    """(b is at least as good as a on every axis, b is strictly better on some axis)."""
    geq, strict = True, False
    for axis, i, j in zip(axes, a, b, strict=True):
        x, y = axis.numbers[i], axis.numbers[j]
        if axis.field in UNORDERED:
            geq = geq and x == y
            continue
        if axis.field in WORSE_WHEN_LARGER:
            x, y = -x, -y
        if y < x:
            geq = False
        elif y > x:
            strict = True
    return geq, strict


def non_monotone(
    axes: Sequence[Axis], points: Sequence[tuple[int, ...]], throughput: Sequence[float | None]
) -> list[tuple[int, int]]:
    """Pairs (i, j) of points where j is a strictly better machine than i but has a lower throughput
    (samples/s; None for a point that produced no plan, which is never compared)."""
    bad = []
    for i, j in itertools.permutations(range(len(points)), 2):
        ti, tj = throughput[i], throughput[j]
        if ti is None or tj is None:
            continue
        geq, strict = better_or_equal(axes, points[i], points[j])
        if geq and strict and tj < ti:
            bad.append((i, j))
    return bad


@dataclass(frozen=True)
class SweepPoint:
    """One machine of the grid: its overrides, its bench row, and its throughput."""

    sets: tuple[str, ...]
    values: tuple[str, ...]
    clock_hz: float
    row: BenchRow

    @property
    def cycles(self) -> int | None:
        """Bottleneck cycles per sample (None when the point failed)."""
        return self.row.solver

    @property
    def throughput(self) -> float | None:
        """Samples per second (None when the point failed)."""
        return None if self.row.solver is None else self.clock_hz / max(self.row.solver, 1)


@dataclass(frozen=True)
class Sweep:
    """A solved grid of architectures, with the better-machine-does-worse pairs."""

    model: str
    arch: str
    axes: tuple[Axis, ...]
    points: tuple[SweepPoint, ...]
    pairs: tuple[tuple[int, int], ...]
    # what a point's cycles are: the slowest stage (throughput) or one pass through the kernels (latency;
    # with requests in flight, each request's: ``objective.Latency``)
    objective: ObjectiveKind = ObjectiveKind.THROUGHPUT
    requests: int = 1

    @property
    def labels(self) -> tuple[str, str]:
        """How the table, the plot and the warnings name a point's cycles and its rate (a latency plan's
        cycles are one pass, its rate passes per second: not a bottleneck, not samples; with requests in
        flight each request's pass and rate)."""
        if self.objective is ObjectiveKind.LATENCY:
            return ("cycles a pass", "passes/s") if self.requests == 1 else ("cycles a request's pass", "passes/s a request")
        return "bottleneck cycles", "samples/s"

    @property
    def warnings(self) -> list[str]:
        """One message per non-monotone pair, naming both points."""
        rate = self.labels[1]
        return [
            f"non-monotone: {', '.join(self.points[j].sets)} is a better machine than {', '.join(self.points[i].sets)} "
            f"but gives {self.points[j].throughput:,.1f} {rate} ({self.points[j].cycles:,} cycles) "
            f"vs {self.points[i].throughput:,.1f} ({self.points[i].cycles:,} cycles)"
            for i, j in self.pairs
        ]

    def table(self) -> list[dict[str, Any]]:
        """One dict per point: the swept values, cycles, samples/s, status, error."""
        return [
            {
                **{a.field: v for a, v in zip(self.axes, p.values, strict=True)},
                "cycles": p.cycles,
                self.labels[1].replace("/", "_per_"): None if p.throughput is None else round(p.throughput, 2),
                "status": p.row.status,
                "wall_s": p.row.wall_s,
                "error": p.row.error,
            }
            for p in self.points
        ]

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "model": self.model,
            "arch": self.arch,
            "axes": {a.field: list(a.values) for a in self.axes},
            "objective": self.objective.value,
            "points": self.table(),
            "warnings": self.warnings,
        }

    def to_csv(self) -> str:
        """The table as CSV."""
        return csv_text(self.table())

    def to_markdown(self) -> str:
        """The table as Markdown, followed by the warnings."""
        rows = self.table()
        lines = markdown_lines(rows, [c for c in rows[0] if c != "error"])
        lines += [f"\nWARNING: {w}" for w in self.warnings]
        return "\n".join(lines) + "\n"

    def plot(self, fmt: str = "png") -> bytes:
        """Throughput per point: one line per combination of the other axes over the first axis."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        first = self.axes[0]
        groups: dict[tuple[str, ...], list[tuple[int, float]]] = {}
        for p in self.points:
            if p.throughput is not None:
                groups.setdefault(p.values[1:], []).append((first.values.index(p.values[0]), p.throughput))
        order = sorted(range(len(first.values)), key=lambda i: first.numbers[i])
        rank = {i: r for r, i in enumerate(order)}  # x: the first axis's values in increasing order, evenly spaced
        for rest, series in groups.items():
            label = ", ".join(f"{a.field}={v}" for a, v in zip(self.axes[1:], rest, strict=True)) or "throughput"
            series.sort(key=lambda s: rank[s[0]])
            ax.plot([rank[i] for i, _ in series], [t for _, t in series], marker="o", label=label)
        for _, j in self.pairs:  # mark the "better machine" of each non-monotone pair
            p = self.points[j]
            ax.plot([rank[first.values.index(p.values[0])]], [p.throughput or 0.0], "rx", ms=12, mew=2)
        ax.set_xticks(range(len(order)), [first.values[i] for i in order])
        ax.set_xlabel(first.field)
        ax.set_ylabel(self.labels[1])
        ax.set_title(f"{Path(self.model).name} on {self.arch}" + (" (x: non-monotone)" if self.pairs else ""), fontsize=9)
        ax.grid(alpha=0.3)
        if groups:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no point produced a plan", ha="center", va="center", transform=ax.transAxes)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=120)
        plt.close(fig)
        return buf.getvalue()


def sweeps_wafers(axes: Sequence[Axis]) -> bool:
    """Whether ``axes`` span ``cluster.wafers`` (then every point plans on its own count)."""
    return any(a.field == WAFERS_FIELD for a in axes)


def refuse_fixed_wafers(axes: Sequence[Axis], wafers: object) -> None:
    """A wafer count the user fixed (``--wafers``, ``wafers=``) beside a ``cluster.wafers`` axis is refused:
    every point would plan on the fixed count, and the axis would change nothing."""
    if sweeps_wafers(axes):
        raise UsageError(
            f"--wafers {wafers} fixes every point's wafer count, so the {WAFERS_FIELD} axis would change nothing: "
            f"drop --wafers (each point then plans on its own {WAFERS_FIELD}, as solve does without --wafers)"
        )


def _point_request(base: SolveRequest, axes: Sequence[Axis], point: tuple[int, ...]) -> SolveRequest:
    """The base request with one point's arch overrides and request fields (context, grid); swept wafer
    counts become the point's ``wafers`` (the base runs on its own arch's count: :func:`sweep` checked)."""
    sets = [s for a, s in zip(axes, point_sets(axes, point), strict=True) if a.field not in REQUEST_AXES]
    machine = load_arch(base.machine, sets)
    update: dict[str, Any] = {"arch": machine}
    if sweeps_wafers(axes):
        update["wafers"] = machine.cluster.wafers
    for axis, i in zip(axes, point, strict=True):
        if axis.field == "context":
            source = base.onnx_model
            update["model"] = type(source).model_validate({**source.model_dump(), "context": int(axis.numbers[i])})
        elif axis.field == "grid":
            update["sharing"] = Sharing(mode=ShareMode.GRID, grid=parse_grid(axis.values[i]))
    # validated again: a point may ask what the base request's other options refuse (a grid with --train)
    return SolveRequest.from_json(base.model_copy(update=update).to_json())


def sweep(
    model: str | Path | SolveRequest,
    arch: str | Path | Arch | None = None,
    axes: Sequence[str] | Sequence[Axis] = (),
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
    **options: Unpack[RequestOptions],
) -> Sweep:
    """Solve ``model`` on every point of the grid spanned by ``axes`` (``"field=v1,v2,..."`` each, or
    parsed ones) over the base ``arch``, locally with ``jobs`` worker processes or on the Dask cluster
    at ``scheduler``. ``model`` is a request (the base machine is its arch) or the arguments of
    :func:`wsealloc.request.build_request` (allocation only unless ``place=True``; on each point's
    ``cluster.wafers`` unless ``wafers=`` fixes the count, as the command line's ``--wafers``)."""
    parsed = [a for a in axes if isinstance(a, Axis)] or parse_axes([str(a) for a in axes])
    if not isinstance(model, SolveRequest):
        options.setdefault("place", False)  # a sweep compares allocations unless asked to place
        if options.get("wafers") is not None:
            refuse_fixed_wafers(parsed, options["wafers"])
        options["wafers"] = options.get("wafers")  # None: the arch's cluster.wafers (the command line's default)
    base = build_request(model, arch, **options)
    source = base.onnx_model  # (a .kgraph instance is refused here)
    if base.wafers != base.machine.cluster.wafers:  # a request that fixed another count than its arch's
        refuse_fixed_wafers(parsed, base.wafers)
    points = grid(parsed)
    # a point's machine: the base arch with the point's overrides (validated once per point)
    requests = [_point_request(base, parsed, p) for p in points]
    if isinstance(source, OnnxSource):
        # a model that cannot be read (the loader's one line) or costed fails once here, not once per
        # point after all have run
        build_costs(requests[0].onnx_model, requests[0].machine, base.cost, check_feasible=False)
    tasks = [Task.of(",".join(point_sets(parsed, p)), r) for p, r in zip(points, requests, strict=True)]
    rows = run_all(tasks, jobs=jobs, scheduler=scheduler, on_done=on_done)
    solved = tuple(
        SweepPoint(
            tuple(point_sets(parsed, p)), tuple(a.values[i] for a, i in zip(parsed, p, strict=True)), r.machine.clock_hz, row
        )
        for p, r, row in zip(points, requests, rows, strict=True)
    )
    pairs = non_monotone(parsed, points, [s.throughput for s in solved])
    # the base machine as the user named it (a request carries its own arch: the ``arch`` argument is unused then)
    label = base.machine.name if isinstance(model, SolveRequest) or arch is None or isinstance(arch, Arch) else str(arch)
    return Sweep(source.label, label, tuple(parsed), solved, tuple(pairs), base.objective, base.requests)
