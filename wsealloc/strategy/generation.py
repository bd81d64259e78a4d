"""Generation end to end (``--prompt IN --generate OUT --prefill P.onnx``; issue 34) as a wrapper
around the strategy that plans the decode: before the decode export is read, the prefill's layout is
chosen (:func:`prefill_on_grid`), so that a prefill no layout of the wafer holds is refused at once
(the decode's solve can take minutes); everything else is the wrapped strategy's. The prefill's
layout is this layer's (a choice among grids and tilings of the wafer, as the regions strategies
make theirs); what the generation costs, step by step, is the plan's (``plan.generation``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from wsealloc.arch import Arch
from wsealloc.arch.schema import DieBoundary
from wsealloc.budget import Deadline, run_stoppable
from wsealloc.cost import CostOptions, ExpertsWork, KernelWork, grid_costs
from wsealloc.errors import InfeasibleError, Interrupted, PlanError, UsageError
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import build_costs
from wsealloc.problem.sharing import grid_allowed
from wsealloc.strategy.base import Progress, Wrapper, quiet
from wsealloc.strategy.regions import pack_runs, packed_regions, prefill_tiles

if TYPE_CHECKING:
    from wsealloc.request import Generation, SolveRequest

Work = KernelWork


def not_dense(work: object) -> str:
    """Why a kernel's work is not one the steps' affine model reads."""
    if isinstance(work, ExpertsWork):
        return "is a mixture-of-experts layer: generation end to end is planned for dense decoders only (solve the decode step)"
    return "is not costed by the standard model"


class PrefillLayout(NamedTuple):
    """The prefill's grid, its cycles (every kernel on it one after another) and the regions of that
    grid its weights and cache are packed into, laid side by side on the wafer."""

    grid: tuple[int, int]
    cycles: int
    regions: int


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
    cannot hold is never the answer: the headline's time to first token is this one's.

    Pure, and remembered for the last few requests: the strategy chooses it before the decode is read
    (:meth:`EndToEnd.ready`), the plan's record reads it once the decode is solved (a second choice
    took 0.6 s for Llama-3-8B's prefill)."""
    # the request's JSON (a source's dims are a dict) and the prefill file's size and time: a file
    # written again at the same path (a sweep's export) is chosen for again
    try:
        stat = os.stat(gen.prefill.path)
        written = (stat.st_size, stat.st_mtime_ns)
    except OSError:  # (build_costs names the file)
        written = (-1, -1)
    key = (gen.model_dump_json(), written, arch, options)
    if key not in _REMEMBERED:
        if len(_REMEMBERED) >= REMEMBER:
            _REMEMBERED.pop(next(iter(_REMEMBERED)))
        _REMEMBERED[key] = _prefill_layout(gen, arch, options)
    return _REMEMBERED[key]


REMEMBER = 4  # prefill layouts kept (the last few requests': a sweep's points differ in the decode)
_REMEMBERED: dict[tuple[str, tuple[int, int], Arch, CostOptions], PrefillLayout] = {}


def _prefill_layout(gen: Generation, arch: Arch, options: CostOptions) -> PrefillLayout:
    """:func:`prefill_on_grid`, worked out."""
    costs = build_costs(gen.prefill, arch, options)
    works: dict[Work, int] = {}
    for kc in costs.kernels:
        if not isinstance(kc.work, KernelWork):
            raise PlanError(f"generation end to end: prefill kernel {kc.kernel.name} {not_dense(kc.work)}")
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


class EndToEnd(Wrapper):
    """``inner`` (the decode's way of running) with the prefill's layout chosen first (module docstring)."""

    def ready(self, request: SolveRequest, deadline: Deadline, say: Progress = quiet) -> None:
        gen = request.generation
        assert gen is not None  # (the registry wraps only a request that generates)
        say(f"choosing the prefill's grid ({gen.prefill.label})")
        if run_stoppable(lambda: prefill_on_grid(gen, request.machine, request.cost), deadline) is None:
            raise Interrupted(f"interrupted while reading {gen.prefill.label}; nothing was solved")
        self.inner.ready(request, deadline, say)
