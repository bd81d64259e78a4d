"""Regenerate the model zoo: real architectures exported with torch.onnx's dynamo exporter
(``torch.onnx.export(..., dynamo=True)``), stored WITHOUT weight data (the weightless convention in
models/README.md).

Needs torch (a CPU build), transformers, onnxscript and onnx (``pip install -e ".[zoo]"``, or see
models/README.md). Nothing is downloaded: every configuration is built in code (never
``from_pretrained``) and every model is exported from the meta device, so no weights are ever
materialized and even the LLaMA-70B-shaped model exports in about a minute. Every model here
works with the dynamo exporter; the TorchScript exporter is not used.

    python models/export.py                          # every model, into models/
    python models/export.py gpt2 llama-7b            # some
    python models/export.py --out /tmp/zoo resnet50  # elsewhere
    python models/export.py llama3-8b-decode         # one KV-cache form (models/README.md, "KV cache convention")

Each model is then post-processed with the ``onnx`` package (``apply_weightless_convention``):
initializers with more than 64 elements lose their data and become external-data references into
``<stem>.weights`` (a file that is never written), small ones keep their data, big Constant nodes
become initializers first. Each file is checked with ``onnx.checker.check_model`` and
``onnx.shape_inference.infer_shapes(data_prop=True)``; the summary line counts node outputs whose
shape shape inference cannot make fully static (for a decode step: also after binding its symbolic
dims to ``BIND``, batch 1 and a past of 4096 tokens).

The LLM prefill and decode forms (``*-prefill``, ``*-decode``) are float16 and carry the KV cache:
a prefill returns the ``present.{i}.key/value`` the prompt writes, a decode step takes
``past_key_values.{i}.key/value`` with symbolic ``batch_size`` and ``past_sequence_length`` (a
``torch.export`` dynamic shape each) and returns the presents one token longer.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ALIGN = 4096  # offsets into the (absent) data file are aligned as onnx's own external-data writer may
SMALL = 64  # initializers with at most this many elements keep their data (shape constants, scalars)
OPSET = 20
# Decode steps: the symbolic dims, the sizes they are traced at (any size other than 0 and 1 would do)
# and the sizes verify() binds them to (batch 1, a 4096-token past: the measured setup).
BATCH, PAST = "batch_size", "past_sequence_length"
TOTAL = f"{PAST} + 1"  # the presents' length dim, as the exporter derives it from the past's
TRACE = {BATCH: 3, PAST: 17}
BIND = {BATCH: 1, PAST: 4096}


# --------------------------------------------------------------------------------------------------
# The zoo


@dataclass(frozen=True)
class Spec:
    """One zoo model: a transformers class built from a configuration written out here."""

    config_cls: str
    model_cls: str
    cfg: dict[str, Any]
    inputs: tuple[tuple[str, tuple[int | str, ...], str], ...]  # (name, shape, dtype); str: a symbolic dim
    outputs: tuple[str, ...]  # attributes of the model output, in order (then the presents, see cache)
    note: str = ""
    # Small (<= SMALL elements) parameters and buffers need real values. They are taken from a
    # randomly initialized CPU copy of the model; for the big models a copy with one layer, whose
    # layer 0 stands for every layer (those tensors are initialized the same in every layer).
    source_layers: int | None = None
    # KV cache: None (none: use_cache=False), "prefill" (outputs the presents the prompt writes) or
    # "decode" (one token with the past as inputs, outputs the presents); see models/README.md.
    cache: str | None = None

    @property
    def layers(self) -> int:
        return int(self.cfg["num_hidden_layers"])

    @property
    def dtype(self) -> str:
        """Parameters' and activations' dtype (the model is built with it as torch's default dtype)."""
        return str(self.cfg.get("dtype", "float32"))

    @property
    def input_names(self) -> list[str]:
        return [name for name, _, _ in self.inputs]

    @property
    def output_names(self) -> list[str]:
        presents = [f"present.{i}.{kv}" for i in range(self.layers) for kv in ("key", "value")] if self.cache else []
        return [*self.outputs, *presents]


def _ids(seq: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return (("input_ids", (1, seq), "int64"),)


PIXELS = (("pixel_values", (1, 3, 224, 224), "float32"),)


def _decode_inputs(cfg: dict[str, Any]) -> tuple[tuple[str, tuple[int | str, ...], str], ...]:
    """One new token per sequence plus the past keys and values of every layer (symbolic dims)."""
    kv, head_dim = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    past = tuple(
        (f"past_key_values.{i}.{t}", (BATCH, kv, PAST, head_dim), cfg["dtype"])
        for i in range(cfg["num_hidden_layers"])
        for t in ("key", "value")
    )
    return (("input_ids", (BATCH, 1), "int64"), *past)


def _llm(cfg: dict[str, Any], prompt: int) -> dict[str, Spec]:
    """The prefill (a ``prompt``-token prompt) and decode-step forms of a LlamaForCausalLM."""
    return {
        "prefill": Spec("LlamaConfig", "LlamaForCausalLM", cfg, _ids(prompt), ("logits",), source_layers=1, cache="prefill"),
        "decode": Spec("LlamaConfig", "LlamaForCausalLM", cfg, _decode_inputs(cfg), ("logits",), source_layers=1, cache="decode"),
    }


GPT2_XL = dict(n_embd=1600, n_layer=48, n_head=25)
BERT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
LLAMA_7B = dict(
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    vocab_size=32000,
    max_position_embeddings=2048,
)
LLAMA_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=32000,
    max_position_embeddings=2048,
)

LLAMA3_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    dtype="float16",
)
LLAMA2_13B = dict(
    hidden_size=5120,
    intermediate_size=13824,
    num_hidden_layers=40,
    num_attention_heads=40,
    num_key_value_heads=40,
    vocab_size=32000,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    dtype="float16",
)
PROMPT = 4096  # prefill length of the LLM forms (the measured setup)

