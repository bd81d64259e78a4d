"""Parsing of human-friendly quantities (``48KiB``, ``1.1GHz``, ``2e9``) used by the arch YAML and ``--set``."""

from __future__ import annotations

import re

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
}
_HZ_UNITS = {"": 1, "hz": 1, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def ascii_int(text: str) -> int:
    """``text`` as an integer written in ASCII digits (an optional sign and ``_`` between digits, as in
    Python source); ``ValueError`` otherwise. ``int()`` alone reads any script's digits (``int('٣')``
    is 3), so ``--input-shape x=٣x64`` was planned as 3x64: a size is accepted in the digits every
    message and plan writes it back in."""
    if not text.isascii():
        raise ValueError(f"{text!r} is not written in ASCII digits")
    return int(text)


def parse_bytes(value: object) -> int:
    """Parse a byte quantity: an int, or a string such as ``48KiB``, ``45GB``, ``4096``.

    Raises ``ValueError`` with a message listing the accepted units.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a byte size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected a whole number of bytes, got {value!r}")
        return int(value)
    if isinstance(value, str):
        m = _NUM.match(value)
        if m and m.group(2).lower() in _BYTE_UNITS:
            total = float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]
            if not total.is_integer():
                raise ValueError(f"{value!r} is not a whole number of bytes")
            return int(total)
    raise ValueError(f"expected a byte size such as 49152 or '48KiB' (units: B, KB, MB, GB, KiB, MiB, GiB), got {value!r}")


def parse_hz(value: object) -> float:
    """Parse a frequency: a number in Hz or a string such as ``1.1GHz``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a frequency, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _NUM.match(value)
        if m and m.group(2).lower() in _HZ_UNITS:
            return float(m.group(1)) * _HZ_UNITS[m.group(2).lower()]
    raise ValueError(f"expected a frequency such as 1.1e9 or '1.1GHz', got {value!r}")


def format_bytes(n: float) -> str:
    """Render a byte count with a binary unit, e.g. ``45.2 GiB``."""
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_count(n: float) -> str:
    """Render a large count compactly: ``145.82 G``."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:g}"
