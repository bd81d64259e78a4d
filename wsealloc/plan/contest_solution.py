"""The ISPD-2020 contest's solution format: a typed :class:`Solution`, its writer and a tolerant reader.

Two statements per kernel, as in the contest's Example Benchmark and the public entrant's writer::

    k1 = conv( H W C K R S T U h w c k )
    k1 : place( x y R0 )
    k2 = dblock( H W F h w c1 c2 c3 k1 k2 k3 )
    k2 : place( x y R90 )
    k3 = cblock( H W F h w c1 c2 c3 c4 k1 k2 k3 k4 )

(x, y) is the rectangle's corner with the smallest coordinates; at R0 the kernel's width runs
along x. The reader also takes what other tools write: any whitespace (``place(0 148 R0)``),
statements in any order, blank lines, ``#``/``//``/``(* *)`` comments, and the entrant's extra
lines (``include "common.paint"``, ``kN : name('kN)``, ``kmap = union( ... )``), which are skipped.

The reader keeps what a checker must judge: a kernel instantiated twice is listed twice, a
placement with no instantiation or a second placement is kept in ``stray_placements``, and the
orientation token is kept as written (``R45`` is the verifier's to reject). Only what cannot be
read at all (an unknown kernel kind, a wrong argument count, a non-integer) is a :class:`PlanError`
naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from wsealloc.cost.ispd2020 import LIBRARY
from wsealloc.errors import PlanError
from wsealloc.graph.contest import BlockArgs, ContestKind, ConvArgs, ExecArgs, FormalArgs, Orientation

_INSTANCE = re.compile(r"^(?P<name>[^\s=:()]+)\s*=\s*(?P<kind>[A-Za-z_]\w*)\s*\((?P<args>[^()]*)\)\s*;?$")
_PLACE = re.compile(r"^(?P<name>[^\s=:()]+)\s*:\s*place\s*\((?P<args>[^()]*)\)\s*;?$", re.IGNORECASE)
_SKIPPED = (
    re.compile(r"^include\b", re.IGNORECASE),
    re.compile(r"^[^\s=:()]+\s*:\s*name\s*\(.*\)\s*;?$", re.IGNORECASE),  # the entrant's kN : name('kN)
    re.compile(r"^[^\s=:()]+\s*=\s*union\s*\(.*\)\s*;?$", re.IGNORECASE),  # the entrant's kmap = union( .. )
)


@dataclass(frozen=True)
class Placement:
    """Where a kernel lies: the corner (x, y) with the smallest coordinates and the orientation token as written."""

    x: int
    y: int
    orientation: str  # "R0" or "R90" when legal; kept as written so a checker can reject others
    line: int = field(default=0, compare=False)  # provenance, not content

    @property
    def rotated(self) -> bool:
        """Whether the kernel is turned by 90 degrees (its height along x)."""
        return self.orientation == Orientation.R90.value


@dataclass(frozen=True)
class SolutionKernel:
    """One instantiated kernel: name, kind, formal and execution arguments, and its placement (None: never placed)."""

    name: str
    kind: ContestKind
    args: FormalArgs
    exec_args: ExecArgs
    placement: Placement | None
    line: int = field(default=0, compare=False)  # provenance, not content


@dataclass(frozen=True)
class Solution:
    """A contest solution: kernels in statement order, and placements that belong to no single instantiation."""

    kernels: tuple[SolutionKernel, ...]
    stray_placements: tuple[tuple[str, Placement], ...] = ()  # (name, placement): repeated, or of an unknown name
    source: str = ""

    def by_name(self, name: str) -> SolutionKernel:
        """The first kernel instantiated with this name (KeyError if none)."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


def solution_kernel(
    name: str, kind: ContestKind, args: FormalArgs, exec_args: ExecArgs, x: int, y: int, orientation: Orientation | str
) -> SolutionKernel:
    """A placed kernel from its parts (the writer's usual input)."""
    token = orientation.value if isinstance(orientation, Orientation) else orientation
    return SolutionKernel(name, kind, args, exec_args, Placement(x, y, token))


def format_solution(solution: Solution) -> str:
    """The solution text: per kernel ``kN = kind( formal exec )`` then ``kN : place( x y R0|R90 )``."""
    out = []
    for k in solution.kernels:
        values = (*k.args.solution_order(), *k.exec_args.solution_order())
        out.append(f"{k.name} = {k.kind.value}( {' '.join(str(v) for v in values)} )")
        if k.placement is not None:
            p = k.placement
            out.append(f"{k.name} : place( {p.x} {p.y} {p.orientation} )")
    for name, p in solution.stray_placements:
        out.append(f"{name} : place( {p.x} {p.y} {p.orientation} )")
    return "\n".join(out) + "\n"


