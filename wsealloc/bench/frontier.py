"""The serving frontier of an LLM export (issue 33, part 4): one request's tokens per second against
every request's, over the requests in flight (1 up to the most whose KV caches fit at the context) and
the wafer counts, every point a proven plan.

Each point is the base request with ``--objective latency`` (one token's time), ``--requests N`` (N
sequences in flight, each with its cache resident: ``CostOptions.state_copies``) and ``--wafers W``,
solved by the runner suites use (worker processes, or a Dask cluster): a point's rates are its plan's
``objective.llm`` (per request: N tokens every pass over N; aggregate: N passes in flight, a new one
every slowest stage, ``plan.llm``). The frontier is the points no other point beats on both rates: the
curve serving engineers compare systems with (interactivity against throughput).

The request counts: for each wafer count, powers of two from 1 up to the most that fit on that many
wafers, read off its one-request plan (its largest context over the context asked, each request holding
one context's cache): a count that holds fewer caches is not asked for more."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wsealloc.bench.runner import BenchRow, Task, run_all
from wsealloc.bench.tables import csv_text, markdown_lines
from wsealloc.errors import UsageError
from wsealloc.frontend.llm import cache_dims
from wsealloc.frontend.load import load_model
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.request import ShareMode, SolveRequest

MAX_POINTS = 64  # requests x wafers: a frontier is a picture, not a search


@dataclass(frozen=True)
class FrontierPoint:
    """One plan of the frontier: its requests in flight and wafers, its rates, its proof."""

    requests: int
    wafers: int  # at most this many (a plan may use fewer: the cut that packs its regions)
    tokens_per_s_per_request: float | None
    aggregate_tokens_per_s: float | None
    status: str
    gap: float | None
    wall_s: float | None
    error: str = ""
    on_frontier: bool = False
    wafers_used: int | None = None


@dataclass(frozen=True)
class Frontier:
    """Every point solved, the frontier marked (see the module docstring)."""

    model: str
    arch: str
    context: int
    points: tuple[FrontierPoint, ...]

    def frontier(self) -> list[FrontierPoint]:
        """The points no other beats on both rates, by tokens/s per request descending."""
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: -(p.tokens_per_s_per_request or 0.0))

    def table(self) -> list[dict[str, Any]]:
        """One row per point (JSON, CSV, Markdown)."""
        return [
            {
                "wafers": p.wafers,
                "used": p.wafers_used,
                "requests": p.requests,
                "tokens/s per request": None if p.tokens_per_s_per_request is None else round(p.tokens_per_s_per_request, 1),
                "tokens/s in all": None if p.aggregate_tokens_per_s is None else round(p.aggregate_tokens_per_s, 1),
                "frontier": "yes" if p.on_frontier else "",
                "status": p.status if not p.error else f"{p.status}: {_excerpt(p.error)}",
                "gap": None if p.gap is None else round(p.gap, 4),
            }
            for p in self.points
        ]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "model": self.model,
            "arch": self.arch,
            "context": self.context,
            "points": [asdict(p) for p in self.points],
        }

    def to_csv(self) -> str:
        """The table as CSV."""
        return csv_text(self.table())

    def to_markdown(self) -> str:
        """The table as Markdown."""
        rows = self.table()
        return "\n".join(markdown_lines(rows, list(rows[0]), lambda v: f"{v:,}" if isinstance(v, float) else str(v))) + "\n"

    def plot(self, fmt: str = "png") -> bytes:
        """Aggregate tokens/s against tokens/s per request, one line per wafer count, the frontier drawn."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for wafers in sorted({p.wafers for p in self.points}):
            series = sorted(
                (p for p in self.points if p.wafers == wafers and p.tokens_per_s_per_request is not None),
                key=lambda p: p.requests,
            )
            if series:
                ax.plot(
                    [p.tokens_per_s_per_request or 0.0 for p in series],
                    [p.aggregate_tokens_per_s or 0.0 for p in series],
                    marker="o",
                    label=f"at most {wafers} wafer{'s' if wafers > 1 else ''}",
                )
                for p in series:
                    ax.annotate(str(p.requests), (p.tokens_per_s_per_request or 0.0, p.aggregate_tokens_per_s or 0.0), fontsize=6)
        best = self.frontier()
        if best:
            ax.plot(
                [p.tokens_per_s_per_request or 0.0 for p in best],
                [p.aggregate_tokens_per_s or 0.0 for p in best],
                "k--",
                lw=1,
                label="frontier",
            )
        rates = [p.tokens_per_s_per_request for p in self.points if p.tokens_per_s_per_request]
        if rates and max(rates) > 20 * min(rates):  # requests in flight span decades: a log axis keeps them apart
            ax.set_xscale("log")
        ax.set_xlabel("tokens/s per request (interactivity)")
        ax.set_ylabel("tokens/s in all (throughput)")
        ax.set_title(f"{Path(self.model).name} on {self.arch}, context {self.context:,} (labels: requests in flight)", fontsize=9)
        ax.grid(alpha=0.3)
        if best:  # (no point solved: no line, and matplotlib warns on stderr of an empty legend)
            ax.legend(fontsize=7)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=120)
        plt.close(fig)
        return buf.getvalue()

    def to_html(self) -> str:
        """A self-contained page: the picture (inline SVG) and the table."""
        svg = self.plot("svg").decode()
        svg = svg[svg.index("<svg") :]
        rows = self.table()
        head = "".join(f"<th>{c}</th>" for c in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{'' if v is None else v}</td>" for v in r.values()) + "</tr>" for r in rows)
        title = f"Serving frontier: {Path(self.model).name} on {self.arch}, context {self.context:,}"
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}</style></head>"
            f"<body><h1>{title}</h1>{svg}<table><tr>{head}</tr>{body}</table></body></html>\n"
        )


