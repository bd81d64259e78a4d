"""Cost models: a registry of per-op work functions and, per kernel, costs on an r x c grid.

``COST_MODELS`` maps a :class:`CostModelName` to its kernel -> work function; :func:`grid_costs`
dispatches work x grid shapes -> :class:`GridCosts` on the work's type. Three models: ``standard``
(wsealloc's tiled model), ``seed`` (the notebook's estimates) and ``ispd2020`` (Conv kernels by the
ISPD-2020 contest's conv formula, everything else standard).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost import ispd_conv, seed, standard
from wsealloc.cost.experts import experts_grid_costs, experts_work, is_experts
from wsealloc.cost.model import (
    BYTES_PER_WEIGHT,
    Checkpoints,
    CostModelName,
    CostOptions,
    Dataflow,
    ExpertsWork,
    GridCosts,
    IspdConvWork,
    KernelWork,
    RegionWork,
    SeedWork,
    StreamedWork,
    Work,
)
from wsealloc.cost.region import region_grid_costs
from wsealloc.cost.streaming import batched, streamed_grid_costs
from wsealloc.cost.training import SegmentPlace, TrainingWork, training_grid_costs
from wsealloc.errors import UsageError, choices_message
from wsealloc.graph.ir import OpGraph
from wsealloc.graph.kernels import Kernel

WorkFn = Callable[[Kernel, OpGraph, Arch, CostOptions], Any]
COST_MODELS: dict[CostModelName, WorkFn] = {
    CostModelName.STANDARD: standard.kernel_work,
    CostModelName.SEED: seed.kernel_work,
    CostModelName.ISPD2020: ispd_conv.kernel_work,
}


def cost_model_name(name: str) -> CostModelName:
    """Parse a ``--cost-model`` value, listing the choices on error."""
    try:
        return CostModelName(name)
    except ValueError:
        raise UsageError(choices_message("cost model", name, [m.value for m in CostModelName])) from None


def kernel_work(kernel: Kernel, graph: OpGraph, arch: Arch, options: CostOptions) -> Work:
    """Forward work of one kernel under the selected cost model (training wraps it: ``training_work``).
    A mixture-of-experts layer is costed by ``cost.experts`` under every model that tiles (the seed
    notebook's estimates have no form for it: refused, never costed as a dense layer)."""
    if is_experts(kernel):
        if options.model is CostModelName.SEED:
            raise UsageError(
                f"{graph.source}: kernel {kernel.name!r} is a mixture-of-experts layer, which the seed cost model cannot "
                "cost (it would charge every expert for every token); use --cost-model standard"
            )
        return experts_work(kernel, graph, arch, options)
    work: Work = COST_MODELS[options.model](kernel, graph, arch, options)
    return work


def training_work(
    forward: Work,
    options: CostOptions,
    *,
    input_grad: bool,
    loss: bool,
    in_flight: int,
    place: SegmentPlace | None = None,
    params: int | None = None,
    dtype_bytes: int = BYTES_PER_WEIGHT,
    fill_drain: int = 0,
    probs: tuple[int, bool] = (0, False),
) -> Work:
    """A kernel's training work (``cost.training``) from its forward work under ``options.train``. A
    conv under ``--cost-model ispd2020`` stays the contest's kernel: its formula already is forward,
    backward and weight update side by side (docs/cost-model.md, section 8). With a micro-batch
    (``options.train.micro_batch``) the forward is the micro-batch's (``cost.streaming.batched``), its
    samples in flight are micro-batches and a global batch adds ``fill_drain`` steps (``cost.training``).
    ``probs``: with ``--attention recomputed``, the bytes per sample of its inputs that are attention's
    S x S scores or probabilities and whether its output is one (``opmodels.table.attention_roles_of``);
    ``--checkpoints offwafer`` sets ``offwafer``."""
    train = options.train
    if isinstance(forward, IspdConvWork):
        return forward
    if isinstance(forward, ExpertsWork):
        raise UsageError(
            "training is not costed for mixture-of-experts layers (their backward routes gradients to the experts "
            "at work); solve the model for inference, without --train"
        )
    if train is None or not isinstance(forward, KernelWork):
        raise UsageError(
            f"training is costed for the standard cost model's kernels (not {type(forward).__name__}); "
            "use --cost-model standard or ispd2020 with --train"
        )
    micro = train.micro_batch
    work = TrainingWork(
        batched(forward, micro) if micro is not None else forward,
        input_grad,
        loss,
        in_flight,
        train.optimizer,
        train.batch,
        train.recompute,
        param_count=params,
        dtype_bytes=dtype_bytes,
        micro_batch=micro,
        fill_drain=fill_drain if micro is not None else 0,
        probs_in=probs[0] * (micro or 1),  # (a micro-batch's)
        probs_out=probs[1],
        offwafer=train.checkpoints is Checkpoints.OFFWAFER,
    )
    if place is None:
        return work
    inside = min(place.input_bytes * work.samples, work.stash_bytes)  # (a micro-batch's)
    return replace(
        work,
        segment=place.segment,
        segment_kernels=place.kernels,
        segment_input_bytes=inside,
        replay_window=place.replay_window,
        replays=place.replays,
    )


def grid_costs(
    work: Work, arch: Arch, options: CostOptions, dataflow: Dataflow, r: np.ndarray, c: np.ndarray, *, in_place: bool = False
) -> GridCosts:
    """Costs of one kernel on grid shapes, dispatched on the work's cost model. ``in_place``: the
    operands are already on the kernel's cores (kernels one after another on one grid); only the
    standard model with a calibrated ``arch.execution`` reads it (``standard.grid_costs``)."""
    if isinstance(work, RegionWork):
        return region_grid_costs(work, arch, options, r, c, grid_costs)
    if isinstance(work, ExpertsWork):
        return experts_grid_costs(work, arch, options, r, c, grid_costs, in_place=in_place)
    if isinstance(work, StreamedWork):
        return streamed_grid_costs(work, arch, options, r, c, grid_costs)
    if isinstance(work, TrainingWork):
        return training_grid_costs(work, arch, options, r, c, grid_costs, recompute=dataflow is Dataflow.TRAIN_RECOMPUTE)
    if isinstance(work, SeedWork):
        return seed.grid_costs(work, arch, options, dataflow, r, c)
    if isinstance(work, IspdConvWork):  # before the standard model: it is a KernelWork too
        return ispd_conv.grid_costs(work, arch, options, dataflow, r, c)
    return standard.grid_costs(work, arch, options, dataflow, r, c, in_place=in_place)


__all__ = [
    "COST_MODELS",
    "CostModelName",
    "CostOptions",
    "Dataflow",
    "ExpertsWork",
    "GridCosts",
    "IspdConvWork",
    "KernelWork",
    "RegionWork",
    "SeedWork",
    "StreamedWork",
    "TrainingWork",
    "Work",
    "cost_model_name",
    "grid_costs",
    "kernel_work",
    "training_work",
]
