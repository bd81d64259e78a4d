"""LLaMA-family models from a Hugging Face config.json (``wsealloc export-llm``; wsealloc/frontend/hf_config.py
and decoder.py): the zoo's LLaMA3-8B and LLaMA2-13B forms reproduced from their configurations (MACs,
weight bytes and KV-cache bytes through wsealloc's own front end), each family's features by hand on
small configs, refusals naming the field, a written model solved on the tiny arch, the command as a
CLI, and the committed 70B/405B entries as the command writes them. Expected values come from the
architectures' definitions (tests/test_zoo.py's closed forms, sums written out here), never from the
code under test."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from conftest import MODELS, builders, run, zoo
from test_zoo import decode_macs, decoder_macs, matmul_macs_bound

from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions
from wsealloc.errors import ModelLoadError
from wsealloc.frontend.hf_config import export_llm, llm_model, parse_hf_config, read_hf_config
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import build_costs
from wsealloc.report.inspect import inspect_json

CONFIGS = MODELS / "configs"
BOUND = {"batch_size": 1, "past_sequence_length": 4096}
F16, BF16 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16


def costs_of(path: Path, dims: dict[str, int], arch: str = "wse2") -> CostTable:
    return build_costs(OnnxSource(path=str(path), dims=dims), load_arch(arch), CostOptions(), check_feasible=False)


def absent_bytes(model: onnx.ModelProto) -> int:
    """The weights' bytes as the file references them (external lengths), independent of the writer's helper."""
    return sum(
        int(e.value)
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
        for e in t.external_data
        if e.key == "length"
    )


def inits(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def param_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every float16/bfloat16 initializer (the parameters, embedded or not)."""
    return sum(2 * math.prod(t.dims) for t in model.graph.initializer if t.data_type in (F16, BF16) and t.dims)


# --------------------------------------------------------------------------------------------------
# The zoo's exports reproduced: their own recorded configuration (models/README.md's LlamaConfig(...),
# as transformers wrote it into the file's metadata) through the command's writer.

ZOO = {
    # zoo stem: (decode step closed form at a 4096-token past, prefill closed form, KV bytes per token)
    "llama3-8b": (
        decode_macs(32, 4096, 4096, 14336, 128256, 8 * 128),
        decoder_macs(32, 4096, 4096, 14336, 128256, 3, 1024),
        131_072,
    ),
    "llama2-13b": (decode_macs(40, 4096, 5120, 13824, 32000, 40 * 128), decoder_macs(40, 4096, 5120, 13824, 32000, 3), 819_200),
}


def zoo_config(stem: str) -> dict[str, Any]:
    model = onnx.load(str(zoo(f"{stem}-decode.onnx")), load_external_data=False)
    return json.loads({p.key: p.value for p in model.metadata_props}["wsealloc.zoo.config"])


# (the 13B in the slow group: the same writer and check as the 8B, 2.6 s)
@pytest.mark.parametrize("stem", [pytest.param(s, marks=pytest.mark.slow) if s == "llama2-13b" else s for s in sorted(ZOO)])
def test_zoo_forms_reproduced_from_their_config(stem: str, tmp_path: Path) -> None:
    decode_closed, prefill_closed, kv_per_token = ZOO[stem]
    export_llm(parse_hf_config(zoo_config(stem), stem), tmp_path, stem, prompt=4096)
    for form, dims, closed in (("decode", BOUND, decode_closed), ("prefill", {}, prefill_closed)):
        ours, theirs = tmp_path / f"{stem}-{form}.onnx", zoo(f"{stem}-{form}.onnx")
        mine, exported = costs_of(ours, dims), costs_of(theirs, dims)
        a, b = inspect_json(mine)["summary"], inspect_json(exported)["summary"]
        assert a["total_macs"] == b["total_macs"] == closed, form
        assert a["weight_bytes"] == b["weight_bytes"], form  # the parameters and the folded constants (the prefill's mask)
        assert a["kernels"] == b["kernels"], form
        files = [onnx.load(str(p), load_external_data=False) for p in (ours, theirs)]
        assert absent_bytes(files[0]) == absent_bytes(files[1]), form  # the parameters alone
        # KV cache: the state the front end holds (a decode step at S = 4096: S + 1 tokens; a prefill: T)
        tokens = 4097 if form == "decode" else 4096
        assert sum(k.work.state_bytes for k in mine.kernels) == sum(k.work.state_bytes for k in exported.kernels)
        assert sum(k.work.state_bytes for k in mine.kernels) == kv_per_token * tokens, form
    # bytes per token from the past inputs' shapes: key and value, kv_heads x head_dim x 2 bytes each
    past = onnx.load(str(tmp_path / f"{stem}-decode.onnx"), load_external_data=False).graph.input[1:]
    assert (
        sum(2 * vi.type.tensor_type.shape.dim[1].dim_value * vi.type.tensor_type.shape.dim[3].dim_value for vi in past)
        == kv_per_token
    )


