"""Conflicting constraints explained: a small subset of the user's rules that cannot hold together.

The test (``infeasibility``) is what the solvers themselves would meet, checked on the cost table the
rules give, strongest cause first:

1. a kernel left without a legal op model (its op-model table: the one legality point);
2. two kernels on one wafer pinned to corners where every allowed rectangle of one covers the other's
   corner (or both kernels' allowed rectangles overlap whatever they choose); a group to keep side by
   side whose members are all pinned where no grids they may take make their rectangles touch, or
   whose pinned members leave more rows (or columns) between them than the tallest (widest) allowed
   grids of its members could cover, or whose members' areas (and corners) never meet;
3. the kernels kept within an area need more cores than the area has free;
4. the kernels need more cores on their smallest allowed op models than the wafers have, keep-outs
   subtracted (one wafer: a sum; several: the exact stage cut with the cut rules, ``solvers.stages``).

Each test is exact for what it states (an allocation that fails one cannot be planned). When the rules
fail it, an irreducible subset is found by halves (:func:`explain`: no rule of it can be dropped and
the rest still fail). The message names every rule of the subset by file and line and says what they
leave impossible.

Over several wafers each wafer has its own cores at the same coordinates, so corners (test 2) and
areas (test 3) only compete between kernels on one wafer (``_Wafers``): pins on different wafers never
conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wsealloc.budget import Deadline
from wsealloc.constraints import Constraints, Rule
from wsealloc.constraints.geometry import contains, free_cores
from wsealloc.errors import ConflictError, Interrupted
from wsealloc.opmodels import CostTable, OpModelTable, Reason
from wsealloc.opmodels.constrain import apply
from wsealloc.problem.allocation import build_problem
from wsealloc.problem.stages import build_stage_problem, cut_rules
from wsealloc.solvers.base import Status
from wsealloc.solvers.stages import solve as stage_solve


@dataclass(frozen=True)
class Infeasible:
    """Why a set of rules cannot hold: what they leave impossible (a phrase after "together they")."""

    what: str


def _corners_near(costs: CostTable, pinned: list[int]) -> list[list[int]]:
    """Per pinned kernel (``pinned[i]``), the pinned kernels after it whose corner lies within the
    fewest rows and columns either may take (``_corner_cover``'s test, all pairs at once: an old plan
    read back as rules pins every kernel, and 442 corners took 3.4 s pair by pair)."""
    applied = costs.applied
    if applied is None or not pinned:
        return [[] for _ in pinned]
    corner = np.array([pin[1] for k in pinned if (pin := applied.pin_of(costs.kernels[k].kernel.name)) is not None])
    if corner.shape[0] != len(pinned):
        return [pinned[i + 1 :] for i in range(len(pinned))]  # (every kernel listed is pinned: never)
    big = np.iinfo(np.int64).max // 4  # no legal op model: the first test's, never a cover
    least = np.full((len(pinned), 2), big, dtype=np.int64)
    for i, k in enumerate(pinned):
        t = costs.kernels[k].table
        legal = t.legal()
        if legal.any():
            least[i] = (int(t.r[legal].min()), int(t.c[legal].min()))
    y, x = corner[:, 0].astype(np.int64), corner[:, 1].astype(np.int64)
    out = []
    for i in range(len(pinned)):
        j = np.arange(i + 1, len(pinned))
        apart = (
            (least[i, 0] <= y[j] - y[i])
            | (least[j, 0] <= y[i] - y[j])
            | (least[i, 1] <= x[j] - x[i])
            | (least[j, 1] <= x[i] - x[j])
        )
        out.append([pinned[b] for b in j[~apart & (least[j, 0] < big)].tolist()] if least[i, 0] < big else [])
    return out


def _corner_cover(costs: CostTable, a: int, b: int) -> str | None:
    """Two pinned kernels whose allowed rectangles always overlap (None: some pair does not)."""
    applied = costs.applied
    assert applied is not None
    ka, kb = costs.kernels[a], costs.kernels[b]
    pa, pb = applied.pin_of(ka.kernel.name), applied.pin_of(kb.kernel.name)
    assert pa is not None and pb is not None
    (ya, xa), (yb, xb) = pa[1], pb[1]
    ta, tb = ka.table, kb.table
    la, lb = ta.legal(), tb.legal()
    if not la.any() or not lb.any():
        return None  # a kernel with no op model is the first test's
    # separated along some axis: a's rectangle ends before b's corner (or b's before a's)
    apart = (
        (ta.r[la].min() <= yb - ya) or (tb.r[lb].min() <= ya - yb) or (ta.c[la].min() <= xb - xa) or (tb.c[lb].min() <= xa - xb)
    )
    if apart:
        return None
    return f"leave {ka.kernel.name} at [{ya}, {xa}] and {kb.kernel.name} at [{yb}, {xb}] overlapping whatever grids they take"


class _Wafers:
    """Which kernels share a wafer in the plan the solvers make. Each wafer has its own cores at the same
    coordinates, so corners and areas only compete between kernels on one wafer: one wafer holds them
    all; the user's rules may fix it (a ``cut`` rule between two kernels parts them; no cut allowed
    between them, ``cut ... must: false`` or a ``together`` group, keeps them together); else the
    pipeline's cut decides, the exact stage partition it takes first (``solvers.stages``, computed
    once, when asked)."""

    def __init__(self, costs: CostTable, wafers: int | None) -> None:
        self.costs, self.wafers = costs, wafers
        self.rules = cut_rules(costs) if wafers != 1 else None
        self._cuts: tuple[int, ...] | None = None

    def fixed(self, a: int, b: int) -> bool | None:
        """Whether kernels ``a`` and ``b`` (positions in dataflow order) share a wafer in every plan
        (True), in none (False), or as the pipeline's cut decides (None)."""
        if self.wafers == 1:
            return True
        lo, hi = sorted((a, b))
        if self.rules is not None:
            allowed, required = self.rules
            if required[lo + 1 : hi + 1].any():
                return False
            if not allowed[lo + 1 : hi + 1].any():
                return True
        return None

    def together(self, a: int, b: int) -> bool:
        """Whether kernels ``a`` and ``b`` are on one wafer in the plan the solvers make."""
        fixed = self.fixed(a, b)
        if fixed is not None:
            return fixed
        if self._cuts is None:
            partition = stage_solve(build_stage_problem(self.costs), self.wafers)  # no partition: test 4 says why
            self._cuts = partition.cuts if partition.status is Status.OPTIMAL else tuple(range(len(self.costs.kernels) + 1))
        lo, hi = sorted((a, b))
        return not any(lo < cut <= hi for cut in self._cuts)

    def runs(self, kernels: list[int]) -> list[list[int]]:
        """``kernels`` (in dataflow order) as the groups that share a wafer."""
        out: list[list[int]] = []
        for k in kernels:
            if out and self.together(out[-1][0], k):
                out[-1].append(k)
            else:
                out.append([k])
        return out


