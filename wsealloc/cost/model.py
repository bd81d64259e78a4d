"""Shared types of the cost models: options, dataflows, per-kernel work and per-grid costs.

Units: cycles of the core clock, bytes. One integer scale everywhere: **1 unit = 1 cycle**; latencies
are whole cycles (ceil), which is also the scale the CP-SAT and PuLP backends use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from wsealloc.graph.contest import ConvArgs
from wsealloc.graph.opclass import KernelKind


class CostModelName(enum.Enum):
    """Which estimates to use: wsealloc's tiled model, the seed notebook's own formulas, or the
    ISPD-2020 contest's conv formula (Cerebras' published model) for Conv kernels, standard otherwise."""

    STANDARD = "standard"
    SEED = "seed"
    ISPD2020 = "ispd2020"


class Dataflow(enum.Enum):
    """How a kernel's work is laid over its r x c grid of cores."""

    # Weights resident and split (K over rows, N over cols); tokens/pixels stream through;
    # partial sums reduce down each column.
    WEIGHT_STATIONARY = "ws"
    # Output rows split over grid rows, output columns over grid cols; each core holds the whole
    # reduction dim K of its operand slice (weights replicated down the rows).
    OUTPUT_STATIONARY = "os"
    # Vector kernels: output rows over grid rows, cols over grid cols.
    VECTOR = "vec"
    # Seed notebook model: latency depends on the core count only.
    SEED = "seed"
    # The ISPD-2020 contest's conv kernel: a rectangle of h'w'(c'+1) rows x 3k' columns laid in the
    # grid, the execution arguments the fastest that fit it within the memory limit.
    ISPD_CONV = "ispd"
    # A region (cost.region): several kernels on one grid, one after another, each on its own fastest
    # dataflow there.
    REGION = "region"
    # Training (cost.training): a kernel's forward (its fastest dataflow), backward and update
    # time-shared on its grid.
    TRAIN = "train"
    # ... with recomputation: the kernel keeps no stash beyond the sample in its backward and runs its
    # forward again when that backward comes
    TRAIN_RECOMPUTE = "train-recompute"
    # Weight streaming (cost.streaming): a kernel on the whole wafer in its turn, its weights streamed
    # in from off-wafer memory for a batch of samples
    STREAM = "stream"
    # A mixture-of-experts layer (cost.experts): the grid cut into tiles, each holding one expert (or
    # several sharing it in time), the tokens dispatched to their k experts and combined back
    EXPERTS = "experts"


class Routing(enum.Enum):
    """How a mixture-of-experts layer's tokens pick their k experts (``--routing``; cost.experts)."""

    UNIFORM = "uniform"  # each token's k experts uniformly at random: the expected busiest tile
    WORST = "worst"  # every token on the same k experts: a bound on any routing


class Optimizer(enum.Enum):
    """The weight update of training: vector ops and fp32 state bytes per parameter (mixed precision)."""

    SGD = "sgd"  # master weight: w -= lr * g
    MOMENTUM = "momentum"  # master weight, velocity
    ADAM = "adam"  # master weight, first and second moments

    @property
    def ops_per_param(self) -> int:
        """Vector ops per parameter of one update (the fp16 copy of the master weight included)."""
        return {Optimizer.SGD: 3, Optimizer.MOMENTUM: 5, Optimizer.ADAM: 12}[self]

    @property
    def state_bytes_per_param(self) -> int:
        """fp32 bytes per parameter the optimizer keeps: the master weight and its moments."""
        return {Optimizer.SGD: 4, Optimizer.MOMENTUM: 8, Optimizer.ADAM: 12}[self]


class Recompute(enum.Enum):
    """Which kernels recompute their forward instead of keeping a stash (training)."""

    NONE = "none"  # every kernel keeps its stash
    ALL = "all"  # every recomputation segment recomputes
    AUTO = "auto"  # the allocation picks per segment, exactly (opmodels.recompute): recomputing where the stash does not fit


class Attention(enum.Enum):
    """How weight-streamed training keeps attention's scores and probabilities (``cost.streaming``)."""

    STORED = "stored"  # the S x S scores and probabilities pass and are stashed whole, as exported
    RECOMPUTED = "recomputed"  # neither passed whole nor stashed: computed block by block, recomputed in the backward


class Checkpoints(enum.Enum):
    """Where weight-streamed training keeps a recomputing segment's checkpoint (``cost.streaming``)."""

    WAFER = "wafer"  # in the wafer's SRAM
    OFFWAFER = "offwafer"  # streamed out to off-wafer memory in the forward, back in for the backward


