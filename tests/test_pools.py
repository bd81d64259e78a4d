"""Prefill and decode on separate wafers (``wsealloc pools``, ``bench/pools.py``): one split's numbers by
hand from its plans' LLM records, the best split against brute force over the same table, limits no
split meets, and the command end to end on the tiny twins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MODELS, run
from test_frontier import HONOURED, TRAINING_OPTIONS, _listed

from wsealloc.bench.pools import Pools, Workload, pools
from wsealloc.request import build_request

DECODE = MODELS / "tiny" / "llm_decode.onnx"
PREFILL = MODELS / "tiny" / "llm_prefill.onnx"
WORK = Workload(output=8, ttft_s=1e-3, tpot_s=1e-3)


@pytest.fixture(scope="module")
def three() -> Pools:
    """3 tiny wafers, 1 or 2 decode requests in flight (8 distinct plans, 2 worker processes)."""
    request = build_request(str(DECODE), "tiny", time_limit=4)
    return pools(request, str(PREFILL), 3, WORK, [1, 2], jobs=2)


@pytest.mark.slow  # 8 plans in worker processes (9 s, shared with the next test): run by .ci/run (pytest -m slow)
def test_one_split_by_hand_from_its_plans(three: Pools) -> None:
    assert three.prompt == 16  # the prefill export's own input_ids [1, 16]
    row = next(r for r in three.rows if not r.shared and r.prefill_wafers == 1 and r.requests == 2)
    assert row.decode_wafers == 2
    p, d = row.prefill_llm, row.decode_llm
    assert p is not None and d is not None
    assert p["phase"] == "prefill" and d["phase"] == "decode"
    assert d["context"] == 16 + 8 and d["requests"] == 2  # decode at the cache's size at the last token
    cluster = build_request(str(DECODE), "tiny").machine.cluster
    handover = d["kv_bytes_per_token"] / 2 * 16 / cluster.link_bytes_per_s + cluster.link_latency_s
    assert row.handover_s == pytest.approx(handover)
    assert row.ttft_s == pytest.approx(p["token_path_cycles"] / 1e9 + handover)  # tiny: 1 GHz
    # TPOT: a request waits its pass, or 2 slowest stages when longer
    assert row.tpot_s == pytest.approx(max(d["token_path_cycles"], 2 * d["slowest_stage_cycles"]) / 1e9)
    assert row.prefill_prompts_per_s == pytest.approx(p["aggregate_tokens_per_s"] / 16)
    assert row.decode_requests_per_s == pytest.approx(d["aggregate_tokens_per_s"] / 8)
    assert row.requests_per_s == pytest.approx(min(row.prefill_prompts_per_s, row.decode_requests_per_s))
    assert row.feasible == (row.ttft_s <= WORK.ttft_s and row.tpot_s <= WORK.tpot_s)
    shared = next(r for r in three.rows if r.shared and r.requests == 2)
    assert shared.handover_s == 0.0
    assert shared.requests_per_s == pytest.approx(
        1 / (1 / (shared.prefill_prompts_per_s or 0) + 1 / (shared.decode_requests_per_s or 0))
    )


@pytest.mark.slow  # shares the 8 plans above: run by .ci/run (pytest -m slow)
def test_the_best_split_is_the_brute_force_best_of_the_table(three: Pools) -> None:
    splits = [r for r in three.rows if not r.shared]
    assert sorted((r.prefill_wafers, r.decode_wafers, r.requests) for r in splits) == [
        (1, 2, 1), (1, 2, 2), (2, 1, 1), (2, 1, 2),
    ]  # fmt: skip
    feasible = [r for r in splits if r.ttft_s is not None and r.ttft_s <= WORK.ttft_s and (r.tpot_s or 0) <= WORK.tpot_s]
    assert feasible, "the tiny twins meet a millisecond on 3 wafers"
    best = three.best()
    assert best is not None and best.requests_per_s == max(r.requests_per_s or 0.0 for r in feasible)
    assert sum(r.best for r in three.rows) == 2  # one split and one shared row
    doc = three.to_dict()
    assert doc["best"]["requests_per_s"] == best.requests_per_s and doc["context"] == 24
    assert "no split" not in three.to_markdown()
    # which way serves more requests is said (the summary led with the best split, slower or not)
    everything = three.best_shared()
    assert everything is not None
    faster = "sharing every wafer" if everything.requests_per_s > best.requests_per_s else "the best split"
    said = [line for line in three.summary() if line.startswith("faster: ")]
    assert said and said[0].startswith(f"faster: {faster} ("), said


@pytest.mark.slow  # the command end to end with its worker processes (5 s): run by .ci/run (pytest -m slow)
def test_limits_no_split_meets_exit_as_infeasible(tmp_path: Path) -> None:
    result = run(
        "pools", str(DECODE), str(PREFILL), "--arch", "tiny", "--cluster", "2", "--output", "8",
        "--ttft", "1e-12", "--tpot", "1", "--requests", "1", "--time-limit", "10", "-j", "2",
        "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "no split of 2 wafers meets the limits" in result.stderr and "--ttft" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["best"] is None and doc["prompt"] == 16
    assert all("TTFT over the limit" in r["binds"] for r in doc["rows"] if r["ttft_s"] is not None)
    assert (tmp_path / "pools-llm_decode-tiny.md").read_text().count("no split") == 1
    assert (tmp_path / "pools-llm_decode-tiny.csv").is_file()


def test_a_prompt_other_than_the_exports_is_refused(tmp_path: Path) -> None:
    args = ["--arch", "tiny", "--output", "8", "--ttft", "1", "--tpot", "1", "--out", str(tmp_path)]
    result = run("pools", str(DECODE), str(PREFILL), "--cluster", "2", "--prompt", "17", "--time-limit", "10", *args)
    assert result.returncode == 2 and "--prompt 17" in result.stderr and "[1, 16]" in result.stderr
    result = run("pools", str(DECODE), str(PREFILL), "--cluster", "1", *args)
    assert result.returncode == 2 and "--cluster 1" in result.stderr
    result = run("pools", str(DECODE), str(PREFILL), "--cluster", "2", "--context", "20", *args)
    assert result.returncode == 2 and "--context" in result.stderr


def test_pools_offers_no_training_or_streaming_option(tmp_path: Path) -> None:
    """Both pools are plans of one token's time (--objective latency): the training and streaming options are
    not pools' (click names them unknown, before any work); every option pools honours stays."""
    listed = _listed("pools")
    assert not listed & set(TRAINING_OPTIONS)
    assert set(HONOURED) | {"--cluster", "--prompt", "--output", "--ttft", "--tpot"} <= listed
    base = ("pools", str(DECODE), str(PREFILL), "--arch", "tiny", "--cluster", "2", "--output", "8", "--ttft", "1")
    for option in TRAINING_OPTIONS:
        argv = (*base, option) if option == "--train" else (*base, option, "1")
        result = run(*argv, "--tpot", "1", "--out", str(tmp_path))
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, option
        assert result.stderr.startswith(f"wsealloc: error: No such option '{option}'."), option  # (click may suggest one)


