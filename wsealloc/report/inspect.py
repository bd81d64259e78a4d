"""``wsealloc inspect``: per-kernel work and memory, the model summary, and one kernel's op models.

JSON contract (``--json``), documented in docs/cli.md::

    {"summary": {"total_macs", "vector_ops", "weight_bytes", "kernels", "onnx_nodes", ...},
     "kernels": [{"name", "type", "onnx_nodes", "macs", "vector_ops", "weight_bytes",
                  "input_bytes", "output_bytes", "min_cores"}, ...]}
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from wsealloc.arch import Arch
from wsealloc.cost import CostOptions, TrainingWork, Work, grid_costs
from wsealloc.errors import InputShapeError
from wsealloc.opmodels import DATAFLOW_CODES, CostTable, KernelCosts, Reason
from wsealloc.units import format_bytes, format_count


def _macs(kc: KernelCosts) -> int:
    return int(kc.work.macs)


def _vec(kc: KernelCosts) -> int:
    return int(kc.work.vector_ops)


def kernel_rows(costs: CostTable) -> list[dict[str, Any]]:
    """One JSON-ready record per kernel."""
    rows: list[dict[str, Any]] = []
    for kc in costs.kernels:
        w: Work = kc.work
        rows.append(
            {
                "name": kc.kernel.name,
                "type": kc.kernel.kind.value,
                "onnx_nodes": list(kc.kernel.nodes),
                "macs": _macs(kc),
                "vector_ops": _vec(kc),
                "weight_bytes": int(w.weight_bytes),
                "input_bytes": int(w.in_bytes),
                "output_bytes": int(w.out_bytes),
                "min_cores": kc.min_cores,
            }
        )
        trained = _training_record(kc, costs)
        if trained is not None:
            rows[-1]["training"] = trained
    return rows


def _training_record(kc: KernelCosts, costs: CostTable) -> dict[str, Any] | None:
    """A training kernel's samples in flight, its recomputation segment and, on its fewest-core legal op
    model, its memory by part over its cores (None: inference, or no legal op model)."""
    if not isinstance(kc.work, TrainingWork) or not len(kc.frontier):
        return None
    row = int(kc.frontier.index[0])
    t = kc.table
    r, c = int(t.r[row]), int(t.c[row])
    dataflow = DATAFLOW_CODES[int(t.dataflow[row])]
    p = grid_costs(kc.work, costs.arch, costs.options, dataflow, np.array([r]), np.array([c])).sram_parts()
    named = {"weights": p.weights, "gradients": p.grads, "optimizer": p.optimizer, "stash": p.stash, "buffers": p.buffers}
    w = kc.work
    return {
        "in_flight": w.in_flight,
        # its recomputation segment: which, the stash bytes per sample its segment regenerates (the rest
        # is the checkpoint), and the samples those are kept after a replay (docs/cost-model.md, section 11)
        "segment": {
            "index": w.segment,
            "regenerated_bytes": w.segment_input_bytes,
            "checkpoint_bytes": w.stash_bytes - w.segment_input_bytes,
            "replay_window": w.replay_window,
            "replays": w.replays,
        },
        "at_min_cores": {"grid": [r, c], "dataflow": dataflow.value},
        "memory_bytes": {name: int(v[0]) * r * c if v is not None else 0 for name, v in named.items()},
    }


def summary(costs: CostTable) -> dict[str, Any]:
    """Model-level totals and whether the model fits one wafer."""
    arch = costs.arch
    ops = costs.kgraph.ops
    weight = sum(int(kc.work.weight_bytes) for kc in costs.kernels)
    min_cores = sum(kc.min_cores for kc in costs.kernels)
    feasible = all(len(kc.frontier) for kc in costs.kernels)
    return {
        "model": ops.source,
        "arch": arch.name,
        "onnx_nodes": ops.onnx_nodes,
        "compute_nodes": len(ops.nodes),
        "dropped_nodes": ops.dropped_nodes,
        "kernels": len(costs.kernels),
        "distinct_kernels": len({kc.signature for kc in costs.kernels}),
        "total_macs": sum(_macs(kc) for kc in costs.kernels),
        "vector_ops": sum(_vec(kc) for kc in costs.kernels),
        "weight_bytes": weight,
        "wafer_sram_bytes": arch.wafer_sram_bytes,
        "min_cores": min_cores,
        "total_cores": arch.total_cores,
        "fits_one_wafer": bool(feasible and min_cores <= arch.total_cores),
        "cost_model": costs.options.model.value,
        "fused": costs.kgraph.fused,
        "dims": dict(ops.dims),
        "input_shapes": {name: list(shape) for name, shape in ops.input_shapes.items()},
        "control_flow": list(ops.control_flow),
    }


def inspect_json(costs: CostTable) -> dict[str, Any]:
    """The ``--json`` document."""
    return {"summary": summary(costs), "kernels": kernel_rows(costs)}


def print_inspect(costs: CostTable, console: Console, limit: int | None = None) -> None:
    """Render the per-kernel table and the summary."""
    table = Table(title=escape(f"Kernels of {costs.kgraph.ops.source}"), show_lines=False)
    for col, just in (
        ("kernel", "left"),
        ("type", "left"),
        ("nodes", "right"),
        ("MACs", "right"),
        ("vector ops", "right"),
        ("weights", "right"),
        ("act in", "right"),
        ("act out", "right"),
        ("min cores", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    rows = kernel_rows(costs)
    training = costs.options.train is not None
    if training:  # the samples a kernel keeps, and its memory by part on its fewest cores
        table.add_column("in flight", justify="right")
        table.add_column("segment", justify="right")
        table.add_column("weights/grads/optimizer/stash at min cores", justify="right")
    shown = rows if limit is None else rows[:limit]
    for row in shown:
        extra: list[str] = []
        if training:
            t = row.get("training")
            extra = (
                [
                    str(t["in_flight"]),
                    str(t["segment"]["index"]),
                    "/".join(format_bytes(v) for v in list(t["memory_bytes"].values())[:4]),
                ]
                if t is not None
                else ["-", "-", "-"]
            )
        table.add_row(
            escape(row["name"]),
            row["type"],
            str(len(row["onnx_nodes"])),
            format_count(row["macs"]),
            format_count(row["vector_ops"]),
            format_bytes(row["weight_bytes"]),
            format_bytes(row["input_bytes"]),
            format_bytes(row["output_bytes"]),
            str(row["min_cores"]) if row["min_cores"] else "[red]none[/red]",
            *extra,
        )
    console.print(table)
    if limit is not None and len(rows) > limit:
        console.print(f"... {len(rows) - limit} more kernels (use --all or --json)")
    s = summary(costs)
    fits = "[green]yes[/green]" if s["fits_one_wafer"] else "[red]no[/red]"
    unfit = sum(1 for kc in costs.kernels if not len(kc.frontier))
    # a kernel without a legal grid has no minimum: summing it as 0 read "min cores 0 ... fits: no"
    cores = f"min cores {s['min_cores']:,} of {s['total_cores']:,}"
    if unfit:
        others = f", the others need {s['min_cores']:,} of {s['total_cores']:,} cores" if unfit < s["kernels"] else ""
        cores = f"[red]{unfit} of {s['kernels']} kernels fit no grid[/red] (min cores: none){others}"
    console.print(
        f"ONNX nodes {s['onnx_nodes']} ({s['dropped_nodes']} shape-only/constant dropped), kernels {s['kernels']} "
        f"({s['distinct_kernels']} distinct), total MACs {format_count(s['total_macs'])}, vector ops "
        f"{format_count(s['vector_ops'])}\nweights {format_bytes(s['weight_bytes'])} vs wafer SRAM "
        f"{format_bytes(s['wafer_sram_bytes'])}; {cores}; fits one wafer: {fits}"
    )
    for note in s["control_flow"]:
        console.print(f"control flow: {note}", markup=False, highlight=False, soft_wrap=True)


def fix_command(model: str, err: InputShapeError) -> str:
    """The command that fixes a model's open input sizes: ``inspect`` with the ``--input-shape`` options
    the error carries (``N`` where the user must choose a size)."""
    return " ".join(["wsealloc", "inspect", shlex.quote(model), *(f"--input-shape {shlex.quote(o)}" for o in err.options)])


def inputs_json(model: str, err: InputShapeError) -> dict[str, Any]:
    """``inspect --json`` of a model whose input sizes are open: the inputs, the error and the fix."""
    return {
        "error": str(err),
        "inputs": [{"name": name, "shape": shape} for name, shape in err.inputs],
        "fix": fix_command(model, err),
    }


def print_inputs(model: str, err: InputShapeError, console: Console) -> None:
    """List every data input with its shape as the file has it, and the exact command that fixes it."""
    console.print(f"Inputs of {model} (? = a size the model leaves open):", markup=False, highlight=False, soft_wrap=True)
    table = Table()
    table.add_column("input")
    table.add_column("shape")
    for name, shape in err.inputs:
        table.add_row(escape(name), escape(shape))  # (text, not markup: "[batch, 64]" read as a tag printed nothing)
    console.print(table)
    console.print("Give every open size (N: the size you run with; named dims can also be bound with --dim NAME=N):")
    console.print(fix_command(model, err), markup=False, highlight=False, soft_wrap=True)


def training_parts(kc: KernelCosts, arch: Arch, options: CostOptions) -> list[dict[str, int]] | None:
    """A training kernel's SRAM per core by part for every op model of its table (None: inference)."""
    if not isinstance(kc.work, TrainingWork):
        return None
    t = kc.table
    out: list[dict[str, int]] = [{} for _ in range(len(t))]
    for code in np.unique(t.dataflow).tolist():
        rows = np.flatnonzero(t.dataflow == code)
        p = grid_costs(kc.work, arch, options, DATAFLOW_CODES[code], t.r[rows], t.c[rows]).sram_parts()
        named = {"weights": p.weights, "gradients": p.grads, "optimizer": p.optimizer, "stash": p.stash, "buffers": p.buffers}
        for j, i in enumerate(rows.tolist()):
            out[i] = {name: int(v[j]) if v is not None else 0 for name, v in named.items()}
    return out


