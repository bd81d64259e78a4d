"""Helpers shared by the benchmark scripts: peak memory of a child process, Markdown tables."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_child(script: str, *args: str) -> dict[str, Any]:
    """Run ``python script args`` and return its last stdout line parsed as JSON (with peak RSS)."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{script} {' '.join(args)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_rss_mib() -> float:
    """Peak resident memory of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A GitHub Markdown table of ``rows`` restricted to ``columns``."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        out.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(out)
