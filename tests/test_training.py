"""Training in the layer pipeline (``--train``; cost.training): the backward's MACs against closed
forms, the stash's samples in flight per depth, recomputation, the optimizer's state bytes, the
co-located rectangle in the verifier, and what is refused."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS, Result, run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_zoo import decoder_macs, resnet50_macs, vit_b16_macs

import wsealloc.api as ws
from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, TrainingWork, grid_costs
from wsealloc.cost.model import CostModelName, Optimizer, Recompute, TrainingOptions
from wsealloc.cost.training import in_flight, segment_starts
from wsealloc.errors import InfeasibleError, UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import pareto_frontier
from wsealloc.opmodels.recompute import choose as choose_recompute
from wsealloc.opmodels.recompute import fix as fix_recompute
from wsealloc.opmodels.recompute import flag_table, segment_ways
from wsealloc.opmodels.table import pipeline_shape
from wsealloc.pipeline import build_costs, over_wafers
from wsealloc.plan.verify import verify_plan
from wsealloc.problem import build_problem
from wsealloc.problem.objective import Throughput

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"
TRAIN = CostOptions(train=TrainingOptions())


def _costs(path: Path, arch: str = "tiny", options: CostOptions = TRAIN, *, check: bool = True):  # noqa: ANN202
    return build_costs(OnnxSource(path=str(path)), load_arch(arch), options, check_feasible=check)


def test_samples_in_flight_per_depth() -> None:
    # a sample's forward at stage d, its backward 2 (D - 1 - d) + 1 steps later, one new sample per step
    assert [in_flight(d, 5) for d in range(5)] == [9, 7, 5, 3, 1]
    assert in_flight(0, 1) == 1  # one stage: the loss turns the sample around at once


def test_the_tiny_transformers_pipeline_and_each_kernels_stash() -> None:
    costs = _costs(TRANSFORMER)
    depth, stages, has_pred, has_succ = pipeline_shape(costs.kgraph)
    names = [kc.kernel.name for kc in costs.kernels]
    assert depth[0] == 0 and not has_pred[0]  # embed: fed by the token ids only
    assert not has_succ[names.index("lm_head")] and stages == depth[names.index("lm_head")] + 1
    for kc, d in zip(costs.kernels, depth, strict=True):
        assert isinstance(kc.work, TrainingWork)
        assert kc.work.in_flight == 2 * (stages - 1 - d) + 1
        f = kc.work.forward
        both = f.is_mac and not f.weight_b  # attention's matmuls: the backward needs both activations
        assert kc.work.stash_bytes == f.in_bytes + (f.b_bytes if both else 0)
    assert costs.by_name("l0.scores").work.stash_bytes == 4096 + 4096  # Q, and K  # type: ignore[union-attr]
    assert costs.by_name("lm_head").work.loss and not costs.by_name("l0.fc1").work.loss  # type: ignore[union-attr]


def test_backward_macs_are_the_closed_form() -> None:
    # tiny transformer (models/tiny/build.py): every MAC kernel has a producer, so each computes its input
    # gradient and its weight gradient (attention: both operands' gradients): 3x the forward's MACs
    forward = decoder_macs(2, 32, 64, 4 * 64, 100, 2)
    assert forward == 3_612_672
    costs = _costs(TRANSFORMER)
    assert sum(kc.work.macs for kc in costs.kernels) == 3 * forward == 10_838_016
    works = {kc.kernel.name: kc.work for kc in costs.kernels}
    assert works["l0.qkv"].gradients == 2 and works["l0.scores"].gradients == 2  # type: ignore[union-attr]
    assert works["l0.softmax"].gradients == 0  # a vector kernel: its backward is vector work  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "forward", "first_conv"),
    [
        ("gpt2.onnx", decoder_macs(12, 1024, 768, 3072, 50257, 2), 0),
        ("bert-base.onnx", decoder_macs(12, 384, 768, 3072, 0, 2) + 768 * 768, 0),  # the pooler reads the last layer
        ("resnet50.onnx", resnet50_macs(), 112 * 112 * 64 * 3 * 7 * 7),
        ("vit-b16.onnx", vit_b16_macs(), 14 * 14 * 768 * (3 * 16 * 16)),  # the patch embedding reads the image
    ],
)
def test_zoo_training_macs(name: str, forward: int, first_conv: int) -> None:
    # GPT-2 and BERT: the embedding (a lookup) comes first, every matmul has a producer: 3x. ResNet-50's
    # stem conv and ViT's patch embedding read the image, which needs no gradient: their weight gradient only
    costs = _costs(MODELS / name, "wse2", check=False)
    assert sum(kc.work.macs for kc in costs.kernels) == 3 * forward - first_conv


def test_optimizer_state_and_the_sram_parts_on_one_grid() -> None:
    assert [o.state_bytes_per_param for o in Optimizer] == [4, 8, 12]  # fp32 master; + velocity; + two moments
    costs = _costs(TRANSFORMER)
    kc = costs.by_name("l0.fc1")
    work = kc.work
    assert isinstance(work, TrainingWork)
    r, c = np.array([8]), np.array([8])
    g = grid_costs(work, costs.arch, costs.options, Dataflow.TRAIN, r, c)
    p = g.sram_parts()
    assert p.grads is not None and p.optimizer is not None and p.stash is not None
    assert p.grads[0] == 2 * p.weights[0]  # fp32 accumulators for fp16 weights
    # Adam: 12 B per distinct parameter, spread over the grid's cores like the update
    assert p.optimizer[0] == -(-work.params * 12 // 64)
    assert p.stash[0] == -(-work.forward.in_bytes * work.in_flight // 64)
    assert g.sram_bytes[0] == p.weights[0] + p.state[0] + p.buffers[0] + p.grads[0] + p.optimizer[0] + p.stash[0]
    sgd = _costs(TRANSFORMER, options=CostOptions(train=TrainingOptions(optimizer=Optimizer.SGD))).by_name("l0.fc1")
    ps = grid_costs(
        sgd.work, costs.arch, CostOptions(train=TrainingOptions(optimizer=Optimizer.SGD)), Dataflow.TRAIN, r, c
    ).sram_parts()
    assert ps.optimizer is not None and ps.optimizer[0] == -(-work.params * 4 // 64)  # SGD: the fp32 master weight


def test_recomputation_trades_the_stash_for_the_forward_again() -> None:
    costs = _costs(TRANSFORMER)
    work = costs.by_name("l0.qkv").work
    assert isinstance(work, TrainingWork) and work.in_flight > 1
    r, c = np.array([4]), np.array([4])
    keep = grid_costs(work, costs.arch, costs.options, Dataflow.TRAIN, r, c)
    again = grid_costs(work, costs.arch, costs.options, Dataflow.TRAIN_RECOMPUTE, r, c)
    forward = grid_costs(work.forward, costs.arch, costs.options, Dataflow.WEIGHT_STATIONARY, r, c)
    fastest = min(
        int(grid_costs(work.forward, costs.arch, costs.options, df, r, c).latency[0]) for df in work.forward.dataflows()
    )
    assert forward.latency[0] >= fastest
    assert again.latency[0] - keep.latency[0] == fastest  # l0.scores consumes its output: it replays
    # 21 stages, segments of about ceil(sqrt(21)) = 5 whose boundaries fall where the least is live:
    # segment 0 is stages 0-5 (embed .. l0.context); l0.qkv at stage 2 keeps 37 samples, or, recomputing,
    # the 4 KiB its segment's l0.ln1 sends it for 2 (5 - 2) + 1 = 7 samples only
    assert (work.in_flight, work.segment, work.replay_window, work.segment_input_bytes) == (37, 0, 7, 4096)
    assert keep.sram_parts().stash[0] == 4096 * 37 / 16  # type: ignore[index]
    assert again.sram_parts().stash[0] == 4096 * 7 / 16  # type: ignore[index]
    # l0.proj heads segment 1: its inputs (the context, the residual) are the checkpoint, kept for all its
    # 29 samples either way; l0.context (the last of segment 0) sends nothing inside it: no replay
    head, tail = costs.by_name("l0.proj").work, costs.by_name("l0.context").work
    assert isinstance(head, TrainingWork) and isinstance(tail, TrainingWork)
    assert head.segment == 1 and tail.segment == 0
    assert head.kept_stash_bytes(True) == head.kept_stash_bytes(False) == 8192 * 29
    assert not tail.replays and tail.kept_stash_bytes(True) == 12288 * 1 and tail.kept_stash_bytes(False) == 12288 * 31
    t_keep, t_again = (grid_costs(tail, costs.arch, costs.options, df, r, c) for df in (Dataflow.TRAIN, Dataflow.TRAIN_RECOMPUTE))
    assert t_again.latency[0] == t_keep.latency[0]
    # the boundary in front of l0.proj (stage 6) has 12 KiB live across it (the context's inputs P and V
    # are inside the segment before it; the residual and the context's output cross), the least in reach
    crossing = [0] * 22
    depth, stages, _, _ = pipeline_shape(costs.kgraph)
    for e in costs.edges:
        for b in range(depth[e.src] + 1, depth[e.dst] + 1):
            crossing[b] += e.nbytes
    assert segment_starts(crossing, stages) == [0, 6, 11, 16]
    assert crossing[6] == min(crossing[3:8])
    # the user fixes it (none: no recomputing op models), or the allocation picks per segment
    dfs = {
        mode: _costs(TRANSFORMER, options=CostOptions(train=TrainingOptions(recompute=mode))).by_name("l0.qkv").work.dataflows()
        for mode in Recompute
    }
    assert dfs == {
        Recompute.NONE: (Dataflow.TRAIN,),
        Recompute.ALL: (Dataflow.TRAIN, Dataflow.TRAIN_RECOMPUTE),
        Recompute.AUTO: (Dataflow.TRAIN, Dataflow.TRAIN_RECOMPUTE),
    }


@pytest.mark.parametrize(
    ("model", "arch", "sets", "refused", "recomputes"),
    [
        # the tiny transformer with 16 KiB a core: keeping every stash, its kernels need 437 cores, 53 more than it has
        ("tiny/transformer.onnx", "tiny", ["core.sram_bytes=16KiB"], "does not fit tiny", "l0.scores"),
        # GPT-2 training solved twice (4 s): run by .ci/run (pytest -m slow); the tiny case above takes the same path
        pytest.param("gpt2.onnx", "wse2", [], "node_matmul_1", "node_matmul_1", marks=pytest.mark.slow),
    ],
    ids=["tiny-16KiB", "gpt2"],
)
def test_a_stash_too_large_without_recomputation_fits_with_it(
    model: str, arch: str, sets: list[str], refused: str, recomputes: str
) -> None:
    # GPT-2 at 1024 tokens: the attention's context kernel keeps each sample's probabilities (12 x 1024 x
    # 1024 fp16) for ~200 samples in flight: no grid holds that; recomputing lets it fit
    with pytest.raises(InfeasibleError, match=refused):
        ws.solve(MODELS / model, arch, place=False, train=True, recompute="none", sets=sets)
    out = ws.solve(MODELS / model, arch, place=False, train=True, recompute="auto", sets=sets)
    assert out.plan.objective.status.value == "OPTIMAL"
    chosen = {k.name: k.dataflow for k in out.plan.kernels}
    assert chosen[recomputes] == "train-recompute"
    assert "train" in chosen.values()  # the solver keeps the stash where it fits and is faster


@pytest.mark.parametrize("spare", [0.0, 0.05, 0.2, 0.5, 1.0, 3.0])
def test_the_segment_choice_is_the_optimum_over_every_choice(spare: float) -> None:
    # brute force: every way of every segment (2^5 on the tiny transformer), each fixed table's exact
    # min-max optimum; the bisection over segments (opmodels.recompute.choose) finds their least
    costs = _costs(TRANSFORMER)
    segments = sorted({kc.work.segment for kc in costs.kernels})  # type: ignore[union-attr]
    fewest = sum(min(int(pareto_frontier(flag_table(kc.table, way)).cores[0]) for way in (False, True)) for kc in costs.kernels)
    total = int(fewest * (1 + spare))
    best: int | None = None
    for ways in itertools.product((False, True), repeat=len(segments)):
        chosen = dict(zip(segments, ways, strict=True))
        flags = tuple(chosen[kc.work.segment] for kc in costs.kernels)  # type: ignore[union-attr]
        value = Throughput().exact_bound(build_problem(fix_recompute(costs, flags), total)).value
        if value is not None and (best is None or value < best):
            best = value
    choice = choose_recompute(costs, total)
    assert choice.value == best
    fixed = Throughput().exact_bound(build_problem(fix_recompute(costs, choice.recompute), total)).value
    assert fixed == best
    # a segment's kernels take one way
    for s in segments:
        assert len({f for kc, f in zip(costs.kernels, choice.recompute, strict=True) if kc.work.segment == s}) == 1  # type: ignore[union-attr]


def test_a_wafer_boundary_cuts_a_segment_in_two(tmp_path: Path) -> None:
    # segment 1 is l0.proj .. l1.ln1; a cut right after l0.ln2 splits it: the part on wafer 1 is a
    # segment of its own, l0.fc1's input from l0.ln2 (across the link) its checkpoint
    rules = tmp_path / "cut.yaml"
    rules.write_text("- cut: l0.ln2\n")
    out = ws.solve(
        TRANSFORMER, "tiny", train=True, recompute="all", wafers=2, place=False, constraints=rules, output=tmp_path / "p.json"
    )
    plan = out.plan
    assert all(k.dataflow == "train-recompute" for k in plan.kernels)  # every (part of a) segment recomputes
    names = [k.name for k in plan.kernels]
    cut = [k.stage for k in plan.kernels].index(1)
    assert names[cut - 1 : cut + 1] == ["l0.ln2", "l0.fc1"]
    single = _costs(TRANSFORMER, options=CostOptions(train=TrainingOptions(recompute=Recompute.ALL)))
    split = over_wafers(single, [0, cut, len(names)])
    before, after = single.by_name("l0.fc1").work, split.by_name("l0.fc1").work
    assert isinstance(before, TrainingWork) and isinstance(after, TrainingWork)
    assert before.segment == single.by_name("l0.ln2").work.segment  # type: ignore[union-attr]
    assert (before.segment_input_bytes, after.segment_input_bytes) == (4096, 0)
    assert after.segment != split.by_name("l0.ln2").work.segment  # type: ignore[union-attr]
    assert after.in_flight == before.in_flight and split.by_name("l0.ln2").work.in_flight == 27 + 2  # type: ignore[union-attr]
    assert verify_plan(tmp_path / "p.json").ok


def test_a_segment_half_recomputing_is_rejected_by_the_verifier(tmp_path: Path) -> None:
    ws.solve(TRANSFORMER, "tiny", train=True, recompute="all", place=False, output=tmp_path / "p.json")
    assert verify_plan(tmp_path / "p.json").ok
    doc = json.loads((tmp_path / "p.json").read_text())
    k = next(k for k in doc["kernels"] if k["name"] == "l0.qkv")
    assert k["dataflow"] == "train-recompute"
    k["dataflow"] = "train"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    violations = verify_plan(bad).violations
    assert any("a segment recomputes whole or not at all" in v for v in violations)
    assert any("l0.qkv: keeps its stash, but the request says --recompute all" in v for v in violations)


@pytest.mark.parametrize(
    ("model", "arch", "sets"),
    [
        # the tiny transformer with 5 KiB a core: its feed-forward kernels' training memory fits no grid
        ("tiny/transformer.onnx", "tiny", ["core.sram_bytes=5KiB"]),
        # Llama-7B's training costed (3 s): run by .ci/run (pytest -m slow); the tiny case above takes the same path
        pytest.param("llama-7b.onnx", "wse2", [], marks=pytest.mark.slow),
    ],
    ids=["tiny-5KiB", "llama-7b"],
)
def test_a_model_that_fits_no_grid_does_not_train_as_a_layer_pipeline(model: str, arch: str, sets: list[str]) -> None:
    # Llama-7B's attention's stash does not fit any grid even recomputing (the checkpoint and the replay window)
    with pytest.raises(InfeasibleError, match=f"fit no grid on {arch}"):
        ws.solve(MODELS / model, arch, place=False, train=True, sets=sets)


@pytest.mark.parametrize(
    ("recompute", "part", "fix"),
    [
        # every activation kept for the backward: the stash fills the cores, and --recompute is the fix (the
        # message offered "smaller --dim values" only)
        ("none", "(the training stash 1.3 KiB of it)", "give --recompute auto or all"),
        # recomputing, Adam's fp32 state per parameter is what is left over
        ("all", "(the optimizer state 561 B of it)", "give --optimizer sgd or momentum"),
    ],
)
def test_a_kernel_that_fits_no_grid_is_told_what_fills_its_cores(recompute: str, part: str, fix: str) -> None:
    with pytest.raises(InfeasibleError, match="fit no grid on tiny") as err:
        ws.solve(TRANSFORMER, "tiny", place=False, train=True, recompute=recompute, sets=["core.sram_bytes=5KiB"])
    assert part in str(err.value) and fix in str(err.value) and "--set core.sram_bytes" in str(err.value)


def test_a_placed_training_plan_verifies_and_the_colocated_rectangle_is_checked(tmp_path: Path) -> None:
    out = ws.solve(TRANSFORMER, "tiny", train=True, time_limit=2, output=tmp_path / "p.json")
    plan = out.plan
    assert plan.request is not None and plan.request.cost.train is not None
    assert all(k.dataflow in ("train", "train-recompute") and k.placement is not None for k in plan.kernels)
    assert verify_plan(tmp_path / "p.json").ok
    # forward, backward and update are one op model on one rectangle: a plan whose kernel claims
    # another phase split (its latency without the backward) is rejected
    doc = json.loads((tmp_path / "p.json").read_text())
    k = doc["kernels"][3]
    k["dataflow"] = "train-recompute" if k["dataflow"] == "train" else "train"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    report = verify_plan(bad)
    assert not report.ok and any(k["name"] in v for v in report.violations)


def test_training_summary_names_the_optimizer_recomputation_and_memory() -> None:
    from wsealloc.report.summary import summary_lines

    out = ws.solve(TRANSFORMER, "tiny", train=True, place=False, optimizer="sgd")
    text = "\n".join(summary_lines(out))
    assert (
        "training: " in text and "sgd" in text and "segments of about" in text and "kernels) recompute (--recompute auto)" in text
    )
    assert "training memory: weights" in text and "stash" in text and "optimizer" in text
    rate = out.plan.objective.throughput_samples_per_s
    assert f"= {rate * 32:,.0f} tokens/s (32 tokens a sample)" in text  # the tiny decoder reads 32 token ids


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"optimizer": "sgd"}, "--optimizer set(s) how training runs: give --train"),
        ({"train": True, "optimizer": "lion"}, "unknown optimizer 'lion'"),
        ({"train": True, "recompute": "some"}, "unknown recompute 'some'"),
        ({"train": True, "objective": "latency"}, "use --objective throughput"),
        ({"train": True, "cost": "seed"}, "--cost-model seed is not supported"),
    ],
)
def test_what_train_refuses(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ws.solve(TRANSFORMER, "tiny", place=False, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "given",
    [
        # every training option at its default value: given without --train it is refused as a value other
        # than the default is (these exited 0, the option dropped unsaid, while --optimizer sgd was refused)
        ("--optimizer", "adam"),
        ("--recompute", "auto"),
        ("--train-batch", "1"),
        ("--attention", "stored"),
        ("--checkpoints", "wafer"),
        ("--recompute-segment", "2"),
    ],
)
def test_a_training_option_without_train_is_refused_at_its_default_value_too(given: tuple[str, str]) -> None:
    result = run("solve", str(TRANSFORMER), "--arch", "tiny", *given, "--no-place", "--time-limit", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"wsealloc: error: {given[0]} set(s) how training runs: give --train with it\n"


def test_training_options_left_out_are_not_given_and_python_api_keywords_are() -> None:
    """Click's defaults are not the user's: without a training option the solve runs (the request's
    own defaults apply); a keyword of the Python API is given, whatever its value."""
    assert run("inspect", str(TRANSFORMER), "--arch", "tiny", "--json").returncode == 0
    with pytest.raises(UsageError, match="--optimizer, --train-batch set"):
        ws.solve(TRANSFORMER, "tiny", place=False, optimizer="adam", train_batch=1)


def test_inference_is_unchanged_without_train() -> None:
    costs = _costs(TRANSFORMER, options=CostOptions())
    assert costs.options.train is None
    assert not any(isinstance(kc.work, TrainingWork) for kc in costs.kernels)


def costs_in_flight(name: str) -> int:
    work = _costs(TRANSFORMER).by_name(name).work
    assert isinstance(work, TrainingWork)
    return work.in_flight


def _cli(*args: str) -> Result:
    return run(*args)  # in this process: no interpreter start-up for each of the three commands


def test_inspect_train_shows_training_macs_and_each_op_models_memory_by_part() -> None:
    proc = _cli("inspect", str(TRANSFORMER), "--arch", "tiny", "--train", "--json")
    assert proc.returncode == 0, proc.stderr
    kernels = {k["name"]: k for k in json.loads(proc.stdout)["kernels"]}
    assert kernels["l0.fc1"]["macs"] == 3 * 32 * 64 * 256  # forward, input gradient, weight gradient
    proc = _cli("inspect", str(TRANSFORMER), "--arch", "tiny", "--train", "--kernel", "l0.fc1", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["op_models"]
    first = rows[0]
    assert set(first["sram_parts"]) == {"weights", "gradients", "optimizer", "stash", "buffers"}
    for row in rows:
        assert sum(row["sram_parts"].values()) == row["sram_bytes_per_core"]
    assert {row["dataflow"] for row in rows} == {"train", "train-recompute"}
    record = kernels["l0.qkv"]["training"]
    assert record["in_flight"] == costs_in_flight("l0.qkv")
    assert record["segment"] == {
        "index": 0,
        "regenerated_bytes": 4096,
        "checkpoint_bytes": 0,
        "replay_window": 7,
        "replays": True,
    }
    head = kernels["l0.proj"]["training"]["segment"]  # heads segment 1: its whole stash is the checkpoint
    assert (head["index"], head["regenerated_bytes"], head["checkpoint_bytes"]) == (1, 0, 8192)
    assert set(record["memory_bytes"]) == {"weights", "gradients", "optimizer", "stash", "buffers"}
    assert record["memory_bytes"]["gradients"] == 2 * record["memory_bytes"]["weights"]  # fp32 beside fp16
    assert kernels["l0.scores"]["training"]["memory_bytes"]["gradients"] <= 4 * 64  # an activation's tile has none
    plain = json.loads(_cli("inspect", str(TRANSFORMER), "--arch", "tiny", "--kernel", "l0.fc1", "--json").stdout)
    assert "sram_parts" not in plain["op_models"][0]  # inference output unchanged


# ---------------------------------------------------------------- weight streaming (--mode)

BANDWIDTH = "cluster.offwafer_bytes_per_s=1e9"  # tiny has no off-wafer memory of its own


@pytest.mark.parametrize("train", [True, False])
def test_a_streamed_plan_verifies_and_a_tampered_one_does_not(tmp_path: Path, train: bool) -> None:
    out = ws.solve(
        TRANSFORMER, "tiny", train=train, mode="streaming", stream_batch=8, sets=[BANDWIDTH], output=tmp_path / "s.json"
    )
    plan = out.plan
    assert len(plan.regions) == 1 and plan.regions[0].grid == (16, 24)  # every kernel in turn on the whole wafer
    assert {k.dataflow for k in plan.kernels} == {"stream"}
    assert verify_plan(tmp_path / "s.json").ok
    doc = json.loads((tmp_path / "s.json").read_text())
    doc["regions"][0]["latency_cycles"] -= 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert not verify_plan(bad).ok


def test_a_stream_bound_kernel_by_hand() -> None:
    # 1 MB/s at tiny's 1 GHz: 0.001 B per cycle; l0.fc1's 33,280 B of weights take 33,280,000 cycles to
    # stream in for the forward; the backward streams them in again while their fp32 gradients (66,560 B)
    # go out, 66,560,000 cycles: per sample of a batch of 8, 99,840,000 / 8 = 12,480,000
    from wsealloc.cost import StreamedWork

    arch = load_arch("tiny", ("cluster.offwafer_bytes_per_s=1e6",))
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), arch, TRAIN)
    work = costs.by_name("l0.fc1").work
    assert isinstance(work, TrainingWork) and work.weight_bytes == 64 * 256 * 2 + 256 * 2 == 33_280
    g = grid_costs(StreamedWork(work, 8), arch, costs.options, Dataflow.STREAM, np.array([16]), np.array([24]))
    assert int(g.latency[0]) == (33_280_000 + 66_560_000) // 8 == 12_480_000


@pytest.mark.parametrize(
    ("model", "arch", "sets", "batch"),
    [
        # the tiny transformer with 5 KiB a core (its feed-forward kernels fit no grid), one sample a pass
        ("tiny/transformer.onnx", "tiny", [BANDWIDTH, "core.sram_bytes=5KiB"], 1),
        # Llama-7B's training costed and streamed (4 s): run by .ci/run (pytest -m slow); the tiny case above
        # takes the same path
        pytest.param("llama-7b.onnx", "wse2", [], 4, marks=pytest.mark.slow),  # 4: the largest that fits
    ],
    ids=["tiny-5KiB", "llama-7b"],
)
def test_auto_streams_what_does_not_fit_as_a_pipeline_and_says_why(model: str, arch: str, sets: list[str], batch: int) -> None:
    out = ws.solve(MODELS / model, arch, train=True, mode="auto", stream_batch=batch, sets=sets)
    # the request stays as the user gave it (mode auto); the plan's decision records the strategy chosen and why
    assert out.plan.request is not None and out.plan.request.mode.value == "auto"
    assert out.plan.decision is not None and out.plan.decision.strategy == "streaming"
    assert out.plan.decision.reason.startswith("auto: the layer pipeline does not fit")
    assert "the layer pipeline does not fit" in out.plan.objective.message


def test_auto_keeps_the_layer_pipeline_where_it_fits() -> None:
    small = ws.solve(TRANSFORMER, "tiny", train=True, mode="auto", sets=[BANDWIDTH], place=False)
    assert small.plan.request is not None and small.plan.request.mode.value == "auto"
    assert small.plan.decision is not None and small.plan.decision.strategy == "pipeline"
    assert "pipelined" in small.plan.objective.message and "streamed" in small.plan.objective.message


@pytest.mark.slow
def test_a_batch_too_large_to_stream_names_the_largest_that_fits() -> None:
    with pytest.raises(InfeasibleError, match=r"the largest batch that fits is \d+") as info:
        ws.solve(TRANSFORMER, "tiny", train=True, mode="streaming", stream_batch=100_000, sets=[BANDWIDTH])
    largest = int(str(info.value).rsplit("fits is ", 1)[1].split()[0])
    assert largest >= 1
    from wsealloc.report.summary import summary_lines

    fits = ws.solve(TRANSFORMER, "tiny", train=True, mode="streaming", stream_batch=largest, sets=[BANDWIDTH])
    assert f"the largest batch that fits: {largest:,} samples per pass" in "\n".join(summary_lines(fits))
    with pytest.raises(InfeasibleError):
        ws.solve(TRANSFORMER, "tiny", train=True, mode="streaming", stream_batch=largest + 1, sets=[BANDWIDTH])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "streaming"}, "needs the off-wafer bandwidth"),
        ({"mode": "streaming", "share": "auto", "objective": "latency", "sets": [BANDWIDTH]}, "use --objective throughput"),
        ({"mode": "sideways"}, "unknown mode 'sideways'"),
        ({"stream_batch": 8}, "give --mode streaming or auto with it"),
        # training in the layer pipeline (the default mode) has no streamed pass either: refused alike, not dropped
        ({"train": True, "stream_batch": 8}, "give --mode streaming or auto with it"),
        ({"train": True, "train_batch": 8, "stream_batch": 4, "sets": [BANDWIDTH]}, "give --mode streaming or auto with it"),
        ({"train": True, "stream_batch": 8, "wafers": 2}, "give --mode streaming or auto with it"),
    ],
)
def test_what_streaming_refuses(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ws.solve(TRANSFORMER, "tiny", place=False, **options)  # type: ignore[arg-type]


def test_stream_batch_with_pipelined_training_is_refused_on_the_command_line() -> None:
    """QA's repro: ``--train --stream-batch 4`` in the default (pipelined) mode planned the layer pipeline
    without it and exited 0; it is the inference refusal now, one line, exit 2."""
    result = run("solve", str(TRANSFORMER), "--arch", "tiny", "--train", "--stream-batch", "4", "--no-place", "--time-limit", "5")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "wsealloc: error: --stream-batch sets the samples of a streamed pass: give --mode streaming or auto with it\n"
    )


@pytest.mark.parametrize(
    "model",
    [
        "convnet",  # tests/test_cost_ispd.py's conv net: two convs (the first reads the image), a pool, a Gemm
        # ResNet-50 costed seven times by the contest's conv model (7 s): run by .ci/run (pytest -m slow);
        # the conv net above takes the same path
        pytest.param("resnet50", marks=pytest.mark.slow),
    ],
)
def test_the_contests_conv_is_its_own_training_kernel(model: str, tmp_path: Path) -> None:
    # --train --cost-model ispd2020: a conv stays the contest's kernel (forward, backward and update
    # side by side already: no backward added), every other kernel trains by the standard rules
    from test_cost_ispd import _conv_net

    from wsealloc.cost import IspdConvWork

    path, arch = (MODELS / "resnet50.onnx", "wse2") if model == "resnet50" else (Path(_conv_net(tmp_path)), "tiny")
    options = CostOptions(model=CostModelName.ISPD2020, train=TrainingOptions())
    costs = _costs(path, arch, options, check=False)
    kinds = {type(kc.work).__name__ for kc in costs.kernels}
    assert kinds == {"IspdConvWork", "TrainingWork"}
    plain = _costs(path, arch, CostOptions(model=CostModelName.ISPD2020), check=False)
    for kc, before in zip(costs.kernels, plain.kernels, strict=True):
        if isinstance(kc.work, IspdConvWork):
            assert kc.work == before.work and np.array_equal(kc.table.latency, before.table.latency)
    out = ws.solve(path, arch, train=True, cost="ispd2020", place=False)
    assert out.plan.objective.status.value == "OPTIMAL"
    # the contest's convs are in no recomputation segment: the other kernels' segments count only them
    # (so --recompute all recomputes them all), and a conv's output is their checkpoint
    trained = [kc.work for kc in costs.kernels if isinstance(kc.work, TrainingWork)]
    for w in trained:
        assert w.segment_kernels == sum(o.segment == w.segment for o in trained)
    assert set(segment_ways(costs).values()) == {(False, True)}


def test_compare_puts_the_layer_pipeline_and_streaming_side_by_side() -> None:
    from wsealloc.report.compare import compare

    # --stream-batch sizes the streamed row under --mode auto (pipelined alone it is refused: no streamed pass)
    c = compare(TRANSFORMER, "tiny", train=True, place=False, mode="auto", stream_batch=4, sets=[BANDWIDTH])
    names = [r.name for r in c.rows]
    assert names[-1] == "weight streaming (4 sample(s) per pass)"
    assert c.rows[1].bottleneck_cycles == ws.solve(TRANSFORMER, "tiny", train=True, place=False).plan.objective.value
    streamed = ws.solve(TRANSFORMER, "tiny", train=True, mode="streaming", stream_batch=4, sets=[BANDWIDTH])
    assert c.rows[-1].bottleneck_cycles == streamed.plan.objective.value
    back = compare(TRANSFORMER, "tiny", train=True, mode="streaming", stream_batch=4, sets=[BANDWIDTH])
    piped = ws.solve(TRANSFORMER, "tiny", train=True, place=False).plan.objective.value
    assert back.rows[-1].name == "layer pipeline (--mode pipelined)" and back.rows[-1].bottleneck_cycles == piped
    # inference too: the pipeline's row is planned without the streamed pass's --stream-batch (it refuses one)
    served = compare(TRANSFORMER, "tiny", mode="streaming", stream_batch=4, place=False, sets=[BANDWIDTH])
    alone = ws.solve(TRANSFORMER, "tiny", place=False).plan.objective.value
    assert served.rows[-1].name == "layer pipeline (--mode pipelined)" and served.rows[-1].bottleneck_cycles == alone
    plain = compare(TRANSFORMER, "tiny", place=False)  # inference, pipelined: no second mode
    assert not any("streaming" in r.name or "pipeline" in r.name for r in plain.rows)


def test_train_refuses_an_inference_export_with_a_kv_cache() -> None:
    with pytest.raises(UsageError, match="keeps a KV cache"):
        ws.solve(MODELS / "tiny" / "llm_decode.onnx", "tiny", train=True, place=False, context=16)


def test_a_sweep_point_that_training_refuses_is_one_line_not_an_internal_error() -> None:
    from wsealloc.bench.sweep import sweep

    with pytest.raises(UsageError, match="use --share none"):
        sweep(TRANSFORMER, "tiny", ["grid=8x8"], train=True)


def _masked_model(path: Path) -> Path:
    """x[4, 8] . W[8, 8] + b[8], then a causal mask as exported: a bool tensor and a float one (0 / -1e4
    added), and a scalar scale: W and b are the only parameters (72)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.ones((8, 8), np.float32), "W"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
        numpy_helper.from_array(np.tril(np.ones((4, 8), bool)), "keep"),
        numpy_helper.from_array(np.full((4, 8), -1e4, np.float32), "fill"),
        numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node("Add", ["y", "b"], ["z"]),
        helper.make_node("Where", ["keep", "z", "fill"], ["m"]),
        helper.make_node("Mul", ["m", "scale"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "masked",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 8])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("dtype", [2, 4])
