"""Producer->consumer flows between kernels, with multicast groups, and the bytes crossing each cut.

A tensor read by several kernels is sent once and forked by the routers (multicast, as the op
model's row multicast already assumes): the flows of one tensor from its producer to its readers form
a *group*, and a link or cut they share carries the data once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.standard import ingress_bytes
from wsealloc.graph.kernels import KernelGraph


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


def flows(kgraph: KernelGraph, arch: Arch) -> Flows:
    """One flow per (producer, consumer, tensor) with its bytes per sample; groups per (producer, tensor)."""
    index = {k.name: i for i, k in enumerate(kgraph.kernels)}
    size: dict[tuple[int, int, str], int] = {}
    for e in kgraph.edges:
        key = (index[e.src], index[e.dst], e.tensor)
        size[key] = ingress_bytes(kgraph.kernels[index[e.dst]], kgraph.ops, e.tensor, arch)
    keys = sorted(size)
    groups: dict[tuple[int, str], int] = {}
    group = [groups.setdefault((s, tensor), len(groups)) for s, _, tensor in keys]
    return Flows(
        np.array([k[0] for k in keys], dtype=np.int64),
        np.array([k[1] for k in keys], dtype=np.int64),
        np.array([size[k] for k in keys], dtype=np.float64),
        np.array(group, dtype=np.int64),
    )


def crossing_bytes(n: int, fl: Flows) -> np.ndarray:
    """[n + 1] bytes crossing the cut in front of each position of the kernel sequence: every forward
    flow s -> t with s < cut <= t, a multicast group counted once (its largest flow still crossing)."""
    diff = np.zeros(n + 2)
    fwd = fl.src < fl.dst
    sizes = np.bincount(fl.group[fwd], minlength=int(fl.group.max(initial=-1)) + 1)
    single = fwd & (sizes[fl.group] == 1)
    np.add.at(diff, fl.src[single] + 1, fl.nbytes[single])
    np.add.at(diff, fl.dst[single] + 1, -fl.nbytes[single])
    for g in np.flatnonzero(sizes > 1).tolist():
        sel = fwd & (fl.group == g)
        order = np.argsort(-fl.dst[sel], kind="stable")
        dsts, peak = fl.dst[sel][order], np.maximum.accumulate(fl.nbytes[sel][order])
        # cuts in (next smaller dst, this dst] still carry the largest flow reaching this far
        lows = np.append(dsts[1:], fl.src[sel][0])
        np.add.at(diff, lows + 1, peak)
        np.add.at(diff, dsts + 1, -peak)
    out = np.cumsum(diff)[: n + 1]
    out[0] = 0.0
    return out
