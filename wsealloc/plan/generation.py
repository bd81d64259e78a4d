"""One request's generation end to end (``--prompt IN --generate OUT --prefill P.onnx``; issue 34):
the prefill of IN tokens, then OUT decode steps of the plan with the past growing from IN to
IN + OUT - 1. Pure rules on numbers the cost model gives, applied by the builder to the solved plan
and by the verifier to its own recomputation (docs/cost-model.md, "Generation end to end").

* **Prefill** (time to first token): every kernel of the prefill export on one grid, one after
  another, each its fastest dataflow with its operands in place (``opmodels.on_grid``: WaferLLM's
  mapping, as its end-to-end table runs the prefill on one P x P); its weights and cache packed into
  as few regions of that grid as SRAM allows (as ``--grid`` packs them), the regions side by side on
  the wafer. The grid is ``--prefill-grid``, or the square whose sum is the smallest among those whose
  regions fit (ties: the smaller side), or where no square's do, the fastest of the wafer's tilings
  whose regions fit; a grid whose regions the wafer cannot hold is refused, never reported (its time
  would be no layout's). The KV cache it writes is
  handed to the decode plan's cores; that move is not counted (docs/cost-model.md says how small).
* **Decode steps**: the decode plan is solved at the last step's past length, IN + OUT - 1 (its cache
  is the largest; every earlier step's fits where the last one's does). Step j (j = 0 .. OUT - 1)
  runs at past IN + j on the same grids and dataflows: its time is the plan's token path with each
  unit's latency at that context (the placement's communication does not depend on the context: the
  cache never moves, one activation row does).
* **Summed exactly, cheaply.** A kernel's work (``KernelWork``: MACs, vector ops, extents, cache
  bytes) is affine in the past length: the cache's length enters every field linearly. It is read
  at the first and last step (and a third context, which must lie on the same line, or the sum is
  refused), so the work of every step is exact integer interpolation, no ONNX import per step.
  Its latency on a fixed grid is piecewise constant in the context (tiles: ``ceil(context / side)``),
  so the OUT steps take few distinct token paths; each distinct vector of context-dependent kernel
  latencies is costed once and the sum over the OUT steps is exact.
* TTFT = prefill; TPOT first / last = the first and last step; mean = the steps' sum over OUT;
  end-to-end tokens/s = OUT / (prefill + every step). (The prefill's own logits give a token too;
  as WaferLLM's end-to-end table counts, OUT is the decode steps.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from wsealloc.arch import Arch
from wsealloc.cost import CostOptions, Dataflow, KernelWork, grid_costs, kernel_work
from wsealloc.errors import PlanError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import load_kernels
from wsealloc.plan import rules
from wsealloc.plan.schema import GenerationRecord, KernelPlan
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.request import SolveRequest
from wsealloc.strategy.generation import Work, not_dense, prefill_on_grid, prefill_tiles


def works_at(source: OnnxSource, context: int, arch: Arch, options: CostOptions) -> list[tuple[str, Work]]:
    """Every kernel's (name, work) of a decode export at past length ``context``."""
    kg = load_kernels(source.model_copy(update={"context": context}))
    out = []
    for k in kg.kernels:
        w = kernel_work(k, kg.ops, arch, options)
        if not isinstance(w, KernelWork):
            raise PlanError(f"generation end to end: kernel {k.name} {not_dense(w)}")
        out.append((k.name, w))
    return out


def affine_works(samples: Sequence[tuple[int, Sequence[tuple[str, Work]]]], last: int) -> Callable[[int, int], Work]:
    """``work(kernel, context)`` from the works read at a few contexts (the first is ``last``): each
    integer field of each kernel is ``value at last + slope x (context - last)``, the slope an integer
    read off the first two samples and checked on the others; any other field must not change."""
    (c0, base), (c1, other) = samples[0], samples[1]
    if c0 != last:
        raise ValueError("the first sample is the last step's context")
    slopes: list[dict[str, int]] = []
    for i, ((name, w0), (name1, w1)) in enumerate(zip(base, other, strict=True)):
        if name != name1:
            raise PlanError(f"generation end to end: kernel {i} is {name} at past {c0:,} but {name1} at past {c1:,}")
        slope: dict[str, int] = {}
        for f in dataclasses.fields(w0):
            a, b = getattr(w0, f.name), getattr(w1, f.name)
            if a == b:
                continue
            if not (isinstance(a, int) and isinstance(b, int)) or isinstance(a, bool) or (b - a) % (c1 - c0):
                raise PlanError(
                    f"generation end to end: {name}'s {f.name} is not affine in the past length ({a} at {c0:,}, {b} at {c1:,})"
                )
            slope[f.name] = (b - a) // (c1 - c0)
        slopes.append(slope)

    def work(i: int, context: int) -> Work:
        w0, slope = base[i][1], slopes[i]
        if not slope:
            return w0
        return dataclasses.replace(w0, **{f: getattr(w0, f) + s * (context - last) for f, s in slope.items()})

    for c, sample in samples[2:]:
        for i, (name, w) in enumerate(sample):
            if work(i, c) != w:
                raise PlanError(f"generation end to end: {name}'s work at past {c:,} is off the line through {c0:,} and {c1:,}")
    return work


