"""Rows of plain values as CSV and Markdown: the one rendering the sweep, the frontier and the pools
tables share (each builds its rows; this only writes them)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from typing import Any


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """``rows`` as CSV, their first row's keys as the header, one ``\\n`` a line."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def markdown_lines(rows: Sequence[dict[str, Any]], columns: Sequence[str], cell: Callable[[Any], str] = str) -> list[str]:
    """``rows`` as the lines of a Markdown table of ``columns`` (None as an empty cell)."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join("" if r[c] is None else cell(r[c]) for c in columns) + " |" for r in rows]
    return out


def clip(text: str, limit: int, prefix: str = "") -> str:
    """``text`` as a table cell of at most ``limit`` characters: ``prefix`` dropped where it starts it
    (the model's path, which the table's title names), then cut at the last word boundary that leaves
    room for " ..." (the whole text stays in the JSON)."""
    if prefix and text.startswith(prefix):
        text = text[len(prefix) :].lstrip(": ")
    if len(text) <= limit:
        return text
    room = max(limit - 4, 1)
    cut = room if text[room].isspace() else text.rfind(" ", 0, room)
    head = text[:cut] if cut > 0 else text[:room]  # (one word longer than the cell: cut inside it)
    return head.rstrip(" ,;:(") + " ..."


def percent(fraction: float) -> str:
    """A fraction as the tables print it, a percentage to two decimals ("17.64%"): the files and the
    terminal print one cell alike (a gap printed 17.64% on the terminal and 0.1764 in the .csv under
    the same header read as two different numbers)."""
    return f"{fraction:.2%}"


def significant(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits in fixed point, trailing zeros kept, so a column's
    cells read alike (72.65, 72.30, 0.001050, not 72.648654, 72.30224, 0.00105 as rounding to a fixed
    number of decimals gave); from 10^(digits - 1) up, whole numbers, every digit of them (no
    exponent: 12346, not 1.235e+04, which CSV readers and people take less readily)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"
