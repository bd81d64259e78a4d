"""Run instances: one function per instance (what a Dask task or a local worker process executes),
and executors that fan them out with a progress bar.

Each instance is a :class:`Task` (a name, a :class:`~wsealloc.request.SolveRequest`, a timeout)
and runs in its own worker process (``python -m wsealloc.bench.worker``, the task as JSON on stdin):
a worker that crashes (segfault, abort, out of memory) or passes its timeout is reported as a failed
row for its instance and the rest of the suite completes. Locally ``-j`` of them run at a time;
``--scheduler tcp://HOST:PORT`` submits one Dask task per instance (:func:`run_task`), which starts
the same worker process on the cluster node.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from wsealloc.errors import UsageError
from wsealloc.plan.io import write_atomic
from wsealloc.request import SolveRequest

ROW_FIELDS = ("instance", "kernels", "greedy", "solver", "bound", "gap", "status", "wall_s", "speedup")
# contest suites (.kgraph instances): max time = ``solver``, lower bound = ``bound``
CONTEST_FIELDS = ("instance", "kernels", "max_time", "lower_bound", "time_over_bound", "wirelength", "score", "status", "wall_s")
# The command of a local worker process: reads a Task as JSON on stdin, prints its BenchRow as JSON.
WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "wsealloc.bench.worker")
# A worker may take this long beyond its request's time limit before it is killed as hung (the first
# placement layout is not bound by the clock, see wsealloc.budget).
WORKER_GRACE_S = 300.0


class Task(BaseModel):
    """One instance as a worker receives it: a name, a solve request, a wall-clock limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    request: SolveRequest
    timeout_s: float = Field(gt=0)

    @staticmethod
    def of(name: str, request: SolveRequest, timeout_s: float | None = None) -> Task:
        """A task; the timeout defaults to the request's time limit plus ``WORKER_GRACE_S``."""
        return Task(name=name, request=request, timeout_s=timeout_s or request.solver.time_limit_s + WORKER_GRACE_S)


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
    # contest instances (.kgraph): the score's parts (``solver`` is the largest kernel time, ``bound`` its bound)
    wirelength: float | None = None
    score: float | None = None
    # LLM exports (a serving frontier's points): tokens/s per request and in all, and the wafers used
    tokens_per_s_per_request: float | None = None
    aggregate_tokens_per_s: float | None = None
    wafers: int | None = None
    # LLM exports: the plan's whole LLM record (``plan.objective.llm`` as plain data: the pass and the
    # slowest stage in cycles, the cache bytes per token, the time to first token; prefill/decode pools)
    llm: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """True when the instance produced a plan."""
        return self.solver is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON, CSV, the worker protocol); the contest's fields only on contest rows."""
        data = asdict(self)
        if self.score is None and self.wirelength is None:
            del data["score"], data["wirelength"]
        if self.tokens_per_s_per_request is None:  # (suites of non-LLM models keep their columns)
            del data["tokens_per_s_per_request"], data["aggregate_tokens_per_s"], data["wafers"]
        if self.llm is None:
            del data["llm"]
        return data

    @property
    def objective(self) -> float | None:
        """What the regression gate compares: the score of a contest instance, else the bottleneck."""
        return self.score if self.score is not None else self.solver

    @property
    def contest(self) -> bool:
        """Whether this is a contest instance's row."""
        return self.score is not None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchRow:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def failed_row(name: str, status: str, error: str, wall_s: float | None = None) -> BenchRow:
    """The row of an instance that produced no plan (an error, or a crashed worker)."""
    return BenchRow(instance=name, status=status, error=" ".join(error.split()), wall_s=wall_s)


def run_instance(task: Task) -> BenchRow:
    """Solve one task in this process and return its row; never raises for problems a user can fix
    (they become an ERROR row)."""
    from wsealloc.api import run
    from wsealloc.errors import WseallocError

    start = time.perf_counter()
    try:
        out = run(task.request)
    except WseallocError as exc:
        return failed_row(task.name, "ERROR", str(exc), round(time.perf_counter() - start, 2))
    h = out.plan.headline()  # every plan document reports the same headline
    llm = getattr(getattr(out.plan, "objective", None), "llm", None)  # (contest plans have none)
    return BenchRow(
        instance=task.name,
        kernels=h.kernels,
        greedy=h.baseline,
        solver=h.value,
        bound=h.bound,
        gap=None if h.gap is None else round(h.gap, 6),
        status=h.status.value,
        wall_s=round(time.perf_counter() - start, 2),
        speedup=None if h.speedup is None else round(h.speedup, 4),
        wirelength=h.wirelength,
        score=h.score,
        tokens_per_s_per_request=h.tokens_per_s_per_request,
        aggregate_tokens_per_s=h.aggregate_tokens_per_s,
        wafers=h.wafers if h.tokens_per_s_per_request is not None else None,
        llm=None if llm is None else llm.model_dump(mode="json"),
    )


def _local(path: str, content: bytes) -> str:
    """``path`` if this machine has it; else ``content`` (shipped with a Dask task) written to a cache
    folder under the same file name, keyed by its hash, so workers need no shared file system."""
    if Path(path).exists():
        return path
    digest = hashlib.sha256(content).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / "wsealloc-tasks" / digest / Path(path).name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, content)
    return str(target)


