"""Read an ONNX file without reading weight data, with one clear error per way a file can be bad.

Weight data is never needed for planning: large initializers are loaded without their external
data, and embedded ones are stripped right after parsing so that later passes (shape inference)
never copy them. Only small initializers (<= ``SMALL_CONSTANT_ELEMENTS`` elements, e.g. the shape
operands of Reshape) keep their values.
"""

from __future__ import annotations

import shlex
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
    """Load ``path`` as ONNX without weight data; raise :class:`ModelLoadError` naming the problem.

    Every reading of a model file goes through here (the import, ``--context``'s cache dims, a prefill
    export's prompt length, ``pools``' two exports), so each way a file can be bad has one message."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file; check the path (the zoo lives in models/)")
    if p.is_dir():
        if (p / "config.json").is_file() and _looks_like_hf_config(p / "config.json"):
            raise ModelLoadError(f"{p}: a folder holding a Hugging Face config.json, not an ONNX model: {_export_hint(p)}")
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
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()  # (a byte-order mark: editors write one in front of JSON)
    if text.startswith(b"{") and _looks_like_hf_config(p):
        raise ModelLoadError(f"{p}: a Hugging Face config.json, not an ONNX model: {_export_hint(p)}")
    if text.startswith((b"<", b"{", b"#", b"ir_version", b"graph")) or _looks_like_text(head):
        raise ModelLoadError(f"{p}: looks like a text file, not a binary ONNX model; export with torch.onnx.export")
    try:
        # binary protobuf whatever the suffix (onnx picks a JSON or text parser for .json / .textproto,
        # whose ParseError no branch below names: a short JSON file ended as an internal error)
        model = onnx.load(str(p), format="protobuf", load_external_data=False)
    except DecodeError as exc:
        raise ModelLoadError(f"{p}: not a valid ONNX protobuf (truncated or corrupt: {exc}); re-export the model") from exc
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"{p}: cannot load as ONNX ({exc.__class__.__name__}: {exc})") from exc
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise ModelLoadError(f"{p}: holds no graph nodes (empty or not an ONNX model); re-export the model")
    strip_weight_data(model.graph)
    return model


# How much of a JSON file is searched for a Hugging Face config's keys (a config is a few KiB)
CONFIG_HEAD_BYTES = 1 << 16
# keys every Hugging Face config.json of a causal LM has (transformers writes them near the top)
_HF_CONFIG_KEYS = (b'"model_type"', b'"architectures"')


def _looks_like_hf_config(p: Path) -> bool:
    """True when the JSON file at ``p`` names a ``model_type`` or ``architectures`` near its start: a
    Hugging Face config.json, which ``wsealloc export-llm`` turns into ONNX."""
    try:
        with p.open("rb") as fh:
            head = fh.read(CONFIG_HEAD_BYTES)
    except OSError:
        return False
    return any(key in head for key in _HF_CONFIG_KEYS)


def _export_hint(p: Path) -> str:
    """The ``export-llm`` command that writes the ONNX files of the config at ``p`` (a file or the
    folder holding one) as typed, runnable, and the files to give instead: the exporter's own names in
    its default ``--out .`` (docs/cli.md, ``wsealloc export-llm``)."""
    from wsealloc.frontend.hf_config import default_name  # (the exporter's naming; imported only here)

    name = default_name(p)
    return (
        f"run `wsealloc export-llm {shlex.quote(str(p))}` first (it writes {name}-decode.onnx and {name}-prefill.onnx "
        f"here; --out DIR for another folder), then give {name}-decode.onnx"
    )


def _looks_like_text(head: bytes) -> bool:
    """True for printable ASCII starts: binary ONNX starts with field tags such as 0x08 (ir_version)."""
    if not head:
        return False
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
    return printable == len(head) and len(head) >= 16
