"""ONNX front end: shapes resolved through Shape/Reshape chains, dims bound, bad files rejected clearly."""

from __future__ import annotations

import os
from pathlib import Path

import build as builders
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from wsealloc.errors import ModelLoadError, ShapeError, UsageError
from wsealloc.frontend import import_onnx
from wsealloc.graph.ir import TensorKind
from wsealloc.pipeline import parse_dims


def test_mlp_shapes_and_kinds(model_dir: Path) -> None:
    g = import_onnx(model_dir / "mlp.onnx")
    assert [n.op_type for n in g.nodes] == ["MatMul", "Add", "Relu", "MatMul", "Add"]
    assert g.tensors["x"].kind is TensorKind.INPUT
    assert g.tensors["w1"].kind is TensorKind.WEIGHT and g.tensors["w1"].shape == (64, 256)
    assert g.tensors["h2"].kind is TensorKind.ACTIVATION and g.tensors["h2"].shape == (4, 256)


def test_reshape_chain_folds_shape_subgraph(model_dir: Path) -> None:
    g = import_onnx(model_dir / "chain.onnx", {"seq": 16})
    ops = [n.op_type for n in g.nodes]
    assert "Shape" not in ops and "Gather" not in ops and "Concat" not in ops
    assert g.tensors["q4"].shape == (16, 4, 16)
    assert g.tensors["scores"].shape == (4, 16, 16)
    assert g.dropped_nodes == 4 and g.onnx_nodes == 11


def test_unbound_and_unknown_dims(model_dir: Path) -> None:
    with pytest.raises(ShapeError, match="unbound symbolic dims seq; bind them with --dim seq=N"):
        import_onnx(model_dir / "chain.onnx")
    with pytest.raises(UsageError, match="does not name a symbolic dim"):
        import_onnx(model_dir / "chain.onnx", {"seq": 4, "batch": 2})


def test_symbolic_batch_binds(tmp_path: Path) -> None:
    path = builders.save(builders.mlp(batch="batch"), tmp_path / "m.onnx")
    g = import_onnx(path, {"batch": 8})
    assert g.tensors["y"].shape == (8, 32)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such file"):
        import_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ModelLoadError, match="directory"):
        import_onnx(tmp_path)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        import_onnx(empty)
    text = tmp_path / "text.onnx"
    text.write_text("this is not a model at all, just some text\n")
    with pytest.raises(ModelLoadError, match="text file"):
        import_onnx(text)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelLoadError):
        import_onnx(junk)
    good = builders.mlp().SerializeToString()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelLoadError):
        import_onnx(trunc)


def test_opset_too_new(tmp_path: Path) -> None:
    m = builders.mlp()
    m.opset_import[0].version = 99
    with pytest.raises(ModelLoadError, match="opset 99"):
        import_onnx(builders.save(m, tmp_path / "o.onnx"))


def _graph_model(nodes: list[onnx.NodeProto], tmp_path: Path, name: str) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)])
    return builders.save(model, tmp_path / name)


def test_cycle_and_dangling_are_told_apart(tmp_path: Path) -> None:
    cyc = _graph_model(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            helper.make_node("Relu", ["a"], ["y"], name="n3"),
        ],
        tmp_path,
        "cyc.onnx",
    )
    with pytest.raises(ModelLoadError, match="cycle"):
        import_onnx(cyc)
    dangling = _graph_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="n1")], tmp_path, "d.onnx")
    with pytest.raises(ModelLoadError, match="reads tensor 'ghost'.*dangling"):
        import_onnx(dangling)


def test_unsorted_nodes_are_sorted(tmp_path: Path) -> None:
    path = _graph_model(
        [
            helper.make_node("Relu", ["a"], ["y"], name="second"),
            helper.make_node("Relu", ["x"], ["a"], name="first"),
        ],
        tmp_path,
        "u.onnx",
    )
    assert [n.name for n in import_onnx(path).nodes] == ["first", "second"]


def test_repeated_node_names_get_free_suffixes(tmp_path: Path) -> None:
    # the second "a" must not become "a__1": a node of that name exists already
    path = _graph_model(
        [
            helper.make_node("Relu", ["x"], ["t1"], name="a"),
            helper.make_node("Relu", ["t1"], ["t2"], name="a"),
            helper.make_node("Relu", ["t2"], ["y"], name="a__1"),
        ],
        tmp_path,
        "names.onnx",
    )
    assert [n.name for n in import_onnx(path).nodes] == ["a", "a__2", "a__1"]


