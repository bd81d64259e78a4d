"""`wsealloc sweep`: grid, table, plot, and the warning for a better machine doing worse."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

import wsealloc
import wsealloc.bench.sweep as sweep_mod
from wsealloc.bench.runner import BenchRow, Task
from wsealloc.bench.sweep import grid, non_monotone, parse_axes
from wsealloc.cli import main

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMER = ROOT / "models" / "tiny" / "transformer.onnx"


def test_non_monotone_pairs_are_found() -> None:
    axes = parse_axes(["core.sram_bytes=24KiB,48KiB", "noc.link_bytes_per_cycle=2,4"])
    points = grid(axes)  # (24K,2) (24K,4) (48K,2) (48K,4)
    assert non_monotone(axes, points, [1.0, 2.0, 2.0, 3.0]) == []
    # 48KiB/4 is better than 24KiB/4 in every field yet slower: the ZigZag bug
    assert non_monotone(axes, points, [1.0, 2.0, 2.0, 1.5]) == [(1, 3), (2, 3)]
    # incomparable machines (more SRAM, narrower links) may go either way; failed points are skipped
    assert non_monotone(axes, points, [1.0, 3.0, 2.0, None]) == []
    # a worse-when-larger field flips the direction
    hop = parse_axes(["noc.hop_latency_cycles=1,2"])
    assert non_monotone(hop, grid(hop), [1.0, 1.1]) == [(1, 0)]
    # a seed has no better direction: points differing in it are never compared
    seeds = parse_axes(["wafer.defects.seed=1,2", "core.sram_bytes=24KiB,48KiB"])
    assert non_monotone(seeds, grid(seeds), [1.0, 0.5, 3.0, 2.0]) == [(0, 1), (2, 3)]


def _fake_run_all(cycles: Sequence[int | None]) -> Any:
    """A stand-in for the executors returning a constructed result table."""

    def run_all(tasks: list[Task], **kwargs: Any) -> list[BenchRow]:
        assert len(tasks) == len(cycles)
        rows = [
            BenchRow(t.name, 1, c, c, c, 0.0, "OPTIMAL", 0.1, 1.0) if c else BenchRow(t.name, error="boom")
            for t, c in zip(tasks, cycles, strict=True)
        ]
        for row in rows:
            kwargs["on_done"](row)
        return rows

    return run_all


def test_cli_warns_on_a_constructed_non_monotone_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sweep_mod, "run_all", _fake_run_all([1000, 900, 900, 950]))
    args = ["sweep", str(TRANSFORMER), "--arch", "tiny", "--out", str(tmp_path)]
    sets = ["--set", "core.sram_bytes=24KiB,48KiB", "--set", "noc.link_bytes_per_cycle=2,4"]
    assert main([*args, *sets]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "WARNING" in line]
    better = "wsealloc: WARNING: non-monotone: core.sram_bytes=48KiB, noc.link_bytes_per_cycle=4 is a better machine than"
    assert warnings == [
        f"{better} core.sram_bytes=24KiB, noc.link_bytes_per_cycle=4 but gives 1,052,631.6 samples/s (950 cycles) "
        "vs 1,111,111.1 (900 cycles)",
        f"{better} core.sram_bytes=48KiB, noc.link_bytes_per_cycle=2 but gives 1,052,631.6 samples/s (950 cycles) "
        "vs 1,111,111.1 (900 cycles)",
    ]
    assert "1,111,111.1" in captured.out  # the table
    stem = tmp_path / "sweep-transformer-tiny"
    doc = json.loads(stem.with_suffix(".json").read_text())
    assert doc["warnings"] == [w.removeprefix("wsealloc: WARNING: ") for w in warnings]
    assert "WARNING: non-monotone" in stem.with_suffix(".md").read_text()
    assert stem.with_suffix(".csv").read_text().startswith("core.sram_bytes,noc.link_bytes_per_cycle,cycles,samples_per_s")
    assert stem.with_suffix(".png").read_bytes().startswith(b"\x89PNG")


def test_throughput_uses_each_points_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A faster clock with the same cycles is faster; with more than twice the cycles it is slower."""
    monkeypatch.setattr(sweep_mod, "run_all", _fake_run_all([1000, 1000]))
    same = wsealloc.sweep(TRANSFORMER, "tiny", ["clock_hz=1GHz,2GHz"], on_done=lambda row: None)
    assert [p.throughput for p in same.points] == [1e6, 2e6] and same.warnings == []
    monkeypatch.setattr(sweep_mod, "run_all", _fake_run_all([1000, 2500]))
    worse = wsealloc.sweep(TRANSFORMER, "tiny", ["clock_hz=1GHz,2GHz"], on_done=lambda row: None)
    assert worse.pairs == ((0, 1),) and "clock_hz=2GHz is a better machine than clock_hz=1GHz" in worse.warnings[0]


