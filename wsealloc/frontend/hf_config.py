"""A Hugging Face ``config.json`` of a LLaMA-family model read into a frozen, validated object, and
the model's prefill and decode-step ONNX written from it (``wsealloc export-llm``), with no torch.

Families (``model_type``, and ``architectures`` if given): ``llama`` (LLaMA 2, 3, 3.1; ``LlamaForCausalLM``),
``mistral`` (``MistralForCausalLM``), ``qwen2`` (Qwen2 / Qwen2.5, QKV biases; ``Qwen2ForCausalLM``),
``qwen3`` (Qwen3 dense: per-head q/k RMSNorm, head_dim given on its own; ``Qwen3ForCausalLM``), and
three mixtures of experts, written with ONNX Runtime's ``com.microsoft`` ``MoE`` node (decoder.py):
``mixtral`` (``MixtralForCausalLM``: every layer E experts, top k renormalized), ``qwen3_moe``
(``Qwen3MoeForCausalLM``: Qwen3's attention; ``decoder_sparse_step`` and ``mlp_only_layers`` decide the
MoE layers, the others dense of ``intermediate_size``), ``llama4_text`` (``Llama4ForCausalLM``) or the
multimodal ``llama4`` (``Llama4ForConditionalGeneration``: its ``text_config`` is read, the vision
encoder is not part of text generation): MoE on the ``moe_layers`` (every ``interleave_moe_layer_step``-th
layer by default) with a shared expert, dense layers of ``intermediate_size_mlp``. Other
mixture-of-experts fields (DeepSeek's ``n_routed_experts``, Qwen2-MoE's ``shared_expert_intermediate_size``,
...) are refused by name.

Every field of the file is either one that shapes the graph (sizes, dtype, RoPE, biases, norms, tied
embeddings) or one on an explicit list of fields that cannot change it (token ids, training
settings, ``max_position_embeddings``, ...). Anything else is refused with a one-line error naming
the file and the field: an unknown field might change the graph, and a plan for a graph that is not
the model would be silently wrong.

Not modelled, on purpose: ``sliding_window`` (Mistral; Qwen2/3 when ``use_sliding_window``) is recorded
(:attr:`HfConfig.window`), but the graph attends to every key, as transformers' eager attention
computes the whole score matrix and masks it: the MatMul MACs are the same either way, and at a
context within the window nothing differs at all. Beyond the window a rolling cache would hold only
``window`` tokens, so the graph's decode-step cache and attention are then an upper bound.
``rope_scaling`` of type ``llama3`` changes RoPE's 64 frequencies, never a shape or a cost; the
graph carries the scaled frequencies all the same.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import onnx
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, model_validator

from wsealloc.errors import ModelLoadError
from wsealloc.files import check_writable, write_atomic
from wsealloc.frontend.decoder import CACHE_NOTES, DecoderSpec, DType, Form, Llama3Rope, build_decoder, weight_bytes
from wsealloc.version import __version__

PROMPT = 4096  # the prefill's default prompt length (the zoo's measured setup)
FAMILIES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
}
DENSE = ("llama", "mistral", "qwen2", "qwen3")
LLAMA4 = "llama4"  # the multimodal wrapper: its text_config is a llama4_text config
LLAMA4_ARCHITECTURE = "Llama4ForConditionalGeneration"
SUPPORTED = (
    "supported: llama, mistral, qwen2, qwen3 (dense), mixtral, qwen3_moe, llama4_text, llama4 (mixture of experts; "
    f"{', '.join(FAMILIES.values())}, {LLAMA4_ARCHITECTURE})"
)
# Fields of mixture-of-experts configurations (Mixtral, Qwen2/3-MoE, Llama 4, DeepSeek, ...): refused by
# name in a dense family, and in a mixture-of-experts family that does not have them.
MOE_FIELDS = frozenset(
    {
        "interleave_moe_layer_step",
        "moe_layers",
        "intermediate_size_mlp",
        "router_jitter_noise",
        "num_local_experts",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "n_routed_experts",
        "n_shared_experts",
        "decoder_sparse_step",
        "mlp_only_layers",
        "router_aux_loss_coef",
        "output_router_logits",
        "norm_topk_prob",
        "first_k_dense_replace",
        "moe_layer_freq",
    }
)
Positive = Annotated[int, Field(gt=0, lt=2**31)]
# The most decoder layers an export builds: 8x the deepest published model (Llama-3.1-405B: 126). Each
# layer is about 65 ONNX nodes built in memory, so 10^9 layers grew past 3 GB with no message and
# 20,000 took 77 s and 4.2 GB for a model no wafer cluster plans (``--wafers`` is at most 1,024).
MOST_LAYERS = 1024
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
TokenIds = int | list[int] | None
Names = Annotated[tuple[str, ...], Field(strict=False)]  # a JSON list, kept as a tuple (frozen)


class _Rope(BaseModel):
    """RoPE as transformers >= 5 writes it (``rope_parameters``) or as ``rope_scaling`` gives it
    (then with ``rope_theta`` beside it). Types other than default and llama3 change the graph
    (YaRN scales the attention) or its positions at run time (dynamic), and are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    rope_type: Literal["default", "llama3"] = "default"
    rope_theta: PositiveFloat | None = None
    factor: PositiveFloat | None = None
    low_freq_factor: PositiveFloat | None = None
    high_freq_factor: PositiveFloat | None = None
    original_max_position_embeddings: Positive | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_type_key(cls, data: Any) -> Any:
        """Older configs write ``type`` where newer ones write ``rope_type``."""
        if isinstance(data, dict) and "type" in data:
            data = dict(data)
            if "rope_type" in data and data["rope_type"] != data["type"]:
                raise ValueError(f"type {data['type']!r} and rope_type {data['rope_type']!r} disagree")
            data["rope_type"] = data.pop("type")
        return data

    def llama3(self) -> Llama3Rope | None:
        if self.rope_type == "default":
            return None
        try:
            return Llama3Rope.model_validate(self.model_dump(exclude={"rope_type", "rope_theta"}, exclude_none=True))
        except ValidationError as exc:
            raise ValueError(f"rope_type llama3: {_first(exc)}") from None


