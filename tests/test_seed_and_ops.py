"""The seed notebook's estimates reproduced by hand, unknown ops, and op-model density."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from build import save, weight
from onnx import TensorProto, helper, numpy_helper

from wsealloc.arch import load_arch
from wsealloc.cost import CostModelName, CostOptions, SeedWork, kernel_work
from wsealloc.errors import UnsupportedOpError
from wsealloc.frontend import import_onnx
from wsealloc.frontend.sources import OnnxSource
from wsealloc.graph.kernels import build_kernels
from wsealloc.opmodels import grid_sides
from wsealloc.pipeline import build_costs


def _notebook_model(tmp_path: Path) -> str:
    """x[1,3,8,8] -> Conv(w[4,3,3,3], pad 1) -> y[1,4,8,8] -> Flatten -> Gemm(w[256,10], b[10]) -> Add(scalar)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["y"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g", "gb"], ["h"], name="gemm"),
        helper.make_node("Add", ["h", "one"], ["out"], name="add"),
    ]
    inits = [
        weight("w", 4, 3, 3, 3),
        weight("g", 256, 10),
        weight("gb", 10),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [out], initializer=inits), opset_imports=[helper.make_opsetid("", 18)]
    )
    return save(model, tmp_path / "nb.onnx")


def test_seed_estimates_by_hand(tmp_path: Path) -> None:
    path = _notebook_model(tmp_path)
    graph = import_onnx(path)
    arch = load_arch("tiny")
    options = CostOptions(model=CostModelName.SEED)
    works = {k.name: kernel_work(k, graph, arch, options) for k in build_kernels(graph, fuse=False).kernels}
    conv, gemm, add = works["conv"], works["gemm"], works["add"]
    assert isinstance(conv, SeedWork) and isinstance(gemm, SeedWork) and isinstance(add, SeedWork)
    # notebook Conv: prod(x.shape + w.shape) // x.shape[1] + sum(y.shape)
    assert conv.compute == (1 * 3 * 8 * 8 * 4 * 3 * 3 * 3) // 3 + (1 + 4 + 8 + 8)
    # notebook Gemm: a0 * (a1 + 1) * b1
    assert gemm.compute == 1 * (256 + 1) * 10
    # tensor + scalar: the notebook returns the tensor's *bytes* (bf16: 2 per element)
    assert add.compute == 10 * 2
    # memory = output bytes; comm = bytes of intermediate (non-input) inputs
    assert conv.memory == 4 * 64 * 2 and conv.comm == 0
    assert gemm.comm == 256 * 2 and add.comm == 10 * 2
    assert works["flat"].compute == 0  # ops the notebook does not know get 0 compute


def test_seed_latency_is_floor_division(tmp_path: Path) -> None:
    costs = build_costs(
        OnnxSource(path=_notebook_model(tmp_path), fuse=False), load_arch("tiny"), CostOptions(model=CostModelName.SEED)
    )
    kc = costs.by_name("conv")
    assert isinstance(kc.work, SeedWork)
    t = kc.table
    i = int(np.flatnonzero((t.r == 1) & (t.c == 3))[0])
    assert t.latency[i] == max(kc.work.compute // (4 * 3), kc.work.comm // (4 * 3))


def _unknown_model(tmp_path: Path) -> str:
    nodes = [helper.make_node("Det", ["x"], ["d"], name="det"), helper.make_node("Relu", ["d"], ["y"], name="relu")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
    return save(model, tmp_path / "unknown.onnx")


def test_unknown_op_is_an_error_unless_allowed(tmp_path: Path) -> None:
    path = _unknown_model(tmp_path)
    with pytest.raises(UnsupportedOpError, match="op Det.*--allow-unknown-ops"):
        build_costs(OnnxSource(path=path), load_arch("tiny"), CostOptions())
    costs = build_costs(OnnxSource(path=path), load_arch("tiny"), CostOptions(allow_unknown_ops=True))
    assert costs.by_name("det").work.vector_ops == 4  # 1 op per output element, never a silent zero


def test_every_core_count_reachable_within_a_few_percent() -> None:
    """Every core count n up to the largest useful grid has a candidate grid with between 0.97 n and n
    cores (every n up to 100 exactly)."""
    rs, cs = grid_sides(4096, 792), grid_sides(50257, 1232)
    products = np.unique(np.outer(rs, cs).ravel())
    assert set(range(1, 101)) <= set(products.tolist())
    n = np.arange(101, int(products.max()) + 1)
    below = products[np.searchsorted(products, n, side="right") - 1]
    assert (below / n).min() >= 0.97
    assert products.max() >= 0.8 * 792 * 1232