def _llm(phase: str, *, ttft: float = 1e-3, per_request: float = 1e3, requests: int = 1) -> dict[str, object]:
    """An LLM record by hand with what pools reads of it."""
    return {
        "phase": phase, "batch": 1, "requests": requests, "kv_bytes_per_token": 64 * requests,
        "time_to_first_token_s": ttft if phase == "prefill" else None,
        "tokens_per_s_per_request": per_request, "aggregate_tokens_per_s": per_request * requests,
    }  # fmt: skip


NO_FIT = "no partition into regions fits the wafer: the fewest cores any takes are 917,760, the wafer has 903,168"


def _stubbed(monkeypatch, needs: dict[str, int], plans):  # type: ignore[no-untyped-def]
    """``pools`` with the fit check's fewest wafers set by hand (``needs``: the prefill's, and the
    decode's per request in flight above one) and every solve stubbed by ``plans(name)`` (an LLM
    record, or None for a failed solve); returns the plans asked."""
    import wsealloc.bench.pools as pl
    from wsealloc.bench.frontier import FitCheck
    from wsealloc.bench.runner import BenchRow

    class Needs(FitCheck):
        def fewest(self, requests: int) -> int | None:
            return needs["prefill"] if "prefill" in self.label else needs["decode"] + (requests > 1)

    monkeypatch.setattr(pl, "FitCheck", Needs)
    asked: list[str] = []

    def fake_run_all(tasks, **_):  # type: ignore[no-untyped-def]
        asked.extend(t.name for t in tasks)
        out = []
        for t in tasks:
            llm = plans(t.name)
            gap = 0.5 if "wafers=3" in t.name else 0.0
            if llm is None:
                path = PREFILL if t.name.startswith("prefill") else DECODE
                out.append(BenchRow(t.name, error=f"{path}: {NO_FIT}"))
            else:
                out.append(BenchRow(t.name, solver=1, status="FEASIBLE" if gap else "OPTIMAL", gap=gap, llm=llm))
        return out

    monkeypatch.setattr(pl, "run_all", fake_run_all)
    return asked


