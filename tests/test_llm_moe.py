"""Mixtures of experts from a Hugging Face config.json (``wsealloc export-llm``: Mixtral, Qwen3-MoE, Llama 4;
wsealloc/frontend/hf_config.py and decoder.py), in the export form ONNX Runtime's ``com.microsoft`` ``MoE``
node takes: the config fields accepted or refused by name, the graph's structure read with onnx alone (node
counts, the MoE node's inputs, attributes and weight shapes, the shared expert, which layers are MoE),
``parameters()`` against the initializers and the published totals, ``matmul_macs()`` (active work) against
ONNX shape inference plus the experts' MACs by hand, onnx's checker, and the committed Mixtral-8x7B and
Qwen3-235B-A22B entries as the command writes them. Nothing here runs wsealloc's importer on a MoE graph
(the front end's reading of the op is separate work); nothing solves a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from conftest import MODELS, zoo
from onnx import helper
from test_llm_config import SMALL, absent_bytes, committed_forms, consumers, inits, param_bytes, small
from test_zoo import matmul_macs_bound

from wsealloc.errors import ModelLoadError
from wsealloc.frontend.decoder import DecoderSpec
from wsealloc.frontend.hf_config import llm_model, parse_hf_config, read_hf_config

CONFIGS = MODELS / "configs"
TINY_DECODE = {"batch_size": 1, "past_sequence_length": 16}
D, H, KV, F, V, L = 64, 4, 2, 128, 256, 2  # SMALL: hidden, heads, KV heads, FFN, vocab, layers (head_dim 16)

# Small configurations of each family (SMALL's sizes): 4 experts of 32 (top 2), Qwen3-MoE on 4 layers.
MIXTRAL = {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32}
QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "head_dim": 16,
    "num_hidden_layers": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "decoder_sparse_step": 2,  # layers 1 and 3 ...
    "mlp_only_layers": [3],  # ... but 3 stays dense
    "norm_topk_prob": False,
}
LLAMA4_TEXT = {
    "model_type": "llama4_text",
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 1,
    "intermediate_size": 32,  # the experts' and the shared expert's width
    "intermediate_size_mlp": 128,  # the dense layers'
    "interleave_moe_layer_step": 2,  # layer 1 of 2
}


def moe_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "MoE"]


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def checked(model: onnx.ModelProto, folder: Path, name: str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx.checker.check_model passes (full_check=False): it wants the absent data file to exist, so an
    empty stand-in is made in a scratch folder (models/README.md, the weightless convention)."""
    monkeypatch.chdir(folder)
    stand_in = folder / f"{name}-{form}.weights"
    stand_in.touch()
    onnx.checker.check_model(model, full_check=False)
    stand_in.unlink()


# --------------------------------------------------------------------------------------------------
# The graph convention: router, Reshape to 2-D, one com.microsoft MoE node, a shared expert where there is one.