def test_masks_and_scalars_are_not_parameters_whatever_the_weights_bytes(tmp_path: Path, dtype: int) -> None:
    path = _masked_model(tmp_path / "masked.onnx")
    arch = load_arch("tiny").model_copy(update={"dtype": load_arch("tiny").dtype.model_copy(update={"bytes": dtype})})
    costs = build_costs(OnnxSource(path=str(path)), arch, TRAIN)
    works = [kc.work for kc in costs.kernels]
    assert all(isinstance(w, TrainingWork) for w in works)
    assert sum(w.params for w in works) == 8 * 8 + 8  # type: ignore[union-attr]
    # the fp32 accumulators and Adam's state follow the parameters, not the weight bytes (masks included)
    kc = costs.kernels[0]
    g = grid_costs(kc.work, arch, costs.options, Dataflow.TRAIN, np.array([1]), np.array([1]))
    parts = g.sram_parts()
    w = kc.work
    assert isinstance(w, TrainingWork) and w.dtype_bytes == dtype
    assert parts.optimizer is not None and parts.optimizer[0] == w.params * 12


def test_each_wafer_boundary_before_the_loss_keeps_two_more_samples(tmp_path: Path) -> None:
    # a sample's activation crosses the link in one step and its gradient comes back in another: on
    # wafer 0 of 2, l0.qkv keeps 37 + 2 = 39 samples; the plan's numbers are costed so and verify agree
    out = ws.solve(TRANSFORMER, "tiny", train=True, recompute="none", wafers=2, place=False, output=tmp_path / "p.json")
    plan = out.plan
    stage = {k.name: k.stage for k in plan.kernels}
    assert stage["l0.qkv"] == 0 and stage["lm_head"] == 1
    single = _costs(TRANSFORMER, options=CostOptions(train=TrainingOptions(recompute=Recompute.NONE)))
    base = single.by_name("l0.qkv").work
    kp = next(k for k in plan.kernels if k.name == "l0.qkv")
    assert isinstance(base, TrainingWork) and base.in_flight == 37
    linked = replace(base, in_flight=39)
    r, c = np.array([kp.grid[0]]), np.array([kp.grid[1]])
    assert kp.sram_bytes_per_core == int(grid_costs(linked, single.arch, single.options, Dataflow.TRAIN, r, c).sram_bytes[0])
    last = next(k for k in plan.kernels if k.name == "lm_head")  # on the last wafer: unchanged
    lw = single.by_name("lm_head").work
    r, c = np.array([last.grid[0]]), np.array([last.grid[1]])
    assert last.sram_bytes_per_core == int(grid_costs(lw, single.arch, single.options, Dataflow.TRAIN, r, c).sram_bytes[0])
    # the partition's bound (without the link's samples) stays a valid lower bound
    assert plan.objective.lower_bound_cycles is not None and plan.objective.value >= plan.objective.lower_bound_cycles
    assert verify_plan(tmp_path / "p.json").ok


