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
from typing import NamedTuple

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.cost import CostOptions, Dataflow, ExpertsWork, KernelWork, grid_costs, kernel_work
from wsealloc.errors import InfeasibleError, PlanError, UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels import CostTable
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import build_costs, load_kernels
from wsealloc.plan import rules
from wsealloc.plan.schema import GenerationRecord, KernelPlan
from wsealloc.problem.objective import ObjectiveKind
from wsealloc.problem.sharing import grid_allowed
from wsealloc.request import Generation, SolveRequest
from wsealloc.strategy.regions import pack_runs, packed_regions

Work = KernelWork


def _not_dense(work: object) -> str:
    """Why a kernel's work is not one the steps' affine model reads."""
    if isinstance(work, ExpertsWork):
        return "is a mixture-of-experts layer: generation end to end is planned for dense decoders only (solve the decode step)"
    return "is not costed by the standard model"


def works_at(source: OnnxSource, context: int, arch: Arch, options: CostOptions) -> list[tuple[str, Work]]:
    """Every kernel's (name, work) of a decode export at past length ``context``."""
    kg = load_kernels(source.model_copy(update={"context": context}))
    out = []
    for k in kg.kernels:
        w = kernel_work(k, kg.ops, arch, options)
        if not isinstance(w, KernelWork):
            raise PlanError(f"generation end to end: kernel {k.name} {_not_dense(w)}")
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


class PrefillLayout(NamedTuple):
    """The prefill's grid, its cycles (every kernel on it one after another) and the regions of that
    grid its weights and cache are packed into, laid side by side on the wafer."""

    grid: tuple[int, int]
    cycles: int
    regions: int


