"""One error hierarchy for everything wsealloc reports to a user.

Every error carries a one-line message that names the file, field or op at fault
and says what to do about it. The CLI prints ``str(err)`` on one line and exits
with ``err.exit_code``; tracebacks are shown only with ``--debug``.
"""

from __future__ import annotations

import itertools
import reprlib


class WseallocError(Exception):
    """Base class: a problem the user can fix, reported on one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        # Keep messages on one line: the CLI contract is "one clear line on stderr".
        super().__init__(" ".join(message.split()))


class UsageError(WseallocError):
    """Bad command-line syntax (``--dim``, ``--set``, unknown names)."""


class ArchError(WseallocError):
    """The architecture YAML is missing, malformed or inconsistent."""


class ModelLoadError(WseallocError):
    """The ONNX file is missing, unreadable, not ONNX, or structurally broken."""


class ShapeError(WseallocError):
    """A tensor shape cannot be resolved (unbound symbolic dim, zero dim, unknown shape)."""


class InputShapeError(ShapeError):
    """A model input has sizes the model leaves open (unknown, unnamed, 0 or -1, or an unbound named dim).

    ``inputs`` lists every data input as (name, shape text); ``options`` the ``--input-shape`` values that
    fix it, known sizes filled in and ``N`` where the user must choose (``inspect`` prints them)."""

    def __init__(self, message: str, inputs: tuple[tuple[str, str], ...] = (), options: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.inputs = inputs
        self.options = options


class UnsupportedOpError(WseallocError):
    """The cost model does not know an op (use ``--allow-unknown-ops`` for a fallback cost)."""


class InfeasibleError(WseallocError):
    """No allocation fits the machine; the message names the kernels and by how much."""

    exit_code = 3


class NoLayoutError(InfeasibleError):
    """An allocation whose rectangles no layout packs on the wafer (the placement gave up)."""


class SolverError(WseallocError):
    """A solver backend failed or returned a result that does not check out."""


class PlanError(WseallocError):
    """A plan file is malformed, or does not match the model/arch it names."""


class VerificationError(WseallocError):
    """``wsealloc verify`` found a violated constraint or a wrong number."""

    exit_code = 4


class OutputError(WseallocError):
    """An output path cannot be written."""


class RegressionError(WseallocError):
    """``wsealloc bench``: a result is worse than the suite's best-known value, or an instance failed."""

    exit_code = 5


class SweepError(WseallocError):
    """``wsealloc sweep`` or ``frontier``: no point produced a plan; ``pools``: no row has both its plans,
    a solve's error among the reasons (not the limits: no time was held against them)."""


class Interrupted(WseallocError):
    """The user interrupted a run (SIGINT/SIGTERM); the best result so far was saved."""

    exit_code = 130


# How much of a user's value a message quotes: a value read from a file can be any size (a list of a
# million entries, a megabyte string), and the message must stay one readable line.
EXCERPT_CHARS = 80


class _Excerpt(reprlib.Repr):
    """``reprlib`` limits (a few items per level, three levels), dicts in their own order as ``repr``
    shows them (``reprlib`` sorts their keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 10
        self.maxdict = 6
        self.maxstring = self.maxother = self.maxlong = EXCERPT_CHARS

    def repr_dict(self, x: dict[object, object], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        pieces = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in itertools.islice(x.items(), self.maxdict)]
        if len(x) > self.maxdict:
            pieces.append("...")
        return "{" + ", ".join(pieces) + "}"


_EXCERPT = _Excerpt()


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` as a message quotes a user's value: at most ``limit`` characters, ``...`` where it
    was cut. Built by ``reprlib``, which looks at a few items of each level only, so a huge or deeply
    nested value costs no more to quote than a small one."""
    return shorten(_EXCERPT.repr(value), limit)


def shorten(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` (a name the user gave, shown without quotes) cut to ``limit`` characters, ``...`` where it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def choices_message(kind: str, name: str, choices: list[str] | tuple[str, ...]) -> str:
    """Format the standard 'unknown X' message listing the valid choices."""
    return f"unknown {kind} {name!r}; choose one of: {', '.join(sorted(choices))}"


class ConstraintError(WseallocError):
    """A constraints file (``--constraints``) is malformed, or a rule selects nothing or cannot be honoured."""


class ConflictError(InfeasibleError):
    """The user's constraints cannot all hold; the message names a small conflicting subset by line."""
