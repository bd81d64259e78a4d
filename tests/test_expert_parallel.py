"""Expert parallelism (issue 35): a MoE layer's experts split into consecutive shards that a cut
between wafers may separate. The split table by hand (works, edges, the bytes a cut between shards
carries), a shard's busiest tile against brute force, the forms compared by the wafers strategy, and a
split plan replayed by ``verify``."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_experts import moe_model

from wsealloc.api import run
from wsealloc.arch import load_arch
from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions, Dataflow, ExpertsWork, grid_costs
from wsealloc.cost.experts import shard_work, tile_load
from wsealloc.cost.model import Routing
from wsealloc.errors import InfeasibleError
from wsealloc.frontend.importer import import_onnx
from wsealloc.graph.kernels import build_kernels
from wsealloc.opmodels import CostTable, build_cost_table
from wsealloc.opmodels.experts import shard_counts, split_experts
from wsealloc.plan.verify import verify_plan
from wsealloc.problem.sharing import INF, SharingProblem
from wsealloc.problem.stages import cut_bytes
from wsealloc.request import build_request
from wsealloc.solvers import columns
from wsealloc.solvers.base import Status
from wsealloc.solvers.share_wafers import _zone, plan_time, solve
from wsealloc.strategy import wafers


def _table(path: Path, **shape: int) -> CostTable:
    return build_cost_table(build_kernels(import_onnx(moe_model(path, **shape))), load_arch("tiny"), CostOptions())


def test_split_table_by_hand(tmp_path: Path) -> None:
    """4 experts, top 2, 2 tokens of 8, FFN 16, SwiGLU, the residual Add fused: split in two halves."""
    whole = _table(tmp_path / "m.onnx")
    split = split_experts(whole, 2)
    assert [kc.kernel.name for kc in split.kernels] == ["router", "moe/shard0", "moe/shard1"]
    w = whole.kernels[1].work
    s0, s1 = split.kernels[1].work, split.kernels[2].work
    assert isinstance(w, ExpertsWork) and isinstance(s0, ExpertsWork) and isinstance(s1, ExpertsWork)
    assert (s0.held, s1.held) == (2, 2)
    assert s0.weight_bytes == s1.weight_bytes == 2 * 768 == w.weight_bytes // 2  # each holds its two experts
    assert s0.macs == s1.macs == 1536 // 2  # half the picks each, expected
    # vector ops: the picks' activations and scales halved (4 x (16 x 6 + 8) / 2 = 208), each its share of
    # the combine (2 x 2 x 8 / 2 = 16); the first routes (6 ops x 4 logits x 2 tokens = 48), the second
    # adds the partial sum it receives (2 x 8 = 16) and applies the residual Add (16)
    assert (s0.vector_ops, s1.vector_ops, w.vector_ops) == (208 + 16 + 48, 208 + 16 + 16 + 16, 512)
    assert s0.vector_ops + s1.vector_ops == w.vector_ops + 2 * 8
    assert s0.out_bytes == 2 * 8 * 2 and s1.in_bytes == w.in_bytes + 2 * 8 * 2 and s1.out_bytes == w.out_bytes
    # the router's logits go to both shards (multicast), the partial sum (2 tokens x 8 x fp16) between them
    assert [(e.src, e.dst, e.tensor, e.nbytes) for e in split.edges] == [
        (0, 1, "probs", 16),
        (0, 2, "probs", 16),
        (1, 2, "moe/partial0", 32),
    ]
    assert [k.inputs for k in split.kgraph.kernels[1:]] == [("x", "probs"), ("x", "probs", "moe/partial0")]
    # a cut between the shards carries the logits again and the partial sum
    assert list(cut_bytes(split)) == [0, 16, 48, 0]
    assert list(cut_bytes(whole)) == [0, 16, 0]


def test_split_refuses_what_does_not_divide(tmp_path: Path) -> None:
    whole = _table(tmp_path / "m.onnx")
    assert shard_counts(whole, 4) == (2, 4)
    with pytest.raises(ValueError, match="do not split into it"):
        split_experts(whole, 3)
    with pytest.raises(ValueError, match="cannot be split again"):
        shard_work(shard_work(whole.kernels[1].work, 2, 0), 2, 1)  # type: ignore[arg-type]
    dense = split_experts(whole, 2)
    assert shard_counts(dense, 4) == ()  # no whole MoE layer is left


def _brute_shard(experts: int, held: int, per_tile: int, k: int, tokens: int) -> float:
    """E[the most (token, expert) picks on any tile of the shard holding experts 0..held-1]."""
    routings = list(itertools.product(itertools.combinations(range(experts), k), repeat=tokens))
    tiles = held // per_tile
    total = 0
    for r in routings:
        total += max(sum(1 for s in r for e in s if e < held and e // per_tile == t) for t in range(tiles))
    return total / len(routings)


@pytest.mark.parametrize(("experts", "held", "k"), [(4, 2, 2), (8, 4, 2), (8, 4, 3), (6, 3, 2), (12, 6, 4), (8, 2, 3)])
def test_shard_one_token_busiest_tile_is_exact(experts: int, held: int, k: int) -> None:
    for tiles in [t for t in range(1, held + 1) if held % t == 0]:
        load = tile_load(experts, k, 1, tiles, Routing.UNIFORM, held)
        assert load.pairs == pytest.approx(_brute_shard(experts, held, held // tiles, k, 1))
    # by hand: 4 experts, top 2, the shard of experts {0, 1} on one tile: 1 x 2 x 2/6 + ... = E[|S & {0,1}|] = 1
    assert tile_load(4, 2, 1, 1, Routing.UNIFORM, 2).pairs == pytest.approx(1.0)


@pytest.mark.parametrize(("experts", "held", "k", "tokens", "tiles"), [(4, 2, 2, 2, 2), (6, 3, 2, 2, 3), (8, 4, 2, 2, 2)])
def test_shard_several_tokens_bound(experts: int, held: int, k: int, tokens: int, tiles: int) -> None:
    """The union bound is never below the true busiest tile of the shard; the worst routing bounds it."""
    true = _brute_shard(experts, held, held // tiles, k, tokens)
    load = tile_load(experts, k, tokens, tiles, Routing.UNIFORM, held)
    worst = tile_load(experts, k, tokens, tiles, Routing.WORST, held)
    assert true <= load.pairs + 1e-9 <= worst.pairs + 2e-9
    assert worst.pairs == min(held // tiles, k) * tokens


def test_shard_is_never_faster_alone_than_whole_layer_on_same_grid(tmp_path: Path) -> None:
    """Two shards run in turn: on one grid their times add to at least the whole layer's (the busiest
    tile of each half against the busiest of all)."""
    whole = _table(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    split = split_experts(whole, 2)
    arch, opts = load_arch("tiny"), CostOptions()
    r, c = np.array([8, 16, 16]), np.array([8, 8, 24])
    one = grid_costs(whole.kernels[1].work, arch, opts, Dataflow.EXPERTS, r, c).latency
    halves = sum(grid_costs(kc.work, arch, opts, Dataflow.EXPERTS, r, c).latency for kc in split.kernels[1:])
    assert (halves >= one).all()


def test_split_plan_over_wafers_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer split (the fallback where the paired search cannot run; its rank forced first): the
    plan names the shards, records the shard count in its decision and each shard in the experts'
    record; verify replays it, and refuses a decision whose shard count the layers do not split into,
    or another count than the plan's kernels."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    monkeypatch.setattr(wafers, "_chosen", lambda *args: None)  # every layer split (the paired search's fallback)
    monkeypatch.setattr(wafers._Cut, "rank", lambda self, fewest, requests=1: (-self.shards, 0, self.bound))
    request = build_request(str(model), "tiny", objective="latency", wafers=2, place=False, time_limit=20)
    plan = run(request).plan
    assert plan.decision is not None and plan.decision.expert_shards == 2  # type: ignore[attr-defined]
    assert "experts split into 2 shards" in plan.decision.reason
    # the plan's bound is the least of the forms tried (the kept form's plans may be faster than the split's)
    kept = re.findall(r"experts kept whole: \d+ wafers, (?:optimum|at least) ([\d,]+) cycles", plan.decision.reason)
    assert kept and plan.objective.bound_cycles is not None
    assert plan.objective.bound_cycles <= int(kept[0].replace(",", ""))
    names = [k.name for k in plan.kernels]
    assert "moe/shard0" in names and "moe/shard1" in names and "moe" not in names
    moe = plan.objective.experts
    assert moe is not None and moe.layers == 1 and [lay.shard for lay in moe.layouts] == [(0, 2), (1, 2)]
    assert all(lay.tiles[0] * lay.tiles[1] * lay.experts_per_tile == 4 for lay in moe.layouts)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert verify_plan(path).ok
    data = json.loads(path.read_text())
    for shards, words in ((3, "do not split into it"), (4, "the search splits MoE layers into 2 shards")):
        data["decision"]["expert_shards"] = shards
        bad = tmp_path / f"bad{shards}.json"
        bad.write_text(json.dumps(data))
        report = verify_plan(bad)
        assert not report.ok and any(words in line for line in report.violations), report.violations


def test_with_requests_in_flight_the_bound_is_the_least_over_the_forms_each_paced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A split shard's slowest region is less than its whole layer's, so with 8 requests in flight a plan
    with every layer split can be faster than the kept form's paced bound (the kept plan stated 9,176
    with bound 8,696 while every layer split verified at 7,784, a review found). The bound is the least
    of each form's own paced bound, and no plan of either form lies below it; every layer split is
    tried beside the search's form (which splits a layer only at a cut) and chosen."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    options = {"objective": "latency", "wafers": 2, "place": False, "time_limit": 20, "requests": 8}
    chosen = run(build_request(str(model), "tiny", **options)).plan  # type: ignore[arg-type]
    monkeypatch.setattr(wafers, "_chosen", lambda *args: None)  # every layer split, ranked first
    monkeypatch.setattr(wafers._Cut, "rank", lambda self, fewest, requests=1: (-self.shards, 0, self.bound))
    split = run(build_request(str(model), "tiny", **options)).plan  # type: ignore[arg-type]
    assert split.decision is not None and split.decision.expert_shards == 2  # type: ignore[attr-defined]
    bound = chosen.objective.bound_cycles
    assert bound is not None and bound <= min(chosen.objective.value, split.objective.value)
    # with requests in flight every layer split is tried beside the search's form, and here it is faster
    assert getattr(chosen.decision, "expert_shards", None) == 2 and chosen.objective.value <= split.objective.value


def test_own_rectangles_landing_on_one_wafer_are_proven_paced(tmp_path: Path) -> None:
    """``--wafers auto --share none`` at 8 requests lands on one wafer: that part is the whole plan and
    the driver values it paced, so it is proven paced too (proven for a token's path alone, CP-SAT's
    paced optimum, 9,176, contradicted the path's bound, 1,223, and the solve ended in an error). The
    plan's bound is the least of that wafer's paced bound and the paced link of a plan on two."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    options = {"objective": "latency", "wafers": "auto", "share": "none", "place": False, "time_limit": 20}
    one = run(build_request(str(model), "tiny", **{**options, "requests": 1})).plan  # type: ignore[arg-type]
    paced = run(build_request(str(model), "tiny", **{**options, "requests": 8})).plan  # type: ignore[arg-type]
    assert paced.decision is not None and paced.decision.wafers == 1  # type: ignore[attr-defined]
    bound = paced.objective.bound_cycles
    assert bound is not None and one.objective.bound_cycles is not None
    assert 8 * one.objective.bound_cycles > bound > one.objective.bound_cycles  # more than the path, valid for two wafers
    assert bound <= paced.objective.value
    path = tmp_path / "plan.json"
    path.write_text(paced.to_json())
    assert verify_plan(path).ok


def test_one_wafer_splits_experts_as_a_rival_with_requests_in_flight(tmp_path: Path) -> None:
    """``--share auto`` on one wafer: with 8 requests in flight each waits its turn at the slowest region,
    and a layer's shard is half as slow; the split form is solved beside the layers kept whole and kept
    where faster (it stated 9,176 OPTIMAL with the layers whole, where every layer split gives 7,784).
    Both plans' bound is the least of both forms'; verify replays the split, and refuses a shard count
    the layers do not split into. With one request nothing is split (a shard's dispatch only adds)."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    options = {"objective": "latency", "place": False, "time_limit": 20}
    single = run(build_request(str(model), "tiny", **options)).plan  # type: ignore[arg-type]
    assert single.decision is not None and getattr(single.decision, "expert_shards", None) is None
    plan = run(build_request(str(model), "tiny", requests=8, **options)).plan  # type: ignore[arg-type]
    decision = plan.decision
    assert decision is not None and decision.strategy == "regions" and decision.expert_shards == 2  # type: ignore[attr-defined]
    assert plan.objective.value < 9_176  # the layers kept whole, on regions or own rectangles
    kept = re.findall(r"kept whole ([\d,]+)\)", decision.reason)
    assert kept and plan.objective.bound_cycles is not None
    assert plan.objective.bound_cycles <= min(plan.objective.value, int(kept[0].replace(",", "")))
    names = [k.name for k in plan.kernels]
    assert "moe/shard0" in names and "moe/shard1" in names
    # over wafers the same plan lands on one wafer, bounded by that wafer's split form, the kept form's
    # paced bound and two wafers' paced link (it stated 4,896, each form paced by its least slowest region)
    for count in ("auto", 2):
        over = run(build_request(str(model), "tiny", requests=8, wafers=count, **options)).plan  # type: ignore[arg-type]
        assert (over.objective.value, over.objective.bound_cycles) == (plan.objective.value, plan.objective.bound_cycles)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert verify_plan(path).ok
    data = json.loads(path.read_text())
    data["decision"]["expert_shards"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    report = verify_plan(bad)
    assert not report.ok and any("do not split into it" in line or "expert_shards" in line for line in report.violations)
    # one request in flight never splits: a split decision does not answer it
    data = json.loads(path.read_text())
    data["request"]["requests"] = 1
    bad.write_text(json.dumps(data))
    report = verify_plan(bad)
    assert not report.ok and any("expert_shards" in line for line in report.violations)


def test_one_wafer_keeps_experts_whole_under_the_users_rules(tmp_path: Path) -> None:
    """The user's rules name the kept table's kernels: the split form is not tried beside them (it was,
    and a ``together ... how: wafer`` rule ended the solve in a ValueError, a review found)."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    rules = tmp_path / "rules.yaml"
    rules.write_text("- together: [router, moe]\n  how: wafer\n")
    options = {"objective": "latency", "place": False, "time_limit": 10, "requests": 8, "constraints": str(rules)}
    request = build_request(str(model), "tiny", **options)  # type: ignore[arg-type]
    plan = run(request).plan
    assert plan.decision is not None and getattr(plan.decision, "expert_shards", None) is None
    assert plan.objective.bound_cycles is not None and plan.objective.bound_cycles <= plan.objective.value


def test_kept_plans_read_as_before(tmp_path: Path) -> None:
    """A plan whose layers stay whole writes no shard count and no shard in its record."""
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    plan = run(build_request(str(model), "tiny", objective="latency", wafers=2, place=False, time_limit=20)).plan
    data = json.loads(plan.to_json())
    assert "expert_shards" not in data["decision"]
    assert all("shard" not in lay for lay in data["objective"]["experts"]["layouts"])


def stacked_moe(path: Path, layers: int = 3, d: int = 256, f: int = 700, e: int = 8, k: int = 2) -> Path:
    """``layers`` blocks of router MatMul -> MoE (SwiGLU) -> residual Add, one decode token of d: each
    layer's experts (3 d f fp16 bytes each) about 0.6 of the tiny wafer's SRAM at f = 700."""
    inits = [numpy_helper.from_array(np.array([-1, e], dtype=np.int64), "probs_shape")]
    nodes = []
    x = "x"
    for i in range(layers):
        for name, shape in ((f"r{i}", (d, e)), (f"fc1_{i}", (e, f, d)), (f"fc2_{i}", (e, d, f)), (f"fc3_{i}", (e, f, d))):
            inits.append(numpy_helper.from_array(np.zeros(shape, dtype=np.float16), name))
        moe_in = [x, f"probs{i}", f"fc1_{i}", "", f"fc2_{i}", "", f"fc3_{i}", ""]
        nodes += [
            helper.make_node("MatMul", [x, f"r{i}"], [f"logits{i}"], name=f"router{i}"),
            helper.make_node("Reshape", [f"logits{i}", "probs_shape"], [f"probs{i}"], name=f"probs{i}"),
            helper.make_node(
                "MoE",
                moe_in,
                [f"moe{i}"],
                name=f"moe{i}",
                domain="com.microsoft",
                k=k,
                activation_type="silu",
                normalize_routing_weights=1,
            ),
            helper.make_node("Add", [x, f"moe{i}"], [f"y{i}"], name=f"res{i}"),
        ]
        x = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "stacked",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 1, d])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [1, 1, d])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_split_takes_fewer_wafers_under_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three MoE layers of about 0.6 wafer each: kept whole, no two share a wafer (three wafers); the
    search splits only the middle layer, where the cut falls, and holds them on two. ``--wafers auto``
    takes the two, proven optimal, the reason naming both forms; verify replays it. Every layer split
    (the fallback) is slower: the layers not cut run as two shards in turn."""
    model = stacked_moe(tmp_path / "m.onnx")
    plan = run(build_request(str(model), "tiny", objective="latency", wafers="auto", place=False, time_limit=30)).plan
    decision = plan.decision
    assert isinstance(decision, wafers.WafersDecision)
    assert (decision.expert_shards, decision.split_layers) == (2, (3,))  # router0 moe0 router1 [moe1] router2 moe2
    assert len(plan.stages) == 2 and plan.objective.status.value == "OPTIMAL"
    assert "experts kept whole: 3 wafers" in decision.reason
    assert "kept whole or split by the search (1 layer(s) split into 2 shards): 2 wafers" in decision.reason
    names = [k.name for k in plan.kernels]
    assert "moe0" in names and "moe2" in names and "moe1/shard0" in names
    assert [k.name for k in plan.kernels if k.stage == 1][0] == "moe1/shard1"  # the second wafer starts inside it
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert verify_plan(path).ok
    data = json.loads(path.read_text())
    for layers, words in (([0], "not the kernel indices of whole MoE layers"), ([1], "not in the model")):
        data["decision"]["split_layers"] = layers  # a router; another layer than the plan's kernels split
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data))
        report = verify_plan(bad)
        assert not report.ok and any(words in line for line in report.violations), report.violations
    # at most three wafers: the least time decides, and the split on two is faster than the whole on three
    three = run(build_request(str(model), "tiny", objective="latency", wafers=3, place=False, time_limit=30)).plan
    assert getattr(three.decision, "split_layers", None) == (3,) and three.objective.value == plan.objective.value
    # two wafers given: the layers kept whole do not fit them, the search's form does
    two = run(build_request(str(model), "tiny", objective="latency", wafers=2, place=False, time_limit=30)).plan
    assert getattr(two.decision, "split_layers", None) == (3,) and two.objective.value == plan.objective.value
    with pytest.raises(InfeasibleError, match="wafers"):  # one wafer: no form fits, the kept form's error
        run(build_request(str(model), "tiny", objective="latency", wafers=1, place=False, time_limit=30))
    monkeypatch.setattr(wafers, "_chosen", lambda *args: None)
    every = run(build_request(str(model), "tiny", objective="latency", wafers="auto", place=False, time_limit=30)).plan
    assert getattr(every.decision, "split_layers", 0) is None and every.objective.value > plan.objective.value


def _fits(sp: SharingProblem, i: int, j: int, g: int) -> bool:
    """Whether the run [i, j) fits grid g: one region, or a stacked column of at most ``pieces[g]``
    regions none of which begins inside the column where ``unbroken`` forbids (every split tried)."""
    k = int(sp.pieces[g]) if sp.pieces.size else 1
    if (sp.latency[i:j, g] >= INF).any():
        return False
    for count in range(1, min(k, j - i) + 1):
        for inner in itertools.combinations(range(i + 1, j), count - 1):
            if sp.unbroken is not None and any(sp.unbroken[p] for p in inner):
                continue
            bounds = (i, *inner, j)
            if all(
                sp.resident[a:b, g].sum() + sp.buffers[a:b, g].max() <= sp.usable_sram
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ):
                return True
    return False


def _brute_charged(sp: SharingProblem, links: np.ndarray, wafers: int) -> int | None:
    """Every cut into at most ``wafers`` wafers, every partition into runs, every grid per run, each
    run's time with its charges (``SharingProblem.run_latency``)."""
    n, cores = sp.n_kernels, sp.cores()
    best = None
    for count in range(1, wafers + 1):
        for inner in itertools.combinations(range(1, n), count - 1):
            cuts = (0, *inner, n)
            total = int(sum(links[c] for c in inner))
            for a, b in zip(cuts[:-1], cuts[1:], strict=True):
                wafer = None
                for breaks in itertools.product((False, True), repeat=b - a - 1):
                    bounds = [a] + [a + i + 1 for i, cut in enumerate(breaks) if cut] + [b]
                    runs = list(zip(bounds[:-1], bounds[1:], strict=True))
                    for grids in itertools.product(range(sp.shapes.shape[0]), repeat=len(runs)):
                        if sum(int(cores[g]) for g in grids) > sp.total_cores:
                            continue
                        if all(_fits(sp, i, j, g) for (i, j), g in zip(runs, grids, strict=True)):
                            lat = sum(sp.run_latency(i, j, g) for (i, j), g in zip(runs, grids, strict=True))
                            wafer = lat if wafer is None or lat < wafer else wafer
                if wafer is None:
                    total = -1
                    break
                total += wafer
            if total >= 0:
                best = total if best is None or total < best else best
    return best


