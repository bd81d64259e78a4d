"""The placement problem: every kernel a rectangle r x c at (row, col) on the wafer.

What placement solvers see (numbers only): per kernel class a *shape table* (the best latency of a
rectangle with at most ``h`` rows and exactly ``c`` columns, for every candidate height ``h`` and
every width ``c`` of the wafer), the producer->consumer flows, the defect mask, the die rule and the
mesh parameters of the communication model (``wsealloc.cost.comm``).

The problem carries its :class:`~wsealloc.problem.objective.Objective`; one engine
(``wsealloc.solvers.place``) asks it how to value and rank layouts:

* objectives that charge communication (ONNX models: ``Throughput``, ``Latency``): a kernel's stage
  time is its op model's latency plus the communication the placement causes (distance,
  congestion, die crossings); minimize the slowest stage (or a token's path), then traffic x distance.
* ``ContestScore`` (the ISPD-2020 contest, ``problem.contest_placement``): a kernel's stage time is its
  op model's time alone, and the score is ``time_weight * (slowest) + wire_weight * wirelength``,
  the wirelength being the sum over flows of the L1 distance between the two rectangles' centres.
  Where the wire weight is large the engine trades time for wires (smaller rectangles, closer).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.defects import defect_mask  # (re-exported: the placement, the bounds and verify read it here)
from wsealloc.arch.schema import DieBoundary
from wsealloc.constraints.geometry import Box, connected
from wsealloc.cost.comm import CommCosts, MeshParams, comm_costs, die_crossings
from wsealloc.opmodels import CostTable
from wsealloc.problem.flows import Flows, flows
from wsealloc.problem.objective import Aggregate, Objective, Throughput, paced, path_length

INF = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class ShapeTable:
    """Best rectangles of one kernel class, indexed by (height index, width)."""

    heights: np.ndarray  # candidate rows r, ascending
    best: np.ndarray  # [H, cols+1]: min latency over r <= heights[h] with exactly c columns (INF: none legal)
    best_r: np.ndarray  # [H, cols+1]: the r achieving it
    best_df: np.ndarray  # [H, cols+1]: its op-model code (an ONNX dataflow code, or a contest model's index)
    prefix: np.ndarray  # [H, cols+1]: min over c' <= c of best (non-increasing in c)
    prefix_width: np.ndarray  # [H, cols+1]: a width c' <= c whose best is prefix[h, c] (the one to use)

    def height_index(self, max_rows: int) -> int:
        """Index of the largest candidate height <= max_rows (-1 if none)."""
        return int(np.searchsorted(self.heights, max_rows, side="right")) - 1

    def width_for(self, hidx: int, target: int) -> int:
        """Fewest columns of a legal rectangle with <= heights[hidx] rows and latency <= target (0: none)."""
        if hidx < 0:
            return 0
        c = int(np.searchsorted(-self.prefix[hidx], -target, side="left"))
        return c if c < self.prefix.shape[1] else 0

    def widths_within(self, max_rows: np.ndarray, target: int) -> np.ndarray:
        """``width_for(height_index(m), target)`` for every m of ``max_rows`` at once (0: none).

        Each row of ``prefix`` is non-increasing, so the fewest columns meeting the target is the
        count of its leading entries above it."""
        per_height = (self.prefix > target).sum(axis=1)
        per_height = np.where(per_height < self.prefix.shape[1], per_height, 0)
        hidx = np.searchsorted(self.heights, max_rows, side="right") - 1
        return np.where(hidx >= 0, per_height[np.maximum(hidx, 0)], 0)


def wirelength(rects: np.ndarray, src: np.ndarray, dst: np.ndarray) -> float:
    """Sum over flows of the L1 distance between the centres of the two rectangles ([row, col, r, c]).

    Centres are half-integers: computed in half units (2 * centre = 2 * corner + side), exact."""
    if src.size == 0:
        return 0.0
    r = rects.astype(np.int64)
    cy2 = 2 * r[:, 0] + r[:, 2]
    cx2 = 2 * r[:, 1] + r[:, 3]
    return float(np.abs(cy2[src] - cy2[dst]).sum() + np.abs(cx2[src] - cx2[dst]).sum()) / 2.0


@dataclass(frozen=True)
class PlacementProblem:
    """Placement of kernels (in dataflow order) as rectangles on a mesh with defects and die rules."""

    names: tuple[str, ...]
    kernel_class: tuple[int, ...]
    shapes: tuple[ShapeTable, ...]
    mesh: MeshParams
    blocked: np.ndarray  # bool [rows, cols]: defective cores
    die_rule: DieBoundary
    flows: Flows  # producer->consumer flows with their multicast groups
    lower_bound: int  # optimum of the allocation-only problem: no placement can beat it
    objective: Objective = field(default_factory=Throughput)  # how layouts are valued (module docstring)
    preds: tuple[tuple[int, ...], ...] = ()  # producers of each kernel (a token's path; Latency)
    # the user's constraints (``opmodels.constrain``): keep-out boxes (also in ``blocked``), each
    # kernel's fixed top-left corner and the area it stays within (None: free). Boxes: (row, col, rows, cols)
    keep_out: tuple[Box, ...] = ()
    pins: tuple[tuple[int, int] | None, ...] = ()
    fences: tuple[Box | None, ...] = ()
    touch: tuple[tuple[int, ...], ...] = ()  # groups of kernels whose rectangles must lie side by side
    # the area the strip construction fills (None: the wafer); a sub-problem of fenced kernels fills its fence
    area: Box | None = None

    @property
    def n_kernels(self) -> int:
        """Number of kernels."""
        return len(self.names)

    @cached_property
    def blocked_prefix(self) -> np.ndarray:
        """[rows + 1, cols + 1] 2D prefix sums of ``blocked``: defects in any rectangle in O(1).
        Computed once per problem (the constructions test thousands of rectangles)."""
        out = np.zeros((self.blocked.shape[0] + 1, self.blocked.shape[1] + 1), dtype=np.int32)
        out[1:, 1:] = np.cumsum(np.cumsum(self.blocked, axis=0), axis=1)
        return out

    @property
    def constrained(self) -> bool:
        """Whether some kernel has a fixed corner, an area to stay within or a group to touch."""
        return any(p is not None for p in self.pins) or any(f is not None for f in self.fences) or bool(self.touch)

    @property
    def ruled(self) -> bool:
        """Whether any user rule shapes the layout: a fixed corner, an area, a group or a keep-out."""
        return self.constrained or bool(self.keep_out)

    def fixed(self, kernel: int) -> bool:
        """Whether the searches after the construction leave ``kernel`` where it is: the user fixed its
        corner, or it touches its group (moving it alone could part the group)."""
        return (bool(self.pins) and self.pins[kernel] is not None) or any(kernel in g for g in self.touch)

    @cached_property
    def defects(self) -> np.ndarray:
        """bool [rows, cols]: the defective cores alone (``blocked`` less the keep-out areas)."""
        if not self.keep_out:
            return self.blocked
        mask = self.blocked.copy()
        for y, x, r, c in self.keep_out:
            mask[y : y + r, x : x + c] = False
        return mask

    def violations(self, rects: np.ndarray) -> list[str]:
        """The user's constraints a layout breaks (kernel names, what is wrong): fixed corners, areas,
        keep-outs, groups side by side. Empty for a layout that honours them all."""
        out: list[str] = []
        for k, (y, x, r, c) in enumerate(rects.tolist()):
            out.extend(self._ruled_rect(k, y, x, r, c))
            for box in self.keep_out:
                if y < box[0] + box[2] and box[0] < y + r and x < box[1] + box[3] and box[1] < x + c:
                    out.append(f"{self.names[k]} enters a keep-out area")
        return out + self._apart(rects)

    def layout_errors(self, rects: np.ndarray) -> list[str]:
        """Why ``rects`` is not a layout of this problem (empty: it is one): a rectangle that breaks
        :meth:`rect_errors`, two sharing a core, a group not side by side. For layouts the engine did
        not build (a start from an old plan): the constructions build valid ones by design."""
        if rects.shape != (self.n_kernels, 4):
            return [f"{len(rects)} rectangles for {self.n_kernels} kernels"]
        out = [e for k in range(self.n_kernels) for e in self.rect_errors(k, rects[k])]
        if out:
            return out
        cover = np.zeros((self.mesh.rows, self.mesh.cols), dtype=np.int32)
        for y, x, r, c in rects.tolist():
            cover[y : y + r, x : x + c] += 1
        if (cover > 1).any():
            y, x = (int(v[0]) for v in np.nonzero(cover > 1))
            out.append(f"two kernels share core [{y}, {x}]")
        return out + self._apart(rects)

    def crosses_dies(self, rects: np.ndarray) -> bool:
        """Whether a rectangle of ``rects`` crosses a die boundary on a wafer that forbids it (the
        first-fit fallback and the rectangles at the user's corners do not look at dies: the
        multi-start checks what they make here before ranking it)."""
        m = self.mesh
        return self.die_rule is DieBoundary.FORBID and bool(die_crossings(rects, m.die_rows, m.die_cols).any())

    def rect_errors(self, kernel: int, rect: np.ndarray) -> list[str]:
        """Why kernel ``kernel`` may not take rectangle ``rect`` (row, col, rows, cols) whatever the
        others do: off the wafer, on a defective or kept-out core, across a die boundary the wafer
        forbids crossing, away from its pin or outside its area."""
        y, x, r, c = (int(v) for v in rect)
        name, rows, cols = self.names[kernel], self.mesh.rows, self.mesh.cols
        if y < 0 or x < 0 or r < 1 or c < 1 or y + r > rows or x + c > cols:
            return [f"{name} at [{y}, {x}] ({r} x {c}) leaves the {rows} x {cols} wafer"]
        out: list[str] = []
        if self.blocked[y : y + r, x : x + c].any():
            out.append(f"{name} covers a defective or kept-out core")
        m = self.mesh
        if self.die_rule is DieBoundary.FORBID and die_crossings(np.array([[y, x, r, c]]), m.die_rows, m.die_cols)[0]:
            out.append(f"{name} crosses a die boundary")
        return out + self._ruled_rect(kernel, y, x, r, c)

    def _ruled_rect(self, k: int, y: int, x: int, r: int, c: int) -> list[str]:
        """Kernel k's pin or area broken by the r x c rectangle at (y, x)."""
        out = []
        pin = self.pins[k] if self.pins else None
        if pin is not None and (y, x) != pin:
            out.append(f"{self.names[k]} at [{y}, {x}], pinned at {list(pin)}")
        fence = self.fences[k] if self.fences else None
        if fence is not None:
            fy, fx, fr, fc = fence
            if not (fy <= y and fx <= x and y + r <= fy + fr and x + c <= fx + fc):
                out.append(f"{self.names[k]} leaves its area")
        return out

    def _apart(self, rects: np.ndarray) -> list[str]:
        """The groups whose rectangles do not lie side by side."""
        out = []
        for group in self.touch:
            if not connected([(int(rects[k, 0]), int(rects[k, 1]), int(rects[k, 2]), int(rects[k, 3])) for k in group]):
                out.append(f"{', '.join(self.names[k] for k in group[:3])}{'...' if len(group) > 3 else ''} do not touch")
        return out

    def restrict(self, kernels: np.ndarray, blocked: np.ndarray, area: Box | None) -> PlacementProblem:
        """The problem of ``kernels`` alone (renumbered in that order; the flows among them), on a wafer
        whose ``blocked`` cores include what other kernels took, filling ``area`` (None: the wafer)."""
        keep = np.asarray(kernels, dtype=np.int64)
        position = np.full(self.n_kernels, -1, dtype=np.int64)
        position[keep] = np.arange(keep.size)
        fl = self.flows
        inside = (position[fl.src] >= 0) & (position[fl.dst] >= 0)
        group = fl.group[inside]
        return replace(
            self,
            names=tuple(self.names[k] for k in keep.tolist()),
            kernel_class=tuple(self.kernel_class[k] for k in keep.tolist()),
            blocked=blocked,
            flows=Flows(position[fl.src[inside]], position[fl.dst[inside]], fl.nbytes[inside], group),
            preds=tuple(tuple(int(position[p]) for p in self.preds[k] if position[p] >= 0) for k in keep.tolist())
            if self.preds
            else (),
            pins=(),
            fences=(),
            touch=(),
            area=area,
        )

    def shape(self, kernel: int) -> ShapeTable:
        """The shape table of a kernel."""
        return self.shapes[self.kernel_class[kernel]]

    def evaluate(self, rects: np.ndarray, latency: np.ndarray) -> tuple[np.ndarray, CommCosts]:
        """Stage time of every kernel for the given rectangles: op-model latency + communication, or
        (an objective that charges no communication: the contest) the latency alone, with the
        wirelength as ``traffic_distance``."""
        fl = self.flows
        if not self.objective.charges_communication:
            zero = np.zeros(latency.size, dtype=np.int64)
            return latency.astype(np.int64), CommCosts(zero, zero, zero, zero, wirelength(rects, fl.src, fl.dst))
        comm = comm_costs(rects, latency, fl.src, fl.dst, fl.nbytes, self.mesh, fl.group)
        return latency.astype(np.int64) + comm.comm_cycles, comm

    def rank(self, rects: np.ndarray, latency: np.ndarray) -> tuple[float, ...]:
        """The objective's rank of a layout (smaller first)."""
        stage, comm = self.evaluate(rects, latency)
        return self.objective.rank(stage, comm, self.preds)

    def layout_time(self, stage: np.ndarray, comm: CommCosts) -> int:
        """The objective's time value of a layout in cycles: the slowest stage, or each request's token
        time (a token's path, or the slowest stage once per request in flight: ``objective.paced``)."""
        if self.objective.aggregate is Aggregate.PATH:
            return paced(path_length(self.preds, (), stage.tolist()), int(stage.max(initial=0)), self.objective.pace)
        return int(stage.max(initial=0))

    def in_sequence(self, order: np.ndarray) -> PlacementProblem:
        """The same problem with its kernels renumbered: kernel i of the result is kernel ``order[i]``
        of this one (flows follow). The strip construction lays kernels out in index order, so this is
        how it is asked for another sequence than the dataflow one (see ``solvers.place.sequences``)."""
        order = np.asarray(order, dtype=np.int64)
        if sorted(order.tolist()) != list(range(self.n_kernels)):
            raise ValueError(f"order {order.tolist()[:8]}...: expected a permutation of the {self.n_kernels} kernels")
        position = np.empty_like(order)
        position[order] = np.arange(order.size, dtype=np.int64)
        fl = self.flows
        return replace(
            self,
            names=tuple(self.names[k] for k in order.tolist()),
            kernel_class=tuple(self.kernel_class[k] for k in order.tolist()),
            flows=Flows(position[fl.src], position[fl.dst], fl.nbytes, fl.group),
            preds=tuple(tuple(sorted(int(position[p]) for p in self.preds[k])) for k in order.tolist()) if self.preds else (),
            pins=tuple(self.pins[k] for k in order.tolist()) if self.pins else (),
            fences=tuple(self.fences[k] for k in order.tolist()) if self.fences else (),
            touch=tuple(tuple(int(position[k]) for k in group) for group in self.touch),
        )

    def shape_table_rows(self) -> int:
        """Rows of the tallest rectangle any shape table holds."""
        return int(max(int(s.heights[-1]) for s in self.shapes))


