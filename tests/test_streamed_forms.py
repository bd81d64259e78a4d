"""Weight streaming's memory forms (``--attention recomputed``, ``--checkpoints offwafer``; docs/cost-model.md,
section 12, "Training as the vendor runs it"): attention found in the kernel graph, the stash and the link
time of each form by hand on the tiny transformer, in weight streaming and in the layer pipeline, plans
without them serialized as before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS

import wsealloc.api as ws
from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, StreamedWork, TrainingWork, grid_costs
from wsealloc.cost.model import Attention, Checkpoints, TrainingOptions
from wsealloc.cost.streaming import checkpoint_bytes, streamed_stash_bytes
from wsealloc.cost.training import offwafer_cycles, phases_on
from wsealloc.errors import UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels.streaming import attention_roles, streamed_forms
from wsealloc.pipeline import build_costs
from wsealloc.plan.verify import verify_plan
from wsealloc.request import build_request

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"


def _costs(arch: str = "tiny", sets: tuple[str, ...] = ("cluster.offwafer_bytes_per_s=1e9",)) -> object:
    options = CostOptions(train=TrainingOptions(attention=Attention.RECOMPUTED, checkpoints=Checkpoints.OFFWAFER))
    return build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch(arch, sets), options, check_feasible=False)


def test_attention_is_found_by_its_shape_in_the_kernel_graph() -> None:
    costs = _costs()
    roles = dict(zip((kc.kernel.name for kc in costs.kernels), attention_roles(costs), strict=True))
    # 4 heads x 32 x 32 scores of 2 B: 8,192 B a sample, the softmax's input and the context's first operand
    for layer in ("l0", "l1"):
        assert roles[f"{layer}.scores"] == (0, True)  # Q K^T: its output is S x S
        assert roles[f"{layer}.softmax"] == (8_192, True)
        assert roles[f"{layer}.context"] == (8_192, False)  # P V: reads it, writes 32 x 64
    assert {r for name, r in roles.items() if not name.endswith(("scores", "softmax", "context"))} == {(0, False)}


def test_the_stash_of_attention_recomputed_by_hand() -> None:
    forms = {kc.kernel.name: f for kc, f in zip(_costs().kernels, streamed_forms(_costs()), strict=True)}
    # scores keeps Q and K (4,096 B each), as stored; softmax keeps one fp32 statistic for each of its
    # 4 x 32 rows instead of its 8,192 B input; context keeps V (4,096 B), not P (8,192 B)
    assert streamed_stash_bytes(forms["l0.scores"]) == 8_192
    assert streamed_stash_bytes(forms["l0.softmax"]) == 4 * 128 == 512
    assert streamed_stash_bytes(forms["l0.context"]) == 12_288 - 8_192 == 4_096
    stored = StreamedWork(forms["l0.context"].inner, 1)
    assert streamed_stash_bytes(stored) == 12_288


def test_a_checkpoint_off_the_wafer_by_hand() -> None:
    forms = {kc.kernel.name: f for kc, f in zip(_costs().kernels, streamed_forms(_costs()), strict=True)}
    # l0.proj heads segment 1: its 8,192 B input (the context's output and the residual) is all checkpoint;
    # l1.proj's is half from inside its segment (4,096 B, the replay regenerates it)
    first, second = replace(forms["l0.proj"], recompute=True), replace(forms["l1.proj"], recompute=True)
    assert checkpoint_bytes(first) == 8_192 and checkpoint_bytes(second) == 4_096
    assert streamed_stash_bytes(first) == 0  # off the wafer, not replayed here
    assert streamed_stash_bytes(replace(second, replayed=True)) == 4_096  # the replay's, on the wafer
    on_wafer = replace(second, offwafer=False)
    assert streamed_stash_bytes(on_wafer) == 4_096 and checkpoint_bytes(on_wafer) == 0
    assert checkpoint_bytes(replace(first, recompute=False)) == 0  # kept whole: nothing to hold off


def test_the_link_time_of_a_checkpoint_off_the_wafer_by_hand() -> None:
    # one byte a cycle each way, so the link's terms outweigh the compute of 4 samples on 16 x 24 cores
    arch = load_arch("tiny")
    slow = _costs(sets=(f"cluster.offwafer_bytes_per_s={arch.clock_hz}",))
    forms = {kc.kernel.name: f for kc, f in zip(slow.kernels, streamed_forms(slow), strict=True)}
    work = replace(forms["l0.proj"], batch=4, recompute=True)
    inner = work.inner
    assert isinstance(inner, TrainingWork) and inner.replays
    rc = np.array([16]), np.array([24])
    # weights 8,320 B in for the forward, the backward and the replay; gradients 4 x 4,160 = 16,640 B out;
    # the checkpoint 4 x 8,192 = 32,768 B out beside the forward's weights, in beside the backward's
    forward, backward, replay = max(8_320, 32_768), max(8_320 + 32_768, 16_640), 8_320
    g = grid_costs(work, slow.arch, slow.options, Dataflow.STREAM, *rc)
    assert int(g.latency[0]) == -(-(forward + backward + replay) // 4) == 20_544
    kept = grid_costs(replace(work, offwafer=False), slow.arch, slow.options, Dataflow.STREAM, *rc)
    assert int(kept.latency[0]) == (8_320 + 16_640 + 8_320) // 4 == 8_320


def test_the_backward_of_attention_recomputed_computes_its_scores_again() -> None:
    arch = load_arch("wse2")
    costs = build_costs(
        OnnxSource(path=str(TRANSFORMER)), arch, CostOptions(train=TrainingOptions(attention=Attention.RECOMPUTED))
    )
    forms = {kc.kernel.name: f for kc, f in zip(costs.kernels, streamed_forms(costs), strict=True)}
    rc = np.array([arch.rows]), np.array([arch.cols])
    for name in ("l0.scores", "l0.softmax"):
        work = replace(forms[name], batch=2)
        stored = replace(work, probs_in=0, probs_out=False)
        assert int(grid_costs(work, arch, costs.options, Dataflow.STREAM, *rc).latency[0]) > int(
            grid_costs(stored, arch, costs.options, Dataflow.STREAM, *rc).latency[0]
        )
        # and holds no S x S tile: less SRAM a core than stored
        assert int(grid_costs(work, arch, costs.options, Dataflow.STREAM, *rc).sram_bytes[0]) < int(
            grid_costs(stored, arch, costs.options, Dataflow.STREAM, *rc).sram_bytes[0]
        )


def _pipeline(sets: tuple[str, ...] = ("cluster.offwafer_bytes_per_s=1e9",), **forms: object) -> dict[str, TrainingWork]:
    """The tiny transformer's layer-pipeline training works, by kernel name, with the memory forms given."""
    options = CostOptions(train=TrainingOptions(**forms))  # type: ignore[arg-type]
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny", sets), options, check_feasible=False)
    out = {}
    for kc in costs.kernels:
        assert isinstance(kc.work, TrainingWork)
        out[kc.kernel.name] = kc.work
    return out


