"""Synthetic models for stress suites, generated on demand with ``onnx.helper`` (never downloaded).

- ``synthetic:chain:N``: a chain of N MatMul+GELU kernels with widths cycling through 256, 512, 384,
  256 over a 64-row activation.
- ``synthetic:transformer:L``: a GPT-style decoder of L layers (d_model 128, 4 heads, sequence 64,
  MLP 4x): per layer LayerNorm, QKV, attention scores, softmax, context, projection + residual,
  LayerNorm, two MLP matmuls + residual, i.e. 9 kernels per layer (residual adds fuse as epilogues)
  plus embedding, final norm and LM head (2,222 layers: 20,001 kernels).

Weights are external-data references to a file that is never written (planning needs no weights), so
even 20k kernels make a small file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wsealloc.errors import UsageError

PREFIX = "synthetic:"
# Bumped whenever a builder changes, so cached models from an older generator are not reused.
VERSION = 2


def _weight(path: Path, name: str, dims: list[int]) -> Any:
    """A float initializer whose data lives in an external file that is never written."""
    from onnx import TensorProto

    w = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    length = 4
    for d in dims:
        length *= d
    for key, value in (("location", f"{path.stem}.weights"), ("offset", "0"), ("length", str(length))):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    return w


def build_chain(path: Path, kernels: int, seq: int = 64) -> None:
    """Write a chain of ``kernels`` fused MatMul layers to ``path``."""
    import onnx
    from onnx import TensorProto, helper

    widths = [256, 512, 384, 256]
    nodes, inits = [], []
    x, d = "x", widths[0]
    for i in range(kernels):
        d_out = widths[(i + 1) % len(widths)]
        inits.append(_weight(path, f"w{i}", [d, d_out]))
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


def build_transformer(path: Path, layers: int, d: int = 128, heads: int = 4, seq: int = 64, vocab: int = 512) -> None:
    """Write a GPT-style decoder of ``layers`` layers to ``path`` (see the module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hd = d // heads
    nodes: list[Any] = []
    inits: list[Any] = [_weight(path, "wte", [vocab, d]), _weight(path, "lm_head", [d, vocab])]
    import numpy as np

    inits += [
        numpy_helper.from_array(np.array([seq, heads, hd], dtype=np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([seq, d], dtype=np.int64), "merge_shape"),
        numpy_helper.from_array(np.array(1.0 / hd**0.5, dtype=np.float32), "scale"),
    ]
    node = helper.make_node
    nodes.append(node("Gather", ["wte", "ids"], ["h0"], name="embed", axis=0))
    x = "h0"
    for i in range(layers):
        p = f"l{i}"
        for name, dims in (
            ("ln1.g", [d]),
            ("ln1.b", [d]),
            ("wqkv", [d, 3 * d]),
            ("wo", [d, d]),
            ("ln2.g", [d]),
            ("ln2.b", [d]),
            ("w1", [d, 4 * d]),
            ("w2", [4 * d, d]),
        ):
            inits.append(_weight(path, f"{p}.{name}", dims))
        nodes += [
            node("LayerNormalization", [x, f"{p}.ln1.g", f"{p}.ln1.b"], [f"{p}.a"], name=f"{p}.ln1", axis=-1),
            node("MatMul", [f"{p}.a", f"{p}.wqkv"], [f"{p}.qkv"], name=f"{p}.qkv"),
            node("Split", [f"{p}.qkv"], [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split", axis=-1, num_outputs=3),
        ]
        for t, perm in (("q", [1, 0, 2]), ("k", [1, 2, 0]), ("v", [1, 0, 2])):
            nodes += [
                node("Reshape", [f"{p}.{t}", "heads_shape"], [f"{p}.{t}4"], name=f"{p}.{t}_heads"),
                node("Transpose", [f"{p}.{t}4"], [f"{p}.{t}h"], name=f"{p}.{t}_perm", perm=perm),
            ]
        nodes += [
            node("MatMul", [f"{p}.qh", f"{p}.kh"], [f"{p}.s0"], name=f"{p}.scores"),
            node("Mul", [f"{p}.s0", "scale"], [f"{p}.s1"], name=f"{p}.scale"),
            node("Softmax", [f"{p}.s1"], [f"{p}.pr"], name=f"{p}.softmax", axis=-1),
            node("MatMul", [f"{p}.pr", f"{p}.vh"], [f"{p}.ctx"], name=f"{p}.context"),
            node("Transpose", [f"{p}.ctx"], [f"{p}.ctx_t"], name=f"{p}.ctx_perm", perm=[1, 0, 2]),
            node("Reshape", [f"{p}.ctx_t", "merge_shape"], [f"{p}.ctx2"], name=f"{p}.merge"),
            node("MatMul", [f"{p}.ctx2", f"{p}.wo"], [f"{p}.o"], name=f"{p}.proj"),
            node("Add", [x, f"{p}.o"], [f"{p}.r1"], name=f"{p}.residual1"),
            node("LayerNormalization", [f"{p}.r1", f"{p}.ln2.g", f"{p}.ln2.b"], [f"{p}.m"], name=f"{p}.ln2", axis=-1),
            node("MatMul", [f"{p}.m", f"{p}.w1"], [f"{p}.f0"], name=f"{p}.fc1"),
            node("Gelu", [f"{p}.f0"], [f"{p}.f1"], name=f"{p}.gelu"),
            node("MatMul", [f"{p}.f1", f"{p}.w2"], [f"{p}.g"], name=f"{p}.fc2"),
            node("Add", [f"{p}.r1", f"{p}.g"], [f"{p}.out"], name=f"{p}.residual2"),
        ]
        x = f"{p}.out"
    inits += [_weight(path, "lnf.g", [d]), _weight(path, "lnf.b", [d])]
    nodes += [
        node("LayerNormalization", [x, "lnf.g", "lnf.b"], ["hf"], name="ln_f", axis=-1),
        node("MatMul", ["hf", "lm_head"], ["logits"], name="lm_head"),
    ]
    graph = helper.make_graph(
        nodes,
        "transformer",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [seq, vocab])],
        initializer=inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))


BUILDERS: dict[str, Callable[[Path, int], None]] = {"chain": build_chain, "transformer": build_transformer}


def parse_spec(spec: str) -> tuple[str, int]:
    """``synthetic:KIND:N`` into (KIND, N); a bad spec raises a one-line error."""
    parts = spec[len(PREFIX) :].split(":") if spec.startswith(PREFIX) else []
    if len(parts) != 2 or parts[0] not in BUILDERS or not parts[1].isdigit() or int(parts[1]) < 1:
        raise UsageError(
            f"model {spec!r}: expected synthetic:chain:N (N kernels) or synthetic:transformer:L (L layers), N, L >= 1"
        )
    return parts[0], int(parts[1])


def resolve(spec: str, cache: Path | None = None) -> Path:
    """Path of a ``synthetic:KIND:N`` model, generated into ``cache`` (a temp dir by default) once.

    Concurrent workers may build the same model: each builds in its own temporary folder and renames
    the result into place atomically, so a reader never sees a half-written file.
    """
    kind, count = parse_spec(spec)
    folder = cache or Path(tempfile.gettempdir()) / "wsealloc-synthetic"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{count}-v{VERSION}.onnx"
    if not path.exists():
        with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
            built = Path(tmp) / path.name
            BUILDERS[kind](built, count)
            os.replace(built, path)
    return path
