"""``--cost-model ispd2020``: ONNX convs costed with the ISPD-2020 contest's conv formula.

Hand-computed values of the mapping, the per-grid search against brute force, a solve + verify of a
tiny conv model, and the other kernels unchanged against the standard model.
"""

from __future__ import annotations

import io
import json
import math
import random
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from build import save, weight
from onnx import TensorProto, helper

from wsealloc.arch import Arch
from wsealloc.cli import main
from wsealloc.cost import CostModelName, CostOptions, Dataflow, IspdConvWork, KernelWork, grid_costs, kernel_work
from wsealloc.cost.ispd2020 import conv_memory, conv_time
from wsealloc.cost.ispd_conv import Fit, Machine, best_args, best_placed, contest_conv
from wsealloc.frontend import import_onnx
from wsealloc.frontend.sources import OnnxSource
from wsealloc.graph.contest import ConvArgs
from wsealloc.graph.kernels import build_kernels
from wsealloc.opmodels import Reason
from wsealloc.opmodels.enumerate import classify
from wsealloc.pipeline import build_costs
from wsealloc.plan.verify import verify_plan

ISPD = CostOptions(model=CostModelName.ISPD2020)


def _model(nodes: list[onnx.NodeProto], x_shape: list[int], y: str, inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _one_conv(tmp_path: Path, **attrs: object) -> str:
    """x[1,4,6,6] -> Conv(w[8,4,3,3], pads 1, ``attrs``) -> y."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1], **attrs)
    return save(_model([node], [1, 4, 6, 6], "y", [weight("w", 8, 4, 3, 3)]), tmp_path / "conv.onnx")


def _conv_net(tmp_path: Path) -> str:
    """x[1,4,8,8] -> Conv 3x3 4->8 + Relu -> Conv 3x3 /2 8->16 -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm 16->10."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="relu1"),
        helper.make_node("Conv", ["b", "w2"], ["c"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MaxPool", ["c"], ["d"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["d"], ["e"], name="gap"),
        helper.make_node("Flatten", ["e"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g", "gb"], ["out"], name="fc"),
    ]
    inits = [weight("w1", 8, 4, 3, 3), weight("w2", 16, 8, 3, 3), weight("g", 16, 10), weight("gb", 10)]
    return save(_model(nodes, [1, 4, 8, 8], "out", inits), tmp_path / "convnet.onnx")


def _conv_work(path: str, arch: Arch) -> IspdConvWork:
    graph = import_onnx(path)
    (kernel,) = build_kernels(graph, fuse=True).kernels
    work = kernel_work(kernel, graph, arch, ISPD)
    assert isinstance(work, IspdConvWork)
    return work


# -- the ONNX mapping, by hand ---------------------------------------------------------------------
def test_onnx_conv_on_a_grid_by_hand(tmp_path: Path, tiny_arch: Arch) -> None:
    work = _conv_work(_one_conv(tmp_path), tiny_arch)
    # X [1,4,6,6], W [8,4,3,3]: H = W = 6, R = S = 3, C = 4, K = 8, strides 1, batch 1, halo 2 x 2
    assert work.conv == ConvArgs(H=6, W=6, R=3, S=3, C=4, K=8, T=1, U=1)
    assert (work.batch, work.halo_h, work.halo_w) == (1, 2, 2)
    assert work.dataflows() == (Dataflow.ISPD_CONV,)
    assert work.split_extents(Dataflow.ISPD_CONV) == (6 * 6 * 5, 3 * 8)
    # Grid 10 rows x 12 columns, upright (R0): k' = min(K, 12 // 3) = 4, ceil(8/4) = 2.
    # Rows h' w' (c'+1) <= 10; least ceil(6/h') ceil(6/w') ceil(4/c'):
    #   c'=4 (x1): h'w' <= 2 -> 3 x 6 = 18            c'=3 (x2): h'w' <= 2 -> 18 x 2 = 36
    #   c'=2 (x2): h'w' <= 3 -> 2 x 6 = 12 -> 24      c'=1 (x4): h'w' <= 5, best (2,2): 3 x 3 = 9 -> 36
    # so 18 at (h', w', c') = (1, 2, 4) or (2, 1, 4) (same memory and height; the smaller h' wins).
    # time = 18 x 2 x R S = 324 units -> ceil(324 / 4 MACs per cycle) = 81 cycles.
    # Turned (R90, the 12 x 10 grid): k' = 3, ceil(8/3) = 3; rows <= 12: c'=2 with (2,2): 9 x 2 = 18,
    # c'=4 with h'w' <= 2: 18 -> 18 x 3 x 9 = 486 units = 122 cycles: R0 wins.
    # memory of (1, 2, 4, 4): C/c' K/k' R S + (W+2)/w' (H+2)/h' K/k' = 1 x 2 x 9 + 4 x 8 x 2 = 82 words = 164 B
    g = grid_costs(work, tiny_arch, ISPD, Dataflow.ISPD_CONV, np.array([10]), np.array([12]))
    assert (int(g.latency[0]), int(g.compute_cycles[0]), int(g.noc_cycles[0])) == (81, 81, 0)
    assert (int(g.sram_bytes[0]), float(g.waste[0])) == (164, 0.0)
    ch = best_placed(work.conv, Machine.of(tiny_arch), np.array([10]), np.array([12]))
    assert (int(ch.h[0]), int(ch.w[0]), int(ch.c[0]), int(ch.k[0]), bool(ch.rotated[0])) == (1, 2, 4, 4, False)
    assert (int(ch.units[0]), int(ch.height[0]), int(ch.width[0])) == (324, 10, 12)
    # the library's own formulas agree
    assert conv_time(work.conv, 1, 2, 4, 4) == 324
    assert conv_memory(work.conv, 1, 2, 4, 4) == Fraction(82)


def test_memory_limit_by_hand() -> None:
    conv = ConvArgs(H=2, W=2, R=1, S=1, C=4, K=3, T=1, U=1)
    # 9 columns: k' = 3 (ceil(3/3) = 1); memory = 4/c' + 4/(w'h') words; time = ceil(2/h') ceil(2/w') ceil(4/c').
    # 8 rows: time 4 at (1,1,4) mem 5, (2,2,1) mem 5, (1,2,2)/(2,1,2) mem 4, (1,2,3)/(2,1,3) mem 10/3.
    roomy = Machine(word_bytes=2, limit_bytes=8, macs_per_cycle=1, vector_ops_per_cycle=1)  # 4 words
    ch = best_args(conv, roomy, np.array([8]), np.array([9]))
    assert int(ch.fit[0]) == Fit.FITS
    assert (int(ch.h[0]), int(ch.w[0]), int(ch.c[0]), int(ch.k[0]), int(ch.cycles[0])) == (1, 2, 3, 3, 4)
    assert int(ch.memory_bytes[0]) == 7  # ceil(2 x 10/3)
    # 3 words: nothing fits; the least-memory arguments are shown (and over the limit)
    tight = Machine(word_bytes=2, limit_bytes=6, macs_per_cycle=1, vector_ops_per_cycle=1)
    ch = best_args(conv, tight, np.array([8, 1, 8]), np.array([9, 9, 2]))
    assert [int(f) for f in ch.fit] == [Fit.MEMORY, Fit.NO_FIT, Fit.NO_FIT]
    assert int(ch.memory_bytes[0]) == 7


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({"strides": [2, 1]}, (ConvArgs(H=6, W=6, R=3, S=3, C=4, K=8, T=2, U=1), 1, 2, 2)),
        ({"dilations": [2, 3]}, (ConvArgs(H=6, W=6, R=3, S=3, C=4, K=8, T=1, U=1), 1, 4, 6)),
    ],
)
def test_strides_and_dilations(tmp_path: Path, tiny_arch: Arch, attrs: dict[str, object], expected: tuple[object, ...]) -> None:
    work = _conv_work(_one_conv(tmp_path, **attrs), tiny_arch)
    assert (work.conv, work.batch, work.halo_h, work.halo_w) == expected


def test_grouped_1d_and_3d_convs(tmp_path: Path, tiny_arch: Arch) -> None:
    grouped = helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=4, pads=[1, 1, 1, 1])
    graph = import_onnx(save(_model([grouped], [2, 4, 6, 6], "y", [weight("w", 4, 1, 3, 3)]), tmp_path / "dw.onnx"))
    # depthwise: C = C_in / group = 1 per output, K = C_out = 4; batch 2
    assert contest_conv(graph.node_by_name["dw"], graph) == (ConvArgs(H=6, W=6, R=3, S=3, C=1, K=4, T=1, U=1), 2, 2, 2)
    one_d = helper.make_node("Conv", ["x", "w"], ["y"], name="c1", strides=[2])
    graph = import_onnx(save(_model([one_d], [1, 4, 10], "y", [weight("w", 8, 4, 3)]), tmp_path / "c1.onnx"))
    assert contest_conv(graph.node_by_name["c1"], graph) == (ConvArgs(H=10, W=1, R=3, S=1, C=4, K=8, T=2, U=1), 1, 2, 0)
    three_d = helper.make_node("Conv", ["x", "w"], ["y"], name="c3")
    graph = import_onnx(save(_model([three_d], [1, 2, 4, 4, 4], "y", [weight("w", 3, 2, 1, 1, 1)]), tmp_path / "c3.onnx"))
    (kernel,) = build_kernels(graph, fuse=True).kernels
    work = kernel_work(kernel, graph, tiny_arch, ISPD)
    assert contest_conv(graph.node_by_name["c3"], graph) is None
    assert type(work) is KernelWork  # a 3-D conv keeps the standard model


# -- the per-grid search against brute force ----------------------------------------------------------
def _brute(conv: ConvArgs, m: Machine, r: int, c: int, vector_ops: int) -> tuple[int, Fraction] | None:
    """(cycles, memory words) of the best legal arguments upright on r x c, by trying every one."""
    best: tuple[int, Fraction] | None = None
    for h in range(1, conv.H + 1):
        for w in range(1, conv.W + 1):
            for cc in range(1, conv.C + 1):
                if h * w * (cc + 1) > r:
                    continue
                for k in range(1, min(conv.K, c // 3) + 1):
                    mem = conv_memory(conv, h, w, cc, k)
                    if mem * m.word_bytes > m.limit_bytes:
                        continue
                    cycles = -(-conv_time(conv, h, w, cc, k) // m.macs_per_cycle)
                    owned = -(-conv.H // h) * -(-conv.W // w) * -(-conv.K // k)
                    epilogue = math.ceil(math.ceil(vector_ops * owned / (conv.H * conv.W * conv.K)) / m.vector_ops_per_cycle)
                    key = (max(cycles, epilogue), mem)
                    best = key if best is None or key < best else best
    return best


def test_search_matches_brute_force() -> None:
    rng = random.Random(7)
    rr, cc = (a.ravel() for a in np.meshgrid(np.arange(1, 15), np.arange(1, 15), indexing="ij"))
    for _ in range(12):
        conv = ConvArgs(
            H=rng.randint(1, 5),
            W=rng.randint(1, 5),
            R=rng.choice([1, 3]),
            S=rng.choice([1, 3]),
            C=rng.randint(1, 5),
            K=rng.randint(1, 6),
            T=rng.choice([1, 2]),
            U=rng.choice([1, 2]),
        )
        m = Machine(2, rng.choice([40, 120, 2000]), rng.choice([1, 4]), rng.choice([1, 2]))
        vector_ops = rng.choice([0, 50, 2000])
        upright = best_args(conv, m, rr, cc, vector_ops=vector_ops)
        either = best_placed(conv, m, rr, cc, vector_ops=vector_ops)
        for i, (r, c) in enumerate(zip(rr.tolist(), cc.tolist(), strict=True)):
            one = _brute(conv, m, r, c, vector_ops)
            both = min((b for b in (one, _brute(conv, m, c, r, vector_ops)) if b is not None), default=None)
            for got, want in ((upright, one), (either, both)):
                if want is None:
                    assert int(got.fit[i]) != Fit.FITS, (conv, r, c)
                    continue
                assert int(got.fit[i]) == Fit.FITS, (conv, r, c)
                want_bytes = math.ceil(want[1] * m.word_bytes)
                assert (int(got.cycles[i]), int(got.memory_bytes[i])) == (want[0], want_bytes), (conv, r, c)
            if int(either.fit[i]) != Fit.NO_FIT:  # the chosen rectangle lies inside the grid
                assert either.grid_rows_used[i] <= r and either.grid_cols_used[i] <= c


def test_a_grid_holding_no_rectangle_is_rejected_whatever_the_waste_threshold(tmp_path: Path, tiny_arch: Arch) -> None:
    work = _conv_work(_one_conv(tmp_path), tiny_arch)
    lax = CostOptions(model=CostModelName.ISPD2020, max_padding_waste=1.0)
    # a contest conv is at least 2 tall (h'w'(c'+1)) and 3 wide (3k'), upright or turned: one row holds nothing
    g = grid_costs(work, tiny_arch, lax, Dataflow.ISPD_CONV, np.array([1, 1, 2, 3]), np.array([2, 16, 3, 2]))
    reasons = [Reason(int(x)) for x in classify(tiny_arch, lax, g.rows, g.cols, g.sram_bytes, g.waste)]
    assert reasons == [Reason.NO_FIT, Reason.NO_FIT, Reason.LEGAL, Reason.LEGAL]


# -- plans -------------------------------------------------------------------------------------------
def _cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue() + err.getvalue()


def test_solve_and_verify_a_conv_net(tmp_path: Path) -> None:
    model = _conv_net(tmp_path)
    out = tmp_path / "plan.json"
    code, text = _cli("solve", model, "--arch", "tiny", "--cost-model", "ispd2020", "--time-limit", "5", "-o", str(out))
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert doc["cost"]["model"] == "ispd2020"
    flows = {k["name"]: k["dataflow"] for k in doc["kernels"]}
    assert flows["conv1"] == flows["conv2"] == "ispd"
    assert all(f != "ispd" for name, f in flows.items() if not name.startswith("conv"))
    assert all(k["placement"] is not None for k in doc["kernels"])
    report = verify_plan(out)
    assert report.ok, report.violations
    code, text = _cli("verify", str(out))
    assert code == 0, text
    # a tampered conv: its latency, then a grid too small for any rectangle
    conv = next(i for i, k in enumerate(doc["kernels"]) if k["dataflow"] == "ispd")
    for edit, needle in (
        ({"latency_cycles": doc["kernels"][conv]["latency_cycles"] + 1}, "latency_cycles"),
        ({"grid": [1, 2], "cores": 2}, "the kernel's rectangle does not fit the grid"),
    ):
        broken = json.loads(out.read_text())
        broken["kernels"][conv].update(edit)
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        report = verify_plan(path)
        assert not report.ok and any(needle in v for v in report.violations), report.violations


def test_other_kernels_keep_the_standard_model(tmp_path: Path, tiny_arch: Arch) -> None:
    source = OnnxSource(path=_conv_net(tmp_path))
    std = build_costs(source, tiny_arch, CostOptions())
    isp = build_costs(source, tiny_arch, ISPD)
    assert [kc.kernel.name for kc in std.kernels] == [kc.kernel.name for kc in isp.kernels]
    seen = 0
    for a, b in zip(std.kernels, isp.kernels, strict=True):
        if isinstance(b.work, IspdConvWork):
            seen += 1
            assert all(getattr(a.work, f.name) == getattr(b.work, f.name) for f in fields(KernelWork))
            continue
        assert type(b.work) is KernelWork and b.work == a.work
        for name in ("dataflow", "r", "c", "latency", "compute", "noc", "sram", "waste", "reason"):
            assert np.array_equal(getattr(a.table, name), getattr(b.table, name)), (a.kernel.name, name)
        assert np.array_equal(a.frontier.latency, b.frontier.latency)
    assert seen == 2


def test_cost_options_record_the_model() -> None:
    assert CostOptions.model_validate({"model": "ispd2020"}).model is CostModelName.ISPD2020
    assert CostOptions.model_validate({"model": "standard"}).model is CostModelName.STANDARD  # old plans
