"""The calibrated execution model (``Arch.execution``; docs/cost-model.md, "Calibrated against WSE-2
measurements"): every term by hand on small kernels, and the streaming model left exactly as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import MODELS

from wsealloc.arch import Arch, load_arch
from wsealloc.arch.schema import Execution, ReductionTree
from wsealloc.cost import CostOptions, Dataflow, KernelWork, grid_costs, kernel_work
from wsealloc.cost.standard import tree_shape
from wsealloc.frontend.sources import OnnxSource
from wsealloc.graph.opclass import KernelKind
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import load_kernels

# tiny: 4 MACs (lanes) a cycle, links of 4 B/cycle, hop 1, bf16 (2 B) with 4-byte partial sums: one
# partial sum a link cycle. Small round numbers for the execution costs, a chain tree (the shortest
# to follow by hand) unless a test says otherwise.
EX = Execution(issue_cycles=2, step_cycles=10, collective_cycles=7, stage_cycles=3, tree=ReductionTree.CHAIN)


def _arch(ex: Execution = EX) -> Arch:
    return load_arch("tiny").model_copy(update={"execution": ex})


def _matmul(m: int, n: int, k: int, *, g: int = 1, vector_ops: int = 0) -> KernelWork:
    """out[g, m, n] = a[g, m, k] . b[g, k, n] with b a parameter (bf16)."""
    return KernelWork(
        kind=KernelKind.MATMUL,
        macs=g * m * n * k,
        vector_ops=vector_ops,
        g=g,
        m=m,
        n=n,
        k=k,
        weight_b=True,
        b_bytes=g * k * n * 2,
        rows=m,
        cols=g * n,
        row_reduce=False,
        col_weight_bytes=0,
        shard_weight_bytes=0,
        in_bytes=m * k * 2,
        out_bytes=m * g * n * 2,
        weight_bytes=g * k * n * 2,
    )


def _costs(work: KernelWork, df: Dataflow, r: int, c: int, *, in_place: bool = True, arch: Arch | None = None):  # type: ignore[no-untyped-def]
    return grid_costs(work, arch or _arch(), CostOptions(), df, np.array([r]), np.array([c]), in_place=in_place)


def test_tree_shapes_by_hand() -> None:
    def shape(n: int, tree: ReductionTree) -> tuple[int, int, float]:
        s, h, p = tree_shape(np.array([n]), tree)
        return int(s[0]), int(h[0]), p

    # two-level on 420 cores (WaferLLM's P = 420: 20 groups of 21): roots at 10 and 10*21 + 10 = 220;
    # stages 10 + 10, hops 10 + 10*21 (reduce) + 220 (broadcast to core 0): the code's (440, 20)
    assert shape(420, ReductionTree.TWO_LEVEL) == (20, 440, 6.0)
    # 660: g = ceil(25.7) = 26, G = ceil(660/26) = 26, roots 13 and 13*26 + 13 = 351
    assert shape(660, ReductionTree.TWO_LEVEL) == (26, 13 + 13 * 26 + 351, 6.0)
    # 9 cores: 3 groups of 3, roots 1 and 4: stages 1 + 1, hops 1 + 3 + 4
    assert shape(9, ReductionTree.TWO_LEVEL) == (2, 8, 6.0)
    # a chain toward the middle: 5 cores -> middle 2, 2 stages, 2 + 2 hops; 4 cores -> middle 2, 2 stages
    assert shape(5, ReductionTree.CHAIN) == (2, 4, 4.0)
    assert shape(4, ReductionTree.CHAIN) == (2, 4, 4.0)
    assert shape(1, ReductionTree.TWO_LEVEL)[:2] == (0, 0)


def test_gemv_weight_stationary_by_hand() -> None:
    """[1,8] x [8,8] on 4 x 4 cores: K over rows (2 each), N over columns (2 each)."""
    c = _costs(_matmul(1, 8, 8), Dataflow.WEIGHT_STATIONARY, 4, 4)
    # 2 FMAC instructions (one per row of B) of 2 elements: 2 * (ceil(2/4) + issue 2) = 6; one step 10
    assert c.compute_cycles[0] == 16
    # allreduce over the 4 rows: chain -> 2 stages, 4 hops, 4 passes of 2 partial sums (1 a cycle):
    # call 7 + 3*2 + 1*4 + 4*2 = 25
    assert c.noc_cycles[0] == 25
    assert c.latency[0] == 16 + 25  # the collective follows the compute; operands in place: no fill
    # resident 2 x 2 bf16 = 8, buffers 2 * (2*2 + 2*4) = 24
    assert c.sram_bytes[0] == 8 + 24


def test_streamed_operands_pay_edges_and_fill() -> None:
    c = _costs(_matmul(1, 8, 8), Dataflow.WEIGHT_STATIONARY, 4, 4, in_place=False)
    # edges: ingress ceil(ceil(16/4)/4) = 1, column reduction ceil(2*4/4) = 2, egress 1 -> 2 < compute 16;
    # fill 1 * (4 + 4)
    assert c.latency[0] == 16 + 25 + 8


def test_streamed_tokens_are_steps() -> None:
    """[3,8] x [8,8]: each of the 3 tokens is a step with its 2 FMACs; the later two add into the tree."""
    c = _costs(_matmul(3, 8, 8), Dataflow.WEIGHT_STATIONARY, 4, 4)
    # 3*2 FMACs of 3 cycles = 18, 2 tree adds of 3 = 6, 3 steps of 10 = 30
    assert c.compute_cycles[0] == 54
    # behind the first token's collective (25), 2 tokens x 4 passes x 2 partial sums = 16 stream (< 54)
    assert c.latency[0] == 54 + 25


def test_heads_over_rows_segment_the_reduction() -> None:
    """Decode scores: 4 heads x 16 keys, head_dim 8, the cache stationary, on 8 x 4 cores."""
    work = _matmul(1, 16, 8, g=4)
    c = _costs(work, Dataflow.WEIGHT_STATIONARY, 8, 4)
    # plain: head_dim 8 over 8 rows (1 each), 64 (head, key) columns over 4 (16 each): one FMAC of 16
    # (4 + 2) + step 10 = 16; allreduce over 8 rows: chain 4 stages, 8 hops, 4 passes of 16:
    # 7 + 12 + 8 + 64 = 91 -> 107.
    # heads over rows: 32 (head, k) over 8 rows (4 each: a head spans 2 rows), 16 keys over 4 columns (4
    # each): 4 FMACs of 4 = 4 * 3 + 10 = 22; allreduce over the head's 2 rows: 1 stage, 2 hops,
    # 4 passes of 4: 7 + 3 + 2 + 16 = 28 -> 50, the faster.
    assert c.latency[0] == 50
    assert c.compute_cycles[0] == 22
    assert c.sram_bytes[0] == 4 * 4 * 2 + 2 * (4 * 2 + 4 * 4)  # its 4 x 4 slice, buffers of the plain tiling


def test_systolic_output_stationary_by_hand() -> None:
    """[8,8] x [8,8] on 2 x 2 cores: 4 x 4 output tiles, K in T = 2 chunks of 4 that shift."""
    c = _costs(_matmul(8, 8, 8), Dataflow.OUTPUT_STATIONARY, 2, 2)
    # a step: 4 (k) x 4 (columns) FMACs over the tile's 4 tokens: 16 * (1 + 2) = 48 > its shift of
    # ceil(4*4*2/4) + 2 hops = 10; + step 10 -> 58, twice = 116; aligning A: floor(2/2) rounds of
    # (8 + 2 + 10) = 20
    assert c.compute_cycles[0] == 136
    assert c.latency[0] == 136


def test_vector_row_reduction_by_hand() -> None:
    """A softmax over 4 rows of 16 on 2 x 4 cores: two collectives (max, sum) over the 4 columns."""
    work = KernelWork(
        kind=KernelKind.SOFTMAX,
        macs=0,
        vector_ops=8 * 64,
        g=1,
        m=4,
        n=16,
        k=0,
        weight_b=False,
        b_bytes=0,
        rows=4,
        cols=16,
        row_reduce=True,
        col_weight_bytes=0,
        shard_weight_bytes=0,
        in_bytes=128,
        out_bytes=128,
        weight_bytes=0,
        reductions=2,
    )
    c = _costs(work, Dataflow.VECTOR, 2, 4)
    # 8 ops x 2 x 4 elements = 64 ops / 4 lanes = 16; 8 instructions per row x 2 rows x issue 2 = 32;
    # one step 10
    assert c.compute_cycles[0] == 58
    # each collective over 4 columns, 2 statistics a core: 7 + 3*2 + 4 + 4*2 = 25
    assert c.latency[0] == 58 + 2 * 25


def test_softmax_and_norm_count_their_collectives() -> None:
    dims = {"batch_size": 1, "past_sequence_length": 8}
    kg = load_kernels(OnnxSource(path=str(MODELS / "tiny" / "llm_decode.onnx"), dims=dims))
    arch = load_arch("tiny")
    works = {k.name: kernel_work(k, kg.ops, arch, CostOptions()) for k in kg.kernels}
    assert works["layers.0.probs_f32"].reductions == 2  # max, then sum
    assert works["layers.0.input_norm.ms"].reductions == 1  # the mean of squares
    assert works["layers.0.q_proj"].reductions == 0


def test_streaming_presets_unchanged_and_serialized_as_before() -> None:
    """No execution section: the streaming model, whatever ``in_place`` says, and no new key in plans."""
    wse2 = load_arch("wse2")
    assert wse2.execution is None and "execution" not in wse2.model_dump(mode="json")
    assert "execution" not in json.loads(wse2.model_dump_json())
    work = _matmul(1, 8, 8)
    for df in work.dataflows():
        a = grid_costs(work, wse2, CostOptions(), df, np.array([4, 16]), np.array([4, 2]))
        b = grid_costs(work, wse2, CostOptions(), df, np.array([4, 16]), np.array([4, 2]), in_place=True)
        assert np.array_equal(a.latency, b.latency) and np.array_equal(a.sram_bytes, b.sram_bytes)


def test_execution_round_trips() -> None:
    arch = load_arch("wse2-measured")
    assert arch.execution is not None
    again = Arch.model_validate(json.loads(arch.model_dump_json()))
    assert again == arch and again.model_dump(mode="json")["execution"]["tree"] == "two_level"


def test_on_grid_uses_operands_in_place() -> None:
    arch = _arch()
    work = _matmul(1, 8, 8)
    df, costs = on_grid(work, arch, CostOptions(), 4, 4)
    assert df is Dataflow.WEIGHT_STATIONARY and costs.latency[0] == 41  # test_gemv_weight_stationary_by_hand


@pytest.mark.parametrize("field", ["issue_cycles", "step_cycles", "collective_cycles", "stage_cycles"])
def test_every_execution_cost_counts(field: str) -> None:
    """Raising any one execution cost never lowers a latency, and raises the GEMV's."""
    work = _matmul(1, 8, 8)
    base = _costs(work, Dataflow.WEIGHT_STATIONARY, 4, 4)
    more = _costs(work, Dataflow.WEIGHT_STATIONARY, 4, 4, arch=_arch(EX.model_copy(update={field: getattr(EX, field) + 5})))
    assert more.latency[0] > base.latency[0]
