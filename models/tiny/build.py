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
# LLaMA-style LLM, prefill and decode step with a KV cache: the tiny twins of the zoo's llama3-8b-prefill /
# llama3-8b-decode (same input and output names, layouts and symbolic dims; models/README.md, "KV cache
# convention"), written by wsealloc's own LLaMA-family builder (wsealloc/frontend/decoder.py), which
# `wsealloc export-llm` uses for any Hugging Face config.


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
    """A LLaMA decoder (LlamaForCausalLM with eager attention, float16, untied LM head), weightless: its
    weight matrices reference the absent ``llm_decode.weights`` / ``llm_prefill.weights``.

    Prefill (``decode=False``): ``input_ids`` int64 [1, seq] -> ``logits`` [1, seq, vocab] and, per layer
    i, ``present.{i}.key`` / ``present.{i}.value`` [1, kv_heads, seq, head_dim]. Decode step
    (``decode=True``): ``input_ids`` [batch_size, 1] and ``past_key_values.{i}.*`` [batch_size, kv_heads,
    past_sequence_length, head_dim] -> ``logits`` and ``present.{i}.*`` one token longer. The graph is
    described in ``wsealloc.frontend.decoder``.

    MatMul MACs per sequence, ``T`` new tokens over ``K`` keys (prefill: T = K = seq; decode: T = 1,
    K = S + 1 for a past of S): per layer T*d*(2*d + 2*kv_heads*head_dim) + 3*T*d*ffn + 2*T*K*d, plus
    the LM head T*d*vocab. Defaults: prefill 1,507,328; decode 90,368 + 256*S (1,138,944 at S = 4096).
    """
    from wsealloc.frontend.decoder import DecoderSpec, build_decoder

    if d % heads or heads % kv_heads:
        raise ValueError("heads must divide d and kv_heads must divide heads")
    spec = DecoderSpec(
        layers=layers, hidden=d, heads=heads, kv_heads=kv_heads, head_dim=d // heads, ffn=ffn, vocab=vocab,
        dtype="float16", rope_theta=theta, eps=eps,
    )  # fmt: skip
    form = "decode" if decode else "prefill"
    return build_decoder(spec, form, seq, f"llm_{form}.weights")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    sys.path.insert(0, str(here.parents[1]))  # llm() writes with this checkout's wsealloc, installed or not
    save(mlp(), here / "mlp.onnx")
    save(mlp(batch="batch"), here / "mlp_dynamic.onnx")
    save(reshape_chain(seq=64), here / "attention.onnx")
    save(transformer(), here / "transformer.onnx")
    save(llm(decode=False), here / "llm_prefill.onnx")
    save(llm(decode=True), here / "llm_decode.onnx")
    print("wrote", ", ".join(p.name for p in sorted(here.glob("*.onnx"))))