def mesh_params(a: Arch) -> MeshParams:
    """Communication-model parameters of an arch."""
    w = a.wafer
    return MeshParams(
        rows=a.rows,
        cols=a.cols,
        tile_rows=w.die_cores.rows,
        tile_cols=w.die_cores.cols,
        link_bytes_per_cycle=float(a.noc.link_bytes_per_cycle),
        hop_latency=a.noc.hop_latency_cycles,
        die_rows=w.die_cores.rows,
        die_cols=w.die_cores.cols,
        die_penalty=w.die_crossing_penalty_cycles if w.die_boundary is DieBoundary.PENALTY else 0,
    )


def _shape_table(costs: CostTable, index: int) -> ShapeTable:
    """The shape table of a kernel read from its op-model table (the one place a grid is judged
    legal): every legal op model is a cell (rows, cols) with its latency and dataflow code; the heights
    are the row counts of its legal op models (a height with none would repeat the row below it: the
    table is dense, [heights, cols + 1] per array, so a kernel the user fixed to one grid holds one
    row, not the hundred its op-model table enumerates: LLaMA-7B re-solved from a plan, 449 tables,
    2.7 GB before; the zoo's union of heights, the band heights, is the same either way). Only the
    allocation's candidates: a placement cannot use a shape the allocation never saw, so the
    allocation optimum bounds it."""
    t = costs.kernels[index].table
    legal = np.flatnonzero(t.legal() & (t.c <= costs.arch.cols))
    heights = np.unique(t.r[legal]) if legal.size else np.unique(t.r)[:1]
    lat = np.full((heights.size, costs.arch.cols + 1), INF, dtype=np.int64)
    dfc = np.zeros((heights.size, costs.arch.cols + 1), dtype=np.int32)
    # per cell the fastest legal op model, the first dataflow among equals (the enumeration's order)
    order = legal[np.lexsort((legal, t.latency[legal]))]
    rows, cols = np.searchsorted(heights, t.r[order]), t.c[order]
    cell = rows * lat.shape[1] + cols
    _, first = np.unique(cell, return_index=True)
    pick = order[first]
    lat[np.searchsorted(heights, t.r[pick]), t.c[pick]] = t.latency[pick]
    dfc[np.searchsorted(heights, t.r[pick]), t.c[pick]] = t.dataflow[pick]
    return shape_table(heights, lat, dfc)


