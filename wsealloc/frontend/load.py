"""Read an ONNX file without reading weight data, with one clear error per way a file can be bad.

Weight data is never needed for planning: large initializers are loaded without their external
data, and embedded ones are stripped right after parsing so that later passes (shape inference)
never copy them. Only small initializers (<= ``SMALL_CONSTANT_ELEMENTS`` elements, e.g. the shape
operands of Reshape) keep their values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from wsealloc.errors import ModelLoadError

# Initializers up to this many elements keep their data: shape computation needs them.
SMALL_CONSTANT_ELEMENTS = 4096

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _numel(dims: object) -> int:
    return int(np.prod([int(d) for d in dims], dtype=np.int64)) if dims else 1  # type: ignore[attr-defined]


def strip_weight_data(graph: onnx.GraphProto) -> None:
    """Drop the data of every large initializer in place, keeping name, dims and type.

    The tensor is marked as external data with an empty location so that nothing later tries to
    read it and shape inference sees only its dims.
    """
    for init in graph.initializer:
        if _numel(init.dims) <= SMALL_CONSTANT_ELEMENTS:
            continue
        has_data = any(init.HasField(f) if f == "raw_data" else len(getattr(init, f)) > 0 for f in _DATA_FIELDS)
        if has_data:
            for field in _DATA_FIELDS:
                init.ClearField(field)
            init.data_location = onnx.TensorProto.EXTERNAL
            del init.external_data[:]
            entry = init.external_data.add()
            entry.key, entry.value = "location", "wsealloc-stripped"


def load_model(path: str | Path) -> onnx.ModelProto:
    """Load ``path`` as ONNX without weight data; raise :class:`ModelLoadError` naming the problem."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file; check the path (the zoo lives in models/)")
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory, expected an .onnx file")
    if not p.is_file():
        # a pipe or a device: it can be read once at most, but plans record the file's SHA-256 and
        # `verify` reads the model again (opening a FIFO without a writer would also hang)
        raise ModelLoadError(f"{p}: not a regular file (a pipe or a device); save the model to a file first")
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    if size == 0:
        raise ModelLoadError(f"{p}: file is empty, not an ONNX model; re-export it")
    if head.lstrip().startswith((b"<", b"{", b"#", b"ir_version", b"graph")) or _looks_like_text(head):
        raise ModelLoadError(f"{p}: looks like a text file, not a binary ONNX model; export with torch.onnx.export")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except DecodeError as exc:
        raise ModelLoadError(f"{p}: not a valid ONNX protobuf (truncated or corrupt: {exc}); re-export the model") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"{p}: cannot load as ONNX ({exc.__class__.__name__}: {exc})") from exc
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise ModelLoadError(f"{p}: holds no graph nodes (empty or not an ONNX model); re-export the model")
    strip_weight_data(model.graph)
    return model


def _looks_like_text(head: bytes) -> bool:
    """True for printable ASCII starts: binary ONNX starts with field tags such as 0x08 (ir_version)."""
    if not head:
        return False
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
    return printable == len(head) and len(head) >= 16