def test_the_layer_pipeline_stash_of_attention_recomputed_by_hand() -> None:
    stored, formed = _pipeline(), _pipeline(attention=Attention.RECOMPUTED)
    # l0.softmax at stage 4 of 21 keeps 2 (21 - 1 - 4) + 1 = 33 samples: its 8,192 B input (4 heads x 32 x 32
    # of 2 B) each, or one fp32 statistic for each of its 4 x 32 rows (512 B); recomputing, none of its
    # input is a checkpoint (the S x S is never kept) and the statistics are kept for its 3-sample replay
    soft, ctx, scores = formed["l0.softmax"], formed["l0.context"], formed["l0.scores"]
    assert soft.in_flight == 33 and (soft.probs_in, soft.probs_out) == (8_192, True)
    assert stored["l0.softmax"].kept_stash_bytes(False) == 33 * 8_192 == 270_336
    assert soft.kept_stash_bytes(False) == 33 * 4 * 128 == 16_896
    assert soft.kept_stash_bytes(True) == 3 * 512 == 1_536
    # l0.context (31 in flight) keeps V (4,096 B), not P (8,192 B); l0.scores keeps Q and K as stored
    assert (ctx.probs_in, ctx.probs_out) == (8_192, False)
    assert stored["l0.context"].kept_stash_bytes(False) == 31 * 12_288 and ctx.kept_stash_bytes(False) == 31 * 4_096
    assert (scores.probs_in, scores.probs_out) == (0, True)
    assert scores.kept_stash_bytes(False) == stored["l0.scores"].kept_stash_bytes(False) == 35 * 8_192
    # nothing else changes
    assert all(formed[n] == replace(stored[n], probs_in=formed[n].probs_in, probs_out=formed[n].probs_out) for n in stored)
    assert {n for n, w in formed.items() if w.probs_in or w.probs_out} == {
        f"{layer}.{k}" for layer in ("l0", "l1") for k in ("scores", "softmax", "context")
    }


