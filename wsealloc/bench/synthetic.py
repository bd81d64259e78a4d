"""Synthetic models for stress suites, generated on demand (never downloaded).

``synthetic:chain:N`` is a chain of N MatMul+GELU kernels with widths cycling through 256, 512, 384,
256 over a 64-row activation; weights are external-data references to a file that is never written
(planning needs no weights), so even 20k kernels make a small file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from wsealloc.errors import UsageError

PREFIX = "synthetic:"
# Bumped whenever build_chain changes, so cached models from an older generator are not reused.
VERSION = 1


def build_chain(path: Path, kernels: int, seq: int = 64) -> None:
    """Write a chain of ``kernels`` fused MatMul layers to ``path``."""
    import onnx
    from onnx import TensorProto, helper

    widths = [256, 512, 384, 256]
    nodes, inits = [], []
    x, d = "x", widths[0]
    for i in range(kernels):
        d_out = widths[(i + 1) % len(widths)]
        w = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[d, d_out], data_location=TensorProto.EXTERNAL)
        for key, value in (("location", f"{path.stem}.weights"), ("offset", "0"), ("length", str(4 * d * d_out))):
            entry = w.external_data.add()
            entry.key, entry.value = key, value
        inits.append(w)
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Gelu", [f"m{i}"], [f"h{i}"], name=f"gelu{i}"))
        x, d = f"h{i}", d_out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, widths[0]])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [seq, d])],
        initializer=inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))


def resolve(spec: str, cache: Path | None = None) -> Path:
    """Path of a ``synthetic:KIND:N`` model, generated into ``cache`` (a temp dir by default) once.

    Concurrent workers may build the same model: each builds in its own temporary folder and renames
    the result into place atomically, so a reader never sees a half-written file.
    """
    parts = spec[len(PREFIX) :].split(":")
    if len(parts) != 2 or parts[0] != "chain" or not parts[1].isdigit() or int(parts[1]) < 1:
        raise UsageError(f"model {spec!r}: expected synthetic:chain:N with N >= 1 kernels")
    folder = cache or Path(tempfile.gettempdir()) / "wsealloc-synthetic"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"chain-{int(parts[1])}-v{VERSION}.onnx"
    if not path.exists():
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
            built = Path(tmp) / path.name
            build_chain(built, int(parts[1]))
            os.replace(built, path)
    return path