def test_mixtral_every_layer_one_moe_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llama, _ = small(tmp_path, "llama")
    decode, prefill = small(tmp_path, "mixtral", **MIXTRAL)
    for model, form, rows in ((decode, "decode", "batch_size"), (prefill, "prefill", 1)):
        nodes = moe_nodes(model)
        assert [n.name for n in nodes] == [f"layers.{i}.moe" for i in range(L)]
        for i, node in enumerate(nodes):
            p = f"layers.{i}"
            assert node.domain == "com.microsoft"
            assert list(node.input) == [
                f"{p}.post_norm",
                f"{p}.router_probs",
                f"{p}.experts.gate",
                "",
                f"{p}.experts.down",
                "",
                f"{p}.experts.up",
                "",
            ]
            assert list(node.output) == [f"{p}.moe"]
            assert attrs(node) == {"k": 2, "activation_type": b"silu", "normalize_routing_weights": 1, "use_sparse_mixer": 0}
            # ONNX Runtime's layout (experts, out, in): fc1 gate [E, f, d], fc2 down [E, d, f], fc3 up [E, f, d]
            shapes = {n: list(inits(model)[n].dims) for n in node.input[2::2]}
            assert shapes == {f"{p}.experts.gate": [4, 32, D], f"{p}.experts.down": [4, D, 32], f"{p}.experts.up": [4, 32, D]}
            assert all(inits(model)[n].data_location == onnx.TensorProto.EXTERNAL for n in shapes)
            # the router: MatMul [d, E] on the normed input, reshaped to (tokens, experts)
            router = next(n for n in model.graph.node if n.output == [f"{p}.router"])
            assert router.op_type == "MatMul" and list(router.input) == [f"{p}.post_norm", f"{p}.router.weight"]
            assert list(inits(model)[f"{p}.router.weight"].dims) == [D, 4]
            reshape = next(n for n in model.graph.node if n.output == [f"{p}.router_probs"])
            assert reshape.op_type == "Reshape" and list(reshape.input) == [f"{p}.router", "router_shape"]
            assert [c.op_type for c in consumers(model, f"{p}.moe")] == ["Add"]  # the residual
            assert f"{p}.gate_proj.weight" not in inits(model)  # no dense FFN
        assert list(onnx.numpy_helper.to_array(inits(model)["router_shape"])) == [-1, 4]
        # the op's output declared with its input's shape (shape inference does not know it)
        declared = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.value_info}
        assert all(declared[f"layers.{i}.moe"] == [rows, 1 if form == "decode" else 16, D] for i in range(L))
        assert {(o.domain, o.version) for o in model.opset_import} == {("", 20), ("com.microsoft", 1)}
        checked(model, tmp_path, "mixtral", form, monkeypatch)
    # each layer's dense FFN (3 MatMuls, Sigmoid, 2 Muls) became router MatMul, Reshape, MoE
    assert len(decode.graph.node) == len(llama.graph.node) - 3 * L
    assert {(o.domain, o.version) for o in llama.opset_import} == {("", 20)}  # dense models: unchanged


def test_qwen3_moe_sparse_step_and_mlp_only_layers(tmp_path: Path) -> None:
    decode, _ = small(tmp_path, "qwen3moe", **QWEN3_MOE)
    spec = parse_hf_config({**SMALL, **QWEN3_MOE}, "q").spec()
    assert spec.moe_layers == (1,) and not spec.renormalize and spec.qk_norm
    assert [n.name for n in moe_nodes(decode)] == ["layers.1.moe"]
    assert attrs(moe_nodes(decode)[0])["normalize_routing_weights"] == 0  # norm_topk_prob false
    shapes = {n: list(t.dims) for n, t in inits(decode).items()}
    for i in (0, 2, 3):  # dense, of intermediate_size
        assert shapes[f"layers.{i}.gate_proj.weight"] == [D, F] and f"layers.{i}.router.weight" not in shapes
    assert shapes["layers.1.experts.gate"] == [4, 32, D] and "layers.1.gate_proj.weight" not in shapes
    assert shapes["layers.1.q_norm.weight"] == [16]  # Qwen3's q/k norms
    with_norm = parse_hf_config({**SMALL, **QWEN3_MOE, "norm_topk_prob": True}, "q").spec()
    assert with_norm.renormalize
    every = parse_hf_config({**SMALL, **QWEN3_MOE, "decoder_sparse_step": 1, "mlp_only_layers": []}, "q").spec()
    assert every.moe_layers == (0, 1, 2, 3)
    dense = parse_hf_config({**SMALL, **QWEN3_MOE, "mlp_only_layers": [1, 3]}, "q").spec()
    assert dense.experts == 0 and dense.moe_layers == ()  # no MoE layer left: a dense model