def op_model_rows(
    kc: KernelCosts, arch_usable: int, arch: Arch | None = None, options: CostOptions | None = None
) -> list[dict[str, Any]]:
    """Every op model of one kernel with its reason and numbers (a training kernel, given ``arch`` and
    ``options``: also its SRAM per core by part, ``sram_parts``)."""
    t = kc.table
    parts = training_parts(kc, arch, options) if arch is not None and options is not None else None
    out: list[dict[str, Any]] = []
    for i in range(len(t)):
        reason = Reason(int(t.reason[i]))
        detail = ""
        if reason is Reason.SRAM_OVER:
            detail = f"over by {int(t.sram[i] - arch_usable)} B"
        elif reason is Reason.PADDING_WASTE:
            detail = f"waste {t.waste[i]:.0%}"
        out.append(
            {
                "dataflow": DATAFLOW_CODES[int(t.dataflow[i])].value,
                "grid": [int(t.r[i]), int(t.c[i])],
                "cores": int(t.r[i] * t.c[i]),
                "latency_cycles": int(t.latency[i]),
                "compute_cycles": int(t.compute[i]),
                "noc_cycles": int(t.noc[i]),
                "sram_bytes_per_core": int(t.sram[i]),
                "waste": round(float(t.waste[i]), 4),
                "legal": reason is Reason.LEGAL,
                "reason": reason.label,
                "detail": detail,
            }
        )
        if parts is not None:
            out[-1]["sram_parts"] = parts[i]
    return out


