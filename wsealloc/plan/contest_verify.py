"""Check an ISPD-2020 contest solution against its instance and score it, independently of any solver.

The checks and the figures use only the instance, the solution and the kernel library's formulas
(``wsealloc.cost.ispd2020``, the spec); the enumerator and the solvers are never consulted. The
lower bound shown beside the result comes from ``wsealloc.problem.contest_bounds`` (pass ``bound``
to supply one or to skip it); it is context, not part of the verdict.

Legal means: every kernel of the instance instantiated once and placed once, nothing else; each
with the instance's kind and formal arguments; execution arguments in range; orientation R0 or R90;
memory within memlimit; the rectangle (x, y) .. (x + width, y + height), width along x at R0 and
swapped at R90, inside the fabric; no two rectangles overlapping. Violations are listed root cause
first (what the solution lacks or repeats, then each kernel's own arguments, then geometry).

Score = wdeltat * (largest kernel time) + wlength * wirelength, the wirelength being the sum over
edges between placed kernels of the L1 distance between rectangle centres. Centres can be
half-integers, so distances are summed exactly in half-tiles. The adapter term (wadapter) has no
public definition and is not modelled: the score leaves it out and says so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from wsealloc.cost.ispd2020 import exec_range_errors, kernel_perf
from wsealloc.errors import InfeasibleError, VerificationError
from wsealloc.graph.contest import ContestGraph, ContestKernel, Orientation
from wsealloc.plan.contest_solution import Solution, SolutionKernel

ADAPTER_NOTE = "adapter cost (wadapter) not modelled: it has no public definition; the score leaves it out"
MAX_OVERLAPS_LISTED = 20


class ViolationKind(enum.IntEnum):
    """What is wrong, in root-cause order (lower values are reported first)."""

    MISSING_KERNEL = 0
    UNKNOWN_KERNEL = 1
    DUPLICATE_KERNEL = 2
    NOT_PLACED = 3
    DUPLICATE_PLACEMENT = 4
    PLACED_NOT_INSTANTIATED = 5
    WRONG_KIND = 6
    WRONG_FORMAL_ARGS = 7
    EXEC_OUT_OF_RANGE = 8
    BAD_ORIENTATION = 9
    MEMORY_OVER_LIMIT = 10
    OUTSIDE_FABRIC = 11
    OVERLAP = 12

    @property
    def label(self) -> str:
        """Short label, e.g. 'memory over limit'."""
        return self.name.lower().replace("_", " ")


@dataclass(frozen=True)
class Violation:
    """One violated rule: its kind, the kernel(s) at fault, a one-line message, the solution line (0: none)."""

    kind: ViolationKind
    kernel: str
    message: str
    line: int = 0

    def to_dict(self) -> dict[str, object]:
        """Plain-dict form."""
        return {"kind": self.kind.label, "kernel": self.kernel, "message": self.message, "line": self.line}


@dataclass(frozen=True)
class KernelFigures:
    """A checked kernel's rectangle as placed and its library figures."""

    name: str
    x: int
    y: int
    width: int  # as placed (along x)
    height: int  # as placed (along y)
    time: int
    memory: Fraction


