"""Property tests over random DAGs and random valid archs: every plan passes `wsealloc verify`,
solver <= greedy, cpsat == bisect == pulp, more resources never hurt, plans round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from wsealloc.api import solve
from wsealloc.arch import Arch, load_arch
from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions
from wsealloc.frontend.sources import OnnxSource
from wsealloc.pipeline import build_costs
from wsealloc.plan.io import read_plan
from wsealloc.plan.verify import verify_plan
from wsealloc.problem import build_problem
from wsealloc.solvers import SolveOptions, Status, get_solver


@st.composite
def random_models(draw: st.DrawFn) -> onnx.ModelProto:
    """A random DAG of MatMul / Add (residual) / Relu / Gelu / Softmax / LayerNorm on [B, d] tensors."""
    batch = draw(st.integers(1, 16))
    d0 = draw(st.sampled_from([4, 8, 16, 32]))
    tensors: list[tuple[str, int]] = [("x", d0)]
    nodes, inits = [], []
    for i in range(draw(st.integers(1, 8))):
        name, d = draw(st.sampled_from(tensors))
        op = draw(st.sampled_from(["MatMul", "MatMul", "Add", "Relu", "Gelu", "Softmax", "LayerNormalization"]))
        out = f"t{i}"
        if op == "MatMul":
            d_out = draw(st.sampled_from([4, 8, 16, 32, 64]))
            inits.append(numpy_helper.from_array(np.zeros((d, d_out), np.float32), f"w{i}"))
            nodes.append(helper.make_node("MatMul", [name, f"w{i}"], [out], name=f"mm{i}"))
            d = d_out
        elif op == "Add":
            same = [t for t in tensors if t[1] == d]
            other, _ = draw(st.sampled_from(same))
            nodes.append(helper.make_node("Add", [name, other], [out], name=f"add{i}"))
        elif op == "LayerNormalization":
            inits += [
                numpy_helper.from_array(np.ones(d, np.float32), f"g{i}"),
                numpy_helper.from_array(np.zeros(d, np.float32), f"b{i}"),
            ]
            nodes.append(helper.make_node(op, [name, f"g{i}", f"b{i}"], [out], name=f"ln{i}", axis=-1))
        else:
            nodes.append(helper.make_node(op, [name], [out], name=f"{op.lower()}{i}"))
        tensors.append((out, d))
    last, d_last = tensors[-1]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d0])
    y = helper.make_tensor_value_info(last, TensorProto.FLOAT, [batch, d_last])
    graph = helper.make_graph(
        nodes or [helper.make_node("Relu", ["x"], ["t0"], name="relu0")],
        "g",
        [x],
        [y if nodes else helper.make_tensor_value_info("t0", TensorProto.FLOAT, [batch, d0])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@st.composite
def random_archs(draw: st.DrawFn) -> list[str]:
    """``--set`` overrides turning the tiny preset into a random valid machine."""
    return [
        f"wafer.dies.rows={draw(st.integers(1, 2))}",
        f"wafer.dies.cols={draw(st.integers(1, 2))}",
        f"wafer.die_cores.rows={draw(st.integers(3, 10))}",
        f"wafer.die_cores.cols={draw(st.integers(3, 10))}",
        f"core.sram_bytes={draw(st.sampled_from([16, 24, 48, 96]))}KiB",
        f"core.macs_per_cycle={draw(st.integers(1, 8))}",
        f"noc.link_bytes_per_cycle={draw(st.sampled_from([1, 2, 4, 8]))}",
    ]


def _save(model: onnx.ModelProto, tmp: Path) -> Path:
    path = tmp / "m.onnx"
    onnx.save(model, str(path))
    return path


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(random_models(), random_archs())
def test_every_plan_verifies_and_beats_greedy(tmp_path: Path, model: onnx.ModelProto, sets: list[str]) -> None:
    path = _save(model, tmp_path)
    out = tmp_path / "plan.json"
    outcome = solve(path, "tiny", sets=sets, output=out, place=False)
    report = verify_plan(out)
    assert report.ok, report.violations
    obj = outcome.plan.objective
    assert obj.status == "OPTIMAL" and obj.bottleneck_cycles == obj.lower_bound_cycles
    assert outcome.baseline.objective is not None and obj.bottleneck_cycles <= outcome.baseline.objective
    # the document round-trips
    assert json.loads(read_plan(out).to_json()) == json.loads(out.read_text())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_models(), random_archs())
def test_placed_plans_verify(tmp_path: Path, model: onnx.ModelProto, sets: list[str]) -> None:
    path = _save(model, tmp_path)
    out = tmp_path / "plan.json"
    solve(path, "tiny", sets=sets, output=out, place=True, time_limit=2)
    report = verify_plan(out)
    assert report.ok, report.violations


def _backends_agree(tmp_path: Path, model: onnx.ModelProto, sets: list[str]) -> None:
    costs = build_costs(OnnxSource(path=str(_save(model, tmp_path))), load_arch("tiny", sets), CostOptions())
    problem = build_problem(costs)
    exact = get_solver("bisect")(problem, SolveOptions())
    for name in ("cpsat", "pulp"):
        r = get_solver(name)(problem, SolveOptions(deadline=Deadline.after(30)))  # no hint, no bound: proven on its own
        assert (r.status, r.objective) == (Status.OPTIMAL, exact.objective), name


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_models(), random_archs())
def test_backends_agree(tmp_path: Path, model: onnx.ModelProto, sets: list[str]) -> None:
    _backends_agree(tmp_path, model, sets)  # (every PuLP call is a CBC process: 12 cases here, 40 in the slow group)


@pytest.mark.slow  # 40 cases, a CBC process each (up to 11 s): run by .ci/run (pytest -m slow)
@SETTINGS
@given(random_models(), random_archs())
def test_backends_agree_on_more_cases(tmp_path: Path, model: onnx.ModelProto, sets: list[str]) -> None:
    _backends_agree(tmp_path, model, sets)


def _optimum(path: Path, arch: Arch) -> int:
    result = get_solver("bisect")(
        build_problem(build_costs(OnnxSource(path=str(path)), load_arch(arch), CostOptions())), SolveOptions()
    )
    assert result.objective is not None
    return result.objective


@SETTINGS
@given(
    random_models(),
    random_archs(),
    st.sampled_from(
        ["wafer.die_cores.rows", "wafer.die_cores.cols", "core.sram_bytes", "noc.link_bytes_per_cycle", "core.macs_per_cycle"]
    ),
)
def test_more_resources_never_worse(tmp_path: Path, model: onnx.ModelProto, sets: list[str], field: str) -> None:
    path = _save(model, tmp_path)
    base = load_arch("tiny", sets)
    section, _, name = field.rpartition(".")
    holder = base
    for part in section.split("."):
        holder = getattr(holder, part)
    current = getattr(holder, name)
    richer = load_arch("tiny", [*sets, f"{field}={current * 2}"])
    assert _optimum(path, richer) <= _optimum(path, base)
