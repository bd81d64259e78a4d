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
* A split (p, d, N) is feasible when TTFT <= the limit and TPOT <= the limit; it sustains
  min(prefill prompts/s, decode requests/s) requests per second. The best split maximizes that over
  p in 1..W-1 and N (powers of two up to the most whose caches fit on W wafers, or ``--requests``): a
  small integer program over the pools' proven plans, solved exactly by enumerating every (p, N);
  each plan's own proof status and gap stand beside it in the table (the choice is exact over these
  plans; a plan's own optimality is its solver's).
* **Sharing every wafer**: the W wafers time-sliced between the phases. Per request the cluster runs
  one prompt's prefill and O decode passes (with N requests in flight); modelled as a prefill plan
  and a decode plan each on all W wafers (p = d = W) taking turns, so the cluster sustains
  1 / (1 / prefill prompts/s + 1 / decode requests/s) requests per second, with the TTFT and TPOT
  those plans give (no handover: the cache stays where it was written; the interleaving's own
  delays to TTFT and TPOT are not modelled).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from wsealloc.bench.frontier import _largest_context, point_request, powers_up_to
from wsealloc.bench.runner import BenchRow, Task, run_all
from wsealloc.bench.tables import csv_text, markdown_lines
from wsealloc.errors import UsageError
from wsealloc.frontend.llm import export_phase
from wsealloc.frontend.load import load_model
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

    def table(self) -> list[dict[str, Any]]:
        """One row per split (JSON, CSV, Markdown)."""

        def rnd(v: float | None, digits: int) -> float | None:
            return None if v is None else round(v, digits)

        return [
            {
                "prefill wafers": "all" if r.shared else r.prefill_wafers,
                "decode wafers": "all" if r.shared else r.decode_wafers,
                "requests in flight": r.requests,
                "TTFT ms": None if r.ttft_s is None else rnd(r.ttft_s * 1e3, 6),
                "TPOT ms": None if r.tpot_s is None else rnd(r.tpot_s * 1e3, 6),
                "requests/s": rnd(r.requests_per_s, 3),
                "feasible": "yes" if r.feasible else "",
                "binds": r.binds,
                "best": "yes" if r.best else "",
                "status": f"{r.prefill_status}/{r.decode_status}",
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
        if best is None:
            lines.append(
                f"no split of {self.wafers} wafers meets the limits "
                f"(TTFT <= {self.ttft_limit_s:g} s, TPOT <= {self.tpot_limit_s:g} s)"
            )
        else:
            lines.append(
                f"best split: {best.prefill_wafers} prefill + {best.decode_wafers} decode wafers, {best.requests} requests in "
                f"flight: {best.requests_per_s:,.3f} requests/s (set by {best.binds}), TTFT {best.ttft_s:.6g} s, "
                f"TPOT {best.tpot_s:.6g} s"
            )
        if shared is None:
            lines.append("sharing every wafer: no request count meets the limits")
        else:
            lines.append(
                f"sharing every wafer: {shared.requests_per_s:,.3f} requests/s ({shared.requests} in flight), TTFT "
                f"{shared.ttft_s:.6g} s, TPOT {shared.tpot_s:.6g} s"
            )
        lines.append(
            "the choice is exact over these proven plans: an integer program over (prefill wafers, requests in flight) "
            "solved by enumerating every pair; each plan's proof status and gap stand beside it"
        )
        return lines


def _excerpt(row: BenchRow) -> str:
    return f"{row.status}: {row.error[:80]}" if row.error else row.status


def _request(base: SolveRequest, requests: int, wafers: int, model: dict[str, Any] | None = None) -> SolveRequest:
    """A pool's plan: one token's time on ``wafers`` wafers with ``requests`` caches (frontier's points),
    the model replaced by ``model`` when given."""
    if model is not None:
        doc = json.loads(base.to_json())
        doc["model"] = model
        base = SolveRequest.from_json(json.dumps(doc))
    return point_request(base, requests, wafers)


def _rates(
    prefill: BenchRow, decode: BenchRow, requests: int, prompt: int, work: Workload, link: tuple[float, float] | None
) -> tuple[float | None, float | None, float | None, float | None, float | None, float | None, str]:
    """(TTFT, handover, TPOT, prompts/s, decode requests/s, requests/s, why none) of a prefill and a
    decode plan; ``link`` (bytes/s, latency s) None: the cache stays (shared wafers). Requests/s is
    filled in by the caller (min or harmonic)."""
    if prefill.llm is None or decode.llm is None:
        bad = prefill if prefill.llm is None else decode
        side = "prefill" if bad is prefill else "decode"
        return None, None, None, None, None, None, f"no {side} plan ({_excerpt(bad)})"
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


def _row(
    p: int, d: int, n: int, shared: bool, prefill: BenchRow, decode: BenchRow, prompt: int, work: Workload, link: Any
) -> PoolRow:
    ttft, handover, tpot, pps, dps, _, why = _rates(prefill, decode, n, prompt, work, link)
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
    )  # fmt: skip


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
) -> Pools:
    """Every split of ``wafers`` wafers into a prefill and a decode pool, and both on every wafer, for
    the decode export of ``decode`` and the prefill export at ``prefill_path`` (module docstring)."""
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
    # 1. the prefill plans (one per pool size, and all the wafers): they give T
    sizes = list(range(1, wafers + 1))
    first = run_all(
        [Task.of(f"prefill,wafers={p}", _request(decode, 1, p, prefill_model)) for p in sizes],
        jobs=jobs,
        scheduler=scheduler,
        on_done=on_done,
    )
    prompt = _prompt(first, prefill_path, work)
    # 2. the decode plans at context T + O, one per (pool size, requests in flight), each once
    base = decode.model_copy(
        update={
            "model": type(decode.onnx_model).model_validate({**decode.onnx_model.model_dump(), "context": prompt + work.output})
        }
    )
    if request_counts is None:
        largest = _largest_context(base, wafers)
        request_counts = powers_up_to(max(1, largest // (prompt + work.output)))
    counts = sorted(set(request_counts))
    grid = [(d, n) for d in sizes for n in counts]
    if len(grid) + len(sizes) > MAX_PLANS:
        raise UsageError(f"{len(grid) + len(sizes)} plans: at most {MAX_PLANS}; give fewer --requests or a smaller --cluster")
    unique: dict[str, int] = {}
    tasks: list[Task] = []
    for d, n in grid:
        req = _request(base, n, d)
        key = req.to_json()
        if key not in unique:
            unique[key] = len(tasks)
            tasks.append(Task.of(f"decode,wafers={d},requests={n}", req))
    solved = run_all(tasks, jobs=jobs, scheduler=scheduler, on_done=on_done)
    dec = {(d, n): solved[unique[_request(base, n, d).to_json()]] for d, n in grid}
    pre = dict(zip(sizes, first, strict=True))
    cluster = decode.machine.cluster
    link = (cluster.link_bytes_per_s, cluster.link_latency_s)
    rows = [
        _row(p, wafers - p, n, False, pre[p], dec[(wafers - p, n)], prompt, work, link) for p in range(1, wafers) for n in counts
    ]
    rows += [_row(wafers, wafers, n, True, pre[wafers], dec[(wafers, n)], prompt, work, None) for n in counts]
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


def _prompt(rows: Sequence[BenchRow], path: str, work: Workload) -> int:
    """T: the prompt length of the prefill export, read off its plans' LLM records (``--prompt``, when
    given, must equal it)."""
    llm = next((r.llm for r in rows if r.llm is not None), None)
    if llm is None:
        failed = next((r for r in rows if r.error), rows[0])
        raise UsageError(
            f"{path}: no prefill plan with an LLM record ({_excerpt(failed)}); give a prefill export with a KV cache"
        )
    if llm["phase"] != "prefill":
        raise UsageError(f"{path}: a {llm['phase']} export where the prefill was expected (DECODE.onnx PREFILL.onnx)")
    prompt = int(llm["tokens_per_request"])
    if work.prompt is not None and work.prompt != prompt:
        raise UsageError(
            f"--prompt {work.prompt}: the prefill export's prompt is fixed in the file (input_ids [1, {prompt}]); "
            f"give --prompt {prompt} or export a prefill of {work.prompt} tokens"
        )
    return prompt
