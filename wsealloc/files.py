"""Files: atomic output (temporary file + rename), output-path guards, content hashes, and what a
file that is not text looks like (for the one line refusing it where a text file is expected).

A base module (below every layer): the request checks output paths with it, the plan writes and
hashes with it.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from wsealloc.errors import OutputError


def check_writable(path: str | Path) -> None:
    """Fail early (before solving) when ``path`` cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{p}: is a directory; give a file name such as {p / 'plan.json'}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputError(f"{p}: directory {parent} does not exist; create it first")
    if p.exists() and not p.is_file():
        # a device or FIFO is written in place (see write_atomic): only the path itself must be writable
        if not os.access(p, os.W_OK):
            raise OutputError(f"{p}: not writable; choose another -o path")
        return
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise OutputError(f"{p}: not writable; choose another -o path")


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and an atomic rename.

    An interrupted run therefore never leaves a truncated file behind. A path that exists and is not
    a regular file (``/dev/null``, a FIFO, a terminal) is written directly instead: renaming over it
    would replace the device with a plain file.
    """
    p = Path(path)
    check_writable(p)
    mode_w = "wb" if isinstance(text, bytes) else "w"
    try:
        if p.exists() and not p.is_file():
            with open(p, mode_w) as fh:
                fh.write(text)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent if str(p.parent) else "."))
    except OSError as exc:
        raise OutputError(f"{p}: cannot write ({exc.strerror or exc}); choose another path") from exc
    try:
        # mkstemp creates 0600 files: keep an existing file's mode, else the usual 0666 & ~umask
        mode = p.stat().st_mode & 0o777 if p.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        with os.fdopen(fd, mode_w) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{p}: cannot write ({exc.strerror or exc}); choose another path") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_distinct_outputs(inputs: Mapping[str, str | Path | None], outputs: Mapping[str, str | Path | None]) -> None:
    """Refuse an output path that is also an input or another output (``-o model.onnx`` would
    overwrite the model; ``-o x.svg --floorplan x.svg`` would keep only one of the two)."""
    seen: dict[Path, str] = {}
    for label, path in inputs.items():
        if path is not None and Path(path).exists():
            seen[Path(path).resolve()] = label
    for label, path in outputs.items():
        if path is None:
            continue
        key = Path(path).resolve()
        device = key.exists() and not key.is_file()  # /dev/null may take every output
        if key in seen and not device:
            raise OutputError(f"{path}: {label} would overwrite the {seen[key]}; choose another path")
        seen[key] = label


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file (the model a plan was made for)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ONNX's ModelProto serialized: its first field is ir_version (field 1, a varint: tag byte 0x08), and no
# text file opens with a backspace. A weightless export can be valid UTF-8 throughout (the tiny models are),
# so the tag is tested before the bytes' decoding.
_ONNX_TAG = b"\x08"
_PNG = b"\x89PNG\r\n\x1a\n"  # (--floorplan writes .png files: a plausible file to pass by mistake)


def binary_kind(path: str | Path) -> str | None:
    """What the file at ``path`` looks like when it is not text: ``"an ONNX model"``, ``"a PNG image"``
    or ``"a binary file"`` (bytes that are not UTF-8, or a NUL); None for text, or a file that cannot be
    read (its reader names that). Readers of plan JSON and YAML files call it first, so that a model given
    where a plan or arch is expected is named as one, not as a codec's error at byte 0x99."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if head.startswith(_PNG):
        return "a PNG image"
    if head.startswith(_ONNX_TAG):
        return "an ONNX model"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # (a character cut at 4096 is no error)
    except UnicodeDecodeError:
        return "an ONNX model" if p.suffix.lower() == ".onnx" else "a binary file"
    return "a binary file" if b"\0" in head else None