def test_the_retries_of_a_training_pipeline_cut_between_segments_and_never_repeat_a_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # when a wafer does not fit once its boundary's samples count, the partitions tried next cut only
    # between recomputation segments (same wafer count, then, --wafers auto, one and two more); one
    # equal to the try that failed is skipped (the tiny transformer's 2-wafer cut already falls between
    # segments 1 and 2, so --wafers 2 has nothing else to try and the failure stands)
    import wsealloc.strategy.pipeline as pipeline
    from wsealloc.problem.stages import build_stage_problem

    costs = _costs(TRANSFORMER)
    segment = [kc.work.segment for kc in costs.kernels]  # type: ignore[union-attr]
    retries = list(pipeline.training_retries(costs, build_stage_problem(costs), 2, None))
    assert [p.cuts for p in retries] == [(0, 11, 21), (0, 11, 16, 21), (0, 6, 11, 16, 21)]
    for p in retries:  # no segment on two wafers
        assert all(segment[c - 1] != segment[c] for c in p.cuts[1:-1])
    assert [p.cuts for p in pipeline.training_retries(costs, build_stage_problem(costs), 2, 2)] == [(0, 11, 21)]  # --wafers 2
    assert pipeline.stage_solver(build_stage_problem(costs), 2).cuts == retries[0].cuts
    solve = pipeline.wafer_part  # each wafer's part, prepared by the strategy before any solver runs
    calls: list[int] = []

    def first_fails(table, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(len(table.kernels))
        if len(calls) == 1:
            raise InfeasibleError("the first wafer does not fit")
        return solve(table, *args, **kwargs)

    monkeypatch.setattr(pipeline, "wafer_part", first_fails)
    with pytest.raises(InfeasibleError, match="the first wafer does not fit"):
        ws.solve(TRANSFORMER, "tiny", train=True, wafers=2, place=False)
    assert calls == [11]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 40)), min_size=0, max_size=8),
    st.integers(-5, 200),
)
def test_the_streamed_recomputation_cover_is_the_brute_force_optimum(items: list[tuple[int, int]], need: int) -> None:
    from wsealloc.opmodels.streaming import cheapest_cover

    best: int | None = None
    for mask in range(1 << len(items)):
        chosen = [items[i] for i in range(len(items)) if mask >> i & 1]
        if sum(b for b, _ in chosen) >= need and (best is None or sum(c for _, c in chosen) < best):
            best = sum(c for _, c in chosen)
    found = cheapest_cover(items, need)
    assert (found[0] if found is not None else None) == best
    if found is not None:  # the subset it names frees what is needed at that cost
        assert sum(items[i][0] for i in found[1]) >= need and sum(items[i][1] for i in found[1]) == found[0]