def _excerpt(text: str, limit: int = 100) -> str:
    """A point's error as a table cell: its first ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mark_frontier(points: Sequence[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The points with ``on_frontier`` set where no other point is at least as good on both rates and
    better on one."""
    solved = [p for p in points if p.tokens_per_s_per_request is not None and p.aggregate_tokens_per_s is not None]

    def beaten(p: FrontierPoint) -> bool:
        a, b = p.tokens_per_s_per_request or 0.0, p.aggregate_tokens_per_s or 0.0
        return any(
            (q.tokens_per_s_per_request or 0.0) >= a
            and (q.aggregate_tokens_per_s or 0.0) >= b
            and ((q.tokens_per_s_per_request or 0.0) > a or (q.aggregate_tokens_per_s or 0.0) > b)
            for q in solved
        )

    return tuple(FrontierPoint(**{**asdict(p), "on_frontier": p in solved and not beaten(p)}) for p in points)


def point_request(base: SolveRequest, requests: int, wafers: int) -> SolveRequest:
    """The base request for one point: one token's time with ``requests`` caches resident on ``wafers``
    wafers, kernels sharing cores in regions unless the base fixes a grid (validated again: a point may
    ask what the base's other options refuse)."""
    doc = json.loads(base.to_json())
    doc.update({"objective": ObjectiveKind.LATENCY.value, "requests": requests, "wafers": wafers})
    doc["cost"]["state_copies"] = requests  # every sequence in flight keeps its cache
    if base.sharing.mode is ShareMode.NONE:  # one token's time: kernels share cores in regions (as solve's latency default)
        doc["sharing"] = {**doc["sharing"], "mode": ShareMode.AUTO.value}
    return SolveRequest.from_json(json.dumps(doc))


def powers_up_to(most: int) -> list[int]:
    """1, 2, 4, ... up to ``most``, and ``most`` itself."""
    out = [1]
    while out[-1] * 2 <= most:
        out.append(out[-1] * 2)
    return out if out[-1] == most else [*out, most]


def _point(row: BenchRow, requests: int, wafers: int) -> FrontierPoint:
    return FrontierPoint(
        requests,
        wafers,
        row.tokens_per_s_per_request,
        row.aggregate_tokens_per_s,
        row.status,
        row.gap,
        row.wall_s,
        row.error,
        wafers_used=row.wafers,
    )


def frontier(
    base: SolveRequest,
    wafer_counts: Sequence[int],
    request_counts: Sequence[int] | None = None,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
) -> Frontier:
    """Solve every point of ``request_counts`` x ``wafer_counts`` for ``base`` (an LLM export's request)
    and mark the frontier; ``request_counts`` None: for each wafer count, powers of two up to the most
    that fit on it (the module docstring)."""
    source = base.onnx_model
    context = source.context
    if context is None:
        raise UsageError(f"{source.label}: the serving frontier is of an LLM decode export at a context: give --context")
    # the file read once before any point is solved: a missing or broken file (the loader's line) or one
    # --context does not apply to fails here, not once per point
    cache_dims(load_model(source.onnx_path()), source.onnx_path(), int(context), source.batch)
    counts = sorted(set(wafer_counts))
    if request_counts is None:  # each wafer count up to the requests its caches hold
        most = {w: max(1, _largest_context(base, w) // max(context, 1)) for w in counts}
        grid = [(n, w) for w in counts for n in powers_up_to(most[w])]
    else:
        grid = [(n, w) for w in counts for n in sorted(set(request_counts))]
    if len(grid) > MAX_POINTS:
        raise UsageError(f"{len(grid)} points (requests x wafers): at most {MAX_POINTS}; give fewer --requests or --wafers")
    tasks = [Task.of(f"requests={n},wafers={w}", point_request(base, n, w)) for n, w in grid]
    rows = run_all(tasks, jobs=jobs, scheduler=scheduler, on_done=on_done)
    points = mark_frontier([_point(row, n, w) for (n, w), row in zip(grid, rows, strict=True)])
    return Frontier(source.label, base.machine.name, int(context), points)


def _largest_context(base: SolveRequest, wafers: int) -> int:
    """The most tokens of cache ``wafers`` wafers could hold: the one-request plan on at most that many
    wafers, allocation only, solved here (its LLM record: how many tokens fit beside the weights), plus
    a wafer's SRAM for each wafer the plan left unused. One request takes as few wafers as fit (the
    tiny decode: one of two), so its own figure capped the ladder of two wafers at one wafer's; the
    added wafers hold cache only, so this is an upper estimate (points past it say so in the table)."""
    from wsealloc.api import SolveOutcome, run

    doc = json.loads(point_request(base, 1, wafers).to_json())
    doc["place"] = False
    out = run(SolveRequest.from_json(json.dumps(doc)))
    llm = out.plan.objective.llm if isinstance(out, SolveOutcome) else None
    if llm is None or not isinstance(out, SolveOutcome):
        raise UsageError(f"{base.model.label}: not an LLM export with a KV cache; the serving frontier needs one")
    unused = max(0, wafers - len(out.plan.stages))
    arch = out.costs.arch
    per_wafer = arch.usable_sram_bytes * arch.total_cores // max(llm.kv_bytes_per_token, 1)
    return int(llm.largest_context) + unused * per_wafer