def test_a_request_sweeps_its_own_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep(request, axes=...)`` reports the request's machine (the ``arch`` argument is unused then); with
    no arch at all, the default machine's name (wse2), never "None"."""
    from wsealloc.request import build_request

    monkeypatch.setattr(sweep_mod, "run_all", _fake_run_all([1000, 1000]))
    result = wsealloc.sweep(build_request(TRANSFORMER, "tiny"), axes=["clock_hz=1GHz,2GHz"], on_done=lambda row: None)
    assert result.arch == "tiny" and result.to_dict()["arch"] == "tiny"
    assert wsealloc.sweep(TRANSFORMER, "tiny", ["clock_hz=1GHz,2GHz"], on_done=lambda row: None).arch == "tiny"
    assert wsealloc.sweep(TRANSFORMER, axes=["clock_hz=1GHz,2GHz"], on_done=lambda row: None).arch == "wse2"


def test_all_points_failing_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sweep_mod, "run_all", _fake_run_all([None, None]))
    assert (
        main(["sweep", str(TRANSFORMER), "--arch", "tiny", "--set", "core.sram_bytes=24KiB,48KiB", "--out", str(tmp_path)]) == 2
    )
    assert "no point of the sweep produced a plan; core.sram_bytes=24KiB: ERROR: boom" in capsys.readouterr().err


# six real points, a worker process each, and the plot (10 s): run by .ci/run (pytest -m slow); the default
# pytest solves real sweep points in test_sweep_allows_unknown_ops (and tests/test_regions.py)
@pytest.mark.slow
def test_real_sweep_is_monotone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "sweep.svg"
    code = main(
        [
            "sweep",
            str(TRANSFORMER),
            "--arch",
            "tiny",
            "--set",
            "core.sram_bytes=24KiB,48KiB,96KiB",
            "--set",
            "noc.link_bytes_per_cycle=1,4",
            "-j",
            "2",
            "--out",
            str(tmp_path),
            "--plot",
            str(plot),
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    doc = json.loads(captured.out)
    assert len(doc["points"]) == 6 and doc["warnings"] == []
    assert all(p["status"] == "OPTIMAL" for p in doc["points"])
    cycles = {(p["core.sram_bytes"], p["noc.link_bytes_per_cycle"]): p["cycles"] for p in doc["points"]}
    assert cycles[("96KiB", "4")] <= cycles[("24KiB", "1")]
    assert cycles[("24KiB", "4")] < cycles[("24KiB", "1")]  # the links matter on this model
    assert "WARNING" not in captured.err
    assert plot.read_text().lstrip().startswith("<?xml")


def test_bad_sweep_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    mlp = str(ROOT / "models" / "tiny" / "mlp.onnx")
    assert main(["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=big", "--out", str(out)]) == 2
    assert "not a number" in capsys.readouterr().err
    assert main(["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=1KiB,2KiB", "--out", str(out)]) == 2
    assert "sram_reserve_bytes" in capsys.readouterr().err  # validated before anything is solved
    assert main(["sweep", "nope.onnx", "--arch", "tiny", "--set", "core.sram_bytes=24KiB", "--out", str(out)]) == 2
    assert "nope.onnx: no such file" in capsys.readouterr().err
    assert main(["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=24KiB", "--plot", "x.pdf"]) == 2
    assert "expected a .png or .svg file" in capsys.readouterr().err
    assert main(["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=24KiB", "--solver", "x", "--out", str(out)]) == 2
    assert "unknown solver 'x'" in capsys.readouterr().err
    # a model that cannot be costed fails once, before any point runs (no result files)
    fresh = tmp_path / "fresh"
    args = ["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=24KiB,48KiB", "--dim", "batch=2", "--out", str(fresh)]
    assert main(args) == 2
    assert "--dim batch does not name a symbolic dim" in capsys.readouterr().err
    assert not fresh.exists() or not any(fresh.iterdir())
    assert main(["sweep", mlp, "--arch", "tiny", "--set", "core.sram_bytes=24KiB", "--time-limit", "-1", "--out", str(out)]) == 2
    assert "--time-limit -1.0" in capsys.readouterr().err


@pytest.mark.slow
def test_sweep_allows_unknown_ops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an op the cost model does not know: the error advises --allow-unknown-ops, which sweep accepts
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"], name="det")], "g", [x], [y])
    model = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), model)
    args = ["sweep", str(model), "--arch", "tiny", "--set", "core.sram_bytes=24KiB,48KiB", "--out", str(tmp_path / "o")]
    assert main(args) == 2
    assert "--allow-unknown-ops" in capsys.readouterr().err
    assert main([*args, "--allow-unknown-ops", "--time-limit", "10", "-j", "1"]) == 0


