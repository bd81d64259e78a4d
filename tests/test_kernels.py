"""Kernel grouping: anchors, epilogues, absorbed layout ops, fusion switch."""

from __future__ import annotations

from pathlib import Path

from wsealloc.frontend import import_onnx
from wsealloc.graph.kernels import build_kernels
from wsealloc.graph.opclass import KernelKind, OpClass, op_class


def test_mlp_fuses_bias_and_activation(model_dir: Path) -> None:
    kg = build_kernels(import_onnx(model_dir / "mlp.onnx"))
    assert [(k.name, k.nodes) for k in kg.kernels] == [
        ("fc1", ("fc1", "fc1_bias", "fc1_relu")),
        ("fc2", ("fc2", "fc2_bias")),
    ]
    assert kg.kernels[0].weights == ("w1", "b1")
    assert [(e.src, e.dst, e.tensor) for e in kg.edges] == [("fc1", "fc2", "h2")]


def test_no_fuse_is_one_kernel_per_node(model_dir: Path) -> None:
    g = import_onnx(model_dir / "mlp.onnx")
    kg = build_kernels(g, fuse=False)
    assert len(kg.kernels) == len(g.nodes)


def test_layout_ops_absorbed_every_node_covered(model_dir: Path) -> None:
    g = import_onnx(model_dir / "chain.onnx", {"seq": 8})
    kg = build_kernels(g)
    covered = [n for k in kg.kernels for n in k.nodes]
    assert sorted(covered) == sorted(n.name for n in g.nodes)
    assert [k.kind for k in kg.kernels] == [KernelKind.MATMUL, KernelKind.MATMUL, KernelKind.SOFTMAX, KernelKind.MATMUL]
    assert "split_heads" in kg.kernel("q_proj").nodes


def test_op_classes() -> None:
    assert op_class("MatMul") is OpClass.MAC
    assert op_class("Reshape") is OpClass.LAYOUT
    assert op_class("Gelu") is OpClass.ELEMENTWISE
    assert op_class("Softmax") is OpClass.VECTOR
    assert op_class("Frob", "com.acme") is OpClass.UNKNOWN
