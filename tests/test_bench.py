"""`wsealloc bench`: suites, CSV/JSON/Markdown results, the regression gate, recording improvements,
crashed workers, and identical results on a Dask LocalCluster."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import wsealloc
from wsealloc.bench.results import to_csv, to_markdown
from wsealloc.bench.runner import BenchRow, Task, run_all, run_instance, run_task, ship
from wsealloc.bench.suite import load_suite, read_suite
from wsealloc.cli import main
from wsealloc.errors import UsageError
from wsealloc.frontend.sources import OnnxSource

ROOT = Path(__file__).resolve().parents[1]


def _faulty_worker(tmp: Path, fault: str, victim: str) -> tuple[str, ...]:
    """A worker command that aborts or hangs on the task named ``victim`` and runs the others like the
    real worker (fault injection lives in the tests: production code reads no fault switch)."""
    action = {"abort": "os.abort()", "hang": "time.sleep(3600)"}[fault]
    script = tmp / f"{fault}_worker.py"
    script.write_text(
        "import json, os, sys, time\n"
        "from wsealloc.bench.runner import Task, run_instance\n"
        "task = Task.model_validate_json(sys.stdin.read())\n"
        f"if task.name == {victim!r}:\n"
        f"    {action}\n"
        "print(json.dumps(run_instance(task).to_dict()))\n"
    )
    return (sys.executable, str(script))


def _copy_suite(tmp: Path, best: int | None = None) -> Path:
    """A two-instance suite next to copies of its models."""
    models = tmp / "models"
    models.mkdir()
    for name in ("attention.onnx", "transformer.onnx"):
        shutil.copy(ROOT / "models" / "tiny" / name, models / name)
    best_line = f"\n  best: {{objective: {best}, bound: {best}}}" if best else ""
    path = tmp / "mini.yaml"
    path.write_text(f"""name: mini
instances:
- name: attention
  model: models/attention.onnx
  arch: tiny
  time_limit: 5{best_line}
- name: transformer
  model: models/transformer.onnx
  arch: tiny
  time_limit: 5
