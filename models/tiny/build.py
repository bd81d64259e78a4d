"""Tiny hand-built ONNX graphs for unit tests and examples (shapes chosen so expected values are easy
to derive by hand). ``python models/tiny/build.py`` rewrites the committed files next to this script."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset: int = 18, value_info=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits, value_info=value_info or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def weight(name: str, *shape: int) -> onnx.TensorProto:
    """A float initializer of the given shape (zeros: values never matter to wsealloc)."""
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def mlp(batch: int | str = 4, d_in: int = 64, d_hidden: int = 256, d_out: int = 32) -> onnx.ModelProto:
    """x[B, d_in] -> MatMul+Add+Relu -> MatMul+Add -> y. MACs = B*(d_in*d_hidden + d_hidden*d_out)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="fc1_relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["o0"], name="fc2"),
        helper.make_node("Add", ["o0", "b2"], ["y"], name="fc2_bias"),
    ]
    inits = [weight("w1", d_in, d_hidden), weight("b1", d_hidden), weight("w2", d_hidden, d_out), weight("b2", d_out)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])
    return _model(nodes, [x], [y], inits)


def reshape_chain(seq: int | str = "seq", d: int = 64, heads: int = 4) -> onnx.ModelProto:
    """A Shape->Gather->Concat->Reshape chain feeding a batched MatMul (the LLaMA-export pattern)."""
    hd = d // heads
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["n"], name="take_seq", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "tail"], ["newshape"], name="cat", axis=0),
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("Reshape", ["q", "newshape"], ["q4"], name="split_heads"),
        helper.make_node("Transpose", ["q4"], ["qh"], name="heads_first", perm=[1, 0, 2]),
        helper.make_node("Transpose", ["q4"], ["kt"], name="keys_t", perm=[1, 2, 0]),
        helper.make_node("MatMul", ["qh", "kt"], ["scores"], name="qk"),
        helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "qh"], ["ctx"], name="pv"),
    ]
    inits = [
        weight("wq", d, d),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "i0"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0"),
        numpy_helper.from_array(np.array([heads, hd], dtype=np.int64), "tail"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, d])
    y = helper.make_tensor_value_info("ctx", TensorProto.FLOAT, None)
    return _model(nodes, [x], [y], inits)


def save(model: onnx.ModelProto, path) -> str:
    """Write a model and return its path as a string."""
    onnx.save(model, str(path))
    return str(path)


