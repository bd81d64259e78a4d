"""The time budget of a run: one deadline, created once from the request's time limit and handed down.

Every stage of a solve (front end, allocation, the greedy baseline's placement, construction,
refinement, each wafer of a pipeline) takes its share from the one :class:`Deadline` of the run, so
the stages together end within the request's time limit (``DEFAULT_TIME_LIMIT_S`` unless the user
sets ``--time-limit``). The deadline also carries the run's :class:`StopHook`: a SIGINT/SIGTERM
handler calls ``stop()``, and every loop that checks ``deadline.expired()`` ends at its next check,
returning its best result so far.

The one exception to the clock (never to a stop request): the placement keeps searching for a first
packing target until a first layout exists (``strips.smallest_target(first_free=True)``, unless a
start is held: ``place.construct_best(held=)``), because a late valid plan beats no plan.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

# The one default of every entry point (CLI commands, the Python API, suites, sweeps): seconds for a
# whole solve, front end included.
DEFAULT_TIME_LIMIT_S = 30.0

_T = TypeVar("_T")


class StopHook:
    """Lets a signal handler stop a running solve: running CP-SAT searches register a stop function,
    loops poll ``stopped``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.stopped = threading.Event()

    @contextlib.contextmanager
    def active(self, fn: Callable[[], None]) -> Iterator[None]:
        """While the block runs, a stop request calls ``fn`` (at once if one already came).

        Only running solves may be stopped: OR-Tools aborts the process when ``stop_search`` is
        called on a solver that is not solving any more, so the callback is removed on exit.
        """
        with self._lock:
            self._callbacks.append(fn)
            already = self.stopped.is_set()
        try:
            if already:
                fn()
            yield
        finally:
            with self._lock:
                self._callbacks.remove(fn)

    def stop(self) -> None:
        """Request every registered solve to stop and return its best solution so far."""
        self.stopped.set()
        with self._lock:
            callbacks = list(self._callbacks)
        for fn in callbacks:
            fn()


@dataclass(frozen=True)
class Deadline:
    """A point in time (``time.perf_counter`` seconds; ``math.inf`` for none) plus the run's stop hook.

    Stages never compute their own end times: they ask for a ``share`` of what remains."""

    end: float
    stop: StopHook = field(default_factory=StopHook, compare=False)

    @staticmethod
    def after(seconds: float, stop: StopHook | None = None) -> Deadline:
        """A deadline ``seconds`` from now."""
        return Deadline(time.perf_counter() + seconds, stop or StopHook())

    def remaining(self) -> float:
        """Seconds left (0 when passed; ``math.inf`` for an unbounded deadline)."""
        return max(0.0, self.end - time.perf_counter())

    @property
    def stopped(self) -> bool:
        """True once a stop was requested (a signal)."""
        return self.stop.stopped.is_set()

    def expired(self) -> bool:
        """True when the time is up or a stop was requested."""
        return self.stopped or time.perf_counter() >= self.end

    def share(self, fraction: float) -> Deadline:
        """A deadline ending after ``fraction`` (0-1] of the time that remains, never after this one."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"share {fraction}: expected a fraction in (0, 1]")
        if math.isinf(self.end):
            return self
        now = time.perf_counter()
        return Deadline(now + fraction * max(0.0, self.end - now), self.stop)

    def seconds_for_solver(self, floor: float = 0.01) -> float:
        """Time limit to hand a solver library (at least ``floor``: CP-SAT rejects 0)."""
        left = self.remaining()
        return floor if left <= floor else (1e9 if math.isinf(left) else left)


# After a stop request, a phase that does not return within this many seconds is abandoned (its
# best-so-far result is lost, the run falls back to the best one it holds): a signal stops any phase.
STOP_GRACE_S = 1.0


def run_stoppable(fn: Callable[[], _T], deadline: Deadline) -> _T | None:
    """Run ``fn`` in a worker thread so the main thread stays free to handle SIGINT/SIGTERM (the
    phases watch the deadline, whose stop hook the signal handler sets). A phase still running
    ``STOP_GRACE_S`` after a stop request is abandoned (None), so a signal ends any phase promptly."""
    value: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            value.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(exc)

    worker = threading.Thread(target=target, name="wsealloc-solve", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
        if deadline.stopped:
            worker.join(STOP_GRACE_S)
            break
    if error:
        raise error[0]
    return value[0] if value else None
