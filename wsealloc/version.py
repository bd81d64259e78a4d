"""The package version (one place: the package root, plan files and ``--version`` read it)."""

__version__ = "0.1.0"