def transformer(layers: int = 2, d: int = 64, heads: int = 4, seq: int = 32, vocab: int = 100, ffn: int = 4) -> onnx.ModelProto:
    """A GPT-style decoder built by hand (embedding, per layer LN -> QKV -> attention -> proj -> LN -> MLP,
    final LN and LM head). MACs = layers * (4*seq*d*d + 2*seq*d*ffn*d + 2*seq*seq*d) + seq*d*vocab."""
    hd = d // heads
    nodes: list[onnx.NodeProto] = []
    inits = [weight("wte", vocab, d), weight("lm_head", d, vocab)]

    def const(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    const("heads_shape", [seq, heads, hd])
    const("merge_shape", [seq, d])
    nodes.append(helper.make_node("Gather", ["wte", "ids"], ["h0"], name="embed", axis=0))
    x = "h0"
    for i in range(layers):
        p = f"l{i}"
        inits += [
            weight(f"{p}.ln1.g", d),
            weight(f"{p}.ln1.b", d),
            weight(f"{p}.wqkv", d, 3 * d),
            weight(f"{p}.bqkv", 3 * d),
            weight(f"{p}.wo", d, d),
            weight(f"{p}.bo", d),
            weight(f"{p}.ln2.g", d),
            weight(f"{p}.ln2.b", d),
            weight(f"{p}.w1", d, ffn * d),
            weight(f"{p}.b1", ffn * d),
            weight(f"{p}.w2", ffn * d, d),
            weight(f"{p}.b2", d),
        ]
        nodes += [
            helper.make_node("LayerNormalization", [x, f"{p}.ln1.g", f"{p}.ln1.b"], [f"{p}.a"], name=f"{p}.ln1", axis=-1),
            helper.make_node("MatMul", [f"{p}.a", f"{p}.wqkv"], [f"{p}.qkv0"], name=f"{p}.qkv"),
            helper.make_node("Add", [f"{p}.qkv0", f"{p}.bqkv"], [f"{p}.qkv1"], name=f"{p}.qkv_bias"),
            helper.make_node("Split", [f"{p}.qkv1"], [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split", axis=-1, num_outputs=3),
        ]
        for t in "qkv":
            nodes += [
                helper.make_node("Reshape", [f"{p}.{t}", "heads_shape"], [f"{p}.{t}4"], name=f"{p}.{t}_heads"),
                helper.make_node(
                    "Transpose", [f"{p}.{t}4"], [f"{p}.{t}h"], name=f"{p}.{t}_perm", perm=[1, 2, 0] if t == "k" else [1, 0, 2]
                ),
            ]
        nodes += [
            helper.make_node("MatMul", [f"{p}.qh", f"{p}.kh"], [f"{p}.s0"], name=f"{p}.scores"),
            helper.make_node("Mul", [f"{p}.s0", "scale"], [f"{p}.s1"], name=f"{p}.scale"),
            helper.make_node("Softmax", [f"{p}.s1"], [f"{p}.pr"], name=f"{p}.softmax", axis=-1),
            helper.make_node("MatMul", [f"{p}.pr", f"{p}.vh"], [f"{p}.ctx"], name=f"{p}.context"),
            helper.make_node("Transpose", [f"{p}.ctx"], [f"{p}.ctx_t"], name=f"{p}.ctx_perm", perm=[1, 0, 2]),
            helper.make_node("Reshape", [f"{p}.ctx_t", "merge_shape"], [f"{p}.ctx2"], name=f"{p}.merge"),
            helper.make_node("MatMul", [f"{p}.ctx2", f"{p}.wo"], [f"{p}.o0"], name=f"{p}.proj"),
            helper.make_node("Add", [f"{p}.o0", f"{p}.bo"], [f"{p}.o1"], name=f"{p}.proj_bias"),
            helper.make_node("Add", [x, f"{p}.o1"], [f"{p}.r1"], name=f"{p}.residual1"),
            helper.make_node("LayerNormalization", [f"{p}.r1", f"{p}.ln2.g", f"{p}.ln2.b"], [f"{p}.m"], name=f"{p}.ln2", axis=-1),
            helper.make_node("MatMul", [f"{p}.m", f"{p}.w1"], [f"{p}.f0"], name=f"{p}.fc1"),
            helper.make_node("Add", [f"{p}.f0", f"{p}.b1"], [f"{p}.f1"], name=f"{p}.fc1_bias"),
            helper.make_node("Gelu", [f"{p}.f1"], [f"{p}.f2"], name=f"{p}.gelu"),
            helper.make_node("MatMul", [f"{p}.f2", f"{p}.w2"], [f"{p}.g0"], name=f"{p}.fc2"),
            helper.make_node("Add", [f"{p}.g0", f"{p}.b2"], [f"{p}.g1"], name=f"{p}.fc2_bias"),
            helper.make_node("Add", [f"{p}.r1", f"{p}.g1"], [f"{p}.out"], name=f"{p}.residual2"),
        ]
        x = f"{p}.out"
    inits += [weight("lnf.g", d), weight("lnf.b", d), numpy_helper.from_array(np.array(0.125, dtype=np.float32), "scale")]
    nodes += [
        helper.make_node("LayerNormalization", [x, "lnf.g", "lnf.b"], ["hf"], name="ln_f", axis=-1),
        helper.make_node("MatMul", ["hf", "lm_head"], ["logits"], name="lm_head"),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [seq])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [seq, vocab])
    return _model(nodes, [ids], [out], inits, opset=20)


# --------------------------------------------------------------------------------------------------
# LLaMA-style LLM, prefill and decode step with a KV cache (the twins of the zoo's llama3-8b-prefill /
# llama3-8b-decode: same input and output names, layouts and symbolic dims; models/README.md, "KV
# cache convention"). float16 throughout, RMSNorm computed in float32 as transformers does.

F16 = TensorProto.FLOAT16
BATCH, PAST, TOTAL = "batch_size", "past_sequence_length", "past_sequence_length + 1"


def llm(
    decode: bool,
    layers: int = 2,
    d: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    vocab: int = 256,
    seq: int = 16,
    theta: float = 500000.0,
    eps: float = 1e-5,
) -> onnx.ModelProto:
    """A LLaMA decoder (LlamaForCausalLM with eager attention) built by hand, every weight float16 zeros.

    Prefill (``decode=False``): ``input_ids`` int64 [1, seq] -> ``logits`` [1, seq, vocab] and, per layer
    i, ``present.{i}.key`` / ``present.{i}.value`` [1, kv_heads, seq, head_dim] (the cache the prompt
    writes: the keys after RoPE, the values).
    Decode step (``decode=True``): ``input_ids`` [batch_size, 1] and ``past_key_values.{i}.key`` /
    ``.value`` [batch_size, kv_heads, past_sequence_length, head_dim] -> ``logits`` [batch_size, 1, vocab]
    and ``present.{i}.*`` [batch_size, kv_heads, past_sequence_length + 1, head_dim]: each present is
    ``Concat(past, new, axis=2)``; the new token's position is the past length (read with ``Shape``).

    Per layer: RMSNorm, Q/K/V MatMuls, RoPE (rotate-half) on Q and K, the KV cache, GQA repeat of K and
    V (Unsqueeze -> Expand -> Reshape to ``heads``), MatMul Q K^T, scale, causal mask Add (from the
    query and key positions, LessOrEqual -> Where), Softmax (in float32), MatMul with V, O proj,
    residual Add, RMSNorm, SiLU-gated FFN (gate, Sigmoid, Mul, up, Mul, down), residual Add; then a
    final RMSNorm and the untied LM head. Weights are stored [in, out] (no Transpose before a MatMul).

    MatMul MACs per sequence, ``T`` new tokens over ``K`` keys (prefill: T = K = seq; decode: T = 1,
    K = S + 1 for a past of S): per layer T*d*(2*d + 2*kv_heads*head_dim) + 3*T*d*ffn + 2*T*K*d, plus
    the LM head T*d*vocab. Defaults: prefill 1,507,328; decode 90,368 + 256*S (1,138,944 at S = 4096).
    """
    if d % heads or heads % kv_heads:
        raise ValueError("heads must divide d and kv_heads must divide heads")
    hd = d // heads
    rep = heads // kv_heads
    tokens: int | str = 1 if decode else seq
    batch: int | str = BATCH if decode else 1
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(array, name))
        return name

    def w(name: str, *shape: int) -> str:
        return init(name, np.zeros(shape, dtype=np.float16))

    def ints(name: str, values: list[int]) -> str:
        return init(name, np.array(values, dtype=np.int64))

    def node(op: str, inputs: list[str], output: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    # shared constants
    ints("axes_last", [-1])
    ints("axes_0", [0])
    ints("axes_1", [1])
    ints("axes_2", [2])
    ints("q_shape", [0, 0, heads, hd])  # 0: copy batch / tokens from the input
    ints("kv_shape", [0, 0, kv_heads, hd])
    ints("rep_shape", [1, 1, rep, 1, 1])  # Expand: broadcast the new axis to ``rep`` copies
    ints("gqa_shape", [0, heads, -1, hd])  # -1: the key count
    ints("merge_shape", [0, 0, d])
    init("two", np.array(2.0, dtype=np.float32))
    init("eps", np.array(eps, dtype=np.float32))
    init("scale", np.array(hd**-0.5, dtype=np.float16))
    init("zero_f16", np.array(0.0, dtype=np.float16))
    init("min_f16", np.array(np.finfo(np.float16).min, dtype=np.float16))
    init("inv_freq", (1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd)).astype(np.float32))

    # positions of the new tokens (``qpos``) and of every key (``kpos``)
    if decode:
        node("Shape", ["past_key_values.0.key"], "past_len", start=2, end=3)  # [1] = S
        qpos = "past_len"
        init("zero_i64", np.array(0, dtype=np.int64))
        init("one_i64", np.array(1, dtype=np.int64))
        node("Squeeze", ["past_len", "axes_0"], "past_len_scalar")
        node("Add", ["past_len_scalar", "one_i64"], "total_len")  # S + 1
        kpos = node("Range", ["zero_i64", "total_len", "one_i64"], "key_positions")  # [S + 1]
    else:
        qpos = kpos = ints("positions", list(range(seq)))
    # RoPE tables [T, head_dim]: angle = position * inv_freq, duplicated across the two halves
    node("Cast", [qpos], "qpos_f", to=TensorProto.FLOAT)
    node("Unsqueeze", ["qpos_f", "axes_1"], "qpos_col")
    node("Mul", ["qpos_col", "inv_freq"], "freqs")
    node("Concat", ["freqs", "freqs"], "angles", axis=-1)
    node("Cos", ["angles"], "cos_f")
    node("Sin", ["angles"], "sin_f")
    node("Cast", ["cos_f"], "cos", to=F16)
    node("Cast", ["sin_f"], "sin", to=F16)
    # causal mask [T, K]: 0 where key position <= query position, the float16 minimum elsewhere
    node("Unsqueeze", [qpos, "axes_1"], "qpos_ints_col")
    node("Unsqueeze", [kpos, "axes_0"], "kpos_row")
    node("LessOrEqual", ["kpos_row", "qpos_ints_col"], "visible")
    node("Where", ["visible", "zero_f16", "min_f16"], "causal_mask")

    def rms_norm(x: str, weight: str, out: str) -> str:
        w(weight, d)
        node("Cast", [x], f"{out}.f32", to=TensorProto.FLOAT)
        node("Pow", [f"{out}.f32", "two"], f"{out}.sq")
        node("ReduceMean", [f"{out}.sq", "axes_last"], f"{out}.ms", keepdims=1)
        node("Add", [f"{out}.ms", "eps"], f"{out}.ms_eps")
        node("Sqrt", [f"{out}.ms_eps"], f"{out}.rms")
        node("Reciprocal", [f"{out}.rms"], f"{out}.inv_rms")
        node("Mul", [f"{out}.f32", f"{out}.inv_rms"], f"{out}.normed")
        node("Cast", [f"{out}.normed"], f"{out}.f16", to=F16)
        return node("Mul", [f"{out}.f16", weight], out)

    def rope(x: str, out: str) -> str:
        nodes.append(helper.make_node("Split", [x], [f"{out}.x1", f"{out}.x2"], name=f"{out}.halves", axis=-1, num_outputs=2))
        node("Neg", [f"{out}.x2"], f"{out}.neg_x2")
        node("Concat", [f"{out}.neg_x2", f"{out}.x1"], f"{out}.rotated", axis=-1)
        node("Mul", [x, "cos"], f"{out}.x_cos")
        node("Mul", [f"{out}.rotated", "sin"], f"{out}.rot_sin")
        return node("Add", [f"{out}.x_cos", f"{out}.rot_sin"], out)

    def heads_first(x: str, shape: str, out: str) -> str:
        node("Reshape", [x, shape], f"{out}.split")  # [B, T, h, hd]
        return node("Transpose", [f"{out}.split"], out, perm=[0, 2, 1, 3])  # [B, h, T, hd]

    def repeat_kv(x: str, out: str) -> str:
        node("Unsqueeze", [x, "axes_2"], f"{out}.unsq")  # [B, kv, 1, K, hd]
        node("Expand", [f"{out}.unsq", "rep_shape"], f"{out}.expanded")  # [B, kv, rep, K, hd]
        return node("Reshape", [f"{out}.expanded", "gqa_shape"], out)  # [B, heads, K, hd]

    w("embed_tokens", vocab, d)
    x = node("Gather", ["embed_tokens", "input_ids"], "embeddings", axis=0)  # [B, T, d]
    for i in range(layers):
        p = f"layers.{i}"
        h = rms_norm(x, f"{p}.input_layernorm.weight", f"{p}.input_norm")
        for t, width in (("q", d), ("k", kv_heads * hd), ("v", kv_heads * hd)):
            w(f"{p}.{t}_proj.weight", d, width)
            node("MatMul", [h, f"{p}.{t}_proj.weight"], f"{p}.{t}_proj")
        q = rope(heads_first(f"{p}.q_proj", "q_shape", f"{p}.q"), f"{p}.q_rope")
        new_k = heads_first(f"{p}.k_proj", "kv_shape", f"{p}.k")
        new_v = heads_first(f"{p}.v_proj", "kv_shape", f"{p}.v")
        if decode:
            rope(new_k, f"{p}.k_rope")
            k = node("Concat", [f"past_key_values.{i}.key", f"{p}.k_rope"], f"present.{i}.key", axis=2)
            v = node("Concat", [f"past_key_values.{i}.value", new_v], f"present.{i}.value", axis=2)
        else:
            k = rope(new_k, f"present.{i}.key")
            v = node("Identity", [new_v], f"present.{i}.value")
        k_all, v_all = repeat_kv(k, f"{p}.k_heads"), repeat_kv(v, f"{p}.v_heads")
        node("Transpose", [k_all], f"{p}.k_t", perm=[0, 1, 3, 2])  # [B, heads, hd, K]
        node("MatMul", [q, f"{p}.k_t"], f"{p}.scores")  # [B, heads, T, K]
        node("Mul", [f"{p}.scores", "scale"], f"{p}.scaled")
        node("Add", [f"{p}.scaled", "causal_mask"], f"{p}.masked")
        node("Cast", [f"{p}.masked"], f"{p}.masked_f32", to=TensorProto.FLOAT)
        node("Softmax", [f"{p}.masked_f32"], f"{p}.probs_f32", axis=-1)
        node("Cast", [f"{p}.probs_f32"], f"{p}.probs", to=F16)
        node("MatMul", [f"{p}.probs", v_all], f"{p}.context")  # [B, heads, T, hd]
        node("Transpose", [f"{p}.context"], f"{p}.context_t", perm=[0, 2, 1, 3])
        node("Reshape", [f"{p}.context_t", "merge_shape"], f"{p}.attn")  # [B, T, d]
        w(f"{p}.o_proj.weight", d, d)
        node("MatMul", [f"{p}.attn", f"{p}.o_proj.weight"], f"{p}.o_proj")
        r = node("Add", [x, f"{p}.o_proj"], f"{p}.residual1")
        m = rms_norm(r, f"{p}.post_attention_layernorm.weight", f"{p}.post_norm")
        w(f"{p}.gate_proj.weight", d, ffn)
        w(f"{p}.up_proj.weight", d, ffn)
        w(f"{p}.down_proj.weight", ffn, d)
        node("MatMul", [m, f"{p}.gate_proj.weight"], f"{p}.gate_proj")
        node("Sigmoid", [f"{p}.gate_proj"], f"{p}.gate_sigmoid")
        node("Mul", [f"{p}.gate_proj", f"{p}.gate_sigmoid"], f"{p}.silu")
        node("MatMul", [m, f"{p}.up_proj.weight"], f"{p}.up_proj")
        node("Mul", [f"{p}.silu", f"{p}.up_proj"], f"{p}.gated")
        node("MatMul", [f"{p}.gated", f"{p}.down_proj.weight"], f"{p}.down_proj")
        x = node("Add", [r, f"{p}.down_proj"], f"{p}.residual2")
    hf = rms_norm(x, "norm.weight", "final_norm")
    w("lm_head.weight", d, vocab)
    node("MatMul", [hf, "lm_head.weight"], "logits")

    length: int | str = TOTAL if decode else seq
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, tokens])]
    outputs = [helper.make_tensor_value_info("logits", F16, [batch, tokens, vocab])]
    for i in range(layers):
        for t in ("key", "value"):
            if decode:
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{t}", F16, [batch, kv_heads, PAST, hd]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{t}", F16, [batch, kv_heads, length, hd]))
    # As the exporter does, declare the key positions' length: ONNX shape inference cannot size a Range
    # from a computed limit, so without it the mask would stay unsized even with the dims bound.
    value_info = [helper.make_tensor_value_info("key_positions", TensorProto.INT64, [TOTAL])] if decode else []
    model = _model(nodes, inputs, outputs, inits, opset=20, value_info=value_info)
    model.ir_version = 10
    return model


