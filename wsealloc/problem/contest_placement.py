"""An ISPD-2020 contest instance as a :class:`PlacementProblem` (numbers only), for the one engine.

* Kernels in *dataflow order*: a topological order of the kernel graph that keeps chains together
  (depth first: a kernel's consumer follows it whenever the consumer's other inputs are placed), so
  the strip construction's snake puts producers beside their consumers, as for ONNX models.
* Shape tables from the contest op models (``opmodels.contest``): for every height bound and width,
  the fastest legal model (both orientations are rows of the frontier, already swapped), its index as
  the op-model code. Kernels with the same kind and formal arguments share one table.
* Flows: one per edge between placed kernels (the contest scores every edge; io edges are not
  placed and not scored), with the tensor's elements as its size (for reports only).
* The mesh is the fabric (``height`` rows x ``width`` columns: x runs along columns, y along rows),
  no defects, no dies; the objective is the contest's (``problem.objective.ContestScore``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.arch.schema import DieBoundary
from wsealloc.cost.comm import MeshParams
from wsealloc.graph.contest import ContestGraph
from wsealloc.opmodels.contest import ContestOpModels
from wsealloc.problem.flows import Flows
from wsealloc.problem.objective import ContestScore
from wsealloc.problem.placement import INF, PlacementProblem, ShapeTable, shape_table


@dataclass(frozen=True)
class ContestPlacement:
    """The placement problem of a contest instance and the way back to the instance's kernels."""

    problem: PlacementProblem
    order: tuple[int, ...]  # problem kernel i is graph.kernels[order[i]]
    models: tuple[ContestOpModels, ...]  # per problem kernel


def dataflow_order(graph: ContestGraph) -> list[int]:
    """A topological order of the placed kernels (indices into ``graph.kernels``) that keeps chains
    together: depth first from the sources in file order, a kernel's consumers released when their
    last producer is placed and taken last-released first. Kernels on a cycle (not a DAG) are
    appended in file order (the engine needs an order, not acyclicity)."""
    n = len(graph.kernels)
    pairs = graph.edge_pairs()
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for s, t in pairs:
        succ[s].append(t)
        indeg[t] += 1
    order: list[int] = []
    stack = [k for k in range(n - 1, -1, -1) if indeg[k] == 0]  # file order first out
    seen = [False] * n
    while stack:
        k = stack.pop()
        if seen[k]:
            continue
        seen[k] = True
        order.append(k)
        for t in sorted(succ[k], reverse=True):
            indeg[t] -= 1
            if indeg[t] == 0:
                stack.append(t)
    order += [k for k in range(n) if not seen[k]]
    return order


def contest_shape_table(models: ContestOpModels, cols: int) -> ShapeTable:
    """The shape table of one kernel's frontier: per distinct model height and exact width, the
    fastest model (its index the code), then the running best over heights."""
    heights = np.unique(models.height)
    lat = np.full((heights.size, cols + 1), INF, dtype=np.int64)
    codes = np.zeros((heights.size, cols + 1), dtype=np.int32)
    fits = models.width <= cols
    index = np.flatnonzero(fits)
    cell = np.searchsorted(heights, models.height[index]) * (cols + 1) + models.width[index]
    # per cell the fastest model (the lowest index among equals): sort by (cell, time, index), take firsts
    ranked = index[np.lexsort((index, models.time[index], cell))]
    ranked_cell = np.searchsorted(heights, models.height[ranked]) * (cols + 1) + models.width[ranked]
    _, first = np.unique(ranked_cell, return_index=True)
    best = ranked[first]
    rows, widths = np.searchsorted(heights, models.height[best]), models.width[best]
    lat[rows, widths] = models.time[best]
    codes[rows, widths] = best
    return shape_table(heights, lat, codes)


def build_contest_placement(
    graph: ContestGraph, models: tuple[ContestOpModels, ...], lower_bound: int, time_cap: float | None = None
) -> ContestPlacement:
    """The placement problem of ``graph`` with its kernels' op models (``models[i]`` for
    ``graph.kernels[i]``) and a proven lower bound on the largest kernel time; ``time_cap`` (a multiple
    of the bound) keeps the largest kernel time within it where any layout can."""
    fabric = graph.fabric
    order = dataflow_order(graph)
    position = {k: i for i, k in enumerate(order)}
    classes: dict[object, int] = {}
    shapes: list[ShapeTable] = []
    kernel_class: list[int] = []
    for k in order:
        kernel = graph.kernels[k]
        key = (kernel.kind, kernel.args)
        if key not in classes:
            classes[key] = len(shapes)
            shapes.append(contest_shape_table(models[k], fabric.width))
        kernel_class.append(classes[key])
    pairs = [(position[s], position[t]) for s, t in graph.edge_pairs()]
    sizes = [float(np.prod(e.shape)) if e.shape else 0.0 for e in graph.edges]
    src = np.array([s for s, _ in pairs], dtype=np.int64)
    dst = np.array([t for _, t in pairs], dtype=np.int64)
    flows = Flows(src, dst, np.array(sizes, dtype=np.float64), np.arange(len(pairs), dtype=np.int64))
    mesh = MeshParams(
        rows=fabric.height,
        cols=fabric.width,
        tile_rows=fabric.height,
        tile_cols=fabric.width,
        link_bytes_per_cycle=1.0,
        hop_latency=1,
        die_rows=fabric.height,
        die_cols=fabric.width,
        die_penalty=0,
    )
    problem = PlacementProblem(
        names=tuple(graph.kernels[k].name for k in order),
        kernel_class=tuple(kernel_class),
        shapes=tuple(shapes),
        mesh=mesh,
        blocked=np.zeros((fabric.height, fabric.width), dtype=bool),
        die_rule=DieBoundary.IGNORE,
        flows=flows,
        lower_bound=lower_bound,
        objective=ContestScore(
            float(fabric.wdeltat), float(fabric.wlength), None if time_cap is None else int(time_cap * lower_bound)
        ),
    )
    return ContestPlacement(problem, tuple(order), tuple(models[k] for k in order))
