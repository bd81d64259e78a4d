"""Run instances: one function per instance (what a Dask task or a local worker process executes),
and executors that fan them out with a progress bar.

Local runs isolate each instance in its own worker process (``python -m wsealloc.bench.worker``):
a worker that crashes (segfault, abort, out of memory) is reported as a failed row for its instance
and the rest of the suite completes. ``--scheduler tcp://HOST:PORT`` submits the same function to a
Dask distributed cluster, one task per instance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from wsealloc.errors import UsageError

# Fault injection for the crash test: WSEALLOC_FAULT_INJECT=abort:<instance name> aborts that worker.
FAULT_ENV = "WSEALLOC_FAULT_INJECT"
ROW_FIELDS = ("instance", "kernels", "greedy", "solver", "bound", "gap", "status", "wall_s", "speedup")


def failed_row(name: str, status: str, error: str) -> dict[str, Any]:
    """The row of an instance that produced no plan (an error, or a crashed worker)."""
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(instance=name, status=status, error=error)
    return row


def run_instance(data: dict[str, Any]) -> dict[str, Any]:
    """Solve one instance (resolved plain data) and return its result row; never raises."""
    from wsealloc.api import solve
    from wsealloc.bench.synthetic import PREFIX, resolve
    from wsealloc.errors import WseallocError

    if os.environ.get(FAULT_ENV) == f"abort:{data['name']}":
        os.abort()
    start = time.perf_counter()
    row = failed_row(data["name"], "ERROR", "")
    try:
        model = str(resolve(data["model"])) if data["model"].startswith(PREFIX) else data["model"]
        out = solve(
            model,
            data["arch"],
            dims=data.get("dims") or {},
            sets=data.get("sets") or (),
            solver=data["solver"],
            time_limit=data["time_limit"],
            place=data["place"],
            wafers=data.get("wafers", 1),
        )
    except WseallocError as exc:
        row["error"] = str(exc)
        row["wall_s"] = round(time.perf_counter() - start, 2)
        return row
    obj = out.plan.objective
    base = out.plan.baseline
    greedy = base.placed_bottleneck_cycles if obj.placed and base.placed_bottleneck_cycles else base.bottleneck_cycles
    row.update(
        kernels=len(out.plan.kernels),
        greedy=greedy,
        solver=obj.bottleneck_cycles,
        bound=obj.lower_bound_cycles,
        gap=None if obj.gap is None else round(obj.gap, 6),
        status=obj.status,
        wall_s=round(time.perf_counter() - start, 2),
        speedup=None if not greedy else round(greedy / max(obj.bottleneck_cycles, 1), 4),
    )
    return row


_LIVE: set[subprocess.Popen[str]] = set()  # running workers, stopped if the run is interrupted
_LIVE_LOCK = threading.Lock()


def _isolated(data: dict[str, Any]) -> dict[str, Any]:
    """Run one instance in a fresh worker process; a crash becomes a failed row."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wsealloc.bench.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        stdout, stderr = proc.communicate(json.dumps(data))
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    if proc.returncode == 0:
        try:
            result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
            return result
        except (ValueError, IndexError):
            pass
    reason = (
        f"worker exited with code {proc.returncode}" if proc.returncode >= 0 else f"worker killed by signal {-proc.returncode}"
    )
    tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
    return failed_row(data["name"], "CRASHED", " ".join([reason, *tail]))


def run_all(
    instances: Sequence[dict[str, Any]],
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every instance (locally with ``jobs`` workers, or on a Dask cluster); rows in input order."""
    done = on_done or (lambda row: None)
    if scheduler is not None:
        return _run_dask(instances, scheduler, done)
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    rows: dict[int, dict[str, Any]] = {}
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(_isolated, data): i for i, data in enumerate(instances)}
        for fut in as_completed(futures):
            rows[futures[fut]] = fut.result()
            done(rows[futures[fut]])
    except BaseException:
        # interrupted: drop queued instances and stop running workers, leaving no orphans behind
        pool.shutdown(wait=False, cancel_futures=True)
        with _LIVE_LOCK:
            for proc in _LIVE:
                proc.terminate()
        raise
    pool.shutdown()
    return [rows[i] for i in range(len(instances))]


def _run_dask(
    instances: Sequence[dict[str, Any]], scheduler: str, done: Callable[[dict[str, Any]], None]
) -> list[dict[str, Any]]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise UsageError("--scheduler needs dask.distributed: pip install 'wsealloc[dask]'") from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"--scheduler {scheduler}: cannot connect ({exc}); is a dask scheduler running there?") from exc
    try:
        futures = [
            client.submit(run_instance, data, pure=False, key=f"wsealloc-{data['name']}-{i}") for i, data in enumerate(instances)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        rows: dict[int, dict[str, Any]] = {}
        for fut in dask_completed(futures):
            i = index[fut.key]
            try:
                rows[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost or crashed task is reported for its instance
                rows[i] = failed_row(instances[i]["name"], "CRASHED", str(exc))
            done(rows[i])
        return [rows[i] for i in range(len(instances))]
    finally:
        client.close()
