"""The catalogue of bad inputs: each gets one line on stderr naming the file/field/op and the fix, a
non-zero exit code, no traceback, within seconds. (A model with absent external data must work.)"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from build import mlp, reshape_chain, save
from onnx import TensorProto, helper, numpy_helper

from wsealloc.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "models" / "tiny"


def _graph(tmp: Path, name: str, nodes: list[onnx.NodeProto], shape: list[int | str] = [2, 3], **kw: object) -> str:  # noqa: B006
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    opsets = [helper.make_opsetid("", 18), *kw.get("extra_opsets", [])]  # type: ignore[list-item]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=opsets)
    return save(model, tmp / name)


def _write(tmp: Path, name: str, data: bytes | str) -> str:
    p = tmp / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


def _absurd(tmp: Path, side: int = 10**6, name: str = "absurd.onnx") -> str:
    """A MatMul of two side x side operands: 10^6 (4 TB each) fits no grid; 10^9 (3,553 PiB) no wafer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [side, side])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [side, side])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="huge")], "g", [x, w], [y])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp / name)


def _zoo(name: str) -> onnx.ModelProto:
    """A zoo model without its (absent) weight data, to be broken by a test."""
    return onnx.load(str(ROOT / "models" / name), load_external_data=False)


def _first(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


def _lost_input(tmp: Path, zoo: str, op_type: str, slot: int, keep_value_info: bool = True) -> str:
    """The zoo model with input ``slot`` of its first ``op_type`` node deleted (what issue 17's
    mutations did: a Shape without input, a MatMul with one, a Conv without its data input)."""
    m = _zoo(zoo)
    del _first(m, op_type).input[slot]
    if not keep_value_info:
        del m.graph.value_info[:]
    return save(m, tmp / f"{op_type}-lost-{slot}.onnx")


def _resnet_width(tmp: Path, width: int) -> str:
    """ResNet-50 with another image width in its graph input, its value_info left as exported."""
    m = _zoo("resnet50.onnx")
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_value = width
    return save(m, tmp / f"resnet-w{width}.onnx")


def _split_outputs(tmp: Path, count: int) -> str:
    m = onnx.load(str(TINY / "transformer.onnx"), load_external_data=False)
    split = _first(m, "Split")
    next(a for a in split.attribute if a.name == "num_outputs").i = count
    return save(m, tmp / "split.onnx")


def _empty_op_type(tmp: Path) -> str:
    m = mlp()
    m.graph.node[1].op_type = ""
    return save(m, tmp / "empty-op.onnx")


def _bad_attribute(tmp: Path) -> str:
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="g", alpha=2)  # alpha must be a float
    w = numpy_helper.from_array(np.ones((3, 4), dtype=np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([node], "g", [x], [y], initializer=[w])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp / "attr.onnx")


def _positions(tmp: Path) -> str:
    """x [seq, 64] plus its positions (Range over seq, as LLM exports compute key positions), then a
    MatMul: every size follows from seq, and the positions are a 1-D integer tensor of seq elements."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    ints = {"zero": 0, "one": 1, "axis1": [1]}
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in ints.items()]
    inits.append(numpy_helper.from_array(np.ones((64, 64), dtype=np.float32), "w"))
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="n", axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["pos"], name="positions"),
        helper.make_node("Unsqueeze", ["pos", "axis1"], ["pos2"], name="unsq"),
        helper.make_node("Cast", ["pos2"], ["posf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "posf"], ["h"], name="add"),
        helper.make_node("MatMul", ["h", "w"], ["y"], name="proj"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp / "positions.onnx")


def _arch_with(tmp: Path, name: str, extra: str) -> str:
    """The tiny preset with ``extra`` lines appended (a second ``sram_bytes:``, a second ``noc:``)."""
    text = (ROOT / "wsealloc" / "arch" / "presets" / "tiny.yaml").read_text()
    if extra.startswith("  "):
        text = text.replace("  macs_per_cycle: 4\n", "  macs_per_cycle: 4\n" + extra)
    else:
        text += extra
    return _write(tmp, name, text)


def _suite_with_duplicate(tmp: Path) -> str:
    model = ROOT / "models" / "tiny" / "mlp.onnx"
    text = f"name: dup\ninstances:\n- name: a\n  model: {model}\n  arch: tiny\n  arch: wse2\n"
    return _write(tmp, "dup-suite.yaml", text)


def _opset99(tmp: Path) -> str:
    m = mlp()
    m.opset_import[0].version = 99
    return save(m, tmp / "opset99.onnx")


def _unknown_dtype(tmp: Path) -> str:
    """An input whose element type code (29) ONNX does not define (found by the loader fuzzer)."""
    m = mlp()
    m.graph.input[0].type.tensor_type.elem_type = 29
    return save(m, tmp / "dtype29.onnx")


def _truncated(tmp: Path) -> str:
    data = mlp().SerializeToString()
    return _write(tmp, "trunc.onnx", data[: len(data) // 3])


def _op_changed(tmp: Path, model: str, node: str, op_type: str) -> str:
    """A tiny model whose node ``node`` became ``op_type`` (attributes dropped): a valid node on its own
    whose inputs it cannot take (found by the fuzzer; the file's value_info kept the old shapes)."""
    m = onnx.load(str(TINY / model))
    target = next(n for n in m.graph.node if n.name == node)
    target.op_type = op_type
    del target.attribute[:]
    return save(m, tmp / f"{node}_{op_type}.onnx")


def _nested(tmp: Path, name: str, head: str, tail: str = "", depth: int = 20_000) -> str:
    """A YAML file whose value after ``head`` is a list nested ``depth`` deep (PyYAML's composer recursed
    once per level: a RecursionError, exit 70)."""
    return _write(tmp, name, head + "[" * depth + "1" + "]" * depth + "\n" + tail)


def _aliases(levels: int) -> str:
    """A list holding a list of ten values, then ``levels - 1`` lists of ten aliases of the one before: a
    few hundred bytes standing for 10^levels values (a "billion laughs" at 9 levels)."""
    lists = ["&a0 [" + ", ".join(["x"] * 10) + "]"]
    lists += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(lists) + "]"


def _alias_rules(tmp: Path, levels: int, kind: str) -> str:
    """A keep-out area or a grid rule's kernels given as :func:`_aliases` (messages quoted the value)."""
    value = _aliases(levels)
    rule = f"- keep-out: {value}\n" if kind == "keep-out" else f"- grid: {value}\n  shape: 2x2\n"
    return _write(tmp, f"alias{levels}-{kind}.yaml", rule)


def _plan_edited(tmp: Path, edit: Callable[[dict], object]) -> str:  # type: ignore[type-arg]
    """A plan of the tiny MLP (allocation only) edited as JSON by ``edit``."""
    import json

    from wsealloc.api import solve

    solve(MLP, "tiny", place=False, output=tmp / "plan.json")
    doc = json.loads((tmp / "plan.json").read_text())
    edit(doc)
    return _write(tmp, "edited.json", json.dumps(doc))


def _unknown_dataflow(doc: dict) -> None:  # type: ignore[type-arg]
    doc["kernels"][0]["dataflow"] = "$"


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


Case = tuple[str, Callable[[Path], list[str]], str]
ATTN = str(TINY / "attention.onnx")
MLP = str(TINY / "mlp.onnx")
CASES: list[Case] = [
    ("missing path", lambda t: ["inspect", str(t / "nope.onnx")], "no such file"),
    ("a directory", lambda t: ["inspect", str(t)], "is a directory"),
    ("empty file", lambda t: ["inspect", _write(t, "e.onnx", b"")], "file is empty"),
    ("random bytes", lambda t: ["inspect", _write(t, "r.onnx", np.random.default_rng(1).bytes(5000))], "onnx"),
    ("truncated protobuf", lambda t: ["inspect", _truncated(t)], "re-export"),
    ("text named .onnx", lambda t: ["inspect", _write(t, "t.onnx", "graph { node { op_type: 'Relu' } }\n" * 5)], "text file"),
    ("opset newer than onnx", lambda t: ["inspect", _opset99(t)], "opset 99"),
    ("unknown element type", lambda t: ["inspect", _unknown_dtype(t)], "element type 29"),
    # a node whose inputs do not fit it: the MatMul's [16, 64] weight after a PRelu, and a MatMul of a
    # scalar in the shape computation (which folding would evaluate away)
    (
        "inputs a node cannot take",
        lambda t: ["inspect", _op_changed(t, "mlp.onnx", "fc2", "PRelu")],
        "the graph is inconsistent, ONNX shape inference says: [ShapeInferenceError] Inference error(s): (op_type:Add, "
        "node name: fc2_bias): [ShapeInferenceError] Incompatible dimensions",
    ),
    (
        "a scalar into MatMul",
        lambda t: ["inspect", _op_changed(t, "attention.onnx", "unsq", "MatMul")],
        "(op_type:MatMul, node name: unsq): [ShapeInferenceError] Input tensors of wrong rank (0)",
    ),
    (
        "custom-domain op",
        lambda t: [
            "inspect",
            _graph(
                t,
                "c.onnx",
                [helper.make_node("Frob", ["x"], ["y"], name="f", domain="com.acme")],
                extra_opsets=[helper.make_opsetid("com.acme", 1)],
            ),
        ],
        "com.acme::Frob",
    ),
    (
        "unknown op",
        lambda t: [
            "inspect",
            _graph(
                t,
                "u.onnx",
                [helper.make_node("Det", ["x"], ["d"], name="det"), helper.make_node("Relu", ["d"], ["y"], name="r")],
                shape=[4, 3, 3],
            ),
        ],
        "--allow-unknown-ops",
    ),
    ("unbound symbolic dims", lambda t: ["inspect", save(reshape_chain(), t / "s.onnx")], "--dim seq=N"),
    ("zero-sized dims", lambda t: ["inspect", save(mlp(batch=0), t / "z.onnx")], "zero-sized"),
    (
        "cyclic graph",
        lambda t: [
            "inspect",
            _graph(
                t,
                "cy.onnx",
                [
                    helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                    helper.make_node("Relu", ["a"], ["b"], name="n2"),
                    helper.make_node("Relu", ["a"], ["y"], name="n3"),
                ],
            ),
        ],
        "cycle",
    ),
    (
        "undefined tensor",
        lambda t: ["inspect", _graph(t, "d.onnx", [helper.make_node("Add", ["x", "ghost"], ["y"], name="n")])],
        "'ghost'",
    ),
    ("absurd dims", lambda t: ["solve", _absurd(t), "--arch", "wse2", "--no-place"], "fit no grid"),
    (
        "tensor beyond any wafer",
        lambda t: ["inspect", _absurd(t, 10**9, "beyond.onnx"), "--arch", "wse2"],
        "the model's input sizes would need 3,552.7 PiB for the inputs of one pass (the largest: input 'x' "
        "[1000000000, 1000000000], 3,552.7 PiB), more than 1,024 wafers of wse2 hold (40.9 TiB of SRAM)",
    ),
    (
        "input dim 2^40",
        lambda t: ["inspect", _resnet_width(t, 2**40), "--arch", "wse2"],
        "graph input 'pixel_values' has a dim of 1,099,511,627,776",
    ),
    (
        "value_info contradicting inference",
        lambda t: ["inspect", _resnet_width(t, 448), "--arch", "wse2"],
        "tensor 'conv2d' is declared [1, 64, 112, 112] (value_info or graph output) but ONNX shape inference over the "
        "graph gives [1, 64, 112, 224]",
    ),
    (
        "Shape lost its input",
        lambda t: ["inspect", _lost_input(t, "gpt2.onnx", "Shape", 0), "--arch", "wse2"],
        "node 'node_Shape_63' (Shape) fails ONNX's schema check: it has 0 inputs where Shape-19 takes 1",
    ),
    (
        "MatMul lost input 0",
        lambda t: ["inspect", _lost_input(t, "gpt2.onnx", "MatMul", 0), "--arch", "wse2"],
        "node 'node_matmul' (MatMul) fails ONNX's schema check: it has 1 input where MatMul-13 takes 2",
    ),
    (
        "GatherND left with one input",
        lambda t: ["inspect", _lost_input(t, "gpt2.onnx", "GatherND", 1), "--arch", "wse2"],
        "(GatherND) fails ONNX's schema check: it has 1 input where GatherND-13 takes 2",
    ),
    (
        # two inputs left (weight, bias): ONNX's arity check passes, inference contradicts the value_info
        "Conv lost its data input",
        lambda t: ["inspect", _lost_input(t, "resnet50.onnx", "Conv", 0), "--arch", "wse2"],
        "tensor 'conv2d' is declared [1, 64, 112, 112]",
    ),
    (
        # ... and without value_info the cost model names the operands it cannot read
        "Conv lost its data input, no value_info",
        lambda t: ["inspect", _lost_input(t, "resnet50.onnx", "Conv", 0, keep_value_info=False), "--arch", "wse2"],
        "node 'node_conv2d' (Conv): its operand shapes (inner.resnet.embedder.embedder.convolution.weight [64, 3, 7, 7], "
        "val_5 [64]) do not fit Conv",
    ),
    ("empty op type", lambda t: ["inspect", _empty_op_type(t), "--arch", "tiny"], "has an empty op type"),
    (
        # ONNX's inference would allocate 2^40 outputs first (std::bad_alloc; found by the fuzzer)
        "Split num_outputs 2^40",
        lambda t: ["inspect", _split_outputs(t, 2**40), "--arch", "wse2"],
        "has num_outputs 1,099,511,627,776 but 3 outputs",
    ),
    (
        "name not valid UTF-8",
        lambda t: ["inspect", _write(t, "utf8.onnx", mlp().SerializeToString().replace(b"Relu", b"R\xfflu")), "--arch", "tiny"],
        "not valid UTF-8",
    ),
    (
        "attribute of the wrong type",
        lambda t: ["inspect", _bad_attribute(t), "--arch", "tiny"],
        "node 'g' (Gemm) fails ONNX's schema check: Mismatched attribute type",
    ),
    ("arch YAML empty", lambda t: ["inspect", ATTN, "--arch", _write(t, "a.yaml", "")], "empty"),
    (
        "arch misspelled field",
        lambda t: ["inspect", ATTN, "--arch", "tiny", "--set", "core.sram_byte=4"],
        "did you mean 'sram_bytes'",
    ),
    ("arch negative", lambda t: ["inspect", ATTN, "--arch", "tiny", "--set", "core.macs_per_cycle=-2"], "core.macs_per_cycle"),
    (
        "arch non-numeric",
        lambda t: ["inspect", ATTN, "--arch", "tiny", "--set", "noc.link_bytes_per_cycle=fast"],
        "noc.link_bytes_per_cycle",
    ),
    (
        "arch inconsistent",
        lambda t: ["inspect", ATTN, "--arch", "tiny", "--set", "core.sram_reserve_bytes=1MiB"],
        "must be smaller",
    ),
    ("arch not YAML", lambda t: ["inspect", ATTN, "--arch", _write(t, "b.yaml", "core: [1,\n")], "not valid YAML"),
    (
        "arch duplicate field",
        lambda t: ["inspect", ATTN, "--arch", _arch_with(t, "d.yaml", "  sram_bytes: 96KiB\n")],
        "line 13: key 'sram_bytes' is given twice (first on line 10)",
    ),
    (
        "arch duplicate section",
        lambda t: ["inspect", ATTN, "--arch", _arch_with(t, "n.yaml", "noc: {link_bytes_per_cycle: 8, hop_latency_cycles: 1}\n")],
        "line 17: key 'noc' is given twice (first on line 13)",
    ),
    (
        "suite duplicate field",
        lambda t: ["bench", _suite_with_duplicate(t), "--out", str(t / "out")],
        "line 6: key 'arch' is given twice (first on line 5)",
    ),
    (
        "constraints nested 20,000 deep",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _nested(t, "deep.yaml", "- grid: ")],
        "deep.yaml: line 1: lists and mappings nested more than 64 levels deep",
    ),
    (
        "arch YAML nested 20,000 deep",
        lambda t: ["inspect", ATTN, "--arch", _nested(t, "deep-arch.yaml", "name: deep\ncore: ")],
        "deep-arch.yaml: line 2: lists and mappings nested more than 64 levels deep",
    ),
    (
        "suite nested 20,000 deep",
        lambda t: ["bench", _nested(t, "deep-suite.yaml", "name: deep\ninstances: "), "--out", str(t / "out")],
        "deep-suite.yaml: line 2: lists and mappings nested more than 64 levels deep",
    ),
    (
        "aliases of aliases: 100 million values as a keep-out",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _alias_rules(t, 8, "keep-out")],
        "line 1: alias *a2 stands for 1,111 values; the aliases of this file would expand to more than 10,000 values",
    ),
    (
        "aliases of aliases: 100,000 values as a grid rule's kernels",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _alias_rules(t, 5, "grid")],
        "would expand to more than 10,000 values in all",
    ),
    (
        "a recursive alias",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _write(t, "rec.yaml", "- keep-out: &a {rows: *a}\n")],
        "rec.yaml: line 1: alias *a is inside the value it names (a recursive alias)",
    ),
    (
        "a 1,000-value area quoted as an excerpt",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _write(t, "big.yaml", f"- keep-out: {list(range(1000))}\n")],
        "keep-out takes an area {rows: [FIRST, LAST], cols: [FIRST, LAST]}, got [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...]",
    ),
    # messages speak the user's words: the option typed, the rule as written, digits as shown
    ("--requests 0", lambda t: ["solve", MLP, "--arch", "tiny", "--requests", "0"], "error: --requests 0: Input should be"),
    (
        "--recompute-segment 0",
        lambda t: ["solve", MLP, "--arch", "tiny", "--train", "--recompute-segment", "0"],
        "error: --recompute-segment 0: Input should be",
    ),
    (
        "--train-batch 0",
        lambda t: ["solve", MLP, "--arch", "tiny", "--train", "--train-batch", "0"],
        "error: --train-batch 0: Input should be",
    ),
    (
        "shape 0x8 (YAML's hexadecimal 8)",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _write(t, "s.yaml", "- grid: fc1\n  shape: 0x8\n")],
        "s.yaml line 1: shape takes RxC (rows x cols, each at least 1, e.g. 24x32), got '0x8'",
    ),
    (
        "shape with a superscript digit",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _write(t, "s2.yaml", "- grid: fc1\n  shape: ²x8\n")],
        "s2.yaml line 1: shape takes RxC (rows x cols, each at least 1, e.g. 24x32), got '²x8'",
    ),
    (
        "--input-shape in Arabic-Indic digits",
        lambda t: ["solve", str(TINY / "mlp_dynamic.onnx"), "--arch", "tiny", "--input-shape", "x=٣x64"],
        "--input-shape 'x=٣x64': '٣x64' is not a list of sizes; write them in ASCII digits",
    ),
    (
        "--dim in Arabic-Indic digits",
        lambda t: ["solve", str(TINY / "mlp_dynamic.onnx"), "--arch", "tiny", "--dim", "batch=٣"],
        "--dim 'batch=٣': '٣' is not an integer in ASCII digits",
    ),
    (
        "--context in Arabic-Indic digits",
        lambda t: ["solve", str(TINY / "llm_decode.onnx"), "--arch", "tiny", "--context", "٣"],
        "Invalid value for '--context': '٣' is not an integer in ASCII digits",
    ),
    (  # Python converts at most 4,300 digits: PyYAML's ValueError was an internal error
        "a 5,000-digit number in a constraints file",
        lambda t: ["solve", MLP, "--arch", "tiny", "--constraints", _write(t, "n.yaml", f"- grid: fc1\n  rows: {'1' * 5000}\n")],
        "n.yaml: line 2: a number of 5,000 characters; no field takes one that long",
    ),
    (
        "a 5,000-digit --set value",
        lambda t: ["inspect", ATTN, "--arch", "tiny", "--set", f"core.sram_bytes={'1' * 5000}"],
        "--set core.sram_bytes: line 1: a number of 5,000 characters",
    ),
    (
        "an arch field named with 100,000 characters",
        lambda t: [
            "inspect",
            ATTN,
            "--arch",
            _arch_with(t, "long.yaml", f"? {'z' * 100_000}\n: 1\n"),
        ],  # an explicit key: any length
        "long.yaml: unknown field 'zzzzzzzzzz",
    ),
    ("unknown preset", lambda t: ["inspect", ATTN, "--arch", "wse9"], "presets: tiny, wse2, wse3"),
    ("bad --dim", lambda t: ["inspect", ATTN, "--dim", "seq:5"], "NAME=VALUE"),
    ("bad --dim value", lambda t: ["inspect", ATTN, "--dim", "seq=-5"], "positive"),
    ("bad --set", lambda t: ["inspect", ATTN, "--set", "core.sram_bytes"], "FIELD=VALUE"),
    ("unwritable output", lambda t: ["solve", ATTN, "--arch", "tiny", "-o", str(t / "no" / "p.json")], "does not exist"),
    ("unknown solver", lambda t: ["solve", ATTN, "--arch", "tiny", "--solver", "gurobi"], "choose one of"),
    ("bad --wafers", lambda t: ["solve", ATTN, "--arch", "tiny", "--wafers", "many"], "--wafers"),
    ("plan not JSON", lambda t: ["verify", _write(t, "p.json", "{ truncated")], "not valid JSON"),
    (  # the value was quoted whole: a 5,082-character line (found by tests/fuzz_inputs.py)
        "--batch of 5,000 characters",
        lambda t: ["solve", str(TINY / "llm_decode.onnx"), "--arch", "tiny", "--batch", "S" * 5000],
        "Invalid value for '--batch': 'SSSSSSSSSS",
    ),
    ("an option named with 5,000 characters", lambda t: ["solve", MLP, "--arch", "tiny", "--" + "z" * 5000], "characters cut"),
    (  # Dataflow('x') raised a ValueError: an internal error (found by tests/fuzz_inputs.py)
        "--from-plan with an unknown dataflow",
        lambda t: ["solve", MLP, "--arch", "tiny", "--from-plan", _plan_edited(t, _unknown_dataflow)],
        "edited.json: kernel fc1: dataflow '$' is not one of ws, os",
    ),
    (  # Python's JSON reader recursed once per level: a RecursionError, exit 70 (found by tests/fuzz_inputs.py)
        "plan nested 100,000 deep",
        lambda t: ["verify", _write(t, "deep.json", _deep_json(100_000))],
        "deep.json: JSON nested too deep for a plan",
    ),
    (
        "--from-plan nested 100,000 deep",
        lambda t: ["solve", MLP, "--arch", "tiny", "--from-plan", _write(t, "deep.json", '{"a": ' + _deep_json(100_000) + "}")],
        "deep.json: JSON nested too deep for a plan",
    ),
    (
        "config.json nested 100,000 deep",
        lambda t: ["export-llm", _write(t, "config.json", '{"model_type": ' + _deep_json(100_000) + "}"), "--out", str(t)],
        "config.json: JSON nested too deep for a config",
    ),
]