class TrainingOptions(BaseModel):
    """Training in the layer pipeline (``--train``; cost.training): the optimizer and the samples per
    weight update."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    optimizer: Optimizer = Optimizer.ADAM
    batch: int = Field(1, ge=1, le=2**20)  # samples per weight update (1: every sample, as pipelined backpropagation)
    recompute: Recompute = Recompute.AUTO
    # pipeline stages per recomputation segment (None: about sqrt(D); a solve on one wafer searches a few
    # lengths and records the one its plan used: cost.training, "Recomputation")
    segment: int | None = Field(None, ge=1, le=2**16)
    # samples per micro-batch in the layer pipeline (``cost.training``, "Micro-batches"): set by the
    # pipeline strategy's decision (``--micro-batch``, or chosen), never by the request's cost options;
    # None: every sample its own step and no fill or drain (pipelined backpropagation)
    micro_batch: int | None = Field(None, ge=1, le=2**20)
    # weight streaming's memory forms (``cost.streaming``; the layer pipeline refuses the others)
    attention: Attention = Attention.STORED
    checkpoints: Checkpoints = Checkpoints.WAFER

    @model_serializer(mode="wrap")
    def _unset_micro(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # micro-batching's fields, and the streamed memory forms, appear only when set: every other plan
        # and request reads as before
        data: dict[str, Any] = handler(self)
        for key in ("micro_batch", "global_batch"):
            if key in data and data[key] is None:
                del data[key]
        for key, default in (("attention", Attention.STORED), ("checkpoints", Checkpoints.WAFER)):
            if key in data and data[key] in (default, default.value):
                del data[key]
        return data


class CostOptions(BaseModel):
    """Knobs of the cost model (recorded in every plan, as they are, so ``verify`` can recompute)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: CostModelName = CostModelName.STANDARD
    # Rows (tokens/pixels) of a stream block each core double-buffers for its input and output; data
    # streams through the mesh in 32-bit wavelets, so one row is enough to keep a core busy.
    stream_block_rows: int = Field(1, ge=1)
    # Op models whose tile padding wastes more than this share of the grid's work are rejected.
    max_padding_waste: float = Field(0.5, ge=0.0, le=1.0)
    allow_unknown_ops: bool = False
    # KV caches each kernel holding one keeps: one per request in flight (``--requests N``: N sequences
    # interleaved through the kernels each keep their cache)
    state_copies: int = Field(1, ge=1, le=2**20)
    # training: forward, backward and update per kernel (None: inference)
    train: TrainingOptions | None = None
    # how a mixture-of-experts layer's tokens reach their experts (cost.experts); written into plans
    # only when not the default, so every other plan reads as before
    routing: Routing = Routing.UNIFORM

    @model_serializer(mode="wrap")
    def _default_routing(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("routing") in (Routing.UNIFORM, Routing.UNIFORM.value):
            del data["routing"]
        return data


@dataclass(frozen=True)
class KernelWork:
    """Everything the standard cost model needs about one kernel (hashable: identical layers share it).

    MAC kernels are a generalized matmul out[g, m, n] = a[g, m, k] . b[g, k, n]; ``rows`` x ``cols``
    is the 2D view of the output used for tiling (for a parameter B, groups fold into the columns).
    """

    kind: KernelKind
    macs: int
    vector_ops: int
    g: int
    m: int
    n: int
    k: int
    weight_b: bool  # B is a parameter: enables the weight-stationary dataflow
    b_bytes: int  # bytes of the B operand (parameter, or per-sample activation)
    rows: int
    cols: int
    row_reduce: bool
    col_weight_bytes: int  # per-column parameters (bias, norm scale), split over grid columns
    shard_weight_bytes: int  # parameters sharded over all cores (embedding tables, big masks)
    in_bytes: int  # activation bytes entering per sample (B excluded when it is an activation)
    out_bytes: int  # activation bytes leaving per sample
    weight_bytes: int  # all parameter bytes of the kernel
    # resident state (KV caches, graph.state): all of it, and the part that is the B operand (its
    # stationary tile is the cache itself, not the expanded GQA view the MatMul reads)
    state_bytes: int = field(default=0, kw_only=True)
    b_state_bytes: int = field(default=0, kw_only=True)
    # a lookup table too large for the grid its output spans (one decode token's embedding row): its
    # rows are spread over grid rows too (0: the output's extents suffice)
    table_rows: int = field(default=0, kw_only=True)
    # KV caches held per kernel: one per request in flight (``CostOptions.state_copies``)
    state_copies: int = field(default=1, kw_only=True)
    # Recurrent kernels (LSTM, GRU, RNN anchors): ``steps`` dependent time steps, one after the other on
    # the same grid; g, m, n, k, rows and cols are ONE step's, macs, vector_ops, in/out bytes all steps'.
    # ``step_syncs``: dependent phases per step (each pays the grid's fill); ``feedback_bytes``: the hidden
    # state fed back to every grid row each step. 1, 1, 0 for every other kernel (docs/cost-model.md).
    steps: int = field(default=1, kw_only=True)
    step_syncs: int = field(default=1, kw_only=True)
    feedback_bytes: int = field(default=0, kw_only=True)
    # collectives a row reduction takes (softmax: max and sum; a norm: its statistics); only the
    # calibrated execution model (``Arch.execution``) reads it
    reductions: int = field(default=0, kw_only=True)

    @property
    def is_mac(self) -> bool:
        """True for MatMul/Gemm/Conv-family kernels."""
        return self.macs > 0 and self.k > 0

    def dataflows(self) -> tuple[Dataflow, ...]:
        """Dataflows this kernel supports."""
        if not self.is_mac:
            return (Dataflow.VECTOR,)
        if self.weight_b:
            return (Dataflow.WEIGHT_STATIONARY, Dataflow.OUTPUT_STATIONARY)
        return (Dataflow.OUTPUT_STATIONARY,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """Extents split over grid rows and grid cols (beyond them extra cores idle)."""
        if dataflow is Dataflow.WEIGHT_STATIONARY:
            return self.k, self.cols
        return max(self.rows, self.table_rows), self.cols


@dataclass(frozen=True)
class SeedWork:
    """The seed notebook's three per-op estimates, summed over a kernel's nodes."""

    kind: KernelKind
    compute: int  # notebook compute cost (MAC-ish units)
    comm: int  # bytes of intermediate inputs
    memory: int  # bytes of outputs
    macs: int  # wsealloc's own MAC count, for reporting
    vector_ops: int
    weight_bytes: int
    in_bytes: int
    out_bytes: int

    def dataflows(self) -> tuple[Dataflow, ...]:
        """The seed model has a single dataflow-free estimate."""
        return (Dataflow.SEED,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The seed model does not tile; any grid is allowed up to the wafer."""
        return 1 << 40, 1 << 40


@dataclass(frozen=True)
class IspdConvWork(KernelWork):
    """A Conv kernel under ``--cost-model ispd2020``: the standard work plus the conv read as the
    ISPD-2020 contest's conv kernel (``wsealloc/cost/ispd_conv.py``; docs/cost-model.md, section 8).

    A subclass of :class:`KernelWork` on purpose: everything that reads a kernel's MACs, bytes and
    epilogue (reports, allocation hints, placement flows) reads it unchanged; only the dataflow and
    the per-grid costs differ. Equality includes the class, so a conv never shares op models with
    the same conv under the standard model.
    """

    conv: ConvArgs  # H W (input image), R S (filter taps), C (input features per group), K, strides T U
    batch: int  # images per sample: each tile runs them one after the other
    halo_h: int  # rows of halo an input block carries: (R - 1) x dilation (the formula's R - 1)
    halo_w: int  # columns of halo: (S - 1) x dilation

    def dataflows(self) -> tuple[Dataflow, ...]:
        """Only the contest's conv mapping."""
        return (Dataflow.ISPD_CONV,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The upright rectangle's largest useful sides: H*W*(C+1) rows (h'=H, w'=W, c'=C) and 3K columns
        (k'=K). The grid sides come from these (the divisors of 3K are the widths 3k' with k' | K); the
        turned rectangle is one more option on the same grids."""
        cv = self.conv
        return cv.H * cv.W * (cv.C + 1), 3 * cv.K


@dataclass(frozen=True)
class RegionWork:
    """The kernels of one region, in the order they run (``cost.region``: several kernels sharing one
    grid in time; hashable: identical regions share op models)."""

    members: tuple[KernelWork | SeedWork | StreamedWork | ExpertsWork, ...]
    kind: KernelKind = KernelKind.REGION

    @property
    def macs(self) -> int:
        """MACs of every member."""
        return sum(int(m.macs) for m in self.members)

    @property
    def vector_ops(self) -> int:
        """Vector ops of every member."""
        return sum(int(m.vector_ops) for m in self.members)

    @property
    def weight_bytes(self) -> int:
        """Parameters of every member."""
        return sum(int(m.weight_bytes) for m in self.members)

    @property
    def state_bytes(self) -> int:
        """Resident state (KV caches) of every member."""
        return sum(int(getattr(m, "state_bytes", 0)) for m in self.members)

    @property
    def in_bytes(self) -> int:
        """Bytes entering the first member (the region's ingress)."""
        return int(self.members[0].in_bytes)

    @property
    def out_bytes(self) -> int:
        """Bytes leaving the last member."""
        return int(self.members[-1].out_bytes)

    def dataflows(self) -> tuple[Dataflow, ...]:
        """One: every member on the region's grid."""
        return (Dataflow.REGION,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The largest extents any member can split over the grid (beyond them every member idles)."""
        rows = cols = 1
        for m in self.members:
            for df in m.dataflows():
                er, ec = m.split_extents(df)
                rows, cols = max(rows, int(er)), max(cols, int(ec))
        return rows, cols


BYTES_PER_WEIGHT_DEFAULT = 2  # fp16 / bf16
# vector ops per router logit and token: the softmax's max, exp, sum and scale, and the top-k's compare
ROUTING_OPS_PER_LOGIT = 6


@dataclass(frozen=True)
class ExpertsWork:
    """A mixture-of-experts layer (``cost.experts``; an ONNX Runtime ``com.microsoft`` ``MoE`` or
    ``QMoE`` node): ``experts`` FFNs of ``hidden`` -> ``expert_ffn`` -> ``hidden``, every one resident,
    ``top_k`` of them at work for each of the ``tokens`` tokens of a sample. Hashable: the identical
    layers of a model share op models.

    The kernel's grid is cut into tiles, each holding one expert or several sharing it in time; how
    many tokens the busiest tile serves follows ``routing`` (``cost.experts``). MACs and vector ops
    are the active work (k experts per token), the weights all E experts' as stored."""

    experts: int
    top_k: int
    tokens: int  # tokens routed per sample (the rows of the MoE's input)
    hidden: int
    expert_ffn: int  # the expert's inner width f
    gated: bool  # SwiGLU-like: two input projections (fc1 and fc3, or fc1 fused 2f wide), else one
    routing: Routing
    expert_weight_bytes: int  # one expert's matrices as stored (QMoE: packed integers)
    expert_col_bytes: int  # one expert's biases and dequantization scales (per output column)
    act_ops: int  # vector ops per element of the activation
    in_bytes: int  # activation bytes entering per sample (the tokens and their router logits)
    out_bytes: int  # activation bytes leaving per sample
    epilogue_ops: int = 0  # vector ops per sample of elementwise nodes fused after the layer
    dtype_bytes: int = BYTES_PER_WEIGHT_DEFAULT
    kind: KernelKind = KernelKind.EXPERTS
    # expert parallelism (``opmodels.experts``): the layer's experts split into ``shards`` consecutive
    # kernels, this one holding experts [shard E/S, (shard + 1) E/S). Each shard gets every token and
    # serves the picks of its own experts; the first routes (softmax and top-k over all E logits, the
    # picks passed on with the tokens), each after the first adds its outputs to the partial sum it
    # receives, the last applies the epilogue. 1: the whole layer.
    shards: int = 1
    shard: int = 0

    @property
    def held(self) -> int:
        """Experts resident on this kernel: all E, or a shard's E / S."""
        return self.experts // self.shards

    @property
    def routes(self) -> bool:
        """Whether this kernel computes the routing (the whole layer, or its first shard)."""
        return self.shard == 0

    @property
    def receives_partial(self) -> bool:
        """Whether a partial sum of the layer's output enters with the tokens (a shard after the first)."""
        return self.shard > 0

    @property
    def picks(self) -> int:
        """(token, expert) picks per sample this kernel serves: all T k of the whole layer; a shard its
        share T k / S under uniform routing (expected), under the worst every pick it can take, T min(k, E/S)."""
        if self.shards == 1:
            return self.tokens * self.top_k
        if self.routing is Routing.WORST:
            return self.tokens * min(self.top_k, self.held)
        return self.tokens * self.top_k // self.shards

    @property
    def outside_ops(self) -> int:
        """Vector ops per sample outside the experts' tiles: its share of each token's k outputs scaled
        and summed (and the partial sum received added), the routing's softmax and top-k over the E
        logits where it routes, the fused epilogue where it ends the layer."""
        t, d = self.tokens, self.hidden
        combine = self.picks * d + (t * d if self.receives_partial else 0)
        routing = ROUTING_OPS_PER_LOGIT * self.experts * t if self.routes else 0
        last = self.shard == self.shards - 1
        return combine + routing + (self.epilogue_ops if last else 0)

    @property
    def projections(self) -> int:
        """Matrices per expert: 3 when gated (gate, up, down), else 2."""
        return 3 if self.gated else 2

    @property
    def macs(self) -> int:
        """MACs per sample of the active experts: k per token."""
        return self.picks * self.projections * self.hidden * self.expert_ffn

    @property
    def vector_ops(self) -> int:
        """Vector ops per sample: each active expert's activation (and gate product) and output scaled
        by its routing weight (a shard: its share of the picks), and ``outside_ops``."""
        per_pair = self.expert_ffn * (self.act_ops + int(self.gated)) + self.hidden  # the scale by its weight too
        active = self.picks * per_pair
        return active + self.outside_ops

    @property
    def weight_bytes(self) -> int:
        """Parameters of every expert it holds, as stored."""
        return self.held * (self.expert_weight_bytes + self.expert_col_bytes)

    @property
    def state_bytes(self) -> int:
        """No resident state (the KV caches are attention's)."""
        return 0

    @property
    def is_mac(self) -> bool:
        """A MAC kernel."""
        return True

    def dataflows(self) -> tuple[Dataflow, ...]:
        """One: the experts on tiles of the grid."""
        return (Dataflow.EXPERTS,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """Every expert on tiles as large as its widest projection splits (beyond them cores idle)."""
        side = max(self.hidden, self.expert_ffn * (1 + int(self.gated)))
        return self.held * side, self.held * side


# training (cost.training): mixed precision and the backward's rules (docs/cost-model.md, section 11)
BYTES_PER_WEIGHT = 2  # fp16 weights (mixed precision): the default of ``TrainingWork.dtype_bytes`` (the arch's)
GRAD_BYTES_PER_PARAM = 4  # fp32 gradient accumulators
BACKWARD_VECTOR_FACTOR = 2  # a vector op's backward: its local derivative, times the incoming gradient
LOSS_OPS_PER_ELEMENT = 5  # softmax cross-entropy over the last kernel's output: max, exp, sum, log, gradient


# the fp32 statistic per row a softmax whose probabilities are recomputed keeps for its backward (the
# log-sum-exp of the row: FlashAttention's L)
STAT_BYTES_PER_ROW = 4


@dataclass(frozen=True)
class TrainingWork:
    """One kernel in training (``cost.training``; hashable: identical layers at the same depth share op
    models)."""

    forward: KernelWork
    input_grad: bool  # computes the gradient of its input (False: fed by the model's inputs only)
    loss: bool  # the last kernel: the loss and its gradient
    in_flight: int  # samples whose input it keeps (module docstring)
    optimizer: Optimizer
    batch: int  # samples per weight update
    recompute: Recompute = Recompute.AUTO
    # its recomputation segment (``cost.training``, "Recomputation"): which one, how many kernels it has
    # in the whole model, the bytes of its stash produced inside it (regenerated by the replay), the
    # samples those are kept after a replay, and whether a kernel of the segment consumes its output
    # (it runs its forward again in the replay)
    segment: int = 0
    segment_kernels: int = 1
    segment_input_bytes: int = 0
    replay_window: int = 1
    replays: bool = False
    # trainable parameters (``cost.training.parameters``: float tensors, not scalars or masks; None: the
    # weight bytes over ``dtype_bytes``) and the bytes of one weight or activation element (the arch's)
    param_count: int | None = None
    dtype_bytes: int = BYTES_PER_WEIGHT
    # micro-batching (``cost.training``, "Micro-batches"): the forward is that of ``micro_batch`` samples
    # at once, ``in_flight`` counts micro-batches, and a global batch of ``batch`` samples takes
    # ceil(batch / micro_batch) steps plus ``fill_drain`` steps of the pipeline's fill and drain, then
    # the update; None: one sample a step, no fill or drain, a 1/batch share of the update per sample
    micro_batch: int | None = None
    fill_drain: int = 0
    # weight streaming's memory forms in the layer pipeline (``cost.training``, "Attention recomputed,
    # checkpoints off the wafer"): bytes of its forward's inputs that are attention's S x S scores or
    # probabilities (not stashed), whether its output is one (its forward runs again in the backward),
    # and whether a recomputing segment's checkpoint is held off the wafer
    probs_in: int = 0
    probs_out: bool = False
    offwafer: bool = False

    @property
    def kind(self) -> KernelKind:
        """The forward's kind."""
        return self.forward.kind

    @property
    def gradients(self) -> int:
        """Gradient products of a MAC kernel's backward (each the forward's MACs); 0 for a vector kernel."""
        f = self.forward
        if not f.is_mac:
            return 0
        return int(self.input_grad) + (1 if f.weight_b else int(self.input_grad))

    @property
    def params(self) -> int:
        """Parameters of the kernel."""
        return self.param_count if self.param_count is not None else int(self.forward.weight_bytes) // self.dtype_bytes

    @property
    def stash_bytes(self) -> int:
        """Bytes one sample leaves in the stash: the kernel's input activations, both operands of a
        matmul of two activations (attention: the backward needs K for dQ, V for dP)."""
        f = self.forward
        second = int(f.b_bytes) if f.is_mac and not f.weight_b else 0
        return int(f.in_bytes) + second

    @property
    def stat_bytes(self) -> int:
        """Bytes a forward keeps for its backward in place of its S x S input when attention is
        recomputed: one fp32 statistic a row (``STAT_BYTES_PER_ROW``), only for the softmax between the
        scores and the context product (``probs_in`` and ``probs_out`` both)."""
        return STAT_BYTES_PER_ROW * int(self.forward.rows) if self.probs_in and self.probs_out else 0

    def _inside(self) -> int:
        """Stash bytes of a forward produced inside the segment (the replay regenerates them), its S x S
        inputs with attention recomputed not counted (they are never kept)."""
        return max(min(self.segment_input_bytes, self.stash_bytes) - self.probs_in, 0)

    @property
    def checkpoint_bytes(self) -> int:
        """Bytes of a forward's stash that are its segment's checkpoint (its inputs from outside the
        segment, attention's S x S inputs not counted): what a recomputing kernel keeps for every sample
        in flight, or (``offwafer``) streams out in its forward and in again for its backward."""
        return max(self.stash_bytes - self.probs_in - self._inside(), 0)

    def kept_stash_bytes(self, recompute: bool) -> int:
        """Stash bytes the kernel holds (every sample's): its inputs for ``in_flight`` samples; when
        its segment recomputes, the inputs produced inside the segment for ``replay_window`` samples
        only (the replay regenerates them) and the rest (the segment's checkpoint) for all of them,
        none of it with the checkpoint off the wafer (``offwafer``). Attention recomputed: its S x S
        inputs (``probs_in``) are never kept, a softmax keeps its rows' statistics (``stat_bytes``)."""
        if not recompute:
            return (self.stash_bytes - self.probs_in + self.stat_bytes) * self.in_flight
        held = 0 if self.offwafer else self.checkpoint_bytes * self.in_flight
        return held + (self._inside() + self.stat_bytes) * self.replay_window

    @property
    def backward_macs(self) -> int:
        """MACs of the backward."""
        return int(self.forward.macs) * self.gradients

    @property
    def loss_ops(self) -> int:
        """Vector ops of the loss and its gradient (the last kernel only), per sample."""
        return LOSS_OPS_PER_ELEMENT * (int(self.forward.out_bytes) // self.dtype_bytes) if self.loss else 0

    @property
    def backward_vector_ops(self) -> int:
        """Vector ops of the backward (epilogues' and vector kernels' derivatives, the loss), per sample."""
        return BACKWARD_VECTOR_FACTOR * int(self.forward.vector_ops) + self.loss_ops

    @property
    def samples(self) -> int:
        """Samples of one forward: the micro-batch's, else 1."""
        return self.micro_batch or 1

    @property
    def macs(self) -> int:
        """MACs per sample: forward and backward (the ``macs`` of reports)."""
        return (int(self.forward.macs) + self.backward_macs) // self.samples

    @property
    def vector_ops(self) -> int:
        """Vector ops per sample: forward, backward and a 1/batch share of the update."""
        update = -(-self.params * self.optimizer.ops_per_param // self.batch)
        return (int(self.forward.vector_ops) + self.backward_vector_ops) // self.samples + update

    @property
    def steps(self) -> int:
        """Pipeline steps of one global batch (micro-batching): its micro-batches, the fill and the drain."""
        return -(-self.batch // self.samples) + self.fill_drain if self.micro_batch is not None else 1

    @property
    def weight_bytes(self) -> int:
        """Parameter bytes (fp16; gradients and optimizer state are in the SRAM parts)."""
        return int(self.forward.weight_bytes)

    @property
    def state_bytes(self) -> int:
        """Resident state of the forward (KV caches)."""
        return int(self.forward.state_bytes)

    @property
    def in_bytes(self) -> int:
        """Activation bytes entering per sample (the forward's; its gradient leaves the same way)."""
        return int(self.forward.in_bytes) // self.samples

    @property
    def out_bytes(self) -> int:
        """Activation bytes leaving per sample (the forward's; its gradient comes back the same way)."""
        return int(self.forward.out_bytes) // self.samples

    @property
    def is_mac(self) -> bool:
        """Whether the forward is a MAC kernel."""
        return self.forward.is_mac

    def dataflows(self) -> tuple[Dataflow, ...]:
        """Forward, backward and update time-shared on the kernel's grid: with the stash, or (``recompute``)
        with the forward run again."""
        return {
            Recompute.NONE: (Dataflow.TRAIN,),
            # both for ``all`` too: a segment found split (opmodels.recompute) keeps its stash
            Recompute.ALL: (Dataflow.TRAIN, Dataflow.TRAIN_RECOMPUTE),
            Recompute.AUTO: (Dataflow.TRAIN, Dataflow.TRAIN_RECOMPUTE),
        }[self.recompute]

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The forward's largest extents over its dataflows."""
        rows = cols = 1
        for df in self.forward.dataflows():
            er, ec = self.forward.split_extents(df)
            rows, cols = max(rows, int(er)), max(cols, int(ec))
        return rows, cols


@dataclass(frozen=True)
class StreamedWork:
    """A kernel in weight-streaming mode (``cost.streaming``): its inference or training work run on the
    whole wafer for a batch of ``batch`` samples, its weights streamed in (and, training, its weight
    gradients out); ``recompute``: its segment recomputes (its stash from inside the segment is not kept,
    its forward runs again for the backward when the segment consumes its output); ``replayed``: its
    segment's replay is the largest, whose regenerated stash is charged to its kernels (``cost.streaming``)."""

    inner: KernelWork | TrainingWork
    batch: int
    recompute: bool = False
    replayed: bool = False
    # micro-batching (training): the global batch whose ceil(global_batch / batch) passes of ``batch``
    # samples (the last one padded) make one weight update; None: a pass per update, as before
    global_batch: int | None = None
    # attention recomputed (``Attention.RECOMPUTED``, training): bytes per sample of its inputs that are
    # attention's S x S scores or probabilities (neither stashed nor passed whole), and whether its output
    # is one (not passed whole; its forward runs again in the backward)
    probs_in: int = 0
    probs_out: bool = False
    # bytes a core of buffers the pass already holds for its other kernels (the largest of their turns'):
    # a kernel of attention recomputed may take up to that for its strips (``cost.streaming``)
    room: int = 0
    # a recomputing segment's checkpoint held off the wafer (``Checkpoints.OFFWAFER``): streamed out in the
    # forward, in again for the backward
    offwafer: bool = False

    @property
    def cost_key(self) -> StreamedWork:
        """This work with what a streamed turn never reads set alike: the layer pipeline's bookkeeping of
        a training work (its samples in flight, which segment it is in and the segment's kernels, its
        replay window). Streamed works with equal keys cost the same (a model's repeated layers)."""
        inner = self.inner
        if not isinstance(inner, TrainingWork):
            return self
        return replace(self, inner=replace(inner, in_flight=1, segment=0, segment_kernels=1, replay_window=1))

    @property
    def passes(self) -> int:
        """Passes of ``batch`` samples a global batch takes (1 without micro-batching)."""
        return -(-self.global_batch // self.batch) if self.global_batch is not None else 1

    @property
    def samples(self) -> int:
        """Samples the passes of one global batch train (``batch`` without micro-batching)."""
        return self.global_batch if self.global_batch is not None else self.batch

    @property
    def kind(self) -> KernelKind:
        """The kernel's kind."""
        return self.inner.kind

    @property
    def forward(self) -> KernelWork:
        """The forward work."""
        return self.inner.forward if isinstance(self.inner, TrainingWork) else self.inner

    @property
    def macs(self) -> int:
        """MACs per sample (forward, and backward in training; a recomputed forward not counted)."""
        return int(self.inner.macs)

    @property
    def vector_ops(self) -> int:
        """Vector ops per sample."""
        return int(self.inner.vector_ops)

    @property
    def weight_bytes(self) -> int:
        """Parameter bytes (streamed in, not resident)."""
        return int(self.inner.weight_bytes)

    @property
    def state_bytes(self) -> int:
        """Resident state of the forward (KV caches)."""
        return int(self.forward.state_bytes)

    @property
    def in_bytes(self) -> int:
        """Activation bytes entering per sample."""
        return int(self.inner.in_bytes)

    @property
    def out_bytes(self) -> int:
        """Activation bytes leaving per sample."""
        return int(self.inner.out_bytes)

    def dataflows(self) -> tuple[Dataflow, ...]:
        """One: the kernel's turn on the wafer."""
        return (Dataflow.STREAM,)

    def split_extents(self, dataflow: Dataflow) -> tuple[int, int]:
        """The inner work's largest extents."""
        rows = cols = 1
        for df in self.inner.dataflows():
            er, ec = self.inner.split_extents(df)
            rows, cols = max(rows, int(er)), max(cols, int(ec))
        return rows, cols


Work = KernelWork | SeedWork | RegionWork | TrainingWork | StreamedWork | ExpertsWork


def fits_then_fastest(best: GridCosts, here: GridCosts, usable: int) -> GridCosts:
    """Per grid shape, the better of two costings of one kernel: one that fits ``usable`` SRAM bytes
    per core over one that does not, else the faster (both fit) or the smaller (neither does)."""
    fits, best_fits = here.sram_bytes <= usable, best.sram_bytes <= usable
    better = np.where(fits == best_fits, np.where(fits, here.latency < best.latency, here.sram_bytes < best.sram_bytes), fits)
    return best.where(better, here)


# Waste of a grid that cannot hold the kernel at all (a contest conv needs 2 rows and 3 columns): the
# whole grid is padding. ``opmodels.classify`` reads it as Reason.NO_FIT whatever max_padding_waste
# allows, so every caller of the classifier (enumeration, placement shapes, the verifier) rejects it;
# the other models' waste stays below 1 (useful work is never zero where waste is computed).
NO_FIT_WASTE = 1.0


@dataclass(frozen=True)
class SramParts:
    """What each core's SRAM holds, by part (bytes per core, parallel to the grid shapes); the parts
    add up to ``GridCosts.sram_bytes``. Training adds gradients, optimizer state and the stash."""

    weights: np.ndarray  # parameters (and a stationary operand's tile)
    state: np.ndarray  # resident per-request state: KV caches
    buffers: np.ndarray  # double-buffered stream blocks
    # training (cost.training; None: inference): fp32 gradient accumulators, the optimizer's fp32
    # state (master weights, moments), the stash of activations kept for the backward
    grads: np.ndarray | None = None
    optimizer: np.ndarray | None = None
    stash: np.ndarray | None = None

    @property
    def total(self) -> np.ndarray:
        """All parts, per grid shape."""
        out = self.weights + self.state + self.buffers
        for part in (self.grads, self.optimizer, self.stash):
            if part is not None:
                out = out + part
        return out

    @staticmethod
    def only_weights(sram: np.ndarray) -> SramParts:
        """A model that does not split its SRAM: all of it counted as weights."""
        zero = np.zeros_like(np.asarray(sram, dtype=np.float64))
        return SramParts(np.asarray(sram, dtype=np.float64), zero, zero)


@dataclass(frozen=True)
class GridCosts:
    """Costs of one kernel on a batch of grid shapes (parallel numpy arrays, one entry per shape)."""

    rows: np.ndarray  # r
    cols: np.ndarray  # c
    compute_cycles: np.ndarray
    noc_cycles: np.ndarray
    sram_bytes: np.ndarray  # per core, reserve excluded
    latency: np.ndarray  # int64 cycles
    waste: np.ndarray  # share of the grid's work lost to tile padding, in [0, 1); NO_FIT_WASTE: nothing fits
    parts: SramParts | None = None  # the SRAM by part (None: the model does not split it)
    # cycles per sample the off-wafer weight stream takes (weight streaming; None: no stream)
    stream_cycles: np.ndarray | None = None

    def sram_parts(self) -> SramParts:
        """The SRAM by part (everything as weights for a model that does not split it)."""
        return self.parts if self.parts is not None else SramParts.only_weights(self.sram_bytes)

    def where(self, take: np.ndarray, other: GridCosts) -> GridCosts:
        """Per grid shape, ``other``'s costs where ``take``, else these (the same shapes)."""
        mine, theirs = self.sram_parts(), other.sram_parts()

        def pick(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            if a is None and b is None:
                return None
            zero = np.zeros(self.rows.size)
            return np.where(take, b if b is not None else zero, a if a is not None else zero)

        parts = SramParts(
            np.where(take, theirs.weights, mine.weights),
            np.where(take, theirs.state, mine.state),
            np.where(take, theirs.buffers, mine.buffers),
            grads=pick(mine.grads, theirs.grads),
            optimizer=pick(mine.optimizer, theirs.optimizer),
            stash=pick(mine.stash, theirs.stash),
        )
        return GridCosts(
            rows=self.rows,
            cols=self.cols,
            compute_cycles=np.where(take, other.compute_cycles, self.compute_cycles),
            noc_cycles=np.where(take, other.noc_cycles, self.noc_cycles),
            sram_bytes=np.where(take, other.sram_bytes, self.sram_bytes),
            latency=np.where(take, other.latency, self.latency),
            waste=np.where(take, other.waste, self.waste),
            parts=parts,
            stream_cycles=pick(self.stream_cycles, other.stream_cycles),
        )