def test_published_configs_read_with_their_sizes() -> None:
    """The configs shipped in models/configs/: families recognized, parameter counts as published."""
    published = {  # parameters in billions (as the model cards round them), the config class
        "llama-3.1-8b": (8.03, "LlamaConfig"),
        "llama-3.1-70b": (70.55, "LlamaConfig"),
        "llama-3.1-405b": (405.85, "LlamaConfig"),
        "llama-2-13b": (13.02, "LlamaConfig"),
        "mistral-7b-v0.3": (7.25, "MistralConfig"),
        "qwen2.5-7b": (7.62, "Qwen2Config"),
        "qwen3-8b": (8.19, "Qwen3Config"),
    }
    moe = ("mixtral-8x7b", "qwen3-235b-a22b", "llama-4-maverick-17b-128e")  # test_llm_moe.py
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted([*published, *moe])
    for name, (billions, family) in published.items():
        cfg = read_hf_config(CONFIGS / f"{name}.json")
        assert type(cfg).__name__ == family
        assert cfg.spec().parameters() / 1e9 == pytest.approx(billions, abs=0.006), name
    assert read_hf_config(CONFIGS / "qwen2.5-7b.json").spec().qkv_bias
    assert read_hf_config(CONFIGS / "qwen3-8b.json").spec().qk_norm
    assert read_hf_config(CONFIGS / "llama-3.1-405b.json").spec().rope_llama3 is not None


# --------------------------------------------------------------------------------------------------
# Each family's features, by hand on small configurations: 2 layers, hidden 64, 4 heads (16 each),
# 2 KV heads, FFN 128, vocab 256, prompt 16 (the tiny twins' sizes).

SMALL = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}
TINY_DECODE = {"batch_size": 1, "past_sequence_length": 16}


