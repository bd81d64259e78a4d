"""LLaMA-family decoders written as ONNX with ``onnx.helper`` (no torch): the prefill and the decode
step of the zoo's KV-cache convention (models/README.md, "KV cache convention"), weightless.

One builder serves every model of the family: LLaMA 2/3, Mistral, Qwen2 (QKV biases), Qwen3 dense
(per-head q/k RMSNorm, a head_dim chosen apart from hidden / heads), tied or untied embeddings, GQA,
and mixtures of experts (Mixtral, Qwen3-MoE, Llama 4: see "Mixture-of-experts layers" below).
:class:`DecoderSpec` holds exactly the numbers that shape the graph; :mod:`wsealloc.frontend.hf_config`
derives one from a Hugging Face ``config.json``, ``models/tiny/build.py`` writes its tiny twins
with it.

The graph is LlamaForCausalLM with eager attention, as transformers runs it: per layer RMSNorm (in
float32 between ``Cast``s), Q/K/V MatMuls (+ bias), optional q/k norm, RoPE (rotate-half), the KV
cache, the GQA repeat, MatMul Q K^T, scale, causal-mask ``Add``, Softmax (in float32), MatMul with V,
O projection, residual, RMSNorm, SiLU-gated FFN, residual; a final RMSNorm and the LM head (the
embedding's transpose when tied). Weights are stored [in, out], so no ``Transpose`` precedes a
projection (the dynamo exports store [out, in] and transpose: the same MACs and bytes).

Weightless, as the zoo: every initializer of more than :data:`SMALL` elements is written as an
external-data reference (``location``, ``offset``, ``length``; offsets consecutive in initializer
order, aligned to :data:`ALIGN` bytes) into a file that is never written, so no weight is ever
materialized: a 405B model is a few MB and takes seconds. Small tensors (shape constants, scalars,
RoPE's ``inv_freq``, norms of at most 64 elements) keep their values embedded: shape computation
may read them.

Mixture-of-experts layers (:attr:`DecoderSpec.moe_layers`; the others keep the dense FFN of width
``ffn``) replace the FFN, on the post-attention normed input ``m`` [B, T, d], with the form ONNX Runtime's
exporters write: the router MatMul ``layers.{i}.router`` [B, T, E] reshaped to the 2-D
``layers.{i}.router_probs`` [B·T, E] (logits: the softmax and the top-k happen inside the op), then one
``com.microsoft`` ``MoE`` node ``layers.{i}.moe`` (``k``, ``activation_type`` silu,
``normalize_routing_weights``, ``use_sparse_mixer`` 0) with the SwiGLU weights in ONNX Runtime's
(experts, out, in) layout: fc1 ``layers.{i}.experts.gate`` [E, f, d], fc2 ``layers.{i}.experts.down``
[E, d, f], fc3 ``layers.{i}.experts.up`` [E, f, d] (out = fc2(silu(fc1 x) * fc3 x)), no biases. A shared
expert (Llama 4) is a dense SiLU-gated FFN of its own width on the same ``m``
(``layers.{i}.shared_expert.gate_proj`` ...), added to the op's output (``layers.{i}.moe_shared``).
ONNX shape inference does not know the op, so its output gets a ``value_info`` of the input's shape,
and the model imports the ``com.microsoft`` opset 1 (dense models import the default domain alone,
as before).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from pydantic import BaseModel, ConfigDict, Field, model_validator

SMALL = 64  # initializers with at most this many elements keep their data (models/README.md)
ALIGN = 4096  # offsets into the absent data file, as models/export.py lays them out
OPSET = 20
MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib ops (the MoE node of mixture-of-experts layers)
BATCH, PAST, TOTAL = "batch_size", "past_sequence_length", "past_sequence_length + 1"
Form = Literal["prefill", "decode"]
DType = Literal["float16", "bfloat16"]
ELEM_TYPE: dict[str, int] = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
_SHORT = {"float16": "f16", "bfloat16": "bf16"}  # in constant names: zero_f16, min_bf16
_MIN = {"float16": float(np.finfo(np.float16).min), "bfloat16": -(2 - 2**-7) * 2.0**127}  # the masks' "minus infinity"
# The cache notes every KV-cache model carries in its metadata (as models/export.py writes them).
CACHE_NOTES: dict[str, str] = {
    "prefill": "prefill: outputs logits and present.{i}.key/value [batch, kv_heads, prompt, head_dim] for every layer i",
    "decode": (
        f"decode step: inputs input_ids [{BATCH}, 1], past_key_values.{{i}}.key/value [{BATCH}, kv_heads, {PAST}, head_dim]; "
        f"outputs logits [{BATCH}, 1, vocab], present.{{i}}.key/value [{BATCH}, kv_heads, {TOTAL}, head_dim]"
    ),
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Llama3Rope(_Frozen):
    """LLaMA 3.1's RoPE frequency scaling (``rope_type: llama3``): it changes the 64 values of
    ``inv_freq``, never a shape, so the graph's cost is the one without it."""

    factor: float = Field(gt=0)
    low_freq_factor: float = Field(gt=0)
    high_freq_factor: float = Field(gt=0)
    original_max_position_embeddings: int = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Llama3Rope:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("high_freq_factor must exceed low_freq_factor")
        return self