def test_llama4_shared_expert_on_alternate_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decode, prefill = small(tmp_path, "llama4", **LLAMA4_TEXT)
    spec = parse_hf_config({**SMALL, **LLAMA4_TEXT}, "l").spec()
    assert (spec.moe_layers, spec.shared_expert_ffn, spec.ffn, spec.renormalize) == ((1,), 32, 128, False)
    for model in (decode, prefill):
        (node,) = moe_nodes(model)
        assert node.name == "layers.1.moe" and attrs(node)["k"] == 1 and attrs(node)["normalize_routing_weights"] == 0
        shapes = {n: list(t.dims) for n, t in inits(model).items()}
        # layer 0 dense of intermediate_size_mlp; layer 1's shared expert of intermediate_size on the same input
        assert shapes["layers.0.gate_proj.weight"] == [D, 128] and shapes["layers.0.down_proj.weight"] == [128, D]
        p = "layers.1.shared_expert"
        assert {n: shapes[f"{p}.{n}_proj.weight"] for n in ("gate", "up", "down")} == {
            "gate": [D, 32],
            "up": [D, 32],
            "down": [32, D],
        }
        gate = next(n for n in model.graph.node if n.output == [f"{p}.gate_proj"])
        assert gate.input[0] == node.input[0] == "layers.1.post_norm"
        add = next(n for n in model.graph.node if n.output == ["layers.1.moe_shared"])
        assert add.op_type == "Add" and list(add.input) == ["layers.1.moe", f"{p}.down_proj"]
        residual = next(n for n in model.graph.node if n.output == ["layers.1.residual2"])
        assert list(residual.input) == ["layers.1.residual1", "layers.1.moe_shared"]
    checked(decode, tmp_path, "llama4", "decode", monkeypatch)


def test_llama4_multimodal_file_reads_its_text_config(tmp_path: Path) -> None:
    text = {**{k: v for k, v in SMALL.items() if k != "torch_dtype"}, **LLAMA4_TEXT}
    wrapper = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": text,
        "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408},  # not part of text generation
        "boi_token_index": 200080,
        "torch_dtype": "float16",
        "tie_word_embeddings": False,
    }
    cfg = parse_hf_config(wrapper, "w")
    assert cfg.architecture == "Llama4ForConditionalGeneration"
    assert cfg.spec() == parse_hf_config({**SMALL, **LLAMA4_TEXT}, "t").spec()
    model = llm_model(cfg, "decode", "w")
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["wsealloc.zoo.config"]) == wrapper  # the file as given
    assert meta["wsealloc.zoo.model"] == "transformers.Llama4ForConditionalGeneration"


def test_no_shape_fields_change_nothing(tmp_path: Path) -> None:
    """The fields recorded without effect leave the graph as it is (the training-only routing fields,
    Llama 4's NoPE layers, chunked attention, temperature tuning and L2 q/k norm)."""
    training = {"router_aux_loss_coef": 0.02, "output_router_logits": False, "router_jitter_noise": 0.0}
    llama4 = {
        "no_rope_layers": [1, 0],
        "no_rope_layer_interval": 2,
        "attention_chunk_size": 8,
        "layer_types": ["chunked_attention", "full_attention"],
        "attn_temperature_tuning": 4,
        "floor_scale": 8192,
        "attn_scale": 0.1,
        "use_qk_norm": True,
        "moe_layers": [1],
        "_attn_implementation_autoset": True,
        "for_llm_compressor": False,
    }
    for name, base, extra in (("mx", MIXTRAL, training), ("l4", LLAMA4_TEXT, {**training, **llama4})):
        plain, _ = small(tmp_path, f"{name}-plain", **base)
        given, _ = small(tmp_path, name, **base, **extra)
        for model in (plain, given):
            model.graph.ClearField("initializer")
        assert given.graph == plain.graph, name
    assert parse_hf_config({**SMALL, **LLAMA4_TEXT, **llama4}, "l").window == 8
    assert parse_hf_config({**SMALL, **MIXTRAL, "sliding_window": 4096}, "m").window == 4096


# --------------------------------------------------------------------------------------------------
# What is counted: every expert's parameters; the active MatMul work.