def small(tmp_path: Path, name: str, **over: Any) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(decode, prefill) of SMALL with ``over`` applied, written to ``tmp_path`` as the command writes them."""
    export_llm(parse_hf_config({**SMALL, **over}, name), tmp_path, name, prompt=16)
    return tuple(onnx.load(str(tmp_path / f"{name}-{f}.onnx"), load_external_data=False) for f in ("decode", "prefill"))  # type: ignore[return-value]


def summaries(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return [
        inspect_json(costs_of(tmp_path / f"{name}-{form}.onnx", dims, "tiny"))["summary"]
        for form, dims in (("decode", TINY_DECODE), ("prefill", {}))
    ]


def consumers(model: onnx.ModelProto, tensor: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if tensor in n.input]


def test_small_llama_is_the_tiny_twin_and_its_closed_forms(tmp_path: Path) -> None:
    decode, prefill = small(tmp_path, "llama")
    # the tiny twins are this builder's output (build.py calls it), byte for byte, and so is this config's graph
    for model, form in ((decode, "decode"), (prefill, "prefill")):
        twin = onnx.load(str(zoo(f"tiny/llm_{form}.onnx")), load_external_data=False)
        for t in model.graph.initializer:  # the absent data file is named after each file
            for e in t.external_data:
                e.value = e.value.replace("llama-", "llm_")
        assert model.graph == twin.graph, form
    for form, model in (("decode", builders.llm(decode=True)), ("prefill", builders.llm(decode=False))):
        assert model.SerializeToString() == zoo(f"tiny/llm_{form}.onnx").read_bytes(), form
    tiny = dict(layers=2, d=64, ffn=128, vocab=256, kv_dim=2 * 16)
    dec, pre = summaries(tmp_path, "llama")
    assert dec["total_macs"] == decode_macs(past=16, **tiny) == 94_464
    assert pre["total_macs"] == decoder_macs(2, 16, 64, 128, 256, 3, kv_dim=32) == 1_507_328


def test_qwen2_qkv_biases_add_their_bytes(tmp_path: Path) -> None:
    small(tmp_path, "llama")
    decode, _ = small(tmp_path, "qwen2", model_type="qwen2")
    for i in range(2):
        for proj, width in (("q", 64), ("k", 32), ("v", 32)):
            bias = inits(decode)[f"layers.{i}.{proj}_proj.bias"]
            assert list(bias.dims) == [width]
            adds = consumers(decode, bias.name)
            assert len(adds) == 1 and adds[0].op_type == "Add" and adds[0].input[0] == f"layers.{i}.{proj}_proj.matmul"
        assert f"layers.{i}.o_proj.bias" not in inits(decode)  # Qwen2: no bias on o_proj
    bias_bytes = 2 * (64 + 32 + 32) * 2  # 2 layers x (q + k + v widths) x 2 bytes
    for llama, qwen in zip(summaries(tmp_path, "llama"), summaries(tmp_path, "qwen2"), strict=True):
        assert qwen["weight_bytes"] - llama["weight_bytes"] == bias_bytes
        assert qwen["total_macs"] == llama["total_macs"]


def test_llama_attention_and_mlp_biases(tmp_path: Path) -> None:
    plain, _ = small(tmp_path, "plain")
    decode, _ = small(tmp_path, "biased", attention_bias=True, mlp_bias=True)
    biases = {n: list(t.dims) for n, t in inits(decode).items() if n.endswith(".bias")}
    want = {"q": 64, "k": 32, "v": 32, "o": 64, "gate": 128, "up": 128, "down": 64}
    assert biases == {f"layers.{i}.{p}_proj.bias": [w] for i in range(2) for p, w in want.items()}
    assert param_bytes(decode) - param_bytes(plain) == 2 * sum(want.values()) * 2


def test_qwen3_qk_norms_per_head_before_rope(tmp_path: Path) -> None:
    small(tmp_path, "llama")
    decode, _ = small(tmp_path, "qwen3", model_type="qwen3", head_dim=16)
    for i in range(2):
        for t in ("q", "k"):
            weight = inits(decode)[f"layers.{i}.{t}_norm.weight"]
            assert list(weight.dims) == [16]  # head_dim: one norm shared by every head
            # RMSNorm over head_dim of the [B, T, heads, head_dim] split, then the transpose, then RoPE
            cast = consumers(decode, f"layers.{i}.{t}.split")
            assert [n.op_type for n in cast] == ["Cast"]
            transpose = consumers(decode, f"layers.{i}.{t}_norm")
            assert [n.op_type for n in transpose] == ["Transpose"] and transpose[0].output == [f"layers.{i}.{t}"]
    assert not any(n.endswith(".bias") for n in inits(decode))  # attention_bias false
    llama = onnx.load(str(tmp_path / "llama-decode.onnx"), load_external_data=False)
    assert param_bytes(decode) - param_bytes(llama) == 2 * 2 * 16 * 2  # 2 layers x (q, k) x 16 x 2 bytes
    for plain, qwen in zip(summaries(tmp_path, "llama"), summaries(tmp_path, "qwen3"), strict=True):
        assert qwen["total_macs"] == plain["total_macs"]
        assert qwen["kernels"] == plain["kernels"] + 2 * 2 * 2  # the norms: kernels of their own (2 layers x q, k x 2 each)


def test_head_dim_given_apart_from_hidden_over_heads(tmp_path: Path) -> None:
    """Qwen3 (and some Mistrals) set head_dim on its own: 4 heads of 32 over a hidden size of 64."""
    decode, prefill = small(tmp_path, "wide", model_type="qwen3", head_dim=32)
    shapes = {n: list(t.dims) for n, t in inits(decode).items()}
    assert shapes["layers.0.q_proj.weight"] == [64, 128] and shapes["layers.0.o_proj.weight"] == [128, 64]
    assert shapes["layers.0.k_proj.weight"] == [64, 64]
    past = decode.graph.input[1].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in past] == ["batch_size", 2, "past_sequence_length", 32]
    # by hand: d 64, queries 4 x 32 = 128, keys/values 2 x 32 = 64, FFN 128, vocab 256, 2 layers
    d, qw, kvw, f, v = 64, 128, 64, 128, 256

    def macs(t: int, k: int) -> int:
        return 2 * (t * d * (2 * qw + 2 * kvw) + 3 * t * d * f + 2 * t * k * qw) + t * d * v

    dec, pre = summaries(tmp_path, "wide")
    assert (dec["total_macs"], pre["total_macs"]) == (macs(1, 17), macs(16, 16)) == (123_392, 1_966_080)


def test_tied_embeddings_one_matrix_for_embedding_and_head(tmp_path: Path) -> None:
    untied, _ = small(tmp_path, "untied")
    decode, _ = small(tmp_path, "tied", tie_word_embeddings=True)
    assert "lm_head.weight" in inits(untied) and "lm_head.weight" not in inits(decode)
    assert sorted(n.op_type for n in consumers(decode, "embed_tokens")) == ["Gather", "Transpose"]
    head = next(n for n in decode.graph.node if n.output == ["logits"])
    assert head.op_type == "MatMul" and head.input[1] == "lm_head.weight"  # the Transpose's output
    assert absent_bytes(untied) - absent_bytes(decode) == 256 * 64 * 2
    assert [s["total_macs"] for s in summaries(tmp_path, "tied")] == [s["total_macs"] for s in summaries(tmp_path, "untied")]


@pytest.mark.parametrize(("kv_heads", "expands"), [(2, 4), (1, 4), (4, 0)])
def test_gqa_repeat(tmp_path: Path, kv_heads: int, expands: int) -> None:
    """Each KV head repeated heads / kv_heads times after the cache (none without GQA); the cache holds kv_heads."""
    decode, _ = small(tmp_path, f"kv{kv_heads}", num_key_value_heads=kv_heads)
    ops = [n for n in decode.graph.node if n.op_type == "Expand"]
    assert len(ops) == expands  # keys and values, 2 layers
    rep = {t.name: list(numpy_values(t)) for t in decode.graph.initializer if t.name == "rep_shape"}
    assert rep == ({"rep_shape": [1, 1, 4 // kv_heads, 1, 1]} if expands else {})
    scores = next(n for n in decode.graph.node if n.output == ["layers.0.scores"])
    keys = "layers.0.k_heads" if expands else "present.0.key"
    assert next(n for n in decode.graph.node if n.output == [scores.input[1]]).input[0] == keys
    dec, pre = summaries(tmp_path, f"kv{kv_heads}")
    assert dec["total_macs"] == decode_macs(2, 16, 64, 128, 256, kv_heads * 16)
    assert pre["total_macs"] == decoder_macs(2, 16, 64, 128, 256, 3, kv_dim=kv_heads * 16)


def numpy_values(t: onnx.TensorProto) -> np.ndarray:
    return onnx.numpy_helper.to_array(t)


def test_bfloat16_weights_caches_and_state(tmp_path: Path) -> None:
    small(tmp_path, "f16")
    decode, prefill = small(tmp_path, "bf16", torch_dtype="bfloat16")
    for model in (decode, prefill):
        weights = [t for t in model.graph.initializer if t.data_type in (F16, BF16)]
        assert weights and all(t.data_type == BF16 for t in weights)
        assert {vi.type.tensor_type.elem_type for vi in model.graph.output} == {BF16}
    assert {vi.type.tensor_type.elem_type for vi in decode.graph.input[1:]} == {BF16}
    # the front end holds a bfloat16 cache as state, as it does a float16 one (2 layers x K, V x 17 x 32 x 2 B)
    states = [
        sum(kc.work.state_bytes for kc in costs_of(tmp_path / f"{n}-decode.onnx", TINY_DECODE, "tiny").kernels)
        for n in ("f16", "bf16")
    ]
    assert states == [2 * 2 * 17 * 32 * 2] * 2
    assert summaries(tmp_path, "bf16") == [{**s, "model": s["model"].replace("f16", "bf16")} for s in summaries(tmp_path, "f16")]


def test_llama3_rope_scaling_changes_frequencies_only(tmp_path: Path) -> None:
    """LLaMA 3.1's scaling: wavelengths under 8192 / 4 positions kept, over 8192 / 1 slowed 8 times."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    plain, _ = small(tmp_path, "plain", hidden_size=512, num_attention_heads=4, num_key_value_heads=1)
    scaled, _ = small(tmp_path, "scaled", hidden_size=512, num_attention_heads=4, num_key_value_heads=1, rope_scaling=scaling)
    base, new = numpy_values(inits(plain)["inv_freq"]), numpy_values(inits(scaled)["inv_freq"])
    assert base.shape == new.shape == (64,)  # head_dim 128
    wavelen = 2 * math.pi / base
    assert np.array_equal(new[wavelen < 2048], base[wavelen < 2048])
    assert np.allclose(new[wavelen > 8192], base[wavelen > 8192] / 8)
    assert (wavelen > 8192).any() and (wavelen < 2048).any()
    # nothing else differs
    plain.graph.ClearField("initializer")
    scaled.graph.ClearField("initializer")
    assert plain.graph == scaled.graph


