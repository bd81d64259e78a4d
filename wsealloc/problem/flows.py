"""Producer->consumer flows between kernels, with multicast groups, and the bytes crossing each cut.

A tensor read by several kernels is sent once and forked by the routers (multicast, as the op
model's row multicast already assumes): the flows of one tensor from its producer to its readers form
a *group*, and a link or cut they share carries the data once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.opmodels import CostTable


@dataclass(frozen=True)
class Flows:
    """Producer->consumer flows between kernels (indices in kernel order), one per tensor, bytes per sample.

    ``group`` numbers the multicast groups: the flows of one tensor from its producer to each of its
    readers share a group, and a link they share carries the data once (the router forwards each
    wavelet to several outputs, as the op model's row multicast already assumes)."""

    src: np.ndarray  # int64
    dst: np.ndarray  # int64
    nbytes: np.ndarray  # float64
    group: np.ndarray  # int64

    def pairs(self) -> list[tuple[int, int, float]]:
        """(producer, consumer, bytes) with the tensors between one pair of kernels added up."""
        total: dict[tuple[int, int], float] = {}
        for s, t, b in zip(self.src.tolist(), self.dst.tolist(), self.nbytes.tolist(), strict=True):
            total[(s, t)] = total.get((s, t), 0.0) + b
        return [(s, t, b) for (s, t), b in sorted(total.items())]


def flows(costs: CostTable) -> Flows:
    """One flow per (producer, consumer, tensor) with its bytes per sample (the cost table's edges);
    groups per (producer, tensor); in training also each gradient flowing back (consumer to producer)."""
    keys = [(e.src, e.dst, e.tensor) for e in costs.edges]
    groups: dict[tuple[int, str], int] = {}
    group = [groups.setdefault((s, tensor), len(groups)) for s, _, tensor in keys]
    src = [e.src for e in costs.edges]
    dst = [e.dst for e in costs.edges]
    nbytes = [e.nbytes for e in costs.edges]
    if costs.options.train is not None:
        # training: every consumer sends the gradient of what it read back to its producer, as many
        # bytes, each its own flow (gradients from several consumers are summed at the producer)
        group += list(range(len(groups), len(groups) + len(keys)))
        src, dst, nbytes = src + dst, dst + src, nbytes + nbytes
    return Flows(
        np.array(src, dtype=np.int64),
        np.array(dst, dtype=np.int64),
        np.array(nbytes, dtype=np.float64),
        np.array(group, dtype=np.int64),
    )


def crossing_bytes(n: int, fl: Flows) -> np.ndarray:
    """[n + 1] bytes crossing the cut in front of each position of the kernel sequence: every flow
    between s and t crosses the cuts c with min(s, t) < c <= max(s, t), whichever way it runs (a
    gradient flowing back crosses them as an activation flowing forward does); a multicast group is
    counted once (its largest flow still crossing)."""
    diff = np.zeros(n + 2)
    lo, hi = np.minimum(fl.src, fl.dst), np.maximum(fl.src, fl.dst)
    moving = lo < hi
    sizes = np.bincount(fl.group[moving], minlength=int(fl.group.max(initial=-1)) + 1)
    single = moving & (sizes[fl.group] == 1)
    np.add.at(diff, lo[single] + 1, fl.nbytes[single])
    np.add.at(diff, hi[single] + 1, -fl.nbytes[single])
    for g in np.flatnonzero(sizes > 1).tolist():
        sel = moving & (fl.group == g)
        src, dst, size = int(fl.src[sel][0]), fl.dst[sel], fl.nbytes[sel]
        ahead, behind = dst > src, dst < src
        if ahead.any():  # cuts in (next nearer reader, this reader] carry the largest flow reaching this far
            order = np.argsort(-dst[ahead], kind="stable")
            far, peak = dst[ahead][order], np.maximum.accumulate(size[ahead][order])
            np.add.at(diff, np.append(far[1:], src) + 1, peak)
            np.add.at(diff, far + 1, -peak)
        if behind.any():  # the same, mirrored: cuts in (this reader, next nearer reader]
            order = np.argsort(dst[behind], kind="stable")
            far, peak = dst[behind][order], np.maximum.accumulate(size[behind][order])
            np.add.at(diff, far + 1, peak)
            np.add.at(diff, np.append(far[1:], src) + 1, -peak)
    out = np.cumsum(diff)[: n + 1]
    out[0] = 0.0
    return out
