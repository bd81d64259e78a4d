"""Mixture-of-experts layers (issue 35): the com.microsoft MoE / QMoE node read from ONNX files made
with onnx's helper, its work and SRAM by hand, the busiest tile against brute force, the plan's record
and verify, refusals of what cannot be costed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from wsealloc.api import run
from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, ExpertsWork, grid_costs, kernel_work
from wsealloc.cost.experts import experts_grid_costs, routing_stats, tile_load, tilings
from wsealloc.cost.model import Routing
from wsealloc.errors import InfeasibleError, UnsupportedOpError, UsageError
from wsealloc.frontend.importer import import_onnx
from wsealloc.graph.kernels import build_kernels
from wsealloc.graph.opclass import KernelKind
from wsealloc.plan.verify import verify_plan
from wsealloc.request import build_request

F16 = TensorProto.FLOAT16


def _weight(inits: list[onnx.TensorProto], name: str, *shape: int, dtype: int = F16) -> str:
    size = int(np.prod(shape)) * (2 if dtype == F16 else 1)
    inits.append(helper.make_tensor(name, dtype, shape, bytes(size), raw=True))
    return name


def moe_model(
    path: Path,
    *,
    tokens: int = 2,
    hidden: int = 8,
    ffn: int = 16,
    experts: int = 4,
    k: int = 2,
    layout: str = "new",
    quantized: bool = False,
    fused: bool = False,
) -> Path:
    """x [1, T, d] -> router MatMul -> Reshape [T, E] -> MoE (or QMoE) -> residual Add."""
    e, d, f = experts, hidden, ffn
    inits: list[onnx.TensorProto] = []
    _weight(inits, "router.weight", d, e)
    inits.append(numpy_helper.from_array(np.array([-1, e], dtype=np.int64), "probs_shape"))
    nodes = [
        helper.make_node("MatMul", ["x", "router.weight"], ["logits"], name="router"),
        helper.make_node("Reshape", ["logits", "probs_shape"], ["probs"], name="probs"),
    ]
    first = 2 * f if fused else f
    if quantized:  # 4 bits: two weights a byte, (experts, out, in / 2); fp16 scales per output column
        _weight(inits, "fc1", e, first, d // 2, dtype=TensorProto.UINT8)
        _weight(inits, "fc1s", e, first)
        _weight(inits, "fc2", e, d, f // 2, dtype=TensorProto.UINT8)
        _weight(inits, "fc2s", e, d)
        ins = ["x", "probs", "fc1", "fc1s", "", "fc2", "fc2s", ""]
        if not fused:
            _weight(inits, "fc3", e, f, d // 2, dtype=TensorProto.UINT8)
            _weight(inits, "fc3s", e, f)
            ins += ["fc3", "fc3s", ""]
        op, attrs = "QMoE", {"expert_weight_bits": 4}
    else:
        shapes = {"new": ((e, first, d), (e, d, f), (e, f, d)), "old": ((e, d, first), (e, f, d), (e, d, f))}[layout]
        _weight(inits, "fc1", *shapes[0])
        _weight(inits, "fc2", *shapes[1])
        ins = ["x", "probs", "fc1", "", "fc2", ""]
        if not fused:
            _weight(inits, "fc3", *shapes[2])
            ins += ["fc3", ""]
        op, attrs = "MoE", {"normalize_routing_weights": 1}
    activation = "swiglu" if fused else "silu"
    nodes.append(helper.make_node(op, ins, ["moe"], name="moe", domain="com.microsoft", k=k, activation_type=activation, **attrs))
    nodes.append(helper.make_node("Add", ["x", "moe"], ["y"], name="residual"))
    graph = helper.make_graph(
        nodes,
        "moe",
        [helper.make_tensor_value_info("x", F16, [1, tokens, d])],
        [helper.make_tensor_value_info("y", F16, [1, tokens, d])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def _work(path: Path, arch: str = "tiny", **options: object) -> ExpertsWork:
    graph = import_onnx(path)
    kg = build_kernels(graph)
    moe = next(k for k in kg.kernels if k.kind is KernelKind.EXPERTS)
    work = kernel_work(moe, graph, load_arch(arch), CostOptions.model_validate(options))
    assert isinstance(work, ExpertsWork)
    return work


def test_moe_node_read_by_hand(tmp_path: Path) -> None:
    """4 experts, top 2, 2 tokens of 8, FFN 16, SwiGLU with fc3: every number by hand."""
    work = _work(moe_model(tmp_path / "m.onnx"))
    assert (work.experts, work.top_k, work.tokens, work.hidden, work.expert_ffn, work.gated) == (4, 2, 2, 8, 16, True)
    assert work.macs == 2 * 2 * 3 * 8 * 16  # T k (gate, up, down) d f = 1,536
    assert work.expert_weight_bytes == 3 * 8 * 16 * 2  # 768 B of fp16 matrices per expert
    assert work.weight_bytes == 4 * 768
    assert work.in_bytes == 2 * 8 * 2 + 2 * 4 * 2  # the tokens and their router logits
    assert work.out_bytes == 2 * 8 * 2
    assert work.epilogue_ops == 2 * 8  # the residual Add fused after it
    at_work, per_expert = routing_stats(work)
    assert per_expert == pytest.approx(1.0)  # T k / E = 2 x 2 / 4
    assert at_work == pytest.approx(3.0)  # 4 (1 - (1 - 1/2)^2)


def test_both_weight_layouts_and_fused_swiglu_are_one_work(tmp_path: Path) -> None:
    new = _work(moe_model(tmp_path / "new.onnx"))
    old = _work(moe_model(tmp_path / "old.onnx", layout="old"))
    fused = _work(moe_model(tmp_path / "fused.onnx", fused=True))
    assert new == old
    assert (fused.macs, fused.weight_bytes, fused.gated) == (new.macs, new.weight_bytes, True)


def test_qmoe_weights_as_stored(tmp_path: Path) -> None:
    """4-bit weights: a quarter of the fp16 bytes, the scales beside them; the same MACs."""
    q = _work(moe_model(tmp_path / "q.onnx", quantized=True))
    dense = _work(moe_model(tmp_path / "d.onnx"))
    assert q.macs == dense.macs
    assert q.expert_weight_bytes == 3 * 8 * 16 // 2  # 192 B: two weights a byte
    assert q.expert_col_bytes == (16 + 8 + 16) * 2  # fp16 scales of fc1, fc2, fc3 per expert


def test_sram_of_tiles_by_hand(tmp_path: Path) -> None:
    """On 2 x 2 cores tiled 2 x 2, each core holds one expert: gate and up (8 x 32) and down (16 x 8)
    in fp16, 768 B; tiled 1 x 1, one core-sized tile holds all four experts."""
    work = _work(moe_model(tmp_path / "m.onnx"))
    arch, opts = load_arch("tiny"), CostOptions()
    one = experts_grid_costs(work, arch, opts, np.array([2]), np.array([2]), grid_costs, tiling=(2, 2))
    assert int(one.sram_parts().weights[0]) == 768
    four = experts_grid_costs(work, arch, opts, np.array([1]), np.array([1]), grid_costs, tiling=(1, 1))
    assert int(four.sram_parts().weights[0]) == 4 * 768
    # the best tiling is never slower than any one tiling
    best = grid_costs(work, arch, opts, Dataflow.EXPERTS, np.array([2]), np.array([2]))
    assert int(best.latency[0]) <= int(one.latency[0])


def _brute_one_token(experts: int, per_tile: int, k: int) -> float:
    picks = list(itertools.combinations(range(experts), k))
    return sum(max(sum(1 for e in s if e // per_tile == t) for t in range(experts // per_tile)) for s in picks) / len(picks)


@pytest.mark.parametrize(("experts", "k"), [(4, 2), (8, 2), (8, 3), (6, 4), (12, 3)])
def test_one_token_busiest_tile_is_exact(experts: int, k: int) -> None:
    for tiles in [t for t in range(1, experts + 1) if experts % t == 0]:
        load = tile_load(experts, k, 1, tiles, Routing.UNIFORM)
        assert load.pairs == pytest.approx(_brute_one_token(experts, experts // tiles, k))
    assert tile_load(4, 2, 1, 2, Routing.UNIFORM).pairs == pytest.approx(8 / 6)  # by hand: 2 of 6 pairs share a tile


@pytest.mark.parametrize(("experts", "k", "tokens", "tiles"), [(4, 2, 2, 2), (4, 1, 3, 4), (6, 2, 2, 3), (4, 2, 3, 4)])
def test_several_tokens_bound_the_busiest_tile(experts: int, k: int, tokens: int, tiles: int) -> None:
    """Brute force over every routing of a few tokens: the union bound is never below the true
    expected busiest tile (pairs it serves), and the worst routing bounds every routing."""
    per_tile = experts // tiles
    routings = list(itertools.product(itertools.combinations(range(experts), k), repeat=tokens))
    true = sum(max(sum(1 for s in r for e in s if e // per_tile == t) for t in range(tiles)) for r in routings) / len(routings)
    load = tile_load(experts, k, tokens, tiles, Routing.UNIFORM)
    worst = tile_load(experts, k, tokens, tiles, Routing.WORST)
    assert true <= load.pairs + 1e-9
    assert load.pairs <= worst.pairs + 1e-9
    assert worst.pairs == min(per_tile, k) * tokens
    assert load.active <= worst.active + 1e-9


def test_tilings_cover_every_divisor() -> None:
    assert sorted(ta * tb for ta, tb in tilings(4)) == [1, 2, 2, 4, 4, 4]
    assert all(128 % (ta * tb) == 0 for ta, tb in tilings(128))


def test_solve_record_and_verify(tmp_path: Path) -> None:
    """A plan of a MoE model: the experts' record (routing, tiles, worst routing) and verify, which
    rejects an edited record."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    out = run(build_request(str(model), "tiny", time_limit=10))
    moe = out.plan.objective.experts
    assert moe is not None and (moe.layers, moe.experts, moe.top_k, moe.routing) == (1, 8, 2, "uniform")
    assert moe.worst_routing_value_cycles >= out.plan.objective.value
    lay = moe.layouts[0]
    assert lay.tiles[0] * lay.tiles[1] * lay.experts_per_tile == 8
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(out.plan.to_json())
    assert verify_plan(plan_path).ok
    data = json.loads(plan_path.read_text())
    data["objective"]["experts"]["tokens_per_expert"] = 3.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    report = verify_plan(bad)
    assert not report.ok and any("experts.tokens_per_expert" in line for line in report.violations)