def _capture_run_all(cycles: Sequence[int | None], asked: list[Task]) -> Any:
    """:func:`_fake_run_all` that also keeps the tasks (their requests: what each point was asked)."""
    fake = _fake_run_all(cycles)

    def run_all(tasks: list[Task], **kwargs: Any) -> list[BenchRow]:
        asked.extend(tasks)
        return fake(tasks, on_done=kwargs.get("on_done") or (lambda row: None))  # type: ignore[no-any-return]

    return run_all


def test_each_point_plans_on_its_own_cluster_wafers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: --set cluster.wafers=1,2,3,4 solved every point on one wafer (the base request's count). Each
    point's request carries its arch's count now, on the command line and in Python; more wafers being a
    better machine, a constructed table where 4 wafers do worse than 2 and 3 still warns."""
    asked: list[Task] = []
    monkeypatch.setattr(sweep_mod, "run_all", _capture_run_all([1000, 900, 900, 950], asked))
    args = ["sweep", str(TRANSFORMER), "--arch", "tiny", "--set", "cluster.wafers=1,2,3,4", "--out", str(tmp_path)]
    assert main(args) == 0
    assert [t.request.wafers for t in asked] == [1, 2, 3, 4]
    assert [t.request.machine.cluster.wafers for t in asked] == [1, 2, 3, 4]
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert warnings == [
        f"wsealloc: WARNING: non-monotone: cluster.wafers=4 is a better machine than cluster.wafers={w} but gives "
        "1,052,631.6 samples/s (950 cycles) vs 1,111,111.1 (900 cycles)"
        for w in (2, 3)
    ]
    asked.clear()
    result = wsealloc.sweep(TRANSFORMER, "tiny", ["cluster.wafers=1,2,3,4"], on_done=lambda row: None)
    assert [t.request.wafers for t in asked] == [1, 2, 3, 4] and result.pairs == ((1, 3), (2, 3))


@pytest.mark.slow  # (an end-to-end run of the command: the quick suite keeps its unit tests)
def test_a_real_sweep_of_wafer_counts_gains_as_solve_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """QA's repro, two points: one wafer 2,745 cycles, two wafers 1,412, what ``solve --set cluster.wafers=2``
    gives (its stages: 1,335 and 1,412 cycles); faster on the better machine, so no warning."""
    args = ["sweep", str(TRANSFORMER), "--arch", "tiny", "--set", "cluster.wafers=1,2", "-j", "1", "--time-limit", "5"]
    assert main([*args, "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [(p["cluster.wafers"], p["cycles"], p["status"]) for p in doc["points"]] == [
        ("1", 2745, "OPTIMAL"),
        ("2", 1412, "OPTIMAL"),
    ]
    assert doc["warnings"] == [] and "WARNING" not in captured.err
    solved = wsealloc.solve(TRANSFORMER, "tiny", sets=["cluster.wafers=2"], wafers=None, place=False, time_limit=5)
    assert solved.plan.objective.value == 1412


def test_wafers_fixes_every_points_count_and_is_refused_beside_a_wafers_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--wafers`` (solve's option, same spelling and meaning) fixes every point's count; beside a
    cluster.wafers axis it would make the axis moot, so it is refused, even ``--wafers 1`` on an arch of one
    wafer (which the request alone cannot tell from the default). Not given, Python sweeps follow the base
    arch's cluster.wafers like the command line (``sets=`` here)."""
    from wsealloc.errors import UsageError
    from wsealloc.request import build_request

    asked: list[Task] = []
    monkeypatch.setattr(sweep_mod, "run_all", _capture_run_all([1000, 900], asked))
    base = ["sweep", str(TRANSFORMER), "--arch", "tiny", "--out", str(tmp_path)]
    assert main([*base, "--set", "core.sram_bytes=24KiB,48KiB", "--wafers", "2"]) == 0
    assert [t.request.wafers for t in asked] == [2, 2]
    asked.clear()
    assert main([*base, "--set", "core.sram_bytes=24KiB,48KiB", "--wafers", "auto"]) == 0
    assert [t.request.wafers for t in asked] == ["auto", "auto"]
    capsys.readouterr()
    for wafers in ("1", "3", "auto"):
        assert main([*base, "--set", "cluster.wafers=1,2", "--wafers", wafers]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"wsealloc: error: --wafers {wafers} fixes every point's wafer count, so the cluster.wafers axis would "
            "change nothing: drop --wafers (each point then plans on its own cluster.wafers, as solve does without "
            "--wafers)\n"
        )
    assert main([*base, "--set", "cluster.wafers=1,2", "--wafers", "٣"]) == 2  # ASCII digits only, as every option
    assert "--wafers '٣': expected a number of wafers (1 to 1024) or 'auto'" in capsys.readouterr().err
    assert main(["solve", str(TRANSFORMER), "--arch", "tiny", "--no-place", "--wafers", "٣"]) == 2  # (was 3 wafers)
    assert "--wafers '٣': expected a number of wafers" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--wafers 2 fixes every point's wafer count"):
        wsealloc.sweep(TRANSFORMER, "tiny", ["cluster.wafers=1,2"], wafers=2)
    with pytest.raises(UsageError, match="--wafers 2 fixes every point's wafer count"):  # a request that fixed it
        wsealloc.sweep(build_request(TRANSFORMER, "tiny", wafers=2), axes=["cluster.wafers=1,2"])
    asked.clear()
    wsealloc.sweep(TRANSFORMER, "tiny", ["core.sram_bytes=24KiB,48KiB"], sets=["cluster.wafers=3"], on_done=lambda r: None)
    assert [t.request.wafers for t in asked] == [3, 3]


@pytest.mark.slow
def test_a_latency_sweep_names_its_cycles_one_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A latency sweep's cycles are one pass and its rate passes per second: the table said
    "bottleneck cycles" and "samples/s"."""
    decode = ROOT / "models" / "tiny" / "llm_decode.onnx"
    args = ["sweep", str(decode), "--arch", "tiny", "--objective", "latency", "--set", "context=32,64"]
    assert main([*args, "-j", "1", "--time-limit", "5", "--out", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert "cycles a pass" in out and "passes/s" in out and "bottleneck cycles" not in out
    doc = json.loads((tmp_path / "sw" / "sweep-llm_decode-tiny.json").read_text())
    assert doc["objective"] == "latency" and "passes_per_s" in doc["points"][0] and "samples_per_s" not in doc["points"][0]
