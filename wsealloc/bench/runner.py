"""Run instances: one function per instance (what a Dask task or a local worker process executes),
and executors that fan them out with a progress bar.

Each instance runs in its own worker process (``python -m wsealloc.bench.worker``): a worker that
crashes (segfault, abort, out of memory) or passes its deadline is reported as a failed row for its
instance and the rest of the suite completes. Locally ``-j`` of them run at a time;
``--scheduler tcp://HOST:PORT`` submits one Dask task per instance (:func:`run_task`), which starts
the same worker process on the cluster node.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wsealloc.errors import UsageError
from wsealloc.plan.io import write_atomic

# Fault injection for the crash test: WSEALLOC_FAULT_INJECT=abort:<instance name> aborts that worker.
FAULT_ENV = "WSEALLOC_FAULT_INJECT"
ROW_FIELDS = ("instance", "kernels", "greedy", "solver", "bound", "gap", "status", "wall_s", "speedup")


@dataclass(frozen=True)
class BenchRow:
    """The result of one instance: bottlenecks in cycles per sample (``greedy`` placed by the same
    construction for placed instances), the proven bound, the gap to it, and the speed-up over greedy.
    Instances that produced no plan have ``status`` ERROR or CRASHED, ``error`` set and no numbers."""

    instance: str
    kernels: int | None = None
    greedy: int | None = None
    solver: int | None = None
    bound: int | None = None
    gap: float | None = None
    status: str = "ERROR"
    wall_s: float | None = None
    speedup: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when the instance produced a plan."""
        return self.solver is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, CSV, the worker protocol)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRow:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def failed_row(name: str, status: str, error: str, wall_s: float | None = None) -> BenchRow:
    """The row of an instance that produced no plan (an error, or a crashed worker)."""
    return BenchRow(instance=name, status=status, error=" ".join(error.split()), wall_s=wall_s)


def run_instance(data: dict[str, Any]) -> BenchRow:
    """Solve one instance (resolved plain data, see ``Instance.resolved``) and return its row; never
    raises for problems a user can fix (they become an ERROR row)."""
    from wsealloc.api import solve
    from wsealloc.bench.synthetic import PREFIX, resolve
    from wsealloc.errors import WseallocError

    fault = os.environ.get(FAULT_ENV, "")
    if fault == f"abort:{data['name']}":
        os.abort()
    if fault == f"hang:{data['name']}":
        time.sleep(3600)
    start = time.perf_counter()
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
            allow_unknown_ops=bool(data.get("allow_unknown_ops", False)),
        )
    except WseallocError as exc:
        return failed_row(data["name"], "ERROR", str(exc), round(time.perf_counter() - start, 2))
    obj = out.plan.objective
    base = out.plan.baseline
    greedy = base.placed_bottleneck_cycles if obj.placed and base.placed_bottleneck_cycles else base.bottleneck_cycles
    return BenchRow(
        instance=data["name"],
        kernels=len(out.plan.kernels),
        greedy=greedy,
        solver=obj.bottleneck_cycles,
        bound=obj.lower_bound_cycles,
        gap=None if obj.gap is None else round(obj.gap, 6),
        status=obj.status,
        wall_s=round(time.perf_counter() - start, 2),
        speedup=None if not greedy else round(greedy / max(obj.bottleneck_cycles, 1), 4),
    )


def _local(path: str, content: bytes | None) -> str:
    """``path`` if this machine has it; else ``content`` (shipped with a Dask task) written to a cache
    folder under the same file name, keyed by its hash, so workers need no shared file system."""
    if content is None or Path(path).exists():
        return path
    digest = hashlib.sha256(content).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / "wsealloc-tasks" / digest / Path(path).name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, content)
    return str(target)


def run_task(data: dict[str, Any]) -> BenchRow:
    """One Dask task: write the shipped model/arch bytes where this machine lacks the files, then run
    the instance in its own worker process, exactly like a local run (a crash or a hang costs that
    instance only, never the Dask worker and the other tasks queued on it)."""
    data = dict(data)
    for key in ("model", "arch"):
        content = data.pop(f"{key}_data", None)
        if content is not None:
            data[key] = _local(data[key], content)
    return _isolated(data)


def _portable(data: dict[str, Any]) -> dict[str, Any]:
    """An instance with its model (and arch YAML) file contents attached, for workers on other machines."""
    out = dict(data)
    for key in ("model", "arch"):
        path = Path(data[key])
        if path.suffix in (".onnx", ".yaml", ".yml") and path.is_file():
            out[f"{key}_data"] = path.read_bytes()
    return out


_LIVE: set[subprocess.Popen[str]] = set()  # running workers, stopped if the run is interrupted
_LIVE_LOCK = threading.Lock()


def deadline_s(data: dict[str, Any]) -> float:
    """Wall-clock limit of one local worker: the instance's ``timeout``, or a generous multiple of its
    solver time limit (allocation, greedy placement and placement each get up to ``time_limit``)."""
    timeout = data.get("timeout")
    return float(timeout) if timeout else 4 * float(data["time_limit"]) + 300


def _isolated(data: dict[str, Any]) -> BenchRow:
    """Run one instance in a fresh worker process; a crash becomes a CRASHED row, a worker past its
    deadline is killed and becomes a TIMEOUT row."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wsealloc.bench.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _LIVE_LOCK:
        _LIVE.add(proc)
    limit = deadline_s(data)
    try:
        stdout, stderr = proc.communicate(json.dumps(data), timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return failed_row(data["name"], "TIMEOUT", f"worker killed after {limit:g} s (the instance's timeout)", round(limit, 2))
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    if proc.returncode == 0:
        try:
            return BenchRow.from_dict(json.loads(stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError, TypeError):
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
    on_done: Callable[[BenchRow], None] | None = None,
    connect_timeout: float = 10.0,
) -> list[BenchRow]:
    """Run every instance (locally, ``jobs`` worker processes at a time, or one Dask task each on the
    cluster at ``scheduler``); rows in input order. ``on_done`` is called as each one finishes."""
    done = on_done or (lambda row: None)
    if scheduler is not None:
        return _run_dask(instances, scheduler, done, connect_timeout)
    if jobs < 1:
        raise UsageError(f"-j {jobs}: expected at least 1 worker")
    rows: dict[int, BenchRow] = {}
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="wsealloc-bench")
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
    instances: Sequence[dict[str, Any]], scheduler: str, done: Callable[[BenchRow], None], connect_timeout: float
) -> list[BenchRow]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise UsageError("--scheduler needs dask.distributed: pip install 'wsealloc[dask]'") from None
    try:
        client = Client(scheduler, timeout=f"{connect_timeout}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler {scheduler}: cannot connect ({exc}); is a dask scheduler running there?") from exc
    try:
        futures = [
            client.submit(run_task, _portable(data), pure=False, key=f"wsealloc-{data['name']}-{i}")
            for i, data in enumerate(instances)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        rows: dict[int, BenchRow] = {}
        for fut in dask_completed(futures):
            i = index[fut.key]
            try:
                rows[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost or crashed task is reported for its instance
                rows[i] = failed_row(instances[i]["name"], "CRASHED", f"{type(exc).__name__}: {exc}")
            done(rows[i])
        return [rows[i] for i in range(len(instances))]
    finally:
        client.close()