@pytest.mark.parametrize("requests", [1, 8])
def test_the_worst_routing_is_paced_as_the_plan_is(tmp_path: Path, requests: int) -> None:
    """With requests in flight the worst routing's value is each request's token under it, paced as the
    plan's value is: never below it (it was one pass plus the extra time, 0.31x the plan's with 8
    requests), and verify recomputes it."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    request = build_request(str(model), "tiny", objective="latency", requests=requests, place=False, time_limit=10)
    out = run(request)
    moe = out.plan.objective.experts
    assert moe is not None and moe.worst_routing_value_cycles >= out.plan.objective.value
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(out.plan.to_json())
    assert verify_plan(plan_path).ok


def test_worst_routing_plan(tmp_path: Path) -> None:
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    uniform = run(build_request(str(model), "tiny", time_limit=10, place=False))
    worst = run(build_request(str(model), "tiny", time_limit=10, place=False, routing="worst"))
    assert worst.plan.cost.routing is Routing.WORST
    assert worst.plan.objective.value >= uniform.plan.objective.value
    assert "routing" not in json.loads(uniform.plan.to_json())["cost"]  # the default is not written


def test_routing_given_for_a_model_without_experts_is_one_warning(tmp_path: Path) -> None:
    """``--routing`` reads the MoE layers alone: on a model without one it was dropped unsaid; now one
    warning line (the plan is the one asked for), and none where a MoE layer reads it or it is not given."""
    from conftest import run as cli

    mlp = str(Path(__file__).resolve().parents[1] / "models" / "tiny" / "mlp.onnx")
    fast = ("--arch", "tiny", "--no-place", "--time-limit", "5")
    for routing in ("worst", "uniform"):  # given at the default too: it does not apply either way
        result = cli("solve", mlp, *fast, "--routing", routing)
        assert result.returncode == 0 and result.stderr == (
            f"wsealloc: warning: --routing {routing} does not apply: {mlp} has no mixture-of-experts layer "
            "(a com.microsoft MoE / QMoE node)\n"
        )
    assert cli("solve", mlp, *fast).stderr == ""
    moe = str(moe_model(tmp_path / "m.onnx"))
    result = cli("solve", moe, *fast, "--routing", "worst")
    assert result.returncode == 0 and result.stderr == "" and "worst routing" in result.stdout


def test_seed_model_training_and_streaming_refuse_experts(tmp_path: Path) -> None:
    model = moe_model(tmp_path / "m.onnx")
    with pytest.raises(InfeasibleError, match="mixture-of-experts"):
        run(build_request(str(model), "wse2", mode="streaming", place=False))
    auto = run(build_request(str(model), "wse2", mode="auto", place=False))  # the pipeline, streaming refused
    assert auto.plan.objective.experts is not None
    with pytest.raises(UsageError, match="mixture-of-experts"):
        run(build_request(str(model), "tiny", cost="seed", place=False))
    with pytest.raises(UsageError, match="mixture-of-experts"):
        run(build_request(str(model), "tiny", train=True, place=False))


def test_dynamic_dispatch_is_refused_by_name(tmp_path: Path) -> None:
    """A torch-style dispatch: the experts' tokens taken with NonZero of TopK's indices."""
    d, e = 8, 4
    inits: list[onnx.TensorProto] = []
    _weight(inits, "router.weight", d, e)
    _weight(inits, "w0", d, d)
    inits += [
        numpy_helper.from_array(np.array([2], dtype=np.int64), "k"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "router.weight"], ["logits"], name="router"),
        helper.make_node("TopK", ["logits", "k"], ["top", "idx"], name="topk"),
        helper.make_node("Equal", ["idx", "zero"], ["mine"], name="mine"),
        helper.make_node("NonZero", ["mine"], ["where"], name="where"),
        helper.make_node("Gather", ["where", "zero"], ["rows"], name="rows", axis=0),
        helper.make_node("Gather", ["x", "rows"], ["picked"], name="picked", axis=0),
        helper.make_node("MatMul", ["picked", "w0"], ["y"], name="expert0"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F16, [4, d])],
        [helper.make_tensor_value_info("y", F16, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedOpError, match="mixture-of-experts dispatch with data-dependent shapes"):
        import_onnx(path)


def test_static_dispatch_costs_each_expert_on_its_tokens(tmp_path: Path) -> None:
    """The static form: each expert's tokens gathered by a fixed-size index set (capacity C), its
    matmul a kernel of its own over C tokens, scattered back: never charged for every token."""
    t, d, f, e, cap = 16, 8, 32, 4, 8
    inits: list[onnx.TensorProto] = []
    _weight(inits, "router.weight", d, e)
    inits.append(numpy_helper.from_array(np.array([cap], dtype=np.int64), "cap"))
    nodes = [
        helper.make_node("MatMul", ["x", "router.weight"], ["logits"], name="router"),
        helper.make_node("Transpose", ["logits"], ["by_expert"], name="by_expert", perm=[1, 0]),
        helper.make_node("TopK", ["by_expert", "cap"], ["gate", "idx"], name="choose"),  # [E, C]: each expert's tokens
    ]
    outs = []
    for i in range(e):
        _weight(inits, f"up{i}", d, f)
        _weight(inits, f"down{i}", f, d)
        inits.append(numpy_helper.from_array(np.array([i], dtype=np.int64), f"e{i}"))
        nodes += [
            helper.make_node("Gather", ["idx", f"e{i}"], [f"idx{i}"], name=f"idx{i}", axis=0),  # [1, C]
            helper.make_node("Gather", ["x", f"idx{i}"], [f"tok{i}"], name=f"tok{i}", axis=0),  # [1, C, d]
            helper.make_node("MatMul", [f"tok{i}", f"up{i}"], [f"h{i}"], name=f"up{i}"),
            helper.make_node("Relu", [f"h{i}"], [f"a{i}"], name=f"act{i}"),
            helper.make_node("MatMul", [f"a{i}", f"down{i}"], [f"o{i}"], name=f"down{i}"),
        ]
        outs.append(f"o{i}")
    nodes.append(helper.make_node("Concat", outs, ["y"], name="combine", axis=0))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F16, [t, d])],
        [helper.make_tensor_value_info("y", F16, [e, cap, d])],
        initializer=inits,
    )
    path = tmp_path / "static.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    kg = build_kernels(import_onnx(path))
    arch = load_arch("tiny")
    macs = {k.name: kernel_work(k, kg.ops, arch, CostOptions()).macs for k in kg.kernels}
    for i in range(e):
        assert macs[f"up{i}"] == cap * d * f  # C tokens, not all T
        assert macs[f"down{i}"] == cap * f * d
    assert sum(macs.values()) == t * d * e + e * 2 * cap * d * f  # the router, then C tokens per expert


@settings(max_examples=60, deadline=None)
@given(
    experts=st.sampled_from([2, 4, 6, 8, 12, 16, 32, 128]),
    k=st.integers(1, 8),
    tokens=st.integers(1, 64),
    data=st.data(),
)
def test_busiest_tile_properties(experts: int, k: int, tokens: int, data: st.DataObject) -> None:
    """Uniform never exceeds the worst routing; more tokens never make the busiest tile lighter; a
    tile never serves more picks than its experts can take, nor runs more experts than it holds."""
    k = min(k, experts)
    tiles = data.draw(st.sampled_from([t for t in range(1, experts + 1) if experts % t == 0]))
    m = experts // tiles
    load = tile_load(experts, k, tokens, tiles, Routing.UNIFORM)
    worst = tile_load(experts, k, tokens, tiles, Routing.WORST)
    more = tile_load(experts, k, tokens + 1, tiles, Routing.UNIFORM)
    assert load.pairs <= worst.pairs + 1e-9 and load.active <= worst.active + 1e-9
    assert load.pairs <= min(m, k) * tokens + 1e-9 and load.active <= m + 1e-9
    assert more.pairs >= load.pairs - 1e-9
    assert load.pairs >= tokens * k / tiles - 1e-9  # the busiest tile serves at least the average


@pytest.mark.slow
def test_zoo_mixtral_over_wafers_verified(tmp_path: Path) -> None:
    """The zoo's Mixtral-8x7B decode on the fewest wse3-measured wafers (three), one token's time
    proven over every cut, its experts' record in the plan, verified (docs/benchmarks.md: 2,515 tokens/s)."""
    root = Path(__file__).resolve().parents[1]
    request = build_request(
        str(root / "models" / "mixtral-8x7b-decode.onnx"),
        "wse3-measured",
        objective="latency",
        context=4096,
        wafers="auto",
        place=False,
        time_limit=120,
    )
    out = run(request)
    plan = out.plan
    assert len(plan.stages) == 3
    moe = plan.objective.experts
    assert moe is not None and (moe.layers, moe.experts, moe.top_k) == (32, 8, 2)
    assert plan.objective.gap is not None and plan.objective.gap <= 0.01
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert verify_plan(path).ok
