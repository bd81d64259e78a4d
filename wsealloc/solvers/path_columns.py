"""A band's columns shared to shorten a token's path (the latency objective), not its slowest kernel.

The strip construction sizes every kernel of a band for a target time and hands the band's spare
columns to its slowest kernel (``strips.stretch``): right where the slowest kernel paces the plan
(throughput), wrong where the plan is valued by the sum of latencies along a token's path. There a
layer norm on one column of a 205-row band takes 7,886 cycles and on three columns 2,700: two
columns of a 64-column matmul cost it far less. GPT-2 with ``--objective latency`` placed its bands
at 3.47M cycles against an allocation of 2.44M; each band's columns shared by the most latency saved
per column instead is what this module computes.

``share_columns`` is the classic greedy for a separable sum under one budget (each unit on its
narrowest legal width, then the columns left to the unit saving the most weighted latency per
column, looking ahead past the flat steps of its curve): exact for convex curves; on the step curves
of real op models a heuristic (a review found one 29% above the optimum by brute force), which is why
the construction keeps it only where its layout ranks better than the slowest-first one. Pure numpy;
the strip construction builds the curves (a kernel, or a stacked group sharing one column slot) and
packs the widths.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import numpy as np

LOOK_AHEAD = 256  # columns a unit looks past a flat step of its curve for the next saving
OFF_PATH = 0.2  # weight of a kernel beside a longest path (``strips.path_weights``)


def least_width(curve: np.ndarray) -> int:
    """The narrowest width at which ``curve`` is finite (0: none)."""
    finite = np.flatnonzero(np.isfinite(curve))
    return int(finite[0]) if finite.size else 0


def _best_step(curve: np.ndarray, width: int, room: int) -> tuple[float, int]:
    """(latency saved per column, columns) of the best step from ``width`` within ``room`` columns;
    (0, 0) when no step saves anything."""
    reach = min(room, LOOK_AHEAD, curve.size - 1 - width)
    if reach <= 0:
        return 0.0, 0
    saved = curve[width] - curve[width + 1 : width + 1 + reach]
    rate = saved / np.arange(1, reach + 1)
    step = int(np.argmax(rate))
    return (float(rate[step]), step + 1) if saved[step] > 0 else (0.0, 0)


def _steps(curves: Sequence[np.ndarray], budget: int) -> Iterator[tuple[list[int], int, int]]:
    """The greedy of ``share_columns``: (the widths, the unit that took a step, its columns), first
    (the narrowest widths, -1, 0), then after each step; nothing where the narrowest widths do not fit
    or a unit has no legal width."""
    widths = [least_width(c) for c in curves]
    if any(w == 0 for w in widths):
        return
    left = budget - sum(widths)
    if left < 0:
        return
    yield widths, -1, 0
    heap: list[tuple[float, int, int]] = []
    for u, curve in enumerate(curves):
        rate, step = _best_step(curve, widths[u], left)
        if step:
            heapq.heappush(heap, (-rate, u, step))
    while heap and left > 0:
        _, u, step = heapq.heappop(heap)
        if step > left:  # (the columns left shrank since this step was priced: price it anew)
            rate, step = _best_step(curves[u], widths[u], left)
            if step:
                heapq.heappush(heap, (-rate, u, step))
            continue
        widths[u] += step
        left -= step
        yield widths, u, step
        rate, step = _best_step(curves[u], widths[u], left)
        if step:
            heapq.heappush(heap, (-rate, u, step))


def share_columns(curves: Sequence[np.ndarray], budget: int) -> list[int] | None:
    """Widths of units whose (weighted) latency at each width is ``curves[u][w]`` (non-increasing,
    ``inf`` where the unit has no legal rectangle), within ``budget`` columns: each on its narrowest
    legal width, then the columns left one step at a time to the unit saving the most latency per
    column. None where the narrowest widths alone exceed the budget or a unit has no legal width."""
    last: list[int] | None = None
    for widths, _, _ in _steps(curves, budget):
        last = widths
    return None if last is None else list(last)


def lane_curve(curves: Sequence[np.ndarray], budget: int) -> np.ndarray:
    """The least sum ``share_columns`` finds for the units side by side in one lane, at every width
    0..``budget`` (``inf`` below their narrowest widths): the greedy's steps are nested, so one run of
    it at the whole budget gives every width (a run of two lanes is then one unit of a band, its curve
    the sum of its lanes')."""
    out = np.full(budget + 1, np.inf)
    total = 0.0
    for widths, u, step in _steps(curves, budget):
        if u < 0:
            total = float(sum(float(c[w]) for c, w in zip(curves, widths, strict=True)))
        else:
            total += float(curves[u][widths[u]] - curves[u][widths[u] - step])
        out[sum(widths)] = total
    return np.minimum.accumulate(out)
