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