""")
    return path


def _exact_optimum(task: Task) -> int | None:
    """The allocation optimum of a suite instance from its definition (a scan over targets; every cut
    point for several wafers), without the solvers."""
    from exhaustive import bottleneck_by_scan, pipeline_by_cuts

    from wsealloc.pipeline import build_costs
    from wsealloc.problem import build_problem
    from wsealloc.problem.stages import build_stage_problem

    r = task.request
    costs = build_costs(r.onnx_model, r.machine, r.cost, constraints=r.constraints)
    if r.wafer_count == 1 and r.cost.train is not None:
        # training: every segment length the solve tries (about sqrt(D) times strategy.pipeline.SEGMENT_FACTORS, unless
        # fixed) and every way of every recomputation segment (each recomputes whole or not at all)
        from wsealloc.cost import TrainingWork
        from wsealloc.cost.training import segment_length
        from wsealloc.opmodels import pareto_frontier
        from wsealloc.opmodels.recompute import flag_table
        from wsealloc.opmodels.table import pipeline_shape
        from wsealloc.pipeline import with_options
        from wsealloc.strategy.pipeline import SEGMENT_FACTORS

        train = r.cost.train
        base = segment_length(pipeline_shape(costs.kgraph)[1])
        lengths = [train.segment] if train.segment is not None else sorted({max(1, round(base * f)) for f in SEGMENT_FACTORS})
        values = []
        for length in lengths:
            options = r.cost.model_copy(update={"train": train.model_copy(update={"segment": length})})
            table = with_options(costs, options, r.constraints)
            segment = [kc.work.segment if isinstance(kc.work, TrainingWork) else -1 for kc in table.kernels]
            ids = sorted(set(segment) - {-1})
            assert len(ids) <= 12, "too many segments to enumerate"
            # each kernel's fewest cores meeting each candidate T, per way (a scan, no bisection)
            fronts = [[pareto_frontier(flag_table(kc.table, way)) for way in (False, True)] for kc in table.kernels]
            targets = np.unique(np.concatenate([f.latency for pair in fronts for f in pair]))
            big = np.iinfo(np.int64).max // 64
            need = np.full((len(fronts), 2, targets.size), big, dtype=np.int64)
            for k, pair in enumerate(fronts):
                for way, f in enumerate(pair):
                    if len(f):
                        i = np.searchsorted(-f.latency, -targets, side="left")
                        ok = i < len(f)
                        need[k, way, ok] = f.cores[i[ok]]
            for ways in itertools.product((0, 1), repeat=len(ids)):
                way = dict(zip(ids, ways, strict=True))
                total = sum(need[k, way.get(s, 0)] for k, s in enumerate(segment))
                fit = np.flatnonzero(total <= table.total_cores)
                values.append(int(targets[fit[0]]) if fit.size else None)
        return min((v for v in values if v is not None), default=None)
    if r.wafer_count == 1:
        return bottleneck_by_scan(build_problem(costs))
    assert isinstance(r.wafer_count, int)
    return pipeline_by_cuts(build_stage_problem(costs), r.wafer_count)


def test_smoke_suites_recorded_bounds_are_the_exact_optima() -> None:
    # the default pytest's share of test_smoke_suite_passes (no solver runs): each instance's recorded best
    # bound is its exact optimum computed without the solvers (tests/exhaustive.py), and no recorded
    # objective is below it
    suite = load_suite("smoke")
    for inst, task in zip(suite.suite.instances, suite.tasks, strict=True):
        assert inst.best is not None and inst.best.bound == _exact_optimum(task) <= inst.best.objective, task.name


def test_bench_cli_writes_and_prints_the_result_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the default pytest's share of test_smoke_suite_passes: `wsealloc bench SUITE -j 2` on a one-instance
    # suite (the attention block, gated on its optimum) passes, writes the CSV, JSON and Markdown tables
    # and prints the Markdown one
    suite = tmp_path / "one.yaml"
    suite.write_text(
        f"name: one\ninstances:\n- name: attention\n  model: {ROOT / 'models' / 'tiny' / 'attention.onnx'}\n"
        "  arch: tiny\n  time_limit: 5\n  best: {objective: 661, bound: 661}\n"
    )
    assert main(["bench", str(suite), "--out", str(tmp_path / "out"), "-j", "2"]) == 0
    rows = json.loads((tmp_path / "out" / "one.json").read_text())["results"]
    assert [r["instance"] for r in rows] == ["attention"]
    assert rows[0]["status"] == "OPTIMAL" and rows[0]["solver"] == rows[0]["bound"] == 661
    csv_text = (tmp_path / "out" / "one.csv").read_text()
    assert csv_text.startswith("instance,kernels,greedy,solver,bound,gap,status,wall_s,speedup,error\n")
    assert len(csv_text.splitlines()) == len(rows) + 1
    md = (tmp_path / "out" / "one.md").read_text()
    assert md.startswith("| instance | kernels | greedy | solver | bound | gap | status | wall_s | speedup |")
    assert md in capsys.readouterr().out  # the table is printed too


@pytest.mark.slow  # the whole smoke suite end to end, a worker process per instance (12 s): run by .ci/run (pytest -m slow)
def test_smoke_suite_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "smoke", "--out", str(tmp_path), "-j", "2"]) == 0
    rows = json.loads((tmp_path / "smoke.json").read_text())["results"]
    suite = load_suite("smoke").suite
    assert [r["instance"] for r in rows] == [i.name for i in suite.instances]
    assert all(r["status"] in ("OPTIMAL", "FEASIBLE") for r in rows)
    for inst, row in zip(suite.instances, rows, strict=True):  # the recorded best-known values hold
        assert inst.best is not None and row["solver"] <= inst.best.objective and row["bound"] == inst.best.bound
    # ... and each bound is the exact optimum computed without the solvers (tests/exhaustive.py)
    for task, row in zip(load_suite("smoke").tasks, rows, strict=True):
        assert row["bound"] == _exact_optimum(task), task.name
    csv_text = (tmp_path / "smoke.csv").read_text()
    assert csv_text.startswith("instance,kernels,greedy,solver,bound,gap,status,wall_s,speedup,error\n")
    assert len(csv_text.splitlines()) == len(rows) + 1
    md = (tmp_path / "smoke.md").read_text()
    assert md.startswith("| instance | kernels | greedy | solver | bound | gap | status | wall_s | speedup |")
    assert md in capsys.readouterr().out  # the table is printed too


@pytest.mark.slow
def test_python_api_run_suite(tmp_path: Path) -> None:
    suite = _copy_suite(tmp_path, best=100)
    run = wsealloc.run_suite(suite, jobs=2)  # no --out: nothing written
    assert isinstance(run, wsealloc.BenchRun) and run.written == () and not run.passed
    assert [type(r) for r in run.rows] == [BenchRow, BenchRow]
    # 661 cycles: the attention block's optimum, computed without the solvers
    assert run.rows[0].solver == _exact_optimum(load_suite(str(suite)).tasks[0]) == 661
    assert "worse than the best known 100" in run.regressions[0]


def test_result_tables_carry_failures() -> None:
    rows = [
        BenchRow("a", 3, 10, 8, 8, 0.0, "OPTIMAL", 0.5, 1.25),
        BenchRow("b", status="CRASHED", error="worker killed by signal 6"),
    ]
    md = to_markdown(rows)
    assert "| a | 3 | 10 | 8 | 8 | 0 | OPTIMAL | 0.5 | 1.25 |" in md
    assert "| b |  |  |  |  |  | CRASHED |  |  |" in md and "- b: CRASHED: worker killed by signal 6" in md
    assert to_csv(rows).splitlines()[2] == "b,,,,,,CRASHED,,,worker killed by signal 6"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("model: nope.onnx", "instances.0 (x): model nope.onnx: no such file"),
        ("model: synthetic:ring:9", "expected synthetic:chain:N"),
        ("model: models/attention.onnx\n  solver: gurobi", "gurobi"),
        ("model: models/attention.onnx\n  arch: tiny\n  sets: [core.sram_byte=1KiB]", "sram_byte"),
        ("model: models/attention.onnx\n  dims: {batch: -3}", "instances.0.dims.batch: Input should be greater than 0"),
        ("model: models/attention.onnx\n  wafers: 0", "expected a number of wafers (1 to 1024)"),
    ],
)
def test_suite_instances_are_checked_before_running(tmp_path: Path, entry: str, message: str) -> None:
    _copy_suite(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: bad\ninstances:\n- name: x\n  {entry}\n")
    with pytest.raises(UsageError, match=re.escape(message)):
        load_suite(str(bad))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: ../up\ninstances:\n- {name: x, model: m.onnx}\n", "'../up' is not usable as a file name"),
        ("name: s\ninstances: []\n", "at least 1 item"),
        ("- a\n- b\n", "expected a mapping with 'name' and 'instances'"),
    ],
)
def test_suite_shape_is_checked(tmp_path: Path, text: str, message: str) -> None:
    # names become result file names: a path in them would write outside --out
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_suite(str(bad))


def test_binary_suite_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(UsageError, match="looks like a binary file, not a suite YAML"):
        load_suite(str(bad))


def test_bad_suite_names_file_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ninstances:\n- name: x\n  model: m.onnx\n  time_limt: 3\n")
    assert main(["bench", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "instances.0.time_limt" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


@pytest.mark.slow  # two suite runs end to end (7 s): run by .ci/run (pytest -m slow)
def test_regression_gate_and_update_best(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _copy_suite(tmp_path, best=100)  # impossible: the optimum is 661 cycles
    assert main(["bench", str(suite), "--out", str(tmp_path / "out")]) == 5
    assert "attention: 661 cycles, worse than the best known 100" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    fresh = _copy_suite(tmp_path / "b")
    assert main(["bench", str(fresh), "--out", str(tmp_path / "out2"), "--update-best"]) == 0
    loaded = load_suite(str(fresh))
    recorded = loaded.suite
    exact = [_exact_optimum(task) for task in loaded.tasks]  # computed without the solvers
    assert exact == [661, 2745]
    assert [(i.best.objective, i.best.bound) for i in recorded.instances if i.best] == [(x, x) for x in exact]
    assert not list(fresh.parent.glob(".*.tmp"))  # rewritten atomically
    assert main(["bench", str(fresh), "--out", str(tmp_path / "out3")]) == 0  # now gated, and it holds
    # a recorded bound tighter than this run proves is a regression too (the bound got weaker)
    fresh.write_text(fresh.read_text().replace("bound: 2745", "bound: 2746").replace("objective: 2745", "objective: 2800"))
    assert main(["bench", str(fresh), "--out", str(tmp_path / "out4")]) == 5
    assert "bound 2,745 cycles, weaker than the recorded 2,746" in capsys.readouterr().err


@pytest.mark.slow  # worker processes end to end (2 s): run by .ci/run (pytest -m slow)
def test_crashed_worker_is_reported_and_suite_completes(tmp_path: Path) -> None:
    suite = load_suite(str(_copy_suite(tmp_path)))
    worker = _faulty_worker(tmp_path, "abort", "attention")
    rows = run_all(suite.tasks, jobs=2, worker=worker)
    assert rows[0].status == "CRASHED" and "signal 6" in rows[0].error and rows[0].solver is None
    assert rows[1].status == "OPTIMAL"
    run = wsealloc.run_suite(suite, out=tmp_path / "out", worker=worker)  # reported, the rest completes
    assert not run.passed and "attention: CRASHED" in run.failures[0] and not run.regressions
    doc = json.loads((tmp_path / "out" / "mini.json").read_text())
    assert [r["status"] for r in doc["results"]] == ["CRASHED", "OPTIMAL"]


@pytest.mark.slow  # a worker killed on its timeout (3 s): run by .ci/run (pytest -m slow)
def test_hung_worker_times_out_and_suite_completes(tmp_path: Path) -> None:
    suite = load_suite(str(_copy_suite(tmp_path)))
    tasks = list(suite.tasks)
    tasks[0] = tasks[0].model_copy(update={"timeout_s": 3.0})  # the other instance keeps its generous default
    rows = run_all(tasks, jobs=2, worker=_faulty_worker(tmp_path, "hang", "attention"))
    assert rows[0].status == "TIMEOUT" and "after 3 s" in rows[0].error
    assert rows[1].status == "OPTIMAL"


@pytest.mark.slow  # a LocalCluster end to end (4 s): run by .ci/run
def test_dask_local_cluster_gives_identical_results(tmp_path: Path) -> None:
    from distributed import LocalCluster

    tasks = load_suite(str(_copy_suite(tmp_path))).tasks
    local = run_all(tasks, jobs=1)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        remote = run_all(tasks, scheduler=cluster.scheduler_address)

    def strip(rows: list[BenchRow]) -> list[dict[str, object]]:
        return [{k: v for k, v in r.to_dict().items() if k != "wall_s"} for r in rows]

    assert strip(remote) == strip(local) and all(r.ok for r in local)


@pytest.mark.slow
def test_dask_crash_costs_only_its_instance(tmp_path: Path) -> None:
    """A task whose solver aborts is reported CRASHED; the Dask worker and the other tasks survive."""
    from distributed import LocalCluster

    tasks = load_suite(str(_copy_suite(tmp_path))).tasks
    worker = _faulty_worker(tmp_path, "abort", "attention")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        rows = run_all(tasks, scheduler=cluster.scheduler_address, worker=worker)
    assert rows[0].status == "CRASHED" and "signal 6" in rows[0].error
    assert rows[1].status == "OPTIMAL"


def test_dask_tasks_carry_their_model(tmp_path: Path) -> None:
    """Workers on other machines need no shared file system: the task ships the model's bytes (the
    arch travels resolved inside the request)."""
    task = load_suite(str(_copy_suite(tmp_path))).tasks[0]
    here = run_instance(task)
    shipped = ship(task)
    source = task.request.model
    assert isinstance(source, OnnxSource) and shipped.model_data == Path(source.path).read_bytes()
    away = source.model_copy(update={"path": "/nonexistent/cluster/node/attention.onnx"})
    moved = shipped.task.model_copy(update={"request": task.request.model_copy(update={"model": away})})
    elsewhere = run_task(replace(shipped, task=moved))
    assert elsewhere.ok and elsewhere.solver == here.solver and elsewhere.bound == here.bound


def test_tasks_travel_as_json(tmp_path: Path) -> None:
    """A worker receives its task as JSON and parses it back into the same typed task."""
    task = load_suite(str(_copy_suite(tmp_path))).tasks[1]
    assert Task.model_validate_json(task.model_dump_json()) == task
    assert task.request.arch.name == "tiny" and task.timeout_s == 5 + 300


@pytest.mark.slow
def test_unreachable_scheduler_is_reported() -> None:
    with pytest.raises(UsageError, match=r"--scheduler tcp://127.0.0.1:9: cannot connect .*is a dask scheduler running"):
        run_all([], scheduler="tcp://127.0.0.1:9", connect_timeout=1)


def test_unknown_suite_lists_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nonesuch"]) == 2
    assert "known suites: smoke, standard, stress" in capsys.readouterr().err


def test_named_suite_without_source_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # an installed package has no instances/ folder: the message says where named suites live
    monkeypatch.setattr("wsealloc.bench.suite.SUITES_DIR", tmp_path / "absent")
    with pytest.raises(UsageError, match="source checkout.*pass a suite YAML path"):
        load_suite("smoke")


def _with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment carries ``marker``."""
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in env.read_bytes():
                pids.append(int(env.parent.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow  # a real bench process and its workers signalled (4 s): run by .ci/run
def test_sigterm_stops_workers(tmp_path: Path) -> None:
    """Killing a bench run leaves no worker processes behind."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    suite = tmp_path / "slow.yaml"
    suite.write_text(f"""name: slow
instances:
- {{name: a, model: {ROOT / "models" / "gpt2-xl.onnx"}, arch: wse2, place: true, time_limit: 300}}
- {{name: b, model: {ROOT / "models" / "gpt2-xl.onnx"}, arch: wse2, place: true, time_limit: 300}}
- {{name: c, model: {ROOT / "models" / "gpt2-xl.onnx"}, arch: wse2, place: true, time_limit: 300}}
""")
    marker = f"WSEALLOC_TEST_MARK_{os.getpid()}_{time.time_ns()}"
    env = {**os.environ, marker: "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wsealloc.cli", "bench", str(suite), "--out", str(tmp_path), "-j", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # the bench and its two workers must all be running before the signal, or nothing is tested
        most, deadline = 0, time.monotonic() + 120
        while most < 3 and proc.poll() is None and time.monotonic() < deadline:
            most = max(most, len(_with_marker(marker)))
            time.sleep(0.2)
        assert most >= 3, f"the bench and two workers never ran together (at most {most} processes; exit {proc.poll()})"
        time.sleep(2)  # the workers are inside their solves (each has minutes of work: still running)
        running = _with_marker(marker)
        assert proc.poll() is None and len(running) >= 3, f"before the signal: exit {proc.poll()}, processes {running}"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        # the property: no worker outlives the run. Stopping takes a moment on a loaded machine; a worker
        # left behind would run its 300 s solve, far beyond this wait
        deadline = time.monotonic() + 30
        while (left := _with_marker(marker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == [], f"processes left behind: {left}"
    finally:  # a failed run leaves nothing behind either: only the processes carrying this test's marker
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in _with_marker(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # contest instances solved end to end (6 s): run by .ci/run (pytest -m slow)
def test_a_folder_of_contest_instances_is_a_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``wsealloc bench FOLDER``: every .kgraph in it, the contest's table, best values in a suite YAML
    beside the results (the folder may be read-only), and the regression gate on the score."""
    folder = tmp_path / "contest"
    folder.mkdir()
    for name in ("tiny_chain.kgraph", "tiny_fabric.kgraph"):
        shutil.copy(ROOT / "tests" / "data" / "kgraph" / name, folder / name)
    out = tmp_path / "out"
    assert main(["bench", str(folder), "--out", str(out), "--time-limit", "1", "--update-best"]) == 0
    table = capsys.readouterr().out
    assert "| instance | kernels | max_time | lower_bound | time_over_bound | wirelength | score |" in table
    assert "| tiny_chain | 5 |" in table and "| 288 |" in table  # tiny_chain's bound (its own header)
    best = out / "contest.yaml"
    recorded = load_suite(str(best)).suite
    assert [i.name for i in recorded.instances] == ["tiny_chain", "tiny_fabric"] and all(i.best for i in recorded.instances)
    # an impossible best score is a regression (exit 5), named with the score
    text = best.read_text()
    first = recorded.instances[0].best
    assert first is not None
    best.write_text(text.replace(f"objective: {first.objective}", "objective: 1.0", 1))
    assert main(["bench", str(folder), "--out", str(out), "--time-limit", "1"]) == 5
    assert "score, worse than the best known 1.0" in capsys.readouterr().err
    # recording from a folder that holds one of the two keeps the other's best value, the file's order
    # and its name
    (folder / "tiny_chain.kgraph").unlink()
    second = recorded.instances[1].best
    assert second is not None
    bumped = text.replace(f"objective: {second.objective}", "objective: 1000000.0").replace("name: contest", "name: mine", 1)
    best.write_text(bumped)
    assert main(["bench", str(folder), "--out", str(out), "--time-limit", "1", "--update-best"]) == 0
    again = read_suite(str(best))  # tiny_chain's file is gone: read the document only
    assert again.name == "mine" and [i.name for i in again.instances] == ["tiny_chain", "tiny_fabric"]
    assert again.instances[0].best == recorded.instances[0].best
    assert again.instances[1].best is not None and again.instances[1].best.objective < 1000000.0


def test_a_zero_score_is_recorded_as_best(tmp_path: Path) -> None:
    """A contest score can be 0 (wdeltat=0 and one kernel): --update-best records it instead of failing
    on the best-known schema (it was an internal error, exit 70)."""
    from wsealloc.bench.results import regressions, with_improvements
    from wsealloc.bench.suite import Instance, Suite

    suite = Suite(name="z", instances=(Instance(name="zero", model="zero.kgraph"),))
    row = BenchRow(instance="zero", kernels=1, solver=288, bound=216, status="FEASIBLE", wirelength=0.0, score=0.0)
    updated, changed = with_improvements(suite, [row])
    best = updated.instances[0].best
    assert changed == ["zero"] and best is not None and best.objective == 0.0 and best.bound == 216
    assert regressions(updated, [row]) == []
    worse = replace(row, score=1.0)
    assert regressions(updated, [worse]) == ["zero: 1.0 score, worse than the best known 0.0"]


def test_suite_kgraph_instances_are_checked_before_running(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ninstances:\n- name: x\n  model: nope.kgraph\n")
    with pytest.raises(UsageError, match=re.escape("instances.0 (x): model nope.kgraph: no such file")):
        load_suite(str(bad))


@pytest.mark.slow
def test_dask_tasks_carry_their_kgraph_instance(tmp_path: Path) -> None:
    """A contest instance travels to a node without a shared file system too (its bytes are shipped)."""
    from wsealloc.frontend.sources import KgraphSource
    from wsealloc.request import build_request

    instance = tmp_path / "tiny_fabric.kgraph"
    shutil.copy(ROOT / "tests" / "data" / "kgraph" / "tiny_fabric.kgraph", instance)
    task = Task.of("tiny_fabric", build_request(str(instance), time_limit=1))
    shipped = ship(task)
    assert shipped.model_data == instance.read_bytes()
    source = task.request.model
    assert isinstance(source, KgraphSource)
    away = source.model_copy(update={"path": "/nonexistent/cluster/node/tiny_fabric.kgraph"})
    moved = shipped.task.model_copy(update={"request": task.request.model_copy(update={"model": away})})
    elsewhere = run_task(replace(shipped, task=moved))
    assert elsewhere.ok and elsewhere.contest and elsewhere.bound == 18, elsewhere


def test_folder_options_are_refused_for_a_yaml_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--time-limit (like --best and --time-cap) applies to a folder of .kgraph instances only: a YAML suite
    sets each instance's own, so the option was silently ignored there."""
    suite = _copy_suite(tmp_path)
    assert main(["bench", str(suite), "--time-limit", "5", "--out", str(tmp_path / "out")]) == 2
    assert "--best, --time-limit and --time-cap apply to a folder of .kgraph instances" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"), [("0", "--time-limit 0.0: Input should be greater than 0"), ("nan", "--time-limit nan")]
)
def test_a_bad_folder_time_limit_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, message: str
) -> None:
    folder = tmp_path / "contest"
    folder.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "kgraph" / "tiny_fabric.kgraph", folder / "tiny_fabric.kgraph")
    assert main(["bench", str(folder), "--time-limit", option, "--out", str(tmp_path / "out")]) == 2  # was exit 70
    err = capsys.readouterr().err
    assert err.startswith(f"wsealloc: error: {message}") and len(err.strip().splitlines()) == 1


