"""The cost table of regions: runs of consecutive kernels that share one grid in time
(``cost.region``), each run one unit for the allocation, the placement and the plan.

``region_table(costs, runs)`` turns a kernel cost table and a partition of its kernel sequence into
runs into a cost table whose units are the runs: a run of one kernel is that kernel unchanged (so the
partition into single kernels is today's table exactly), a longer run a region (its work a
:class:`RegionWork`, its op models every grid shape with the members' latencies and SRAM parts
summed, legal when the sum of the SRAM fits). Edges between runs carry what crosses them; edges inside
a run vanish (its kernels hand over in place, on the same cores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wsealloc.cost import RegionWork, TrainingWork
from wsealloc.graph.kernels import Edge, Kernel, KernelGraph
from wsealloc.graph.opclass import KernelKind
from wsealloc.opmodels.enumerate import Frontier, OpModelTable, enumerate_op_models, pareto_frontier
from wsealloc.opmodels.table import CostTable, EdgeBytes, KernelCosts

Run = tuple[int, int]  # kernels [first, end) of the member table


@dataclass(frozen=True)
class Regions:
    """A partition of a kernel table into runs, and the member table it refers to."""

    members: CostTable  # the kernels
    runs: tuple[Run, ...]

    def region_of(self) -> list[int]:
        """The run index of every member kernel."""
        out = [0] * len(self.members.kernels)
        for i, (first, end) in enumerate(self.runs):
            for k in range(first, end):
                out[k] = i
        return out


def check_runs(n: int, runs: Sequence[Run]) -> tuple[Run, ...]:
    """``runs`` as a partition of ``range(n)`` into consecutive, non-empty runs (ValueError otherwise)."""
    out = tuple((int(a), int(b)) for a, b in runs)
    if not out or out[0][0] != 0 or out[-1][1] != n or any(a >= b for a, b in out):
        raise ValueError(f"runs {list(out)[:4]}...: expected consecutive non-empty runs covering kernels 0..{n - 1}")
    if any(out[i][1] != out[i + 1][0] for i in range(len(out) - 1)):
        raise ValueError(f"runs {list(out)[:4]}...: expected consecutive runs (each starting where the last ended)")
    return out


def region_name(members: Sequence[Kernel]) -> str:
    """A region's unit name: its first and last kernels."""
    return members[0].name if len(members) == 1 else f"{members[0].name}..{members[-1].name}"


def region_table(
    costs: CostTable, runs: Sequence[Run], shapes: np.ndarray | None = None, run_shapes: Sequence[np.ndarray] | None = None
) -> CostTable:
    """The cost table whose units are ``runs`` of ``costs``' kernels (see the module docstring).
    ``shapes`` ([G, 2]) restricts every region to those grids (``run_shapes``: each run to its own),
    and then every run, one kernel long or more, is a region (the members on the region's grid, as
    ``problem.sharing`` costs them)."""
    if run_shapes is not None:
        if len(run_shapes) != len(runs):
            raise ValueError(f"{len(run_shapes)} shape lists for {len(runs)} runs")
        shapes = np.zeros((0, 2), dtype=np.int64) if shapes is None else shapes
    runs = check_runs(len(costs.kernels), runs)
    if shapes is None and all(b - a == 1 for a, b in runs):
        return costs  # one kernel per region: today's table, unchanged
    cache: dict[tuple[RegionWork, bytes], tuple[OpModelTable, Frontier, int]] = {}
    units: list[KernelCosts] = []
    unit_of = [0] * len(costs.kernels)
    sig_base = 1 + max((kc.signature for kc in costs.kernels), default=0)
    for i, (first, end) in enumerate(runs):
        for k in range(first, end):
            unit_of[k] = i
        members = costs.kernels[first:end]
        if len(members) == 1 and shapes is None:
            units.append(members[0])
            continue
        kernels = [kc.kernel for kc in members]
        inside = {o for k in kernels for o in k.outputs}
        unit = Kernel(
            name=region_name(kernels),
            kind=KernelKind.REGION,
            anchor=kernels[0].anchor,
            nodes=tuple(n for k in kernels for n in k.nodes),
            inputs=tuple(dict.fromkeys(t for k in kernels for t in k.inputs if t not in inside)),
            outputs=tuple(dict.fromkeys(o for k in kernels for o in k.outputs)),
            weights=tuple(dict.fromkeys(w for k in kernels for w in k.weights)),
            anchor_op="Region",
            state=tuple(dict.fromkeys(s for k in kernels for s in k.state)),
        )
        member_works = []
        for kc in members:
            if isinstance(kc.work, RegionWork | TrainingWork):
                raise ValueError(
                    f"{kc.kernel.name} is a region or in training: regions are built from a table of forward kernels"
                )
            member_works.append(kc.work)
        work = RegionWork(tuple(member_works))
        own = np.asarray(run_shapes[i], dtype=np.int64).reshape(-1, 2) if run_shapes is not None else shapes
        key = (work, own.tobytes() if own is not None else b"")
        if key not in cache:
            table = enumerate_op_models(work, costs.arch, costs.options, shapes=own)
            cache[key] = (table, pareto_frontier(table), sig_base + len(cache))
        table, frontier, sig = cache[key]
        units.append(KernelCosts(unit, work, table, frontier, sig))
    names = [kc.kernel.name for kc in units]
    member_names = [kc.kernel.name for kc in costs.kernels]
    edges = tuple(
        dict.fromkeys(
            Edge(names[unit_of[member_names.index(e.src)]], names[unit_of[member_names.index(e.dst)]], e.tensor)
            for e in costs.kgraph.edges
            if unit_of[member_names.index(e.src)] != unit_of[member_names.index(e.dst)]
        )
    )
    kgraph = KernelGraph(costs.kgraph.ops, tuple(kc.kernel for kc in units), edges, costs.kgraph.fused)
    sizes: dict[tuple[int, int, str], int] = {}
    for e in costs.edges:
        s, t = unit_of[e.src], unit_of[e.dst]
        if s != t:
            sizes[(s, t, e.tensor)] = max(sizes.get((s, t, e.tensor), 0), e.nbytes)
    unit_edges = tuple(EdgeBytes(s, t, tensor, b) for (s, t, tensor), b in sorted(sizes.items()))
    return CostTable(kgraph, costs.arch, costs.options, tuple(units), unit_edges, members=costs, runs=runs)
