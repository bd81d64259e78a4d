"""The one bisection over sorted candidate values.

The exact bounds and choices search for the least value T (a bottleneck time, a largest kernel time)
that some condition meets: every kernel's fewest cores meeting T fit the wafer, the smallest areas
meeting T fit the fabric. Those conditions only get easier as T grows (more candidates become
eligible), so the least T is among the candidates' own values and bisection over them, sorted, finds
it in about log2(n) tests. The allocation bound (``problem.objective``), the recomputation choice
(``opmodels.recompute``), the verifier's independent optimum (``plan.verify``) and the contest bounds
(``problem.contest_bounds``) all run it; it lives here, below them all, and knows nothing of what
the condition tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def first_true(values: Sequence[int] | np.ndarray, ok: Callable[[int], bool]) -> int | None:
    """The least of the ascending ``values`` meeting the monotone condition ``ok`` (False up to some
    value, True from it on), or None when none does (``values`` empty, or not even the last meets it).

    ``ok`` is called on ``int``s: first on the last value, then on the midpoints of the bisection."""
    if len(values) == 0 or not ok(int(values[-1])):
        return None
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(int(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return int(values[lo])