@pytest.mark.parametrize("name", ["mixtral", "qwen3moe", "llama4"])
def test_parameters_and_active_macs_by_hand(tmp_path: Path, name: str) -> None:
    over = {"mixtral": MIXTRAL, "qwen3moe": QWEN3_MOE, "llama4": LLAMA4_TEXT}[name]
    decode, prefill = small(tmp_path, name, **over)
    spec = parse_hf_config({**SMALL, **over}, name).spec()
    # every parameter of the graph (each expert of each MoE layer included) is an initializer
    assert param_bytes(decode) == 2 * spec.parameters()
    assert absent_bytes(decode) == absent_bytes(prefill)
    e, k, fe, moe = 4, spec.top_k, 32, spec.moe_count
    idle = moe * (e - k) * 3 * D * fe
    assert spec.active_parameters() == spec.parameters() - idle
    # ONNX shape inference sums the plain MatMuls (the routers and shared experts among them); the
    # MoE node adds k experts' 3 x d x f per token
    layers = spec.layers
    for form, dims, tokens, keys in (("decode", TINY_DECODE, 1, 17), ("prefill", {}, 16, 16)):
        plain, unknown = matmul_macs_bound(str(tmp_path / f"{name}-{form}.onnx"), dims)
        assert unknown == 0, form  # the MoE outputs' declared shapes keep everything after them static
        experts = tokens * moe * k * 3 * D * fe
        assert plain + experts == spec.matmul_macs(tokens, keys), form
        # and in closed form: attention, QK^T/AV, dense FFNs, routers, k experts, shared experts, LM head
        q, kv = H * 16, KV * 16
        closed = layers * (tokens * D * (2 * q + 2 * kv) + 2 * tokens * keys * q)
        closed += tokens * (layers - moe) * 3 * D * spec.ffn + tokens * moe * (
            D * e + k * 3 * D * fe + 3 * D * spec.shared_expert_ffn
        )
        assert spec.matmul_macs(tokens, keys) == closed + tokens * D * V, form


def test_decoder_spec_moe_checks() -> None:
    base = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 128, "vocab": 256}
    moe = {"experts": 4, "top_k": 2, "expert_ffn": 32, "moe_layers": (0, 1)}
    assert DecoderSpec(**base, **moe).moe_count == 2
    for bad, words in (
        ({"top_k": 5}, "5 experts per token"),
        ({"top_k": 0}, "0 experts per token"),
        ({"expert_ffn": 0}, "expert_ffn"),
        ({"moe_layers": (1, 0)}, "ascending"),
        ({"moe_layers": (0, 2)}, "0..1"),
        ({"moe_layers": ()}, "moe_layers"),
        ({"mlp_bias": True}, "bias-free"),
    ):
        with pytest.raises(ValueError, match=words):
            DecoderSpec(**base, **{**moe, **bad})
    with pytest.raises(ValueError, match="without experts"):
        DecoderSpec(**base, top_k=2)


# --------------------------------------------------------------------------------------------------
# Refusals: one line naming the file and the field.

REFUSED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "qwen2-moe shared expert",
        {**QWEN3_MOE, "shared_expert_intermediate_size": 64},
        ("'shared_expert_intermediate_size'", "mixture-of-experts field", "'qwen3_moe'"),
    ),
    ("deepseek experts", {**MIXTRAL, "n_routed_experts": 8}, ("'n_routed_experts'", "mixture-of-experts field", "'mixtral'")),
    ("first dense", {**QWEN3_MOE, "first_k_dense_replace": 1}, ("'first_k_dense_replace'",)),
    ("llama4 field on qwen", {**QWEN3_MOE, "interleave_moe_layer_step": 2}, ("'interleave_moe_layer_step'", "'qwen3_moe'")),
    ("qwen field on llama4", {**LLAMA4_TEXT, "moe_intermediate_size": 32}, ("'moe_intermediate_size'", "'llama4_text'")),
    ("unknown on mixtral", {**MIXTRAL, "router_temperature": 1.0}, ("unknown field 'router_temperature'",)),
    ("top k over E", {**MIXTRAL, "num_experts_per_tok": 5}, ("5 experts per token", "4 experts")),
    ("no experts", {**MIXTRAL, "num_local_experts": 0}, ("num_local_experts",)),
    ("mlp_only_layers", {**QWEN3_MOE, "mlp_only_layers": [7]}, ("mlp_only_layers", "layer 7")),
    ("moe_layers", {**LLAMA4_TEXT, "moe_layers": [2]}, ("moe_layers", "layer 2")),
    ("no_rope_layers", {**LLAMA4_TEXT, "no_rope_layers": [1, 1, 0]}, ("no_rope_layers", "3 values for 2 layers")),
    ("no_rope value", {**LLAMA4_TEXT, "no_rope_layers": [2, 1]}, ("no_rope_layers",)),
    ("activation", {**MIXTRAL, "hidden_act": "gelu"}, ("hidden_act", "'gelu'")),
    ("architecture", {**MIXTRAL, "architectures": ["MixtralForSequenceClassification"]}, ("architectures",)),
    ("MoE field on a dense family", {"num_experts": 8}, ("'num_experts'", "a mixture-of-experts model")),
    ("dense family, llama4 field", {"interleave_moe_layer_step": 2}, ("'interleave_moe_layer_step'", "mixture-of-experts")),
    ("other MoE family", {"model_type": "deepseek_v3"}, ("'deepseek_v3'", "qwen3_moe", "llama4")),
]


