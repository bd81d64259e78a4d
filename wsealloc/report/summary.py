"""The summary ``wsealloc solve`` prints: bottleneck, what bounds it, throughput, cores, speed-up, bound, gap."""

from __future__ import annotations

from rich.console import Console

from wsealloc.api import SolveOutcome
from wsealloc.plan.schema import KernelPlan
from wsealloc.problem.placement import defect_mask


def communication(k: KernelPlan) -> str:
    """ ", communication N (distance a + congestion b + die crossings c)" for a placed kernel, else ""."""
    if not k.comm_cycles:
        return ""
    named = [("distance", k.distance_cycles), ("congestion", k.congestion_cycles), ("die crossings", k.die_cycles)]
    parts = " + ".join(f"{name} {value:,}" for name, value in named if value)
    return f", communication {k.comm_cycles:,}" + (f" = {parts}" if parts else "")


def placement_cost(out: SolveOutcome) -> str | None:
    """What placing cost against the allocation-only optimum (single-wafer placed plans that lost
    cycles): the cycles, the kernels above the optimum, the cores kept, the defective cores avoided."""
    plan = out.plan
    obj = plan.objective
    alloc = out.result.objective
    if not obj.placed or len(plan.stages) > 1 or alloc is None or obj.bottleneck_cycles <= alloc:
        return None
    extra = obj.bottleneck_cycles - alloc
    slower = sum(1 for k in plan.kernels if k.latency_cycles + k.comm_cycles > alloc)
    cores = f"cores used {obj.cores_used:,} vs {out.result.cores_used:,} allocated" if out.result.cores_used else ""
    d = out.costs.arch.wafer.defects
    bad = int(defect_mask(out.costs.arch.rows, out.costs.arch.cols, d.cores, d.rate, d.seed).sum()) if d.cores or d.rate else 0
    unit = "cycle" if extra == 1 else "cycles"
    parts = [
        f"placement cost: +{extra:,} {unit} (+{100 * extra / alloc:.3g}%) over the allocation-only optimum {alloc:,}",
        f"{slower} of {len(plan.kernels)} kernels above it (communication, or fewer cores to fit the rectangles)",
        cores,
        f"{bad:,} defective cores avoided" if bad else "",
    ]
    return "; ".join(part for part in parts if part)


def summary_lines(out: SolveOutcome) -> list[str]:
    """Human-readable lines describing a solve outcome."""
    plan = out.plan
    obj = plan.objective
    arch = plan.arch
    bk = next(k for k in plan.kernels if k.name == obj.bottleneck_kernel)
    gap = f"{obj.gap:.2%}" if obj.gap is not None else "n/a"
    bound = f"{obj.lower_bound_cycles:,}" if obj.lower_bound_cycles is not None else "n/a"
    limit = obj.bound_by.value + (", at its SRAM floor" if obj.sram_limited else "")
    wafers = len(plan.stages)
    total = arch.total_cores * wafers
    on = f"{wafers} x {arch.name}" if wafers > 1 else arch.name
    lines = [
        f"model {plan.model.path}: {len(plan.kernels)} kernels ({out.costs.kgraph.ops.onnx_nodes} ONNX nodes) "
        f"on {on} ({arch.rows}x{arch.cols} = {arch.total_cores:,} cores{' each' if wafers > 1 else ''})",
        f"solver {obj.solver}: {obj.status.value} in {obj.wall_s:.2f} s; bottleneck {obj.bottleneck_cycles:,} cycles, "
        f"bound {bound}, gap {gap}",
        f"bottleneck kernel {bk.name} ({bk.type}, {bk.grid[0]}x{bk.grid[1]} {bk.dataflow}): bound by {limit} "
        f"(compute {bk.compute_cycles:,}, NoC {bk.noc_cycles:,}{communication(bk)} cycles, "
        f"SRAM {bk.sram_bytes_per_core:,} B/core)",
        f"throughput {obj.throughput_samples_per_s:,.1f} samples/s at {arch.clock_hz / 1e9:.2f} GHz; "
        f"cores used {obj.cores_used:,} of {total:,} ({obj.cores_used / total:.1%})",
    ]
    if wafers > 1:
        lines.append(
            "stages: "
            + "; ".join(
                f"wafer {s.index}: {s.kernels} kernels, {s.cores_used:,} cores, {s.bottleneck_cycles:,} cycles, "
                f"transfer in {s.transfer_cycles:,} ({s.status.value})"
                for s in plan.stages
            )
        )
    cost = placement_cost(out)
    if cost is not None:
        lines.append(cost)
    base = plan.baseline
    if base.bottleneck_cycles is not None and out.speedup is not None:
        placed = (
            f", placed by the same construction {base.placed_bottleneck_cycles:,} cycles"
            if obj.placed and base.placed_bottleneck_cycles is not None
            else ""
        )
        lines.append(
            f"baseline {base.name}: {base.bottleneck_cycles:,} cycles ({base.status.value}){placed}; speed-up {out.speedup:.2f}x"
        )
    if obj.message:
        lines.append(f"note: {obj.message}")
    lines += [f"control flow: {note}" for note in out.costs.kgraph.ops.control_flow]
    return lines


def print_summary(out: SolveOutcome, console: Console) -> None:
    """Print the summary lines."""
    for line in summary_lines(out):
        console.print(line, highlight=False, soft_wrap=True)