@pytest.mark.parametrize("seed", range(20))
def test_charged_runs_and_unbroken_columns_equal_brute_force(seed: int) -> None:
    """The exact search over cuts and runs with charges at a run's ends and boundaries no region inside
    a stacked column may begin at (the paired problem's ingredients), forwards and in the programs run
    backwards from the ends: its optimum is brute force's."""
    rng = np.random.default_rng(500 + seed)
    n, wafers = int(rng.integers(3, 7)), int(rng.integers(1, 4))
    rows = 4
    shapes = np.array([(4, 1), (2, 1), (4, 2), (1, 2), (2, 3)])[: int(rng.integers(2, 6))]
    pieces = (rows // shapes[:, 0]).astype(np.int64)
    g_count = len(shapes)
    lat = rng.integers(5, 60, size=(n, g_count)).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, g_count)).astype(np.float64)
    buffers = rng.integers(0, 15, size=(n, g_count)).astype(np.float64)
    ends = np.where(rng.random((n, g_count)) < 0.4, rng.integers(1, 40, size=(n, g_count)), 0).astype(np.int64)
    unbroken = np.zeros(n + 1, dtype=bool)
    unbroken[1:n] = rng.random(n - 1) < 0.35
    total = int(rng.integers(rows, rows * 5 + 1))
    sp = SharingProblem(
        tuple(f"k{i}" for i in range(n)),
        shapes,
        lat,
        resident,
        buffers,
        70,
        total,
        pieces=pieces,
        wafer_rows=rows,
        ends=ends,
        unbroken=unbroken,
    )
    links = np.concatenate(([0], rng.integers(1, 25, size=n - 1), [0])).astype(np.int64)
    best = _brute_charged(sp, links, wafers)
    found = solve(sp, links, wafers, Deadline.after(30))
    if best is None:
        assert found.status is Status.INFEASIBLE, found.message
        return
    assert found.status is Status.OPTIMAL, found.message
    assert found.latency == best == plan_time(sp, links, found.cuts, found.runs, found.grids)
    assert sp.windows().tolist() == sp.windows_by_testing().tolist()


