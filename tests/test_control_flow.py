"""If and Loop subgraphs costed as a run executes them: a constant condition folds to its branch, a
run-time one keeps the costlier branch (and says so), a Loop's body counts its trip count times; a
subgraph that cannot be costed is refused on one line, never dropped as if it were empty."""

from __future__ import annotations

import json
from pathlib import Path

import build as builders
import numpy as np
import pytest
from conftest import run
from onnx import GraphProto, TensorProto, helper, numpy_helper

from wsealloc.errors import UnsupportedOpError
from wsealloc.frontend import import_onnx
from wsealloc.frontend.sources import OnnxSource
from wsealloc.pipeline import graph_work, load_kernels

D = 64


def _weight(name: str, rows: int, cols: int) -> TensorProto:
    return numpy_helper.from_array(np.full((rows, cols), 0.01, dtype=np.float32), name)


def _branch(name: str, out: str, layers: int) -> GraphProto:
    """A branch of ``layers`` MatMul+Relu layers over the outer tensor x (read from the outer scope)."""
    nodes, inits, h = [], [], "x"
    for i in range(layers):
        inits.append(_weight(f"{name}_w{i}", D, D))
        nodes += [
            helper.make_node("MatMul", [h, f"{name}_w{i}"], [f"{name}_m{i}"], name=f"{name}/mm{i}"),
            helper.make_node("Relu", [f"{name}_m{i}"], [f"{name}_h{i}"], name=f"{name}/relu{i}"),
        ]
        h = f"{name}_h{i}"
    nodes.append(helper.make_node("Identity", [h], [out], name=f"{name}/out"))
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [8, D])], initializer=inits)


def _if_model(path: Path, cond: str) -> Path:
    """x [8, 64] -> If(cond) {then: 3 layers, else: 1 layer} -> y. ``cond``: "const" (a true constant)
    or "data" (from the flag input, known only at run time)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, D])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, D])
    inputs, nodes, inits = [x], [], []
    if cond == "const":
        inits.append(numpy_helper.from_array(np.array(True), "c"))
    else:
        inputs.append(helper.make_tensor_value_info("flag", TensorProto.FLOAT, [1]))
        inits.append(numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half"))
        nodes.append(helper.make_node("Greater", ["flag", "half"], ["c"], name="test"))
    nodes.append(
        helper.make_node(
            "If", ["c"], ["y"], name="choose", then_branch=_branch("deep", "t_out", 3), else_branch=_branch("shallow", "e_out", 1)
        )
    )
    graph = helper.make_graph(nodes, "g", inputs, [y], initializer=inits)
    return builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _loop_model(path: Path, trips: int | None) -> Path:
    """h = x; repeat trips times: h = relu(h @ W) (W read from the outer scope); scan output of each h."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, D])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
            helper.make_node("MatMul", ["h_in", "W"], ["m"], name="mm"),
            helper.make_node("Relu", ["m"], ["h_out"], name="relu"),
            helper.make_node("Identity", ["h_out"], ["scan"], name="emit"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [8, D]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [8, D]),
            helper.make_tensor_value_info("scan", TensorProto.FLOAT, [8, D]),
        ],
    )
    inits = [_weight("W", D, D), numpy_helper.from_array(np.array(True), "go")]
    inputs = [x]
    if trips is None:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, dtype=np.int64), "n"))
    loop = helper.make_node("Loop", ["n", "go", "x"], ["h_last", "all_h"], name="repeat", body=body)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("h_last", "all_h")]
    graph = helper.make_graph([loop], "g", inputs, outs, initializer=inits)
    return builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


LAYER_MACS = 8 * D * D


def test_constant_condition_folds_to_its_branch(tmp_path: Path) -> None:
    g = import_onnx(_if_model(tmp_path / "if.onnx", "const"))
    assert [n.op_type for n in g.nodes if n.op_type == "MatMul"] == ["MatMul"] * 3
    assert g.tensors["y"].shape == (8, D)
    assert any("1 If node(s) with a condition the shapes fix" in note for note in g.control_flow)


def test_runtime_condition_plans_the_costlier_branch_and_says_so(tmp_path: Path) -> None:
    g = import_onnx(_if_model(tmp_path / "if.onnx", "data"), weigh=graph_work)
    assert sum(n.op_type == "MatMul" for n in g.nodes) == 3  # the deep branch, not the shallow one
    note = g.control_flow[0]
    assert "If 'choose': condition 'c' is known only at run time: the costlier branch is planned, then_branch" in note
    # MatMuls and Relus of the branch, plus the Greater that computes the condition (1 op)
    assert f"{3 * (LAYER_MACS + 8 * D) + 1:,} MACs + vector ops) over else_branch (3 nodes, {LAYER_MACS + 8 * D + 1:,})" in note


