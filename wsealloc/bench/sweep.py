"""Architecture sweeps: a grid of ``--set`` values, each point solved (same executors as ``bench``),
a table and a plot of throughput per point, and a warning for every pair of points where a strictly
better machine gives a worse result (the bug ZigZag users reported, ../shared/seeds/003_*: smaller
memories giving fewer load cycles)."""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from wsealloc.arch.loader import parse_set_option
from wsealloc.bench.runner import BenchRow, run_all
from wsealloc.bench.suite import Instance
from wsealloc.bench.synthetic import PREFIX
from wsealloc.errors import ModelLoadError, UsageError
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
UNORDERED = frozenset({"wafer.defects.seed"})


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


def parse_axes(options: Sequence[str]) -> list[Axis]:
    """``--set field=v1,v2,...`` options into axes."""
    axes: list[Axis] = []
    for opt in options:
        path, value = parse_set_option(opt)
        field = ".".join(path)
        values = tuple(v.strip() for v in str(value).split(",") if v.strip())
        if not values:
            raise UsageError(f"--set {opt!r}: no values to sweep")
        if field in {a.field for a in axes}:
            raise UsageError(f"--set {field} given twice; list its values once, comma-separated")
        if len(set(values)) != len(values):
            raise UsageError(f"--set {opt!r}: a value is listed twice")
        axes.append(Axis(field, values, tuple(_number(v) for v in values)))
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

    @property
    def warnings(self) -> list[str]:
        """One message per non-monotone pair, naming both points."""
        return [
            f"non-monotone: {', '.join(self.points[j].sets)} is a better machine than {', '.join(self.points[i].sets)} "
            f"but gives {self.points[j].throughput:,.1f} samples/s ({self.points[j].cycles:,} cycles) "
            f"vs {self.points[i].throughput:,.1f} ({self.points[i].cycles:,} cycles)"
            for i, j in self.pairs
        ]

    def table(self) -> list[dict[str, Any]]:
        """One dict per point: the swept values, cycles, samples/s, status, error."""
        return [
            {
                **{a.field: v for a, v in zip(self.axes, p.values, strict=True)},
                "cycles": p.cycles,
                "samples_per_s": None if p.throughput is None else round(p.throughput, 2),
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
            "points": self.table(),
            "warnings": self.warnings,
        }

    def to_csv(self) -> str:
        """The table as CSV."""
        rows = self.table()
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()

    def to_markdown(self) -> str:
        """The table as Markdown, followed by the warnings."""
        rows = self.table()
        cols = [c for c in rows[0] if c != "error"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |" for r in rows]
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
        ax.set_ylabel("samples/s")
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


def sweep(
    model: str | Path,
    arch: str = "wse2",
    sets: Sequence[str] = (),
    *,
    dims: Mapping[str, int] | None = None,
    solver: str = "cpsat",
    place: bool = False,
    allow_unknown_ops: bool = False,
    time_limit: float = 30.0,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
) -> Sweep:
    """Solve ``model`` on every point of the grid spanned by ``sets`` (``"field=v1,v2,..."`` each) over
    the base ``arch``, locally with ``jobs`` worker processes or on the Dask cluster at ``scheduler``."""
    from wsealloc.arch import load_arch
    from wsealloc.solvers import get_solver

    get_solver(solver)  # an unknown name fails before anything runs
    axes = parse_axes(sets)
    points = grid(axes)
    if not str(model).startswith(PREFIX) and not Path(model).exists():
        raise ModelLoadError(f"{model}: no such file; check the path (the zoo lives in models/)")
    clocks = [load_arch(arch, point_sets(axes, p)).clock_hz for p in points]  # a bad value fails before solving
    if not str(model).startswith(PREFIX):
        from wsealloc.cost import CostOptions
        from wsealloc.pipeline import ModelSpec, cost_model

        # a model that cannot be read or costed fails once here, not once per point after all have run
        first = point_sets(axes, points[0])
        options = CostOptions(allow_unknown_ops=allow_unknown_ops)
        cost_model(ModelSpec(str(model), dict(dims or {})), arch, options, first, check_feasible=False)
    model_path = str(model) if str(model).startswith(PREFIX) else str(Path(model).resolve())
    base_arch = str(Path(arch).resolve()) if arch.endswith((".yaml", ".yml")) else arch
    try:
        # the suites' validated instance type: a bad knob (time limit, dims) fails here, not per point
        instances = [
            Instance(
                name=",".join(point_sets(axes, p)),
                model=model_path,
                arch=base_arch,
                sets=tuple(point_sets(axes, p)),
                dims=dict(dims or {}),
                solver=solver,
                place=place,
                allow_unknown_ops=allow_unknown_ops,
                time_limit=time_limit,
            ).resolved(Path.cwd())
            for p in points
        ]
    except ValidationError as exc:
        err = exc.errors()[0]
        message = str(err["msg"]).removeprefix("Value error, ")
        raise UsageError(f"sweep: {'.'.join(str(x) for x in err['loc'])}: {message}") from exc
    rows = run_all(instances, jobs=jobs, scheduler=scheduler, on_done=on_done)
    solved = tuple(
        SweepPoint(tuple(point_sets(axes, p)), tuple(a.values[i] for a, i in zip(axes, p, strict=True)), clock, row)
        for p, clock, row in zip(points, clocks, rows, strict=True)
    )
    pairs = non_monotone(axes, points, [s.throughput for s in solved])
    return Sweep(str(model), arch, tuple(axes), solved, tuple(pairs))
