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
from wsealloc.errors import PlanError, VerificationError
from wsealloc.opmodels import Reason
from wsealloc.opmodels.enumerate import classify
from wsealloc.pipeline import ModelSpec, load_kernels
from wsealloc.plan.io import file_sha256, read_plan
from wsealloc.plan.schema import Plan


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
    candidates = [Path(override)] if override else [Path(plan.model.path), plan_path.parent / plan.model.path]
    for c in candidates:
        if c.exists():
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
    ):
        check(getattr(plan.arch, field) == value, f"arch.{field} is {getattr(plan.arch, field)} but the spec gives {value}")
    options = CostOptions.from_dict(plan.cost)
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
    worst = 0
    for kp in plan.kernels:
        kernel = by_name.get(kp.name)
        if kernel is None:
            continue
        check(list(kernel.nodes) == kp.onnx_nodes, f"{kp.name}: onnx_nodes differ from the model's grouping")
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
        worst = max(worst, kp.latency_cycles)
    obj = plan.objective
    check(total <= arch.total_cores, f"the plan uses {total:,} cores, the wafer has {arch.total_cores:,}")
    check(obj.cores_used == total, f"objective.cores_used is {obj.cores_used}, the kernels add up to {total}")
    check(
        obj.bottleneck_cycles == worst,
        f"objective.bottleneck_cycles is {obj.bottleneck_cycles}, the slowest kernel takes {worst}",
    )
    bottleneck = next((k for k in plan.kernels if k.name == obj.bottleneck_kernel), None)
    check(
        bottleneck is not None and bottleneck.latency_cycles == worst,
        f"objective.bottleneck_kernel {obj.bottleneck_kernel!r} is not a slowest kernel",
    )
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
    checks += _check_placement(plan, arch, bad)
    return VerifyReport(str(plan_path), len(plan.kernels), checks, tuple(bad))


def _check_placement(plan: Plan, arch: Arch, bad: list[str]) -> int:
    """Bounds, die rule, defects and overlap of placed rectangles; returns the number of checks."""
    placed = [k for k in plan.kernels if k.placement is not None]
    if not placed:
        return 0
    occupancy = np.full((arch.rows, arch.cols), -1, dtype=np.int32)
    defects = np.zeros((arch.rows, arch.cols), dtype=bool)
    for row, col in arch.wafer.defects.cores:
        if 0 <= row < arch.rows and 0 <= col < arch.cols:
            defects[row, col] = True
    if arch.wafer.defects.rate > 0:
        rng = np.random.default_rng(arch.wafer.defects.seed)
        defects |= rng.random((arch.rows, arch.cols)) < arch.wafer.defects.rate
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
