"""Training in micro-batches (``--train-batch`` the global batch, ``--micro-batch``; docs/cost-model.md,
"Micro-batches"): the memory a micro-batch sizes and the fill, drain and update a global batch adds,
by hand on the tiny transformer; the micro-batch the solver chooses against brute force over every
size, in the layer pipeline and streamed; plans without a micro-batch verify as before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS

import wsealloc.api as ws
from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, StreamedWork, TrainingWork, grid_costs
from wsealloc.cost.model import TrainingOptions
from wsealloc.errors import UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels.streaming import micro_batches
from wsealloc.opmodels.table import pipeline_shape
from wsealloc.pipeline import build_costs
from wsealloc.plan.verify import verify_plan
from wsealloc.request import SolveRequest

TRANSFORMER = MODELS / "tiny" / "transformer.onnx"
BANDWIDTH = "cluster.offwafer_bytes_per_s=150e9"
R, C = np.array([8]), np.array([8])


def _work(name: str, micro: int | None, batch: int = 8) -> tuple[TrainingWork, CostOptions]:
    options = CostOptions(train=TrainingOptions(batch=batch, micro_batch=micro))
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), options)
    work = costs.by_name(name).work
    assert isinstance(work, TrainingWork)
    return work, options


def test_the_micro_batch_sizes_tried_cover_the_batch_in_each_count() -> None:
    # ceil(8 / n) for n = 1..8: 8, 4, 3, 2, 2, 2, 2, 1 (5, 6, 7 pad more for the same count as 8 or 4)
    assert micro_batches(8) == [1, 2, 3, 4, 8]
    assert micro_batches(99) == sorted({-(-99 // n) for n in range(1, 100)})
    assert 11 in micro_batches(99) and 33 in micro_batches(99)  # the sizes the vendor's compiler tried
    assert micro_batches(1) == [1]


def test_the_stash_and_its_checkpoints_are_the_micro_batchs_the_accumulators_are_not() -> None:
    # l0.fc1 at stage 5 of D = 21 stages keeps 2 (21 - 1 - 5) + 1 = 25 inputs in flight, one per
    # micro-batch: each 32 tokens x 64 x 2 B = 4,096 B a sample; on 8 x 8 = 64 cores
    (one, _), (four, options) = _work("l0.fc1", 1), _work("l0.fc1", 4)
    assert one.in_flight == four.in_flight == 25
    assert one.forward.in_bytes == 4_096 and four.forward.in_bytes == 4 * 4_096
    arch = load_arch("tiny")
    p1 = grid_costs(one, arch, options, Dataflow.TRAIN, R, C).sram_parts()
    p4 = grid_costs(four, arch, options, Dataflow.TRAIN, R, C).sram_parts()
    assert p1.stash is not None and p4.stash is not None
    assert int(p1.stash[0]) == 4_096 * 25 // 64 == 1_600
    assert int(p4.stash[0]) == 4 * 4_096 * 25 // 64 == 6_400
    # the fp32 gradient accumulators and Adam's state belong to the parameters (64 x 256 + 256 = 16,640):
    # the same whatever the micro-batch (gradients accumulate over the micro-batches in place)
    assert p1.grads is not None and p4.grads is not None and int(p1.grads[0]) == int(p4.grads[0]) == 2 * 576
    assert p1.optimizer is not None and p4.optimizer is not None
    assert int(p1.optimizer[0]) == int(p4.optimizer[0]) == -(-16_640 * 12 // 64) == 3_120
    # recomputing, l0.qkv keeps its 4,096 B from l0.ln1 (inside its segment) for 2 (t - d) + 1 = 7
    # micro-batches, not 37: the replay's window, in micro-batches of 4 samples
    qkv, _ = _work("l0.qkv", 4)
    assert qkv.in_flight == 37 and qkv.replay_window == 7 and qkv.segment_input_bytes == 4 * 4_096
    pr = grid_costs(qkv, arch, options, Dataflow.TRAIN_RECOMPUTE, R, C).sram_parts()
    assert pr.stash is not None and int(pr.stash[0]) == 4 * 4_096 * 7 // 64 == 1_792


def test_the_fill_drain_and_update_of_a_global_batch_by_hand() -> None:
    # l0.fc1 on 8 x 8 (4 MACs and 4 vector ops a cycle a core): forward of one sample 2,352 cycles
    # (weight stationary); backward = 2 products (input and weight gradients) x 2,352 + the epilogue's
    # derivative 2 x 73,728 vector ops / 64 cores / 4 = 576: 5,280; Adam's update 16,640 x 12 / 64 / 4
    # = 780 cycles once per update. Without micro-batches (a 1/8 share of the update per sample):
    # 2,352 + 5,280 + ceil(780 / 8) = 7,730.
    none, options = _work("l0.fc1", None)
    arch = load_arch("tiny")
    assert int(grid_costs(none, arch, options, Dataflow.TRAIN, R, C).latency[0]) == 2_352 + 5_280 + 98 == 7_730
    # micro-batches of 1: a global batch of 8 takes 8 steps and the fill and drain, 2 (D - 1) = 40
    # steps (D = 21), then the update: (48 x 7,632 + 780) / 8 = 45,889.5 -> 45,890 cycles a sample
    one, options = _work("l0.fc1", 1)
    assert one.fill_drain == 40 and one.steps == 48
    assert int(grid_costs(one, arch, options, Dataflow.TRAIN, R, C).latency[0]) == -(-(48 * 7_632 + 780) // 8) == 45_890
    # micro-batches of 4: forward 9,360, backward 2 x 9,360 + 4 x 576 = 21,024; 2 + 40 steps
    four, options = _work("l0.fc1", 4)
    assert four.steps == 42
    step = 9_360 + 2 * 9_360 + 4 * 576
    assert int(grid_costs(four, arch, options, Dataflow.TRAIN, R, C).latency[0]) == -(-(42 * step + 780) // 8) == 159_614


def test_a_streamed_micro_batch_pads_its_last_pass() -> None:
    # 3 samples a pass for a global batch of 8: 3 passes, the last one padded: 9 / 8 of a pass of 3 per
    # sample, against 1 / 3 of it with a batch of 3 (and no global batch): 3 x turn / 8 vs turn / 3
    arch = load_arch("tiny", (BANDWIDTH,))
    work, options = _work("l0.fc1", None)
    rc = np.array([16]), np.array([24])
    per_pass = grid_costs(StreamedWork(work, 3), arch, options, Dataflow.STREAM, *rc)
    micro = grid_costs(StreamedWork(work, 3, global_batch=8), arch, options, Dataflow.STREAM, *rc)
    turn = int(per_pass.latency[0]) * 3  # (the turn of a pass of 3 is a multiple of 3 here)
    assert int(per_pass.latency[0]) == turn // 3
    assert int(micro.latency[0]) == -(-turn * 3 // 8)
    assert int(micro.sram_bytes[0]) == int(per_pass.sram_bytes[0])  # a pass holds 3 samples either way


# (the searched segment lengths in the slow group: 8 more solves each)
@pytest.mark.parametrize(
    ("mode", "segment"),
    [
        ("pipelined", 3),
        pytest.param("pipelined", None, marks=pytest.mark.slow),
        pytest.param("streaming", None, marks=pytest.mark.slow),
    ],
)
def test_the_chosen_micro_batch_is_the_brute_force_optimum(mode: str, segment: int | None, tmp_path: Path) -> None:
    # (segment None: each size's recomputation segment length searched too, in the choice and by hand)
    common: dict[str, object] = {"train": True, "train_batch": 8, "mode": mode, "place": False, "sets": [BANDWIDTH]}
    if segment is not None:
        common["recompute_segment"] = segment
    plans = {m: ws.solve(TRANSFORMER, "tiny", micro_batch=m, **common).plan.objective for m in range(1, 9)}
    brute = {m: o.value_cycles for m, o in plans.items()}
    out = ws.solve(TRANSFORMER, "tiny", output=tmp_path / "p.json", **common)
    chosen = out.plan.decision.micro_batch if mode == "pipelined" else out.plan.decision.batch  # type: ignore[attr-defined]
    best = min(brute.values())
    assert out.plan.objective.value_cycles == best == brute[chosen]
    assert chosen == min(m for m, v in brute.items() if v == best)  # the least among equals
    # the plan's bound holds over every micro-batch: the least of theirs (the pipeline's: the optimum)
    assert out.plan.objective.bound_cycles == min(o.bound_cycles for o in plans.values())
    if mode == "pipelined":
        assert out.plan.objective.bound_cycles == best
    assert verify_plan(tmp_path / "p.json").ok


def test_a_plan_without_a_micro_batch_verifies_as_before_and_a_tampered_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a plan of an earlier release: a global batch of 8 as a 1/8 share of the update, no fill or drain
    with monkeypatch.context() as patch:
        patch.setattr(SolveRequest, "micro_batching", property(lambda self: False))
        old = ws.solve(TRANSFORMER, "tiny", train=True, train_batch=8, place=False, output=tmp_path / "old.json")
    doc = json.loads((tmp_path / "old.json").read_text())
    assert "micro_batch" not in doc["decision"] and "micro_batch" not in doc["request"]
    assert verify_plan(tmp_path / "old.json").ok
    new = ws.solve(TRANSFORMER, "tiny", train=True, train_batch=8, place=False, output=tmp_path / "new.json")
    assert new.plan.decision.micro_batch == 1  # type: ignore[attr-defined]
    assert new.plan.objective.value_cycles > old.plan.objective.value_cycles  # the fill and drain count now
    doc = json.loads((tmp_path / "new.json").read_text())
    doc["decision"]["micro_batch"] = 5  # 5 pads more than 4 for two micro-batches: never tried
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    report = verify_plan(tmp_path / "bad.json")
    assert not report.ok and "micro_batch" in str(report.violations[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"micro_batch": 2}, "give --train"),
        ({"train": True, "train_batch": 4, "micro_batch": 8}, "over the global batch"),
        ({"train": True, "train_batch": 4, "micro_batch": 2, "mode": "streaming", "stream_batch": 2}, "give one"),
        ({"train": True, "train_batch": 4, "wafers": "auto"}, "give --micro-batch"),
    ],
)
def test_what_micro_batching_refuses(options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ws.solve(TRANSFORMER, "tiny", place=False, sets=[BANDWIDTH], **options)  # type: ignore[arg-type]


def test_over_two_wafers_the_fill_and_drain_cross_each_boundary_both_ways() -> None:
    costs = build_costs(
        OnnxSource(path=str(TRANSFORMER)), load_arch("tiny"), CostOptions(train=TrainingOptions(batch=8, micro_batch=2))
    )
    from wsealloc.pipeline import over_wafers

    stages = pipeline_shape(costs.kgraph)[1]
    cut = over_wafers(costs, (0, 10, len(costs.kernels)))
    works = [kc.work for kc in cut.kernels if isinstance(kc.work, TrainingWork)]
    assert {w.fill_drain for w in works} == {2 * (stages - 1) + 2}


@pytest.mark.parametrize("arch", ["tiny", "wse2-measured"])
def test_the_work_floor_is_below_every_micro_batchs_proven_optimum(arch: str) -> None:
    # the bound that skips and ends the search (strategy.pipeline.micro_batch_floor), on the streaming
    # model and on the execution model measured on a WSE-2
    from wsealloc.pipeline import with_options
    from wsealloc.problem.objective import Throughput
    from wsealloc.strategy.pipeline import micro_batch_floor, micro_options, wafer_part

    options = CostOptions(train=TrainingOptions(batch=8))
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), load_arch(arch), options)
    for m in (1, 2, 4, 8):
        part = wafer_part(with_options(costs, micro_options(costs.options, m)), Throughput())
        assert part.bound is not None and part.bound.value is not None
        exact, growing = micro_batch_floor(costs, m, 1)
        assert growing <= exact <= part.bound.value


def test_auto_and_two_wafers_plan_micro_batches_that_verify(tmp_path: Path) -> None:
    auto = ws.solve(
        TRANSFORMER, "tiny", train=True, train_batch=8, mode="auto", place=False, sets=[BANDWIDTH], output=tmp_path / "a.json"
    )
    assert auto.plan.decision.strategy == "streaming" and auto.plan.decision.global_batch == 8  # type: ignore[attr-defined]
    assert verify_plan(tmp_path / "a.json").ok
    two = ws.solve(TRANSFORMER, "tiny", train=True, train_batch=8, wafers=2, place=False, output=tmp_path / "w.json")
    assert two.plan.decision.micro_batch is not None and len(two.plan.stages) == 2  # type: ignore[attr-defined]
    assert verify_plan(tmp_path / "w.json").ok


def test_stream_batch_keeps_a_pass_per_update_and_the_pipeline_refuses_it() -> None:
    streamed = ws.solve(
        TRANSFORMER, "tiny", train=True, train_batch=8, mode="streaming", stream_batch=4, place=False, sets=[BANDWIDTH]
    )
    assert streamed.plan.decision.batch == 4 and streamed.plan.decision.global_batch is None  # type: ignore[attr-defined]
    # the layer pipeline has no streamed pass: --stream-batch there was dropped unsaid, now it is refused
    with pytest.raises(UsageError, match="give --mode streaming or auto with it"):
        ws.solve(TRANSFORMER, "tiny", train=True, train_batch=8, stream_batch=4, place=False)


def test_the_search_stopped_by_the_time_limit_says_the_larger_sizes_are_not_proven() -> None:
    from wsealloc.budget import Deadline
    from wsealloc.request import build_request
    from wsealloc.strategy.pipeline import choose_micro_batch

    request = build_request(TRANSFORMER, "wse2-measured", train=True, train_batch=8, place=False)
    costs = build_costs(request.onnx_model, request.machine, request.cost)
    # (on the measured WSE-2 the work floor does not rule out 2 at once, as it does on tiny)
    table, part, why = choose_micro_batch(costs, request, Deadline.after(0.0))
    assert part is not None and table.options.train is not None and table.options.train.micro_batch == 1
    assert "the time limit stopped the search at 2" in why  # one size costed, the next not proven slower


def test_a_weightless_kernel_streams_its_samples_on_strips_when_that_is_faster_in_no_more_sram(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wsealloc.cost.streaming as streaming

    arch = load_arch("wse2")
    costs = build_costs(OnnxSource(path=str(TRANSFORMER)), arch, CostOptions(train=TrainingOptions()))
    context, fc1 = costs.by_name("l0.context").work, costs.by_name("l0.fc1").work
    assert isinstance(context, TrainingWork) and isinstance(fc1, TrainingWork)
    # 8 samples: 1, 2, 3, 4 and 8 strips give 8, 4, 3, 2 and 1 samples a strip (5-7 strips: as 8)
    assert streaming.strips(StreamedWork(context, 8), 24) == [1, 2, 3, 4, 8]
    assert streaming.strips(StreamedWork(fc1, 8), 24) == [1]  # its weights stream once for the whole wafer
    rc = np.array([arch.rows]), np.array([arch.cols])
    work = StreamedWork(context, 8)
    with_strips = grid_costs(work, arch, costs.options, Dataflow.STREAM, *rc)
    monkeypatch.setattr(streaming, "strips", lambda work, cols: [1])
    without = grid_costs(work, arch, costs.options, Dataflow.STREAM, *rc)
    # the attention's context output is one head wide (16 columns of the wafer's 1,232): strips of
    # the wafer, each a share of the samples, are faster in no more SRAM a core
    assert with_strips.latency[0] < without.latency[0]
    assert with_strips.sram_bytes[0] <= without.sram_bytes[0]
