"""The model zoo: every model loads, groups and costs; MAC counts match closed-form formulas and the
field's published figures (batch 1) within 1%. Expected values are computed here from the
architectures' definitions, never from the code under test."""

from __future__ import annotations

import functools
import math
from typing import Any

import onnx
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


def decode_macs(layers: int, past: int, d: int, ffn: int, vocab: int, kv_dim: int, batch: int = 1) -> int:
    """One decode step of a LLaMA decoder (SiLU-gated FFN: 3 matrices) per sequence, over a past of
    ``past`` tokens: the new token's projections Q, O (d x d), K, V (d x kv_dim), FFN (3 x d x ffn);
    attention QK^T and AV over past + 1 keys (d each: heads x head_dim); the LM head (d x vocab)."""
    per_layer = d * (2 * d + 2 * kv_dim) + 3 * d * ffn + 2 * (past + 1) * d
    return batch * (layers * per_layer + d * vocab)


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


# LLMs with a KV cache (float16): prefill of a 4096-token prompt; decode step over a 4096-token past.
LLAMA3_8B = dict(layers=32, d=4096, ffn=14336, vocab=128256, kv_dim=8 * 128)
LLAMA2_13B = dict(layers=40, d=5120, ffn=13824, vocab=32000, kv_dim=40 * 128)
# written by `wsealloc export-llm` from models/configs/ (bfloat16, as published)
LLAMA31_70B = dict(layers=80, d=8192, ffn=28672, vocab=128256, kv_dim=8 * 128)
LLAMA31_405B = dict(layers=126, d=16384, ffn=53248, vocab=128256, kv_dim=8 * 128)
PAST = 4096
DECODE_DIMS = {"batch_size": 1, "past_sequence_length": PAST}
DIMS = {
    name: DECODE_DIMS
    for name in ("llama3-8b-decode.onnx", "llama2-13b-decode.onnx", "llama-3.1-70b-decode.onnx", "llama-3.1-405b-decode.onnx")
}


def prefill_macs(layers: int, d: int, ffn: int, vocab: int, kv_dim: int, prompt: int = 4096) -> int:
    """A LLaMA prefill of ``prompt`` tokens (SiLU-gated FFN)."""
    return decoder_macs(layers, prompt, d, ffn, vocab, 3, kv_dim=kv_dim)


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
    "llama3-8b-prefill.onnx": (decoder_macs(32, 4096, 4096, 14336, 128256, 3, kv_dim=1024), None),
    "llama3-8b-decode.onnx": (decode_macs(past=PAST, **LLAMA3_8B), None),
    "llama2-13b-prefill.onnx": (decoder_macs(40, 4096, 5120, 13824, 32000, 3), None),
    "llama2-13b-decode.onnx": (decode_macs(past=PAST, **LLAMA2_13B), None),
    "llama-3.1-70b-prefill.onnx": (prefill_macs(**LLAMA31_70B), None),
    "llama-3.1-70b-decode.onnx": (decode_macs(past=PAST, **LLAMA31_70B), None),
    "llama-3.1-405b-prefill.onnx": (prefill_macs(**LLAMA31_405B), None),
    "llama-3.1-405b-decode.onnx": (decode_macs(past=PAST, **LLAMA31_405B), None),
}


@functools.cache
def _wse2_summary(name: str) -> dict[str, Any]:
    """``inspect``'s summary of a zoo model on wse2 (feasibility not checked), computed once for the
    tests that read it (Llama-70B's costs take a second or two)."""
    kgraph = load_kernels(OnnxSource(path=str(zoo(name)), dims=DIMS.get(name, {})))
    costs = build_cost_table(kgraph, load_arch("wse2"), CostOptions(), check_feasible=False)
    return inspect_json(costs)["summary"]


def _sized(names: list[str], big: tuple[str, ...] = ("70b", "405b")) -> list[object]:
    """The zoo's largest models (70B and 405B: seconds each to read and cost) as slow cases: run by
    .ci/run (pytest -m slow); the default group keeps every smaller model, which takes the same path."""
    return [pytest.param(n, marks=pytest.mark.slow) if any(b in n for b in big) else n for n in names]


