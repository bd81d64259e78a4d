"""Prefill and decode on separate wafers (issue 33, part 5): given a cluster of W wafers and a workload
(a prompt of T tokens, O output tokens, a limit on the time to first token and on the time per output
token), how many wafers serve prefill (p) and how many decode (d = W - p), and the requests per second
the cluster sustains within both limits, beside prefill and decode sharing every wafer.

Every number is read off proven plans, solved by the runner suites use (worker processes, or a Dask
cluster), identical requests once:

* **Prefill pool**, p wafers: the prefill export with ``--objective latency --wafers p`` (one prompt in
  flight). Its time to first token is its token path (``plan.llm.time_to_first_token_s``); it takes a
  new prompt at its aggregate rate: prompts/s = aggregate tokens/s / T (one prompt in flight: a new
  one every pass; prompts pipelined through its stages would each need their cache resident, which
  this plan does not prove, so they are not assumed). T is the prefill export's own prompt length
  (its ``input_ids`` [1, T], read from its plan); ``--prompt``, when given, must equal it.
* **Decode pool**, d wafers, N requests in flight: the decode export with ``--objective latency
  --wafers d --requests N`` at context T + O, the cache's size at the last token (the conservative
  end: earlier tokens see a shorter cache). Time per output token: the interval one request waits
  between its tokens, its pass time or N x the slowest stage when that is longer, i.e. 1 / its
  tokens/s per request; decode requests/s = aggregate tokens/s / O.
* **KV handover**: the prompt's cache (the decode plan's KV bytes per token for one sequence x T)
  over the inter-wafer link (``arch.cluster.link_bytes_per_s``) plus one ``link_latency_s``, added
  to the time to first token.
* **Fewer wafers serve too**: a plan on at most p' <= p wafers is a plan for a pool of p, so each pool
  takes the best plan solved for any p' <= p (prefill: the least time to first token; decode, for its
  N: the most tokens/s per request), and the row names p' and d' (``prefill_plan_wafers``,
  ``decode_plan_wafers``): a search over p wafers that runs out of time may hold a slower plan than
  the one proven on fewer (Llama-3.1-70B's prefill at 30 s: 806 ms allowed 8 wafers, 563 ms proven
  optimal on 5, which sharing all 8 wafers now uses: 0.946 -> 1.230 requests/s).
* **Pools that cannot fit are not solved**: the fewest wafers each plan can take, checked without a
  search (``frontier.FitCheck``: the SRAM its weights and caches fill, the wafers its kernels'
  fewest-core regions need), and a pool smaller than that is a row that says so (status SKIPPED)
  instead of a solve that ends in "no partition into regions fits" or "need at least 4 wafers" (the
  70B on 8 wafers: 6 of its 16 plans).
* A split (p, d, N) is feasible when TTFT <= the limit and TPOT <= the limit; it sustains
  min(prefill prompts/s, decode requests/s) requests per second. The best split maximizes that over
  p in 1..W-1 and N (powers of two up to the most the fit check admits on W wafers, or ``--requests``): a
  small integer program over the pools' proven plans, solved exactly by enumerating every (p, N);
  each plan's own proof status and gap stand beside it in the table (the choice is exact over these
  plans; a plan's own optimality is its solver's).
* **Sharing every wafer**: the W wafers time-sliced between the phases. Per request the cluster runs
  one prompt's prefill and O decode passes (with N requests in flight); modelled as a prefill plan
  and a decode plan each on all W wafers (p = d = W, each the best on at most W) taking turns, so the cluster sustains
  1 / (1 / prefill prompts/s + 1 / decode requests/s) requests per second, with the TTFT and TPOT
  those plans give (no handover: the cache stays where it was written; the interleaving's own
  delays to TTFT and TPOT are not modelled).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from wsealloc.bench.frontier import POOLS_PLANS, SKIPPED, FitCheck, check_solver, point_request, powers_up_to
from wsealloc.bench.runner import BenchRow, Task, run_all
from wsealloc.bench.tables import clip, csv_text, markdown_lines, percent, significant
from wsealloc.errors import InfeasibleError, SweepError, UsageError, WseallocError
from wsealloc.frontend.llm import export_phase
from wsealloc.frontend.load import load_model
from wsealloc.graph.state import cache_shape
from wsealloc.request import SolveRequest

MAX_PLANS = 64  # distinct plans of one comparison: a cluster's splits, not a search


@dataclass(frozen=True)
class Workload:
    """What the cluster serves: output tokens per request, the limits (seconds), the prompt (None: the
    prefill export's own)."""

    output: int
    ttft_s: float
    tpot_s: float
    prompt: int | None = None


@dataclass(frozen=True)
class PoolRow:
    """One way to run the cluster: p prefill wafers, d decode wafers, N decode requests in flight
    (``shared``: both phases on all the wafers, p = d = W), its times, rate and the plans' proofs."""

    prefill_wafers: int
    decode_wafers: int
    requests: int
    shared: bool
    ttft_s: float | None
    handover_s: float | None
    tpot_s: float | None
    prefill_prompts_per_s: float | None
    decode_requests_per_s: float | None
    requests_per_s: float | None
    feasible: bool
    binds: str  # feasible: which pool sets the rate; else which limit is exceeded (or why there is no plan)
    prefill_status: str
    prefill_gap: float | None
    decode_status: str
    decode_gap: float | None
    best: bool = False
    # the two plans' LLM records (``plan.objective.llm``) every number above is computed from
    prefill_llm: dict[str, Any] | None = None
    decode_llm: dict[str, Any] | None = None
    # the pool sizes those plans were solved for: at most the pools' (the best plan on p' <= p wafers
    # serves a pool of p); None: no plan
    prefill_plan_wafers: int | None = None
    decode_plan_wafers: int | None = None


@dataclass(frozen=True)
class Pools:
    """Every split of the cluster and the shared-wafer rows (module docstring), the best of each marked."""

    decode_model: str
    prefill_model: str
    arch: str
    wafers: int
    prompt: int
    output: int
    ttft_limit_s: float
    tpot_limit_s: float
    rows: tuple[PoolRow, ...]

    def best(self) -> PoolRow | None:
        """The best split on separate pools (None: no split meets the limits)."""
        return next((r for r in self.rows if r.best and not r.shared), None)

    def best_shared(self) -> PoolRow | None:
        """The best shared-wafer row (None: none meets the limits)."""
        return next((r for r in self.rows if r.best and r.shared), None)

    def judged(self, shared: bool | None = None) -> bool:
        """Whether any row (``shared`` given: of that kind) had both plans, so that its times were held
        against the limits (False: each failed before that: a plan's error, or a pool the fit check
        refuses)."""
        return any(r.ttft_s is not None and r.tpot_s is not None for r in self.rows if shared in (None, r.shared))

    def failure(self, limits: str) -> WseallocError | None:
        """The error the command ends with, or None where a row it reports meets the limits (the best
        split or the best shared row: either is an answer). Where rows were held against the limits and
        none met them, the limits are named (``limits``: as the user gave them). Where no row had its
        plans, the limits were never the cause and blaming them would send the user to relax a limit
        that changes nothing (every solve failing, out of time or refused, says nothing of them): the
        failures are named, the fit check's alone an ``InfeasibleError`` (the cluster is too small for
        the plans), any solve's error a ``SweepError`` as ``frontier``'s points that produce no plan."""
        if self.best() is not None or self.best_shared() is not None:
            return None
        if self.judged():
            return InfeasibleError(
                f"no split of {self.wafers} wafers meets the limits, nor does sharing them ({limits}): "
                "see the table for which limit each exceeds; relax a limit or add wafers"
            )
        said = self.no_plans()
        skipped = all((r.prefill_status if r.prefill_llm is None else r.decode_status) == SKIPPED for r in self.rows)
        cause = f"no split of {self.wafers} wafers, nor sharing them, has both plans to hold against the limits: {said}"
        return InfeasibleError(f"{cause}; add wafers") if skipped else SweepError(f"{cause}; see the table")

    def no_plans(self, shared: bool | None = None, most: int = 2) -> str:
        """Why the rows without plans (``shared`` given: of that kind) have none: their distinct reasons
        (the table's binds), at most ``most``, in the table's order."""
        why = list(dict.fromkeys(r.binds for r in self.rows if r.ttft_s is None and shared in (None, r.shared)))
        return "; ".join(why[:most]) + ("; ..." if len(why) > most else "")

    def table(self) -> list[dict[str, Any]]:
        """One row per split (JSON, CSV, Markdown)."""

        def rnd(v: float | None, digits: int) -> float | None:
            return None if v is None else round(v, digits)

        return [
            {
                "prefill wafers": "all" if r.shared else r.prefill_wafers,
                "decode wafers": "all" if r.shared else r.decode_wafers,
                "requests in flight": r.requests,
                # (4 significant digits: milliseconds span decades, 563 for a 70B prefill, 0.001050 for the
                # tiny decode; a fixed number of decimals printed 72.648654 beside 0.00105)
                "TTFT ms": None if r.ttft_s is None else significant(r.ttft_s * 1e3),
                "TPOT ms": None if r.tpot_s is None else significant(r.tpot_s * 1e3),
                "requests/s": rnd(r.requests_per_s, 3),
                "feasible": "yes" if r.feasible else "",
                "binds": r.binds,
                "best": "yes" if r.best else "",
                "status": f"{r.prefill_status} / {r.decode_status}",
                "gap": f"{_percent(r.prefill_gap)} / {_percent(r.decode_gap)}",
                "plans on p'/d'": f"{r.prefill_plan_wafers or '-'} / {r.decode_plan_wafers or '-'}",
            }
            for r in self.rows
        ]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        best, shared = self.best(), self.best_shared()
        return {
            "decode_model": self.decode_model,
            "prefill_model": self.prefill_model,
            "arch": self.arch,
            "wafers": self.wafers,
            "prompt": self.prompt,
            "output": self.output,
            "context": self.prompt + self.output,
            "ttft_limit_s": self.ttft_limit_s,
            "tpot_limit_s": self.tpot_limit_s,
            "best": None if best is None else asdict(best),
            "best_shared": None if shared is None else asdict(shared),
            "rows": [asdict(r) for r in self.rows],
        }

    def to_csv(self) -> str:
        """The table as CSV."""
        return csv_text(self.table())

    def to_markdown(self) -> str:
        """The table as Markdown, the choice and the comparison under it."""
        rows = self.table()
        out = markdown_lines(rows, list(rows[0]))
        return "\n".join(out) + "\n\n" + "\n".join(self.summary()) + "\n"

    def summary(self) -> list[str]:
        """The choice and the comparison, in words."""
        best, shared = self.best(), self.best_shared()
        lines = [
            f"prompt {self.prompt:,} tokens (the prefill export's own), {self.output:,} output tokens; decode planned at "
            f"context {self.prompt + self.output:,} (the cache at the last token: the conservative end)"
        ]
        if best is None and not self.judged(shared=False):  # (no split had its plans: the limits are not why)
            lines.append(f"no split of {self.wafers} wafers has both plans: {self.no_plans(shared=False)}")
        elif best is None:
            lines.append(
                f"no split of {self.wafers} wafers meets the limits "
                f"(TTFT <= {self.ttft_limit_s:g} s, TPOT <= {self.tpot_limit_s:g} s)"
            )
        else:
            lines.append(
                f"best split: {best.prefill_wafers} prefill + {best.decode_wafers} decode wafers"
                f"{f' ({_fewer(best)})' if _fewer(best) else ''}, "
                f"{best.requests} requests in flight: {best.requests_per_s:,.3f} requests/s (set by {best.binds}), "
                f"TTFT {best.ttft_s:.6g} s, TPOT {best.tpot_s:.6g} s"
            )
        if shared is None and not self.judged(shared=True):
            lines.append(f"sharing every wafer: no request count has both plans: {self.no_plans(shared=True)}")
        elif shared is None:
            lines.append("sharing every wafer: no request count meets the limits")
        else:
            lines.append(
                f"sharing every wafer: {shared.requests_per_s:,.3f} requests/s ({shared.requests} in flight"
                f"{f'; {_fewer(shared)}' if _fewer(shared) else ''}), "
                f"TTFT {shared.ttft_s:.6g} s, TPOT {shared.tpot_s:.6g} s"
            )
        if best is not None and shared is not None:  # which way serves more: said, not left to the reader
            pools_rate, shared_rate = best.requests_per_s or 0.0, shared.requests_per_s or 0.0
            faster = "sharing every wafer" if shared_rate > pools_rate else "the best split"
            lines.append(
                f"faster: {faster} ({max(pools_rate, shared_rate):,.3f} against {min(pools_rate, shared_rate):,.3f} requests/s)"
            )
        lines.append(
            "the choice is exact over these proven plans: an integer program over (prefill wafers, requests in flight) "
            "solved by enumerating every pair; each plan's proof status and gap stand beside it, and p'/d' the pool "
            "sizes its plans were solved for (the best on at most p and d wafers)"
        )
        return lines


def _percent(gap: float | None) -> str:
    return "-" if gap is None else percent(gap)


def plan_cell(wafers: int | None, status: str, gap: float | None) -> str:
    """A pool's plan as one cell of the terminal's table: the pool size it was solved for, its status
    and gap ("4: FEASIBLE 43.93%"); no plan: its status alone (ERROR, SKIPPED: the binds say why)."""
    return status if wafers is None else f"{wafers}: {status} {_percent(gap)}"


def _fewer(row: PoolRow) -> str:
    """The row's plans solved on fewer wafers than its pools, in words ("" when none is)."""
    said = [
        f"the {side} plan solved on at most {used} wafer{'s' if used > 1 else ''}"
        for side, used, pool in (
            ("prefill", row.prefill_plan_wafers, row.prefill_wafers),
            ("decode", row.decode_plan_wafers, row.decode_wafers),
        )
        if used is not None and used < pool
    ]
    return " and ".join(said)


def _excerpt(row: BenchRow, label: str = "") -> str:
    """A plan's failure as a cell: its status and the error's start, the model's path dropped."""
    return f"{row.status}: {clip(row.error, 80, label)}" if row.error else row.status


def _request(base: SolveRequest, requests: int, wafers: int, model: dict[str, Any] | None = None) -> SolveRequest:
    """A pool's plan: one token's time on ``wafers`` wafers with ``requests`` caches (frontier's points),
    the model replaced by ``model`` when given."""
    if model is not None:
        doc = json.loads(base.to_json())
        doc["model"] = model
        base = SolveRequest.from_json(json.dumps(doc))
    return point_request(base, requests, wafers)


def _rates(
    prefill: BenchRow,
    decode: BenchRow,
    prompt: int,
    work: Workload,
    link: tuple[float, float] | None,
    labels: tuple[str, str] = ("", ""),
) -> tuple[float | None, float | None, float | None, float | None, float | None, float | None, str]:
    """(TTFT, handover, TPOT, prompts/s, decode requests/s, requests/s, why none) of a prefill and a
    decode plan; ``link`` (bytes/s, latency s) None: the cache stays (shared wafers); ``labels``: the
    two models' paths (dropped from an error's excerpt). Requests/s is filled in by the caller (min or
    harmonic)."""
    if prefill.llm is None or decode.llm is None:
        bad = prefill if prefill.llm is None else decode
        side = "prefill" if bad is prefill else "decode"
        if bad.status == SKIPPED:  # the fit check's reason, not an error
            return None, None, None, None, None, None, bad.error
        return None, None, None, None, None, None, f"no {side} plan ({_excerpt(bad, labels[bad is decode])})"
    p, d = prefill.llm, decode.llm
    per_seq = d["kv_bytes_per_token"] / (d["requests"] * d["batch"])  # one sequence's cache per token
    handover = 0.0 if link is None else per_seq * prompt / link[0] + link[1]
    ttft = float(p["time_to_first_token_s"]) + handover
    tpot = 1.0 / d["tokens_per_s_per_request"]
    if d["phase"] != "decode":
        return None, None, None, None, None, None, "DECODE.onnx is not a decode step"
    prompts_per_s = p["aggregate_tokens_per_s"] / prompt  # prompts of T tokens each
    decode_per_s = d["aggregate_tokens_per_s"] / work.output
    return ttft, handover, tpot, prompts_per_s, decode_per_s, None, ""


@dataclass(frozen=True)
class _Plans:
    """What a row is computed from: the prefill and the decode plan (or why there is none), the pool
    sizes they were solved for, and the two models' paths."""

    prefill: BenchRow
    decode: BenchRow
    prefill_wafers: int | None
    decode_wafers: int | None
    labels: tuple[str, str]


def _row(p: int, d: int, n: int, shared: bool, plans: _Plans, prompt: int, work: Workload, link: Any) -> PoolRow:
    prefill, decode = plans.prefill, plans.decode
    ttft, handover, tpot, pps, dps, _, why = _rates(prefill, decode, prompt, work, link, plans.labels)
    rps: float | None = None
    feasible = False
    if why == "" and ttft is not None and tpot is not None and pps and dps:
        rps = 1.0 / (1.0 / pps + 1.0 / dps) if shared else min(pps, dps)
        over = [name for name, v, lim in (("TTFT", ttft, work.ttft_s), ("TPOT", tpot, work.tpot_s)) if v > lim]
        feasible = not over
        if over:
            why = " and ".join(over) + " over the limit"
        elif shared:
            why = "both (time-sliced)"
        else:
            why = "prefill" if pps <= dps else "decode"
    return PoolRow(
        p, d, n, shared, ttft, handover, tpot, pps, dps, rps, feasible, why,
        prefill.status, prefill.gap, decode.status, decode.gap, False, prefill.llm, decode.llm,
        plans.prefill_wafers if prefill.llm is not None else None,
        plans.decode_wafers if decode.llm is not None else None,
    )  # fmt: skip


def best_within(rows: dict[int, BenchRow], wafers: int, key: Callable[[dict[str, Any]], float]) -> tuple[int, BenchRow]:
    """The plan for a pool of ``wafers`` among ``rows`` (each pool size's plan or failure): the least
    ``key`` of its LLM record over the plans solved on at most that many wafers (ties: fewer wafers), and
    the size it was solved for; none solved: the pool's own row (its error, or why it was not solved)."""
    solved = [(w, row) for w, row in rows.items() if w <= wafers and row.llm is not None]
    if not solved:
        return wafers, rows[wafers]
    return min(solved, key=lambda wr: (key(wr[1].llm or {}), wr[0]))


def mark_best(rows: Sequence[PoolRow]) -> tuple[PoolRow, ...]:
    """The rows with ``best`` set: the feasible split of most requests/s (ties: fewer prefill wafers,
    fewer requests in flight), and likewise among the shared-wafer rows."""
    out = list(rows)
    for shared in (False, True):
        cands = [i for i, r in enumerate(out) if r.shared is shared and r.feasible and r.requests_per_s is not None]
        if cands:
            i = min(cands, key=lambda i: (-(out[i].requests_per_s or 0.0), out[i].prefill_wafers, out[i].requests))
            out[i] = PoolRow(**{**asdict(out[i]), "best": True})
    return tuple(out)


def pools(
    decode: SolveRequest,
    prefill_path: str,
    wafers: int,
    work: Workload,
    request_counts: Sequence[int] | None = None,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
    on_planned: Callable[[int], None] | None = None,
) -> Pools:
    """Every split of ``wafers`` wafers into a prefill and a decode pool, and both on every wafer, for
    the decode export of ``decode`` and the prefill export at ``prefill_path`` (module docstring).
    ``on_planned``: called with the number of plans about to be solved (a progress bar's total)."""
    check_solver(decode, POOLS_PLANS)
    if wafers < 2:
        raise UsageError(f"--cluster {wafers}: separate prefill and decode pools need at least 2 wafers")
    if work.output < 1:
        raise UsageError(f"--output {work.output}: expected at least 1 output token")
    for name, v in (("--ttft", work.ttft_s), ("--tpot", work.tpot_s)):
        if not v > 0:
            raise UsageError(f"{name} {v:g}: expected a positive number of seconds")
    if decode.onnx_model.context is not None:
        raise UsageError("--context: pools plans the decode at the prompt + --output tokens; drop --context")
    check_exports(str(decode.onnx_model.onnx_path()), prefill_path)
    prefill_model = {**json.loads(decode.to_json())["model"], "path": prefill_path, "context": None, "batch": None}
    sizes = list(range(1, wafers + 1))
    # 1. the prefill: T off its cache's shape, the fewest wafers it can take (checked without a search)
    pre_check = FitCheck(_request(decode, 1, 1, prefill_model))
    prompt = _prompt(pre_check, prefill_path, work)
    pre_sizes = [p for p in sizes if pre_check.admits(1, p)]
    # 2. the decode at context T + O: the request counts, each (pool size, count) the check admits
    base = decode.model_copy(
        update={
            "model": type(decode.onnx_model).model_validate({**decode.onnx_model.model_dump(), "context": prompt + work.output})
        }
    )
    dec_check = FitCheck(base)
    if request_counts is None:
        request_counts = powers_up_to(max(1, dec_check.most(wafers)))
    counts = sorted(set(request_counts))
    grid = [(d, n) for d in sizes for n in counts if dec_check.admits(n, d)]
    tasks = [Task.of(f"prefill,wafers={p}", _request(decode, 1, p, prefill_model)) for p in pre_sizes]
    unique: dict[str, int] = {}
    for d, n in grid:
        key = _request(base, n, d).to_json()
        if key not in unique:
            unique[key] = len(tasks)
            tasks.append(Task.of(f"decode,wafers={d},requests={n}", _request(base, n, d)))
    if len(tasks) > MAX_PLANS:
        raise UsageError(f"{len(tasks)} plans: at most {MAX_PLANS}; give fewer --requests or a smaller --cluster")
    # 3. every plan at once (the prompt is known: the prefill's plans need not come first)
    if on_planned is not None:
        on_planned(len(tasks))
    solved = run_all(tasks, jobs=jobs, scheduler=scheduler, on_done=on_done) if tasks else []
    pre = {p: solved[i] for i, p in enumerate(pre_sizes)}
    pre.update({p: _skipped("prefill", pre_check, 1, p) for p in sizes if p not in pre})
    dec = {(d, n): solved[unique[_request(base, n, d).to_json()]] for d, n in grid}
    dec.update({(d, n): _skipped("decode", dec_check, n, d) for d in sizes for n in counts if (d, n) not in dec})
    cluster = decode.machine.cluster
    link = (cluster.link_bytes_per_s, cluster.link_latency_s)
    labels = (prefill_path, decode.onnx_model.label)

    def plans(p: int, d: int, n: int) -> _Plans:
        """The best prefill plan on at most p wafers, the best decode plan of n requests on at most d."""
        p_used, p_row = best_within(pre, p, lambda llm: float(llm["time_to_first_token_s"]))
        d_used, d_row = best_within({w: dec[(w, n)] for w in sizes}, d, lambda llm: -float(llm["tokens_per_s_per_request"]))
        return _Plans(p_row, d_row, p_used, d_used, labels)

    rows = [_row(p, wafers - p, n, False, plans(p, wafers - p, n), prompt, work, link) for p in range(1, wafers) for n in counts]
    rows += [_row(wafers, wafers, n, True, plans(wafers, wafers, n), prompt, work, None) for n in counts]
    return Pools(
        decode.onnx_model.label,
        prefill_path,
        decode.machine.name,
        wafers,
        prompt,
        work.output,
        work.ttft_s,
        work.tpot_s,
        mark_best(rows),
    )


def check_exports(decode: str, prefill: str) -> None:
    """Both files read before any plan is solved (a missing or broken file, or a config.json, is the
    loader's one line), and each the export its place asks for: ``DECODE.onnx`` a decode step (KV-cache
    inputs), ``PREFILL.onnx`` a prefill (no cache input, the cache written as ``present.*``). Two files
    given the other way round are named as swapped."""
    dec, pre = export_phase(load_model(decode)), export_phase(load_model(prefill))
    order = "the arguments are DECODE.onnx then PREFILL.onnx"
    if dec == "prefill" and pre == "decode":
        raise UsageError(f"{order}: {decode} is a prefill export and {prefill} a decode export; swap them")
    if dec != "decode":
        what = "a prefill export (no past_key_values input)" if dec == "prefill" else "not an LLM export with a KV cache"
        raise UsageError(f"DECODE.onnx {decode}: {what}; {order} (the decode export takes past_key_values.* inputs)")
    if pre != "prefill":
        what = "a decode export (past_key_values.* inputs)" if pre == "decode" else "not an LLM export with a KV cache"
        raise UsageError(f"PREFILL.onnx {prefill}: {what}; {order} (the prefill export writes the cache, present.*)")


def _skipped(side: str, check: FitCheck, requests: int, wafers: int) -> BenchRow:
    """The row of a plan the fit check refuses (not solved): its reason where an error would be."""
    fewest = check.fewest(requests)
    flight = f" with {requests} in flight" if side == "decode" else ""
    if fewest is None:
        why = f"{side}{flight} fits no number of wafers: not solved"
    else:
        why = f"{side}{flight} needs at least {fewest} wafers: not solved"
    return BenchRow(f"{side},wafers={wafers},requests={requests}", status=SKIPPED, error=why)


def _prompt(check: FitCheck, path: str, work: Workload) -> int:
    """T: the prompt length of the prefill export, read off its cache's shape (as its plans' LLM
    records are: ``tokens_per_request``); ``--prompt``, when given, must equal it."""
    shape = cache_shape(check.costs.kgraph.ops)
    if shape is None:
        raise UsageError(f"{path}: no KV cache in it; give a prefill export with a KV cache")
    if shape.phase != "prefill":
        raise UsageError(f"{path}: a {shape.phase} export where the prefill was expected (DECODE.onnx PREFILL.onnx)")
    prompt = int(shape.tokens)
    if work.prompt is not None and work.prompt != prompt:
        raise UsageError(
            f"--prompt {work.prompt}: the prefill export's prompt is fixed in the file (input_ids [1, {prompt}]); "
            f"give --prompt {prompt} or export a prefill of {work.prompt} tokens"
        )
    return prompt
