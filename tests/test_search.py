"""The one bisection over sorted candidate values (wsealloc/search.py): hand-computed values, the
None cases, and the least value a linear scan finds for every monotone condition."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from wsealloc.search import first_true


def scan(values: list[int], ok: Callable[[int], bool]) -> int | None:
    """The least value meeting ``ok``, by looking at every one in order."""
    return next((v for v in values if ok(v)), None)


def test_hand_computed_values() -> None:
    times = [3, 7, 10, 12, 20]
    assert first_true(times, lambda t: t >= 10) == 10
    assert first_true(times, lambda t: t >= 8) == 10  # between candidates: the next candidate up
    assert first_true(times, lambda t: t >= 0) == 3  # every value: the first
    assert first_true(times, lambda t: t >= 20) == 20  # only the last
    assert first_true(times, lambda t: t > 20) is None  # not even the last
    assert first_true([], lambda t: True) is None
    assert first_true([5], lambda t: t >= 5) == 5
    assert first_true([5], lambda t: t > 5) is None


def test_ties_and_numpy_arrays_give_ints() -> None:
    values = np.array([2, 2, 4, 4, 4, 9], dtype=np.int64)
    found = first_true(values, lambda t: t >= 3)
    assert found == 4 and type(found) is int
    assert first_true(values, lambda t: t >= 2) == 2
    assert first_true(np.zeros(0, dtype=np.int64), lambda t: True) is None


def test_the_last_value_is_tried_first_then_about_log2_n_more() -> None:
    asked: list[int] = []

    def ok(t: int) -> bool:
        asked.append(t)
        return t >= 600

    assert first_true(list(range(1000)), ok) == 600
    assert asked[0] == 999 and len(asked) <= 1 + 10
    asked.clear()
    assert first_true(list(range(1000)), lambda t: asked.append(t) or False) is None
    assert asked == [999]  # nothing meets it: one test


@given(st.lists(st.integers(-1000, 1000), max_size=40), st.integers(-1100, 1100))
def test_agrees_with_a_linear_scan(values: list[int], threshold: int) -> None:
    values.sort()

    def ok(t: int) -> bool:
        return t >= threshold

    assert first_true(values, ok) == scan(values, ok)
    assert first_true(np.array(values, dtype=np.int64), ok) == scan(values, ok)