MODELS: dict[str, Spec] = {
    "gpt2": Spec("GPT2Config", "GPT2LMHeadModel", {}, _ids(1024), ("logits",), "GPT2Config() defaults"),
    "gpt2-xl": Spec("GPT2Config", "GPT2LMHeadModel", GPT2_XL, _ids(1024), ("logits",), source_layers=1),
    "bert-base": Spec("BertConfig", "BertModel", {}, _ids(384), ("last_hidden_state", "pooler_output"), "BertConfig() defaults"),
    "bert-large": Spec("BertConfig", "BertModel", BERT_LARGE, _ids(384), ("last_hidden_state", "pooler_output")),
    "resnet50": Spec(
        "ResNetConfig", "ResNetForImageClassification", {"num_labels": 1000}, PIXELS, ("logits",), "ResNetConfig() = ResNet-50"
    ),
    "vit-b16": Spec(
        "ViTConfig", "ViTForImageClassification", {"num_labels": 1000}, PIXELS, ("logits",), "ViTConfig() = ViT-B/16 at 224"
    ),
    "llama-7b": Spec("LlamaConfig", "LlamaForCausalLM", LLAMA_7B, _ids(2048), ("logits",), source_layers=1),
    "llama-70b": Spec("LlamaConfig", "LlamaForCausalLM", LLAMA_70B, _ids(2048), ("logits",), source_layers=1),
    **{f"llama3-8b-{form}": spec for form, spec in _llm(LLAMA3_8B, PROMPT).items()},
    **{f"llama2-13b-{form}": spec for form, spec in _llm(LLAMA2_13B, PROMPT).items()},
}


def make_config(spec: Spec, layers: int | None = None) -> Any:
    import transformers

    config = getattr(transformers, spec.config_cls)(**spec.cfg)
    config._attn_implementation = "eager"  # explicit MatMul + Softmax attention, not a fused SDPA op
    config.use_cache = spec.cache is not None  # else no KV cache inputs or outputs
    if layers is not None:
        config.num_hidden_layers = layers  # GPT2Config maps this onto n_layer
    return config


