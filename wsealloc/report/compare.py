"""``wsealloc compare``: greedy vs. solver vs. exact bound on the same cost model, as a table, JSON,
Markdown, or one self-contained HTML page with its pictures inline (no network, no tool needed)."""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from wsealloc.api import SolveOutcome, run
from wsealloc.arch import Arch
from wsealloc.errors import InfeasibleError, UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.plan.build import make_plan
from wsealloc.plan.decision import decision_of
from wsealloc.plan.schema import Plan
from wsealloc.request import RequestOptions, SolveRequest, build_request
from wsealloc.strategy.registry import strategy_for


@dataclass(frozen=True)
class Row:
    """One allocation (or the bound) in the comparison table; ``bottleneck_cycles`` is the objective's
    value (the slowest kernel for throughput, one pass through the kernels for latency, each request's
    with requests in flight)."""

    name: str
    bottleneck_cycles: int
    throughput_samples_per_s: float
    bottleneck_kernel: str
    bound_by: str
    cores_used: int | None
    gap: float | None
    wall_s: float | None
    status: str


@dataclass(frozen=True)
class Comparison:
    """Greedy and solver plans of one model on one arch, with the exact bound."""

    model: str
    arch: str
    total_cores: int
    greedy: Plan
    solver: Plan
    bound_cycles: int
    rows: tuple[Row, ...]
    flows: tuple[tuple[str, str, float], ...] = field(default=())

    @property
    def speedup(self) -> float:
        """Greedy bottleneck / solver bottleneck, like for like (greedy placed by the same construction
        when the solver's plan is placed)."""
        placed = self.solver.baseline.placed_value_cycles if self.solver.objective.placed else None
        greedy = placed or self.greedy.objective.value
        return greedy / max(self.solver.objective.value, 1)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "model": self.model,
            "arch": self.arch,
            "speedup": round(self.speedup, 4),
            "bound_cycles": self.bound_cycles,
            "rows": [asdict(r) for r in self.rows],
            "objective": self.solver.objective.kind.value,
            "regions": [
                {"name": rg.name, "kernels": len(rg.members), "grid": list(rg.grid), "cycles": rg.latency_cycles + rg.comm_cycles}
                for rg in self.solver.regions
            ],
            "kernels": [
                {
                    "name": g.name,
                    "type": g.type,
                    "greedy_cores": g.cores,
                    "greedy_cycles": g.latency_cycles + g.comm_cycles,
                    "solver_cores": s.cores,
                    "solver_cycles": s.latency_cycles + s.comm_cycles,
                }
                for g, s in zip(self.greedy.kernels, self.solver.kernels, strict=True)
            ],
        }


def _row(name: str, plan: Plan, bound: int) -> Row:
    obj = plan.objective
    return Row(
        name,
        obj.value,
        round(plan.arch.clock_hz / max(obj.value, 1), 2),
        obj.bottleneck_kernel,
        obj.bound_by.value,
        obj.cores_used,
        round(max(0.0, (obj.value - bound) / max(obj.value, 1)), 6),
        obj.wall_s,
        obj.status.value,
    )


