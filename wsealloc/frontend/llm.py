"""The dims of an LLM export's KV cache, for ``--context S`` (the past length) and ``--batch B``
(requests decoded together): which named input dims they bind.

A decode ("with past") export has cache inputs ``[batch, kv_heads, past_length, head_dim]`` (names
like ``past_key_values.0.key``, ``past.0.value``, ``cache_k``): their dim 0 is the batch and dim -2
the past length; the token input's dim 0 (``input_ids``) is the batch too. Only *named* (symbolic)
dims are bound; a model whose cache dims are fixed, or that has no cache input (a prefill export),
is refused with the option that applies instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import onnx

from wsealloc.errors import UsageError
from wsealloc.frontend.load import load_model
from wsealloc.graph.state import CACHE_NAME

CACHE_INPUT = re.compile(r"(?i)(past|cache)")


def _dims(vi: onnx.ValueInfoProto) -> list[str | int | None]:
    out: list[str | int | None] = []
    for d in vi.type.tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        out.append(d.dim_param if kind == "dim_param" else d.dim_value if kind == "dim_value" else None)
    return out


def _data_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def cache_inputs(inputs: Iterable[onnx.ValueInfoProto]) -> list[onnx.ValueInfoProto]:
    """The KV-cache inputs among a model's data ``inputs``: named like one, of rank 3 or more."""
    return [vi for vi in inputs if CACHE_INPUT.search(vi.name) and len(_dims(vi)) >= 3]


def past_dims(inputs: Iterable[onnx.ValueInfoProto]) -> set[str]:
    """The named past lengths (dim -2) of the KV-cache inputs among ``inputs``: what ``--context`` binds."""
    return {d for vi in cache_inputs(inputs) if isinstance(d := _dims(vi)[-2], str) and d}


def export_phase(model: onnx.ModelProto) -> str | None:
    """What an LLM export's KV cache says it is: ``"decode"`` (cache inputs: a step with past),
    ``"prefill"`` (no cache input, outputs named like a cache, ``present.*``, as ``graph.state`` finds a
    prefill's: the prompt writes it), None (no cache)."""
    if cache_inputs(_data_inputs(model)):
        return "decode"
    if any(CACHE_NAME.search(vi.name) and len(_dims(vi)) >= 3 for vi in model.graph.output):
        return "prefill"
    return None


def cache_dims(model: onnx.ModelProto, path: str | Path, context: int | None, batch: int | None) -> dict[str, tuple[int, str]]:
    """The ``--dim`` bindings that ``--context`` and ``--batch`` stand for in ``model`` (read from
    ``path`` by ``frontend.load.load_model``, which names the file in messages): each dim's value and the
    option that bound it (``--context 4096``), for messages about the sizes."""
    if context is None and batch is None:
        return {}
    implicit = batch is None  # --context alone: one request (the cache's batch dim is bound to 1 too)
    batch_option = f"--context {context}" if batch is None else f"--batch {batch}"
    batch = 1 if batch is None else batch
    inputs = _data_inputs(model)
    caches = cache_inputs(inputs)
    bound: dict[str, tuple[int, str]] = {}
    if context is not None:
        names = past_dims(caches)
        if not names:
            raise UsageError(
                f"--context {context}: {path} has no KV-cache input with a named past length "
                "(a decode export's past_key_values.*: [batch, heads, past, head_dim]); "
                "for a prefill export give the prompt length with --input-shape or --dim"
            )
        bound.update({name: (context, f"--context {context}") for name in names})
    if batch is not None:
        firsts = [_dims(vi)[0] for vi in caches] + [
            _dims(vi)[0] for vi in inputs if not CACHE_INPUT.search(vi.name) and _dims(vi)
        ]
        names = {d for d in firsts if isinstance(d, str) and d}
        if not names and not implicit:
            raise UsageError(
                f"--batch {batch}: {path} has no input whose batch dim (dim 0) is named; "
                "give the batch with --input-shape NAME=BxSEQ"
            )
        bound.update({name: (batch, batch_option) for name in names})
    return bound


def prompt_length(path: str | Path) -> int | None:
    """The prompt a prefill export runs: its token input's (``input_ids``: the first integer input of
    rank 2, ``[1, T]``) fixed length T; None when it has none, or a named one. The file is read by
    ``load_model`` (a missing, corrupt or non-ONNX file is its one-line error)."""
    model = load_model(path)
    for vi in _data_inputs(model):
        kind = vi.type.tensor_type.elem_type
        if kind not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            continue
        dims = _dims(vi)
        if len(dims) == 2:
            return dims[1] if isinstance(dims[1], int) and dims[1] > 0 else None
    return None