def test_the_user_fixes_one_kernels_recomputation_and_its_segment_follows(tmp_path: Path) -> None:
    rules = tmp_path / "rc.yaml"
    rules.write_text("- grid: l0.qkv\n  dataflow: train_recompute\n")
    out = ws.solve(
        TRANSFORMER, "tiny", train=True, place=False, constraints=rules, recompute_segment=5, output=tmp_path / "p.json"
    )
    costs = _costs(TRANSFORMER)  # segments of 5 stages: the default the request fixed
    chosen = {k.name: k.dataflow for k in out.plan.kernels}
    segment0 = [kc.kernel.name for kc in costs.kernels if kc.work.segment == 0]  # type: ignore[union-attr]
    assert "l0.qkv" in segment0 and all(chosen[n] == "train-recompute" for n in segment0)
    free = ws.solve(TRANSFORMER, "tiny", train=True, place=False)
    assert out.plan.objective.status.value == "OPTIMAL" and out.plan.objective.value >= free.plan.objective.value
    assert verify_plan(tmp_path / "p.json").ok


def test_rules_that_split_a_segment_are_a_conflict_naming_both(tmp_path: Path) -> None:
    from wsealloc.errors import ConflictError

    rules = tmp_path / "rc.yaml"
    rules.write_text("- grid: l0.qkv\n  dataflow: train_recompute\n- grid: l0.ln1\n  dataflow: train\n")
    with pytest.raises(ConflictError) as info:  # the default segments (a searched length might part them)
        ws.solve(TRANSFORMER, "tiny", train=True, place=False, constraints=rules, recompute_segment=5)
    text = str(info.value)
    assert "recomputes whole or not at all" in text
    assert "l0.qkv has no op model that keeps its stash (" in text and "line 1)" in text
    assert "l0.ln1 has no op model that recomputes (" in text and "line 3)" in text