def from_outcome(outcome: SolveOutcome) -> Comparison:
    """Build the comparison from a solve outcome (its greedy baseline and its plan)."""
    if outcome.partition is not None and outcome.partition.wafers > 1:
        raise UsageError("compare works on one-wafer plans; solve multi-wafer pipelines with wsealloc solve --wafers")
    costs = outcome.costs
    spec_plan = outcome.plan
    ref = spec_plan.model
    source = OnnxSource(
        path=ref.path,
        dims=ref.dims,
        input_shapes={name: tuple(shape) for name, shape in ref.input_shapes.items()},
        fuse=ref.fuse,
        weights_as_inputs=ref.weights_as_inputs,
    )
    greedy = make_plan(costs, source, outcome.baseline, outcome.baseline, request=outcome.request)
    bound = int(spec_plan.objective.bound_cycles or outcome.exact.objective or 0)
    clock = costs.arch.clock_hz
    bound_row = Row(
        "exact bound (bisection)" if outcome.exact.solver == "bisect" else f"proven bound ({outcome.exact.solver})",
        bound,
        round(clock / max(bound, 1), 2),
        "-",
        "-",
        None,
        0.0,
        round(outcome.exact.wall_s, 4),
        "OPTIMAL",
    )
    rows: tuple[Row, ...] = (_row("greedy (notebook rule)", greedy, bound),)
    placed_greedy = spec_plan.baseline.placed_value_cycles
    if spec_plan.objective.placed and placed_greedy is not None:
        gap = round(max(0.0, (placed_greedy - bound) / max(placed_greedy, 1)), 6)
        rows += (
            Row(
                "greedy, placed by the same construction",
                placed_greedy,
                round(clock / max(placed_greedy, 1), 2),
                "-",
                "-",
                None,
                gap,
                None,
                "FEASIBLE",
            ),
        )
    rows += (_row(f"solver ({spec_plan.objective.solver})", spec_plan, bound), bound_row)
    record = spec_plan.objective.constraints
    if record is not None and record.unconstrained_bound_cycles is not None:  # the price of the user's rules
        free = record.unconstrained_bound_cycles
        rows += (
            Row(
                f"proven bound without the {record.rules} constraint(s) of {Path(record.source).name}",
                free,
                round(clock / max(free, 1), 2),
                "-",
                "-",
                None,
                0.0,
                None,
                "OPTIMAL" if record.unconstrained_optimal else "BOUND",
            ),
        )
    return Comparison(
        spec_plan.model.path, costs.arch.name, costs.arch.total_cores, greedy, spec_plan, bound, rows, tuple(outcome.flows())
    )


def compare(
    model: str | Path | SolveRequest, arch: str | Path | Arch | None = None, **options: Unpack[RequestOptions]
) -> Comparison:
    """Solve once and compare the solver's plan with the greedy baseline (same cost model; placed by
    the same construction when placing) and the exact allocation bound. ``model`` is a request, or
    the arguments of :func:`wsealloc.request.build_request`.

    >>> c = compare("models/gpt2.onnx", "wse2", place=False)   # doctest: +SKIP
    >>> c.speedup, [(r.name, r.bottleneck_cycles) for r in c.rows]   # doctest: +SKIP
    """
    request = build_request(model, arch, **options)
    request.onnx_model  # noqa: B018 - a .kgraph instance is refused before solving (compare is for ONNX models)
    outcome = run(request)
    assert isinstance(outcome, SolveOutcome)
    comparison = from_outcome(outcome)
    return replace(comparison, rows=(*comparison.rows, *other_mode_rows(request, outcome)))


def other_mode_rows(request: SolveRequest, outcome: SolveOutcome) -> tuple[Row, ...]:
    """The other ways to run the request its strategy names (``Strategy.alternatives``: the layer
    pipeline beside weight streaming), each planned allocation-only as one more row; none when the arch
    has no off-wafer bandwidth to stream from."""
    machine = request.machine
    if machine.cluster.offwafer_bytes_per_s is None:
        return ()
    rows = []
    for label, fields in strategy_for(request).alternatives(request, decision_of(outcome.plan)):
        try:  # validated again: a rule of the request may not apply in the other mode (constraints, cost model)
            again = SolveRequest.from_json(json.dumps({**json.loads(request.to_json()), **fields, "place": False}))
        except UsageError as error:
            rows.append(Row(f"{label}: not planned", 0, 0.0, str(error)[:80], "-", None, None, None, "REFUSED"))
            continue
        try:
            alt = run(again)
        except InfeasibleError as error:
            rows.append(
                Row(f"{label}: does not fit", 0, 0.0, str(error).split(": ", 2)[-1][:80], "-", None, None, None, "INFEASIBLE")
            )
            continue
        assert isinstance(alt, SolveOutcome)
        obj = alt.plan.objective
        rows.append(
            Row(
                label,
                obj.value,
                round(machine.clock_hz / max(obj.value, 1), 2),
                obj.bottleneck_kernel,
                obj.bound_by.value,
                obj.cores_used,
                None,
                obj.wall_s,
                obj.status.value,
            )
        )
    return tuple(rows)