@pytest.mark.parametrize(("label", "args", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(
    label: str, args: Callable[[Path], list[str]], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = args(tmp_path)
    start = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0, label
    assert len(err) == 1 and err[0].startswith("wsealloc: error: "), err
    assert needle in err[0], err[0]
    assert "Traceback" not in err[0] and elapsed < 20
    assert len(err[0]) <= 1200, f"a {len(err[0]):,}-character line"  # values are quoted as excerpts


GPT2 = str(ROOT / "models" / "gpt2.onnx")
PRESET_NAMES = "tiny, wse2, wse3, wse2-measured, wse3-measured"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # each read the model's bytes as UTF-8 and said "cannot read ('utf-8' codec can't decode byte 0x99 ...)"
        (["verify", GPT2], f"{GPT2}: looks like an ONNX model, not a plan JSON; give the plan written by wsealloc solve -o"),
        (
            ["solve", MLP, "--arch", "tiny", "--from-plan", GPT2, "--no-place"],
            f"{GPT2}: looks like an ONNX model, not a plan JSON; give the plan written by wsealloc solve -o",
        ),
        (
            ["solve", GPT2, "--arch", GPT2, "--no-place"],
            f"{GPT2}: looks like an ONNX model, not an architecture YAML; give --arch a preset ({PRESET_NAMES}) "
            "or an arch YAML (start from wsealloc arch show wse2)",
        ),
        (
            ["solve", MLP, "--arch", "tiny", "--constraints", GPT2, "--no-place"],
            f"{GPT2}: looks like an ONNX model, not a constraints YAML; --constraints takes a YAML file (docs/constraints.md)",
        ),
        # the tiny MLP is weightless, valid UTF-8 throughout: its ir_version tag (0x08) names it all the same
        (["verify", MLP], f"{MLP}: looks like an ONNX model, not a plan JSON; give the plan written by wsealloc solve -o"),
    ],
)
def test_a_model_where_a_plan_or_yaml_is_expected_is_named_as_one(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err == f"wsealloc: error: {message}\n"


def test_a_picture_or_other_bytes_where_a_plan_is_expected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = _write(tmp_path, "f.png", b"\x89PNG\r\n\x1a\n" + bytes(64))  # (solve --floorplan f.png writes one)
    assert main(["verify", png]) == 2
    assert "looks like a PNG image, not a plan JSON" in capsys.readouterr().err
    noise = _write(tmp_path, "p.json", b"{\xff\xfe")
    assert main(["verify", noise]) == 2
    assert "looks like a binary file, not a plan JSON" in capsys.readouterr().err


MEMORY_LIMIT = 3 * 2**30  # address space of the child: a size sized anyway runs out of it in seconds


def _limited_cli(argv: list[str]) -> tuple[int, str]:
    """``wsealloc ARGV`` in a child process limited to ``MEMORY_LIMIT`` of address space and 120 s:
    (exit code, stderr). A run that sizes what it should refuse ends in MemoryError, never in 24 GB."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "wsealloc.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,  # noqa: PLW1509 - the child sets its own limit before exec
        cwd=ROOT,
        env=env,
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (  # the key positions over 10^9 tokens grew past 24 GB in ONNX's data propagation
            ["models/tiny/llm_decode.onnx", "--arch", "tiny", "--objective", "latency", "--context", "1000000000"],
            2,
            "llm_decode.onnx: --context 1000000000 would need 238.4 GiB for the inputs of one pass (the KV cache: "
            "238.4 GiB in 4 input(s) like past_key_values.0.key [1, 2, 1000000000, 16]), more than 1,024 wafers of tiny "
            "hold (16.5 GiB of SRAM)",
        ),
        (
            ["models/tiny/llm_decode.onnx", "--arch", "tiny", "--objective", "latency", "--context", "2147483647"],
            2,
            "--context 2147483647 would need 512.0 GiB for the inputs of one pass (the KV cache: 512.0 GiB",
        ),
        (
            ["POSITIONS", "--arch", "tiny", "--input-shape", "x=2147483647x64", "--no-place"],
            2,
            "positions.onnx: --input-shape x=2147483647x64 would need 512.0 GiB for the inputs of one pass (the "
            "largest: input 'x' [2147483647, 64], 512.0 GiB), more than 1,024 wafers of tiny hold",
        ),
        # within what 1,024 wafers of wse2 hold: imported without materializing the positions (no data
        # propagation above 2^20, no Range folded into 2^31 values), then refused by the cost model
        (["POSITIONS", "--arch", "wse2", "--input-shape", "x=2147483647x64", "--no-place"], 3, "fit no grid on wse2"),
        (
            ["models/tiny/llm_decode.onnx", "--arch", "wse2", "--objective", "latency", "--context", "1000000000"],
            3,
            "fit no grid on wse2",
        ),
    ],
    ids=["context-1e9", "context-2^31-1", "input-shape-tiny", "input-shape-wse2", "context-1e9-wse2"],
)
def test_absurd_sizes_are_refused_before_they_are_sized(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    argv = ["solve", *(_positions(tmp_path) if a == "POSITIONS" else a for a in args)]
    got, err = _limited_cli(argv)
    lines = err.strip().splitlines()
    assert got == code and len(lines) == 1 and needle in lines[0], (got, err[-600:])


DECODE, PREFILL = str(TINY / "llm_decode.onnx"), str(TINY / "llm_prefill.onnx")
POOLS = ("--arch", "tiny", "--cluster", "2", "--output", "4", "--ttft", "1", "--tpot", "1", "--requests", "1")


def _bad_model(tmp: Path, kind: str) -> str:
    """A model path that is not a model: a typo, a Hugging Face config.json, the decode export cut short."""
    if kind == "missing":
        return str(tmp / "nope-decode.onnx")
    if kind == "config":
        return _write(tmp, "qwen3-8b.json", (ROOT / "models" / "configs" / "qwen3-8b.json").read_bytes())
    return _write(tmp, "trunc.onnx", Path(DECODE).read_bytes()[:2000])


# what the loader says of each (frontend/load.py): the file named, and the fix
LOADER_SAYS = {
    "missing": "nope-decode.onnx: no such file",
    "config": "qwen3-8b.json: a Hugging Face config.json, not an ONNX model: run `wsealloc export-llm",
    "truncated": "trunc.onnx: not a valid ONNX protobuf (truncated or corrupt",
}
SERVING_COMMANDS: dict[str, Callable[[str, Path], list[str]]] = {
    "solve": lambda m, t: ["solve", m, "--arch", "tiny", "--context", "8", "--objective", "latency"],
    "frontier": lambda m, t: ["frontier", m, "--arch", "tiny", "--context", "8", "--requests", "1", "--out", str(t / "o")],
    "inspect": lambda m, t: ["inspect", m, "--arch", "tiny", "--context", "8"],
    "sweep": lambda m, t: ["sweep", m, "--arch", "tiny", "--context", "8", "--set", "context=8,16", "--out", str(t / "o")],
    "compare": lambda m, t: ["compare", m, "--arch", "tiny", "--context", "8", "--objective", "latency"],
    "pools DECODE": lambda m, t: ["pools", m, PREFILL, *POOLS, "--out", str(t / "o")],
    "pools PREFILL": lambda m, t: ["pools", DECODE, m, *POOLS, "--out", str(t / "o")],
    "solve --prefill": lambda m, t: ["solve", DECODE, "--arch", "tiny", "--prompt", "16", "--generate", "2", "--prefill", m],
}


@pytest.mark.parametrize("kind", sorted(LOADER_SAYS))
@pytest.mark.parametrize("command", list(SERVING_COMMANDS))
def test_serving_commands_read_the_model_through_the_loader(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--context`` read the KV cache's dims with ``onnx.load`` before the loader's checks (a user pass,
    finding 4): a typo in the path, a config.json or a truncated file was an internal error, exit 70.
    Every command reads the file through ``load_model`` first: its one line, exit 2, before any solve."""
    model = _bad_model(tmp_path, kind)
    start = time.perf_counter()
    code = main(SERVING_COMMANDS[command](model, tmp_path))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, (code, err)
    # the two options that name a missing file word it themselves (--prefill, PREFILL.onnx)
    needle = "no such file" if kind == "missing" and command in ("pools PREFILL", "solve --prefill") else LOADER_SAYS[kind]
    assert needle in err[0] and Path(model).name in err[0], err[0]
    assert "internal error" not in err[0] and time.perf_counter() - start < 10


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
def test_a_hugging_face_config_says_to_run_export_llm(folder: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config.json (or the snapshot folder holding one) where an ONNX model is expected names the
    ``export-llm`` command that writes it, runnable as printed, and the file it writes (finding 4: "export
    with torch.onnx.export" pointed away from it)."""
    snapshot = tmp_path / "Qwen3-8B"
    snapshot.mkdir()
    config = _write(snapshot, "config.json", (ROOT / "models" / "configs" / "qwen3-8b.json").read_bytes())
    given = str(snapshot) if folder else config
    assert main(["inspect", given]) == 2
    err = capsys.readouterr().err.strip()
    assert f"run `wsealloc export-llm {given}` first" in err, err
    assert "writes Qwen3-8B-decode.onnx and Qwen3-8B-prefill.onnx" in err and "torch.onnx.export" not in err, err
    assert main(["export-llm", given, "--out", str(tmp_path)]) == 0  # the hint runs (--out: not into the cwd)
    assert (tmp_path / "Qwen3-8B-decode.onnx").is_file()


def test_a_decode_export_without_context_says_give_context(capsys: pytest.CaptureFixture[str]) -> None:
    """A decode export solved without ``--context`` (finding 12): one short line leading with ``--context``
    and ``--requests``, not the ``--input-shape`` of every cache input (3,000 characters on LLaMA-3 8B);
    ``inspect`` still lists the inputs and their shapes."""
    assert main(["solve", str(ROOT / "models" / "llama3-8b-decode.onnx"), "--arch", "wse3", "--objective", "latency"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and len(err[0]) < 250, err
    assert "a decode export" in err[0] and "give --context S" in err[0] and "--requests N" in err[0], err[0]
    assert "--input-shape" not in err[0] and "characters cut" not in err[0]
    assert main(["inspect", DECODE, "--arch", "tiny"]) == 2
    out = capsys.readouterr()
    assert "past_key_values.1.value" in out.out and "give --context S" in out.err
    # the batch alone left open: --batch
    assert main(["solve", DECODE, "--arch", "tiny", "--dim", "past_sequence_length=8"]) == 2
    assert "give --batch B for batch_size" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        (
            (PREFILL, DECODE),
            f"the arguments are DECODE.onnx then PREFILL.onnx: {PREFILL} is a prefill export and {DECODE} a decode",
        ),
        (
            (PREFILL, PREFILL),
            f"DECODE.onnx {PREFILL}: a prefill export (no past_key_values input); the arguments are DECODE.onnx",
        ),
        ((DECODE, DECODE), f"PREFILL.onnx {DECODE}: a decode export (past_key_values.* inputs); the arguments are DECODE.onnx"),
        ((str(TINY / "mlp.onnx"), PREFILL), "mlp.onnx: not an LLM export with a KV cache; the arguments are DECODE.onnx"),
    ],
    ids=["swapped", "two-prefills", "two-decodes", "no-cache"],
)
def test_pools_names_its_files_the_wrong_way_round(
    files: tuple[str, str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pools DECODE PREFILL`` with the files swapped said "give a prefill export with a KV cache" after
    solving every prefill plan (finding 12); both files are read first and the order is named."""
    start = time.perf_counter()
    assert main(["pools", *files, *POOLS, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert time.perf_counter() - start < 5
    assert not (tmp_path / "o").is_dir() or not any((tmp_path / "o").iterdir())  # no plan was solved


@pytest.mark.parametrize(
    ("requests", "needle"),
    [
        # the weights and caches alone exceed the wafer's SRAM: refused before the search for regions
        (
            "16",
            "its weights (228.4 KiB) and KV caches (19.5 MiB) need 19.8 MiB, more than the 16.5 MiB of usable SRAM one "
            "tiny wafer has (at least 2 wafers); use --wafers auto (or a shorter --context, fewer --requests)",
        ),
        # they fit, the regions' buffers do not: the search's own finding, with the same way out
        (
            "12",
            "no partition into regions fits the wafer: the fewest cores any takes are 448, the wafer has 384; use "
            "--wafers auto (or a shorter --context, fewer --requests)",
        ),
    ],
    ids=["sram", "regions"],
)
def test_a_model_larger_than_one_wafer_points_to_wafers_auto(
    requests: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Latency on one wafer of a model it cannot hold (finding 8: Llama-3.1-70B's decode searched 12 s,
    then said only that no partition fits): the message says ``--wafers auto`` (or a shorter context,
    fewer requests), and where the SRAM alone rules it out, before any search."""
    args = ["solve", DECODE, "--arch", "tiny", "--context", "5000", "--requests", requests, "--objective", "latency"]
    start = time.perf_counter()
    assert main([*args, "--no-place", "--time-limit", "20"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert time.perf_counter() - start < 10


def test_absent_external_data_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Planning needs no weights: a model whose external data file is missing solves."""
    m = mlp(d_in=128, d_hidden=512)
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").unlink()
    assert main(["solve", str(tmp_path / "ext.onnx"), "--arch", "tiny", "--no-place"]) == 0


def test_front_end_never_reads_weight_data(tmp_path: Path) -> None:
    """The external data 'file' is a directory: any attempt to read it would fail."""
    m = mlp(d_in=128, d_hidden=512)
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").unlink()
    (tmp_path / "ext.weights").mkdir()
    assert main(["inspect", str(tmp_path / "ext.onnx"), "--arch", "tiny", "--json"]) == 0


@pytest.mark.parametrize(
    ("knobs", "needle"),
    [
        ({"dims": {"batch": "8"}}, "expected a mapping of dim names to positive integers"),
        ({"dims": ["batch=4"]}, "expected a mapping of dim names to positive integers"),
        ({"arch": 5}, "expected a preset name"),
        ({"time_limit": "5"}, "--time-limit '5': Input should be a valid number"),
        ({"sets": "core.sram_bytes=96KiB"}, "expected a list of FIELD=VALUE strings"),
        ({"wafers": 2.5}, "or 'auto', got 2.5"),
    ],
)
def test_python_api_rejects_bad_arguments(tmp_path: Path, knobs: dict[str, object], needle: str) -> None:
    # the API is a boundary too: bad arguments are WseallocErrors naming the argument, never TypeErrors
    from wsealloc.api import solve
    from wsealloc.errors import UsageError

    model = save(mlp(batch="batch"), tmp_path / "m.onnx")
    kwargs: dict[str, object] = {"arch": "tiny", "dims": {"batch": 4}, "place": False, **knobs}
    with pytest.raises(UsageError, match=needle):
        solve(model, **kwargs)  # type: ignore[arg-type]


def test_python_api_applies_sets_to_an_arch_object(tmp_path: Path) -> None:
    from wsealloc.api import solve
    from wsealloc.arch import load_arch

    model = save(mlp(), tmp_path / "m.onnx")
    by_name = solve(model, "tiny", sets=["core.macs_per_cycle=8"], place=False)
    by_object = solve(model, load_arch("tiny"), sets=["core.macs_per_cycle=8"], place=False)
    assert by_object.plan.objective.bottleneck_cycles == by_name.plan.objective.bottleneck_cycles
    assert by_name.plan.objective.bottleneck_cycles < solve(model, "tiny", place=False).plan.objective.bottleneck_cycles


def test_inspect_summary_of_kernels_fitting_no_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # inspect is informational (exit 0), but its summary agrees with its table: no "min cores 0"
    assert main(["inspect", _absurd(tmp_path), "--arch", "wse2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 of 1 kernels fit no grid (min cores: none); fits one wafer: no" in out
    assert "min cores 0" not in out


def test_a_config_with_a_byte_order_mark_and_files_onnx_would_read_as_text_are_clean_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config.json an editor saved with a byte-order mark was an internal error (onnx parsed it as JSON
    by its suffix and raised a ParseError no branch named); so was a short binary file named .textproto.
    Now the config names export-llm, which reads it, and the other is an ONNX error (a review finding)."""
    bom = _write(tmp_path, "config.json", b"\xef\xbb\xbf" + (ROOT / "models" / "configs" / "qwen3-8b.json").read_bytes())
    assert main(["inspect", bom]) == 2
    assert "a Hugging Face config.json, not an ONNX model: run `wsealloc export-llm" in capsys.readouterr().err
    assert main(["export-llm", bom, "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("*-decode.onnx"))  # (named after the folder holding config.json)
    odd = _write(tmp_path, "t.textproto", b"\x08\x07\x12\x01x")
    assert main(["inspect", odd]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "t.textproto" in err