def make_model(spec: Spec, device: str, layers: int | None = None) -> Any:
    """The model, wrapped so that its forward takes the inputs positionally and returns tensors only
    (with a KV cache: the logits, then every layer's key and value, flat)."""
    import torch
    import transformers

    config = make_config(spec, layers)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, spec.dtype))  # as from_pretrained(dtype=...): buffers such as
    try:  # RoPE's inv_freq, built explicitly in float32, stay float32
        with torch.device(device):
            inner = getattr(transformers, spec.model_cls)(config)
    finally:
        torch.set_default_dtype(default)
    inner.eval()
    names = spec.input_names
    outputs = spec.outputs
    cache = spec.cache

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> Any:
            if cache is None:
                out = self.inner(**dict(zip(names, args, strict=True)))
                return tuple(getattr(out, o) for o in outputs) if len(outputs) > 1 else getattr(out, outputs[0])
            past = _dynamic_cache(config, args[1:]) if cache == "decode" else None
            out = self.inner(input_ids=args[0], past_key_values=past, use_cache=True)
            presents = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (*(getattr(out, o) for o in outputs), *presents)

    return Wrapped().eval()


def _dynamic_cache(config: Any, past: tuple[Any, ...]) -> Any:
    """A DynamicCache holding the flat past tensors (key, value per layer) as they are: each layer's
    update then concatenates past and new along the sequence axis. (``DynamicCache(ddp_cache_data)``
    would concatenate the past onto an empty tensor first.)"""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=config)
    if len(cache.layers) * 2 != len(past):
        raise RuntimeError(f"{len(past)} past tensors for {len(cache.layers)} layers")
    for layer, key, value in zip(cache.layers, past[0::2], past[1::2], strict=True):
        layer.dtype, layer.device = key.dtype, key.device
        layer.keys, layer.values = key, value
        layer.is_initialized = True
    return cache


def example_inputs(spec: Spec, device: str) -> tuple[Any, ...]:
    import torch

    def size(d: int | str) -> int:
        return TRACE[d] if isinstance(d, str) else d

    return tuple(
        torch.zeros(tuple(size(d) for d in shape), dtype=getattr(torch, dtype), device=device) for _, shape, dtype in spec.inputs
    )


def dynamic_shapes(spec: Spec) -> tuple[dict[int, Any], ...] | None:
    """torch.export dynamic shapes for the symbolic input dims (one Dim per name), or None."""
    import torch

    symbols = sorted({d for _, shape, _ in spec.inputs for d in shape if isinstance(d, str)})
    if not symbols:
        return None
    longest = int(spec.cfg.get("max_position_embeddings", 1 << 16))
    top = {BATCH: 1024, PAST: longest - 1}
    dims = {name: torch.export.Dim(name, min=1, max=top[name]) for name in symbols}
    return tuple({axis: dims[d] for axis, d in enumerate(shape) if isinstance(d, str)} for _, shape, _ in spec.inputs)


# --------------------------------------------------------------------------------------------------
# Export


_LAYER_INDEX = re.compile(r"\.(h|layer|layers)\.\d+\.")