def _can_touch(costs: CostTable, a: int, b: int, corners: dict[str, tuple[int, int]]) -> bool:
    """Whether some allowed rectangles of pinned kernels a and b lie side by side (an edge along an
    edge): the rectangle of each grows right and down from its corner."""
    ka, kb = costs.kernels[a], costs.kernels[b]
    (ya, xa), (yb, xb) = corners[ka.kernel.name], corners[kb.kernel.name]
    ta, tb = ka.table, kb.table
    la, lb = ta.legal(), tb.legal()
    ra, ca = ta.r[la][:, None], ta.c[la][:, None]  # every pair of allowed grids at once
    rb, cb = tb.r[lb][None, :], tb.c[lb][None, :]
    rows_meet = (ya < yb + rb) & (yb < ya + ra)
    cols_meet = (xa < xb + cb) & (xb < xa + ca)
    beside = ((xa + ca == xb) | (xb + cb == xa)) & rows_meet
    stacked = ((ya + ra == yb) | (yb + rb == ya)) & cols_meet
    return bool((beside | stacked).any())


def _touch_apart(costs: CostTable, group: tuple[str, ...]) -> str | None:
    """A ``together: touch`` group of pinned kernels only, no two of which can be joined by touching
    rectangles into one group (the test relaxes: each pair may take its own grids; so when even that
    leaves the group in pieces, no layout joins it). None: they may touch, or a free member may join them."""
    applied = costs.applied
    assert applied is not None
    corners = {name: at for name, _, at in applied.pins}
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    if len(group) < 2 or not all(n in corners and n in index for n in group):
        return None
    seen, todo = {group[0]}, [group[0]]
    while todo:
        a = todo.pop()
        for b in group:
            if b not in seen and _can_touch(costs, index[a], index[b], corners):
                seen.add(b)
                todo.append(b)
    if len(seen) == len(group):
        return None
    alone = next(n for n in group if n not in seen)
    return (
        f"leave {alone} at {list(corners[alone])} apart from {group[0]} at {list(corners[group[0]])}: "
        "no grids they may take put their rectangles side by side"
    )


