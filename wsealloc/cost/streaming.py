"""Weight streaming: one kernel at a time on the whole wafer, its weights streamed in from off-wafer
memory (docs/cost-model.md, section 12).

The vendor's mode for models whose weights do not fit the wafer ("Cerebras execution modes"): the
wafer runs one layer at a time for a whole batch of ``B`` samples, forward then (training) backward;
the layer's weights stream in from off-wafer memory for each pass and, training, its weight gradients
stream out (the optimizer runs off the wafer); the activations stay on the wafer. The batch folds
into the kernel's rows (:func:`batched`: the wafer tiles one matrix B times taller), and a kernel's
turn lasts as long as the slower of its compute and its stream:

    forward turn  = max(forward of the batch,  W / bandwidth)
    replay turn   = max(its forward again, W / bandwidth)      (a recomputing segment's replay)
    backward turn = max(backward of the batch, W / bandwidth)

(the backward streams the weights in again and the gradients out at once: the link is taken as full
duplex, ``cluster.offwafer_bytes_per_s`` each way). The kernel's time per sample is its turns over B.
Its SRAM per core, on the whole wafer: the streamed weight tile double-buffered (and, training, its
fp32 gradient accumulators) and the batch's activations passing through (``buffers``: one kernel at a
time), and the stash (``state``: training keeps every kernel's input for the whole batch until its
backward). Recomputation goes by segment (``cost.training``, "Recomputation"): a recomputing segment
keeps only its checkpoint (its kernels' inputs from outside it) and, when the backward reaches it,
replays its forward, holding the regenerated inputs until its backward is done; one segment replays
at a time, so the pass's peak holds every kept stash, every checkpoint and the largest replay (charged
to that segment's kernels, ``StreamedWork.replayed``). A region of all the kernels on the whole wafer
(``cost.region``) adds the stashes and keeps the largest buffers: that region is the streamed plan.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import (
    GRAD_BYTES_PER_PARAM,
    STAT_BYTES_PER_ROW,
    CostOptions,
    GridCosts,
    KernelWork,
    SramParts,
    StreamedWork,
    TrainingWork,
    fits_then_fastest,
)
from wsealloc.cost.region import GridFn
from wsealloc.cost.training import phases_on


def bytes_per_cycle(arch: Arch) -> float:
    """Off-wafer bytes per core clock cycle, each way (``cluster.offwafer_bytes_per_s``)."""
    bw = arch.cluster.offwafer_bytes_per_s
    if bw is None:
        raise ValueError(f"{arch.name} has no cluster.offwafer_bytes_per_s: weight streaming needs the off-wafer bandwidth")
    return float(bw) / float(arch.clock_hz)


def streamed_grid_costs(
    work: StreamedWork, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn
) -> GridCosts:
    """A kernel's streamed turn on every grid shape (the module docstring), per sample of the batch: on
    each shape the fastest of its forward's dataflows whose SRAM fits (the one needing least SRAM when
    none does)."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    best: GridCosts | None = None
    split: list[tuple[int, GridCosts]] = []
    for k, here in _turns(work, arch, options, r, c, grid_fn):
        if k > 1:
            split.append((k, here))
            continue
        best = here if best is None else fits_then_fastest(best, here, arch.usable_sram_bytes)
    assert best is not None  # every kernel has a dataflow
    # strips only where they need no more SRAM a core than the whole wafer's turn: the region's SRAM adds
    # every kernel's stash to the largest buffers, so a faster kernel must not take room from the rest.
    # Attention recomputed (its SRAM the operands' blocks): its stash is the same on strips, and its
    # buffers may take what the pass already holds for its other kernels (``room``: the region keeps the
    # largest buffers, so up to that takes no room from the rest)
    whole = best.sram_bytes
    flash = bool(work.probs_in or work.probs_out)
    for _, here in split:
        if flash:
            fits = (here.sram_parts().state <= best.sram_parts().state) & (
                here.sram_parts().buffers <= np.maximum(best.sram_parts().buffers, work.room)
            )
        else:
            fits = here.sram_bytes <= whole
        better = fits & (here.latency < best.latency)
        if better.any():
            best = best.where(better, here)
    return best