def shape_table(heights: np.ndarray, lat: np.ndarray, codes: np.ndarray) -> ShapeTable:
    """The shape table of exact cells: ``lat[h, c]`` the least latency of a rectangle of exactly
    ``heights[h]`` rows and ``c`` columns (INF: none), ``codes[h, c]`` its op-model code. Each cell
    becomes the best over all heights up to ``heights[h]`` (a running minimum down the height axis,
    remembering where it came from)."""
    best = lat.copy()
    arg = np.tile(np.arange(heights.size)[:, None], (1, lat.shape[1]))
    for h in range(1, heights.size):
        keep = best[h - 1] <= best[h]
        best[h] = np.where(keep, best[h - 1], best[h])
        arg[h] = np.where(keep, arg[h - 1], arg[h])
    cols_idx = np.arange(lat.shape[1])[None, :]
    prefix = np.minimum.accumulate(best, axis=1)
    # where the running minimum was last reached: a width holding it (exact widths can be slower:
    # a contest kernel's widths are multiples of 3, most exact cells are empty)
    prefix_width = np.maximum.accumulate(np.where(best == prefix, cols_idx, 0), axis=1)
    return ShapeTable(
        heights=heights,
        best=best,
        best_r=heights[arg],
        best_df=codes[arg, cols_idx],
        prefix=prefix,
        prefix_width=prefix_width,
    )