def test_the_layer_pipeline_backward_of_attention_recomputed_runs_the_forward_again() -> None:
    arch = load_arch("tiny")
    stored, formed = _pipeline(), _pipeline(attention=Attention.RECOMPUTED)
    rc = np.array([4]), np.array([8])
    for name, again in (("l0.scores", True), ("l0.softmax", True), ("l0.context", False)):
        forward = formed[name].forward
        for dataflow in forward.dataflows():
            g = grid_costs(forward, arch, CostOptions(), dataflow, *rc)
            before = phases_on(stored[name], g, np.zeros(1, dtype=np.int64), arch, *rc)
            after = phases_on(formed[name], g, np.zeros(1, dtype=np.int64), arch, *rc)
            assert int(after.backward[0]) - int(before.backward[0]) == (int(g.latency[0]) if again else 0)


def test_the_layer_pipeline_checkpoint_off_the_wafer_by_hand() -> None:
    # one byte a cycle each way for the tiny wafer's 16 x 24 = 384 cores
    arch = load_arch("tiny")
    sets = (f"cluster.offwafer_bytes_per_s={arch.clock_hz}",)
    kept, held = _pipeline(sets), _pipeline(sets, checkpoints=Checkpoints.OFFWAFER)
    # l0.proj starts segment 1: its 8,192 B input (29 samples in flight) is all checkpoint; l1.proj's is
    # half from inside its segment (4,096 B, kept for its 1-sample replay); l1.fc2's 20,480 B input is
    # 16,384 B from inside (its 5-sample replay) and 4,096 B of checkpoint
    for name, checkpoint, on_wafer, off in (
        ("l0.proj", 8_192, 29 * 8_192, 0),
        ("l1.proj", 4_096, 11 * 4_096 + 1 * 4_096, 1 * 4_096),
        ("l1.fc2", 4_096, 5 * 4_096 + 5 * 16_384, 5 * 16_384),
    ):
        assert held[name].checkpoint_bytes == checkpoint
        assert kept[name].kept_stash_bytes(True) == on_wafer and held[name].kept_stash_bytes(True) == off
        assert held[name].kept_stash_bytes(False) == kept[name].kept_stash_bytes(False)  # kept whole: as before
    # the link's share of 4 x 8 cores is 32 / 384 of a byte a cycle: 8,192 B a sample take 98,304 cycles,
    # more than the step's compute, so they are its time; keeping the stash, nothing goes off the wafer
    work, rc = held["l0.proj"], (np.array([4]), np.array([8]))
    assert int(offwafer_cycles(work, load_arch("tiny", sets), *rc)[0]) == 8_192 * 384 // 32 == 98_304
    g = grid_costs(work, load_arch("tiny", sets), CostOptions(), Dataflow.TRAIN_RECOMPUTE, *rc)
    assert int(g.latency[0]) == 98_304 and int(g.sram_parts().stash[0]) == 0
    assert int(grid_costs(work, load_arch("tiny", sets), CostOptions(), Dataflow.TRAIN, *rc).latency[0]) < 98_304


def test_the_layer_pipeline_plans_with_the_forms_and_requests_serialize_as_before(tmp_path: Path) -> None:
    bandwidth = ("cluster.offwafer_bytes_per_s=1e9",)
    plain = ws.solve(TRANSFORMER, "tiny", train=True, place=False, sets=bandwidth)
    formed = ws.solve(
        TRANSFORMER,
        "tiny",
        train=True,
        place=False,
        sets=bandwidth,
        attention="recomputed",
        checkpoints="offwafer",
        output=tmp_path / "p.json",
    )
    assert verify_plan(tmp_path / "p.json").ok
    # attention recomputed costs the scores and the softmax a forward more in the backward
    assert formed.plan.objective.throughput_samples_per_s <= plain.plan.objective.throughput_samples_per_s
    with pytest.raises(UsageError, match="off-wafer bandwidth"):
        ws.solve(TRANSFORMER, "tiny", train=True, place=False, checkpoints="offwafer")
    plain_request = build_request(str(TRANSFORMER), "tiny", train=True)
    assert plain_request.cost.train is not None
    dumped = plain_request.cost.train.model_dump(mode="json")
    assert "attention" not in dumped and "checkpoints" not in dumped
    request = build_request(
        str(TRANSFORMER), "wse2", train=True, attention="recomputed", checkpoints="offwafer", mode="streaming"
    )
    assert request.cost.train is not None
    assert request.cost.train.model_dump(mode="json")["attention"] == "recomputed"
    assert type(request.cost.train).model_validate(request.cost.train.model_dump(mode="json")) == request.cost.train