def read_solution(path: str | Path) -> Solution:
    """Read a solution file (PlanError naming the file when it cannot be read)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{p}: no such solution file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{p}: cannot read the solution ({exc})") from None
    return parse_solution(text, str(p))


def parse_solution(text: str, label: str) -> Solution:
    """Parse a solution's text; ``label`` names it in messages (PlanError naming the line on unreadable statements)."""
    instances: list[tuple[str, ContestKind, FormalArgs, ExecArgs, int]] = []
    placements: list[tuple[str, Placement]] = []
    for line_no, s in _statements(text, label):
        if any(rx.match(s) for rx in _SKIPPED):
            continue
        m = _PLACE.match(s)
        if m:
            placements.append((m.group("name"), _placement(m.group("args"), label, line_no)))
            continue
        m = _INSTANCE.match(s)
        if m:
            kind, args, ex = _instance(m.group("kind"), m.group("args"), label, line_no)
            instances.append((m.group("name"), kind, args, ex, line_no))
            continue
        raise PlanError(f"{label}:{line_no}: expected 'kN = kind( args )' or 'kN : place( x y R0|R90 )', got {s!r}")
    placed: dict[str, Placement] = {}
    stray: list[tuple[str, Placement]] = []
    instantiated = {name for name, *_ in instances}
    for name, p in placements:
        if name in placed or name not in instantiated:
            stray.append((name, p))
        else:
            placed[name] = p
    kernels = []
    seen: set[str] = set()
    for name, kind, args, ex, line_no in instances:
        # a repeated instantiation gets no placement of its own: the checker reports it as duplicated
        kernels.append(SolutionKernel(name, kind, args, ex, None if name in seen else placed.get(name), line_no))
        seen.add(name)
    return Solution(tuple(kernels), tuple(stray), label)


def _statements(text: str, label: str) -> list[tuple[int, str]]:
    """(first line, text) of every statement: comments removed, a statement whose parenthesis is still open
    continuing on the next lines (the entrant's ``kmap = union( ..`` spans several)."""
    text = re.sub(r"\(\*.*?\*\)", lambda m: "\n" * m.group(0).count("\n"), text.lstrip("\ufeff"), flags=re.S)
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for line_no, raw in enumerate(text.splitlines(), start=1):
        s = re.split(r"#|//", raw, maxsplit=1)[0].strip()
        if pending is not None:
            pending = (pending[0], f"{pending[1]} {s}")
        elif s:
            pending = (line_no, s)
        if pending is not None and pending[1].count("(") <= pending[1].count(")"):
            out.append(pending)
            pending = None
    if pending is not None:
        raise PlanError(f"{label}:{pending[0]}: '(' never closed: {pending[1][:60]!r}")
    return out


def _ints(raw: str, label: str, line: int, what: str) -> list[int]:
    out = []
    for tok in raw.replace(",", " ").split():
        if not re.fullmatch(r"[+-]?\d+", tok):
            raise PlanError(f"{label}:{line}: {what}: {tok!r} is not an integer")
        out.append(int(tok))
    return out


def _placement(raw: str, label: str, line: int) -> Placement:
    toks = raw.replace(",", " ").split()
    if len(toks) != 3:
        raise PlanError(f"{label}:{line}: place takes 'x y R0|R90', got {len(toks)} value(s): {raw.strip()!r}")
    x, y = _ints(" ".join(toks[:2]), label, line, "place")
    return Placement(x, y, toks[2].upper(), line)


def _instance(kind_raw: str, raw: str, label: str, line: int) -> tuple[ContestKind, FormalArgs, ExecArgs]:
    try:
        kind = ContestKind(kind_raw.lower())
    except ValueError:
        known = ", ".join(k.value for k in ContestKind)
        raise PlanError(f"{label}:{line}: unknown kernel kind {kind_raw!r}; known kinds: {known}") from None
    spec = LIBRARY[kind]
    values = _ints(raw, label, line, kind.value)
    n_formal, n_exec = len(spec.formal_names), len(spec.exec_names)
    if len(values) != n_formal + n_exec:
        names = " ".join((*spec.formal_names, *spec.exec_names))
        raise PlanError(f"{label}:{line}: a {kind.value} takes {n_formal + n_exec} integers ({names}), got {len(values)}")
    formal = dict(zip(spec.formal_names, values[:n_formal], strict=True))
    args: FormalArgs = ConvArgs(**formal) if kind is ContestKind.CONV else BlockArgs(**formal)
    n = spec.n_convs
    ex_vals = values[n_formal:]
    ex = ExecArgs(ex_vals[0], ex_vals[1], tuple(ex_vals[2 : 2 + n]), tuple(ex_vals[2 + n : 2 + 2 * n]))
    return kind, args, ex
