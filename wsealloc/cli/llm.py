"""``wsealloc export-llm``: a LLaMA-family model's decode step and prefill as weightless ONNX, written
from its Hugging Face ``config.json`` (no torch, no weights, no download), ready for ``solve``."""

from __future__ import annotations

from pathlib import Path

import click

from wsealloc.cli.options import debug_option
from wsealloc.errors import OutputError, UsageError
from wsealloc.frontend.hf_config import PROMPT, HfConfig, Written, default_name, export_llm, read_hf_config
from wsealloc.units import format_bytes


@click.command("export-llm")
@click.argument("config", metavar="CONFIG", type=click.Path(dir_okay=True, path_type=str))
@click.option(
    "--prompt", default=PROMPT, show_default=True, type=click.IntRange(1, 2**31 - 1), help="The prefill's prompt length (tokens)."
)
@click.option("--out", "out_dir", default=".", show_default=True, help="The folder to write into (it must exist).")
@click.option(
    "--name",
    default=None,
    help="File names NAME-decode.onnx and NAME-prefill.onnx [default: CONFIG's stem, or its folder's name for a config.json].",
)
@debug_option
def export_llm_command(config: str, prompt: int, out_dir: str, name: str | None, debug: bool) -> None:
    """Write the decode step and the prefill of the LLaMA-family model CONFIG describes (a Hugging Face
    config.json, or the folder holding one: llama, mistral, qwen2, qwen3 dense; mixtral, qwen3_moe,
    llama4 mixtures of experts, as ONNX Runtime's com.microsoft MoE node) as weightless ONNX in the
    zoo's KV-cache convention (models/README.md). Solve the decode step with --context and --batch."""
    name = default_name(config) if name is None else name
    if not name or Path(name).name != name or name in (".", ".."):
        raise UsageError(f"--name {name!r}: expected a plain file name stem, e.g. llama-3.1-70b (no folder: use --out)")
    if not Path(out_dir).is_dir():
        raise OutputError(f"--out {out_dir}: not a folder; create it first")
    cfg = read_hf_config(config)
    decode, prefill = export_llm(cfg, out_dir, name, prompt)
    click.echo(_describe(name, cfg))
    spec = cfg.spec()
    per_past = 2 * spec.layers * spec.q_width
    macs = f"active MatMul MACs (each token on {spec.top_k} of {spec.experts} experts)" if spec.experts else "MatMul MACs"
    click.echo(_line(decode, f"{macs} per sequence {spec.matmul_macs(1, 1):,} + {per_past:,}·S over a past of S tokens"))
    click.echo(_line(prefill, f"{macs} {spec.matmul_macs(prompt, prompt):,} for a {prompt}-token prompt"))
    click.echo(
        f"weights absent (weightless convention): {format_bytes(decode.weight_bytes)} each in {name}-decode.weights and "
        f"{name}-prefill.weights, never written"
    )
    if cfg.window is not None and cfg.window < prompt:
        click.echo(
            f"note: {cfg.window_field} {cfg.window} < prompt {prompt}: the graph attends to every key (the same MatMul MACs as "
            "transformers' eager attention); a rolling cache would hold only the window",
            err=True,
        )


def _describe(name: str, cfg: HfConfig) -> str:
    """One line: the model's shape, its parameters and its KV cache per token; for a mixture of experts
    the experts, top-k, which layers, the widths and the active parameters beside the total."""
    s = cfg.spec()
    extras = [
        label
        for label, on in (
            ("QKV biases", s.qkv_bias),
            ("O bias", s.o_bias),
            ("MLP biases", s.mlp_bias),
            ("q/k norms", s.qk_norm),
            ("tied embeddings", s.tied),
        )
        if on
    ]
    ffn = f"FFN {s.ffn}"
    params = f"{s.parameters():,} parameters"
    if s.experts:
        dense = s.layers - s.moe_count
        shared = f" + a shared expert of {s.shared_expert_ffn}" if s.shared_expert_ffn else ""
        ffn = (
            f"{s.experts} experts of {s.expert_ffn}{shared}, top-{s.top_k}{' renormalized' if s.renormalize else ''}, "
            f"on {s.moe_count} of {s.layers} layers" + (f" (dense FFN {s.ffn} on the other {dense})" if dense else "")
        )
        params = f"{s.parameters():,} parameters in all, {s.active_parameters():,} active per token"
    return (
        f"{name}: {cfg.architecture}, {s.layers} layers, hidden {s.hidden}, {s.heads} heads / {s.kv_heads} KV heads of "
        f"{s.head_dim}, {ffn}, vocab {s.vocab}, {s.dtype}{''.join(', ' + e for e in extras)}; "
        f"{params}; KV cache {format_bytes(s.kv_bytes_per_token())} per token"
    )


def _line(w: Written, macs: str) -> str:
    return f"wrote {w.path}: {w.nodes:,} nodes, {w.file_bytes:,} bytes; {macs}"
