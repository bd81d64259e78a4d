"""A Hugging Face ``config.json`` of a LLaMA-family model read into a frozen, validated object, and
the model's prefill and decode-step ONNX written from it (``wsealloc export-llm``), with no torch.

Families (``model_type``, and ``architectures`` if given): ``llama`` (LLaMA 2, 3, 3.1; ``LlamaForCausalLM``),
``mistral`` (``MistralForCausalLM``), ``qwen2`` (Qwen2 / Qwen2.5, QKV biases; ``Qwen2ForCausalLM``),
``qwen3`` (Qwen3 dense: per-head q/k RMSNorm, head_dim given on its own; ``Qwen3ForCausalLM``).
Mixture-of-experts models (Mixtral, Qwen3-MoE, ...) are refused: their expert routing is not this graph.

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
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

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
}
SUPPORTED = f"supported: llama, mistral, qwen2, qwen3 (dense; {', '.join(FAMILIES.values())})"
# Fields of mixture-of-experts configurations (Mixtral, Qwen2/3-MoE, DeepSeek, ...): refused by name.
MOE_FIELDS = frozenset(
    {
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
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            heads = self.num_attention_heads
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {heads}; give head_dim")
        self.spec()  # the graph's own checks (heads vs KV heads, an even head_dim, llama3 RoPE's fields)
        return self

    # what each family's layers have (overridden by the families)
    def _qkv_bias(self) -> bool:
        return False

    def _o_bias(self) -> bool:
        return False

    def _mlp_bias(self) -> bool:
        return False

    def _qk_norm(self) -> bool:
        return False

    def _head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def window(self) -> int | None:
        """The sliding-window length in effect (None: full attention); recorded, not modelled."""
        return None

    @property
    def architecture(self) -> str:
        return FAMILIES[self.model_type]

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
                ffn=self.intermediate_size,
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
            )
        except ValidationError as exc:
            raise ValueError(_first(exc)) from None


class LlamaConfig(HfConfig):
    """LLaMA 2 / 3 / 3.1: ``attention_bias`` puts biases on q, k, v and o; ``mlp_bias`` on the FFN."""

    model_type: Literal["llama"]
    attention_bias: bool = False
    mlp_bias: bool = False
    pretraining_tp: Literal[1] = 1  # > 1 slices the projections as in pretraining: not this graph

    def _qkv_bias(self) -> bool:
        return self.attention_bias

    def _o_bias(self) -> bool:
        return self.attention_bias

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

    def _qkv_bias(self) -> bool:
        return self.attention_bias

    def _o_bias(self) -> bool:
        return self.attention_bias

    def _qk_norm(self) -> bool:
        return True


_CLASSES: dict[str, type[HfConfig]] = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
AnyConfig = Annotated[LlamaConfig | MistralConfig | Qwen2Config | Qwen3Config, Field(discriminator="model_type")]
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


def _fields(cls: type[HfConfig]) -> list[str]:
    """The keys a family's config.json may hold (aliases as written in the file)."""
    return sorted({f.alias or name for name, f in cls.model_fields.items()} | {"torch_dtype"})


def _unknown_field_error(label: str, model_type: str, field: str) -> str:
    known = _fields(_CLASSES[model_type])
    close = difflib.get_close_matches(field, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    what = f"unknown field {field!r} for model_type {model_type!r} (it may change the graph)"
    return f"{label}: {what}; {hint}supported: {', '.join(known)}"


def parse_hf_config(data: Any, label: str) -> HfConfig:
    """``data`` (a parsed config.json) as a validated config; ``label`` names it in errors."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{label}: expected a JSON object of config fields, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise ModelLoadError(f"{label}: no model_type; {SUPPORTED}")
    if model_type not in FAMILIES:
        arch = f" (architectures {data['architectures']})" if "architectures" in data else ""
        raise ModelLoadError(f"{label}: model_type {model_type!r}{arch} is not supported; {SUPPORTED}")
    moe = sorted(MOE_FIELDS & set(data))
    if moe:
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
        text = p.read_text(encoding="utf-8")
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
    given = config.model_dump(mode="json", by_alias=True, exclude_unset=True)
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
