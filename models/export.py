"""Regenerate the model zoo: real architectures exported with torch.onnx's dynamo exporter, stored
WITHOUT weight data (see models/README.md for the convention).

Needs the optional extra: ``pip install -e ".[zoo]"`` (torch, transformers, onnxscript). Nothing is
downloaded: configurations are built in code and models are instantiated on the meta device, so even
LLaMA-70B-shaped models export in seconds without materializing weights.

    python models/export.py                 # all models
    python models/export.py gpt2 llama-7b   # some
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALIGN = 4096


def _on_meta(config_cls: str, model_cls: str, **cfg: object) -> object:
    """A transformers model built from a config in code, on the meta device (no weights, no download)."""
    import torch
    import transformers

    config = getattr(transformers, config_cls)(**cfg)
    config._attn_implementation = "eager"  # explicit MatMul + Softmax attention, not a fused SDPA op
    config.use_cache = False
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(config)
    model.eval()
    return model


def _wrap(model: object, output: Callable[[object], object]) -> object:
    """A module whose forward maps the inner model's output through ``output`` (tensors only)."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> object:
            return output(self.inner(x))

    return Wrapped(model)  # type: ignore[arg-type]


def _causal_lm(config_cls: str, model_cls: str, seq: int, **cfg: object) -> tuple[object, tuple[object, ...]]:
    import torch

    model = _on_meta(config_cls, model_cls, **cfg)
    return _wrap(model, lambda out: out.logits), (torch.zeros((1, seq), dtype=torch.long, device="meta"),)  # type: ignore[attr-defined]


def _encoder(seq: int, **cfg: object) -> tuple[object, tuple[object, ...]]:
    import torch

    model = _on_meta("BertConfig", "BertModel", **cfg)
    outputs = lambda out: (out.last_hidden_state, out.pooler_output)  # noqa: E731
    return _wrap(model, outputs), (torch.zeros((1, seq), dtype=torch.long, device="meta"),)


def _vision(config_cls: str, model_cls: str, **cfg: object) -> tuple[object, tuple[object, ...]]:
    import torch

    model = _on_meta(config_cls, model_cls, **cfg)
    return _wrap(model, lambda out: out.logits), (torch.zeros((1, 3, 224, 224), dtype=torch.float32, device="meta"),)  # type: ignore[attr-defined]


LLAMA_7B = dict(
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    vocab_size=32000,
    max_position_embeddings=2048,
)
LLAMA_70B = dict(
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    vocab_size=32000,
    max_position_embeddings=2048,
)

MODELS: dict[str, Callable[[], tuple[object, tuple[object, ...]]]] = {
    "gpt2": lambda: _causal_lm("GPT2Config", "GPT2LMHeadModel", 1024, n_positions=1024),
    "gpt2-xl": lambda: _causal_lm("GPT2Config", "GPT2LMHeadModel", 1024, n_positions=1024, n_embd=1600, n_layer=48, n_head=25),
    "bert-base": lambda: _encoder(384),
    "bert-large": lambda: _encoder(384, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
    "resnet50": lambda: _vision("ResNetConfig", "ResNetForImageClassification", num_labels=1000),
    "vit-b16": lambda: _vision("ViTConfig", "ViTForImageClassification", num_labels=1000),
    "llama-7b": lambda: _causal_lm("LlamaConfig", "LlamaForCausalLM", 2048, **LLAMA_7B),
    "llama-70b": lambda: _causal_lm("LlamaConfig", "LlamaForCausalLM", 2048, **LLAMA_70B),
}


def strip_weights(model: object, location: str) -> None:
    """Replace every initializer's data by a reference into ``location`` (a file that is not shipped),
    laid out consecutively and aligned as a real external-data file would be."""
    import onnx_ir as ir

    offset = 0
    for name, value in model.graph.initializers.items():  # type: ignore[attr-defined]
        length = value.dtype.itemsize * _numel(value.shape)
        value.const_value = ir.ExternalTensor(location, offset, length, value.dtype, shape=value.shape, name=name)
        offset += -(-length // ALIGN) * ALIGN


def _numel(shape: object) -> int:
    n = 1
    for d in shape:  # type: ignore[attr-defined]
        n *= int(d)
    return n


def export(name: str, out_dir: Path) -> Path:
    """Export one zoo model to ``out_dir/name.onnx`` (weightless) and check it loads."""
    import onnx
    import onnx_ir as ir
    import torch

    start = time.perf_counter()
    module, args = MODELS[name]()
    module.eval()  # type: ignore[attr-defined]
    program = torch.onnx.export(module, args, dynamo=True, optimize=False, verbose=False)
    model = program.model
    strip_weights(model, f"{name}.weights")
    proto = ir.serde.serialize_model(model)
    for node in proto.graph.node:  # stack traces and name scopes: megabytes nobody reads
        del node.metadata_props[:]
        node.doc_string = ""
    path = out_dir / f"{name}.onnx"
    onnx.save(proto, str(path))
    check = onnx.load(str(path), load_external_data=False)
    # onnx.checker insists that external data files exist, and ours deliberately do not: check the
    # structure with shape inference instead (wsealloc's front end is the real consumer).
    onnx.shape_inference.infer_shapes(check, strict_mode=False)
    print(f"{name}: {len(check.graph.node)} nodes, {path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help=f"any of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    for name in args.models or list(MODELS):
        export(name, args.out)


if __name__ == "__main__":
    main()
