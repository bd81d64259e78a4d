"""The serving frontier (``wsealloc frontier``, ``bench/frontier.py``): points by hand, the frontier
marked, and the command end to end on the tiny decode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import MODELS, run

from wsealloc.bench.frontier import FrontierPoint, mark_frontier, point_request, powers_up_to
from wsealloc.cli import build_cli
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.request import build_request

DECODE = MODELS / "tiny" / "llm_decode.onnx"


def _p(requests: int, per: float | None, total: float | None) -> FrontierPoint:
    return FrontierPoint(requests, 1, per, total, "FEASIBLE" if per else "ERROR", None, None)


def test_the_frontier_is_the_points_no_other_beats_on_both_rates() -> None:
    points = [_p(1, 100.0, 100.0), _p(2, 90.0, 180.0), _p(4, 40.0, 160.0), _p(8, 30.0, 180.0), _p(16, None, None)]
    marked = mark_frontier(points)
    # 4 requests is beaten by 2 (faster for each and in all); 8 by 2 (as many in all, slower each)
    assert [p.on_frontier for p in marked] == [True, True, False, False, False]


def test_request_counts_are_powers_of_two_up_to_the_most_that_fit() -> None:
    assert powers_up_to(1) == [1]
    assert powers_up_to(8) == [1, 2, 4, 8]
    assert powers_up_to(301) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 301]


def test_a_point_asks_for_one_tokens_time_with_every_cache_resident() -> None:
    base = build_request(DECODE, "tiny", context=16)
    point = point_request(base, 4, 2)
    assert point.objective is ObjectiveKind.LATENCY and point.requests == 4 and point.wafers == 2
    assert point.cost.state_copies == 4  # every request in flight keeps its cache
    assert point.sharing.mode.value == "auto"  # regions chosen for one token's time, as solve's latency default
    assert base.requests == 1  # the base request is left as it was


@pytest.mark.slow  # (an end-to-end run of the command: the quick suite keeps its unit tests)
def test_the_command_writes_the_table_and_the_picture(tmp_path: Path) -> None:
    out = tmp_path / "fr"
    args = [
        "frontier", str(DECODE), "--arch", "tiny", "--context", "16", "--wafers", "1",
        "--requests", "1,4", "--time-limit", "10", "-j", "1", "--out", str(out), "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{") :])
    points = doc["points"]
    assert [(p["requests"], p["wafers"]) for p in points] == [(1, 1), (4, 1)]
    one, four = points
    # four requests in flight: each gets at most what one alone gets, all together at least as much
    assert four["tokens_per_s_per_request"] <= one["tokens_per_s_per_request"]
    assert four["aggregate_tokens_per_s"] >= one["aggregate_tokens_per_s"]
    assert any(p["on_frontier"] for p in points)
    for suffix in ("csv", "json", "md", "png", "svg", "html"):
        assert (out / f"frontier-llm_decode-tiny.{suffix}").stat().st_size > 0
    assert "<svg" in (out / "frontier-llm_decode-tiny.html").read_text()


def test_bad_counts_are_refused_naming_the_option() -> None:
    result = run("frontier", str(DECODE), "--arch", "tiny", "--context", "16", "--requests", "0,x")
    assert result.returncode == 2 and "--requests '0,x'" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_model_without_a_cache_has_no_frontier() -> None:
    result = run("frontier", str(MODELS / "tiny" / "attention.onnx"), "--arch", "tiny", "--requests", "1")
    assert result.returncode == 2 and "give --context" in result.stderr


def test_auto_requests_go_as_far_as_each_wafer_count_holds(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--requests auto: each wafer count up to the caches its own one-request plan holds (one wafer two
    contexts of 16, two wafers five), not the most wafers' count for every count."""
    import wsealloc.bench.frontier as fr
    from wsealloc.bench.runner import BenchRow

    monkeypatch.setattr(fr, "_largest_context", lambda base, wafers: {1: 2 * 16 + 5, 2: 5 * 16}[wafers])
    asked: list[str] = []

    def fake_run_all(tasks, **_):  # type: ignore[no-untyped-def]
        asked.extend(t.name for t in tasks)
        done = {"solver": 1, "status": "OPTIMAL", "tokens_per_s_per_request": 1.0, "aggregate_tokens_per_s": 1.0}
        return [BenchRow(t.name, **done) for t in tasks]

    monkeypatch.setattr(fr, "run_all", fake_run_all)
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [2, 1])
    grid = [(p.requests, p.wafers) for p in result.points]
    assert grid == [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (5, 2)]
    assert asked[0] == "requests=1,wafers=1"


def test_a_wafer_the_one_request_plan_leaves_unused_counts_for_the_caches() -> None:
    """One request of the tiny decode fits one wafer, so its plan on at most two uses one: the ladder of
    two wafers stopped at one wafer's requests. The second wafer adds its SRAM's worth of cache."""
    import wsealloc.bench.frontier as fr
    from wsealloc.arch import load_arch

    base = build_request(DECODE, "tiny", context=64)
    one, two = fr._largest_context(base, 1), fr._largest_context(base, 2)
    arch = load_arch("tiny")
    kv = 256  # B per token of context (the summary's KV line of this export)
    assert two - one == arch.usable_sram_bytes * arch.total_cores // kv


# what the layer pipeline's training and weight streaming take: one token's time (--objective latency) plans neither
TRAINING_OPTIONS = (
    "--train", "--optimizer", "--train-batch", "--micro-batch", "--recompute", "--attention", "--checkpoints",
    "--recompute-segment", "--mode", "--stream-batch",
)  # fmt: skip
# what frontier and pools honour (besides their own options)
HONOURED = (
    "--arch", "--set", "--dim", "--input-shape", "--cost-model", "--no-fuse", "--batch",
    "--allow-unknown-ops", "--solver", "--time-limit", "--workers", "--seed", "--requests", "-j", "--scheduler",
    "--out", "--json",
)  # fmt: skip


def _listed(command: str) -> set[str]:
    """The options ``wsealloc COMMAND --help`` lists (the first two words of a line: ``-j, --jobs``)."""
    text = run(command, "--help").stdout
    return {word.rstrip(",") for line in text.splitlines() for word in line.split()[:2] if word.startswith("-")}


def test_frontier_offers_no_training_or_streaming_option() -> None:
    """QA: frontier listed --train ... --stream-batch, always refused (with a hint at an --objective it does not
    have); they are not its options now, so click names the unknown option, and every option it honours stays."""
    listed = _listed("frontier")
    assert not listed & set(TRAINING_OPTIONS)
    assert set(HONOURED) | {"--context", "--wafers", "--place"} <= listed
    for planner in ("solve", "compare", "sweep", "inspect"):  # the commands that train or stream keep the group
        assert set(TRAINING_OPTIONS) <= _listed(planner), planner
    base = ("frontier", str(DECODE), "--arch", "tiny", "--context", "64", "--wafers", "1", "--requests", "1")
    for option in TRAINING_OPTIONS:
        argv = (*base, option) if option == "--train" else (*base, option, "1")
        result = run(*argv, "--time-limit", "5", "-j", "1")
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, option
        assert result.stderr.startswith(f"wsealloc: error: No such option '{option}'."), option  # (click may suggest one)