def test_mistral_writes_llamas_graph_and_records_its_window(tmp_path: Path) -> None:
    llama, _ = small(tmp_path, "llama")
    mistral, _ = small(tmp_path, "mistral", model_type="mistral", sliding_window=4096)
    for model in (llama, mistral):
        model.graph.ClearField("initializer")
    assert mistral.graph == llama.graph
    assert parse_hf_config({**SMALL, "model_type": "mistral", "sliding_window": 4096}, "m").window == 4096
    assert parse_hf_config({**SMALL, "model_type": "mistral", "sliding_window": None}, "m").window is None
    assert (
        parse_hf_config({**SMALL, "model_type": "qwen2", "sliding_window": 131072, "use_sliding_window": False}, "q").window
        is None
    )


def test_config_spellings_transformers_writes(tmp_path: Path) -> None:
    """dtype (transformers >= 4.56) or torch_dtype; rope_parameters (>= 5) or rope_theta; legacy rope ``type``."""
    new = {**{k: v for k, v in SMALL.items() if k not in ("torch_dtype", "rope_theta")}, "dtype": "float16"}
    new["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "default"}
    assert parse_hf_config(new, "new").spec() == parse_hf_config(SMALL, "old").spec()
    legacy = {
        **SMALL,
        "rope_scaling": {
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    }
    assert parse_hf_config(legacy, "legacy").spec().rope_llama3 is not None


def test_metadata_records_the_config(tmp_path: Path) -> None:
    cfg = {**SMALL, "bos_token_id": 1, "architectures": ["LlamaForCausalLM"]}
    model = llm_model(parse_hf_config(cfg, "c"), "decode", "c")
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["wsealloc.zoo.config"]) == {**{k: v for k, v in cfg.items() if k != "torch_dtype"}, "dtype": "float16"}
    assert meta["wsealloc.zoo.model"] == "transformers.LlamaForCausalLM"
    assert "export-llm" in meta["wsealloc.zoo.exporter"] and meta["wsealloc.zoo.weights"].startswith("absent")
    assert "past_sequence_length + 1" in meta["wsealloc.zoo.kv_cache"]
    refs = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    assert refs == {"c-decode.weights"}


# --------------------------------------------------------------------------------------------------
# Refusals: one line, the file and the field named, what is supported said.

Edit = Callable[[dict[str, Any]], None]
REFUSED: list[tuple[str, Edit, tuple[str, ...]]] = [
    (
        "unknown field",
        lambda c: c.update(rope_traditional=False),
        ("'rope_traditional'", "supported: _name_or_path, architectures, attention_bias"),
    ),
    ("misspelled", lambda c: c.update(num_key_value_head=2), ("'num_key_value_head'", "did you mean 'num_key_value_heads'")),
    ("MoE field", lambda c: c.update(num_local_experts=8), ("'num_local_experts'", "mixture-of-experts", "supported: llama")),
    ("MoE type", lambda c: c.update(model_type="qwen2_moe"), ("'qwen2_moe'", "supported: llama, mistral, qwen2, qwen3")),
    ("architecture", lambda c: c.update(architectures=["MixtralForCausalLM"]), ("architectures", "MixtralForCausalLM")),
    ("activation", lambda c: c.update(hidden_act="gelu"), ("hidden_act", "'gelu'", "silu")),
    ("tensor parallel", lambda c: c.update(pretraining_tp=2), ("pretraining_tp", "only 1")),
    ("dtype", lambda c: c.update(torch_dtype="float32"), ("dtype", "'float32'", "bfloat16")),
    ("no dtype", lambda c: c.pop("torch_dtype"), ("torch_dtype", "float16 or bfloat16")),
    ("rope", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}), ("rope_scaling.rope_type", "'yarn'")),
    ("GQA", lambda c: c.update(num_key_value_heads=3), ("not a multiple of 3 KV heads",)),
    ("heads", lambda c: c.update(num_attention_heads=5, num_key_value_heads=5), ("hidden_size 64", "num_attention_heads 5")),
    ("bool", lambda c: c.update(num_hidden_layers=True), ("num_hidden_layers",)),
    # (10^9 layers grew past 3 GB with no message: refused before anything is built)
    ("depth", lambda c: c.update(num_hidden_layers=10**9), ("num_hidden_layers 1,000,000,000", "at most 1,024")),
    ("mrope", lambda c: c.update(model_type="qwen2", use_mrope=True), ("use_mrope",)),
]


