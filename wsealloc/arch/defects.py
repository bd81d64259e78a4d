"""The wafer's defective cores: a function of the arch alone (its listed cores and a seeded random
share), so the op-model tables (a pinned kernel's rectangles must miss them), the placement and
``verify`` all see the same cores."""

from __future__ import annotations

import numpy as np


def defect_mask(rows: int, cols: int, cores: tuple[tuple[int, int], ...], rate: float, seed: int) -> np.ndarray:
    """Defective cores of the wafer: the listed ones plus a seeded random share ``rate``."""
    mask = np.zeros((rows, cols), dtype=bool)
    for r, c in cores:
        if 0 <= r < rows and 0 <= c < cols:
            mask[r, c] = True
    if rate > 0:
        mask |= np.random.default_rng(seed).random((rows, cols)) < rate
    return mask