def unit_latency(
    costs: CostTable, units: Sequence[KernelPlan], work: Callable[[int, int], Work], first: int, last: int
) -> Callable[[int, int], int]:
    """``latency(unit, context)`` of the plan's units on their grids, for contexts ``first`` .. ``last``:
    a region's members on its grid one after another, each its fastest dataflow in place (as
    ``opmodels.regions`` costs them; the members whose work does not change, equal at both ends of
    the line, summed once); a kernel on its own rectangle in its recorded dataflow."""
    base = costs.members if costs.members is not None else costs
    arch, options = base.arch, base.options
    memo: dict[tuple[Work, int, int, str | None], int] = {}

    def one(w: Work, r: int, c: int, dataflow: str | None) -> int:
        key = (w, r, c, dataflow)
        if key not in memo:
            if dataflow is None:
                memo[key] = int(on_grid(w, arch, options, r, c)[1].latency[0])
            else:
                g = grid_costs(w, arch, options, Dataflow(dataflow), np.array([r]), np.array([c]))
                memo[key] = int(g.latency[0])
        return memo[key]

    runs = costs.runs if costs.members is not None and costs.runs is not None else None
    split: dict[int, tuple[int, list[int]]] = {}  # region -> (its unchanging members' sum, the others)

    def parts(j: int) -> tuple[int, list[int]]:
        if j not in split:
            assert runs is not None
            r, c = units[j].grid
            members = range(*runs[j])
            moving = [k for k in members if work(k, first) != work(k, last)]
            fixed = set(members) - set(moving)
            still = sum(one(work(k, last), r, c, None) for k in sorted(fixed))
            split[j] = (still, moving)
        return split[j]

    def latency(j: int, context: int) -> int:
        r, c = units[j].grid
        if runs is not None:
            still, moving = parts(j)
            return still + sum(one(work(k, context), r, c, None) for k in moving)
        return one(work(j, context), r, c, units[j].dataflow)

    return latency


def decode_steps(
    costs: CostTable, units: Sequence[KernelPlan], work: Callable[[int, int], Work], first: int, last: int
) -> tuple[int, int, int, int]:
    """(first step, last step, every step summed, distinct step times) of the token path at past
    lengths ``first`` .. ``last``: each unit's stage as planned, moved by its latency's change from the
    plan's own context (``last``)."""
    latency = unit_latency(costs, units, work, first, last)
    preds = [list(p) for p in costs.preds()]
    stage0 = [u.latency_cycles + u.comm_cycles for u in units]
    at_last = [latency(j, last) for j in range(len(units))]
    # the units whose work changes with the context (the rest keep their planned stage)
    moving = [j for j in range(len(units)) if _changes(costs, j, work, first, last)]
    paths: dict[tuple[int, ...], int] = {}
    total = 0
    first_path = last_path = 0
    for context in range(first, last + 1):
        key = tuple(latency(j, context) for j in moving)
        if key not in paths:
            stage = list(stage0)
            for j, value in zip(moving, key, strict=True):
                stage[j] += value - at_last[j]
            paths[key] = rules.objective_value(ObjectiveKind.LATENCY, stage, preds)
        path = paths[key]
        total += path
        if context == first:
            first_path = path
        if context == last:
            last_path = path
    return first_path, last_path, total, len(set(paths.values()))


def _changes(costs: CostTable, j: int, work: Callable[[int, int], Work], first: int, last: int) -> bool:
    """Whether unit ``j``'s work (any member's) differs between the two contexts."""
    if costs.members is not None and costs.runs is not None:
        a, b = costs.runs[j]
        return any(work(k, first) != work(k, last) for k in range(a, b))
    return work(j, first) != work(j, last)


def generation_record(request: SolveRequest, costs: CostTable, units: Sequence[KernelPlan]) -> GenerationRecord | None:
    """The request's generation end to end (module docstring) on the plan's units (kernels or
    regions, in ``costs``' order, as solved at past IN + OUT - 1); None without ``--prompt``."""
    gen = request.generation
    if gen is None:
        return None
    base = costs.members if costs.members is not None else costs
    arch, options = base.arch, base.options
    source = request.onnx_model
    if not isinstance(source, OnnxSource):
        raise PlanError("generation end to end: the decode model must be an ONNX export")
    first, last = gen.prompt, gen.last_context
    planned: list[tuple[str, Work]] = []
    for k in base.kernels:
        if not isinstance(k.work, KernelWork):
            raise PlanError(f"generation end to end: the decode plan's kernel {k.kernel.name} {not_dense(k.work)}")
        planned.append((k.kernel.name, k.work))
    samples: list[tuple[int, Sequence[tuple[str, Work]]]] = [(last, planned)]
    if first != last:
        samples.append((first, works_at(source, first, arch, options)))
        middle = (first + last) // 2
        if first < middle < last:
            samples.append((middle, works_at(source, middle, arch, options)))

    def constant(i: int, context: int) -> Work:
        return planned[i][1]

    work = affine_works(samples, last) if len(samples) > 1 else constant
    step_first, step_last, total, distinct = decode_steps(costs, units, work, first, last)
    grid, prefill, regions = prefill_on_grid(gen, arch, options)
    clock = arch.clock_hz
    whole = prefill + total
    return GenerationRecord(
        prompt=gen.prompt,
        generate=gen.generate,
        prefill_model=gen.prefill.path,
        prefill_grid=grid,
        prefill_cycles=prefill,
        prefill_regions=regions,
        prefill_fits_wafer=regions <= prefill_tiles(arch, *grid),  # (always: prefill_on_grid refuses the rest)
        decode_first_cycles=step_first,
        decode_last_cycles=step_last,
        decode_total_cycles=total,
        time_to_first_token_s=prefill / clock,
        time_per_output_token_first_s=step_first / clock,
        time_per_output_token_last_s=step_last / clock,
        time_per_output_token_mean_s=total / gen.generate / clock,
        end_to_end_s=whole / clock,
        end_to_end_tokens_per_s=gen.generate * clock / max(whole, 1),
        distinct_step_costs=distinct,
    )
