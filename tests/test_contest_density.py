"""The contest's density sequence and kernel exchanges in the placement engine: a problem renumbered
into another sequence and back, the density order (largest smallest-rectangle first), and exchanges
of kernels between containers that shorten wires without a slower largest kernel (by hand)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wsealloc.budget import Deadline
from wsealloc.frontend.kgraph import parse_kgraph
from wsealloc.opmodels.contest import enumerate_graph
from wsealloc.problem.contest_placement import build_contest_placement
from wsealloc.problem.objective import Throughput
from wsealloc.problem.placement import PlacementProblem
from wsealloc.solvers.place import DENSITY_TARGET, closed_skips, in_kernel_order, sequences
from wsealloc.solvers.strips import Placed, construct, score
from wsealloc.solvers.swap import swap_kernels

DATA = Path(__file__).resolve().parent / "data" / "kgraph"

# two identical convs (k1, k2) and a wider one (k3) that reads k1
SWAP = """(*
test=swap
width=400
height=200
wdeltat=1
wlength=1
wadapter=0
memlimit=4096
*)
conv[1] W=8 H=8 R=1 S=1 C=8 K=8 T=1 U=1 name='k1'
conv[2] W=8 H=8 R=1 S=1 C=8 K=8 T=1 U=1 name='k2'
conv[3] W=8 H=8 R=1 S=1 C=8 K=16 T=1 U=1 name='k3'
conv[1]:y -> conv[3]:x, shape:[8][8][8]
"""


def _problem(path: Path) -> PlacementProblem:
    graph = parse_kgraph(path)
    return build_contest_placement(graph, enumerate_graph(graph), 1).problem


def test_a_problem_in_another_sequence_and_back() -> None:
    problem = _problem(DATA / "tiny_chain.kgraph")
    n = problem.n_kernels
    order = np.arange(n)[::-1].copy()
    other = problem.in_sequence(order)
    assert other.names == problem.names[::-1] and other.kernel_class == problem.kernel_class[::-1]
    # flow s -> t becomes position(s) -> position(t): kernel k sits at n - 1 - k
    assert (other.flows.src == n - 1 - problem.flows.src).all() and (other.flows.dst == n - 1 - problem.flows.dst).all()
    # a layout built in the other sequence, renumbered back, scores the same in the original problem
    built = construct(other, np.full(n, 10**6))
    assert built is not None
    back = in_kernel_order(built, order)
    assert back is not None and score(problem, back) == score(other, built)
    assert (back.rects[order] == built.rects).all()
    with pytest.raises(ValueError, match="expected a permutation"):
        problem.in_sequence(np.zeros(n, dtype=np.int64))


def test_the_density_sequence_puts_the_largest_rectangles_first() -> None:
    graph = parse_kgraph(DATA / "tiny_chain.kgraph")
    models = enumerate_graph(graph)
    cp = build_contest_placement(graph, models, 300)
    problem = cp.problem
    found = sequences(problem)
    assert found[0] is None and len(found) == 2  # the dataflow order first, then the density order
    density = found[1]
    assert density is not None and sorted(density.tolist()) == list(range(problem.n_kernels))
    target = int(300 * DENSITY_TARGET)
    graph_index = {k.name: i for i, k in enumerate(graph.kernels)}
    areas = [models[graph_index[problem.names[k]]].min_area_within(target) for k in density.tolist()]
    assert all(a is not None for a in areas) and areas == sorted(areas, reverse=True)  # type: ignore[type-var]
    # ONNX problems follow their dataflow order (communication cycles need producers near consumers),
    # then the one with short skips closed, never the density order
    onnx = replace(problem, objective=Throughput())
    closed = closed_skips(onnx)
    assert closed is not None and sequences(onnx)[0] is None and np.array_equal(sequences(onnx)[1], closed)  # type: ignore[arg-type]
    assert len(sequences(onnx)) == 2


def test_exchanging_identical_kernels_shortens_wires_at_the_same_times(tmp_path: Path) -> None:
    path = tmp_path / "swap.kgraph"
    path.write_text(SWAP)
    problem = _problem(path)
    assert problem.names == ("k1", "k3", "k2") and problem.kernel_class == (0, 1, 0)
    h3 = problem.shape(0).height_index(3)
    smallest = [int(problem.shape(k).best_df[h3, 2]) for k in range(3)]  # every kernel's 3x2 model
    latency = np.array([int(problem.shape(k).best[h3, 2]) for k in range(3)])
    assert latency.tolist() == [4096, 8192, 4096]
    # k1 far left, k2 at column 100, k3 (k1's reader) at column 104
    rects = np.array([[0, 0, 3, 2], [0, 104, 3, 2], [0, 100, 3, 2]])
    placed = Placed(rects, np.array(smallest, dtype=np.int32), latency)
    before = score(problem, placed)
    assert before[1] == 8192 + 104  # centres x = 1 and 105
    swapped = swap_kernels(problem, placed, Deadline.after(5))
    # k1 takes k2's container next to k3 (4 tiles), k2 goes left; times and the largest time unchanged
    assert swapped.rects.tolist() == [[0, 100, 3, 2], [0, 104, 3, 2], [0, 0, 3, 2]]
    assert swapped.latency.tolist() == latency.tolist()
    assert score(problem, swapped)[1] == 8192 + 4
    # nothing better to do: the same layout back; ONNX layouts are never touched
    assert swap_kernels(problem, swapped, Deadline.after(5)) is swapped
    assert swap_kernels(replace(problem, objective=Throughput()), placed, Deadline.after(5)) is placed


def test_an_exchange_never_slows_the_largest_kernel(tmp_path: Path) -> None:
    """k3 in a 3x2 room would need its 3x2 model (8192), slower than the layout's largest time (k3's own,
    in a wider container): that exchange is refused even where it would shorten the wire."""
    path = tmp_path / "swap.kgraph"
    path.write_text(SWAP)
    problem = _problem(path)
    fast3 = problem.shape(1)
    h3 = fast3.height_index(3)
    # k3's fastest model at most 3 rows tall in the narrowest container that makes it faster than 8192
    cols = next(c for c in range(3, 100) if fast3.prefix[h3, c] < 8192)
    w, t3 = int(fast3.prefix_width[h3, cols]), int(fast3.prefix[h3, cols])
    code3 = int(fast3.best_df[h3, w])
    r3 = int(fast3.best_r[h3, w])
    rects = np.array([[0, 0, 3, 2], [0, 300, r3, w], [0, 10, 3, 2]])
    latency = np.array([4096, t3, 4096])
    small = problem.shape(0)  # k1 and k2's class: their 3x2 model
    code1 = int(small.best_df[small.height_index(3), 2])
    codes = np.array([code1, code3, code1], dtype=np.int32)
    placed = Placed(rects, codes, latency)
    swapped = swap_kernels(problem, placed, Deadline.after(5))
    # k3 stays in its wide container (in a 3x2 one it would take 8192 > the largest time t3); k1 and k2,
    # identical, trade places instead: k1 moves 10 columns closer to k3
    assert swapped.rects.tolist() == [[0, 10, 3, 2], [0, 300, r3, w], [0, 0, 3, 2]]
    assert swapped.latency.tolist() == latency.tolist()
    assert score(problem, swapped)[1] == score(problem, placed)[1] - 10


def _fc_chain(side: int, widest: int) -> str:
    """A fully connected chain as the contest's N and T write it (1 x 1 images, features doubling up to
    ``widest``, each width twice), on a side x side fabric with wires weighing 4."""
    lines = ["(*", "test=fc", f"width={side}", f"height={side}", "wdeltat=1", "wlength=4", "wadapter=0", "memlimit=24576", "*)"]
    features = []
    c = 2
    while c < widest:
        features += [(c, 2 * c), (2 * c, 2 * c)]
        c *= 2
    for i, (a, b) in enumerate(features, start=1):
        lines.append(f"conv[{i}] W=1 H=1 R=1 S=1 C={a} K={b} T=1 U=1 name='k{i}'")
    for i in range(1, len(features)):
        lines.append(f"conv[{i}]:y -> conv[{i + 1}]:x, shape:[1][1][{features[i - 1][1]}]")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_layouts_rebuilt_with_wire_plans_shorten_a_chain_dominated_by_its_last_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contest's N in small: the last layers fill most of the fabric, and full bands lay the chain
    across its width. The multi-start's best layouts rebuilt with ``strips.wire_plans`` (bands that
    end early: the large kernels each in a strip of its own) score 1,134 against 1,558 at the same
    largest time (176, bound 168), and every layout is legal."""
    import wsealloc.solvers.place as place

    path = tmp_path / "fc.kgraph"
    path.write_text(_fc_chain(100, 512))
    graph = parse_kgraph(path)
    problem = build_contest_placement(graph, enumerate_graph(graph), 168, 1.05).problem
    found = {}
    monkeypatch.setattr(place, "SLICING_TARGETS", 0)  # (bands alone: a slicing floorplan scores 1,190 here)
    for rebuilds in (0, place.WIRE_REBUILDS):
        monkeypatch.setattr(place, "WIRE_REBUILDS", rebuilds)
        built = place.construct_best(problem, Deadline.after(60))
        placed = None if built is None else built.placed
        assert placed is not None and not problem.layout_errors(placed.rects)
        found[rebuilds] = score(problem, placed)
    assert found[0][1:3] == (1558.0, 176) and found[place.WIRE_REBUILDS][1:3] == (1134.0, 176)


