"""Floorplan picture of a placed plan: die grid, kernel rectangles (or the regions kernels share in
time, labelled with how many they hold) coloured by stage time relative to the bottleneck, the
bottleneck outlined, the heaviest flows as arrows (SVG or PNG via matplotlib). A plan over several
wafers is one picture per wafer (its units' ``stage``; positions are per wafer)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from wsealloc.errors import OutputError
from wsealloc.plan.io import write_atomic
from wsealloc.plan.schema import Plan

if TYPE_CHECKING:  # matplotlib is imported only when a picture is drawn
    from matplotlib.figure import Figure


def _figure(plan: Plan, flows: list[tuple[str, str, float]], heaviest: int, wafer: int | None = None) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    arch = plan.arch
    spec = arch.spec["wafer"]
    die_r, die_c = spec["die_cores"]["rows"], spec["die_cores"]["cols"]
    scale = 10.0 / max(arch.rows, arch.cols)
    fig, ax = plt.subplots(figsize=(arch.cols * scale + 2.2, arch.rows * scale + 0.8))
    ax.set_xlim(0, arch.cols)
    ax.set_ylim(arch.rows, 0)
    ax.set_aspect("equal")
    ax.add_patch(Rectangle((0, 0), arch.cols, arch.rows, facecolor="#f4f4f4", edgecolor="none"))
    for x in range(0, arch.cols + 1, die_c):
        ax.axvline(x, color="#555555", lw=0.4, alpha=0.5, zorder=4)
    for y in range(0, arch.rows + 1, die_r):
        ax.axhline(y, color="#555555", lw=0.4, alpha=0.5, zorder=4)
    cmap = plt.get_cmap("viridis")
    bottleneck = max(plan.objective.bottleneck_cycles, 1)
    centre: dict[str, tuple[float, float]] = {}
    # the rectangles: each kernel's, or each region's (its kernels share it in time)
    units = [
        (rg.name, rg.placement, rg.grid, rg.latency_cycles + rg.comm_cycles, len(rg.members), rg.stage) for rg in plan.regions
    ] or [(k.name, k.placement, k.grid, k.latency_cycles + k.comm_cycles, 1, k.stage) for k in plan.kernels]
    # (each unit's stage is its wafer: only ``wafer``'s are drawn, and so only the flows between them)
    units = [u for u in units if wafer is None or u[5] == wafer]
    for name, placement, grid, stage, members, _ in units:
        if placement is None:
            continue
        row, col = placement
        r, c = grid
        share = stage / bottleneck
        is_bottleneck = name == plan.objective.bottleneck_kernel
        ax.add_patch(
            Rectangle(
                (col, row),
                c,
                r,
                facecolor=cmap(share),
                edgecolor="red" if is_bottleneck else "white",
                lw=2.0 if is_bottleneck else 0.3,
                zorder=2,
            )
        )
        centre[name] = (col + c / 2, row + r / 2)
        if members > 1:
            ax.text(col + c / 2, row + r / 2, f"{members} kernels", ha="center", va="center", fontsize=5, color="black", zorder=5)
    for src, dst, _ in sorted(flows, key=lambda f: -f[2])[:heaviest]:
        if src in centre and dst in centre:
            ax.add_patch(
                FancyArrowPatch(
                    centre[src], centre[dst], arrowstyle="-|>", mutation_scale=6, lw=0.8, color="#d62728", alpha=0.7, zorder=3
                )
            )
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, 1))
    fig.colorbar(sm, ax=ax, fraction=0.03, pad=0.02, label="stage time / bottleneck")
    obj = plan.objective
    requests = plan.request.requests if plan.request is not None else 1
    per = "one pass" if requests == 1 else f"a token per request ({requests} in flight)"
    what = f"{per} {obj.value:,} cycles, slowest" if obj.kind.value == "latency" else "bottleneck"
    cores = obj.cores_used if wafer is None else plan.stages[wafer].cores_used
    # (the plan's figures are over every wafer: a wafer's picture also says its own slowest stage)
    of = (
        ""
        if wafer is None
        else (f", wafer {wafer} (wafers 0-{len(plan.stages) - 1}; its slowest {plan.stages[wafer].bottleneck_cycles:,} cycles)")
    )
    ax.set_title(
        f"{Path(plan.model.path).name} on {arch.name}{of}: {what} {obj.bottleneck_cycles:,} cycles "
        f"({obj.bottleneck_kernel}), {cores:,}/{arch.total_cores:,} cores",
        fontsize=8,
    )
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    return fig


def render_floorplan(
    plan: Plan, flows: list[tuple[str, str, float]], fmt: str = "svg", heaviest: int = 12, wafer: int | None = None
) -> bytes:
    """The floorplan as SVG or PNG bytes (``wafer``: that wafer's units alone; None: every unit)."""
    import matplotlib.pyplot as plt

    fig = _figure(plan, flows, heaviest, wafer)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=150)
    plt.close(fig)
    return buf.getvalue()


def floorplan_paths(path: str | Path, wafers: int) -> list[Path]:
    """The files a floorplan of ``wafers`` wafers is written to: ``path`` for one, else one per wafer,
    ``STEM-waferI.SUFFIX`` (``t2.svg``: ``t2-wafer0.svg``, ``t2-wafer1.svg``; I the plan's stage index)."""
    p = Path(path)
    return [p] if wafers <= 1 else [p.with_name(f"{p.stem}-wafer{i}{p.suffix}") for i in range(wafers)]


def write_floorplan(plan: Plan, flows: list[tuple[str, str, float]], path: str | Path) -> list[Path]:
    """Write the floorplan to ``path`` (.svg or .png), atomically; a plan over several wafers to one file
    per wafer (:func:`floorplan_paths`). Returns the files written."""
    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise OutputError(f"{p}: floorplan must be .svg or .png")
    if not any(k.placement for k in plan.kernels):
        raise OutputError(f"{p}: the plan has no placement (drop --no-place to draw a floorplan)")
    paths = floorplan_paths(p, len(plan.stages))
    for i, out in enumerate(paths):
        data = render_floorplan(plan, flows, fmt, wafer=i if len(paths) > 1 else None)
        write_atomic(out, data.decode("utf-8") if fmt == "svg" else data)
    return paths
