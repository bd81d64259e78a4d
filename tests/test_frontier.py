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


class _Admits:
    """A fit check by hand: ``most[w]`` requests admitted on w wafers (the real one: ``FitCheck``)."""

    def __init__(self, most: dict[int, int]) -> None:
        self.most_by = most

    def most(self, wafers: int) -> int:
        return self.most_by[wafers]

    def admits(self, requests: int, wafers: int) -> bool:
        return requests <= self.most_by[wafers]

    def why_not(self, requests: int, wafers: int) -> str:
        return f"with {requests} requests in flight, a plan needs more than {wafers} wafers"


def _stub(monkeypatch, most: dict[int, int], rate, fits=lambda n, w: True, gap: float = 0.0):  # type: ignore[no-untyped-def]
    """``frontier`` with the fit check by hand and every solve stubbed: a count fits where ``fits``
    says (else the solve's error), its rate in all ``rate(n)``, its gap ``gap``; returns the solves
    asked, in order."""
    import wsealloc.bench.frontier as fr
    from wsealloc.bench.runner import BenchRow

    monkeypatch.setattr(fr, "FitCheck", lambda base: _Admits(most))
    asked: list[tuple[int, int]] = []

    def fake_run_all(tasks, **_):  # type: ignore[no-untyped-def]
        rows = []
        for t in tasks:
            n, w = (int(part.split("=")[1]) for part in t.name.split(","))
            asked.append((n, w))
            if fits(n, w):
                done = {"solver": 1, "status": "OPTIMAL" if gap == 0 else "FEASIBLE", "gap": gap}
                rows.append(BenchRow(t.name, **done, tokens_per_s_per_request=rate(n) / n, aggregate_tokens_per_s=rate(n)))
            else:
                rows.append(BenchRow(t.name, error="no partition into regions fits the wafer"))
        return rows

    monkeypatch.setattr(fr, "run_all", fake_run_all)
    return asked


def test_auto_requests_go_as_far_as_each_wafer_count_holds(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--requests auto: each wafer count up to the requests the fit check admits on it (one wafer two,
    two wafers five), not the most wafers' count for every count."""
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 2, 2: 5}, rate=float)
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [2, 1])
    grid = [(p.requests, p.wafers) for p in result.points]
    assert grid == [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2), (5, 2)]
    assert asked == grid  # every count fits and the rate grows: nothing more is solved


def test_auto_requests_bisect_to_the_largest_count_that_fits(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Finding 7: the check admits 38 requests (the 8B's old SRAM estimate), only 24 fit. 32 and 38 fail,
    so the counts between 16 and 32 are bisected: 24 fits, 28, 26 and 25 do not; 24 is the largest
    shown with a plan, in four solves more, and nothing else is solved."""
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 38}, rate=float, fits=lambda n, w: n <= 24)
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [1])
    assert asked == [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (32, 1), (38, 1), (24, 1), (28, 1), (26, 1), (25, 1)]
    fitting = [p.requests for p in result.points if p.tokens_per_s_per_request is not None]
    assert max(fitting) == 24
    assert [p.requests for p in result.points] == sorted(p.requests for p in result.points)
    assert next(p for p in result.points if p.requests == 24).on_frontier  # the most in all


@pytest.mark.parametrize("threshold", [1, 2, 3, 5, 17, 31, 32, 33, 37, 38])
def test_the_bisection_finds_any_threshold(monkeypatch, threshold: int) -> None:  # type: ignore[no-untyped-def]
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 38}, rate=float, fits=lambda n, w: n <= threshold)
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [1])
    assert max(p.requests for p in result.points if p.tokens_per_s_per_request is not None) == threshold
    failed = [p.requests for p in result.points if p.tokens_per_s_per_request is None]
    assert not failed or min(failed) == threshold + 1  # the first that fails is shown beside it
    assert len(asked) <= 7 + 5  # the ladder, then at most log2(the widest gap) solves


def test_auto_requests_look_for_the_peak_of_the_rate_in_all(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every count up to 31 fits, but the rate in all peaks at 20 (a request waits N slowest stages):
    after the ladder, two rounds look between the best count's neighbours, each halfway across the
    wider side (16..31: 23, better than 16; then 23..31: 27, worse)."""
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 31}, rate=lambda n: 1000.0 * min(n, 40 - n))
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [1])
    assert asked == [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (31, 1), (23, 1), (27, 1)]
    best = max(result.points, key=lambda p: p.aggregate_tokens_per_s or 0.0)
    assert best.requests == 23 and best.on_frontier


