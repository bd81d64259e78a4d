"""``wsealloc verify``: recompute every number of a plan from its model and arch and check every
constraint, independently of the solvers (front end + cost model + legality rules only).

Checks: the model file is the one planned (SHA-256); the kernels and their ONNX nodes match; each
kernel's grid has r x c = cores and is a legal op model (inside the wafer, die rule, padding, SRAM);
its latency, compute, NoC and SRAM numbers equal the cost model's; the cores fit the wafer; the
bottleneck is the maximum latency and the bound does not exceed it; placements stay inside the
wafer, avoid defective cores and die crossings when forbidden, and never overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from wsealloc.arch import Arch
from wsealloc.cost import CostOptions, Dataflow, grid_costs, kernel_work
from wsealloc.cost.comm import comm_costs
from wsealloc.errors import PlanError, VerificationError
from wsealloc.graph.kernels import KernelGraph
from wsealloc.opmodels import CostTable, Reason, build_cost_table
from wsealloc.opmodels.enumerate import classify
from wsealloc.pipeline import ModelSpec, load_kernels
from wsealloc.plan.build import bound_by
from wsealloc.plan.io import file_sha256, read_plan
from wsealloc.plan.schema import KernelPlan, Plan
from wsealloc.problem.flows import flows
from wsealloc.problem.placement import defect_mask, mesh_params
from wsealloc.problem.stages import cut_bytes, link_params, transfer_cycles


@dataclass(frozen=True)
class VerifyReport:
    """What was checked and what failed."""

    plan: str
    kernels: int
    checks: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.violations


def _resolve_model(plan: Plan, plan_path: Path, override: str | None) -> Path:
    if override:
        if not Path(override).is_file():
            raise PlanError(f"--model {override}: no such model file (a path to the ONNX file the plan was made from)")
        return Path(override)
    for c in (Path(plan.model.path), plan_path.parent / plan.model.path):
        if c.is_file():
            return c
    raise PlanError(
        f"{plan_path}: model {plan.model.path!r} not found (looked in the current directory and next to "
        "the plan); pass --model PATH"
    )


def verify_plan(path: str | Path, model_override: str | None = None) -> VerifyReport:
    """Recompute and check ``path``; the report lists every violation found."""
    plan_path = Path(path)
    plan = read_plan(plan_path)
    model_path = _resolve_model(plan, plan_path, model_override)
    bad: list[str] = []
    checks = 0

    def check(ok: bool, message: str) -> None:
        nonlocal checks
        checks += 1
        if not ok:
            bad.append(message)

    check(
        file_sha256(model_path) == plan.model.sha256,
        f"model {model_path} differs from the planned one (SHA-256 mismatch): re-run solve",
    )
    try:
        arch = Arch.model_validate(plan.arch.spec)
    except ValidationError as exc:
        raise PlanError(f"{plan_path}: arch.spec is not a valid architecture: {exc.errors()[0]['msg']}") from exc
    for field, value in (
        ("rows", arch.rows),
        ("cols", arch.cols),
        ("total_cores", arch.total_cores),
        ("sram_bytes_per_core", arch.usable_sram_bytes),
        ("clock_hz", arch.clock_hz),
    ):
        check(getattr(plan.arch, field) == value, f"arch.{field} is {getattr(plan.arch, field)} but the spec gives {value}")
    options = CostOptions.from_dict(plan.cost.model_dump())
    spec = ModelSpec(str(model_path), plan.model.dims, plan.model.fuse, plan.model.weights_as_inputs)
    kgraph = load_kernels(spec)
    by_name = {k.name: k for k in kgraph.kernels}
    planned = {k.name for k in plan.kernels}
    missing = [n for n in by_name if n not in planned]
    extra = [n for n in planned if n not in by_name]
    check(not missing, f"{len(missing)} kernel(s) of the model are not in the plan, e.g. {missing[:3]}")
    check(not extra, f"{len(extra)} planned kernel(s) are not in the model, e.g. {extra[:3]}")
    check(len(planned) == len(plan.kernels), "kernel names repeat in the plan")
    total = 0
    for kp in plan.kernels:
        kernel = by_name.get(kp.name)
        if kernel is None:
            continue
        check(tuple(kernel.nodes) == kp.onnx_nodes, f"{kp.name}: onnx_nodes differ from the model's grouping")
        check(kp.type == kernel.kind.value, f"{kp.name}: type is {kp.type!r}, the model's kernel is {kernel.kind.value!r}")
        r, c = kp.grid
        check(r >= 1 and c >= 1 and r * c == kp.cores, f"{kp.name}: grid {r}x{c} does not give {kp.cores} cores")
        try:
            dataflow = Dataflow(kp.dataflow)
        except ValueError:
            check(False, f"{kp.name}: unknown dataflow {kp.dataflow!r}")
            continue
        work = kernel_work(kernel, kgraph.ops, arch, options)
        if dataflow not in work.dataflows():
            check(False, f"{kp.name}: dataflow {kp.dataflow} is not available for this kernel")
            continue
        cost = grid_costs(work, arch, options, dataflow, np.array([max(r, 1)]), np.array([max(c, 1)]))
        reason = Reason(int(classify(arch, options, cost.rows, cost.cols, cost.sram_bytes, cost.waste)[0]))
        check(
            reason is Reason.LEGAL,
            f"{kp.name}: op model {r}x{c} is not legal: {reason.label}"
            + (f" (needs {int(cost.sram_bytes[0])} B, usable {arch.usable_sram_bytes} B)" if reason is Reason.SRAM_OVER else ""),
        )
        for field, value in (
            ("latency_cycles", cost.latency[0]),
            ("compute_cycles", cost.compute_cycles[0]),
            ("noc_cycles", cost.noc_cycles[0]),
            ("sram_bytes_per_core", cost.sram_bytes[0]),
        ):
            check(
                getattr(kp, field) == int(value), f"{kp.name}: {field} is {getattr(kp, field)}, the cost model gives {int(value)}"
            )
        total += kp.cores
    obj = plan.objective
    check(obj.cores_used == total, f"objective.cores_used is {obj.cores_used}, the kernels add up to {total}")
    if missing or extra:
        return VerifyReport(str(plan_path), len(plan.kernels), checks, tuple(bad))
    order = {k.name: i for i, k in enumerate(kgraph.kernels)}
    planned_in_order = sorted(plan.kernels, key=lambda k: order[k.name])
    stage_of = [k.stage for k in planned_in_order]
    check(
        stage_of[0] == 0 and all(b - a in (0, 1) for a, b in zip(stage_of, stage_of[1:], strict=False)),
        "kernel stages must be contiguous in topological order, starting at wafer 0",
    )
    check(len(plan.stages) == stage_of[-1] + 1, f"the plan lists {len(plan.stages)} stages, its kernels use {stage_of[-1] + 1}")
    cuts = [0] + [i for i in range(1, len(stage_of)) if stage_of[i] != stage_of[i - 1]] + [len(stage_of)]
    transfer = transfer_cycles(cut_bytes(kgraph, arch), *link_params(arch)) if len(cuts) > 2 else np.zeros(len(stage_of) + 1, int)
    worst, worst_names = 0, set[str]()
    for s, (first, end) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        members = planned_in_order[first:end]
        cores = sum(k.cores for k in members)
        check(cores <= arch.total_cores, f"wafer {s} uses {cores:,} cores, a wafer has {arch.total_cores:,}")
        sub_names = {k.name for k in members}
        sub = KernelGraph(
            kgraph.ops,
            tuple(k for k in kgraph.kernels if k.name in sub_names),
            tuple(e for e in kgraph.edges if e.src in sub_names and e.dst in sub_names),
            kgraph.fused,
        )
        # root causes first: the communication numbers of rectangles off the wafer mean nothing
        before = len(bad)
        checks += _check_placement(members, arch, bad)
        if len(bad) == before:
            checks += _check_comm(members, sub, arch, bad, plan.objective.traffic_distance if len(cuts) == 2 else None)
        stage_time = max(k.latency_cycles + k.comm_cycles for k in members)
        if s < len(plan.stages):
            sp = plan.stages[s]
            check(
                (sp.index, sp.kernels, sp.cores_used, sp.bottleneck_cycles, sp.transfer_cycles)
                == (s, len(members), cores, stage_time, int(transfer[first])),
                f"stages[{s}] does not match its kernels (kernels, cores, bottleneck or transfer cycles)",
            )
        load = max(stage_time, int(transfer[first]), int(transfer[end]))
        names = {k.name for k in members if k.latency_cycles + k.comm_cycles == load}
        if load == max(int(transfer[first]), int(transfer[end])) and load > stage_time:
            # a transfer is the bottleneck: the kernel receiving that cut (this stage's first, or the next's)
            names = set()
            if int(transfer[first]) == load:
                names.add(members[0].name)
            if int(transfer[end]) == load and end < len(planned_in_order):
                names.add(planned_in_order[end].name)
        # stages tied at the slowest load all hold slowest kernels
        if load > worst:
            worst, worst_names = load, names
        elif load == worst and load > 0:
            worst_names |= names
    check(
        obj.bottleneck_cycles == worst,
        f"objective.bottleneck_cycles is {obj.bottleneck_cycles}, the slowest stage takes {worst}",
    )
    check(obj.bottleneck_kernel in worst_names, f"objective.bottleneck_kernel {obj.bottleneck_kernel!r} is not a slowest kernel")
    if obj.lower_bound_cycles is not None:
        check(
            obj.lower_bound_cycles <= obj.bottleneck_cycles,
            f"lower bound {obj.lower_bound_cycles} exceeds the bottleneck {obj.bottleneck_cycles}",
        )
        if obj.status == "OPTIMAL":
            check(obj.lower_bound_cycles == obj.bottleneck_cycles, "status OPTIMAL but the bound is below the objective")
    check(
        abs(obj.throughput_samples_per_s - arch.clock_hz / max(worst, 1)) <= 1e-6 * obj.throughput_samples_per_s,
        "throughput does not equal clock / bottleneck",
    )
    has_place = [k.placement is not None for k in plan.kernels]
    check(
        obj.placed == all(has_place),
        f"objective.placed is {obj.placed} but {sum(has_place)} of {len(has_place)} kernels are placed",
    )
    if obj.lower_bound_cycles is None:
        check(obj.gap is None, "objective.gap is given without a lower bound")
    else:
        gap = (
            0.0
            if obj.bottleneck_cycles == 0
            else max(0.0, (obj.bottleneck_cycles - obj.lower_bound_cycles) / obj.bottleneck_cycles)
        )
        check(
            obj.gap is not None and abs(obj.gap - gap) <= 1e-9,
            f"objective.gap is {obj.gap}, (bottleneck - bound) / bottleneck is {gap:.6g}",
        )
    if len(cuts) == 2:
        slowest = next((k for k in plan.kernels if k.name == obj.bottleneck_kernel), None)
        if slowest is not None:
            expected = bound_by(slowest)
            check(
                obj.bound_by == expected,
                f"objective.bound_by is {obj.bound_by!r}, the bottleneck kernel's numbers give {expected!r}",
            )
        if obj.lower_bound_cycles is not None:
            # the bound is a proof claim: recompute the allocation-only optimum without solver code
            optimum = allocation_optimum(build_cost_table(kgraph, arch, options, check_feasible=False))
            check(
                optimum is not None and obj.lower_bound_cycles <= optimum,
                "no allocation of the model fits the wafer, so the plan cannot be valid"
                if optimum is None
                else f"objective.lower_bound_cycles {obj.lower_bound_cycles} exceeds the allocation-only optimum {optimum}: "
                "it is not a valid bound",
            )
    return VerifyReport(str(plan_path), len(plan.kernels), checks, tuple(bad))


def allocation_optimum(table: CostTable) -> int | None:
    """The allocation-only optimum, recomputed independently of the solvers: the smallest T at which
    every kernel's fewest cores with latency <= T fit the wafer together (None: they never do).

    Each Pareto frontier lists cores ascending and latency descending, so the fewest cores meeting T
    are at the first frontier entry with latency <= T, and the total is non-increasing in T."""
    fronts = [(-kc.frontier.latency, kc.frontier.cores) for kc in table.kernels]  # -latency ascending
    if any(neg.size == 0 for neg, _ in fronts):
        return None
    candidates = np.unique(np.concatenate([-neg for neg, _ in fronts]))

    def fits(t: int) -> bool:
        total = 0
        for neg, cores in fronts:
            i = int(np.searchsorted(neg, -t, side="left"))  # first entry with latency <= t
            if i >= cores.size:
                return False
            total += int(cores[i])
        return total <= table.arch.total_cores

    lo, hi = 0, candidates.size - 1
    if not fits(int(candidates[hi])):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(int(candidates[mid])):
            hi = mid
        else:
            lo = mid + 1
    return int(candidates[lo])


def _check_comm(members: list[KernelPlan], kgraph: KernelGraph, arch: Arch, bad: list[str], traffic: float | None) -> int:
    """Communication cycles of one wafer's kernels: zero without placement, recomputed with it."""
    placed = [k.placement is not None for k in members]
    if not any(placed):
        for k in members:
            if k.comm_cycles:
                bad.append(f"{k.name}: comm_cycles {k.comm_cycles} without a placement")
        return len(members)
    if not all(placed):
        bad.append(f"{placed.count(False)} kernel(s) have no placement in a placed plan")
        return 1
    kernels = members
    rects = np.array([(*k.placement, *k.grid) for k in kernels if k.placement is not None], dtype=np.int64)
    fl = flows(kgraph, arch)
    latency = np.array([k.latency_cycles for k in kernels], dtype=np.float64)
    comm = comm_costs(rects, latency, fl.src, fl.dst, fl.nbytes, mesh_params(arch), fl.group)
    parts = zip(
        comm.comm_cycles.tolist(),
        comm.distance_cycles.tolist(),
        comm.congestion_cycles.tolist(),
        comm.die_cycles.tolist(),
        strict=True,
    )
    for k, (value, dist, cong, die) in zip(kernels, parts, strict=True):
        if k.comm_cycles != value:
            bad.append(f"{k.name}: comm_cycles is {k.comm_cycles}, the communication model gives {value}")
        recorded = (k.distance_cycles, k.congestion_cycles, k.die_cycles)
        if any(x is not None for x in recorded) and recorded != (dist, cong, die):
            bad.append(
                f"{k.name}: distance/congestion/die cycles are {recorded}, the communication model gives {(dist, cong, die)}"
            )
    if traffic is not None and abs(traffic - comm.traffic_distance) > 1e-6 * max(1.0, comm.traffic_distance):
        bad.append(f"objective.traffic_distance is {traffic}, recomputed {comm.traffic_distance}")
    return len(kernels) + 1