def weightless(model: onnx.ModelProto, stem: str) -> onnx.ModelProto:
    """``model`` under the zoo's weightless convention (models/export.py, the one implementation):
    initializers with more than 64 elements become references into the absent ``<stem>.weights``."""
    import importlib.util
    import sys
    from pathlib import Path

    export = sys.modules.get("wsealloc_zoo_export")
    if export is None:
        spec = importlib.util.spec_from_file_location("wsealloc_zoo_export", Path(__file__).resolve().parents[1] / "export.py")
        assert spec is not None and spec.loader is not None
        export = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = export  # its dataclasses look their module up
        spec.loader.exec_module(export)  # pure Python and onnx at import time (torch only inside functions)
    export.apply_weightless_convention(model, f"{stem}.weights")
    return model


if __name__ == "__main__":
    from pathlib import Path

    here = Path(__file__).parent
    save(mlp(), here / "mlp.onnx")
    save(mlp(batch="batch"), here / "mlp_dynamic.onnx")
    save(reshape_chain(seq=64), here / "attention.onnx")
    save(transformer(), here / "transformer.onnx")
    save(weightless(llm(decode=False), "llm_prefill"), here / "llm_prefill.onnx")
    save(weightless(llm(decode=True), "llm_decode"), here / "llm_decode.onnx")
    print("wrote", ", ".join(p.name for p in sorted(here.glob("*.onnx"))))