class DecoderSpec(_Frozen):
    """What shapes a LLaMA-family decoder graph: sizes, dtype, and which optional parts it has."""

    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    ffn: int = Field(gt=0)
    vocab: int = Field(gt=0)
    dtype: DType = "float16"
    rope_theta: float = Field(default=10000.0, gt=0)
    rope_llama3: Llama3Rope | None = None
    eps: float = Field(default=1e-6, gt=0)
    qkv_bias: bool = False  # Qwen2; LLaMA's and Qwen3's attention_bias (with o_bias)
    o_bias: bool = False
    mlp_bias: bool = False  # LLaMA's mlp_bias
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim of each query and key head, before RoPE
    tied: bool = False  # the LM head is the embedding matrix (transposed), not a matrix of its own
    # Mixture of experts (experts 0: a dense model, every other MoE field at its default). ``ffn`` is
    # then the width of the dense layers' FFN (the layers not in ``moe_layers``).
    experts: int = Field(default=0, ge=0)  # E routed experts per MoE layer, all resident
    top_k: int = Field(default=0, ge=0)  # k of them at work per token
    expert_ffn: int = Field(default=0, ge=0)  # each expert's SiLU-gated FFN width
    shared_expert_ffn: int = Field(default=0, ge=0)  # a shared expert's width on every MoE layer (0: none)
    moe_layers: tuple[int, ...] = Field(default=(), strict=False)  # the MoE layers' indices, ascending
    renormalize: bool = False  # the top-k routing weights renormalized to sum to 1 (the op's normalize_routing_weights)

    @model_validator(mode="after")
    def _consistent(self) -> DecoderSpec:
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} attention heads are not a multiple of {self.kv_heads} KV heads")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} is odd (RoPE rotates pairs)")
        if not self.experts:
            if self.top_k or self.expert_ffn or self.shared_expert_ffn or self.moe_layers or self.renormalize:
                raise ValueError("mixture-of-experts fields given without experts")
            return self
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"{self.top_k} experts per token: must be 1 to the {self.experts} experts")
        if not self.expert_ffn:
            raise ValueError("expert_ffn: the experts' FFN width must be given")
        if not self.moe_layers or list(self.moe_layers) != sorted(set(self.moe_layers)):
            raise ValueError(f"moe_layers {list(self.moe_layers)}: give the MoE layers' indices, ascending, each once")
        if self.moe_layers[0] < 0 or self.moe_layers[-1] >= self.layers:
            raise ValueError(f"moe_layers {list(self.moe_layers)}: indices must lie in 0..{self.layers - 1}")
        if self.mlp_bias:
            raise ValueError("mlp_bias with experts: the experts are bias-free")
        return self

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head_dim (= hidden unless given apart)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def n_rep(self) -> int:
        """Query heads per KV head (GQA: each cached head is repeated this often)."""
        return self.heads // self.kv_heads

    @property
    def elem_bytes(self) -> int:
        return 2  # float16 and bfloat16

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token adds over all layers: key and value, kv_heads x head_dim each."""
        return self.layers * 2 * self.kv_width * self.elem_bytes

    @property
    def moe_count(self) -> int:
        """How many layers are mixtures of experts (0: a dense model)."""
        return len(self.moe_layers)

    def _expert_parameters(self) -> int:
        """One routed expert's weights (gate, up and down: 3 x hidden x expert_ffn)."""
        return 3 * self.hidden * self.expert_ffn

    def parameters(self) -> int:
        """Parameter count (every weight and bias of the graph, the norms included; every one of the E
        experts of every MoE layer, resident whether or not a token is routed to it)."""
        attn = self.hidden * (self.q_width + 2 * self.kv_width) + self.q_width * self.hidden
        attn += (self.q_width + 2 * self.kv_width) * self.qkv_bias + self.hidden * self.o_bias
        mlp = 3 * self.hidden * self.ffn + (2 * self.ffn + self.hidden) * self.mlp_bias
        norms = 2 * self.hidden + 2 * self.head_dim * self.qk_norm
        head = 0 if self.tied else self.hidden * self.vocab
        dense = self.layers - self.moe_count
        moe = self.hidden * self.experts + self.experts * self._expert_parameters() + 3 * self.hidden * self.shared_expert_ffn
        return self.layers * (attn + norms) + dense * mlp + self.moe_count * moe + self.vocab * self.hidden + self.hidden + head

    def active_parameters(self) -> int:
        """Parameters one token uses: all but the E - k experts of each MoE layer it is not routed to
        (the embedding and the router included, as model cards count "active" parameters)."""
        return self.parameters() - self.moe_count * (self.experts - self.top_k) * self._expert_parameters()

    def matmul_macs(self, tokens: int, keys: int) -> int:
        """MatMul MACs of one sequence: ``tokens`` new tokens attending to ``keys`` keys (prefill of T:
        T, T; a decode step over a past of S: 1, S + 1). Each head's QK^T and AV cost head_dim per
        query-key pair, so heads x head_dim = q_width per pair.

        MoE layers count the ACTIVE work: the router (hidden x experts), the k experts each token is
        routed to (3 x hidden x expert_ffn each) and the shared expert, per token; the E - k idle
        experts cost nothing (their weights are resident all the same: :meth:`parameters`)."""
        attention = self.hidden * (2 * self.q_width + 2 * self.kv_width)
        dense = 3 * self.hidden * self.ffn
        moe = self.hidden * self.experts + self.top_k * self._expert_parameters() + 3 * self.hidden * self.shared_expert_ffn
        per_layer = tokens * attention + 2 * tokens * keys * self.q_width
        ffns = tokens * ((self.layers - self.moe_count) * dense + self.moe_count * moe)
        return self.layers * per_layer + ffns + tokens * self.hidden * self.vocab