@dataclass(frozen=True)
class ContestReport:
    """The verdict on a solution: legal or not (with violations), and its figures."""

    ok: bool
    violations: tuple[Violation, ...]
    kernels: tuple[KernelFigures, ...]  # every kernel whose figures could be computed
    max_time: int | None
    max_time_kernel: str
    wirelength: Fraction  # exact (centres may be half-integers)
    edges_counted: int
    score: Fraction | None  # wdeltat * max_time + wlength * wirelength (None: no time computed)
    lower_bound: int | None
    adapter: str = ADAPTER_NOTE

    @property
    def time_over_bound(self) -> float | None:
        """max_time / lower_bound (1.0 is proven optimal in time)."""
        if self.max_time is None or not self.lower_bound:
            return None
        return self.max_time / self.lower_bound

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for ``--json``."""
        return {
            "ok": self.ok,
            "violations": [v.to_dict() for v in self.violations],
            "max_time": self.max_time,
            "max_time_kernel": self.max_time_kernel,
            "wirelength": float(self.wirelength),
            "edges_counted": self.edges_counted,
            "score": None if self.score is None else float(self.score),
            "lower_bound": self.lower_bound,
            "time_over_bound": self.time_over_bound,
            "adapter": self.adapter,
            "kernels": [
                {
                    "name": k.name,
                    "x": k.x,
                    "y": k.y,
                    "width": k.width,
                    "height": k.height,
                    "time": k.time,
                    "memory": float(k.memory),
                }
                for k in self.kernels
            ],
        }


_NO_BOUND = object()


def verify_solution(solution: Solution, graph: ContestGraph, *, bound: int | None | object = _NO_BOUND) -> ContestReport:
    """Check ``solution`` against ``graph`` and score it; ``bound``: the lower bound shown (default: computed; None: none)."""
    violations: list[Violation] = []
    fab = graph.fabric
    _coverage(solution, graph, violations)
    figures: list[KernelFigures] = []
    times: dict[str, int] = {}  # every kernel with usable execution arguments, placed or not
    first_seen: set[str] = set()
    for sk in solution.kernels:
        if sk.name in first_seen or not graph.has_kernel(sk.name):
            continue  # duplicates and unknown kernels are already reported; judge each name once
        first_seen.add(sk.name)
        time, fig = _check_kernel(sk, graph.by_name(sk.name), graph, violations)
        if time is not None:
            times[sk.name] = time
        if fig is not None:
            figures.append(fig)
    _overlaps(figures, violations)
    by_name = {f.name: f for f in figures}
    # wirelength in half-tiles: the centre of [x, x + w) is x + w/2, twice that is 2x + w
    half = 0
    counted = 0
    for e in graph.edges:
        a, b = by_name.get(graph.by_id(e.src).name), by_name.get(graph.by_id(e.dst).name)
        if a is None or b is None:
            continue
        half += abs((2 * a.x + a.width) - (2 * b.x + b.width)) + abs((2 * a.y + a.height) - (2 * b.y + b.height))
        counted += 1
    wirelength = Fraction(half, 2)
    max_time: int | None = None
    slowest = ""
    if times:
        slowest = max(times, key=lambda name: times[name])
        max_time = times[slowest]
    score = None if max_time is None else fab.wdeltat * max_time + fab.wlength * wirelength
    if bound is _NO_BOUND:
        from wsealloc.problem.contest_bounds import contest_bounds  # context only, never part of the verdict

        try:
            lower: int | None = contest_bounds(graph).value
        except InfeasibleError:
            lower = None  # no legal solution exists at all; the violations say why this one fails
    else:
        lower = bound if isinstance(bound, int) else None
    violations.sort(key=lambda v: (v.kind, v.line, v.kernel))
    return ContestReport(not violations, tuple(violations), tuple(figures), max_time, slowest, wirelength, counted, score, lower)


def require_legal(report: ContestReport, label: str) -> None:
    """Raise :class:`VerificationError` naming ``label`` (the solution file) with the count and the first
    violation (the root cause), if any: the contest's form of ``plan.verify.require_valid``."""
    if report.violations:
        first = report.violations[0]
        where = f"line {first.line}: " if first.line else ""
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise VerificationError(f"{label}: {len(report.violations)} violation(s): {where}{first.message}{more}")


def _coverage(solution: Solution, graph: ContestGraph, out: list[Violation]) -> None:
    """Every instance kernel instantiated and placed exactly once, nothing unknown."""
    lines: dict[str, list[int]] = {}
    for sk in solution.kernels:
        lines.setdefault(sk.name, []).append(sk.line)
    for k in graph.kernels:
        if k.name not in lines:
            out.append(
                Violation(
                    ViolationKind.MISSING_KERNEL, k.name, f"{k.name} ({k.kind.value}) is in the instance but not in the solution"
                )
            )
    for name, at in lines.items():
        if not graph.has_kernel(name):
            out.append(Violation(ViolationKind.UNKNOWN_KERNEL, name, f"{name} is not a placed kernel of the instance", at[0]))
        elif len(at) > 1:
            where = ", ".join(str(n) for n in at)
            out.append(
                Violation(ViolationKind.DUPLICATE_KERNEL, name, f"{name} is instantiated {len(at)} times (lines {where})", at[1])
            )
    judged: set[str] = set()
    for sk in solution.kernels:
        if sk.name in judged:
            continue  # a repeated instantiation is reported as such, not as unplaced
        judged.add(sk.name)
        if sk.placement is None and graph.has_kernel(sk.name):
            out.append(Violation(ViolationKind.NOT_PLACED, sk.name, f"{sk.name} is instantiated but never placed", sk.line))
    for name, p in solution.stray_placements:
        if name in lines:
            out.append(Violation(ViolationKind.DUPLICATE_PLACEMENT, name, f"{name} is placed more than once", p.line))
        else:
            out.append(Violation(ViolationKind.PLACED_NOT_INSTANTIATED, name, f"{name} is placed but never instantiated", p.line))