def _check_placement(members: list[KernelPlan], arch: Arch, bad: list[str]) -> int:
    """Bounds, die rule, defects and overlap of one wafer's rectangles; returns the number of checks."""
    placed = [k for k in members if k.placement is not None]
    if not placed:
        return 0
    occupancy = np.full((arch.rows, arch.cols), -1, dtype=np.int32)
    d = arch.wafer.defects
    defects = defect_mask(arch.rows, arch.cols, d.cores, d.rate, d.seed)
    die_r, die_c = arch.wafer.die_cores.rows, arch.wafer.die_cores.cols
    checks = 0
    for idx, k in enumerate(placed):
        assert k.placement is not None
        row, col = k.placement
        r, c = k.grid
        checks += 3
        if row < 0 or col < 0 or row + r > arch.rows or col + c > arch.cols:
            bad.append(f"{k.name}: rectangle {r}x{c} at [{row}, {col}] leaves the {arch.rows}x{arch.cols} wafer")
            continue
        if arch.wafer.die_boundary == "forbid" and (
            row // die_r != (row + r - 1) // die_r or col // die_c != (col + c - 1) // die_c
        ):
            bad.append(f"{k.name}: rectangle at [{row}, {col}] crosses a die boundary, which the arch forbids")
        window = occupancy[row : row + r, col : col + c]
        if (window >= 0).any():
            other = placed[int(window[window >= 0][0])].name
            bad.append(f"{k.name}: rectangle at [{row}, {col}] overlaps {other}")
        broken = int(defects[row : row + r, col : col + c].sum())
        if broken:
            bad.append(f"{k.name}: rectangle at [{row}, {col}] covers {broken} defective core(s)")
        window[window < 0] = idx
    return checks


def require_valid(report: VerifyReport) -> None:
    """Raise :class:`VerificationError` summarizing the violations, if any."""
    if report.violations:
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise VerificationError(f"{report.plan}: {len(report.violations)} violation(s): {report.violations[0]}{more}")
