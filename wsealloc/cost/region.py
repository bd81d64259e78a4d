"""Regions: several kernels sharing one grid of cores in time (cores shared in time, issue 23).

A region runs its kernels one after another on the same r x c cores: its time per sample (or per
token) is the sum of its kernels' latencies, and its SRAM holds every kernel's weights and state (KV
caches) at once, so those parts add up, while the stream buffers serve one kernel at a time (the
largest member's suffice). Each member runs its fastest dataflow on the
region's grid (cores beyond a member's split extents idle while it runs: the grid is the region's,
not the member's; padding waste is no legality rule inside a region). One kernel per region is
today's layer pipeline; one region for all is WaferLLM's mapping.

A region is a cost-model object like a kernel's work (:class:`RegionWork`, its own
``Dataflow.REGION``): the enumeration, the allocation, the placement, the plan and the verifier treat
it as one unit (``opmodels.regions`` builds the cost table of regions).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import NO_FIT_WASTE, CostOptions, GridCosts, RegionWork, SramParts, StreamedWork

GridFn = Callable[..., GridCosts]  # cost.grid_costs: (work, arch, options, dataflow, r, c, *, in_place)

# A member's costs on a region's grids, remembered across region tables: the same regions are costed
# when a wafer's regions are chosen, when its table of regions is built and again when its plan is
# made, and a model's repeated layers hold equal members on equal grids (Qwen3-235B over 13 wafers:
# 1.3 s of its 1.5 s of plan making). A pure function of its key; bounded by the bytes it holds (the
# arrays and about 2 KB of objects an entry, measured: one-shape entries, the most common, are 2.2 KB),
# the oldest forgotten first.
MEMO_BYTES = 64 * 2**20
ENTRY_OVERHEAD_BYTES = 2048
_memo: OrderedDict[tuple[Any, ...], GridCosts] = OrderedDict()
_memo_held = [0]  # bytes
_memo_lock = threading.Lock()


def _entry_bytes(g: GridCosts) -> int:
    """What an entry holds: its arrays (``rows.size`` entries of about a dozen of them) and its objects."""
    return ENTRY_OVERHEAD_BYTES + 12 * 8 * int(g.rows.size)


def _member_costs(member: Any, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn) -> GridCosts:
    """``fastest_on``'s costs of a region's member (its operands in place), remembered (``MEMO_BYTES``).
    The result is only read (a region's sums are new arrays)."""
    key = (member.cost_key if isinstance(member, StreamedWork) else member, arch, options, grid_fn, r.tobytes(), c.tobytes())
    with _memo_lock:
        g = _memo.get(key)
        if g is not None:
            _memo.move_to_end(key)
            return g
    g = fastest_on(member, arch, options, r, c, grid_fn, in_place=True)[1]
    with _memo_lock:
        if key not in _memo:
            _memo[key] = g
            _memo_held[0] += _entry_bytes(g)
        while _memo_held[0] > MEMO_BYTES and len(_memo) > 1:
            _, old = _memo.popitem(last=False)
            _memo_held[0] -= _entry_bytes(old)
    return g


def fastest_on(
    work: Any, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn, *, in_place: bool = False
) -> tuple[np.ndarray, GridCosts]:
    """Per grid shape, the member's fastest dataflow (index into ``work.dataflows()``) and its costs;
    ``in_place``: its operands are on its cores already (a region's members: ``cost.grid_costs``)."""
    best_df: np.ndarray | None = None
    best: GridCosts | None = None
    for i, df in enumerate(work.dataflows()):
        g = grid_fn(work, arch, options, df, r, c, in_place=in_place)
        if best is None or best_df is None:
            best, best_df = g, np.zeros(np.asarray(r).size, dtype=np.int64)
            continue
        faster = g.latency < best.latency
        best_df = np.where(faster, i, best_df)
        best = best.where(faster, g)
    assert best is not None and best_df is not None
    return best_df, best


def region_grid_costs(
    work: RegionWork, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn
) -> GridCosts:
    """Costs of a region on every grid shape: its members' latencies, compute, NoC and SRAM parts
    summed (each member on its fastest dataflow there); a member that cannot be laid on the grid at all
    (``NO_FIT_WASTE``) makes the region not fit."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    zero = np.zeros(r.size, dtype=np.float64)
    latency = np.zeros(r.size, dtype=np.int64)
    compute, noc, weights, state, buffers = zero.copy(), zero.copy(), zero.copy(), zero.copy(), zero.copy()
    no_fit = np.zeros(r.size, dtype=bool)
    stream: np.ndarray | None = None
    for member in work.members:
        # one after another on the region's cores: each member's operands are in place (the one before
        # it left them there); the region's ingress is the placement's communication. Equal members (a
        # model's repeated layers) are costed once
        g = _member_costs(member, arch, options, r, c, grid_fn)
        parts = g.sram_parts()
        latency = np.minimum(latency + g.latency, 2**62)
        compute += g.compute_cycles
        noc += g.noc_cycles
        weights += parts.weights
        state += parts.state
        buffers = np.maximum(buffers, parts.buffers)  # one member streams at a time: its buffers are reused
        no_fit |= g.waste >= NO_FIT_WASTE
        if g.stream_cycles is not None:  # streamed members: their streams one after another
            stream = g.stream_cycles if stream is None else stream + g.stream_cycles
    return GridCosts(
        rows=r,
        cols=c,
        compute_cycles=compute,
        noc_cycles=noc,
        sram_bytes=weights + state + buffers,
        latency=latency,
        waste=np.where(no_fit, NO_FIT_WASTE, 0.0),
        parts=SramParts(weights, state, buffers),
        stream_cycles=stream,
    )