# -- pictures --------------------------------------------------------------------------------------


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    # inline <svg> element: drop the XML prolog and DOCTYPE
    return text[text.index("<svg") :]


def latency_chart(c: Comparison) -> str:
    """Per-kernel stage cycles of both allocations, with each bottleneck as a line (SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = [k.latency_cycles + k.comm_cycles for k in c.greedy.kernels]
    s = [k.latency_cycles + k.comm_cycles for k in c.solver.kernels]
    x = range(len(g))
    fig, ax = plt.subplots(figsize=(10, 3.2 if len(g) > 48 else 4.2))
    width = 0.45
    placed = c.solver.objective.placed
    ax.bar([i - width / 2 for i in x], g, width, label="greedy (allocation)", color="#9e9e9e")
    ax.bar([i + width / 2 for i in x], s, width, label="solver (placed, with comm.)" if placed else "solver", color="#1f77b4")
    ax.axhline(c.greedy.objective.bottleneck_cycles, color="#616161", ls="--", lw=1, label="greedy bottleneck")
    greedy_placed = c.solver.baseline.placed_bottleneck_cycles if placed else None
    if greedy_placed is not None:
        ax.axhline(greedy_placed, color="#ff7f0e", ls="-.", lw=1.2, label="greedy placed bottleneck")
    ax.axhline(c.solver.objective.bottleneck_cycles, color="#d62728", ls="-", lw=1.2, label="solver bottleneck")
    ax.axhline(c.bound_cycles, color="#2ca02c", ls=":", lw=1.2, label="exact bound")
    if len(g) <= 48:  # few kernels: name them
        ax.set_xticks(list(x), [k.name for k in c.solver.kernels], rotation=90, fontsize=6)
        ax.set_xlabel("kernel (topological order)")
    else:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("kernel index (topological order)")
    ax.set_ylabel("stage cycles per sample")
    ax.legend(fontsize=7, ncol=4, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.margins(x=0.005)
    fig.tight_layout()
    return _svg(fig)


def core_share_chart(c: Comparison) -> str:
    """Share of the used cores by kernel type, greedy vs. solver; the legend gives the solver's shares (SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = sorted({k.type for k in c.solver.kernels})
    fig, ax = plt.subplots(figsize=(7, 2.2))
    cmap = plt.get_cmap("tab10")
    for row, plan in enumerate((c.greedy, c.solver)):
        total = max(sum(k.cores for k in plan.kernels), 1)
        left = 0.0
        for i, t in enumerate(types):
            share = sum(k.cores for k in plan.kernels if k.type == t) / total
            solver_share = sum(k.cores for k in c.solver.kernels if k.type == t) / max(sum(k.cores for k in c.solver.kernels), 1)
            ax.barh(row, share, left=left, color=cmap(i % 10), label=f"{t} ({solver_share:.1%})" if row == 0 else None)
            left += share
    ax.set_yticks([0, 1], ["greedy", "solver"])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of used cores")
    ax.legend(fontsize=7, ncol=min(len(types), 6), loc="upper center", bbox_to_anchor=(0.5, -0.45))
    fig.tight_layout()
    return _svg(fig)


def floorplan_svg(c: Comparison) -> str | None:
    """The solver plan's floorplan, when it is placed on one wafer."""
    if not c.solver.objective.placed or len(c.solver.stages) != 1:
        return None
    from wsealloc.report.floorplan import render_floorplan

    text = render_floorplan(c.solver, list(c.flows), "svg").decode("utf-8")
    return text[text.index("<svg") :]


