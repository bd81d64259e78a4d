"""--input-shape: a graph input's whole shape from the user, whatever its dims are in the file (named,
unnamed, -1, 0); the errors naming both sides; the request, suites and plans carrying it; inspect's fix."""

from __future__ import annotations

import json
from pathlib import Path

import build as builders
import onnx
import pytest
from conftest import run
from onnx import TensorProto, helper

from wsealloc.errors import InputShapeError, ShapeError, UsageError
from wsealloc.frontend import import_onnx
from wsealloc.pipeline import parse_input_shapes
from wsealloc.request import SolveRequest, build_request


def _conv_model(path: Path, dims: list[int | str | None]) -> Path:
    """x [dims] -> Conv(8 filters, 3x3) -> Relu: a stand-in for an image model exported with open sizes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], [0.0] * (8 * 27))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[w])
    return builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _unnamed(path: Path, value: int | None) -> Path:
    """Dims stored as -1 / 0 / nothing at all (as Paddle2ONNX and spox write them)."""
    model = onnx.load(str(_conv_model(path, [1, 3, 8, 8])))
    for i, d in enumerate(model.graph.input[0].type.tensor_type.shape.dim):
        if i in (0, 2, 3):
            d.Clear()
            if value is not None:
                d.dim_value = value
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("value", [None, 0, -1])
def test_input_shape_sets_unknown_unnamed_zero_and_negative_dims(tmp_path: Path, value: int | None) -> None:
    path = _unnamed(tmp_path / "m.onnx", value)
    with pytest.raises(InputShapeError, match=r"graph input 'x' has .*\[\?, 3, \?, \?\].*--input-shape x=Nx3xNxN") as err:
        import_onnx(path)
    assert err.value.inputs == (("x", "[?, 3, ?, ?]"),) and err.value.options == ("x=Nx3xNxN",)
    g = import_onnx(path, input_shapes={"x": (2, 3, 48, 320)})
    assert g.tensors["x"].shape == (2, 3, 48, 320) and g.tensors["y"].shape == (2, 8, 48, 320)
    assert g.input_shapes == {"x": (2, 3, 48, 320)}


def test_input_shape_binds_named_dims_and_question_mark(tmp_path: Path) -> None:
    # Paddle2ONNX spells an unnamed dim "?": it is no symbol two dims share
    path = _conv_model(tmp_path / "m.onnx", ["p2o.N", 3, "?", "?"])
    g = import_onnx(path, input_shapes={"x": (1, 3, 48, 192)})
    assert g.tensors["y"].shape == (1, 8, 48, 192)
    # named dims of the file are bound by the shape: --dim may repeat the same value, not another one
    assert import_onnx(path, {"p2o.N": 1}, input_shapes={"x": (1, 3, 4, 4)}).tensors["x"].shape == (1, 3, 4, 4)
    with pytest.raises(UsageError, match=r"--input-shape x=2x3x4x4 sets dim p2o.N to 2, but --dim p2o.N=1"):
        import_onnx(path, {"p2o.N": 1}, input_shapes={"x": (2, 3, 4, 4)})


def test_input_shape_implies_shared_symbols_for_other_inputs(tmp_path: Path) -> None:
    # two inputs sharing "batch": the shape of one binds the other (Silero VAD's input and state)
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "seq"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 16], [0.0] * 64)
    nodes = [helper.make_node("MatMul", ["b", "w"], ["m"], name="mm"), helper.make_node("ReduceSum", ["a"], ["s"], name="r")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("m", "s")]
    graph = helper.make_graph(nodes, "g", [a, b], outs, initializer=[w])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "two.onnx")
    g = import_onnx(path, input_shapes={"a": (3, 512)})
    assert g.tensors["b"].shape == (3, 4) and g.tensors["m"].shape == (3, 16)
    with pytest.raises(UsageError, match=r"sets dim batch to 2, but --input-shape for 'a' sets it to 3"):
        import_onnx(path, input_shapes={"a": (3, 512), "b": (2, 4)})


def test_input_shape_errors_name_both_sides(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m.onnx", ["n", 3, "h", "w"])
    with pytest.raises(
        ShapeError, match=r"--input-shape x=1x4x8x8 contradicts the model: dim 1 of input 'x' \[n, 3, h, w\] is fixed at 3, not 4"
    ):
        import_onnx(path, input_shapes={"x": (1, 4, 8, 8)})
    with pytest.raises(
        ShapeError, match=r"--input-shape x=3x8x8 has rank 3, but input 'x' is \[n, 3, h, w\] \(rank 4\); give 4 sizes"
    ):
        import_onnx(path, input_shapes={"x": (3, 8, 8)})
    with pytest.raises(
        UsageError, match=r"--input-shape image=1x3x8x8 names no input of the model; its inputs: x \[n, 3, h, w\]"
    ):
        import_onnx(path, input_shapes={"image": (1, 3, 8, 8)})
    with pytest.raises(
        InputShapeError,
        match=r"unbound symbolic dims h, n, w; bind them with --dim h=N --dim n=N --dim w=N, or give whole shapes with "
        r"--input-shape x=Nx3xNxN",
    ):
        import_onnx(path)


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["x=1x3x48x320", "a=b=2,3"]) == {"x": (1, 3, 48, 320), "a=b": (2, 3)}
    assert parse_input_shapes(["x=1x3", "x=1X3"]) == {"x": (1, 3)}
    for bad, msg in (
        ("x", "expected NAME=SIZES"),
        ("=1x2", "expected NAME=SIZES"),
        ("x=1xax2", "not a list of sizes"),
        ("x=1x0", "sizes must be positive"),
    ):
        with pytest.raises(UsageError, match=msg):
            parse_input_shapes([bad])
    with pytest.raises(UsageError, match="given twice"):
        parse_input_shapes(["x=1x2", "x=1x3"])


def test_request_carries_input_shapes(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "m.onnx", [-1, 3, -1, -1])
    request = build_request(path, "tiny", input_shapes={"x": [1, 3, 16, 16]})
    assert request.onnx_model.input_shapes == {"x": (1, 3, 16, 16)}
    assert SolveRequest.from_json(request.to_json()) == request
    assert build_request(path, "tiny", input_shapes={"x": "1x3x16x16"}) == request
    with pytest.raises(UsageError, match="not a list of sizes"):
        build_request(path, "tiny", input_shapes={"x": [1, 3.5]})
    with pytest.raises(UsageError, match="input_shapes"):
        build_request(path, "tiny", input_shapes={"x": [1, 2**31]})


def test_cli_solve_and_verify_with_input_shape(tmp_path: Path) -> None:
    path = _unnamed(tmp_path / "m.onnx", -1)
    plan = tmp_path / "plan.json"
    result = run("solve", str(path), "--arch", "tiny", "--input-shape", "x=1x3x16x16", "--time-limit", "5", "-o", str(plan))
    assert result.returncode == 0, result.stderr
    assert json.loads(plan.read_text())["model"]["input_shapes"] == {"x": [1, 3, 16, 16]}
    verified = run("verify", str(plan))
    assert verified.returncode == 0 and "OK" in verified.stdout, verified.stdout + verified.stderr


def test_inspect_lists_inputs_and_the_command_that_fixes_them(tmp_path: Path) -> None:
    path = _unnamed(tmp_path / "m.onnx", 0)
    result = run("inspect", str(path))
    assert result.returncode == 2
    assert "x" in result.stdout and "[?, 3, ?, ?]" in result.stdout
    assert f"wsealloc inspect {path} --input-shape x=Nx3xNxN" in result.stdout
    assert result.stderr.count("\n") == 1 and "--input-shape x=Nx3xNxN" in result.stderr
    doc = json.loads(run("inspect", str(path), "--json").stdout)
    assert doc["inputs"] == [{"name": "x", "shape": "[?, 3, ?, ?]"}]
    assert doc["fix"] == f"wsealloc inspect {path} --input-shape x=Nx3xNxN"
    fixed = run("inspect", str(path), "--input-shape", "x=1x3x16x16", "--json")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["summary"]["input_shapes"] == {"x": [1, 3, 16, 16]}


def test_suite_instance_input_shapes(tmp_path: Path) -> None:
    from wsealloc.bench.suite import Instance

    path = _unnamed(tmp_path / "m.onnx", None)
    inst = Instance.model_validate({"name": "m", "model": "m.onnx", "arch": "tiny", "input_shapes": {"x": "1x3x8x8"}})
    assert inst.request(tmp_path).onnx_model.input_shapes == {"x": (1, 3, 8, 8)}
    inst = Instance.model_validate({"name": "m", "model": str(path), "arch": "tiny", "input_shapes": {"x": [1, 3, 8, 8]}})
    assert inst.request(tmp_path).onnx_model.input_shapes == {"x": (1, 3, 8, 8)}