@pytest.mark.parametrize("seed", range(8))
def test_charged_repeating_layers_stay_exact(seed: int) -> None:
    """A head, three identical layers of a first shard (charged when a run ends on it) and a second
    (no region of a column begins before it), and a tail: the programs shared by the repeating
    layers' phases and those run backwards from the ends (where the charges swap sides) give brute
    force's optimum."""
    rng = np.random.default_rng(900 + seed)
    rows = 4
    shapes = np.array([(4, 1), (2, 1), (2, 2)])
    g_count = len(shapes)
    kinds = [rng.integers(5, 60, size=g_count) for _ in range(4)]
    order = [0, 1, 2, 1, 2, 1, 2, 3]
    lat = np.array([kinds[k] for k in order], dtype=np.int64)
    res_kinds = [rng.integers(1, 30, size=g_count).astype(np.float64) for _ in range(4)]
    resident = np.array([res_kinds[k] for k in order])
    charge = rng.integers(1, 40, size=g_count)
    ends = np.array([charge if k == 1 else np.zeros(g_count) for k in order], dtype=np.int64)
    unbroken = np.array([i < len(order) and order[i] == 2 for i in range(len(order) + 1)])
    total = int(rng.integers(rows * 2, rows * 6))
    sp = SharingProblem(
        tuple(f"k{i}" for i in range(len(order))), shapes, lat, resident, np.zeros_like(resident), 60, total,
        pieces=(rows // shapes[:, 0]).astype(np.int64), wafer_rows=rows, ends=ends, unbroken=unbroken,
    )  # fmt: skip
    assert _zone(sp).period == 2  # the layers repeat, charges and boundaries included
    links = np.concatenate(([0], rng.integers(1, 25, size=len(order) - 1), [0])).astype(np.int64)
    best = _brute_charged(sp, links, 3)
    found = solve(sp, links, 3, Deadline.after(60))
    if best is None:
        assert found.status is Status.INFEASIBLE, found.message
        return
    assert found.status is Status.OPTIMAL and found.latency == best, (found.message, found.latency, best)


@pytest.mark.parametrize("seed", range(40))
def test_a_program_with_large_charges_at_run_starts_is_exact(seed: int) -> None:
    """Charges at a run's first kernel (the reversed problems' ends) much larger than the latencies: a
    program's least time of the whole part is brute force's (the keys that keep starts apart in its
    Pareto fronts must exceed every run's time, charges included; seed 28 found it, review of issue 35)."""
    rng = np.random.default_rng(seed)
    n, rows = int(rng.integers(2, 6)), 4
    shapes = np.array([(4, 1), (4, 2), (4, 3)])[: int(rng.integers(2, 4))]
    g_count = len(shapes)
    lat = rng.integers(1, 10, size=(n, g_count)).astype(np.int64)
    resident = rng.integers(1, 30, size=(n, g_count)).astype(np.float64)
    starts = np.where(rng.random((n, g_count)) < 0.5, rng.integers(50, 500, size=(n, g_count)), 0).astype(np.int64)
    total = int(rng.integers(rows, rows * 4 + 1))
    sp = SharingProblem(
        tuple(f"k{i}" for i in range(n)), shapes, lat, resident, np.zeros_like(resident), 60, total,
        pieces=np.ones(g_count, dtype=np.int64), wafer_rows=rows, starts=starts,
    )  # fmt: skip
    units = columns.column_units(sp)
    assert units is not None
    found = columns.program(sp, units, Deadline.after(30))
    assert found is not None
    best = _brute_charged(sp, np.zeros(n + 1, dtype=np.int64), 1)
    got = int(found.least[n, units.budget])
    assert got == best if best is not None else got >= columns.NONE


def test_the_split_forms_are_not_tried_when_less_time_is_left_than_the_first_form_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A form costs about as long as the first one took to build, whatever its share of the time
    (Qwen3-235B: 5 s each, a 10 s limit took 27 s): with less time left, the forms in hand decide, and
    the plan (the layers kept whole, three wafers) still verifies. Its wall time counts the search, and
    its decision says the split form was not tried (a user's pass saw 14 wafers at 30 s and 13 at 120 s,
    the reason shown only with -v)."""
    import time

    model = stacked_moe(tmp_path / "m.onnx")
    real_cut, tried = wafers.LatencyOverWafers._cut, []

    def slow_cut(self, costs, request, family, shards, deadline, say, sharing=None):  # type: ignore[no-untyped-def]
        if shards == 0:
            time.sleep(1.5)  # the first form outlasts what is left of a 2 s limit
        return real_cut(self, costs, request, family, shards, deadline, say, sharing)

    monkeypatch.setattr(wafers.LatencyOverWafers, "_cut", slow_cut)
    monkeypatch.setattr(wafers.LatencyOverWafers, "_split", lambda *args: tried.append(args) or None)
    out = run(build_request(str(model), "tiny", objective="latency", wafers="auto", place=False, time_limit=2))
    decision = out.plan.decision
    assert isinstance(decision, wafers.WafersDecision) and decision.expert_shards is None and tried == []
    assert "split into 2 shards were not tried" in decision.reason and "--time-limit" in decision.reason
    assert len(out.plan.stages) == 3 and out.plan.objective.wall_s >= 1.5
    path = tmp_path / "plan.json"
    path.write_text(out.plan.to_json())
    assert verify_plan(path).ok


def test_the_fewest_wafers_of_a_moe_table_count_its_sram_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fewest_wafers`` (the fit check bench's frontier and pools skip plans by): where MoE layers may be
    split, a cut inside a layer may take fewer wafers than the kept layers' fewest-core regions, so only
    the SRAM counts; a table with none left to split is judged by its regions too."""
    whole = _table(tmp_path / "m.onnx")
    asked: list[int] = []
    real = wafers._fewest_fitting

    def spy(sp: SharingProblem, family: str, cores: int) -> int | None:
        asked.append(sp.n_kernels)
        return real(sp, family, cores)  # type: ignore[arg-type]

    monkeypatch.setattr(wafers, "_fewest_fitting", spy)
    assert wafers.fewest_wafers(whole, "stacked") == 1 and not asked
    assert wafers.fewest_wafers(split_experts(whole, 2), "stacked") == 1 and asked == [3]


def test_the_regions_kept_for_a_retry_carry_the_bound_over_both_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Own rectangles solved alone keep the regions for a retry (``Prepared.state``); the MoE layers
    split as a rival lower every part's bound to the least over both forms, the waiting regions' too (a
    review: a retry's regions stated 9,160 cycles with a split plan at 7,784 and the bound over both
    forms 7,760). The tiny MoE at 8 requests; its own rectangles forced alone and made to fail, the split
    too: the plan is the regions', bounded by 7,760."""
    from wsealloc import driver
    from wsealloc.errors import NoLayoutError
    from wsealloc.problem.objective import objective_named
    from wsealloc.request import build_request
    from wsealloc.strategy import regions
    from wsealloc.strategy.pipeline import wafer_part

    real_own = regions.own_rectangles

    def forced(costs, request, units, proven, deadline, say, known=None):  # type: ignore[no-untyped-def]
        lowered, _ = real_own(costs, request, units, proven, deadline, say, known)
        part = wafer_part(costs, objective_named(request.objective, request.requests))
        return lowered, regions.Own(regions.Part(part.table, part.bound, wider=True), True)

    real = driver.solve_prepared

    def failing(prepared, *args, **kwargs):  # type: ignore[no-untyped-def]
        if prepared.decision.runs == () or prepared.decision.expert_shards:
            raise NoLayoutError("injected: no layout")
        return real(prepared, *args, **kwargs)

    monkeypatch.setattr(regions, "own_rectangles", forced)
    monkeypatch.setattr(driver, "solve_prepared", failing)
    model = moe_model(tmp_path / "m.onnx", tokens=16, hidden=64, ffn=128, experts=8, k=2)
    plan = run(build_request(str(model), "tiny", objective="latency", place=False, time_limit=20, requests=8)).plan
    assert plan.decision.runs and not plan.decision.expert_shards  # type: ignore[attr-defined]
    assert plan.objective.bound_cycles == 7760 < plan.objective.value