def _small_values(spec: Spec, wanted: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """Real values for the small initializers ``wanted`` (name -> shape) of a meta-device export."""
    import torch

    if not wanted:
        return {}
    torch.manual_seed(0)
    source = make_model(spec, "cpu", spec.source_layers)
    tensors = dict(source.named_parameters())
    tensors.update(source.named_buffers())  # non-persistent buffers too (e.g. rotary inv_freq)
    values = {}
    for name, shape in wanted.items():
        key = name if spec.source_layers is None else _LAYER_INDEX.sub(lambda m: f".{m.group(1)}.0.", name)
        tensor = tensors.get(key)
        if tensor is None or tuple(tensor.shape) != shape:
            raise RuntimeError(f"no value for small initializer {name} {shape} (looked up {key})")
        values[name] = tensor.detach().clone()
    del source, tensors
    return values


def export_proto(name: str) -> Any:
    """Export one zoo model with the dynamo exporter from the meta device; returns an onnx ModelProto
    whose big initializers are (provisional) external references and small ones hold real values."""
    import onnx_ir as ir
    import torch

    spec = MODELS[name]
    module = make_model(spec, "meta")
    shapes = dynamic_shapes(spec)
    program = torch.onnx.export(
        module,
        example_inputs(spec, "meta"),
        dynamo=True,
        optimize=False,  # the onnxscript optimizer cannot fold meta tensors (it reads their data)
        opset_version=OPSET,
        input_names=spec.input_names,
        output_names=spec.output_names,
        dynamic_shapes=None if shapes is None else (shapes,),  # forward(*args): one entry, the args tuple
        verbose=False,
    )
    model = program.model
    small = {}
    for init_name, value in model.graph.initializers.items():
        shape = tuple(int(d) for d in value.shape)
        if math.prod(shape) <= SMALL and _is_meta(value.const_value):
            small[init_name] = shape
    fill = _small_values(spec, small)
    for init_name, value in model.graph.initializers.items():
        shape = tuple(int(d) for d in value.shape)
        if init_name in small:
            value.const_value = ir.tensor(fill[init_name].numpy(), name=init_name)
        elif math.prod(shape) > SMALL:
            # Provisional reference (no data is read); apply_weightless_convention lays them out.
            value.const_value = ir.ExternalTensor(f"{name}.weights", 0, 0, value.dtype, shape=value.shape, name=init_name)
        elif _is_meta(value.const_value):
            raise RuntimeError(f"{init_name}: small initializer without data")
    proto = ir.serde.serialize_model(model)
    _strip_metadata(proto.graph)
    if spec.cache == "decode":
        _name_dims(proto, spec)
    config = make_config(spec)
    meta = {
        "wsealloc.zoo.model": f"transformers.{spec.model_cls}",
        "wsealloc.zoo.config": json.dumps(
            {k: v for k, v in config.to_diff_dict().items() if k not in ("id2label", "label2id")}, sort_keys=True
        ),
        "wsealloc.zoo.exporter": f"torch.onnx.export(dynamo=True, optimize=False), {_versions()}",
        "wsealloc.zoo.weights": "absent: weightless convention, see models/README.md",
    }
    if spec.cache is not None:
        meta["wsealloc.zoo.kv_cache"] = _CACHE_NOTES[spec.cache]
    for key, value in meta.items():
        proto.metadata_props.add(key=key, value=value)
    return proto


_CACHE_NOTES = {
    "prefill": "prefill: outputs logits and present.{i}.key/value [batch, kv_heads, prompt, head_dim] for every layer i",
    "decode": (
        f"decode step: inputs input_ids [{BATCH}, 1], past_key_values.{{i}}.key/value [{BATCH}, kv_heads, {PAST}, head_dim]; "
        f"outputs logits [{BATCH}, 1, vocab], present.{{i}}.key/value [{BATCH}, kv_heads, {TOTAL}, head_dim]"
    ),
}


def _name_dims(proto: Any, spec: Spec) -> None:
    """Make the symbolic dims of a decode step's inputs and outputs read exactly ``batch_size``,
    ``past_sequence_length`` and ``past_sequence_length + 1`` (renaming whatever the exporter chose,
    in every value_info too); raise if a dim is not where the convention puts it."""
    vocab = spec.cfg["vocab_size"]
    wanted: dict[str, list[int | str]] = {name: list(shape) for name, shape, _ in spec.inputs}
    wanted["logits"] = [BATCH, 1, vocab]
    for name, shape, _ in spec.inputs[1:]:
        wanted[name.replace("past_key_values.", "present.")] = [BATCH, shape[1], TOTAL, shape[3]]
    rename: dict[str, str] = {}
    for vi in (*proto.graph.input, *proto.graph.output):
        want = wanted.get(vi.name)
        dims = vi.type.tensor_type.shape.dim
        if want is None or len(dims) != len(want):
            raise RuntimeError(f"{vi.name}: unexpected graph input/output (want {want})")
        for d, w in zip(dims, want, strict=True):
            got: int | str = d.dim_param if d.HasField("dim_param") else d.dim_value
            if isinstance(w, int) != isinstance(got, int) or (isinstance(w, int) and got != w):
                raise RuntimeError(f"{vi.name}: dims {[x.dim_param or x.dim_value for x in dims]}, want {want}")
            if isinstance(w, str) and rename.setdefault(str(got), w) != w:
                raise RuntimeError(f"{vi.name}: exporter dim {got!r} stands for both {rename[str(got)]} and {w}")
    for vi in (*proto.graph.input, *proto.graph.output, *proto.graph.value_info):
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in rename:
                    d.dim_param = rename[d.dim_param]


def bind_dims(model: Any, sizes: dict[str, int]) -> Any:
    """A copy of ``model`` whose symbolic dims (graph inputs, outputs and value_info) that are sums,
    differences or products of names in ``sizes`` and integers become those sizes (e.g.
    ``past_sequence_length + 1`` -> 4097); other symbolic dims stay."""
    import ast

    import onnx

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Name):
            return sizes[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
            a, b = value(node.left), value(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise KeyError(ast.dump(node))

    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    for vi in (*bound.graph.input, *bound.graph.output, *bound.graph.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param:
                try:
                    size = value(ast.parse(d.dim_param, mode="eval"))
                except (KeyError, SyntaxError):
                    continue
                d.dim_value = size  # clears dim_param (a oneof)
    return bound


def _is_meta(tensor: Any) -> bool:
    raw = getattr(tensor, "raw", None)
    return tensor is None or getattr(raw, "is_meta", False)


def _strip_metadata(graph: Any) -> None:
    """Stack traces and name scopes: megabytes nobody reads."""
    for g in _graphs(graph):
        for node in g.node:
            del node.metadata_props[:]
            node.doc_string = ""


def _versions() -> str:
    import onnx
    import onnxscript
    import torch
    import transformers

    return (
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"onnxscript {onnxscript.__version__}, onnx {onnx.__version__}"
    )


# --------------------------------------------------------------------------------------------------
# The weightless convention (pure onnx: applies to any ModelProto)


def _graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every subgraph under it (If/Loop/Scan bodies), depth first."""
    import onnx

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _numel(tensor: Any) -> int:
    return math.prod(tensor.dims)


def _constant_tensor(node: Any) -> Any | None:
    """The tensor a Constant node holds, if it is bigger than SMALL elements."""
    import onnx
    from onnx import helper

    for attr in node.attribute:
        if attr.name == "value" and _numel(attr.t) > SMALL:
            return attr.t
        if attr.name in ("value_floats", "value_ints") and len(getattr(attr, attr.name[6:])) > SMALL:
            values = list(getattr(attr, attr.name[6:]))
            dtype = onnx.TensorProto.FLOAT if attr.name == "value_floats" else onnx.TensorProto.INT64
            return helper.make_tensor("", dtype, [len(values)], values)
    return None


_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def apply_weightless_convention(model: Any, location: str) -> int:
    """Turn every initializer with more than SMALL elements (in every graph) into a reference into
    ``location`` laid out consecutively with ALIGN-byte alignment, dropping its data; convert Constant
    nodes holding more than SMALL elements into initializers first. Returns the data file's length."""
    import onnx
    from onnx import helper

    offset = 0
    for graph in _graphs(model.graph):
        keep = []
        for node in graph.node:
            tensor = _constant_tensor(node) if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
            if tensor is None:
                keep.append(node)
                continue
            init = graph.initializer.add()
            init.CopyFrom(tensor)
            init.name = node.output[0]
        if len(keep) != len(graph.node):
            del graph.node[:]
            graph.node.extend(keep)
        for tensor in graph.initializer:
            if _numel(tensor) <= SMALL:
                if tensor.data_location == onnx.TensorProto.EXTERNAL:
                    raise ValueError(f"small initializer {tensor.name} has no embedded data")
                continue
            itemsize = helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            length = _numel(tensor) * itemsize
            for f in _DATA_FIELDS:
                tensor.ClearField(f)
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
                tensor.external_data.add(key=key, value=value)
            offset += -(-length // ALIGN) * ALIGN
    return offset


@contextlib.contextmanager
def _absent_data_file(location: str, length: int) -> Iterator[None]:
    """onnx.checker insists that an external data file exists (it reads none of it): check inside a
    scratch directory holding an empty sparse stand-in, never next to the model."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="wsealloc-zoo-check-") as tmp:
        with open(os.path.join(tmp, location), "wb") as f:
            f.truncate(length)
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(cwd)


def _static(value_info: Any) -> bool:
    t = value_info.type
    if not t.HasField("tensor_type"):
        return False
    return t.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in t.tensor_type.shape.dim)


def _not_static(model: Any) -> tuple[collections.Counter[str], int]:
    """Node outputs without a fully static tensor shape after infer_shapes(data_prop=True), by op
    type; and the number of sequence-typed node outputs."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    infos = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)}
    lacking: collections.Counter[str] = collections.Counter()
    sequences = 0
    for node in inferred.graph.node:
        for out in node.output:
            if not out:
                continue
            info = infos.get(out)
            if info is not None and info.type.HasField("sequence_type"):
                sequences += 1
            elif info is None or not _static(info):
                lacking[node.op_type] += 1
    return lacking, sequences


def verify(path: Path, length: int) -> dict[str, Any]:
    """Load without external data, run the checker and shape inference (data_prop=True); count node
    outputs without a fully static tensor shape (sequence-typed outputs counted separately); for a
    model with symbolic dims, count them again with the dims bound to ``BIND``."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    location = f"{path.stem}.weights"
    with _absent_data_file(location, length):
        onnx.checker.check_model(model)
    lacking, sequences = _not_static(model)
    bound: dict[str, Any] = {}
    symbolic = any(d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim)
    if symbolic:
        lacking_bound, _ = _not_static(bind_dims(model, BIND))
        bound = {"bound": dict(BIND), "not_static_bound": sum(lacking_bound.values())}
        bound["not_static_bound_by_op"] = dict(lacking_bound)
    inits = list(model.graph.initializer)
    external = [t for t in inits if t.data_location == onnx.TensorProto.EXTERNAL]
    return {
        "nodes": len(model.graph.node),
        "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "initializers": len(inits),
        "external": len(external),
        "embedded": len(inits) - len(external),
        "not_static": sum(lacking.values()),
        "not_static_by_op": dict(lacking),
        "sequence_outputs": sequences,
        "ops": collections.Counter(n.op_type for n in model.graph.node).most_common(10),
        "domains": sorted({n.domain or "ai.onnx" for n in model.graph.node}),
        **bound,
    }


def export(name: str, out_dir: Path) -> dict[str, Any]:
    """Export one zoo model to ``out_dir/name.onnx`` (weightless) and verify it."""
    import onnx

    start = time.perf_counter()
    proto = export_proto(name)
    location = f"{name}.weights"
    length = apply_weightless_convention(proto, location)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.onnx"
    onnx.save(proto, str(path))  # every big tensor is already external: nothing else is written
    if (out_dir / location).exists():
        raise RuntimeError(f"{out_dir / location} must not exist")
    report = verify(path, length)
    report.update(file=str(path), bytes=path.stat().st_size, weights_bytes=length, seconds=round(time.perf_counter() - start, 1))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help=f"any of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--out", type=Path, default=HERE, help="output directory (default: models/)")
    parser.add_argument("--json", action="store_true", help="print each model's report as one JSON line")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    for name in args.models or list(MODELS):
        r = export(name, args.out)
        if args.json:
            print(json.dumps({"model": name, **r}), flush=True)
        else:
            seqs = f" (+{r['sequence_outputs']} sequence-typed outputs)" if r["sequence_outputs"] else ""
            if "bound" in r:
                seqs += f"; bound to {r['bound']}: {r['not_static_bound']} {r['not_static_bound_by_op'] or ''}"
            print(
                f"{name}: {r['nodes']} nodes, opset {r['opset']}, {r['bytes']:,} bytes "
                f"({r['external']} external / {r['embedded']} embedded initializers, "
                f"absent data {r['weights_bytes'] / 1e9:.2f} GB), "
                f"{r['not_static']} outputs without a static shape {r['not_static_by_op'] or ''}{seqs}, {r['seconds']} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