def build_placement_problem(costs: CostTable, lower_bound: int, objective: Objective | None = None) -> PlacementProblem:
    """The placement problem of a cost table (classes of identical kernels share a shape table) under
    ``objective`` (min-max by default)."""
    sig_to_class: dict[int, int] = {}
    shapes: list[ShapeTable] = []
    kernel_class: list[int] = []
    for i, kc in enumerate(costs.kernels):
        if kc.signature not in sig_to_class:
            sig_to_class[kc.signature] = len(shapes)
            shapes.append(_shape_table(costs, i))
        kernel_class.append(sig_to_class[kc.signature])
    w = costs.arch.wafer
    blocked = defect_mask(costs.arch.rows, costs.arch.cols, w.defects.cores, w.defects.rate, w.defects.seed)
    applied = costs.applied
    keep_out: tuple[Box, ...] = applied.obstacles if applied is not None else ()
    for y, x, r, c in keep_out:
        blocked[y : y + r, x : x + c] = True
    names = [kc.kernel.name for kc in costs.kernels]
    pins = tuple((p[1] if (p := applied.pin_of(n)) is not None else None) for n in names) if applied else ()
    fences = tuple((f[1] if (f := applied.fence_of(n)) is not None else None) for n in names) if applied else ()
    index = {n: i for i, n in enumerate(names)}
    touch = tuple(
        tuple(index[n] for n in group) for _, group in (applied.touch_groups if applied else ()) if all(n in index for n in group)
    )
    return PlacementProblem(
        names=tuple(kc.kernel.name for kc in costs.kernels),
        kernel_class=tuple(kernel_class),
        shapes=tuple(shapes),
        mesh=mesh_params(costs.arch),
        blocked=blocked,
        die_rule=w.die_boundary,
        flows=flows(costs),
        lower_bound=lower_bound,
        objective=objective or Throughput(),
        preds=costs.preds(),
        keep_out=keep_out,
        pins=pins,
        fences=fences,
        touch=touch,
    )