def test_work_inside_a_subgraph_is_planned_not_dropped(tmp_path: Path) -> None:
    """The regression of issue 26: Silero VAD's decoder sat in an If and was dropped with the shape-only
    nodes; a plan of nothing. The work inside the branch must be in the plan and verify."""
    path = _if_model(tmp_path / "if.onnx", "data")
    kgraph = load_kernels(OnnxSource(path=str(path)))
    # the flag test (one elementwise kernel) and the deep branch's three layers
    assert [k.kind.value for k in kgraph.kernels] == ["elementwise"] + ["matmul"] * 3
    plan = tmp_path / "plan.json"
    result = run("solve", str(path), "--arch", "tiny", "--time-limit", "5", "-o", str(plan))
    assert result.returncode == 0, result.stderr
    assert "control flow: If 'choose'" in result.stdout
    assert run("verify", str(plan)).returncode == 0
    doc = run("inspect", str(path), "--arch", "tiny", "--json").stdout
    summary = json.loads(doc)["summary"]
    assert summary["total_macs"] == 3 * LAYER_MACS and summary["kernels"] == 4
    assert summary["control_flow"] and "costlier branch" in summary["control_flow"][0]


def test_loop_with_known_trip_count_counts_its_body_that_often(tmp_path: Path) -> None:
    g = import_onnx(_loop_model(tmp_path / "loop.onnx", 4))
    assert sum(n.op_type == "MatMul" for n in g.nodes) == 4
    assert g.tensors["all_h"].shape == (4, 8, D) and g.tensors["h_last"].shape == (8, D)
    assert g.control_flow == ("Loop 'repeat': body of 4 nodes unrolled 4 times (trip count 4)",)
    kgraph = load_kernels(OnnxSource(path=str(tmp_path / "loop.onnx")))
    assert sum(k.kind.value == "matmul" for k in kgraph.kernels) == 4


def test_loop_with_run_time_trip_count_is_refused_on_one_line(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOpError, match=r"'repeat' \(Loop\) cannot be costed: its trip count M \('n'\) is computed"):
        import_onnx(_loop_model(tmp_path / "loop.onnx", None))
    result = run("inspect", str(tmp_path / "loop.onnx"), "--arch", "tiny")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Loop" in result.stderr


def _scan_model(path: Path, reverse: int = 0) -> Path:
    """A running sum over the 5 rows of x: state s [64] += x_t, every state emitted (a Scan)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="acc"),
            helper.make_node("Identity", ["s_out"], ["y_t"], name="emit"),
        ],
        "body",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [D]) for n in ("s_in", "x_t")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [D]) for n in ("s_out", "y_t")],
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, D])
    s0 = helper.make_tensor_value_info("s0", TensorProto.FLOAT, [D])
    scan = helper.make_node(
        "Scan", ["s0", "x"], ["s", "ys"], name="cumsum", body=body, num_scan_inputs=1, scan_input_directions=[reverse]
    )
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s", "ys")]
    graph = helper.make_graph([scan], "g", [s0, x], outs)
    return builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_unrolled_over_its_length(tmp_path: Path, reverse: int) -> None:
    g = import_onnx(_scan_model(tmp_path / "scan.onnx", reverse))
    assert sum(n.op_type == "Add" for n in g.nodes) == 5
    assert g.tensors["ys"].shape == (5, D) and g.tensors["s"].shape == (D,)
    assert g.control_flow == ("Scan 'cumsum': body of 2 nodes unrolled 5 times (the length of its scan inputs)",)
    slices = [n for n in g.nodes if n.op_type == "Gather"]
    assert len(slices) == 5  # iteration i reads row i (row 4 - i in reverse), read from the constants
    assert [int(g.constants[n.inputs[1]]) for n in slices] == ([4, 3, 2, 1, 0] if reverse else [0, 1, 2, 3, 4])


def test_other_ops_holding_a_graph_are_refused_not_dropped(tmp_path: Path) -> None:
    inner = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="inner")],
        "inner",
        [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])],
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    node = helper.make_node("Repeat", ["x"], ["y"], name="custom", domain="com.acme", body=inner)
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)])
    with pytest.raises(UnsupportedOpError, match=r"'custom' \(Repeat\) holds a subgraph"):
        import_onnx(builders.save(model, tmp_path / "custom.onnx"))