def test_negative_and_huge_dims_rejected(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "neg.onnx")
    with pytest.raises(ShapeError, match="negative dim"):
        import_onnx(path)
    with pytest.raises(UsageError, match="below 2,147,483,648"):
        import_onnx(builders.save(builders.mlp(batch="batch"), tmp_path / "m.onnx"), {"batch": 2**40})


def test_custom_domain_op_shape_unknown(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="f", domain="com.acme")
    model = helper.make_model(
        helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)]
    )
    with pytest.raises(ShapeError, match="custom-domain op com.acme::Frobnicate"):
        import_onnx(builders.save(model, tmp_path / "c.onnx"))


def test_external_data_absent_is_fine(tmp_path: Path) -> None:
    m = builders.mlp(d_in=128, d_hidden=512)
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").unlink()
    g = import_onnx(tmp_path / "ext.onnx")
    assert g.tensors["w1"].shape == (128, 512) and g.tensors["w1"].kind is TensorKind.WEIGHT


def test_weights_listed_as_inputs_without_data(tmp_path: Path) -> None:
    """Older exporters (the notebook's gpt2.onnx) list parameters as graph inputs."""
    m = builders.mlp()
    for init in list(m.graph.initializer):
        m.graph.input.append(helper.make_tensor_value_info(init.name, TensorProto.FLOAT, list(init.dims)))
    del m.graph.initializer[:]
    g = import_onnx(builders.save(m, tmp_path / "legacy.onnx"))
    assert g.inputs == ("x",)
    assert g.tensors["w1"].kind is TensorKind.WEIGHT and g.tensors["b2"].kind is TensorKind.WEIGHT


def test_zero_dim_rejected(tmp_path: Path) -> None:
    with pytest.raises(ShapeError, match="zero-sized"):
        import_onnx(builders.save(builders.mlp(batch=0), tmp_path / "z.onnx"))


def test_pipe_as_model_is_refused(tmp_path: Path) -> None:
    # a FIFO would hang without a writer, and a plan must be able to hash and re-read its model
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(ModelLoadError, match="not a regular file"):
        import_onnx(fifo)


def test_dim_given_twice() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_dims(["batch=4", "batch=8"])
    assert parse_dims(["batch=4", "batch=4"]) == {"batch": 4}


def test_unresolved_shape_says_why(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x, w], [y])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "mm.onnx")
    with pytest.raises(ShapeError, match="mm.*Incompatible dimensions for matrix multiplication"):
        import_onnx(path)


def test_small_int8_matmul_weight_is_a_weight(tmp_path: Path) -> None:
    # 4,096 int8 elements: small and integer like a shape constant, but the operand of a MAC op
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [16, 64])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [16, 64])
    w = helper.make_tensor("w", TensorProto.INT8, [64, 64], np.ones(64 * 64, dtype=np.int8).tobytes(), raw=True)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["x", "w"], ["y"], name="mm")], "g", [x], [y], [w])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "q.onnx")
    assert import_onnx(path).tensors["w"].kind is TensorKind.WEIGHT


# -- ONNX's schema check of every node (issue 17) ----------------------------------------------


def _checked(nodes: list[onnx.NodeProto], opset: int = 18, domains: tuple[str, ...] = ()) -> None:
    from wsealloc.frontend.schema import check_nodes

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    check_nodes(helper.make_model(helper.make_graph(nodes, "g", [x, c], [y]), opset_imports=imports), "m.onnx")


def _branch(name: str, node: onnx.NodeProto) -> onnx.GraphProto:
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)])