def print_op_models(
    kc: KernelCosts, usable: int, console: Console, limit: int = 40, arch: Arch | None = None, options: CostOptions | None = None
) -> dict[str, int]:
    """Print the frontier and a sample of rejected op models, return counts by reason (a training
    kernel: with its SRAM by part)."""
    rows = op_model_rows(kc, usable, arch, options)
    counts = Counter(r["reason"] for r in rows)
    frontier = set(int(i) for i in kc.frontier.index)
    table = Table(title=escape(f"Op models of {kc.kernel.name} ({kc.kernel.kind.value}); * = on the Pareto frontier"))
    training = bool(rows) and "sram_parts" in rows[0]
    columns = ["", "dataflow", "grid", "cores", "latency", "compute", "noc", "SRAM/core"]
    columns += ["weights/grads/optimizer/stash/buffers"] if training else []
    for col in (*columns, "status"):
        table.add_column(col)
    legal = [int(i) for i in kc.frontier.index]  # cores ascending
    rejected = [i for i, r in enumerate(rows) if not r["legal"]]
    step = max(1, len(rejected) // max(limit // 2, 1))
    for i in legal[:limit] + rejected[::step][: limit // 2]:
        r = rows[i]
        status = "legal" if r["legal"] else f"[red]{r['reason']}[/red] {r['detail']}"
        table.add_row(
            "*" if i in frontier else "",
            r["dataflow"],
            f"{r['grid'][0]}x{r['grid'][1]}",
            str(r["cores"]),
            str(r["latency_cycles"]),
            str(r["compute_cycles"]),
            str(r["noc_cycles"]),
            str(r["sram_bytes_per_core"]),
            *(["/".join(str(v) for v in r["sram_parts"].values())] if training else []),
            status,
        )
    console.print(table)
    console.print("counts by reason: " + ", ".join(f"{k}: {v}" for k, v in counts.most_common()))
    return dict(counts)