def test_a_peak_probe_that_found_no_plan_is_not_solved_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The rate in all peaks at 4 and falls past it (1, 2, 4, 8, 16 fit); the first probe, 6, finds no
    plan: it was proposed again each round, one more full solve of the same count (a review finding)."""
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 16}, rate=lambda n: 1000.0 * min(n, 12 - n) if n != 16 else 100.0, fits=lambda n, w: n != 6)
    fr.frontier(build_request(DECODE, "tiny", context=16), [1])
    assert asked.count((6, 1)) == 1 and asked[:5] == [(1, 1), (2, 1), (4, 1), (8, 1), (16, 1)]


def test_counts_the_check_refuses_are_not_solved(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """--requests 1,8 where the check admits 4: 8 is a point that says why, not a solve."""
    import wsealloc.bench.frontier as fr

    asked = _stub(monkeypatch, {1: 4}, rate=float)
    result = fr.frontier(build_request(DECODE, "tiny", context=16), [1], [1, 8])
    assert asked == [(1, 1)]
    eight = result.points[1]
    assert eight.requests == 8 and eight.status == fr.SKIPPED and eight.tokens_per_s_per_request is None
    assert "needs more than 1 wafers" in eight.skipped and not eight.error
    assert result.table()[1]["status"].startswith("SKIPPED: with 8 requests")


def test_the_fit_check_is_the_solves_threshold_on_the_tiny_decode() -> None:
    """The check without a search: 903 requests of the tiny decode at context 64 on one tiny wafer, 1,776
    on two (solves agree: 904 ends in "no partition into regions fits the wafer", 1,777 in "do not fit
    2 tiny wafers even with all their cores as one budget"; the slow test below runs the first pair).
    The fewest wafers never fall as requests are added (more requests only add cache bytes)."""
    from wsealloc.bench.frontier import FitCheck

    check = FitCheck(build_request(DECODE, "tiny", context=64))
    assert (check.most(1), check.most(2)) == (903, 1776)
    counts = [1, 2, 50, 400, 903, 904, 1200, 1776, 1777, 2500]
    fewest = [check.fewest(n) for n in counts]
    assert fewest == sorted(fewest) and fewest[4:6] == [1, 2] and fewest[7:9] == [2, 3]
    assert "at least 2 wafers" in check.why_not(904, 1)


@pytest.mark.slow  # two real solves of the tiny decode (about 5 s)
def test_the_fit_checks_threshold_is_the_solvers() -> None:
    from wsealloc.api import run
    from wsealloc.errors import InfeasibleError

    base = build_request(DECODE, "tiny", context=64, time_limit=10)
    assert run(point_request(base, 903, 1)).plan.objective.llm is not None  # type: ignore[union-attr]
    with pytest.raises(InfeasibleError, match="no partition into regions fits"):
        run(point_request(base, 904, 1))


def test_the_terminal_table_has_the_gap_column(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Finding 10: the terminal table dropped the gap its .md has."""
    _stub(monkeypatch, {1: 2}, rate=float)
    args = ["frontier", str(DECODE), "--arch", "tiny", "--context", "16", "-j", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "status" in line)
    assert header.split("┃")[-2].strip() == "gap"
    assert result.output.count("0.00%") == 2  # both points'


def test_the_files_print_the_gap_as_the_terminal_does(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: the terminal printed a gap of 17.64% and the .md and .csv 0.1764 under the same header;
    all three print 17.64% now (the JSON keeps the fraction, a field of each point)."""
    _stub(monkeypatch, {1: 1}, rate=float, gap=0.1764)
    args = ["frontier", str(DECODE), "--arch", "tiny", "--context", "16", "-j", "1", "--out", str(tmp_path)]
    result = CliRunner().invoke(build_cli(), args)
    assert result.exit_code == 0, result.output
    assert "17.64%" in result.output
    stem = tmp_path / "frontier-llm_decode-tiny"
    assert Path(f"{stem}.csv").read_text().splitlines()[1].endswith(",17.64%")
    assert Path(f"{stem}.md").read_text().splitlines()[2].endswith("| 17.64% |")
    assert "0.1764" not in Path(f"{stem}.csv").read_text() + Path(f"{stem}.md").read_text()
    assert json.loads(Path(f"{stem}.json").read_text())["points"][0]["gap"] == 0.1764


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


def test_a_solver_that_cannot_solve_a_tokens_time_is_refused_before_any_work(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: --solver bisect (exact for min-max only) failed every point's solve, one ERROR row each;
    every point is one token's time, so it is refused up front by solve's own check (exit 2, one line
    naming --solver and the solvers that can), before the fit check or any solve."""
    import wsealloc.bench.frontier as fr

    def no_work(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("work done before the refusal")

    monkeypatch.setattr(fr, "FitCheck", no_work)
    monkeypatch.setattr(fr, "run_all", no_work)
    argv = ("frontier", str(DECODE), "--arch", "tiny", "--context", "64", "--solver", "bisect", "-j", "1")
    result = run(*argv, "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()  # (refused before the results folder is made)
    assert result.stderr.startswith("wsealloc: error: --solver bisect cannot solve one token's time"), result.stderr
    assert "choose one of: cpsat, greedy, greedy-seed, pulp, pulp-highs" in result.stderr
    assert "--objective" not in result.stderr  # (frontier has no --objective to name)


def test_no_plan_anywhere_names_each_reason_once(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """User pass: the error quoted the first point alone; where the fit check skipped it and every solve
    after it failed, the solves' error was never said. Each distinct reason is quoted once, at its first
    point: --requests 1,2,8 with the check admitting 2 (8 skipped) and every solve failing."""
    _stub(monkeypatch, {1: 2}, rate=float, fits=lambda n, w: False)
    args = ["frontier", str(DECODE), "--arch", "tiny", "--context", "16", "--requests", "8,1,2", "-j", "1"]
    result = CliRunner().invoke(build_cli(), [*args, "--out", str(tmp_path)])
    from wsealloc.errors import SweepError

    assert isinstance(result.exception, SweepError), result.output  # (exit 2 from the CLI's main)
    line = str(result.exception)
    assert line.startswith("no point of the frontier produced a plan; "), line
    assert "requests=1: ERROR: no partition into regions fits the wafer" in line and line.count("no partition") == 1, line
    assert "requests=8: SKIPPED: with 8 requests in flight, a plan needs more than 1 wafers" in line, line
