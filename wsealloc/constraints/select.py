"""Which kernels each rule selects (names, globs, op types, ranges in dataflow order).

A rule that selects no kernel is an error naming its line and a few kernel names that do exist: a
misspelt name must not silently constrain nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from fnmatch import fnmatchcase

from wsealloc.constraints.schema import Constraints, CutRule, KeepOut, Rule, Selector
from wsealloc.errors import ConstraintError, excerpt
from wsealloc.graph.kernels import Kernel


def _position(ref: str | int, names: Sequence[str], where: str, what: str) -> int:
    """A kernel given by name or by its position in dataflow order."""
    if isinstance(ref, int):
        if not 0 <= ref < len(names):
            raise ConstraintError(f"{where}: {what} {ref}: positions run from 0 to {len(names) - 1}")
        return ref
    if ref in names:
        return names.index(ref)
    close = difflib.get_close_matches(ref, names, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConstraintError(f"{where}: {what} {excerpt(ref)} is not a kernel of the model{hint}; `wsealloc inspect` lists them")


def select(selector: Selector, kernels: Sequence[Kernel], where: str) -> tuple[int, ...]:
    """Indices (dataflow order) of the kernels ``selector`` picks; an error when it picks none."""
    names = [k.name for k in kernels]
    picked = set(range(len(kernels)))
    if selector.names:
        hits = [{i for i, n in enumerate(names) if n == p or fnmatchcase(n, p)} for p in selector.names]
        if len(hits) > 1 and (lost := [p for p, h in zip(selector.names, hits, strict=True) if not h]):
            # each name of a list on its own: a typo beside a good name would otherwise drop out of the
            # rule unseen (a touch group of one, a grid on one kernel of two), and the plan call it honoured
            raise ConstraintError(f"{where}: {_unknown(lost, names)}")
        picked &= set().union(*hits)
    if selector.ops:
        wanted = {o.lower() for o in selector.ops}
        picked &= {i for i, k in enumerate(kernels) if k.anchor_op.lower() in wanted or k.kind.value in wanted}
    if selector.range is not None:
        first = _position(selector.range[0], names, where, "range start")
        last = _position(selector.range[1], names, where, "range end")
        if first > last:
            raise ConstraintError(
                f"{where}: range {selector.range[0]}..{selector.range[1]} runs backwards (kernel {first} after {last})"
            )
        picked &= set(range(first, last + 1))
    if not picked:
        raise ConstraintError(f"{where}: {selector.text()} selects no kernel of the model{_hint(selector.names, names)}")
    return tuple(sorted(picked))


def _hint(patterns: Sequence[str], names: Sequence[str]) -> str:
    """The close names of misspelt patterns (else a few names that exist), and where to list them all."""
    guess = [m for p in patterns for m in difflib.get_close_matches(p, names, n=3)]
    hint = f"; close names: {', '.join(dict.fromkeys(guess))}" if guess else f"; kernels are named like {', '.join(names[:3])}"
    return f"{hint} (`wsealloc inspect` lists them)"


def _unknown(lost: Sequence[str], names: Sequence[str]) -> str:
    """The entries of a list that match no kernel, with the close names."""
    listed = ", ".join(excerpt(p) for p in lost)
    return f"{listed} in the list {'selects' if len(lost) == 1 else 'select'} no kernel of the model{_hint(lost, names)}"


def present(constraints: Constraints, kernels: Sequence[Kernel]) -> Constraints:
    """``constraints`` without the ``optional`` rules (an old plan's, ``--from-plan``) that name a
    kernel this model no longer has: an edited model re-solves from its old plan, where the user's own
    rules must each select a kernel. Every reader of the rules (the op-model tables, ``verify``) asks
    here first, so both see the same rules."""
    names = {k.name for k in kernels}

    def here(rule: Rule) -> bool:
        if not rule.optional or isinstance(rule, KeepOut):
            return True
        if isinstance(rule, CutRule):
            return isinstance(rule.after, int) or rule.after in names
        return all(n in names for n in rule.select.names)

    kept = tuple(r for r in constraints.rules if here(r))
    return constraints if len(kept) == len(constraints.rules) else constraints.model_copy(update={"rules": kept})


def members(constraints: Constraints, kernels: Sequence[Kernel]) -> tuple[tuple[int, ...], ...]:
    """Per rule, the kernel indices it applies to (a keep-out: none; a cut: the kernel it cuts after)."""
    names = [k.name for k in kernels]
    out: list[tuple[int, ...]] = []
    for rule in constraints.rules:
        where = constraints.where(rule)
        if isinstance(rule, KeepOut):
            out.append(())
        elif isinstance(rule, CutRule):
            out.append((_position(rule.after, names, where, "cut after"),))
        else:
            out.append(select(rule.select, kernels, where))
    return tuple(out)


def rule_kernels(rule: Rule, kernels: Sequence[Kernel], constraints: Constraints) -> tuple[int, ...]:
    """The kernels one rule applies to (see :func:`members`)."""
    return members(Constraints(source=constraints.source, rules=(rule,)), kernels)[0]