def inv_freq(spec: DecoderSpec) -> np.ndarray:
    """RoPE's inverse frequencies (float32, head_dim / 2 values), LLaMA 3.1's scaling applied as
    transformers' ``_compute_llama3_parameters`` does (long wavelengths slowed by ``factor``, a smooth
    blend between the two thresholds)."""
    hd = spec.head_dim
    base = 1.0 / spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd)
    r = spec.rope_llama3
    if r is None:
        return base.astype(np.float32)
    wavelen = 2 * math.pi / base
    low_wavelen = r.original_max_position_embeddings / r.low_freq_factor
    high_wavelen = r.original_max_position_embeddings / r.high_freq_factor
    scaled = np.where(wavelen > low_wavelen, base / r.factor, base)
    smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
    blended = (1 - smooth) * scaled / r.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)


class _Graph:
    """The nodes and initializers of one model being written; big initializers become references
    into the absent ``weights`` file, laid out as the weightless convention lays them out."""

    def __init__(self, spec: DecoderSpec, weights: str) -> None:
        self.spec = spec
        self.dtype = ELEM_TYPE[spec.dtype]
        self.weights = weights
        self.offset = 0
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.moe_outputs: list[str] = []  # the MoE nodes' outputs (a value_info each: shape inference skips the op)

    def embed(self, name: str, array: np.ndarray) -> str:
        """A small constant with its values (int64 shapes, float32 scalars, inv_freq)."""
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        return self.embed(name, np.array(values, dtype=np.int64))

    def floats(self, name: str, value: float) -> str:
        """A scalar in the model's dtype (bfloat16 has no numpy type: onnx converts it)."""
        if self.dtype == TensorProto.FLOAT16:
            return self.embed(name, np.array(value, dtype=np.float16))
        self.inits.append(helper.make_tensor(name, self.dtype, [], [value]))
        return name

    def weight(self, name: str, *shape: int) -> str:
        """A parameter in the model's dtype: a reference into the absent data file when it has more
        than SMALL elements (no data is ever made), else embedded zeros."""
        numel = math.prod(shape)
        if numel <= SMALL:
            if self.dtype == TensorProto.FLOAT16:
                return self.embed(name, np.zeros(shape, dtype=np.float16))
            self.inits.append(helper.make_tensor(name, self.dtype, shape, bytes(2 * numel), raw=True))
            return name
        length = numel * self.spec.elem_bytes
        tensor = TensorProto(name=name, data_type=self.dtype, dims=shape, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.weights), ("offset", str(self.offset)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
        self.offset += -(-length // ALIGN) * ALIGN
        self.inits.append(tensor)
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        """One node named after its (single) output."""
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def linear(self, x: str, name: str, n_in: int, n_out: int, bias: bool) -> str:
        """``x @ W (+ b)``: the MatMul is named ``name``, its weight ``name.weight`` [in, out]."""
        self.weight(f"{name}.weight", n_in, n_out)
        if not bias:
            return self.node("MatMul", [x, f"{name}.weight"], name)
        self.weight(f"{name}.bias", n_out)
        self.node("MatMul", [x, f"{name}.weight"], f"{name}.matmul")
        return self.node("Add", [f"{name}.matmul", f"{name}.bias"], name)

    def rms_norm(self, x: str, weight: str, out: str, width: int) -> str:
        """RMSNorm over the last axis, computed in float32 between Casts as transformers does."""
        self.weight(weight, width)
        self.node("Cast", [x], f"{out}.f32", to=TensorProto.FLOAT)
        self.node("Pow", [f"{out}.f32", "two"], f"{out}.sq")
        self.node("ReduceMean", [f"{out}.sq", "axes_last"], f"{out}.ms", keepdims=1)
        self.node("Add", [f"{out}.ms", "eps"], f"{out}.ms_eps")
        self.node("Sqrt", [f"{out}.ms_eps"], f"{out}.rms")
        self.node("Reciprocal", [f"{out}.rms"], f"{out}.inv_rms")
        self.node("Mul", [f"{out}.f32", f"{out}.inv_rms"], f"{out}.normed")
        self.node("Cast", [f"{out}.normed"], f"{out}.{_SHORT[self.spec.dtype]}", to=self.dtype)
        return self.node("Mul", [f"{out}.{_SHORT[self.spec.dtype]}", weight], out)

    def rope(self, x: str, out: str) -> str:
        """Rotate-half RoPE with the ``cos``/``sin`` tables of the new tokens' positions."""
        halves = [f"{out}.x1", f"{out}.x2"]
        self.nodes.append(helper.make_node("Split", [x], halves, name=f"{out}.halves", axis=-1, num_outputs=2))
        self.node("Neg", [f"{out}.x2"], f"{out}.neg_x2")
        self.node("Concat", [f"{out}.neg_x2", f"{out}.x1"], f"{out}.rotated", axis=-1)
        self.node("Mul", [x, "cos"], f"{out}.x_cos")
        self.node("Mul", [f"{out}.rotated", "sin"], f"{out}.rot_sin")
        return self.node("Add", [f"{out}.x_cos", f"{out}.rot_sin"], out)

    def heads_first(self, x: str, shape: str, out: str, norm: str | None = None) -> str:
        """[B, T, h * hd] -> [B, h, T, hd]; with ``norm`` (Qwen3's q_norm / k_norm) each head is
        RMS-normalized over head_dim between the split and the transpose, as Qwen3Attention does."""
        heads = self.node("Reshape", [x, shape], f"{out}.split")  # [B, T, h, hd]
        if norm is not None:
            heads = self.rms_norm(heads, f"{norm}.weight", norm, self.spec.head_dim)
        return self.node("Transpose", [heads], out, perm=[0, 2, 1, 3])  # [B, h, T, hd]

    def repeat_kv(self, x: str, out: str) -> str:
        """GQA: each KV head repeated n_rep times (transformers' ``repeat_kv``; nothing when n_rep is 1)."""
        if self.spec.n_rep == 1:
            return x
        self.node("Unsqueeze", [x, "axes_2"], f"{out}.unsq")  # [B, kv, 1, K, hd]
        self.node("Expand", [f"{out}.unsq", "rep_shape"], f"{out}.expanded")  # [B, kv, rep, K, hd]
        return self.node("Reshape", [f"{out}.expanded", "gqa_shape"], out)  # [B, heads, K, hd]


def _constants(g: _Graph) -> None:
    """The shape constants and scalars every layer shares."""
    s = g.spec
    g.ints("axes_last", [-1])
    g.ints("axes_0", [0])
    g.ints("axes_1", [1])
    g.ints("axes_2", [2])
    g.ints("q_shape", [0, 0, s.heads, s.head_dim])  # 0: copy batch / tokens from the input
    g.ints("kv_shape", [0, 0, s.kv_heads, s.head_dim])
    if s.n_rep > 1:
        g.ints("rep_shape", [1, 1, s.n_rep, 1, 1])  # Expand: broadcast the new axis to n_rep copies
        g.ints("gqa_shape", [0, s.heads, -1, s.head_dim])  # -1: the key count
    g.ints("merge_shape", [0, 0, s.q_width])
    if s.experts:
        g.ints("router_shape", [-1, s.experts])  # ONNX Runtime's MoE takes the router logits 2-D (tokens, experts)
    g.embed("two", np.array(2.0, dtype=np.float32))
    g.embed("eps", np.array(s.eps, dtype=np.float32))
    short = _SHORT[s.dtype]
    g.floats("scale", s.head_dim**-0.5)
    g.floats(f"zero_{short}", 0.0)
    g.floats(f"min_{short}", _MIN[s.dtype])
    g.embed("inv_freq", inv_freq(s))


def _positions(g: _Graph, form: Form, prompt: int) -> tuple[str, str]:
    """The new tokens' positions and every key's: a prefill's 0..T-1 both; a decode step's new token
    sits at the past length S (read with ``Shape`` from the first past input), its keys at 0..S."""
    if form == "decode":
        g.node("Shape", ["past_key_values.0.key"], "past_len", start=2, end=3)  # [1] = S
        g.embed("zero_i64", np.array(0, dtype=np.int64))
        g.embed("one_i64", np.array(1, dtype=np.int64))
        g.node("Squeeze", ["past_len", "axes_0"], "past_len_scalar")
        g.node("Add", ["past_len_scalar", "one_i64"], "total_len")  # S + 1
        return "past_len", g.node("Range", ["zero_i64", "total_len", "one_i64"], "key_positions")  # [S + 1]
    g.embed("zero_i64", np.array(0, dtype=np.int64))
    g.embed("prompt_len", np.array(prompt, dtype=np.int64))
    g.embed("one_i64", np.array(1, dtype=np.int64))
    positions = g.node("Range", ["zero_i64", "prompt_len", "one_i64"], "positions")  # transformers' cache_position
    return positions, positions


def _rope_tables_and_mask(g: _Graph, qpos: str, kpos: str) -> None:
    """``cos``/``sin`` [T, head_dim] (angle = position x inv_freq, both halves) and ``causal_mask``
    [T, K]: 0 where the key's position is at most the query's, the dtype's minimum elsewhere."""
    short = _SHORT[g.spec.dtype]
    g.node("Cast", [qpos], "qpos_f", to=TensorProto.FLOAT)
    g.node("Unsqueeze", ["qpos_f", "axes_1"], "qpos_col")
    g.node("Mul", ["qpos_col", "inv_freq"], "freqs")
    g.node("Concat", ["freqs", "freqs"], "angles", axis=-1)
    g.node("Cos", ["angles"], "cos_f")
    g.node("Sin", ["angles"], "sin_f")
    g.node("Cast", ["cos_f"], "cos", to=g.dtype)
    g.node("Cast", ["sin_f"], "sin", to=g.dtype)
    g.node("Unsqueeze", [qpos, "axes_1"], "qpos_ints_col")
    g.node("Unsqueeze", [kpos, "axes_0"], "kpos_row")
    g.node("LessOrEqual", ["kpos_row", "qpos_ints_col"], "visible")
    g.node("Where", ["visible", f"zero_{short}", f"min_{short}"], "causal_mask")


def _attention(g: _Graph, i: int, h: str, form: Form) -> str:
    """Layer ``i``'s attention on the normed input ``h``; returns the O projection's output. The
    cache: a decode step appends the new (RoPE'd) key and value to the past (``Concat`` on the
    sequence axis, the graph output ``present.{i}.*``); a prefill outputs them as they are."""
    s, p = g.spec, f"layers.{i}"
    g.linear(h, f"{p}.q_proj", s.hidden, s.q_width, s.qkv_bias)
    g.linear(h, f"{p}.k_proj", s.hidden, s.kv_width, s.qkv_bias)
    g.linear(h, f"{p}.v_proj", s.hidden, s.kv_width, s.qkv_bias)
    q_norm, k_norm = (f"{p}.q_norm", f"{p}.k_norm") if s.qk_norm else (None, None)
    q = g.rope(g.heads_first(f"{p}.q_proj", "q_shape", f"{p}.q", q_norm), f"{p}.q_rope")
    new_k = g.heads_first(f"{p}.k_proj", "kv_shape", f"{p}.k", k_norm)
    new_v = g.heads_first(f"{p}.v_proj", "kv_shape", f"{p}.v")
    if form == "decode":
        g.rope(new_k, f"{p}.k_rope")
        k = g.node("Concat", [f"past_key_values.{i}.key", f"{p}.k_rope"], f"present.{i}.key", axis=2)
        v = g.node("Concat", [f"past_key_values.{i}.value", new_v], f"present.{i}.value", axis=2)
    else:
        k = g.rope(new_k, f"present.{i}.key")
        v = g.node("Identity", [new_v], f"present.{i}.value")
    k_all, v_all = g.repeat_kv(k, f"{p}.k_heads"), g.repeat_kv(v, f"{p}.v_heads")
    g.node("Transpose", [k_all], f"{p}.k_t", perm=[0, 1, 3, 2])  # [B, heads, hd, K]
    g.node("MatMul", [q, f"{p}.k_t"], f"{p}.scores")  # [B, heads, T, K]
    g.node("Mul", [f"{p}.scores", "scale"], f"{p}.scaled")
    g.node("Add", [f"{p}.scaled", "causal_mask"], f"{p}.masked")
    g.node("Cast", [f"{p}.masked"], f"{p}.masked_f32", to=TensorProto.FLOAT)
    g.node("Softmax", [f"{p}.masked_f32"], f"{p}.probs_f32", axis=-1)
    g.node("Cast", [f"{p}.probs_f32"], f"{p}.probs", to=g.dtype)
    g.node("MatMul", [f"{p}.probs", v_all], f"{p}.context")  # [B, heads, T, hd]
    g.node("Transpose", [f"{p}.context"], f"{p}.context_t", perm=[0, 2, 1, 3])
    g.node("Reshape", [f"{p}.context_t", "merge_shape"], f"{p}.attn")  # [B, T, heads * hd]
    return g.linear(f"{p}.attn", f"{p}.o_proj", s.q_width, s.hidden, s.o_bias)


def _mlp(g: _Graph, p: str, m: str, width: int, bias: bool) -> str:
    """The SiLU-gated FFN named ``p`` (a dense layer's ``layers.{i}``, a shared expert's
    ``layers.{i}.shared_expert``): down(silu(gate(m)) * up(m)), SiLU as x * Sigmoid(x)."""
    d = g.spec.hidden
    gate = g.linear(m, f"{p}.gate_proj", d, width, bias)
    g.node("Sigmoid", [gate], f"{p}.gate_sigmoid")
    g.node("Mul", [gate, f"{p}.gate_sigmoid"], f"{p}.silu")
    up = g.linear(m, f"{p}.up_proj", d, width, bias)
    g.node("Mul", [f"{p}.silu", up], f"{p}.gated")
    return g.linear(f"{p}.gated", f"{p}.down_proj", width, d, bias)


def _moe(g: _Graph, i: int, m: str) -> str:
    """Layer ``i``'s mixture of experts on ``m`` [B, T, d] (the module docstring's form): the router,
    one ``com.microsoft`` ``MoE`` node holding every expert, and a shared expert added where there is one."""
    s, p = g.spec, f"layers.{i}"
    d, e, f = s.hidden, s.experts, s.expert_ffn
    router = g.linear(m, f"{p}.router", d, e, False)  # [B, T, E] logits
    probs = g.node("Reshape", [router, "router_shape"], f"{p}.router_probs")  # [B·T, E]
    fc1 = g.weight(f"{p}.experts.gate", e, f, d)  # ONNX Runtime's (experts, out, in)
    fc2 = g.weight(f"{p}.experts.down", e, d, f)
    fc3 = g.weight(f"{p}.experts.up", e, f, d)
    out = f"{p}.moe"
    inputs = [m, probs, fc1, "", fc2, "", fc3, ""]  # no biases
    node = helper.make_node(
        "MoE",
        inputs,
        [out],
        name=out,
        domain=MS_DOMAIN,
        k=s.top_k,
        activation_type="silu",
        normalize_routing_weights=int(s.renormalize),
        use_sparse_mixer=0,
    )
    g.nodes.append(node)
    g.moe_outputs.append(out)
    if not s.shared_expert_ffn:
        return out
    shared = _mlp(g, f"{p}.shared_expert", m, s.shared_expert_ffn, False)
    return g.node("Add", [out, shared], f"{p}.moe_shared")


def _layer(g: _Graph, i: int, x: str, form: Form) -> str:
    """One pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(.)) (or the experts')."""
    s, p = g.spec, f"layers.{i}"
    h = g.rms_norm(x, f"{p}.input_layernorm.weight", f"{p}.input_norm", s.hidden)
    r = g.node("Add", [x, _attention(g, i, h, form)], f"{p}.residual1")
    m = g.rms_norm(r, f"{p}.post_attention_layernorm.weight", f"{p}.post_norm", s.hidden)
    ffn = _moe(g, i, m) if i in s.moe_layers else _mlp(g, p, m, s.ffn, s.mlp_bias)
    return g.node("Add", [r, ffn], f"{p}.residual2")


def _lm_head(g: _Graph, x: str) -> None:
    """Final RMSNorm and the logits: a matrix of its own, or the embedding transposed when tied."""
    s = g.spec
    hf = g.rms_norm(x, "norm.weight", "final_norm", s.hidden)
    if s.tied:
        head = g.node("Transpose", ["embed_tokens"], "lm_head.weight", perm=[1, 0])  # [d, vocab]
    else:
        head = g.weight("lm_head.weight", s.hidden, s.vocab)
    g.node("MatMul", [hf, head], "logits")


def _io(spec: DecoderSpec, form: Form, prompt: int) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """Graph inputs and outputs in the convention's order and names (models/README.md)."""
    decode = form == "decode"
    dtype = ELEM_TYPE[spec.dtype]
    batch: int | str = BATCH if decode else 1
    tokens = 1 if decode else prompt
    length: int | str = TOTAL if decode else prompt
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, tokens])]
    outputs = [helper.make_tensor_value_info("logits", dtype, [batch, tokens, spec.vocab])]
    for i in range(spec.layers):
        for t in ("key", "value"):
            if decode:
                past = [batch, spec.kv_heads, PAST, spec.head_dim]
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{t}", dtype, past))
            present = [batch, spec.kv_heads, length, spec.head_dim]
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{t}", dtype, present))
    return inputs, outputs


