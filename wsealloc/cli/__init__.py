"""Command-line interface (``wsealloc ...``): click commands over :func:`wsealloc.api.run`.

``main`` is the console-script entry point; ``build_cli`` assembles the command group.
"""

from wsealloc.cli.app import build_cli, main

__all__ = ["build_cli", "main"]