@pytest.mark.parametrize(("case", "over", "words"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refusals_name_the_field(case: str, over: dict[str, Any], words: tuple[str, ...]) -> None:
    with pytest.raises(ModelLoadError) as err:
        parse_hf_config({**SMALL, **over}, "cfg.json")
    message = str(err.value)
    assert message.startswith("cfg.json: ") and "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_llama4_wrapper_refusals() -> None:
    text = {**{k: v for k, v in SMALL.items() if k != "torch_dtype"}, **LLAMA4_TEXT}
    good = {"model_type": "llama4", "text_config": text, "torch_dtype": "float16"}
    parse_hf_config(good, "w")
    for over, words in (
        ({"audio_config": {}}, ("unknown field 'audio_config'", "'llama4'", "text_config")),
        ({"architectures": ["Llama4ForCausalLM"]}, ("architectures", "Llama4ForConditionalGeneration")),
        ({"text_config": {**text, "model_type": "llama"}}, ("text_config.model_type 'llama'",)),
        ({"text_config": {**text, "torch_dtype": "bfloat16"}}, ("dtype", "disagree")),
        ({"text_config": {**text, "num_experts": 4}}, ("w: text_config: ", "'num_experts'")),
        ({"torch_dtype": None}, ("torch_dtype (or dtype)",)),
        ({"text_config": "x"}, ("text_config",)),
    ):
        with pytest.raises(ModelLoadError) as err:
            parse_hf_config({**good, **over}, "w")
        message = str(err.value)
        assert message.startswith("w: ") and "\n" not in message
        for word in words:
            assert word in message, (word, message)


# --------------------------------------------------------------------------------------------------
# The published configs and the committed entries.

PUBLISHED = {
    # name: (total, active parameters as published, in billions; class; MoE layers; experts, top-k)
    "mixtral-8x7b": (46.7, 12.9, "MixtralConfig", 32, 8, 2),
    "qwen3-235b-a22b": (235, 22, "Qwen3MoeConfig", 94, 128, 8),
    "llama-4-maverick-17b-128e": (400, 17, "Llama4TextConfig", 24, 128, 1),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_moe_configs(name: str) -> None:
    """Within 1% of the model cards' totals (Mixtral 46.7B / 12.9B active; Qwen3 235B / 22B; Maverick
    400B / 17B: the card's 400B is the text model, the 402B of transformers' docs counts the vision
    encoder too). Maverick's active count is 17.18B, 1.1% over the card's rounded "17B": it includes
    the embedding (1.03B, a lookup; 16.15B without it), as the other two cards' active counts do."""
    total, active, family, moe, experts, top_k = PUBLISHED[name]
    cfg = read_hf_config(CONFIGS / f"{name}.json")
    spec = cfg.spec()
    assert type(cfg).__name__ == family
    assert (spec.moe_count, spec.experts, spec.top_k) == (moe, experts, top_k)
    assert spec.parameters() / 1e9 == pytest.approx(total, rel=0.01)
    assert spec.active_parameters() / 1e9 == pytest.approx(active, rel=0.012)


def test_published_exact_counts() -> None:
    """The exact counts, by hand from the architectures (norms included)."""
    mixtral = read_hf_config(CONFIGS / "mixtral-8x7b.json").spec()
    attn, norms = 4096 * (2 * 4096 + 2 * 1024), 2 * 4096
    layer = attn + norms + 4096 * 8 + 8 * 3 * 4096 * 14336
    assert mixtral.parameters() == 32 * layer + 2 * 32000 * 4096 + 4096 == 46_702_792_704
    qwen = read_hf_config(CONFIGS / "qwen3-235b-a22b.json").spec()
    attn, norms = 4096 * (2 * 8192 + 2 * 512), 2 * 4096 + 2 * 128
    layer = attn + norms + 4096 * 128 + 128 * 3 * 4096 * 1536
    assert qwen.parameters() == 94 * layer + 2 * 151936 * 4096 + 4096 == 235_093_634_560
    assert qwen.active_parameters() == qwen.parameters() - 94 * 120 * 3 * 4096 * 1536 == 22_190_763_520
    maverick = read_hf_config(CONFIGS / "llama-4-maverick-17b-128e.json")
    m = maverick.spec()
    assert maverick.architecture == "Llama4ForConditionalGeneration" and m.moe_layers == tuple(range(1, 48, 2))
    attn, norms = 5120 * (2 * 5120 + 2 * 1024), 2 * 5120
    moe_layer = 5120 * 128 + 129 * 3 * 5120 * 8192  # router, 128 experts and the shared one
    dense_layer = 3 * 5120 * 16384
    assert m.parameters() == 48 * (attn + norms) + 24 * (moe_layer + dense_layer) + 2 * 202048 * 5120 + 5120 == 400_711_848_960
    assert m.active_parameters() == m.parameters() - 24 * 127 * 3 * 5120 * 8192 == 17_184_691_200


ENTRIES = {"mixtral-8x7b": (32, 8, 2), "qwen3-235b-a22b": (94, 128, 8)}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_committed_moe_entries_are_what_the_command_writes(name: str) -> None:
    layers, experts, top_k = ENTRIES[name]
    spec = read_hf_config(CONFIGS / f"{name}.json").spec()
    for form, committed in committed_forms(name).items():
        assert zoo(f"{name}-{form}.onnx").stat().st_size < 1_000_000
        nodes = moe_nodes(committed)
        assert len(nodes) == layers and {attrs(n)["k"] for n in nodes} == {top_k}, form
        assert param_bytes(committed) == 2 * spec.parameters()
        assert {vi.name for vi in committed.graph.value_info} >= {f"layers.{i}.moe" for i in range(layers)}
        gate = inits(committed)["layers.0.experts.gate"]
        assert list(gate.dims) == [experts, spec.expert_ffn, spec.hidden]


def test_command_line_names_experts_and_active_parameters(tmp_path: Path) -> None:
    from conftest import run

    folder = tmp_path / "tiny-l4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**SMALL, **LLAMA4_TEXT, "attention_chunk_size": 8}))
    out = run("export-llm", str(folder), "--out", str(tmp_path), "--prompt", "16")
    assert out.returncode == 0, out.stderr
    spec = parse_hf_config({**SMALL, **LLAMA4_TEXT}, "l").spec()
    lines = out.stdout.splitlines()
    assert "4 experts of 32 + a shared expert of 32, top-1, on 1 of 2 layers (dense FFN 128 on the other 1)" in lines[0]
    assert f"{spec.parameters():,} parameters in all, {spec.active_parameters():,} active per token" in lines[0]
    assert spec.parameters() - spec.active_parameters() == 3 * 3 * D * 32  # 3 idle experts on the one MoE layer
    assert "active MatMul MACs (each token on 1 of 4 experts) per sequence" in lines[1]
    assert f"{spec.matmul_macs(16, 16):,} for a 16-token prompt" in lines[2]
    assert "note: attention_chunk_size 8 < prompt 16" in out.stderr
