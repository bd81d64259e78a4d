"""Turn a cost table and a solver result into a :class:`Plan` document."""

from __future__ import annotations

from wsealloc import __version__
from wsealloc.errors import SolverError
from wsealloc.opmodels import DATAFLOW_CODES, CostTable
from wsealloc.pipeline import ModelSpec
from wsealloc.plan.io import file_sha256
from wsealloc.plan.schema import ArchRef, Baseline, KernelPlan, ModelRef, Objective, Plan, StagePlan
from wsealloc.solvers import SolverResult


def kernel_plans(costs: CostTable, choice: tuple[int, ...]) -> list[KernelPlan]:
    """One record per kernel for a choice vector (index into each kernel's frontier)."""
    out = []
    for kc, j in zip(costs.kernels, choice, strict=True):
        row = int(kc.frontier.index[j])
        t = kc.table
        r, c = int(t.r[row]), int(t.c[row])
        out.append(
            KernelPlan(
                name=kc.kernel.name,
                type=kc.kernel.kind.value,
                onnx_nodes=list(kc.kernel.nodes),
                cores=r * c,
                grid=(r, c),
                dataflow=DATAFLOW_CODES[int(t.dataflow[row])].value,
                latency_cycles=int(t.latency[row]),
                compute_cycles=int(t.compute[row]),
                noc_cycles=int(t.noc[row]),
                sram_bytes_per_core=int(t.sram[row]),
            )
        )
    return out


def make_plan(costs: CostTable, spec: ModelSpec, result: SolverResult, baseline: SolverResult) -> Plan:
    """Assemble the plan document for ``result`` (which must carry a solution)."""
    if result.choice is None or result.objective is None:
        raise SolverError(f"solver {result.solver} returned no solution ({result.status.value}): {result.message}")
    arch = costs.arch
    kernels = kernel_plans(costs, result.choice)
    worst = max(range(len(kernels)), key=lambda i: (kernels[i].latency_cycles, -i))
    bk = kernels[worst]
    cores_used = sum(k.cores for k in kernels)
    objective = Objective(
        bottleneck_cycles=result.objective,
        lower_bound_cycles=result.bound,
        gap=result.gap,
        status=result.status.value,
        solver=result.solver,
        wall_s=round(result.wall_s, 4),
        bottleneck_kernel=bk.name,
        bound_by="compute" if bk.compute_cycles >= bk.noc_cycles else "noc",
        sram_limited=result.choice[worst] == 0 and bk.cores > 1,
        throughput_samples_per_s=arch.clock_hz / max(result.objective, 1),
        cores_used=cores_used,
        message=result.message,
    )
    return Plan(
        schema="wsealloc.plan/1",
        created_by=f"wsealloc {__version__}",
        model=ModelRef(
            path=spec.path,
            sha256=file_sha256(spec.path),
            dims=dict(spec.dims),
            fuse=spec.fuse,
            weights_as_inputs=spec.weights_as_inputs,
        ),
        arch=ArchRef(
            name=arch.name,
            rows=arch.rows,
            cols=arch.cols,
            total_cores=arch.total_cores,
            sram_bytes_per_core=arch.usable_sram_bytes,
            clock_hz=arch.clock_hz,
            spec=arch.model_dump(mode="json"),
        ),
        cost=costs.options.to_dict(),
        objective=objective,
        baseline=Baseline(
            name=baseline.solver,
            bottleneck_cycles=baseline.objective,
            cores_used=baseline.cores_used,
            status=baseline.status.value,
        ),
        kernels=kernels,
        stages=[StagePlan(index=0, kernels=len(kernels), cores_used=cores_used, bottleneck_cycles=result.objective)],
    )