def _touch_unreachable(costs: CostTable, group: tuple[str, ...]) -> str | None:
    """A ``together: touch`` group whose pinned members are too far apart for its free members to join
    them (None: they may). The test relaxes the geometry to the rows and the columns alone: a group of
    rectangles joined side by side covers every row between its topmost and its bottommost corner (and
    every column between its leftmost and its rightmost); the pinned members cover at most the rows
    their tallest allowed grids reach from their corners, and the free members at most the sum of their
    tallest allowed grids' rows wherever they go. Rows (or columns) that neither can cover prove that no
    layout joins the group, whatever else the rules and the placement do."""
    applied = costs.applied
    assert applied is not None
    corners = {name: at for name, _, at in applied.pins}
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    members = [n for n in group if n in index]
    pinned = [n for n in members if n in corners]
    if len(pinned) < 2:
        return None
    free = [n for n in members if n not in corners]
    arch = costs.arch

    def reach(name: str, axis: int) -> int:  # the most rows (axis 0) or columns (1) an allowed grid spans
        table = costs.kernels[index[name]].table
        legal = table.legal()
        sides = table.r if axis == 0 else table.c
        return int(sides[legal].max()) if legal.any() else 0

    for axis, label, size in ((0, "rows", arch.rows), (1, "columns", arch.cols)):
        first = min(pinned, key=lambda n: corners[n][axis])
        last = max(pinned, key=lambda n: corners[n][axis])
        lo, hi = corners[first][axis], corners[last][axis]
        covered = np.zeros(max(size, hi + 1), dtype=bool)
        for name in pinned:
            start = corners[name][axis]
            covered[start : start + reach(name, axis)] = True
        gap = int((~covered[lo : hi + 1]).sum())
        span = sum(reach(name, axis) for name in free)
        if gap > span:
            names = ", ".join(free[:3]) + (", ..." if len(free) > 3 else "")
            joiners = f"its free members ({names}) span at most {span:,} {label} in all" if free else "it has no free member"
            return (
                f"keep {first} at {list(corners[first])} and {last} at {list(corners[last])} in one group side by side: "
                f"{gap:,} {label} between them that no grid the pinned members may take covers, and {joiners}"
            )
    return None