def _plan(name: str) -> dict[str, object]:
    """Prefill: 1 ms on 2 wafers, 5 ms on 3 (a search out of time: worse on more wafers); decode: 1,000
    tokens/s per request (2 requests: 800)."""
    if name.startswith("prefill"):
        return _llm("prefill", ttft=5e-3 if "wafers=3" in name else 1e-3)
    two = "requests=2" in name
    return _llm("decode", per_request=800.0 if two else 1000.0, requests=2 if two else 1)


def test_splits_that_cannot_fit_are_skipped_without_a_solve(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Finding 10: the prefill needs 2 wafers, the decode 1 (2 with two requests): on 3 wafers the plans
    on fewer are rows that say why, never solves (the 70B spent 12 s on each before failing)."""
    asked = _stubbed(monkeypatch, {"prefill": 2, "decode": 1}, _plan)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 3, WORK, [1, 2])
    assert sorted(asked) == sorted([
        "prefill,wafers=2", "prefill,wafers=3",
        "decode,wafers=1,requests=1", "decode,wafers=2,requests=1", "decode,wafers=3,requests=1",
        "decode,wafers=2,requests=2", "decode,wafers=3,requests=2",
    ])  # fmt: skip
    one = [r for r in result.rows if not r.shared and r.prefill_wafers == 1]
    assert one and all(r.binds == "prefill needs at least 2 wafers: not solved" for r in one)
    assert all(r.prefill_status == "SKIPPED" and not r.feasible and r.requests_per_s is None for r in one)
    two = next(r for r in result.rows if not r.shared and r.decode_wafers == 1 and r.requests == 2)
    assert two.binds == "decode with 2 in flight needs at least 2 wafers: not solved"
    cells = {r["binds"] for r in result.table()}
    assert not any("ERROR" in c for c in cells)


def test_a_pool_takes_the_best_plan_on_at_most_its_wafers(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Finding 2/10: a plan on at most p' <= p wafers serves a pool of p. The 3-wafer prefill plan is
    worse (5 ms) than the 2-wafer one (1 ms): sharing all 3 wafers uses the 2-wafer plan, says so
    (p' = 2), and carries that plan's status and gap."""
    _stubbed(monkeypatch, {"prefill": 2, "decode": 1}, _plan)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 3, WORK, [1, 2])
    shared = next(r for r in result.rows if r.shared and r.requests == 1)
    assert shared.prefill_plan_wafers == 2 and shared.ttft_s == pytest.approx(1e-3)
    assert shared.prefill_status == "OPTIMAL" and shared.prefill_gap == 0.0
    # the decode plan of 3 wafers is no faster than one wafer's (equal: fewer wafers win the tie)
    assert shared.decode_plan_wafers == 1
    row = next(r for r in result.table() if r["prefill wafers"] == "all" and r["requests in flight"] == 1)
    assert row["plans on p'/d'"] == "2 / 1" and row["status"] == "OPTIMAL / OPTIMAL"
    assert "the prefill plan solved on at most 2 wafers" in "\n".join(result.summary())


