"""`wsealloc bench`: suites, CSV/JSON/Markdown results, the regression gate, recording improvements,
crashed workers, and identical results on a Dask LocalCluster."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from wsealloc.bench.runner import FAULT_ENV, run_all
from wsealloc.bench.suite import load_suite
from wsealloc.cli import main

ROOT = Path(__file__).resolve().parents[1]


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


def test_smoke_suite_passes(tmp_path: Path) -> None:
    assert main(["bench", "smoke", "--out", str(tmp_path), "-j", "2"]) == 0
    rows = json.loads((tmp_path / "smoke.json").read_text())["results"]
    suite, _ = load_suite("smoke")
    assert [r["instance"] for r in rows] == [i.name for i in suite.instances]
    assert all(r["status"] == "OPTIMAL" or r["status"] == "FEASIBLE" for r in rows)
    assert (tmp_path / "smoke.csv").read_text().startswith("instance,kernels,greedy,solver,bound,gap,status,wall_s,speedup")
    assert "| instance |" in (tmp_path / "smoke.md").read_text()


def test_regression_gate_and_update_best(tmp_path: Path) -> None:
    suite = _copy_suite(tmp_path, best=100)  # impossible: the optimum is 661 cycles
    assert main(["bench", str(suite), "--out", str(tmp_path / "out")]) == 5
    (tmp_path / "b").mkdir()
    fresh = _copy_suite(tmp_path / "b")
    assert main(["bench", str(fresh), "--out", str(tmp_path / "out2"), "--update-best"]) == 0
    recorded, _ = load_suite(str(fresh))
    assert [i.best.objective for i in recorded.instances if i.best] == [661, 2745]
    assert main(["bench", str(fresh), "--out", str(tmp_path / "out3")]) == 0  # now gated, and it holds


def test_crashed_worker_is_reported_and_suite_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite, path = load_suite(str(_copy_suite(tmp_path)))
    monkeypatch.setenv(FAULT_ENV, "abort:attention")
    rows = run_all([i.resolved(path.parent) for i in suite.instances], jobs=2)
    assert rows[0]["status"] == "CRASHED" and "signal" in rows[0]["error"]
    assert rows[1]["status"] == "OPTIMAL"


def test_dask_local_cluster_gives_identical_results(tmp_path: Path) -> None:
    from distributed import LocalCluster

    suite, path = load_suite(str(_copy_suite(tmp_path)))
    instances = [i.resolved(path.parent) for i in suite.instances]
    local = run_all(instances, jobs=1)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        remote = run_all(instances, scheduler=cluster.scheduler_address)

    def strip(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    assert strip(remote) == strip(local)


def test_unknown_suite_lists_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nonesuch"]) == 2
    assert "known suites: smoke, standard, stress" in capsys.readouterr().err


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


def test_sigterm_stops_workers(tmp_path: Path) -> None:
    """Killing a bench run leaves no worker processes behind."""
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
    deadline = time.time() + 60
    while len(_with_marker(marker)) < 3 and time.time() < deadline:  # the bench and two workers
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    time.sleep(1)
    assert _with_marker(marker) == []
