"""The KV cache of LLM exports as resident state (graph/state.py): found in the decode ("with past")
and prefill forms, held by the attention kernels that read it, counted once in their SRAM (part
"state") and never sent over the NoC. Hand-computed bytes on the tiny twins (models/README.md: 2
layers, hidden 64, 4 heads of 16, 2 KV heads, fp16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, Dataflow, grid_costs
from wsealloc.errors import InfeasibleError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.graph.ir import TensorKind
from wsealloc.pipeline import build_costs, load_kernels

MODELS = Path(__file__).resolve().parents[1] / "models" / "tiny"
DECODE = OnnxSource(path=str(MODELS / "llm_decode.onnx"), dims={"batch_size": 1, "past_sequence_length": 16})
PREFILL = OnnxSource(path=str(MODELS / "llm_prefill.onnx"))
# one layer's K cache after this step: 1 request x 2 KV heads x (16 past + 1 new) tokens x 16 x 2 bytes
K_CACHE = 1 * 2 * 17 * 16 * 2


def test_decode_caches_are_state_held_by_the_attention_kernels() -> None:
    kg = load_kernels(DECODE)
    roots = sorted(set(kg.ops.state_roots.values()))
    assert roots == ["present.0.key", "present.0.value", "present.1.key", "present.1.value"]
    assert kg.ops.tensors["past_key_values.0.key"].kind is TensorKind.STATE
    holders = {k.name: k.state for k in kg.kernels if k.state}
    assert holders == {
        "layers.0.scores": ("present.0.key",),
        "layers.0.context": ("present.0.value",),
        "layers.1.scores": ("present.1.key",),
        "layers.1.context": ("present.1.value",),
    }
    # the new token's key row travels (k_proj -> scores); the cache itself never does
    scores = kg.kernel("layers.0.scores")
    assert "layers.0.k_rope" in scores.inputs and not any(t.startswith("past") for t in scores.inputs)
    assert not any(e.tensor.startswith(("past", "present")) for e in kg.edges)


def test_decode_cache_bytes_by_hand() -> None:
    costs = build_costs(DECODE, load_arch("tiny"), CostOptions())
    scores = costs.by_name("layers.0.scores").work
    assert scores.state_bytes == scores.b_state_bytes == K_CACHE == 1088
    assert scores.weight_bytes < K_CACHE  # the cache is state, not weights (only the small scale/mask)
    assert scores.in_bytes == 4 * 16 * 2 + 2 * 16 * 2  # this token's query (4 heads) and its new key row
    total_state = sum(kc.work.state_bytes for kc in costs.kernels)
    assert total_state == 2 * 2 * K_CACHE  # 2 layers x (K, V), each counted once
    # On one core the stationary tile is the cache itself: 16 x (4 heads x 17) fp16 of the GQA view,
    # halved because 4 query heads read 2 cached ones
    g = grid_costs(scores, costs.arch, costs.options, Dataflow.WEIGHT_STATIONARY, np.array([1]), np.array([1]))
    parts = g.sram_parts()
    assert int(parts.state[0]) == K_CACHE and int(parts.weights[0]) == scores.weight_bytes  # the scale and mask
    assert int(g.sram_bytes[0]) == int(parts.weights[0] + parts.state[0] + parts.buffers[0])
    # over a 2 x 4 grid the cache is split: 8 rows of K x 17 columns per core, halved = 136 bytes
    g2 = grid_costs(scores, costs.arch, costs.options, Dataflow.WEIGHT_STATIONARY, np.array([2]), np.array([4]))
    assert int(g2.sram_parts().state[0]) == 8 * 17 * 2 // 2


def test_prefill_cache_is_written_once_where_it_lives() -> None:
    kg = load_kernels(PREFILL)
    holders = {k.name: k.state for k in kg.kernels if k.state}
    assert set(holders) == {"layers.0.scores", "layers.0.context", "layers.1.scores", "layers.1.context"}
    # the keys computed by k_proj travel to the kernel holding the cache, which counts its bytes
    scores = kg.kernel("layers.0.scores")
    assert "present.0.key#written" in scores.inputs
    costs = build_costs(PREFILL, load_arch("tiny"), CostOptions())
    assert costs.by_name("layers.0.scores").work.state_bytes == 1 * 2 * 16 * 16 * 2  # 16 prompt tokens
    assert costs.by_name("layers.0.k_proj").work.state_bytes == 0


def test_models_without_a_cache_are_unchanged() -> None:
    kg = load_kernels(OnnxSource(path=str(MODELS / "transformer.onnx")))
    assert not kg.ops.state_roots and not any(k.state for k in kg.kernels)


def test_with_requests_in_flight_each_gets_a_token_every_turn_not_every_pass() -> None:
    """Two requests in flight: one request's token comes every max(pass, 2 x slowest stage) cycles, the
    rate the summary prints beside it (it said "one token per" the pass time)."""
    import re

    from wsealloc.api import solve
    from wsealloc.report.summary import llm_lines

    out = solve(MODELS / "llm_decode.onnx", "tiny", context=16, objective="latency", requests=2, place=False, time_limit=5)
    llm = out.plan.objective.llm
    assert llm is not None and llm.requests == 2
    turn = max(llm.token_path_cycles, 2 * llm.slowest_stage_cycles)
    line = llm_lines(out.plan)[0]
    found = re.search(r"one token per ([\d,]+) cycles", line)
    assert found and int(found.group(1).replace(",", "")) == turn, line
    assert abs(llm.tokens_per_s_per_request - out.plan.arch.clock_hz / turn) <= 1e-6 * llm.tokens_per_s_per_request


def test_summary_says_whose_cache_and_which_rate() -> None:
    """With 2 a pass and 3 requests in flight the cache's bytes are 6 sequences' (the summary said "at
    batch 2" beside them, 3x one pass's cost), and a decode plan's samples/s is the rate with a request in
    every stage, named so beside what the requests in flight reach; other plans keep "samples/s"."""
    from wsealloc.api import solve
    from wsealloc.report.summary import llm_lines, summary_lines

    out = solve(
        MODELS / "llm_decode.onnx", "tiny", context=16, batch=2, objective="latency", requests=3, place=False, time_limit=5
    )
    llm = out.plan.objective.llm
    assert llm is not None and (llm.batch, llm.requests) == (2, 3)
    # one sequence's cache per token of context: 2 layers x (K and V) x 2 KV heads x 16 x 2 bytes
    per_sequence = 2 * 2 * 2 * 16 * 2
    assert llm.kv_bytes_per_token == 6 * per_sequence
    kv = next(t for t in llm_lines(out.plan) if t.startswith("KV cache"))
    assert f"{6 * per_sequence:,} B per token of context for 6 sequences (2 a pass x 3 in flight; {per_sequence:,} B each)" in kv
    assert f"at most {llm.largest_context:,} tokens of context for each" in kv
    rate = f"{out.plan.objective.throughput_samples_per_s:,.1f}"
    expected = f"throughput at most {rate} passes/s at 1.00 GHz with a request in every stage (3 in flight: below); "
    assert any(t.startswith(expected) for t in summary_lines(out))
    single = solve(MODELS / "llm_decode.onnx", "tiny", context=16, place=False, time_limit=5)
    assert "KV cache 256 B per token of context: " in "\n".join(llm_lines(single.plan))  # one sequence: no split
    prefill = solve(MODELS / "llm_prefill.onnx", "tiny", place=False, time_limit=5)
    assert any(t.startswith("throughput ") and " samples/s at " in t for t in summary_lines(prefill))


def test_caches_that_fit_no_grid_name_the_requests() -> None:
    """100,000 requests' caches fill every core of the tiny wafer's attention kernels: the message names the
    KV cache and --requests (it said "smaller --dim values", an option the user never gave)."""
    from wsealloc.api import solve

    with pytest.raises(InfeasibleError, match="fit no grid on tiny") as err:
        solve(MODELS / "llm_decode.onnx", "tiny", context=64, objective="latency", requests=100_000, place=False, time_limit=5)
    assert "(the KV cache " in str(err.value) and "a shorter --context, fewer --requests or a smaller --batch" in str(err.value)