def test_a_retry_on_more_wafers_reports_that_many_wafers_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --wafers auto: the first two tries fail (forced); the plan on three wafers reports the relaxation's
    # optimum on three wafers as its bound (not the one-wafer bound it would beat), and verifies
    import wsealloc.strategy.pipeline as pipeline
    from wsealloc.problem.stages import build_stage_problem

    solve = pipeline.wafer_part  # each wafer's part, prepared by the strategy before any solver runs
    calls: list[int] = []

    def two_fail(table, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(len(table.kernels))
        if len(calls) <= 2:
            raise InfeasibleError("forced")
        return solve(table, *args, **kwargs)

    monkeypatch.setattr(pipeline, "wafer_part", two_fail)
    out = ws.solve(TRANSFORMER, "tiny", train=True, wafers="auto", place=False, output=tmp_path / "p.json")
    wafers = max(k.stage for k in out.plan.kernels) + 1
    o = out.plan.objective
    relaxed = pipeline.stage_solver(build_stage_problem(_costs(TRANSFORMER)), wafers).objective
    assert wafers == 3 and o.lower_bound_cycles == relaxed and o.value >= relaxed
    assert calls[0] == 21 and calls.count(21) == 1  # the failed one-wafer try is not repeated
    assert verify_plan(tmp_path / "p.json").ok


def test_wafers_auto_that_fits_one_wafer_searches_the_segments_too(tmp_path: Path) -> None:
    """A cut over wafers that ends on one wafer (--wafers auto, or 2 when one is fastest) is the
    one-wafer solve: the segment length searched (the cut's plan kept the default 5: 9,745 cycles, and a
    decision verify refused, exit 4)."""
    mlp = ws.solve(TRANSFORMER.parent / "mlp.onnx", "tiny", train=True, wafers=2, place=False, output=tmp_path / "m.json")
    assert len(mlp.plan.stages) == 1 and verify_plan(tmp_path / "m.json").ok, verify_plan(tmp_path / "m.json").violations
    out = ws.solve(TRANSFORMER, "tiny", train=True, wafers="auto", place=False, output=tmp_path / "p.json")
    train = out.plan.cost.train
    assert train is not None and train.segment == 4 and out.plan.objective.value == 9699
    assert max(k.stage for k in out.plan.kernels) == 0
    assert verify_plan(tmp_path / "p.json").ok, verify_plan(tmp_path / "p.json").violations


def test_the_segment_length_is_searched_on_one_wafer_and_recorded(tmp_path: Path) -> None:
    # the tiny transformer: L = 5; lengths 2, 4, 5 and 8 tried; 2 and 4 reach 9,699, 5 and 8 9,745: the
    # nearest to 5 of the fastest (4) is kept and recorded, and verify costs the plan with it
    out = ws.solve(TRANSFORMER, "tiny", train=True, place=False, output=tmp_path / "p.json")
    train = out.plan.cost.train
    assert train is not None and train.segment == 4 and out.plan.objective.value == 9699
    fixed = ws.solve(TRANSFORMER, "tiny", train=True, place=False, recompute_segment=5)
    assert fixed.plan.cost.train is not None and fixed.plan.cost.train.segment == 5
    assert fixed.plan.objective.value == 9745 and fixed.plan.objective.status.value == "OPTIMAL"
    assert verify_plan(tmp_path / "p.json").ok
    with pytest.raises(UsageError, match="--recompute-segment"):
        ws.solve(TRANSFORMER, "tiny", place=False, recompute_segment=4)  # training only
