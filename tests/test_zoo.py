"""The model zoo: every model loads, groups and costs; MAC counts match closed-form formulas and the
field's published figures (batch 1) within 1%. Expected values are computed here from the
architectures' definitions, never from the code under test."""

from __future__ import annotations

import pytest
from conftest import zoo

from wsealloc.arch import load_arch
from wsealloc.budget import Deadline
from wsealloc.cost import CostOptions
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import build_cost_table
from wsealloc.pipeline import load_kernels
from wsealloc.report.inspect import inspect_json


def decoder_macs(layers: int, seq: int, d: int, ffn: int, vocab: int, ffn_mats: int, kv_dim: int | None = None) -> int:
    """Transformer decoder/encoder: Q, O (d x d), K, V (d x kv_dim), FFN (ffn_mats matrices of d x ffn),
    attention QK^T and AV (seq x seq x d each), plus an LM head (seq x d x vocab)."""
    kv = d if kv_dim is None else kv_dim
    per_layer = seq * d * (2 * d + 2 * kv) + ffn_mats * seq * d * ffn + 2 * seq * seq * d
    return layers * per_layer + seq * d * vocab


def resnet50_macs() -> int:
    """ResNet-50 v1.5 (stride on the 3x3 conv), 224x224, 1000 classes."""
    total = 112 * 112 * 64 * 3 * 7 * 7  # stem
    size, cin = 56, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out = size // s
            total += size * size * cin * width  # 1x1 reduce (at input resolution)
            total += out * out * width * width * 9  # 3x3
            total += out * out * width * 4 * width  # 1x1 expand
            if b == 0:
                total += out * out * cin * 4 * width  # projection shortcut
            cin, size = 4 * width, out
    return total + 2048 * 1000


def vit_b16_macs() -> int:
    """ViT-B/16 at 224: patch embedding, 12 encoder layers over 197 tokens, 1000-class head."""
    patches, d = 14 * 14, 768
    embed = patches * d * (3 * 16 * 16)
    return embed + decoder_macs(12, patches + 1, d, 4 * d, 0, 2) + d * 1000


CASES = {
    # model: (closed form, the field's published figure)
    "gpt2.onnx": (decoder_macs(12, 1024, 768, 3072, 50257, 2), 145.82e9),
    "gpt2-xl.onnx": (decoder_macs(48, 1024, 1600, 6400, 50257, 2), None),
    "bert-base.onnx": (decoder_macs(12, 384, 768, 3072, 0, 2) + 768 * 768, 35.33e9),
    "bert-large.onnx": (decoder_macs(24, 384, 1024, 4096, 0, 2) + 1024 * 1024, None),
    "resnet50.onnx": (resnet50_macs(), 4.10e9),
    "vit-b16.onnx": (vit_b16_macs(), 17.56e9),
    "llama-7b.onnx": (decoder_macs(32, 2048, 4096, 11008, 32000, 3), 14_630.8e9),
    "llama-70b.onnx": (decoder_macs(80, 2048, 8192, 28672, 32000, 3, kv_dim=1024), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_mac_counts(name: str) -> None:
    closed, published = CASES[name]
    kgraph = load_kernels(OnnxSource(path=str(zoo(name))))
    costs = build_cost_table(kgraph, load_arch("wse2"), CostOptions(), check_feasible=False)
    total = inspect_json(costs)["summary"]["total_macs"]
    assert abs(total - closed) / closed < 0.01, (total, closed)
    if published is not None:
        assert abs(total - published) / published < 0.01, (total, published)


@pytest.mark.parametrize("name", ["gpt2.onnx", "bert-base.onnx", "resnet50.onnx", "vit-b16.onnx", "llama-7b.onnx"])
def test_zoo_fits_wse2_and_every_node_is_covered(name: str) -> None:
    kgraph = load_kernels(OnnxSource(path=str(zoo(name))))
    covered = sorted(n for k in kgraph.kernels for n in k.nodes)
    assert covered == sorted(n.name for n in kgraph.ops.nodes)
    costs = build_cost_table(kgraph, load_arch("wse2"), CostOptions())
    assert inspect_json(costs)["summary"]["fits_one_wafer"]


def test_llama_70b_does_not_fit_one_wafer() -> None:
    kgraph = load_kernels(OnnxSource(path=str(zoo("llama-70b.onnx"))))
    costs = build_cost_table(kgraph, load_arch("wse2"), CostOptions(), check_feasible=False)
    summary = inspect_json(costs)["summary"]
    assert not summary["fits_one_wafer"] and summary["weight_bytes"] > load_arch("wse2").wafer_sram_bytes


@pytest.mark.parametrize("name", ["gpt2.onnx", "bert-base.onnx", "resnet50.onnx", "vit-b16.onnx", "llama-7b.onnx"])
def test_cpsat_pulp_bisect_agree_on_zoo(name: str) -> None:
    from wsealloc.problem import build_problem
    from wsealloc.solvers import SolveOptions, Status, get_solver

    costs = build_cost_table(load_kernels(OnnxSource(path=str(zoo(name)))), load_arch("wse2"), CostOptions())
    problem = build_problem(costs)
    exact = get_solver("bisect")(problem, SolveOptions())
    greedy = get_solver("greedy")(problem, SolveOptions())
    assert exact.status is Status.OPTIMAL and greedy.objective is not None and exact.objective is not None
    assert exact.objective <= greedy.objective
    with_bound = SolveOptions(hint=greedy.choice, lower_bound=exact.objective, deadline=Deadline.after(60))
    for solver in ("cpsat", "pulp"):
        r = get_solver(solver)(problem, with_bound)
        assert (r.status, r.objective, r.cores_used) == (Status.OPTIMAL, exact.objective, exact.cores_used), solver
    if name != "llama-7b.onnx":  # proving optimality without the bound: seconds each on the smaller models
        r = get_solver("cpsat")(problem, SolveOptions(hint=greedy.choice, deadline=Deadline.after(60)))
        assert (r.status, r.objective) == (Status.OPTIMAL, exact.objective)