def test_a_streamed_turn_holds_the_activations_passing_once() -> None:
    # l0.fc1 of 8 samples on the whole wse2: 8 x 4,096 B in and 8 x 16,384 B out, over 1,232 x 812
    # cores; its op model's tiles (output stationary: its operand chunks and output tile) hold them, so
    # the turn's buffers are the weights' tile twice, its fp32 gradients, and the larger of the two
    from wsealloc.cost.streaming import batched

    arch = load_arch("wse2")
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), arch, CostOptions(train=TrainingOptions()))
    work = costs.by_name("l0.fc1").work
    assert isinstance(work, TrainingWork)
    rc = np.array([arch.rows]), np.array([arch.cols])
    cores = arch.rows * arch.cols
    passing = -(-(4_096 + 16_384) * 8 // cores)
    turn = grid_costs(StreamedWork(work, 8), arch, costs.options, Dataflow.STREAM, *rc).sram_parts()
    held = set()
    for dataflow in batched(work.forward, 8).dataflows():
        parts = grid_costs(batched(work.forward, 8), arch, costs.options, dataflow, *rc, in_place=True).sram_parts()
        tile = int(parts.weights[0])
        held.add(2 * tile + tile * 2 + max(int(parts.buffers[0]), passing))  # fp32 gradients: 2x the fp16 tile
    assert int(turn.buffers[0]) in held


def test_a_plan_with_the_forms_records_them_and_verifies(tmp_path: Path) -> None:
    import json

    from wsealloc.plan.verify import verify_plan

    path = tmp_path / "s.json"
    out = ws.solve(
        TRANSFORMER,
        "tiny",
        train=True,
        train_batch=8,
        mode="streaming",
        attention="recomputed",
        checkpoints="offwafer",
        sets=["cluster.offwafer_bytes_per_s=1e9"],
        output=path,
    )
    assert out.plan.objective.throughput_samples_per_s > 0
    train = json.loads(path.read_text())["request"]["cost"]["train"]
    assert train["attention"] == "recomputed" and train["checkpoints"] == "offwafer"
    assert verify_plan(path).ok


@pytest.mark.slow
def test_the_streamed_segment_length_is_the_fastest_of_those_tried_and_verified(tmp_path: Path) -> None:
    import json

    from wsealloc.plan.verify import verify_plan
    from wsealloc.strategy.pipeline import segment_lengths

    common: dict[str, object] = {
        "train": True,
        "train_batch": 8,
        "mode": "streaming",
        "place": False,
        "attention": "recomputed",
        "checkpoints": "offwafer",
        "sets": ["cluster.offwafer_bytes_per_s=1e9"],
    }
    path = tmp_path / "s.json"
    out = ws.solve(TRANSFORMER, "tiny", output=path, **common)  # type: ignore[arg-type]
    decision = out.plan.decision
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), CostOptions(train=TrainingOptions()))
    assert decision.segment in segment_lengths(costs)  # type: ignore[attr-defined]
    # by hand: every length tried, at the chosen micro-batch, is no faster
    for length in segment_lengths(costs):
        fixed = ws.solve(TRANSFORMER, "tiny", micro_batch=decision.batch, recompute_segment=length, **common)  # type: ignore[arg-type, attr-defined]
        assert fixed.plan.objective.value_cycles >= out.plan.objective.value_cycles
    assert json.loads(path.read_text())["cost"]["train"]["segment"] == decision.segment  # type: ignore[attr-defined]
    assert verify_plan(path).ok
    doc = json.loads(path.read_text())
    doc["decision"]["segment"] = 99
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    report = verify_plan(tmp_path / "bad.json")
    assert not report.ok and "segment" in str(report.violations[0])


def test_a_streamed_turn_reads_none_of_the_pipelines_bookkeeping() -> None:
    # the streamed search costs each StreamedWork.cost_key once (a model's repeated layers): two layers'
    # kernels differ in the pipeline's samples in flight, segment and replay window, never in a turn's cost
    arch = load_arch("wse2")
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), arch, CostOptions(train=TrainingOptions()))
    forms = {kc.kernel.name: f for kc, f in zip(costs.kernels, streamed_forms(costs), strict=True)}
    rc = np.array([arch.rows]), np.array([arch.cols])
    # (l1.qkv starts a segment where l0.qkv does not: its stash from inside the segment differs, so does its key)
    assert forms["l0.qkv"].cost_key != forms["l1.qkv"].cost_key
    for name in ("fc1", "softmax"):
        first, second = replace(forms[f"l0.{name}"], batch=4), replace(forms[f"l1.{name}"], batch=4)
        assert first != second and first.cost_key == second.cost_key
        for recompute in (False, True):
            a = grid_costs(replace(first, recompute=recompute), arch, costs.options, Dataflow.STREAM, *rc)
            b = grid_costs(replace(second, recompute=recompute), arch, costs.options, Dataflow.STREAM, *rc)
            assert (int(a.latency[0]), int(a.sram_bytes[0])) == (int(b.latency[0]), int(b.sram_bytes[0]))