def test_schema_check_names_node_and_arity() -> None:
    with pytest.raises(
        ModelLoadError, match=r"m.onnx: node 'mm' \(MatMul\) fails ONNX's schema check: it has 1 input where MatMul-13 takes 2;"
    ):
        _checked([helper.make_node("MatMul", ["x"], ["y"], name="mm")])
    with pytest.raises(ModelLoadError, match=r"node #0 \(Relu\) fails .* it has 2 outputs where Relu-14 takes 1"):
        _checked([helper.make_node("Relu", ["x"], ["y", "z"])])
    with pytest.raises(ModelLoadError, match="Unrecognized attribute: alpha for operator Relu"):
        _checked([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=2.0)])
    with pytest.raises(ModelLoadError, match="node 'up' .* deprecated"):
        _checked([helper.make_node("Upsample", ["x", "x"], ["y"], name="up")])
    with pytest.raises(ModelLoadError, match="node 'e' has an empty op type"):
        _checked([helper.make_node("", ["x"], ["y"], name="e")])
    # the default domain's other spelling is checked like the empty one
    _checked([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")])


def test_schema_check_leaves_ops_without_schema_alone() -> None:
    # custom-domain ops (imported or not) and op types ONNX does not define keep their own diagnosis
    _checked([helper.make_node("Frob", ["x"], ["y"], domain="com.acme")], domains=("com.acme",))
    _checked([helper.make_node("Frob", ["x"], ["y"], domain="com.other")])
    _checked([helper.make_node("NoSuchOp", ["x"], ["y"])])


def test_schema_check_reaches_into_subgraphs() -> None:
    # branches may read outer-scope tensors (x): checked node by node, not as stand-alone graphs
    good = helper.make_node(
        "If",
        ["c"],
        ["y"],
        name="if",
        then_branch=_branch("then", helper.make_node("Relu", ["x"], ["t"])),
        else_branch=_branch("else", helper.make_node("Neg", ["x"], ["e"])),
    )
    _checked([good])
    bad = helper.make_node(
        "If",
        ["c"],
        ["y"],
        name="if",
        then_branch=_branch("then", helper.make_node("Relu", ["x"], ["t"])),
        else_branch=_branch("else", helper.make_node("Neg", ["x", "x"], ["e"], name="neg")),
    )
    with pytest.raises(ModelLoadError, match=r"node 'neg' \(Neg\) in subgraph 'else' of 'if' \(If\) fails .* 2 inputs"):
        _checked([bad])


def test_declared_shape_contradicting_inference(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    stale = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="r1"), helper.make_node("Relu", ["t"], ["y"], name="r2")]
    graph = helper.make_graph(nodes, "g", [x], [y], value_info=[stale])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "vi.onnx")
    with pytest.raises(
        ShapeError,
        match=r"tensor 't' is declared \[2, 4\] \(value_info or graph output\) but ONNX shape inference .* gives \[2, 3\]",
    ):
        import_onnx(path)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    graph = helper.make_graph(nodes, "g", [x], [out])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "out.onnx")
    with pytest.raises(ShapeError, match=r"tensor 'y' is declared \[3, 2\]"):
        import_onnx(path)


def test_value_info_still_gives_custom_op_shapes(tmp_path: Path) -> None:
    # what inference cannot know (a custom op's output) comes from value_info, and what follows from it
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    f = helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 5])
    nodes = [
        helper.make_node("Frob", ["x"], ["f"], name="frob", domain="com.acme"),
        helper.make_node("Relu", ["f"], ["y"], name="r"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], value_info=[f])
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.acme", 1)]
    g = import_onnx(builders.save(helper.make_model(graph, opset_imports=imports), tmp_path / "c.onnx"))
    assert g.tensors["f"].shape == (2, 5) and g.tensors["y"].shape == (2, 5)


def test_tensor_beyond_any_wafer(tmp_path: Path) -> None:
    # within the dim limit but over 1 PiB: refused with its size
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**25, 2**24])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    path = builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "big.onnx")
    with pytest.raises(
        ShapeError, match=r"tensor 'x' of 'r' \(Relu\) has shape \[33554432, 16777216\] \(2.0 PiB\), beyond any wafer"
    ):
        import_onnx(path)
    with pytest.raises(ShapeError, match="graph input 'x' has a dim of 2,147,483,648"):
        import_onnx(builders.save(builders.mlp(batch=2**31), tmp_path / "wide.onnx"))


def test_inference_out_of_memory_is_a_shape_error(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ONNX's inference allocates what absurd attributes ask for: std::bad_alloc arrives as MemoryError
    def bad_alloc(*args: object, **kwargs: object) -> None:
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", bad_alloc)
    with pytest.raises(ShapeError, match="ONNX shape inference ran out of memory"):
        import_onnx(model_dir / "mlp.onnx")
