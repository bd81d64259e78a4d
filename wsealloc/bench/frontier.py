"""The serving frontier of an LLM export (issue 33, part 4): one request's tokens per second against
every request's, over the requests in flight (1 up to the most whose KV caches fit at the context) and
the wafer counts, every point a proven plan.

Each point is the base request with ``--objective latency`` (one token's time), ``--requests N`` (N
sequences in flight, each with its cache resident: ``CostOptions.state_copies``) and ``--wafers W``,
solved by the runner suites use (worker processes, or a Dask cluster): a point's rates are its plan's
``objective.llm`` (per request: N tokens every pass over N; aggregate: N passes in flight, a new one
every slowest stage, ``plan.llm``). The frontier is the points no other point beats on both rates: the
curve serving engineers compare systems with (interactivity against throughput).

The request counts (``--requests auto``): for each wafer count, powers of two from 1 up to the most
requests a check without a search admits on that many wafers (``FitCheck``: more requests only add
cache bytes, so whether a count fits is monotone in it and the most is found by bisection over the
counts the SRAM could hold), and that most itself. Where a count the check admits still finds no
plan, the counts between the largest that found one and the smallest that did not are bisected with
solves (as many rounds as it takes to meet, within ``MAX_POINTS``), so the frontier reaches the
largest count that fits. The rate in all need not grow with the count (a request waits N slowest
stages when that is longer than a pass, and caches squeeze the regions: Llama-3-8B decode on one wse3
gives 72,721 tokens/s in all with 16 requests, 101,010 with 24, 15,552 with 31), so where it falls
past its best count, ``PEAK_ROUNDS`` more rounds look for its peak between that count's neighbours (a
ternary search, one count a round: halfway across the wider side). A count the check refuses (given
with ``--requests``) is not solved: its point says why."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wsealloc.bench.runner import BenchRow, Task, run_all
from wsealloc.bench.tables import clip, csv_text, markdown_lines, percent
from wsealloc.errors import UsageError
from wsealloc.frontend.llm import cache_dims
from wsealloc.frontend.load import load_model
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import build_costs, with_options
from wsealloc.problem.objective import ObjectiveKind, objective_named
from wsealloc.request import ShareMode, SolveRequest
from wsealloc.strategy.wafers import fewest_wafers

MAX_POINTS = 64  # requests x wafers: a frontier is a picture, not a search
# --requests auto: rounds of solves looking for the peak of the rate in all where it falls past its best
# count (Llama-3-8B decode on one wse3: 16 requests 72,721 tokens/s in all, 31 only 15,552; found: 23, 103,832)
PEAK_ROUNDS = 2
SKIPPED = "SKIPPED"  # the status of a point (or a pool's plan) the fit check refuses: not solved


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
    skipped: str = ""  # why the point was not solved (the fit check refuses it; status SKIPPED)


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
                "status": self.status_cell(p, 100),
                "gap": None if p.gap is None else percent(p.gap),  # (as the terminal prints it)
            }
            for p in self.points
        ]

    def status_cell(self, point: FrontierPoint, limit: int) -> str:
        """A point's status as a table cell: with its error or why it was not solved, cut to ``limit``
        characters at a word (the model's path dropped: the title names it)."""
        said = point.error or point.skipped
        return f"{point.status}: {clip(said, limit, self.model)}" if said else point.status

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


# what each command plans, in the words ``check_solver``'s refusal uses (the commands have no --objective)
FRONTIER_PLANS = "every frontier point minimizes"
POOLS_PLANS = "every prefill and decode plan of pools minimizes"


def check_solver(base: SolveRequest, plans: str) -> None:
    """Refuse, before any work, a ``--solver`` that cannot solve a point's objective: every point (and
    every pool's plan) is one token's time, which the bisection, exact for min-max only, cannot solve.
    The check is the one ``solve`` makes (``Objective.check_backend``, run by the driver): left to each
    point's solve, it became every point's ERROR row, and ``pools`` blamed the limits for it.
    ``plans``: what the command plans, in its words (it has no ``--objective`` to name)."""
    objective_named(ObjectiveKind.LATENCY).check_backend(base.solver.name, f"one token's time, which {plans}")


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


class FitCheck:
    """Whether N requests in flight can fit W wafers, judged without a search: the base request's cost
    table with N caches resident (``CostOptions.state_copies``), its fewest wafers by
    ``strategy.wafers.fewest_wafers`` (the SRAM the weights and caches fill, the fewest wafers whose
    kernels' fewest-core regions fit). Sound one way: a count it refuses has no plan on that many wafers
    (the solve would end in "no partition into regions fits", "more than the usable SRAM" or "need at
    least W wafers"); one it
    admits may still find none (the search's time, the placement). Monotone in N: more requests only
    add cache bytes to the kernels holding a cache (``cost.standard``: their resident bytes times the
    copies; no other cost reads the count), so each grid fits fewer of them and the fewest cores and
    wafers only grow. The table is built once (about 0.5 s for Llama-3.1-70B) and costed again per
    count (about 0.6 s each with its check)."""

    def __init__(self, base: SolveRequest) -> None:
        request = point_request(base, 1, 1)
        self.family = request.sharing.family if request.sharing.mode is ShareMode.AUTO else None
        self.label = base.model.label
        self.costs: CostTable = build_costs(base.onnx_model, base.machine, request.cost, check_feasible=False)
        self._fewest: dict[int, int | None] = {}

    @property
    def cache_bytes(self) -> int:
        """The bytes of one request's caches (0: the model keeps none)."""
        return sum(int(getattr(kc.work, "state_bytes", 0)) for kc in self.costs.kernels)

    def fewest(self, requests: int) -> int | None:
        """The fewest wafers a plan with ``requests`` caches can take (None: no number of wafers)."""
        if requests not in self._fewest:
            table = self.costs
            if requests != table.options.state_copies:
                table = with_options(table, table.options.model_copy(update={"state_copies": requests}))
            self._fewest[requests] = fewest_wafers(table, self.family)
        return self._fewest[requests]

    def admits(self, requests: int, wafers: int) -> bool:
        """Whether ``requests`` may fit on at most ``wafers`` wafers (False: they cannot)."""
        fewest = self.fewest(requests)
        return fewest is not None and fewest <= wafers

    def why_not(self, requests: int, wafers: int) -> str:
        """Why ``requests`` cannot fit ``wafers`` wafers (the table's words for a point not solved)."""
        fewest = self.fewest(requests)
        flight = f"{requests} request{'s' if requests > 1 else ''} in flight"
        if fewest is None:
            return f"with {flight}, no number of wafers fits its kernels (checked without a search)"
        return (
            f"with {flight}, a plan needs at least {fewest} wafer{'s' if fewest > 1 else ''} "
            f"(SRAM and fewest-core regions, checked without a search); at most {wafers} asked"
        )

    def most(self, wafers: int) -> int:
        """The most requests the check admits on ``wafers`` wafers (0: not even one), by bisection
        between 1 and the most whose weights and caches the wafers' SRAM could hold at all."""
        per = self.cache_bytes
        if per <= 0:
            raise UsageError(f"{self.label}: not an LLM export with a KV cache; the serving frontier needs one")
        arch = self.costs.arch
        weights = sum(int(kc.work.weight_bytes) for kc in self.costs.kernels)
        lo, hi = 0, min(max(0, (arch.usable_sram_bytes * arch.total_cores * wafers - weights) // per), 2**20) + 1
        while hi - lo > 1:  # admits(lo) (0: trivially), not admits(hi) (its caches overfill the SRAM)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.admits(mid, wafers) else (lo, mid)
        return lo


def frontier(
    base: SolveRequest,
    wafer_counts: Sequence[int],
    request_counts: Sequence[int] | None = None,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
) -> Frontier:
    """Solve every point of ``request_counts`` x ``wafer_counts`` for ``base`` (an LLM export's request)
    and mark the frontier; ``request_counts`` None: for each wafer count, powers of two up to the most
    the fit check admits on it, then bisection where a count it admits finds no plan (the module
    docstring). Points the check refuses are not solved. ``on_planned``: called with the number of
    solves each round is about to run (a progress bar's total)."""
    check_solver(base, FRONTIER_PLANS)
    source = base.onnx_model
    context = source.context
    if context is None:
        raise UsageError(f"{source.label}: the serving frontier is of an LLM decode export at a context: give --context")
    # the file read once before any point is solved: a missing or broken file (the loader's line) or one
    # --context does not apply to fails here, not once per point
    cache_dims(load_model(source.onnx_path()), source.onnx_path(), int(context), source.batch)
    counts = sorted(set(wafer_counts))
    check = FitCheck(base)
    if request_counts is None:  # each wafer count up to the requests the check admits on it
        most = {w: check.most(w) for w in counts}
        grid = [(n, w) for w in counts for n in powers_up_to(max(1, most[w]))]
    else:
        grid = [(n, w) for w in counts for n in sorted(set(request_counts))]
    if len(grid) > MAX_POINTS:
        raise UsageError(f"{len(grid)} points (requests x wafers): at most {MAX_POINTS}; give fewer --requests or --wafers")
    skipped = {(n, w): check.why_not(n, w) for n, w in grid if not check.admits(n, w)}
    solved: dict[tuple[int, int], BenchRow] = {}

    def solve(points: list[tuple[int, int]]) -> None:
        if on_planned is not None:
            on_planned(len(points))
        tasks = [Task.of(f"requests={n},wafers={w}", point_request(base, n, w)) for n, w in points]
        solved.update(zip(points, run_all(tasks, jobs=jobs, scheduler=scheduler, on_done=on_done), strict=True))

    solve([g for g in grid if g not in skipped])
    while request_counts is None:  # bisect each wafer count's counts between a plan and none
        mids = [m for w in counts if (m := _between(solved, w)) is not None]
        if not mids or len(solved) + len(skipped) + len(mids) > MAX_POINTS:
            break
        solve(mids)
    for _ in range(PEAK_ROUNDS if request_counts is None else 0):  # the peak of the rate in all
        probes = [m for w in counts if (m := _toward_peak(solved, w)) is not None]
        if not probes or len(solved) + len(skipped) + len(probes) > MAX_POINTS:
            break
        solve(probes)
    points = [_point(row, n, w) for (n, w), row in solved.items()]
    points += [FrontierPoint(n, w, None, None, SKIPPED, None, None, skipped=why) for (n, w), why in skipped.items()]
    points.sort(key=lambda p: (p.wafers, p.requests))
    return Frontier(source.label, base.machine.name, int(context), mark_frontier(points))


def _between(solved: dict[tuple[int, int], BenchRow], wafers: int) -> tuple[int, int] | None:
    """The next count to solve on ``wafers`` wafers: halfway between the largest count with a plan and
    the smallest above it without one (None: they are next to each other, or every count found one)."""
    done = {n: row.ok for (n, w), row in solved.items() if w == wafers}
    lo = max((n for n, ok in done.items() if ok), default=0)
    hi = min((n for n, ok in done.items() if not ok and n > lo), default=None)
    return ((lo + hi) // 2, wafers) if hi is not None and hi - lo > 1 else None


def _toward_peak(solved: dict[tuple[int, int], BenchRow], wafers: int) -> tuple[int, int] | None:
    """The next count to solve on ``wafers`` wafers looking for the most tokens/s in all: where the
    best count so far has a larger count beside it with a plan (the rate falls past it), halfway across
    the wider of the gaps to its neighbours (the peak of a rate that rises then falls lies between
    them); None when the best is the largest count with a plan, its neighbours are next to it, or that
    count was solved already (and found no plan)."""
    rates = sorted((n, row.aggregate_tokens_per_s) for (n, w), row in solved.items() if w == wafers and row.ok)
    rated = [(n, r) for n, r in rates if r is not None]
    if len(rated) < 2:
        return None
    j = max(range(len(rated)), key=lambda i: (rated[i][1], -rated[i][0]))
    if j == len(rated) - 1:
        return None
    best, right = rated[j][0], rated[j + 1][0]
    left = rated[j - 1][0] if j > 0 else best
    lo, hi = (left, best) if best - left > right - best else (best, right)
    probe = ((lo + hi) // 2, wafers)
    # (a probe already solved found no plan: solving it again would only repeat that; a review finding)
    return probe if hi - lo > 1 and probe not in solved else None