def build_decoder(spec: DecoderSpec, form: Form, prompt: int, weights: str) -> onnx.ModelProto:
    """The ``form`` of the decoder ``spec`` (a prefill of ``prompt`` tokens, or one decode step),
    its big weights references into the absent file ``weights`` (e.g. ``llama-3.1-70b-decode.weights``).

    Prefill: ``input_ids`` int64 [1, T] -> ``logits`` [1, T, vocab] and, per layer i,
    ``present.{i}.key`` / ``.value`` [1, kv_heads, T, head_dim]. Decode step: ``input_ids``
    [batch_size, 1] and ``past_key_values.{i}.*`` [batch_size, kv_heads, past_sequence_length,
    head_dim] -> ``logits`` [batch_size, 1, vocab] and ``present.{i}.*`` [..., past_sequence_length + 1,
    ...]. MatMul MACs per sequence: :meth:`DecoderSpec.matmul_macs`.
    """
    if prompt < 1:
        raise ValueError(f"prompt length {prompt}: must be at least 1")
    g = _Graph(spec, weights)
    _constants(g)
    qpos, kpos = _positions(g, form, prompt)
    _rope_tables_and_mask(g, qpos, kpos)
    g.weight("embed_tokens", spec.vocab, spec.hidden)
    x = g.node("Gather", ["embed_tokens", "input_ids"], "embeddings", axis=0)  # [B, T, d]
    for i in range(spec.layers):
        x = _layer(g, i, x, form)
    _lm_head(g, x)
    inputs, outputs = _io(spec, form, prompt)
    # As the exporter does, declare the key positions' length: ONNX shape inference cannot size a Range
    # from a computed limit, so without it the mask would stay unsized even with the dims bound.
    value_info = [helper.make_tensor_value_info("key_positions", TensorProto.INT64, [TOTAL])] if form == "decode" else []
    # ONNX knows no com.microsoft MoE: its output is declared with its input's shape [B, T, d]
    batch: int | str = BATCH if form == "decode" else 1
    tokens = 1 if form == "decode" else prompt
    value_info += [helper.make_tensor_value_info(out, g.dtype, [batch, tokens, spec.hidden]) for out in g.moe_outputs]
    graph = helper.make_graph(g.nodes, "g", inputs, outputs, initializer=g.inits, value_info=value_info)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(MS_DOMAIN, 1)] if spec.experts else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the absent weights: the sum of the external references' lengths (no padding)."""
    total = 0
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            total += int(next(e.value for e in t.external_data if e.key == "length"))
    return total