def test_contest_kernels_slide_sideways_to_their_neighbours_centres(tmp_path: Path) -> None:
    """k1 at column 0 feeds k3 at column 104 (centres 1 and 105: wire 104); free columns lie between
    them in their rows, so ``align`` slides k1 right until it touches k3 (centre 103, wire 2; both
    can move, a median of one neighbour is any point between, and k1 is tried first). k2 has no flow
    and stays. With k2 in the way at columns 2-3, k1 cannot pass it (it slides within its free run)."""
    from wsealloc.solvers.align import align

    path = tmp_path / "swap.kgraph"
    path.write_text(SWAP)
    problem = _problem(path)
    h3 = problem.shape(0).height_index(3)
    codes = np.array([int(problem.shape(k).best_df[h3, 2]) for k in range(3)], dtype=np.int32)
    latency = np.array([int(problem.shape(k).best[h3, 2]) for k in range(3)])
    placed = Placed(np.array([[0, 0, 3, 2], [0, 104, 3, 2], [0, 300, 3, 2]]), codes, latency)
    aligned, rank = align(problem, placed)
    assert aligned.rects.tolist() == [[0, 102, 3, 2], [0, 104, 3, 2], [0, 300, 3, 2]]
    assert rank == score(problem, aligned) and rank[1] == 8192 + 2
    blocked = Placed(np.array([[0, 0, 3, 2], [0, 104, 3, 2], [0, 2, 3, 2]]), codes, latency)
    stuck, _ = align(problem, blocked)
    # k1 is boxed in at column 0 by k2; k3 slides left to k2's edge (centre 5: wire 4) and k2 stays
    assert stuck.rects.tolist() == [[0, 0, 3, 2], [0, 4, 3, 2], [0, 2, 3, 2]]