@pytest.mark.parametrize(("case", "edit", "words"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refusals_name_the_field(tmp_path: Path, case: str, edit: Edit, words: tuple[str, ...]) -> None:
    cfg = dict(SMALL)
    edit(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError) as err:
        read_hf_config(tmp_path)  # the folder: its config.json
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_unreadable_configs(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"model_type": ')
    for path, words in ((tmp_path / "broken.json", "not JSON (line 1"), (tmp_path / "absent.json", "no such file")):
        with pytest.raises(ModelLoadError, match=words.replace("(", r"\(")):
            read_hf_config(path)


# --------------------------------------------------------------------------------------------------
# A written model solved; the command as a CLI; the committed entries.


def test_written_model_solves_on_tiny(tmp_path: Path) -> None:
    import wsealloc.api as ws
    from wsealloc.plan.verify import verify_plan

    small(tmp_path, "m")
    plan = tmp_path / "plan.json"
    outcome = ws.solve(tmp_path / "m-decode.onnx", "tiny", objective="latency", context=16, output=plan)
    llm = outcome.plan.objective.llm
    assert llm is not None and llm.phase == "decode" and llm.context == 16
    assert llm.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2  # 2 layers x (K, V) x 2 KV heads x 16 x 2 bytes
    assert verify_plan(str(plan), None).ok


def test_command_as_cli(tmp_path: Path) -> None:
    from wsealloc.cli.app import build_cli

    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL))
    result = CliRunner().invoke(build_cli(), ["export-llm", str(folder), "--out", str(tmp_path), "--prompt", "16"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # parameters: 2 layers x (Q, O 64 x 64; K, V 64 x 32; FFN 3 x 64 x 128; 2 norms of 64) + embedding,
    # LM head 256 x 64 each + the final norm = 2 x 36,992 + 32,832 = 106,816
    assert lines[0].startswith("tiny-llama: LlamaForCausalLM, 2 layers, hidden 64, 4 heads / 2 KV heads of 16")
    assert lines[0].endswith("; 106,816 parameters; KV cache 256 B per token") and lines[1].startswith(
        f"wrote {tmp_path / 'tiny-llama-decode.onnx'}"
    )
    assert "90,368 + 256·S" in lines[1] and "1,507,328 for a 16-token prompt" in lines[2]
    for form in ("decode", "prefill"):
        assert (tmp_path / f"tiny-llama-{form}.onnx").is_file() and not (tmp_path / f"tiny-llama-{form}.weights").exists()
    # errors: one line, exit 2
    (folder / "config.json").write_text(json.dumps({**SMALL, "num_experts": 8}))
    for args, words in (
        (["export-llm", str(folder), "--out", str(tmp_path)], "'num_experts'"),
        (["export-llm", str(folder / "config.json"), "--out", str(tmp_path / "nowhere")], "not a folder"),
        (["export-llm", str(folder), "--name", "a/b"], "plain file name"),
        (["export-llm", str(folder), "--prompt", "0"], "--prompt"),
    ):
        out = run(*args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and words in out.stderr, (args, out.stderr)


ENTRIES = {"llama-3.1-70b": (80, 8192, 28672), "llama-3.1-405b": (126, 16384, 53248)}


def committed_forms(name: str) -> dict[str, onnx.ModelProto]:
    """models/NAME-{decode,prefill}.onnx, checked to be the command's output from models/configs/NAME.json
    (the graph, the opsets and the recorded config; the exporter line names the onnx version; files
    under 2 MB)."""
    cfg = read_hf_config(CONFIGS / f"{name}.json")
    forms = {}
    for form in ("decode", "prefill"):
        path = zoo(f"{name}-{form}.onnx")
        committed = onnx.load(str(path), load_external_data=False)
        written = llm_model(cfg, form, name, prompt=4096)  # type: ignore[arg-type]
        assert committed.graph == written.graph, form
        assert list(committed.opset_import) == list(written.opset_import), form
        meta = {p.key: p.value for p in committed.metadata_props}
        given = json.loads((CONFIGS / f"{name}.json").read_text())
        given["dtype"] = given.pop("torch_dtype")  # the one spelling recorded
        assert json.loads(meta["wsealloc.zoo.config"]) == given
        assert path.stat().st_size < 2_000_000
        forms[form] = committed
    return forms


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_committed_entries_are_what_the_command_writes(name: str) -> None:
    """models/llama-3.1-{70b,405b}-{decode,prefill}.onnx: the command's output from models/configs/
    (the graph and the recorded config; the exporter line names the onnx version), small files."""
    committed = committed_forms(name)["decode"]
    # parameters: per layer Q, O (d x d), K, V (d x 1024), FFN 3 x d x f, 2 norms; embedding and LM head; final norm
    layers, d, ffn = ENTRIES[name]
    assert absent_bytes(committed) == 2 * (layers * (d * (2 * d + 2 * 1024) + 3 * d * ffn + 2 * d) + 2 * 128256 * d + d)
    # MatMul MACs from ONNX's own shape inference (not wsealloc's front end; test_zoo.py costs them through it)
    sizes = dict(layers=layers, d=d, ffn=ffn, vocab=128256, kv_dim=1024)
    assert matmul_macs_bound(str(zoo(f"{name}-prefill.onnx")), {}) == (decoder_macs(layers, 4096, d, ffn, 128256, 3, 1024), 0)
    assert matmul_macs_bound(str(zoo(f"{name}-decode.onnx")), BOUND) == (decode_macs(past=4096, **sizes), 0)
