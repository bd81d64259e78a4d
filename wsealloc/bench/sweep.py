"""Architecture sweeps: a grid of ``--set`` values, each point solved, and a warning for every pair of
points where a strictly better machine gives a worse result (the bug ZigZag users reported,
../shared/seeds/003_*: smaller memories giving fewer load cycles)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from wsealloc.arch.loader import parse_set_option
from wsealloc.errors import UsageError
from wsealloc.units import parse_bytes

# Fields where a larger value is a worse machine; every other numeric field is better when larger.
WORSE_WHEN_LARGER = frozenset(
    {
        "core.sram_reserve_bytes",
        "noc.hop_latency_cycles",
        "wafer.defects.rate",
        "wafer.die_crossing_penalty_cycles",
        "cluster.link_latency_s",
    }
)


@dataclass(frozen=True)
class Axis:
    """One swept field and its values (as given, and as numbers for comparing machines)."""

    field: str
    values: tuple[str, ...]
    numbers: tuple[float, ...]


def _number(text: str) -> float:
    try:
        return float(parse_bytes(text))
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"--set value {text!r} is not a number or a size; sweeps compare machines numerically") from None


def parse_axes(options: Sequence[str]) -> list[Axis]:
    """``--set field=v1,v2,...`` options into axes."""
    axes: list[Axis] = []
    for opt in options:
        path, value = parse_set_option(opt)
        field = ".".join(path)
        values = tuple(v.strip() for v in str(value).split(",") if v.strip())
        if not values:
            raise UsageError(f"--set {opt!r}: no values to sweep")
        if field in {a.field for a in axes}:
            raise UsageError(f"--set {field} given twice; list its values once, comma-separated")
        axes.append(Axis(field, values, tuple(_number(v) for v in values)))
    if not axes:
        raise UsageError("sweep needs at least one --set FIELD=V1,V2,...")
    return axes


def grid(axes: Sequence[Axis]) -> list[tuple[int, ...]]:
    """Every combination of value indices."""
    return list(itertools.product(*(range(len(a.values)) for a in axes)))


def point_sets(axes: Sequence[Axis], point: tuple[int, ...]) -> list[str]:
    """``--set`` overrides of one grid point."""
    return [f"{a.field}={a.values[i]}" for a, i in zip(axes, point, strict=True)]


def better_or_equal(axes: Sequence[Axis], a: tuple[int, ...], b: tuple[int, ...]) -> tuple[bool, bool]:
    """(b is at least as good as a on every axis, b is strictly better on some axis)."""
    geq, strict = True, False
    for axis, i, j in zip(axes, a, b, strict=True):
        x, y = axis.numbers[i], axis.numbers[j]
        if axis.field in WORSE_WHEN_LARGER:
            x, y = -x, -y
        if y < x:
            geq = False
        elif y > x:
            strict = True
    return geq, strict


def non_monotone(axes: Sequence[Axis], points: Sequence[tuple[int, ...]], cycles: Sequence[int | None]) -> list[tuple[int, int]]:
    """Pairs (i, j) of points where j is a strictly better machine than i but its bottleneck is worse."""
    bad = []
    for i, j in itertools.permutations(range(len(points)), 2):
        ci, cj = cycles[i], cycles[j]
        if ci is None or cj is None:
            continue
        geq, strict = better_or_equal(axes, points[i], points[j])
        if geq and strict and cj > ci:
            bad.append((i, j))
    return bad
