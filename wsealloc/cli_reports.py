"""CLI commands for reports, benchmark suites and architecture sweeps (``compare``, ``bench``, ``sweep``).

Kept apart from ``wsealloc/cli.py`` so the report layer can grow without touching the core commands;
``register`` attaches them to the main click group.
"""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Attach the report commands to ``group`` (none are defined yet)."""
    del group