# (the 13B's counts too in the slow group, a second each: the 8B and LLaMA-7B take the same path)
@pytest.mark.parametrize("name", _sized(sorted(CASES), ("70b", "405b", "13b")))
def test_mac_counts(name: str) -> None:
    closed, published = CASES[name]
    total = _wse2_summary(name)["total_macs"]
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


@pytest.mark.slow
def test_llama_70b_does_not_fit_one_wafer() -> None:
    summary = _wse2_summary("llama-70b.onnx")  # shared with test_mac_counts
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


# --------------------------------------------------------------------------------------------------
# The KV-cache forms (models/README.md, "KV cache convention"), checked with onnx alone: the names,
# dtypes and dims of the inputs and outputs, the Concat that extends each past, and the MatMul MACs
# counted from ONNX shape inference after binding the symbolic dims (independent of the front end).

TINY = dict(layers=2, d=64, ffn=128, vocab=256, kv_dim=2 * 16)
F16, BF16, I64 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.INT64
LLMS = {
    # file: (decode step?, layers, kv heads, head dim, vocab, prompt length or None, dtype)
    "llama3-8b-prefill.onnx": (False, 32, 8, 128, 128256, 4096, F16),
    "llama3-8b-decode.onnx": (True, 32, 8, 128, 128256, None, F16),
    "llama2-13b-prefill.onnx": (False, 40, 40, 128, 32000, 4096, F16),
    "llama2-13b-decode.onnx": (True, 40, 40, 128, 32000, None, F16),
    "llama-3.1-70b-prefill.onnx": (False, 80, 8, 128, 128256, 4096, BF16),
    "llama-3.1-70b-decode.onnx": (True, 80, 8, 128, 128256, None, BF16),
    "llama-3.1-405b-prefill.onnx": (False, 126, 8, 128, 128256, 4096, BF16),
    "llama-3.1-405b-decode.onnx": (True, 126, 8, 128, 128256, None, BF16),
    "tiny/llm_prefill.onnx": (False, 2, 2, 16, 256, 16, F16),
    "tiny/llm_decode.onnx": (True, 2, 2, 16, 256, None, F16),
}


def _io(values: list[onnx.ValueInfoProto]) -> list[tuple[str, int, list[int | str]]]:
    """(name, element type, dims) of graph inputs or outputs; a symbolic dim as its name."""

    def dims(v: onnx.ValueInfoProto) -> list[int | str]:
        return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in v.type.tensor_type.shape.dim]

    return [(v.name, v.type.tensor_type.elem_type, dims(v)) for v in values]


def matmul_macs_bound(path: str, sizes: dict[str, int]) -> tuple[int, int]:
    """(MatMul MACs, node outputs without a static shape) after binding the dims ``past_sequence_length``,
    ``past_sequence_length + 1`` and ``batch_size`` everywhere they are written (inputs, outputs and the
    exporter's value_info) and running ONNX shape inference with data propagation."""
    model = onnx.load(path, load_external_data=False)
    if sizes:
        named = {**sizes, "past_sequence_length + 1": sizes["past_sequence_length"] + 1}
        for vi in (*model.graph.input, *model.graph.output, *model.graph.value_info):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param"):
                    d.dim_value = named[d.dim_param]
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes: dict[str, list[int] | None] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = [d.dim_value for d in dims] if all(d.HasField("dim_value") for d in dims) else None
    shapes.update({t.name: list(t.dims) for t in inferred.graph.initializer})
    macs = 0
    for node in inferred.graph.node:
        if node.op_type == "MatMul":
            a, y = shapes.get(node.input[0]), shapes.get(node.output[0])
            assert a is not None and y is not None, f"{node.name}: MatMul without a static shape"
            macs += math.prod(y) * a[-1]
    unknown = sum(1 for n in inferred.graph.node for o in n.output if o and shapes.get(o) is None)
    return macs, unknown


