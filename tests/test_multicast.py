"""Multicast: a tensor read by several kernels loads a shared link (or a cut) once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wsealloc.cost import CostOptions
from wsealloc.cost.comm import MeshParams, comm_costs
from wsealloc.problem.flows import Flows, crossing_bytes

MESH = MeshParams(
    rows=8,
    cols=40,
    tile_rows=8,
    tile_cols=40,
    link_bytes_per_cycle=1.0,
    hop_latency=0,
    die_rows=8,
    die_cols=40,
    die_penalty=0,
)


def _skip_layout() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # A -> B -> C in one band of 8 rows, plus the skip A -> C (the same tensor as A -> B)
    rects = np.array([[0, 0, 8, 4], [0, 4, 8, 4], [0, 8, 8, 4]])
    src, dst = np.array([0, 0, 1]), np.array([1, 2, 2])
    nbytes = np.array([800.0, 800.0, 160.0])
    return rects, src, dst, nbytes


def test_shared_link_carries_a_multicast_tensor_once() -> None:
    rects, src, dst, nbytes = _skip_layout()
    latency = np.zeros(3)
    # Separate tensors: the line between A and B carries 800/8 + 800/8 = 200 B per link; the line
    # between B and C carries A->C (100) + B->C (20) = 120. Hop latency 0: congestion is all of it.
    unicast = comm_costs(rects, latency, src, dst, nbytes, MESH, group=np.array([0, 1, 2]))
    assert unicast.congestion_cycles.tolist() == [0, 200, 200]
    # One tensor multicast to B and C: 100 B per link on the first line, 120 on the second.
    multicast = comm_costs(rects, latency, src, dst, nbytes, MESH, group=np.array([0, 0, 1]))
    assert multicast.congestion_cycles.tolist() == [0, 100, 120]
    # the default is unicast (every flow its own group)
    assert comm_costs(rects, latency, src, dst, nbytes, MESH).congestion_cycles.tolist() == [0, 200, 200]


def test_crossing_bytes_by_hand() -> None:
    _, src, dst, nbytes = _skip_layout()
    # cut 1 (in front of B): the tensor once (800); cut 2 (in front of C): 800 + 160
    assert crossing_bytes(3, Flows(src, dst, nbytes, np.array([0, 0, 1]))).tolist() == [0, 800, 960, 0]
    assert crossing_bytes(3, Flows(src, dst, nbytes, np.array([0, 1, 2]))).tolist() == [0, 1600, 960, 0]


@st.composite
def flow_sets(draw: st.DrawFn) -> tuple[int, Flows]:
    n = draw(st.integers(2, 9))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 2), st.integers(1, n - 1)), min_size=1, max_size=12))
    pairs = [(s, t) for s, t in pairs if s < t]
    src = np.array([s for s, _ in pairs], dtype=np.int64)
    dst = np.array([t for _, t in pairs], dtype=np.int64)
    nbytes = np.array(draw(st.lists(st.integers(1, 100), min_size=len(pairs), max_size=len(pairs))), dtype=np.float64)
    # groups: flows of one producer share a tensor or not
    tensor = draw(st.lists(st.integers(0, 1), min_size=len(pairs), max_size=len(pairs)))
    keys: dict[tuple[int, int], int] = {}
    group = np.array([keys.setdefault((int(s), t), len(keys)) for s, t in zip(src, tensor, strict=True)], dtype=np.int64)
    return n, Flows(src, dst, nbytes, group)


@settings(max_examples=200, deadline=None)
@given(flow_sets())
def test_crossing_bytes_equals_brute_force(case: tuple[int, Flows]) -> None:
    n, fl = case
    expected = np.zeros(n + 1)
    for cut in range(1, n):
        per_group: dict[int, float] = {}
        for s, t, b, g in zip(fl.src.tolist(), fl.dst.tolist(), fl.nbytes.tolist(), fl.group.tolist(), strict=True):
            if s < cut <= t:
                per_group[g] = max(per_group.get(g, 0.0), b)
        expected[cut] = sum(per_group.values())
    got = crossing_bytes(n, fl)
    assert np.allclose(got[:n], expected[:n])


def test_residual_stream_flows_share_a_group() -> None:
    """In the tiny transformer every residual tensor is read by a norm (or matmul) and by the add of the
    next residual: those flows form one multicast group; different tensors never do."""
    from pathlib import Path

    from wsealloc.arch import load_arch
    from wsealloc.frontend.sources import OnnxSource
    from wsealloc.opmodels import build_cost_table
    from wsealloc.pipeline import load_kernels
    from wsealloc.problem.flows import flows

    model = Path(__file__).resolve().parents[1] / "models" / "tiny" / "transformer.onnx"
    kgraph = load_kernels(OnnxSource(path=str(model)))
    fl = flows(build_cost_table(kgraph, load_arch("tiny"), CostOptions()))
    names = [k.name for k in kgraph.kernels]
    by_group: dict[int, set[tuple[int, str]]] = {}
    edges = sorted((names.index(e.src), names.index(e.dst), e.tensor) for e in kgraph.edges)
    for (s, _, tensor), g in zip(edges, fl.group.tolist(), strict=True):
        by_group.setdefault(g, set()).add((s, tensor))
    assert all(len(members) == 1 for members in by_group.values())  # one (producer, tensor) per group
    assert (np.bincount(fl.group) > 1).any()  # and some tensors are multicast


def test_opposite_directions_do_not_share_a_link() -> None:
    # A B C D side by side in one band of 8 rows. A -> C (east) and D -> B (west) both cross the line
    # between B and C, each at 800 / 8 = 100 B per link: a link has one channel per direction, so
    # neither waits for the other. A -> C and B -> D (both east) share the eastward channel: 200.
    rects = np.array([[0, 0, 8, 4], [0, 4, 8, 4], [0, 8, 8, 4], [0, 12, 8, 4]])
    latency = np.zeros(4)
    nbytes = np.array([800.0, 800.0])
    opposite = comm_costs(rects, latency, np.array([0, 3]), np.array([2, 1]), nbytes, MESH)
    assert opposite.congestion_cycles.tolist() == [0, 100, 100, 0]
    same = comm_costs(rects, latency, np.array([0, 1]), np.array([2, 3]), nbytes, MESH)
    assert same.congestion_cycles.tolist() == [0, 0, 200, 200]
