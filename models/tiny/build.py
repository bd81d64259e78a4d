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


if __name__ == "__main__":
    from pathlib import Path

    here = Path(__file__).parent
    save(mlp(), here / "mlp.onnx")
    save(mlp(batch="batch"), here / "mlp_dynamic.onnx")
    save(reshape_chain(seq=64), here / "attention.onnx")
    print("wrote", ", ".join(p.name for p in sorted(here.glob("*.onnx"))))