@pytest.mark.parametrize("name", _sized(sorted(LLMS)))
def test_kv_cache_convention(name: str) -> None:
    decode, layers, kv, hd, vocab, prompt, dtype = LLMS[name]
    model = onnx.load(str(zoo(name)), load_external_data=False)
    kvs = [(i, t) for i in range(layers) for t in ("key", "value")]
    batch: int | str = "batch_size" if decode else 1
    length: int | str = "past_sequence_length + 1" if decode else int(prompt or 0)
    want_in: list[tuple[str, int, list[int | str]]] = [("input_ids", I64, [batch, 1 if decode else length])]
    if decode:
        want_in += [(f"past_key_values.{i}.{t}", dtype, ["batch_size", kv, "past_sequence_length", hd]) for i, t in kvs]
    want_out = [("logits", dtype, [batch, 1 if decode else length, vocab])]
    want_out += [(f"present.{i}.{t}", dtype, [batch, kv, length, hd]) for i, t in kvs]
    assert _io(list(model.graph.input)) == want_in
    assert _io(list(model.graph.output)) == want_out
    if decode:  # each past is read once, by the Concat (sequence axis) that writes its present
        for i, t in kvs:
            readers = [n for n in model.graph.node if f"past_key_values.{i}.{t}" in n.input and n.op_type != "Shape"]
            assert len(readers) == 1 and readers[0].op_type == "Concat", (i, t, readers)
            axis = onnx.helper.get_attribute_value(readers[0].attribute[0])
            assert axis in (2, -2) and list(readers[0].output) == [f"present.{i}.{t}"]
    # float16 (bfloat16) weights; float32 only for small tensors (RoPE's inv_freq, RMSNorm's epsilon)
    floats = {onnx.TensorProto.FLOAT, F16, BF16}
    assert all(t.data_type == dtype or math.prod(t.dims) <= 64 for t in model.graph.initializer if t.data_type in floats)


@pytest.mark.parametrize(
    ("name", "sizes", "closed"),
    [
        ("llama3-8b-prefill.onnx", {}, decoder_macs(32, 4096, 4096, 14336, 128256, 3, kv_dim=1024)),
        ("llama3-8b-decode.onnx", DECODE_DIMS, decode_macs(past=PAST, **LLAMA3_8B)),
        ("llama2-13b-prefill.onnx", {}, decoder_macs(40, 4096, 5120, 13824, 32000, 3)),
        ("llama2-13b-decode.onnx", DECODE_DIMS, decode_macs(past=PAST, **LLAMA2_13B)),
        ("tiny/llm_prefill.onnx", {}, 1_507_328),  # models/README.md: the hand-computed figures
        ("tiny/llm_decode.onnx", {"batch_size": 1, "past_sequence_length": 16}, 94_464),
        ("tiny/llm_decode.onnx", DECODE_DIMS, 1_138_944),
        ("tiny/llm_decode.onnx", {"batch_size": 3, "past_sequence_length": 100}, decode_macs(past=100, batch=3, **TINY)),
    ],
)
def test_llm_matmul_macs_from_onnx_shape_inference(name: str, sizes: dict[str, int], closed: int) -> None:
    macs, unknown = matmul_macs_bound(str(zoo(name)), sizes)
    assert (macs, unknown) == (closed, 0)


def test_tiny_llm_closed_forms_and_size() -> None:
    assert decoder_macs(2, 16, 64, 128, 256, 3, kv_dim=32) == 1_507_328
    assert [decode_macs(past=s, **TINY) for s in (16, 4096)] == [94_464, 1_138_944] == [90_368 + 256 * s for s in (16, 4096)]
    for name in ("tiny/llm_prefill.onnx", "tiny/llm_decode.onnx"):
        assert zoo(name).stat().st_size < 100_000


def test_llm_decode_costs_with_bound_dims() -> None:
    """The front end takes the tiny decode step with its dims bound; MACs grow with the past."""
    totals = []
    for past in (16, 4096):
        dims = {"batch_size": 1, "past_sequence_length": past}
        kgraph = load_kernels(OnnxSource(path=str(zoo("tiny/llm_decode.onnx")), dims=dims))
        costs = build_cost_table(kgraph, load_arch("tiny"), CostOptions(), check_feasible=False)
        totals.append(inspect_json(costs)["summary"]["total_macs"])
    assert totals == [94_464, 1_138_944]