@dataclass(frozen=True)
class Shipped:
    """A task for a worker on another machine: the task, its model file's bytes (the arch travels
    resolved inside the request), and the worker command to run it with."""

    task: Task
    model_data: bytes | None
    worker: tuple[str, ...] = WORKER_COMMAND


def ship(task: Task, worker: Sequence[str] = WORKER_COMMAND) -> Shipped:
    """A task with its model file's contents attached (an ONNX file or a ``.kgraph`` instance; synthetic
    models are generated where they run)."""
    source = task.request.model
    data = None
    if source.file is not None and Path(source.file).is_file():
        data = Path(source.file).read_bytes()
    return Shipped(task, data, tuple(worker))


def run_task(shipped: Shipped) -> BenchRow:
    """One Dask task: write the shipped model bytes where this machine lacks the file, then run the
    task in its own worker process, exactly like a local run (a crash or a hang costs that instance
    only, never the Dask worker and the other tasks queued on it)."""
    task = shipped.task
    source = task.request.model
    if shipped.model_data is not None and source.file is not None:
        local = source.model_copy(update={"path": _local(source.file, shipped.model_data)})
        task = task.model_copy(update={"request": task.request.model_copy(update={"model": local})})
    return Runner(worker=shipped.worker).isolated(task)


@dataclass
class Runner:
    """Runs tasks in worker processes (``jobs`` at a time, or one Dask task each on the cluster at
    ``scheduler``). ``worker`` is the worker command (tests pass one that crashes or hangs). The
    processes it started are stopped if the run is interrupted."""

    jobs: int = 1
    scheduler: str | None = None
    worker: tuple[str, ...] = WORKER_COMMAND
    connect_timeout: float = 10.0
    _live: set[subprocess.Popen[str]] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def isolated(self, task: Task) -> BenchRow:
        """Run one task in a fresh worker process; a crash becomes a CRASHED row, a worker past its
        timeout is killed and becomes a TIMEOUT row."""
        proc = subprocess.Popen(
            list(self.worker), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        with self._lock:
            self._live.add(proc)
        try:
            stdout, stderr = proc.communicate(task.model_dump_json(), timeout=task.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            limit = task.timeout_s
            return failed_row(task.name, "TIMEOUT", f"worker killed after {limit:g} s (the instance's timeout)", round(limit, 2))
        finally:
            with self._lock:
                self._live.discard(proc)
        if proc.returncode == 0:
            try:
                return BenchRow.from_dict(json.loads(stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError, TypeError):
                pass
        reason = (
            f"worker exited with code {proc.returncode}"
            if proc.returncode >= 0
            else f"worker killed by signal {-proc.returncode}"
        )
        tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        return failed_row(task.name, "CRASHED", " ".join([reason, *tail]))

    def run(self, tasks: Sequence[Task], on_done: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
        """Every task's row, in input order; ``on_done`` is called as each one finishes."""
        done = on_done or (lambda row: None)
        if self.scheduler is not None:
            return _run_dask(tasks, self, done)
        if self.jobs < 1:
            raise UsageError(f"-j {self.jobs}: expected at least 1 worker")
        rows: dict[int, BenchRow] = {}
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="wsealloc-bench")
        try:
            futures = {pool.submit(self.isolated, task): i for i, task in enumerate(tasks)}
            for fut in as_completed(futures):
                rows[futures[fut]] = fut.result()
                done(rows[futures[fut]])
        except BaseException:
            # interrupted: drop queued tasks and stop running workers, leaving no orphans behind
            pool.shutdown(wait=False, cancel_futures=True)
            with self._lock:
                for proc in self._live:
                    proc.terminate()
            raise
        pool.shutdown()
        return [rows[i] for i in range(len(tasks))]


def run_all(
    tasks: Sequence[Task],
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[BenchRow], None] | None = None,
    worker: Sequence[str] = WORKER_COMMAND,
    connect_timeout: float = 10.0,
) -> list[BenchRow]:
    """Run every task (see :class:`Runner`); rows in input order."""
    return Runner(jobs, scheduler, tuple(worker), connect_timeout).run(tasks, on_done)


def _run_dask(tasks: Sequence[Task], runner: Runner, done: Callable[[BenchRow], None]) -> list[BenchRow]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise UsageError("--scheduler needs dask.distributed: pip install 'wsealloc[dask]'") from None
    try:
        client = Client(runner.scheduler, timeout=f"{runner.connect_timeout}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler {runner.scheduler}: cannot connect ({exc}); is a dask scheduler running there?") from exc
    try:
        futures = [
            client.submit(run_task, ship(task, runner.worker), pure=False, key=f"wsealloc-{task.name}-{i}")
            for i, task in enumerate(tasks)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        rows: dict[int, BenchRow] = {}
        for fut in dask_completed(futures):
            i = index[fut.key]
            try:
                rows[i] = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost or crashed task is reported for its instance
                rows[i] = failed_row(tasks[i].name, "CRASHED", f"{type(exc).__name__}: {exc}")
            done(rows[i])
        return [rows[i] for i in range(len(tasks))]
    finally:
        client.close()