class HfConfig(BaseModel):
    """The fields of a LLaMA-family ``config.json`` (defaults: transformers' own for the family).

    Subclasses add their family's fields; ``extra="forbid"`` refuses the rest (:func:`read_hf_config`
    turns that into a one-line error). ``IGNORED`` fields are accepted and do not change the graph."""

    # protected_namespaces: ``model_type`` is the file's own field name
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, protected_namespaces=())
    # Accepted, never used: token ids, initialisation and training settings, bookkeeping, and the
    # context length (the prompt and past lengths are the command's and the solver's choice).
    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            "_name_or_path",
            "architectures",
            "attention_dropout",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
            "initializer_range",
            "max_position_embeddings",
            "transformers_version",
            "use_cache",
        }
    )

    model_type: str
    architectures: Names | None = None
    hidden_size: Positive
    intermediate_size: Positive
    num_hidden_layers: Positive
    num_attention_heads: Positive
    num_key_value_heads: Positive | None = None  # None: as many as the attention heads (no GQA)
    head_dim: Positive | None = None  # None: hidden_size / num_attention_heads
    vocab_size: Positive
    rope_theta: PositiveFloat | None = None
    rope_scaling: _Rope | None = None
    rope_parameters: _Rope | None = None
    rms_norm_eps: PositiveFloat = 1e-6
    tie_word_embeddings: bool = False
    dtype: DType  # ``torch_dtype`` in files written before transformers 4.56 (both are read; one is required)
    hidden_act: Literal["silu"] = "silu"
    # accepted, no effect on the graph (IGNORED)
    name_or_path: str | None = Field(default=None, alias="_name_or_path")
    attention_dropout: float | None = None
    bos_token_id: TokenIds = None
    eos_token_id: TokenIds = None
    pad_token_id: TokenIds = None
    initializer_range: float | None = None
    max_position_embeddings: Positive | None = None
    transformers_version: str | None = None
    use_cache: bool | None = None
    # set when read from a multimodal wrapper (llama4): its architecture and the whole file as given
    _outer: tuple[str, dict[str, Any]] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _dtype(cls, data: Any) -> Any:
        """``torch_dtype`` (older files) and ``dtype`` (newer) name the same thing: one must be given."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "torch_dtype" in data:
            old = data.pop("torch_dtype")
            if "dtype" in data and data["dtype"] != old:
                raise ValueError(f"torch_dtype {old!r} and dtype {data['dtype']!r} disagree")
            data["dtype"] = old
        return data

    @model_validator(mode="after")
    def _shape(self) -> HfConfig:
        if self.architectures is not None and list(self.architectures) != [FAMILIES[self.model_type]]:
            raise ValueError(f"architectures {list(self.architectures)} for model_type {self.model_type!r}; {SUPPORTED}")
        if self.rope_parameters is not None and (self.rope_theta is not None or self.rope_scaling is not None):
            raise ValueError("rope_parameters and rope_theta/rope_scaling both given: give one of them")
        if self.rope_scaling is not None and self.rope_scaling.rope_theta is not None:
            raise ValueError("rope_scaling.rope_theta: give rope_theta beside rope_scaling")
        if self.num_hidden_layers > MOST_LAYERS:
            raise ValueError(
                f"num_hidden_layers {self.num_hidden_layers:,}: at most {MOST_LAYERS:,} layers are exported (the deepest "
                "published model has 126); check the config"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            heads = self.num_attention_heads
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {heads}; give head_dim")
        self.spec()  # the graph's own checks (heads vs KV heads, an even head_dim, llama3 RoPE's fields)
        return self

    # what each family's layers have (overridden by the families; ``attention_bias``, where a family
    # has the field, puts biases on q, k, v and o)
    def _qkv_bias(self) -> bool:
        return bool(getattr(self, "attention_bias", False))

    def _o_bias(self) -> bool:
        return bool(getattr(self, "attention_bias", False))

    def _mlp_bias(self) -> bool:
        return False

    def _qk_norm(self) -> bool:
        return False

    def _dense_ffn(self) -> int:
        """The FFN width of the dense layers (every layer's, in a dense model)."""
        return self.intermediate_size

    def _moe(self) -> dict[str, Any]:
        """The mixture-of-experts fields of the spec (none: a dense model)."""
        return {}

    def _head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def window(self) -> int | None:
        """The sliding-window length in effect (None: full attention); recorded, not modelled."""
        return None

    @property
    def window_field(self) -> str:
        """The field :attr:`window` comes from (named in the command's note)."""
        return "sliding_window"

    @property
    def architecture(self) -> str:
        return self._outer[0] if self._outer is not None else FAMILIES[self.model_type]

    def spec(self) -> DecoderSpec:
        """The numbers the graph is built from."""
        rope = self.rope_parameters or self.rope_scaling or _Rope()
        theta = self.rope_theta if self.rope_theta is not None else rope.rope_theta
        try:
            return DecoderSpec(
                layers=self.num_hidden_layers,
                hidden=self.hidden_size,
                heads=self.num_attention_heads,
                kv_heads=self.num_key_value_heads or self.num_attention_heads,
                head_dim=self._head_dim(),
                ffn=self._dense_ffn(),
                vocab=self.vocab_size,
                dtype=self.dtype,
                rope_theta=10000.0 if theta is None else theta,
                rope_llama3=rope.llama3(),
                eps=self.rms_norm_eps,
                qkv_bias=self._qkv_bias(),
                o_bias=self._o_bias(),
                mlp_bias=self._mlp_bias(),
                qk_norm=self._qk_norm(),
                tied=self.tie_word_embeddings,
                **self._moe(),
            )
        except ValidationError as exc:
            raise ValueError(_first(exc)) from None

    def recorded(self) -> dict[str, Any]:
        """The config as given, for the files' metadata (``torch_dtype`` spelled ``dtype``; a multimodal
        wrapper's file whole, as read)."""
        if self._outer is not None:
            return self._outer[1]
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class LlamaConfig(HfConfig):
    """LLaMA 2 / 3 / 3.1: ``attention_bias`` puts biases on q, k, v and o; ``mlp_bias`` on the FFN."""

    model_type: Literal["llama"]
    attention_bias: bool = False
    mlp_bias: bool = False
    pretraining_tp: Literal[1] = 1  # > 1 slices the projections as in pretraining: not this graph

    def _mlp_bias(self) -> bool:
        return self.mlp_bias


class MistralConfig(HfConfig):
    """Mistral: LLaMA's graph; ``sliding_window`` recorded (see the module docstring)."""

    model_type: Literal["mistral"]
    sliding_window: Positive | None = 4096

    @property
    def window(self) -> int | None:
        return self.sliding_window


class _QwenConfig(HfConfig):
    """Qwen2 and Qwen3 share the sliding-window fields (in effect only with ``use_sliding_window``)."""

    sliding_window: Positive | None = 4096
    use_sliding_window: bool = False
    max_window_layers: Positive | None = None
    layer_types: Annotated[tuple[Literal["full_attention", "sliding_attention"], ...], Field(strict=False)] | None = None

    @property
    def window(self) -> int | None:
        sliding = self.use_sliding_window or "sliding_attention" in (self.layer_types or ())
        return self.sliding_window if sliding else None


class Qwen2Config(_QwenConfig):
    """Qwen2 / Qwen2.5: biases on q, k and v (not o), always."""

    model_type: Literal["qwen2"]
    use_mrope: Literal[False] = False  # multimodal RoPE (Qwen2-VL): not this graph

    def _qkv_bias(self) -> bool:
        return True


class Qwen3Config(_QwenConfig):
    """Qwen3 dense: q/k RMSNorm per head, head_dim 128 unless given, ``attention_bias`` on q, k, v, o."""

    model_type: Literal["qwen3"]
    head_dim: Positive | None = 128
    attention_bias: bool = False

    def _qk_norm(self) -> bool:
        return True


# Mixture-of-experts families. The routing's training-only fields are accepted and have no effect on the
# graph: ``router_aux_loss_coef`` (the load-balancing loss), ``output_router_logits`` (returning the
# router's logits for it), ``router_jitter_noise`` (noise multiplied into the router's input in training
# only). Every expert of a MoE layer is resident; the graph holds them all in one ``MoE`` node.
_TRAINING_ONLY = frozenset({"router_aux_loss_coef", "output_router_logits", "router_jitter_noise"})


def _moe_spec(experts: int, top_k: int, expert_ffn: int, layers: list[int], renormalize: bool, shared: int = 0) -> dict[str, Any]:
    """The spec's MoE fields; no MoE layer at all (e.g. every layer in ``mlp_only_layers``): a dense model."""
    if not layers:
        return {}
    return {
        "experts": experts,
        "top_k": top_k,
        "expert_ffn": expert_ffn,
        "shared_expert_ffn": shared,
        "moe_layers": tuple(layers),
        "renormalize": renormalize,
    }


class MixtralConfig(HfConfig):
    """Mixtral (``MixtralForCausalLM``): Mistral's attention (``sliding_window`` recorded as Mistral's),
    every layer a mixture of ``num_local_experts`` SiLU-gated experts of ``intermediate_size``, the
    softmax's top ``num_experts_per_tok`` renormalized (transformers' ``MixtralSparseMoeBlock``); no
    shared expert."""

    IGNORED: ClassVar[frozenset[str]] = HfConfig.IGNORED | _TRAINING_ONLY
    model_type: Literal["mixtral"]
    sliding_window: Positive | None = None
    num_local_experts: Positive = 8
    num_experts_per_tok: Positive = 2
    # training only (IGNORED)
    router_aux_loss_coef: float | None = None
    output_router_logits: bool | None = None
    router_jitter_noise: float | None = None

    @property
    def window(self) -> int | None:
        return self.sliding_window

    def _moe(self) -> dict[str, Any]:
        layers = list(range(self.num_hidden_layers))
        return _moe_spec(self.num_local_experts, self.num_experts_per_tok, self.intermediate_size, layers, True)


class Qwen3MoeConfig(_QwenConfig):
    """Qwen3-MoE (``Qwen3MoeForCausalLM``): Qwen3's attention (q/k RMSNorm per head, ``attention_bias``);
    layer i is a mixture of ``num_experts`` experts of ``moe_intermediate_size`` when it is not in
    ``mlp_only_layers`` and (i + 1) is a multiple of ``decoder_sparse_step``, else a dense FFN of
    ``intermediate_size`` (transformers' ``Qwen3MoeDecoderLayer``); ``num_experts_per_tok`` per token,
    renormalized over the top k when ``norm_topk_prob``; no shared expert. ``head_dim`` defaults to
    hidden / heads (transformers' attention reads it when given)."""

    IGNORED: ClassVar[frozenset[str]] = HfConfig.IGNORED | _TRAINING_ONLY
    model_type: Literal["qwen3_moe"]
    attention_bias: bool = False
    num_experts: Annotated[int, Field(ge=0, lt=2**31)] = 128
    num_experts_per_tok: Positive = 8
    moe_intermediate_size: Positive = 768
    decoder_sparse_step: Positive = 1
    mlp_only_layers: Annotated[tuple[Annotated[int, Field(ge=0)], ...], Field(strict=False)] | None = None
    norm_topk_prob: bool = False
    # training only (IGNORED)
    router_aux_loss_coef: float | None = None
    output_router_logits: bool | None = None

    def _qk_norm(self) -> bool:
        return True

    def _moe(self) -> dict[str, Any]:
        dense = set(self.mlp_only_layers or ())
        step = self.decoder_sparse_step
        layers = [i for i in range(self.num_hidden_layers) if i not in dense and (i + 1) % step == 0] if self.num_experts else []
        bad = sorted(i for i in dense if i >= self.num_hidden_layers)
        if bad:
            raise ValueError(f"mlp_only_layers: layer {bad[0]} is not one of the {self.num_hidden_layers} layers")
        return _moe_spec(self.num_experts, self.num_experts_per_tok, self.moe_intermediate_size, layers, self.norm_topk_prob)


class Llama4TextConfig(HfConfig):
    """Llama 4's text model (``llama4_text``; Scout, Maverick): the layers in ``moe_layers`` (by default
    every ``interleave_moe_layer_step``-th: layers step - 1, 2·step - 1, ...) are a mixture of
    ``num_local_experts`` experts of ``intermediate_size`` (``num_experts_per_tok`` per token) plus a
    shared expert of the same width added to their output; the other layers a dense FFN of
    ``intermediate_size_mlp`` (transformers' ``Llama4TextDecoderLayer``). Llama 4 scores the top k
    with a sigmoid and scales each expert's input by it; the op is written with
    ``normalize_routing_weights`` 0 (no renormalization): the same shapes and MACs.

    Accepted, recorded, no effect on any MatMul's shape (the graph is the one with every layer's
    RoPE and full causal attention): ``no_rope_layers`` / ``no_rope_layer_interval`` (the NoPE layers
    skip RoPE, an elementwise rotation of q and k), ``attention_chunk_size`` / ``layer_types``
    (chunked attention on the RoPE layers: a mask on the same score matrix, as ``sliding_window``;
    beyond a chunk a cache could hold less), ``attn_temperature_tuning`` / ``floor_scale`` /
    ``attn_scale`` (the NoPE layers' queries scaled by a factor of the position: elementwise),
    ``use_qk_norm`` (an L2 norm of q and k without weights: elementwise). Llama 4 rotates adjacent
    pairs where the graph rotates halves: a permutation of the same elementwise work."""

    IGNORED: ClassVar[frozenset[str]] = HfConfig.IGNORED | _TRAINING_ONLY | {"_attn_implementation_autoset", "for_llm_compressor"}
    model_type: Literal["llama4_text"]
    intermediate_size: Positive = 8192
    intermediate_size_mlp: Positive = 16384
    head_dim: Positive | None = 128
    attention_bias: bool = False
    num_local_experts: Positive = 16
    num_experts_per_tok: Positive = 1
    interleave_moe_layer_step: Positive = 1
    moe_layers: Annotated[tuple[Annotated[int, Field(ge=0)], ...], Field(strict=False)] | None = None
    # recorded, no effect on any MatMul's shape (see the class docstring)
    no_rope_layers: Annotated[tuple[Literal[0, 1], ...], Field(strict=False)] | None = None
    no_rope_layer_interval: Positive = 4
    attention_chunk_size: Positive | None = 8192
    layer_types: Annotated[tuple[Literal["chunked_attention", "full_attention"], ...], Field(strict=False)] | None = None
    attn_temperature_tuning: bool | Annotated[int, Field(ge=0)] = True  # Scout's file writes 4 (truthy)
    floor_scale: PositiveFloat = 8192
    attn_scale: PositiveFloat = 0.1
    use_qk_norm: bool = True
    # training only and bookkeeping (IGNORED)
    router_aux_loss_coef: float | None = None
    output_router_logits: bool | None = None
    router_jitter_noise: float | None = None
    attn_implementation_autoset: bool | None = Field(default=None, alias="_attn_implementation_autoset")
    for_llm_compressor: bool | None = None

    def _dense_ffn(self) -> int:
        return self.intermediate_size_mlp

    @property
    def window(self) -> int | None:
        """The attention chunk of the RoPE layers (recorded, not modelled, as a sliding window)."""
        return self.attention_chunk_size

    @property
    def window_field(self) -> str:
        return "attention_chunk_size"

    def moe_layer_indices(self) -> list[int]:
        step = self.interleave_moe_layer_step
        if self.moe_layers is not None:
            return sorted(set(self.moe_layers))
        return list(range(step - 1, self.num_hidden_layers, step))

    def _moe(self) -> dict[str, Any]:
        layers = self.moe_layer_indices()
        if layers and layers[-1] >= self.num_hidden_layers:
            raise ValueError(f"moe_layers: layer {layers[-1]} is not one of the {self.num_hidden_layers} layers")
        if self.no_rope_layers and len(self.no_rope_layers) != self.num_hidden_layers:
            raise ValueError(f"no_rope_layers: {len(self.no_rope_layers)} values for {self.num_hidden_layers} layers")
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types: {len(self.layer_types)} values for {self.num_hidden_layers} layers")
        f = self.intermediate_size
        return _moe_spec(self.num_local_experts, self.num_experts_per_tok, f, layers, False, shared=f)


_CLASSES: dict[str, type[HfConfig]] = {
    "llama": LlamaConfig,
    "mistral": MistralConfig,
    "qwen2": Qwen2Config,
    "qwen3": Qwen3Config,
    "mixtral": MixtralConfig,
    "qwen3_moe": Qwen3MoeConfig,
    "llama4_text": Llama4TextConfig,
}
AnyConfig = Annotated[
    LlamaConfig | MistralConfig | Qwen2Config | Qwen3Config | MixtralConfig | Qwen3MoeConfig | Llama4TextConfig,
    Field(discriminator="model_type"),
]
_ADAPTER: TypeAdapter[HfConfig] = TypeAdapter(AnyConfig)


# Why a field admits only some values (appended to pydantic's "Input should be ...").
_WHY = {
    "hidden_act": "the family's SiLU-gated FFN is the only activation supported",
    "dtype": "float16 and bfloat16 (2 bytes each) are supported",
    "pretraining_tp": "values over 1 slice the projections as in pretraining; only 1 is supported",
    "rope_type": "other RoPE types change the graph (YaRN) or its frequencies at run time (dynamic)",
    "use_mrope": "multimodal RoPE (Qwen2-VL) is not supported",
}


def _first(exc: ValidationError) -> str:
    """The first problem of a validation error as ``field: value: message`` (one line)."""
    err = exc.errors()[0]
    parts = [str(p) for p in err["loc"]]
    if parts and parts[0] in FAMILIES:  # the union's tag (model_type), not a field
        parts = parts[1:]
    loc = ".".join(parts)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"missing required field {'torch_dtype (or dtype): give float16 or bfloat16' if loc == 'dtype' else repr(loc)}"
    if not loc or isinstance(err.get("input"), dict):
        return msg
    why = _WHY.get(parts[-1])
    return f"{loc}: {err.get('input')!r}: {msg}" + (f" ({why})" if why and err["type"] == "literal_error" else "")


def _fields(cls: type[BaseModel]) -> list[str]:
    """The keys a family's config.json may hold (aliases as written in the file)."""
    return sorted({f.alias or name for name, f in cls.model_fields.items()} | {"torch_dtype"})


def _unknown_field_error(label: str, model_type: str, field: str, cls: type[BaseModel] | None = None) -> str:
    known = _fields(cls or _CLASSES[model_type])
    close = difflib.get_close_matches(field, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    if field in MOE_FIELDS:
        what = f"field {field!r}: a mixture-of-experts field model_type {model_type!r} does not have (it would change the graph)"
    else:
        what = f"unknown field {field!r} for model_type {model_type!r} (it may change the graph)"
    return f"{label}: {what}; {hint}supported: {', '.join(known)}"


class _Llama4Config(BaseModel):
    """The multimodal Llama 4 file (``llama4``, ``Llama4ForConditionalGeneration``): its ``text_config``
    is the text model written; the vision encoder (``vision_config``) turns images into prompt
    embeddings and is not part of text generation, so it is accepted and not modelled, as are the
    image token ids. ``tie_word_embeddings`` and the dtype given here apply to the text model unless its
    own config gives them (then they must agree)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, protected_namespaces=())

    model_type: Literal["llama4"]
    architectures: Names | None = None
    text_config: dict[str, Any]
    vision_config: dict[str, Any] | None = None
    boi_token_index: int | None = None
    eoi_token_index: int | None = None
    image_token_index: int | None = None
    tie_word_embeddings: bool | None = None
    dtype: DType | None = None
    torch_dtype: DType | None = None
    transformers_version: str | None = None
    name_or_path: str | None = Field(default=None, alias="_name_or_path")


def _parse_llama4(data: dict[str, Any], label: str) -> HfConfig:
    """A multimodal Llama 4 file: its text_config read as ``llama4_text`` (errors name ``text_config``)."""
    try:
        outer = _Llama4Config.model_validate(data)
    except ValidationError as exc:
        unknown = [e for e in exc.errors() if e["type"] == "extra_forbidden"]
        if unknown:
            raise ModelLoadError(_unknown_field_error(label, LLAMA4, str(unknown[0]["loc"][-1]), _Llama4Config)) from None
        raise ModelLoadError(f"{label}: {_first(exc)}") from None
    if outer.architectures is not None and list(outer.architectures) != [LLAMA4_ARCHITECTURE]:
        raise ModelLoadError(f"{label}: architectures {list(outer.architectures)} for model_type 'llama4'; {SUPPORTED}")
    if outer.dtype is not None and outer.torch_dtype is not None and outer.dtype != outer.torch_dtype:
        raise ModelLoadError(f"{label}: torch_dtype {outer.torch_dtype!r} and dtype {outer.dtype!r} disagree")
    text = dict(outer.text_config)
    if text.setdefault("model_type", "llama4_text") != "llama4_text":
        raise ModelLoadError(f"{label}: text_config.model_type {text['model_type']!r}: expected 'llama4_text'")
    for key, value in (("tie_word_embeddings", outer.tie_word_embeddings), ("dtype", outer.dtype or outer.torch_dtype)):
        given = text.get(key, text.get("torch_dtype") if key == "dtype" else None)
        if value is None:
            continue
        if given is None:
            text[key] = value
        elif given != value:
            raise ModelLoadError(f"{label}: text_config's {key} {given!r} and the file's {value!r} disagree")
    cfg = parse_hf_config(text, f"{label}: text_config")
    cfg._outer = (LLAMA4_ARCHITECTURE, data)
    return cfg


def parse_hf_config(data: Any, label: str) -> HfConfig:
    """``data`` (a parsed config.json) as a validated config; ``label`` names it in errors."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{label}: expected a JSON object of config fields, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise ModelLoadError(f"{label}: no model_type; {SUPPORTED}")
    if model_type == LLAMA4:
        return _parse_llama4(data, label)
    if model_type not in FAMILIES:
        arch = f" (architectures {data['architectures']})" if "architectures" in data else ""
        raise ModelLoadError(f"{label}: model_type {model_type!r}{arch} is not supported; {SUPPORTED}")
    moe = sorted(MOE_FIELDS & set(data))
    if moe and model_type in DENSE:
        raise ModelLoadError(f"{label}: field {moe[0]!r}: a mixture-of-experts model; {SUPPORTED}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        unknown = [e for e in exc.errors() if e["type"] == "extra_forbidden"]
        if unknown:  # named first: a field we do not know may be why the others look wrong
            raise ModelLoadError(_unknown_field_error(label, model_type, str(unknown[0]["loc"][-1]))) from None
        raise ModelLoadError(f"{label}: {_first(exc)}") from None


def read_hf_config(path: str | Path) -> HfConfig:
    """Read a config.json (or a folder holding one, as a Hugging Face snapshot has it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ModelLoadError(f"{p}: no such file; give a Hugging Face config.json (or the folder holding it)")
    try:
        text = p.read_text(encoding="utf-8-sig")  # (a byte-order mark, as some editors write, is not JSON)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{p}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{p}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:  # Python's JSON reader recurses once per level
        raise ModelLoadError(f"{p}: JSON nested too deep for a config (about 1,000 levels or more)") from None
    return parse_hf_config(data, str(p))


def default_name(path: str | Path) -> str:
    """The output name for a config: the file's stem, or its folder's name for a ``config.json``."""
    p = Path(path).resolve()
    if p.is_dir():
        return p.name
    return p.parent.name if p.stem == "config" else p.stem


@dataclass(frozen=True)
class Written:
    """One ONNX file written by :func:`export_llm`."""

    form: Form
    path: Path
    file_bytes: int
    nodes: int
    weight_bytes: int  # of the absent data file


def llm_model(config: HfConfig, form: Form, name: str, prompt: int = PROMPT) -> onnx.ModelProto:
    """The ``form`` of ``config``'s model, with the zoo's metadata (the config as given, the exporter,
    the weights' absence, the cache layout); its weights reference the absent ``<name>-<form>.weights``."""
    model = build_decoder(config.spec(), form, prompt, f"{name}-{form}.weights")
    given = config.recorded()
    meta = {
        "wsealloc.zoo.model": f"transformers.{config.architecture}",
        "wsealloc.zoo.config": json.dumps(given, sort_keys=True),
        "wsealloc.zoo.exporter": f"wsealloc export-llm (onnx.helper, no torch), wsealloc {__version__}, onnx {onnx.__version__}",
        "wsealloc.zoo.weights": "absent: weightless convention, see models/README.md",
        "wsealloc.zoo.kv_cache": CACHE_NOTES[form],
    }
    if form == "prefill":
        meta["wsealloc.zoo.prompt"] = str(prompt)
    for key, value in meta.items():
        model.metadata_props.add(key=key, value=value)
    return model


def export_llm(config: HfConfig, out_dir: str | Path, name: str, prompt: int = PROMPT) -> tuple[Written, Written]:
    """Write ``<out_dir>/<name>-decode.onnx`` and ``<name>-prefill.onnx`` (each atomically; every
    path is checked before either is written)."""
    forms: tuple[Form, Form] = ("decode", "prefill")
    paths = [Path(out_dir) / f"{name}-{form}.onnx" for form in forms]
    for path in paths:
        check_writable(path)
    written = []
    for form, path in zip(forms, paths, strict=True):
        model = llm_model(config, form, name, prompt)
        data = model.SerializeToString()
        write_atomic(path, data)
        written.append(Written(form, path, len(data), len(model.graph.node), weight_bytes(model)))
    return written[0], written[1]
