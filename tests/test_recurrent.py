"""Recurrent layers (LSTM, GRU, RNN) costed from their ONNX definitions, by hand: MACs per step and
direction = gates x (input + hidden) x hidden x batch; vector work of the activations and the state
update; the steps serialized on the grid (latency = steps x one step's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import build as builders
import numpy as np
import pytest
from onnx import TensorProto, helper

from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, KernelWork, grid_costs, kernel_work
from wsealloc.frontend import import_onnx
from wsealloc.graph.kernels import build_kernels
from wsealloc.graph.opclass import KernelKind


def _recurrent(
    path: Path,
    op: str,
    *,
    seq: int,
    batch: int,
    inp: int,
    hidden: int,
    directions: int = 1,
    bias: bool = False,
    peepholes: bool = False,
    lens: list[int] | None = None,
    layout: int = 0,
    opset: int = 14,
    **attrs: object,
) -> Path:
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [
        helper.make_tensor(
            "W", TensorProto.FLOAT, [directions, gates * hidden, inp], [0.1] * (directions * gates * hidden * inp)
        ),
        helper.make_tensor(
            "R", TensorProto.FLOAT, [directions, gates * hidden, hidden], [0.1] * (directions * gates * hidden**2)
        ),
    ]
    inputs = ["x", "W", "R"]
    if bias or lens is not None or peepholes:
        inputs.append("B" if bias else "")
        if bias:
            inits.append(
                helper.make_tensor(
                    "B", TensorProto.FLOAT, [directions, 2 * gates * hidden], [0.0] * (2 * directions * gates * hidden)
                )
            )
    if lens is not None or peepholes:
        inputs.append("lens" if lens is not None else "")
        if lens is not None:
            inits.append(helper.make_tensor("lens", TensorProto.INT32, [batch], lens))
    if peepholes:
        inputs += ["", "", "P"]
        inits.append(helper.make_tensor("P", TensorProto.FLOAT, [directions, 3 * hidden], [0.0] * (3 * directions * hidden)))
    direction = "bidirectional" if directions == 2 else "forward"
    if layout:
        attrs["layout"] = layout
    node = helper.make_node(op, inputs, ["y"], name="rnn", hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph([node], "g", [x], [y], initializer=inits)
    return builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def _work(path: Path) -> KernelWork:
    g = import_onnx(path)
    kernels = build_kernels(g).kernels
    assert len(kernels) == 1 and kernels[0].kind is KernelKind.RECURRENT
    work = kernel_work(kernels[0], g, load_arch("tiny"), CostOptions())
    assert isinstance(work, KernelWork)
    return work


def test_lstm_bidirectional_with_bias_and_peepholes_by_hand(tmp_path: Path) -> None:
    w = _work(
        _recurrent(tmp_path / "lstm.onnx", "LSTM", seq=5, batch=2, inp=3, hidden=4, directions=2, bias=True, peepholes=True)
    )
    # per step, direction and sequence: 4 gates x (3 + 4) x 4 MACs = 112; 5 steps x 2 directions x batch 2
    assert w.macs == 5 * 2 * 2 * (4 * 4 * (3 + 4)) == 2240
    # per step, direction and sequence: activations H x (3 sigmoids + 2 tanh) x 4 ops = 80; cell update
    # c = f*c + i*g, h = o*tanh(c): 4H = 16; biases Wb + Rb: 2 x 4H = 32; peepholes 3 mul + 3 add: 6H = 24
    assert w.vector_ops == 5 * 2 * 2 * (80 + 16 + 32 + 24) == 3040
    # one step's GEMM: G = directions, M = batch, N = gates x hidden, K = input + hidden
    assert (w.g, w.m, w.n, w.k, w.rows, w.cols) == (2, 2, 16, 7, 2, 2 * 16)
    assert (w.steps, w.step_syncs) == (5, 1)
    # W and R both resident (bf16): 2 x 16 x 3 + 2 x 16 x 4 elements; the state h fed back: 2 x 2 x 4
    assert w.weight_b and w.b_bytes == (2 * 16 * 3 + 2 * 16 * 4) * 2
    assert w.feedback_bytes == 2 * 2 * 4 * 2
    assert w.in_bytes == 5 * 2 * 3 * 2  # X only (the initial states are absent)


@pytest.mark.parametrize(("lbr", "syncs"), [(1, 1), (0, 2)])
def test_gru_linear_before_reset_by_hand(tmp_path: Path, lbr: int, syncs: int) -> None:
    w = _work(_recurrent(tmp_path / "gru.onnx", "GRU", seq=3, batch=1, inp=2, hidden=5, bias=True, linear_before_reset=lbr))
    assert w.macs == 3 * (3 * 5 * (2 + 5)) == 315
    # activations H x (2 sigmoids + 1 tanh) x 4 = 60; r*h (or r*(hR + Rb)) 1 and h = (1-z)*h~ + z*h 4: 5H = 25;
    # biases 2 x 3H = 30. The same count either way: linear_before_reset moves the product, not the work
    assert w.vector_ops == 3 * (60 + 25 + 30) == 345
    # but without it the reset gate must be known before the recurrent product of the candidate: two
    # dependent phases per step, each a round over the grid
    assert (w.steps, w.step_syncs) == (3, syncs)


def test_rnn_layout_activation_clip_and_sequence_lens_by_hand(tmp_path: Path) -> None:
    path = _recurrent(
        tmp_path / "rnn.onnx", "RNN", seq=6, batch=2, inp=3, hidden=4, layout=1, lens=[3, 2], activations=["Relu"], clip=1.0
    )
    w = _work(path)
    # layout 1: X is [batch, seq, input]; constant sequence_lens cap the steps at the longest, 3
    assert w.steps == 3
    assert w.macs == 3 * 2 * (1 * 4 * (3 + 4)) == 168
    # Relu 1 op x H = 4; clip: a min and a max per gate element 2 x 4 = 8
    assert w.vector_ops == 3 * 2 * (4 + 8) == 72
    # the default activation is Tanh (4 ops): 6 steps (no lens) x 2 x 4 x 4
    assert _work(_recurrent(tmp_path / "rnn2.onnx", "RNN", seq=6, batch=2, inp=3, hidden=4)).vector_ops == 6 * 2 * 16


def test_steps_serialize_on_the_grid(tmp_path: Path) -> None:
    """The sequence is never split over cores: a recurrent kernel's latency on any grid is exactly
    steps x (one step's latency), with the hidden state's round trip in every step."""
    arch = load_arch("tiny")
    w = _work(_recurrent(tmp_path / "lstm.onnx", "LSTM", seq=8, batch=4, inp=32, hidden=16, bias=True))
    step = replace(
        w, steps=1, macs=w.macs // 8, vector_ops=w.vector_ops // 8, in_bytes=w.in_bytes // 8, out_bytes=w.out_bytes // 8
    )
    for flow in w.dataflows():
        # the grid splits K (WS) or the batch (OS) over rows and the gate columns over columns: never the steps
        assert w.split_extents(flow) == step.split_extents(flow)
        r, c = np.array([1, 2, 4, 1, 3]), np.array([1, 4, 8, 64, 2])
        many, one = grid_costs(w, arch, CostOptions(), flow, r, c), grid_costs(step, arch, CostOptions(), flow, r, c)
        assert (many.latency == 8 * one.latency).all()
        assert (many.compute_cycles == 8 * one.compute_cycles).all()
    # by hand, weight stationary on 2 x 4 cores (tiny: 4 MACs and 4 vector ops per cycle, 4 B/cycle links, 1 cycle a hop):
    # one step: MACs per core = batch x ceil(K/r) x ceil(N/c) = 4 x 24 x 16 = 1,536 -> 384 cycles; vector ops per
    # step (16 x 20 + 16 x 4 + 2 x 64) x 4 = 2,048, spread over the core's output tile (2 x 16 of 4 x 64, as
    # every kernel's epilogue): per core 2,048 x 32 / 256 = 256 ops, 64 cycles: 448.
    # NoC: ingress (X_t 4 x 32 x 2 B + h 4 x 16 x 2 B) / 2 rows / 4 = 48; column reduction 4 x 16 x 4 B / 4 = 64;
    # egress Y_t 4 x 16 x 2 B / 4 cols / 4 = 8: 64. Latency per step max(448, 64) + fill (2 + 4) = 454; 8 steps: 3,632
    g = grid_costs(w, arch, CostOptions(), Dataflow.WEIGHT_STATIONARY, np.array([2]), np.array([4]))
    assert int(g.compute_cycles[0]) == 8 * 448 and int(g.noc_cycles[0]) == 8 * 64 and int(g.latency[0]) == 8 * 454


def test_more_steps_never_faster(tmp_path: Path) -> None:
    arch = load_arch("tiny")
    short = _work(_recurrent(tmp_path / "a.onnx", "GRU", seq=4, batch=1, inp=8, hidden=8))
    long = _work(_recurrent(tmp_path / "b.onnx", "GRU", seq=16, batch=1, inp=8, hidden=8))
    r, c = np.array([1, 2, 4]), np.array([2, 4, 8])
    for flow in short.dataflows():
        a, b = grid_costs(short, arch, CostOptions(), flow, r, c), grid_costs(long, arch, CostOptions(), flow, r, c)
        assert (b.latency >= 4 * a.latency - 4).all() and (b.latency > a.latency).all()