def test_failed_instances_are_not_called_regressions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder's first run (no best-known file yet) with a malformed instance said "1 regression(s) against
    OUT/contest.yaml: bad_edge: ERROR ..." of a file that did not exist: a failed instance is named as one."""
    folder, out = tmp_path / "contest", tmp_path / "out"
    folder.mkdir()
    for name in ("bad_edge", "tiny_fabric"):
        shutil.copy(ROOT / "tests" / "data" / "kgraph" / f"{name}.kgraph", folder / f"{name}.kgraph")
    assert main(["bench", str(folder), "--out", str(out), "-j", "1", "--time-limit", "5"]) == 5  # (the gate's code)
    err = capsys.readouterr().err.splitlines()
    why = f"{folder / 'bad_edge.kgraph'}:13: edge references conv[7], which no node line defines"
    assert err == [
        f"wsealloc: failed: bad_edge: ERROR ({why})",
        f"wsealloc: error: 1 instance(s) failed: bad_edge: ERROR ({why})",
    ]
    assert not (out / "contest.yaml").exists()


def test_the_gate_names_the_best_known_file_with_regressions_only(tmp_path: Path) -> None:
    from wsealloc.bench.results import BenchRun, failures, regressions
    from wsealloc.bench.suite import Best, Instance, Suite

    suite = Suite(
        name="c",
        instances=(
            Instance(name="A", model="A.kgraph", best=Best(objective=100.0)),
            Instance(name="B", model="B.kgraph", best=Best(objective=5.0)),  # failed: no regression whatever its best
        ),
    )
    worse = BenchRow(instance="A", kernels=2, solver=60, bound=None, status="FEASIBLE", wirelength=1.0, score=120.0)
    failed = BenchRow(instance="B", status="ERROR", error="B.kgraph:1: bad")
    rows = [worse, failed]
    assert regressions(suite, rows) == ["A: 120.0 score, worse than the best known 100.0"]
    assert failures(suite, rows) == ["B: ERROR (B.kgraph:1: bad)"]
    best = tmp_path / "c.yaml"
    best.write_text("name: c\n")
    run = BenchRun(suite, best, tuple(rows), tuple(regressions(suite, rows)), (), (), tuple(failures(suite, rows)))
    assert not run.passed
    assert run.gate_message() == (
        "1 instance(s) failed: B: ERROR (B.kgraph:1: bad); and 1 regression(s) against the best-known values in "
        f"{best}: A: 120.0 score, worse than the best known 100.0"
    )
    gone = replace(run, path=tmp_path / "none.yaml")  # (a file that does not exist is not named)
    assert gone.gate_message().endswith(
        "regression(s) against the best-known values: A: 120.0 score, worse than the best known 100.0"
    )
    assert replace(run, regressions=(), failures=()).passed and replace(run, regressions=(), failures=()).gate_message() == ""


def test_contest_regressions_name_the_time_bound() -> None:
    """A contest row's bound is on the largest kernel time (not cycles); an unsound one is compared with
    the run's own time, and each message says so."""
    from wsealloc.bench.results import regressions
    from wsealloc.bench.suite import Best, Instance, Suite

    suite = Suite(name="c", instances=(Instance(name="A", model="A.kgraph", best=Best(objective=100.0, bound=50)),))
    weak = BenchRow(instance="A", kernels=2, solver=60, bound=40, status="FEASIBLE", wirelength=1.0, score=100.0)
    assert regressions(suite, [weak]) == ["A: bound 40 on the largest kernel time, weaker than the recorded 50"]
    unsound = replace(weak, bound=70)
    assert regressions(suite, [unsound]) == [
        "A: bound 70 on the largest kernel time exceeds this run's largest kernel time 60 (unsound)"
    ]
