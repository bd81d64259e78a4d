"""Training in the layer pipeline: each kernel's forward, backward and weight update on its own grid.

A training kernel (:class:`TrainingWork`) is the forward kernel's work with what training adds,
*time-shared* on the kernel's rectangle (the ISPD-2020 contest's conv kernel lays the three side by
side instead; time-sharing keeps one grid whose every core serves each phase): per sample the forward,
then the backward when that sample's gradient comes back, and the update of the weights once per
``batch`` samples. docs/cost-model.md, section 11, states every rule below and why.

* **Backward work.** A MAC kernel's backward is its forward's transposed products on the same grid: the
  input gradient dA = dOut . B^T (not for a kernel fed by the model's inputs only: nothing upstream
  needs it) and the weight gradient dB = A^T . dOut (a parameter B), or the second operand's gradient
  (an activation B, as in attention): each as many MACs as the forward, on the same tiles, streaming
  the same operand sizes, so each costs the forward's latency on that grid. A vector kernel's backward
  is ``BACKWARD_VECTOR_FACTOR`` times its forward (the local derivative and its product with the
  incoming gradient). The last kernel also computes the loss and its gradient (``LOSS_OPS_PER_ELEMENT``
  vector ops per output element).
* **Update.** Once per ``batch`` samples each core updates the parameters it holds: the optimizer's
  vector ops per parameter (``Optimizer.ops_per_param``) at the core's vector rate.
* **Memory.** Mixed precision (fp16 weights and activations, fp32 master weights, gradient
  accumulators and optimizer state): per parameter the cores hold its fp16 weight (the forward's
  weights part), an fp32 gradient accumulator (2x the weight's bytes) and the optimizer's state
  (``Optimizer.state_bytes_per_param``: the fp32 master weight, then momentum, then Adam's second
  moment). The **stash**: each kernel keeps its input activations (both operands of a matmul of two
  activations) of every sample in flight between its forward and its backward, spread over its cores.
  In a pipeline of D stages in which a sample moves one stage per step forward and then back, a kernel
  at stage d (0 = first) sees sample s's forward at step t and its backward at step t + 2(D - 1 - d)
  (the last stage runs the loss and turns the sample around within its step), and one new sample
  enters per step: from its forward to the end of its backward it holds the inputs of the
  ``2 (D - 1 - d) + 1`` samples whose forwards ran in steps t .. t + 2(D - 1 - d) (``in_flight``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost.model import (
    BACKWARD_VECTOR_FACTOR,
    GRAD_BYTES_PER_PARAM,
    CostOptions,
    GridCosts,
    SramParts,
    TrainingWork,
    fits_then_fastest,
)
from wsealloc.cost.region import GridFn
from wsealloc.graph.ir import OpGraph


def in_flight(depth: int, stages: int) -> int:
    """Samples a kernel at pipeline stage ``depth`` (0 = first) of ``stages`` keeps (module docstring)."""
    return 2 * (stages - 1 - depth) + 1


def segment_length(stages: int) -> int:
    """Pipeline stages per recomputation segment: ceil(sqrt(D)) (module docstring, "Recomputation")."""
    return max(1, math.isqrt(max(stages - 1, 0)) + 1) if stages > 1 else 1


def segment_starts(crossing: list[int], stages: int, length: int | None = None) -> list[int]:
    """The first stage of each recomputation segment (module docstring, "Recomputation"): about every
    L = ``length`` stages (``segment_length`` by default), each boundary placed where the least is live
    across it. ``crossing[b]``: bytes per sample produced before stage b and read at or after it (what a
    segment starting at b keeps as its checkpoint). From a segment's start s the next one starts in
    [s + ceil(L/2), s + L + L // 2] (within the stages), at the least ``crossing``, the one nearest s + L
    among equals."""
    length = length or segment_length(stages)
    starts = [0]
    while starts[-1] + length < stages:
        s = starts[-1]
        window = range(s + max(1, -(-length // 2)), min(s + length + length // 2, stages - 1) + 1)
        starts.append(min(window, key=lambda b: (crossing[b], abs(b - s - length), b)))
    return starts


def replay_window(depth: int, last: int) -> int:
    """Samples a recomputing kernel at stage ``depth`` keeps its replayed inputs: 2 (t - d) + 1, t = ``last``
    the last stage of its segment (module docstring, "Recomputation")."""
    return 2 * (last - depth) + 1


# ops that use a tensor as a mask, an index or a shape, never as a value a gradient reaches
_NOT_TRAINED = frozenset(
    {
        "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
        "Expand", "Reshape", "Cast", "CastLike", "Shape", "Size", "Slice", "Range", "Trilu",
        "ConstantOfShape", "Tile", "Unsqueeze", "Squeeze", "Pow",
    }
)  # fmt: skip


def constants(graph: OpGraph) -> frozenset[str]:
    """The initializers of a graph that are not trained: non-float ones (masks, indices), scalars (a
    scale, an exponent, a fill value), and float ones only masks, shapes or exponents read (a causal
    mask exported as a tensor). Every other initializer a kernel reads is a parameter (``parameters``)."""
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            readers.setdefault(name, set()).add(node.op_type)
    out = set()
    for name, info in graph.tensors.items():
        ops = readers.get(name, set())
        if not info.is_float or info.numel <= 1 or (ops and ops <= _NOT_TRAINED):
            out.add(name)
    return frozenset(out)


def parameters(weights: tuple[str, ...], graph: OpGraph, fixed: frozenset[str]) -> int:
    """Trainable parameters among a kernel's ``weights`` (elements), ``fixed`` the graph's :func:`constants`."""
    return sum(graph.tensors[w].numel for w in weights if w not in fixed)


@dataclass(frozen=True)
class SegmentPlace:
    """Where a kernel sits in its recomputation segment (the fields of :class:`TrainingWork` it sets)."""

    segment: int  # (stage // segment_length) x wafers + wafer
    kernels: int  # kernels of the segment in the whole model
    input_bytes: int  # stash bytes per sample produced by kernels of the segment
    replay_window: int
    replays: bool  # a kernel of the segment consumes its output


@dataclass(frozen=True)
class Phases:
    """A training kernel on grid shapes, phase by phase (cycles per sample, arrays over the shapes)."""

    forward_dataflow: np.ndarray  # index into the forward's dataflows()
    forward: np.ndarray
    backward: np.ndarray
    update: np.ndarray  # a 1/batch share of one update (micro-batching: the whole update)
    recompute: np.ndarray  # the forward again (recomputation), else 0
    # micro-batching: forward, backward and recompute are one micro-batch's, a global batch of
    # ``samples`` samples takes ``steps`` of them (its micro-batches, the fill and the drain) and one update
    steps: int = 1
    samples: int = 1

    @property
    def total(self) -> np.ndarray:
        """Cycles per sample of the whole training step: (steps x (forward + backward + recompute) +
        update) / samples, rounded up (the forward, backward and update of one sample without micro-batches)."""
        step = self.forward + self.backward + self.recompute
        return -(-(step * self.steps + self.update) // self.samples)


def phases_on(
    work: TrainingWork, g: GridCosts, df: np.ndarray, arch: Arch, r: np.ndarray, c: np.ndarray, *, recompute: bool = False
) -> Phases:
    """The phases of a training kernel whose forward costs ``g`` (dataflow index ``df``) on the shapes."""
    vec_rate = float(arch.vector_ops_per_cycle)
    if work.forward.is_mac:
        backward = g.latency * work.gradients
        extra_vec = BACKWARD_VECTOR_FACTOR * float(work.forward.vector_ops) + work.loss_ops
        # the epilogues' derivatives and the loss, over the grid's cores (the MAC products carry the rest)
        backward = backward + np.ceil(extra_vec / (r * c) / vec_rate).astype(np.int64)
    else:
        backward = g.latency * BACKWARD_VECTOR_FACTOR + np.ceil(work.loss_ops / (r * c) / vec_rate).astype(np.int64)
    if work.probs_out:  # attention recomputed: the backward computes its S x S output again (FlashAttention)
        backward = backward + g.latency
    # each core updates its share of the kernel's distinct parameters (a dataflow that replicates the
    # weights, os, has every replica's copy sent the new values along its column, as the weights came)
    params_per_core = work.params / (r * c).astype(np.float64)
    # micro-batching: the whole update once per global batch (Phases.total spreads it over the samples)
    share = 1 if work.micro_batch is not None else work.batch
    update = np.ceil(params_per_core * work.optimizer.ops_per_param / vec_rate / share).astype(np.int64)
    forward = g.latency.astype(np.int64)
    # the replay: a kernel whose output a kernel of its segment consumes runs its forward again
    again = forward if recompute and work.replays else np.zeros_like(forward)
    samples = work.batch if work.micro_batch is not None else 1
    return Phases(df, forward, backward.astype(np.int64), update, again, work.steps, samples)


def training_grid_costs(
    work: TrainingWork,
    arch: Arch,
    options: CostOptions,
    r: np.ndarray,
    c: np.ndarray,
    grid_fn: GridFn,
    *,
    recompute: bool = False,
) -> GridCosts:
    """Costs of a training kernel on every grid shape (module docstring): the phases' cycles summed,
    the SRAM by part (weights, gradients, optimizer state, stash, buffers); ``recompute``: the stash of
    one sample and the forward twice. On each shape the forward's dataflow whose whole step fits the
    SRAM and is the fastest (the one needing least SRAM when none fits): a dataflow that replicates the
    weights, ``os``, replicates their gradients too."""
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    held = offwafer_cycles(work, arch, r, c) if recompute else np.zeros(r.size, dtype=np.int64)
    best: GridCosts | None = None
    for i, dataflow in enumerate(work.forward.dataflows()):
        g = grid_fn(work.forward, arch, options, dataflow, r, c)
        ph = phases_on(work, g, np.full(r.size, i, dtype=np.int64), arch, r, c, recompute=recompute)
        here = _training_costs(work, g, ph, r, c, recompute, held)
        best = here if best is None else fits_then_fastest(best, here, arch.usable_sram_bytes)
    assert best is not None  # every kernel has a dataflow
    return best


def offwafer_cycles(work: TrainingWork, arch: Arch, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Cycles per sample a recomputing kernel's checkpoint held off the wafer (``work.offwafer``) takes
    over the off-wafer link, each way (out in the forward, in again for the backward, full duplex): its
    checkpoint bytes per sample over the link's share of the kernel's r x c cores (the wafer's
    ``cluster.offwafer_bytes_per_s`` spread over its cores: the kernels of a layer pipeline stream
    at once, each through its share). 0 without a checkpoint off the wafer."""
    bytes_ = work.checkpoint_bytes if work.offwafer else 0
    if not bytes_:
        return np.zeros(np.asarray(r).size, dtype=np.int64)
    bw = arch.cluster.offwafer_bytes_per_s
    if bw is None:
        raise ValueError(f"{arch.name} has no cluster.offwafer_bytes_per_s: --checkpoints offwafer needs the off-wafer bandwidth")
    share = bw / arch.clock_hz * (np.asarray(r) * np.asarray(c)).astype(np.float64) / arch.total_cores
    return np.ceil(bytes_ / work.samples / share).astype(np.int64)


def _training_costs(
    work: TrainingWork, g: GridCosts, ph: Phases, r: np.ndarray, c: np.ndarray, recompute: bool, held: np.ndarray
) -> GridCosts:
    """The training step on the shapes with the forward costing ``g`` and the phases ``ph``; ``held``:
    the off-wafer link's cycles per sample of a checkpoint held off the wafer (the step takes at least
    that: ``offwafer_cycles``)."""
    parts = g.sram_parts()
    cores = (r * c).astype(np.float64)
    if work.forward.weight_b:  # a gradient accumulator beside every weight the cores hold (replicas included)
        grads = parts.weights * (GRAD_BYTES_PER_PARAM / work.dtype_bytes)
    else:  # the weights part is an activation's tile: only the few parameters (a bias, a scale) accumulate
        grads = np.ceil(work.params * GRAD_BYTES_PER_PARAM / cores)
    # the optimizer's state once per parameter, spread like the update (gradients accumulate per replica)
    optimizer = np.ceil(work.params * work.optimizer.state_bytes_per_param / cores)
    stash = np.ceil(work.kept_stash_bytes(recompute) / cores)
    train_parts = SramParts(parts.weights, parts.state, parts.buffers, grads=grads, optimizer=optimizer, stash=stash)
    # the backward (and a recomputed forward) on the forward's resources
    # per sample: micro-batching runs ``steps`` micro-batches (fill and drain included) per global batch
    ratio = (ph.forward + ph.backward + ph.recompute) / np.maximum(ph.forward, 1) * (ph.steps / ph.samples)
    return GridCosts(
        rows=g.rows,
        cols=g.cols,
        compute_cycles=g.compute_cycles * ratio + ph.update / ph.samples,
        noc_cycles=g.noc_cycles * ratio,
        sram_bytes=train_parts.total,
        latency=np.minimum(np.maximum(ph.total, held), 2**62),
        waste=g.waste,
        parts=train_parts,
    )