def test_a_failed_plan_gives_way_to_one_on_fewer_wafers(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A pool whose own plan failed uses a plan solved on fewer wafers; where none did, its row names the
    error, cut at a word with " ..." (it was cut mid-word: "...fits the wafer: the)")."""

    def plans(name: str) -> dict[str, object] | None:
        return None if name in ("prefill,wafers=3", "prefill,wafers=1") else _plan(name)

    _stubbed(monkeypatch, {"prefill": 1, "decode": 1}, plans)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 3, WORK, [1])
    shared = next(r for r in result.rows if r.shared)
    assert shared.prefill_plan_wafers == 2 and shared.prefill_llm is not None
    one = next(r for r in result.rows if not r.shared and r.prefill_wafers == 1)
    assert one.binds.startswith("no prefill plan (ERROR: no partition into regions fits the wafer")
    assert one.binds.endswith(" ...)") and str(PREFILL) not in one.binds


def test_the_table_has_each_plans_gap(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Finding 10: the docs promise each plan's status and gap beside it; the table had the status only."""
    _stubbed(monkeypatch, {"prefill": 1, "decode": 1}, _plan)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 3, WORK, [1])
    rows = result.table()
    assert "gap" in rows[0] and list(rows[0]).index("gap") == list(rows[0]).index("status") + 1
    split = next(r for r in rows if r["prefill wafers"] == 2)
    assert split["gap"] == "0.00% / 0.00%"  # its prefill on 2 wafers, its decode the 1-wafer plan (as fast as its own)
    assert "| gap |" in result.to_markdown()


def test_clip_cuts_at_a_word() -> None:
    from wsealloc.bench.tables import clip

    text = "models/x.onnx: no partition into regions fits the wafer: the fewest cores any takes are 917,760"
    assert clip(text, 200) == text
    assert clip(text, 40, "models/x.onnx") == "no partition into regions fits the ..."
    assert clip("a" * 50, 20) == "a" * 16 + " ..."
    assert len(clip(text, 40)) <= 40


def test_significant_keeps_four_digits() -> None:
    from wsealloc.bench.tables import significant

    assert [significant(v) for v in (72.648654, 72.30224, 0.00105, 563.0, 12345.6, 0.0)] == [
        "72.65", "72.30", "0.001050", "563.0", "12346", "0",
    ]  # fmt: skip


def test_ttft_and_tpot_cells_have_four_significant_digits(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: TTFT and TPOT printed 72.648654, 72.30224 and 0.00105 in one table (rounded to 6 decimals).
    By hand: the prefill's path 72.3 ms (the shared row's TTFT: 72.30), a split's 72.3 ms + the handover
    1.0068 us (72.30); 952,380.95 tokens/s per request is a TPOT of 1.05 us (0.001050 ms), alike in the
    .csv, the .md and on the terminal."""

    def plans(name: str) -> dict[str, object]:
        if name.startswith("prefill"):
            return _llm("prefill", ttft=72.3e-3)
        return _llm("decode", per_request=1e6 / 1.05)

    _stubbed(monkeypatch, {"prefill": 1, "decode": 1}, plans)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 2, WORK, [1])
    shared = next(r for r in result.table() if r["prefill wafers"] == "all")
    split = next(r for r in result.table() if r["prefill wafers"] == 1)
    assert (shared["TTFT ms"], shared["TPOT ms"], split["TTFT ms"], split["TPOT ms"]) == (
        "72.30",
        "0.001050",
        "72.30",
        "0.001050",
    )
    cli = run(*_pools_cli(tmp_path, "--ttft", "1", "--tpot", "1"))
    assert cli.returncode == 0, cli.stderr
    assert "72.30" in cli.stdout and "0.001050" in cli.stdout and "72.3 " not in cli.stdout
    for suffix in ("csv", "md"):
        text = (tmp_path / f"pools-llm_decode-tiny.{suffix}").read_text()
        assert "72.30" in text and "0.001050" in text and "0.00105," not in text and "0.00105 " not in text, suffix


def test_the_terminal_table_has_each_plans_gap(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Finding 10: the terminal showed "FEASIBLE/FEASIBLE" only; each plan's cell now holds the pool size it
    was solved for, its status and its gap, and a skipped pool says why in binds."""
    from click.testing import CliRunner

    from wsealloc.cli import build_cli

    _stubbed(monkeypatch, {"prefill": 2, "decode": 1}, _plan)
    args = [
        "pools", str(DECODE), str(PREFILL), "--arch", "tiny", "--cluster", "3", "--output", "8",
        "--ttft", "1", "--tpot", "1", "--requests", "1", "-j", "1", "--out", str(tmp_path),
    ]  # fmt: skip
    result = CliRunner().invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    assert "status, gap" in result.output and "2: OPTIMAL 0.00%" in result.output and "3: FEASIBLE" not in result.output
    assert "prefill needs at least 2" in result.output and "ERROR" not in result.output
    assert "the prefill plan solved on at most 2 wafers" in result.output  # the shared row's, in the summary