def prefill_tiles(arch: Arch, r: int, c: int) -> int:
    """How many ``r x c`` regions lie side by side on the wafer without overlap: ``(R // r) x (C // c)``,
    within each die where the arch forbids crossing one. Translates of one rectangle pack no better
    than in rows and columns (each crosses exactly one of the ``C // c`` columns ``x = k c - 1``, and
    each such column crosses at most ``R // r`` of them), so a prefill's regions fit the wafer exactly
    when they are at most this many; a count of cores alone would pass 3 squares of 450 on a 768 x
    1,176 WSE-3, which holds 2. (Defective cores are not taken out, as the cores of a plan's regions
    are not before placement.)"""
    if arch.wafer.die_boundary is DieBoundary.FORBID:
        die, dies = arch.wafer.die_cores, arch.wafer.dies
        return (die.rows // r) * (die.cols // c) * dies.rows * dies.cols
    return (arch.rows // r) * (arch.cols // c)


def _tilings(arch: Arch, most: int) -> np.ndarray:
    """[G, 2] the wafer's (each die's, where crossing one is forbidden) rows and cols split into ``a x b``
    equal parts, ``a b <= most``: for every count of regions the largest grids that many tile."""
    if arch.wafer.die_boundary is DieBoundary.FORBID:
        rows, cols = arch.wafer.die_cores.rows, arch.wafer.die_cores.cols
    else:
        rows, cols = arch.rows, arch.cols
    shapes = {(rows // a, cols // b) for a in range(1, min(rows, most) + 1) for b in range(1, min(cols, most // a) + 1)}
    return np.array(sorted(shapes), dtype=np.int64).reshape(-1, 2)


def _prefill_cycles(works: dict[Work, int], arch: Arch, options: CostOptions, shapes: np.ndarray) -> np.ndarray:
    """Every kernel on each of ``shapes``, one after another, each its fastest dataflow in place."""
    total = np.zeros(len(shapes), dtype=np.int64)
    for w, n in works.items():
        best = np.min(
            [grid_costs(w, arch, options, df, shapes[:, 0], shapes[:, 1], in_place=True).latency for df in w.dataflows()],
            axis=0,
        )
        total += n * best.astype(np.int64)
    return total


def prefill_on_grid(gen: Generation, arch: Arch, options: CostOptions) -> PrefillLayout:
    """The prefill's grid, its cycles and the regions of that grid its weights and cache need: every
    kernel on it one after another, each its fastest dataflow in place, the kernels packed into as few
    regions as SRAM allows (``strategy.regions.pack_runs``, as ``--grid`` packs them), the regions side
    by side on the wafer (:func:`prefill_tiles`). ``--prefill-grid``: that grid, refused when its
    regions do not fit. Without it, the fastest square (1 .. the wafer's shorter side; ties: the smaller
    side) whose regions fit: WaferLLM's P x P, the shape this model is calibrated on (docs/cost-model.md,
    section 9); where no square's do (LLaMA3-8B's 4,096-token prompt on a WSE-3: the fewest cores, 34
    regions of 247 x 247, are 2.3 wafers), the fastest of the wafer's tilings (:func:`_tilings`; ties:
    the fewer cores, then rows) whose regions fit. None fits: refused. A time on a layout the wafer
    cannot hold is never the answer: the headline's time to first token is this one's."""
    costs = build_costs(gen.prefill, arch, options)
    works: dict[Work, int] = {}
    for kc in costs.kernels:
        if not isinstance(kc.work, KernelWork):
            raise PlanError(f"generation end to end: prefill kernel {kc.kernel.name} {_not_dense(kc.work)}")
        works[kc.work] = works.get(kc.work, 0) + 1
    if gen.prefill_grid is not None:
        r, c = gen.prefill_grid
        if r > arch.rows or c > arch.cols:
            raise UsageError(f"--prefill-grid {r}x{c}: larger than the {arch.rows}x{arch.cols} wafer of {arch.name}")
        if not grid_allowed(arch, r, c):  # (pack_runs would say so naming --grid, the decode's option)
            die = arch.wafer.die_cores
            raise UsageError(
                f"--prefill-grid {r}x{c}: crosses a die boundary of {arch.name} (dies of {die.rows}x{die.cols} cores, "
                "die_boundary: forbid); give a grid within one die, or leave --prefill-grid out"
            )
        regions = len(pack_runs(costs, r, c))
        tiles = prefill_tiles(arch, r, c)
        if regions > tiles:
            raise InfeasibleError(
                f"--prefill-grid {r}x{c}: the prefill's weights and cache need {regions} regions of {r} x {c}, "
                f"{arch.name} holds {tiles} side by side; leave --prefill-grid out for the fastest grid whose regions fit"
            )
        cycles = sum(n * int(on_grid(w, arch, options, r, c)[1].latency[0]) for w, n in works.items())
        return PrefillLayout((r, c), cycles, regions)
    side = np.arange(1, min(arch.rows, arch.cols) + 1)
    squares = np.stack([side, side], axis=1)
    tilings = _tilings(arch, len(costs.kernels))  # (a region holds a kernel at least: no more regions than kernels)
    closest: tuple[float, tuple[int, int], int, int] | None = None  # the fewest regions for the room, to name
    for shapes, ties in (
        (squares, (squares[:, 0],)),  # ties: the smaller side
        (tilings, (tilings[:, 0], tilings[:, 0] * tilings[:, 1])),  # ties: the fewer cores, then rows
    ):
        total = _prefill_cycles(works, arch, options, shapes)
        need = packed_regions(costs, shapes)  # 0: a kernel alone does not fit a region
        room = np.array([prefill_tiles(arch, int(r), int(c)) for r, c in shapes.tolist()], dtype=np.int64)
        fit = (need > 0) & (need <= room)
        if fit.any():
            best = next(int(i) for i in np.lexsort((*ties, total)) if fit[i])  # fastest first
            grid = (int(shapes[best, 0]), int(shapes[best, 1]))
            packed = len(pack_runs(costs, *grid))
            assert packed == need[best], f"packed_regions disagrees with pack_runs on {grid}"
            return PrefillLayout(grid, int(total[best]), packed)
        for i in np.flatnonzero(need).tolist():
            over = float(need[i]) / max(int(room[i]), 1)
            if closest is None or over < closest[0]:
                closest = (over, (int(shapes[i, 0]), int(shapes[i, 1])), int(need[i]), int(room[i]))
    why = "a kernel of it fits no region of any (each alone needs more SRAM than a grid of the wafer has)"
    if closest is not None:
        _, (r, c), least, holds = closest
        why = f"its weights and cache need at best {least} regions of {r} x {c}, where {holds} lie side by side"
    raise InfeasibleError(
        f"generation end to end: the prefill of {gen.prompt:,} tokens ({gen.prefill.path}) fits no square or tiling "
        f"of {arch.name}: {why}; give a shorter --prompt or an arch with more SRAM (generation end to end plans "
        f"one wafer), or solve the prefill alone over several: wsealloc solve {gen.prefill.path} --objective latency "
        "--wafers auto (its time to first token)"
    )


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
            raise PlanError(f"generation end to end: the decode plan's kernel {k.kernel.name} {_not_dense(k.work)}")
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
