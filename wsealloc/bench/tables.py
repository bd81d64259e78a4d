"""Rows of plain values as CSV and Markdown: the one rendering the sweep, the frontier and the pools
tables share (each builds its rows; this only writes them)."""

from __future__ import annotations

import csv
import io
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