def strips(work: StreamedWork, cols: int) -> list[int]:
    """How many side-by-side strips of the wafer a kernel's turn may run its samples on: 1, and for a
    kernel without parameters (attention's products of two activations, softmax), which has no
    weights to stream or share, every count k up to its samples and the columns that gives each strip
    ceil(batch / k) samples a different size (the least k of each)."""
    if work.forward.weight_bytes or work.batch == 1:
        return [1]
    counts: dict[int, int] = {}
    for k in range(1, min(work.batch, cols) + 1):
        counts.setdefault(-(-work.batch // k), k)
    return sorted(counts.values())


def _turns(
    work: StreamedWork, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn
) -> list[tuple[int, GridCosts]]:
    """The kernel's turn for each of its forward's dataflows and each strip count k (``strips``): k
    strips of c // k columns side by side, each ceil(batch / k) samples at once."""
    out = []
    for k in strips(work, int(c.max())):
        sub = -(-work.batch // k)
        forward = batched(work.forward, sub)
        narrow = np.maximum(c // k, 1)
        for df in forward.dataflows():
            g = grid_fn(forward, arch, options, df, r, narrow, in_place=True)
            out.append((k, _streamed(work, g, arch, r, c, sub=sub, narrow=narrow)))
    return out


def streamed_floor(
    work: StreamedWork, arch: Arch, options: CostOptions, r: np.ndarray, c: np.ndarray, grid_fn: GridFn
) -> np.ndarray:
    """The least time per sample a kernel's streamed turn can take on each shape: its fastest forward
    dataflow, SRAM ignored (a lower bound over every dataflow and recomputation choice; the stash kept
    is never slower than recomputing)."""
    kept = replace(work, recompute=False)
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    turns = [here.latency for _, here in _turns(kept, arch, options, r, c, grid_fn)]
    return np.min(np.stack(turns), axis=0)


def streamed_stash_bytes(work: StreamedWork) -> int:
    """Stash bytes per sample a streamed training kernel holds on the wafer at the pass's peak (module
    docstring): all its inputs; recomputing, the segment's checkpoint (the inputs from outside its
    segment; none held off the wafer, ``offwafer``), plus the inputs from inside it when its segment's
    replay is the largest one (``replayed``). Attention recomputed: its S x S inputs (``probs_in``) are not
    kept; a softmax whose input and output are both S x S keeps its rows' statistics (``stat_bytes``)."""
    inner = work.inner
    if not isinstance(inner, TrainingWork):
        return 0
    kept = inner.stash_bytes - work.probs_in
    if not work.recompute:
        return kept + stat_bytes(work)
    inside = max(min(inner.segment_input_bytes, inner.stash_bytes) - work.probs_in, 0)
    checkpoint = 0 if work.offwafer else kept - inside
    # the replay regenerates the inputs from inside the segment and the softmax's statistics
    return checkpoint + (inside + stat_bytes(work) if work.replayed else 0)


def stat_bytes(work: StreamedWork) -> int:
    """Bytes per sample a softmax computed block by block keeps for its backward (one fp32 statistic a
    row of its S x S input): only with attention recomputed, on the kernel between the scores and the
    context product (``probs_in`` and ``probs_out`` both)."""
    if not (work.probs_out and work.probs_in):
        return 0
    return STAT_BYTES_PER_ROW * int(work.forward.rows)


def checkpoint_bytes(work: StreamedWork) -> int:
    """Bytes per sample of a recomputing kernel's checkpoint held off the wafer (``offwafer``): streamed
    out in its forward turn and in again before its backward; 0 otherwise."""
    inner = work.inner
    if not (work.offwafer and work.recompute and isinstance(inner, TrainingWork)):
        return 0
    inside = max(min(inner.segment_input_bytes, inner.stash_bytes) - work.probs_in, 0)
    return max(inner.stash_bytes - work.probs_in - inside, 0)


def batched(work: KernelWork, batch: int) -> KernelWork:
    """A kernel's work for ``batch`` samples at once: the batch folds into the output's rows (the tokens
    of a parameter-B matmul, the groups of an activation-B one: attention's heads), so the grid tiles
    one larger matrix, as a streamed pass does; weights are unchanged."""
    if batch == 1:
        return work
    weight_b = work.weight_b
    return replace(
        work,
        macs=work.macs * batch,
        vector_ops=work.vector_ops * batch,
        g=work.g if weight_b or not work.is_mac else work.g * batch,
        m=work.m * batch if weight_b or not work.is_mac else work.m,
        b_bytes=work.b_bytes if weight_b else work.b_bytes * batch,
        rows=work.rows * batch,
        in_bytes=work.in_bytes * batch,
        out_bytes=work.out_bytes * batch,
        state_bytes=work.state_bytes * batch,  # each sample (a request decoded) keeps its own KV cache
        b_state_bytes=work.b_state_bytes * batch,
    )


def _streamed(
    work: StreamedWork,
    g: GridCosts,
    arch: Arch,
    r: np.ndarray,
    c: np.ndarray,
    *,
    sub: int | None = None,
    narrow: np.ndarray | None = None,
) -> GridCosts:
    """The streamed turn of the whole batch with its batched forward costing ``g`` on the shapes; with
    strips (``_turns``), ``g`` is one strip's, ``sub`` samples on ``narrow`` columns, all strips at once."""
    batch = work.batch
    at_once = sub or batch  # samples one strip runs (the whole batch on the whole wafer)
    cols = narrow if narrow is not None else c
    inner = work.inner
    training = isinstance(inner, TrainingWork)
    if isinstance(inner, TrainingWork):
        whole = replace(inner, forward=batched(inner.forward, at_once), in_flight=1)
        ph = phases_on(whole, g, np.zeros(r.size, dtype=np.int64), arch, r, cols, recompute=work.recompute)
        # the update runs off the wafer; a replay is a turn of its own (its segment replays in order,
        # other kernels' weights streamed in between: this kernel's come in again)
        forward, backward, replay = ph.forward, ph.backward, ph.recompute
        if work.probs_out:  # attention recomputed: the backward computes its S x S output again (FlashAttention)
            backward = backward + forward
    else:
        forward, backward = g.latency.astype(np.int64), np.zeros(r.size, dtype=np.int64)
        replay = np.zeros(r.size, dtype=np.int64)
    stream = int(np.ceil(work.weight_bytes / bytes_per_cycle(arch)))
    # a checkpoint held off the wafer: out beside the weights coming in (the other way), in again beside
    # the backward's weights
    held = int(np.ceil(checkpoint_bytes(work) * batch / bytes_per_cycle(arch)))
    turn = np.maximum(forward, max(stream, held))
    streamed_cycles = max(stream, held)
    if isinstance(inner, TrainingWork):  # the weights in again while the fp32 gradients (4 B a parameter) go out
        out = int(np.ceil(inner.params * GRAD_BYTES_PER_PARAM / bytes_per_cycle(arch)))
        turn = turn + np.maximum(backward, max(stream + held, out))
        streamed_cycles += max(stream + held, out)
        if work.recompute and inner.replays:
            turn = turn + np.maximum(replay, stream)
            streamed_cycles += stream
    cores = (r * c).astype(np.float64)
    parts = g.sram_parts()
    tile = parts.weights  # the streamed weights' tile per core
    grads = tile * (GRAD_BYTES_PER_PARAM / inner.dtype_bytes) if isinstance(inner, TrainingWork) and work.weight_bytes else 0.0
    flows = work.in_bytes - work.probs_in + (0 if work.probs_out else work.out_bytes)
    passing = np.ceil(flows * at_once / (r * cols).astype(np.float64))
    if work.probs_in or work.probs_out:
        # attention recomputed: the S x S tensors exist a block at a time (one chunk of keys against a
        # core's queries), in place of the op model's whole S x S tile: the operands that pass are
        # double-buffered (one block arriving while one computes)
        op_buffers, op_state, passing = np.zeros(r.size), np.zeros(r.size), 2 * passing
    else:
        op_buffers, op_state = parts.buffers, parts.state
    # the batch's activations passing are held once: an op model that holds its operands' chunks and its
    # output tile (output stationary, a vector kernel's tile) holds them, one that streams its tokens
    # through a block at a time (weight stationary) needs them held beside it
    buffers = 2 * tile + grads + np.maximum(op_buffers, passing)
    stash = np.ceil(streamed_stash_bytes(work) * batch / cores) if training else np.zeros(r.size)
    state = op_state + stash
    streamed = SramParts(np.zeros(r.size), state, buffers)
    # micro-batching: a global batch is ``passes`` passes of ``batch`` samples (the last one padded)
    passes, samples = work.passes, work.samples
    ratio = (forward + backward + replay) / np.maximum(forward, 1) * (passes * batch / samples)
    return GridCosts(
        rows=r,
        cols=c,  # (the whole wafer, strips or not)
        # per sample, as the latency: the batch's compute and NoC cycles and the stream's, over the batch
        compute_cycles=g.compute_cycles * ratio / batch,
        noc_cycles=g.noc_cycles * ratio / batch,
        sram_bytes=streamed.total,
        latency=np.minimum(-(-(turn * passes) // samples), 2**62).astype(np.int64),
        waste=g.waste,
        parts=streamed,
        stream_cycles=np.full(r.size, -(-(streamed_cycles * passes) // samples), dtype=np.int64),
    )