def _pools_cli(tmp_path: Path, *options: str) -> list[str]:
    """``pools`` of the tiny twins on 2 wafers, one request in flight, as typed (``options`` added)."""
    return [
        "pools", str(DECODE), str(PREFILL), "--arch", "tiny", "--cluster", "2", "--output", "8",
        "--requests", "1", "-j", "1", "--out", str(tmp_path), *options,
    ]  # fmt: skip


def test_a_solver_that_cannot_solve_a_tokens_time_is_refused_before_any_plan(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: --solver bisect failed every plan (each "ERROR: --solver bisect cannot solve --objective
    latency") and the command ended with "no split of 2 wafers meets the limits ... relax a limit" (exit 3).
    Every plan of pools is one token's time: refused up front by solve's own check (exit 2, one line)."""
    import wsealloc.bench.pools as pl

    def no_work(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("work done before the refusal")

    monkeypatch.setattr(pl, "FitCheck", no_work)
    monkeypatch.setattr(pl, "run_all", no_work)
    result = run(*_pools_cli(tmp_path / "out", "--ttft", "1", "--tpot", "1", "--solver", "bisect"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()  # (refused before the results folder is made)
    assert result.stderr.startswith("wsealloc: error: --solver bisect cannot solve one token's time"), result.stderr
    assert "choose one of: cpsat, greedy, greedy-seed, pulp, pulp-highs" in result.stderr
    assert "limit" not in result.stderr and "--objective" not in result.stderr


def test_plans_that_all_fail_are_named_not_the_limits(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: where every plan failed, no time was ever held against a limit, yet the command said
    "meets the limits ... relax a limit". Every solve failing: their error (exit 2, as frontier's points
    that produce no plan); every pool too small for the fit check: its reason (exit 3, add wafers)."""
    _stubbed(monkeypatch, {"prefill": 1, "decode": 1}, lambda name: None)
    result = run(*_pools_cli(tmp_path, "--ttft", "1", "--tpot", "1"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "no split of 2 wafers, nor sharing them, has both plans to hold against the limits" in result.stderr
    assert "no prefill plan (ERROR: no partition into regions fits the wafer" in result.stderr
    assert "relax a limit" not in result.stderr and "meets the limits" not in result.stderr
    assert "no split of 2 wafers has both plans: no prefill plan (ERROR" in result.stdout  # the summary agrees
    assert "sharing every wafer: no request count has both plans" in result.stdout

    _stubbed(monkeypatch, {"prefill": 3, "decode": 1}, _plan)  # the prefill needs 3 wafers of the 2
    result = run(*_pools_cli(tmp_path, "--ttft", "1", "--tpot", "1"))
    assert result.returncode == 3 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.strip().endswith(
        "has both plans to hold against the limits: prefill needs at least 3 wafers: not solved; add wafers"
    )


def test_sharing_every_wafer_within_the_limits_is_an_answer(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: the shared row met both limits (marked best, its rate in the summary), yet the command
    exited 3 "no split of 3 wafers meets the limits". By hand: the prefill's path is 1 ms; a split adds the
    handover, 16 tokens x 64 bytes over 150 GB/s plus 1 us = 1.0068 us, so its TTFT is 1.0010068 ms, over a
    1.0005 ms limit, while the shared wafers keep the cache (TTFT 1 ms): exit 0, no error line."""
    _stubbed(monkeypatch, {"prefill": 1, "decode": 1}, _plan)
    work = Workload(output=8, ttft_s=1.0005e-3, tpot_s=1.0)
    result = pools(build_request(str(DECODE), "tiny"), str(PREFILL), 2, work, [1])
    split = next(r for r in result.rows if not r.shared)
    assert split.ttft_s == pytest.approx(1e-3 + 16 * 64 / 150e9 + 1e-6) and not split.feasible
    shared = result.best_shared()
    assert result.best() is None and shared is not None and shared.ttft_s == pytest.approx(1e-3)
    cli = run(*_pools_cli(tmp_path, "--ttft", "0.0010005", "--tpot", "1"))
    assert cli.returncode == 0 and cli.stderr == "", cli.stderr
    assert "no split of 2 wafers meets the limits" in cli.stdout and "sharing every wafer: " in cli.stdout
    assert result.failure("--ttft 0.0010005 s, --tpot 1 s") is None