def _check_kernel(
    sk: SolutionKernel, k: ContestKernel, graph: ContestGraph, out: list[Violation]
) -> tuple[int | None, KernelFigures | None]:
    """One kernel's kind, formal and execution arguments, orientation, memory and bounds; its time and placed figures."""
    fab = graph.fabric
    if sk.kind is not k.kind:
        out.append(
            Violation(
                ViolationKind.WRONG_KIND,
                sk.name,
                f"{sk.name} is a {k.kind.value} in the instance, not a {sk.kind.value}",
                sk.line,
            )
        )
        return None, None
    if sk.args != k.args:
        diff = ", ".join(
            f"{f}={getattr(sk.args, f)} (instance: {getattr(k.args, f)})"
            for f in vars(k.args)
            if getattr(sk.args, f) != getattr(k.args, f)
        )
        out.append(
            Violation(
                ViolationKind.WRONG_FORMAL_ARGS, sk.name, f"{sk.name} formal arguments differ from the instance: {diff}", sk.line
            )
        )
    errors = exec_range_errors(k.kind, k.args, sk.exec_args)  # judged against the instance's own arguments
    if errors:
        out.append(
            Violation(
                ViolationKind.EXEC_OUT_OF_RANGE,
                sk.name,
                f"{sk.name} execution arguments out of range: {'; '.join(errors)}",
                sk.line,
            )
        )
        return None, None
    perf = kernel_perf(k.kind, k.args, sk.exec_args)
    if perf.memory > fab.memlimit:
        worst = max(range(len(perf.conv_memories)), key=lambda i: perf.conv_memories[i])
        part = f" (sub-conv {worst + 1})" if len(perf.conv_memories) > 1 else ""
        out.append(
            Violation(
                ViolationKind.MEMORY_OVER_LIMIT,
                sk.name,
                f"{sk.name} needs {float(perf.memory):,.2f} memory per tile{part}, over memlimit {fab.memlimit:,}; raise c or k",
                sk.line,
            )
        )
    p = sk.placement
    if p is None:
        return perf.time, None
    if p.orientation not in (Orientation.R0.value, Orientation.R90.value):
        out.append(
            Violation(ViolationKind.BAD_ORIENTATION, sk.name, f"{sk.name} orientation {p.orientation!r} is not R0 or R90", p.line)
        )
        return perf.time, None
    width, height = (perf.height, perf.width) if p.rotated else (perf.width, perf.height)
    if p.x < 0 or p.y < 0 or p.x + width > fab.width or p.y + height > fab.height:
        out.append(
            Violation(
                ViolationKind.OUTSIDE_FABRIC,
                sk.name,
                f"{sk.name} at ({p.x}, {p.y}) {p.orientation} spans x {p.x}..{p.x + width}, y {p.y}..{p.y + height}: "
                f"outside the {fab.width}x{fab.height} fabric",
                p.line,
            )
        )
    return perf.time, KernelFigures(sk.name, p.x, p.y, width, height, perf.time, perf.memory)


_COORD_LIMIT = 2**61


def _overlaps(figures: list[KernelFigures], out: list[Violation]) -> None:
    """Pairs of overlapping rectangles, by a sweep over x (each rectangle meets only those starting before its right edge)."""
    if len(figures) < 2:
        return

    def ends(lo: list[int], size: list[int]) -> tuple[np.ndarray, np.ndarray]:
        # a solution may state any integer: clipped to +-2^61 (far outside any fabric, where such a
        # rectangle is already a violation), the sweep stays in int64 without changing any overlap inside it
        clip = [min(max(v, -_COORD_LIMIT), _COORD_LIMIT) for v in lo]
        far = [min(max(v + d, -_COORD_LIMIT), _COORD_LIMIT) for v, d in zip(lo, size, strict=True)]
        return np.array(clip, dtype=np.int64), np.array(far, dtype=np.int64)

    x0, x1 = ends([f.x for f in figures], [f.width for f in figures])
    y0, y1 = ends([f.y for f in figures], [f.height for f in figures])
    order = np.argsort(x0, kind="stable")
    sx0 = x0[order]
    pairs: list[tuple[int, int]] = []
    total = 0
    for pos, i in enumerate(order):
        end = int(np.searchsorted(sx0, x1[i], side="left"))  # candidates start before i's right edge
        cand = order[pos + 1 : end]
        hit = cand[(y0[cand] < y1[i]) & (y0[i] < y1[cand]) & (x0[cand] < x1[i])]
        total += int(hit.size)
        pairs.extend((int(i), int(j)) for j in hit[: max(0, MAX_OVERLAPS_LISTED - len(pairs))])
    for i, j in pairs:
        a, b = figures[i], figures[j]
        w = min(a.x + a.width, b.x + b.width) - max(a.x, b.x)
        h = min(a.y + a.height, b.y + b.height) - max(a.y, b.y)
        out.append(Violation(ViolationKind.OVERLAP, f"{a.name},{b.name}", f"{a.name} and {b.name} overlap on {w}x{h} tiles"))
    if total > len(pairs):
        out.append(Violation(ViolationKind.OVERLAP, "", f"... and {total - len(pairs)} more overlapping pairs"))