def _touch_areas(costs: CostTable, group: tuple[str, ...]) -> str | None:
    """A ``together: touch`` group whose members' places cannot meet (None: they may). Each member lies
    in a box: its ``within`` area, or from a fixed corner as far as its largest allowed grid reaches,
    else the whole wafer. Two rectangles inside two boxes can lie side by side only where the boxes
    overlap or share an edge (rows in common and columns adjacent, or the other way round), so when
    the boxes that can meet leave the group in pieces, no layout joins it."""
    applied = costs.applied
    assert applied is not None
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    members = [n for n in group if n in index]
    corners = {name: at for name, _, at in applied.pins}
    arch = costs.arch

    def box(name: str) -> tuple[int, int, int, int]:  # (row, col, rows, cols)
        fence = applied.fence_of(name)
        area = fence[1] if fence is not None else (0, 0, arch.rows, arch.cols)
        if name not in corners:
            return area
        table = costs.kernels[index[name]].table
        legal = table.legal()
        y, x = corners[name]
        return (y, x, int(table.r[legal].max(initial=1)), int(table.c[legal].max(initial=1)))

    boxes = {n: box(n) for n in members}

    def meet(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
        rows = a[0] < b[0] + b[2] and b[0] < a[0] + a[2]
        cols = a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
        rows_near = a[0] <= b[0] + b[2] and b[0] <= a[0] + a[2]  # overlapping or sharing an edge
        cols_near = a[1] <= b[1] + b[3] and b[1] <= a[1] + a[3]
        return (rows and cols_near) or (cols and rows_near)

    if len(members) < 2 or all(boxes[n] == (0, 0, arch.rows, arch.cols) for n in members):
        return None
    seen, todo = {members[0]}, [members[0]]
    while todo:
        a = todo.pop()
        for b in members:
            if b not in seen and meet(boxes[a], boxes[b]):
                seen.add(b)
                todo.append(b)
    if len(seen) == len(members):
        return None
    alone = next(n for n in members if n not in seen)

    def where(name: str) -> str:
        y, x, r, c = boxes[name]
        return f"rows {y}-{y + r - 1}, cols {x}-{x + c - 1}"

    return (
        f"keep {alone} ({where(alone)}) and {members[0]} ({where(members[0])}) in one group side by side: "
        "where they may lie never meets"
    )


def infeasibility(costs: CostTable, wafers: int | None, shared: bool = False) -> Infeasible | None:
    """What the rules applied to ``costs`` leave impossible on ``wafers`` wafers (None: auto), or None.
    ``shared``: kernels share regions of cores in time (``--share``), so their cores do not add up
    (the sharing search says whether its regions fit)."""
    applied = costs.applied
    # 1. a kernel without an op model
    for kc in costs.kernels:
        if len(kc.frontier) == 0:
            return Infeasible(f"leave {kc.kernel.name} no legal op model ({_why_none(kc.table)})")
    index = {kc.kernel.name: i for i, kc in enumerate(costs.kernels)}
    on = _Wafers(costs, wafers)
    # 2. pinned kernels on one wafer that overlap whatever they choose
    pinned = [index[name] for name, _, _ in applied.pins if name in index] if applied is not None else []
    near = _corners_near(costs, pinned)
    for i, a in enumerate(pinned):
        for b in near[i]:
            found = _corner_cover(costs, a, b)
            if found and on.together(a, b):
                cut = (
                    "" if on.fixed(a, b) else " on the wafer the pipeline's cut puts both on (a cut rule between them parts them)"
                )
                return Infeasible(found + cut)
    # 2b. a group to keep side by side whose corners are all fixed too far apart
    for _, group in applied.touch_groups if applied is not None else ():
        apart = _touch_apart(costs, group) or _touch_unreachable(costs, group) or _touch_areas(costs, group)
        if apart:
            return Infeasible(apart)
    # 3. areas too small for the kernels kept within them
    arch = costs.arch
    fences = applied.fences if applied is not None else ()
    obstacles = applied.obstacles if applied is not None else ()
    for _, _, area in fences:
        within = [
            k for k, kc in enumerate(costs.kernels) if any(n == kc.kernel.name and contains(area, box) for n, _, box in fences)
        ]
        # each wafer has the area: the kernels of one wafer compete for it
        crowded = max(on.runs(within), key=lambda run: sum(costs.kernels[k].min_cores for k in run), default=[])
        inside = [costs.kernels[k] for k in crowded]
        need = sum(kc.min_cores for kc in inside)
        free = free_cores(area, obstacles)
        if need > free:
            names = ", ".join(kc.kernel.name for kc in inside[:3]) + (", ..." if len(inside) > 3 else "")
            return Infeasible(
                f"keep {len(inside)} kernel(s) ({names}) needing {need:,} cores within an area of {free:,} free cores"
            )
    if shared:
        return None
    # 4. the cores of the wafers (with the cut rules over several)
    cuts = applied.cuts if applied is not None else ()
    if wafers == 1 and any(must for _, _, must in cuts):
        name = next(name for name, _, must in cuts if must)
        return Infeasible(f"cut the pipeline after {name}, but the plan has one wafer (plan with --wafers 2 or more, or auto)")
    problem = build_problem(costs)
    if wafers == 1:
        need = problem.min_cores()
        if need > problem.total_cores:
            kept = applied.kept_out_cores if applied is not None else 0
            less = f", {arch.total_cores:,} less {kept:,} kept out" if kept else ""
            return Infeasible(
                f"need {need:,} cores on the kernels' smallest allowed op models, the wafer has {problem.total_cores:,}{less}"
            )
        return None
    partition = stage_solve(build_stage_problem(costs), wafers)
    if partition.status is not Status.OPTIMAL:
        count = "the wafers" if wafers is None else f"{wafers} wafers"
        return Infeasible(f"leave no pipeline over {count} ({partition.message})")
    return None


def _why_none(table: OpModelTable) -> str:
    """Why a kernel's table has no legal op model left: the rules exclude every legal one, or the ones
    they allow are illegal anyway (and why)."""
    excluded = int((table.reason == Reason.CONSTRAINED).sum())
    allowed = table.rule == 0 if table.rule is not None else np.ones(len(table), dtype=bool)
    if not allowed.any():
        return f"the rules exclude all {excluded:,} legal ones"
    reasons = sorted({Reason(int(v)) for v in table.reason[allowed]})
    shapes = sorted({(int(r), int(c)) for r, c in zip(table.r[allowed], table.c[allowed], strict=True)})
    shown = ", ".join(f"{r}x{c}" for r, c in shapes[:3]) + (", ..." if len(shapes) > 3 else "")
    return f"the grids the rules allow ({shown}) are not legal: {'; '.join(r.label for r in reasons)}"


def explain(costs: CostTable, wafers: int | None, shared: bool = False, deadline: Deadline | None = None) -> str | None:
    """One message naming an irreducible subset of the rules that cannot hold (None: no conflict).

    ``costs`` carries the rules as applied (``costs.applied``) and the table before them; ``shared``:
    see :func:`infeasibility`. The subset is found by halves (QuickXplain: Junker, AAAI 2004), which
    tests about k log(n / k) subsets for k conflicting rules of n instead of deletion filtering's n,
    so thousands of harmless rules beside a conflict cost seconds, not minutes. ``deadline``: a stop
    request ends the search (:class:`Interrupted`); when its time is up, the rules are reported as
    conflicting without the smallest subset."""
    applied, base = costs.applied, costs.unconstrained
    if applied is None or base is None:
        return None
    first = infeasibility(costs, wafers, shared)
    if first is None:
        return None
    rules = list(applied.constraints.rules)
    source = applied.constraints.source

    def fails(subset: list[Rule]) -> Infeasible | None:
        if deadline is not None and deadline.stopped:
            raise Interrupted("interrupted while explaining the conflicting constraints; nothing was solved")
        if deadline is not None and deadline.expired():
            raise _OutOfTime
        trial = Constraints(source=source, rules=tuple(subset))
        try:
            return infeasibility(apply(base, trial), wafers, shared)
        except ConflictError as exc:  # the rules' own geometry (two corners for one kernel, areas that do not meet)
            return Infeasible(str(exc))

    def smallest(background: list[Rule], changed: bool, candidates: list[Rule]) -> list[Rule]:
        """The rules of ``candidates`` that, with all of ``background``, still fail, none of them spare."""
        if changed and fails(background) is not None:
            return []
        if len(candidates) <= 1:
            return list(candidates)
        half = len(candidates) // 2
        low, high = candidates[:half], candidates[half:]
        from_high = smallest(background + low, bool(low), high)
        from_low = smallest(background + from_high, bool(from_high), low)
        return from_low + from_high

    try:
        if fails([]) is not None:
            return None  # no rule needed: the model itself does not fit (the usual messages say why)
        keep = smallest([], False, rules)
        found = fails(keep) or first
    except _OutOfTime:
        shown = "; ".join(f"{applied.constraints.where(r)} {r.text()}" for r in rules[:3])
        more = f" and {len(rules) - 3:,} more" if len(rules) > 3 else ""
        return f"{shown}{more}: together they {first.what} (the time limit ended the search for the smallest subset)"
    order = {id(r): i for i, r in enumerate(rules)}
    keep.sort(key=lambda r: order[id(r)])  # in the file's order
    where = [applied.constraints.where(r) for r in keep]
    first_file = (keep[0].source or source) if keep[0].line else None
    # a later rule of the first rule's file is "line 9 ...": the file is named once
    same = [bool(i and first_file and (r.source or source) == first_file and r.line) for i, r in enumerate(keep)]
    parts = [f"{w.removeprefix(f'{first_file} ') if s else w} {r.text()}" for w, r, s in zip(where, keep, same, strict=True)]
    joined = "; ".join(parts)
    return f"{joined}: {'together they' if len(keep) > 1 else 'it would'} {found.what}"


class _OutOfTime(Exception):
    """The conflict search's time is up (caught in :func:`explain`)."""


def check(costs: CostTable, wafers: int | None, shared: bool = False, deadline: Deadline | None = None) -> None:
    """Raise :class:`ConflictError` naming the conflicting rules when the constraints cannot hold."""
    message = explain(costs, wafers, shared, deadline)
    if message is not None:
        raise ConflictError(message)
