"""The catalogue of bad inputs: each gets one line on stderr naming the file/field/op and the fix, a
non-zero exit code, no traceback, within seconds. (A model with absent external data must work.)"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from build import mlp, reshape_chain, save
from onnx import TensorProto, helper

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


def _absurd(tmp: Path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [10**9, 10**9])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [10**9, 10**9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="huge")], "g", [x, w], [y])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp / "absurd.onnx")


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


Case = tuple[str, Callable[[Path], list[str]], str]
ATTN = str(TINY / "attention.onnx")
CASES: list[Case] = [
    ("missing path", lambda t: ["inspect", str(t / "nope.onnx")], "no such file"),
    ("a directory", lambda t: ["inspect", str(t)], "is a directory"),
    ("empty file", lambda t: ["inspect", _write(t, "e.onnx", b"")], "file is empty"),
    ("random bytes", lambda t: ["inspect", _write(t, "r.onnx", np.random.default_rng(1).bytes(5000))], "onnx"),
    ("truncated protobuf", lambda t: ["inspect", _truncated(t)], "re-export"),
    ("text named .onnx", lambda t: ["inspect", _write(t, "t.onnx", "graph { node { op_type: 'Relu' } }\n" * 5)], "text file"),
    ("opset newer than onnx", lambda t: ["inspect", _opset99(t)], "opset 99"),
    ("unknown element type", lambda t: ["inspect", _unknown_dtype(t)], "element type 29"),
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
    ("unknown preset", lambda t: ["inspect", ATTN, "--arch", "wse9"], "presets: tiny, wse2, wse3"),
    ("bad --dim", lambda t: ["inspect", ATTN, "--dim", "seq:5"], "NAME=VALUE"),
    ("bad --dim value", lambda t: ["inspect", ATTN, "--dim", "seq=-5"], "positive"),
    ("bad --set", lambda t: ["inspect", ATTN, "--set", "core.sram_bytes"], "FIELD=VALUE"),
    ("unwritable output", lambda t: ["solve", ATTN, "--arch", "tiny", "-o", str(t / "no" / "p.json")], "does not exist"),
    ("unknown solver", lambda t: ["solve", ATTN, "--arch", "tiny", "--solver", "gurobi"], "choose one of"),
    ("bad --wafers", lambda t: ["solve", ATTN, "--arch", "tiny", "--wafers", "many"], "--wafers"),
    ("plan not JSON", lambda t: ["verify", _write(t, "p.json", "{ truncated")], "not valid JSON"),
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
