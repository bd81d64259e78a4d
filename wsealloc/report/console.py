"""The rich console every command prints through."""

from __future__ import annotations

import sys

from rich.console import Console


def console(err: bool = False) -> Console:
    """A console on stdout (or stderr); pipes and CI logs get 160 columns instead of rich's 80."""
    stream = sys.stderr if err else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else 160)