# -- documents -------------------------------------------------------------------------------------

COLUMNS = (
    "allocation",
    "bottleneck cycles",
    "samples/s",
    "bottleneck kernel",
    "bound by",
    "cores used",
    "gap",
    "solve s",
    "status",
)


def cells(r: Row) -> list[str]:
    """A row formatted for a table (thousands separators, percent gap, "-" when not applicable)."""
    return [
        r.name,
        f"{r.bottleneck_cycles:,}",
        f"{r.throughput_samples_per_s:,.1f}",
        r.bottleneck_kernel,
        r.bound_by,
        "-" if r.cores_used is None else f"{r.cores_used:,}",
        "-" if r.gap is None else f"{r.gap:.2%}",
        "-" if r.wall_s is None else f"{r.wall_s:.2f}",
        r.status,
    ]


def to_markdown(c: Comparison) -> str:
    """Markdown report; pictures embedded as data URIs so the file stands alone."""

    def img(svg: str, alt: str) -> str:
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        return f"![{alt}](data:image/svg+xml;base64,{data})"

    lines = [
        f"# wsealloc compare: {Path(c.model).name} on {c.arch}",
        "",
        f"Solver speed-up over greedy: **{c.speedup:.2f}x** (exact allocation bound {c.bound_cycles:,} cycles).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in c.rows]
    lines += [
        "",
        "## Per-kernel stage cycles",
        "",
        img(latency_chart(c), "per-kernel latency"),
        "",
        "## Core share by kernel type",
        "",
        img(core_share_chart(c), "core share"),
    ]
    fp = floorplan_svg(c)
    if fp is not None:
        lines += ["", "## Floorplan", "", img(fp, "floorplan")]
    return "\n".join(lines) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f2f2f2}figure{margin:1em 0}svg{max-width:100%;height:auto}
.note{color:#666;font-size:90%}"""


def to_html(c: Comparison) -> str:
    """One self-contained HTML page: tables and inline SVG pictures, no external resources."""
    e = html.escape
    head = "".join(f"<th>{e(col)}</th>" for col in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in cells(r)) + "</tr>" for r in c.rows)
    sections = [
        f"<h1>wsealloc compare: {e(Path(c.model).name)} on {e(c.arch)}</h1>",
        f"<p>Solver speed-up over greedy: <b>{c.speedup:.2f}x</b>; exact allocation bound {c.bound_cycles:,} cycles; "
        f"{len(c.solver.kernels)} kernels, {c.total_cores:,} cores per wafer.</p>",
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
        "<h2>Per-kernel stage cycles</h2>",
        f'<figure id="latency">{latency_chart(c)}</figure>',
        "<h2>Core share by kernel type</h2>",
        f'<figure id="cores">{core_share_chart(c)}</figure>',
    ]
    fp = floorplan_svg(c)
    if fp is not None:
        sections += ["<h2>Floorplan</h2>", f'<figure id="floorplan">{fp}</figure>']
    sections.append(
        '<p class="note">Generated by wsealloc. Stage cycles include communication for placed plans; '
        "the bound is the optimum of the allocation-only problem.</p>"
    )
    page = _unique_ids("\n".join(sections))  # matplotlib reuses ids across figures
    head = f'<head><meta charset="utf-8"><title>wsealloc compare</title><style>{_CSS}</style></head>'
    return f'<!DOCTYPE html>\n<html lang="en">{head}\n<body>\n{page}\n</body></html>\n'


def _unique_ids(page: str) -> str:
    """Prefix the ids (and their references) of each inline SVG so figures do not clash."""
    parts = re.split(r"(<svg[\s\S]*?</svg>)", page)
    for i, part in enumerate(parts):
        if part.startswith("<svg"):
            prefix = f"f{i}_"
            part = re.sub(r'id="([^"]+)"', rf'id="{prefix}\1"', part)
            part = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", part)
            part = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}\1"', part)
            parts[i] = part
    return "".join(parts)
