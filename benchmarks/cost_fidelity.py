"""Cost-model fidelity: wsealloc's standard model beside the vendor's conv model (ISPD 2020).

The ISPD-2020 contest's conv formula is Cerebras' own published model of a conv kernel on its
fabric. For every Conv of a model (kernels with equal work share a row), at equal core counts, this
prints the cycles each model predicts and their ratio (contest / standard):

* the core counts: the grid the standard model's optimal allocation gives the kernel at the
  allocation bound (``bound``: the fewest-core op model within the bound, which is what the exact
  bisection allocates), and the standard model's fastest legal op model within each ``--budgets``
  count;
* on that same grid r x c, the contest's conv: the least-cycles execution arguments whose
  rectangle h'w'(c'+1) x 3k' fits r x c (upright or turned) within the memory limit (usable SRAM
  per core / dtype bytes words), as wsealloc's ``--cost-model ispd2020`` computes it
  (``wsealloc/cost/ispd_conv.py``; 1 contest time unit = 1 MAC of a tile, cycles = units / MACs
  per cycle, plus the fused epilogue the standard model also charges).

A second table takes both apart at the bound grid (docs/cost-model.md, section 8 explains each
factor). Deterministic (no solver runs: the bound is the exact bisection). Usage::

    python benchmarks/cost_fidelity.py [--model models/resnet50.onnx] [--arch wse2] [--budgets 1024 4096 65536]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402

from wsealloc.api import build_problem  # noqa: E402
from wsealloc.arch import Arch, load_arch  # noqa: E402
from wsealloc.cost import CostModelName, CostOptions, Dataflow, IspdConvWork, KernelWork, TrainingWork, grid_costs  # noqa: E402
from wsealloc.cost.ispd_conv import Choice, Fit, Machine, best_placed, choice_of  # noqa: E402
from wsealloc.cost.model import Recompute, TrainingOptions  # noqa: E402
from wsealloc.frontend.sources import OnnxSource  # noqa: E402
from wsealloc.opmodels import DATAFLOW_CODES, CostTable, KernelCosts  # noqa: E402
from wsealloc.pipeline import build_costs  # noqa: E402
from wsealloc.solvers.bisect import optimal_bottleneck  # noqa: E402

TRAIN_OPTIONS = CostOptions(train=TrainingOptions(recompute=Recompute.NONE))  # --train, the stash kept


@dataclass(frozen=True)
class Grid:
    """The standard model's op model on a grid, and the contest's conv on the same grid."""

    r: int
    c: int
    dataflow: Dataflow
    std: int  # standard latency, cycles
    std_mac: int  # compute cycles of the MACs alone
    std_vector: int  # compute cycles of the fused epilogue (BatchNorm, ReLU, residual Add)
    std_noc: int
    std_fill: int
    formula: Choice  # the contest's conv formula alone (arguments minimizing it)
    model: Choice  # what --cost-model ispd2020 charges: formula + the epilogue on the output tiles
    std_train: int = 0  # the standard model's training kernel on the grid (forward, backward, update; --train)

    @property
    def contest_cycles(self) -> int | None:
        """The formula's cycles, None when no arguments fit the grid within the memory limit."""
        return int(self.formula.cycles[0]) if int(self.formula.fit[0]) == Fit.FITS else None

    @property
    def ratio(self) -> float | None:
        """Contest formula / standard."""
        cyc = self.contest_cycles
        return None if cyc is None else cyc / self.std

    @property
    def train_ratio(self) -> float | None:
        """Contest formula / the standard model's training kernel: both forward, backward and update."""
        cyc = self.contest_cycles
        return None if cyc is None or not self.std_train else cyc / self.std_train


def grid_of(kc: KernelCosts, costs: CostTable, isp: IspdConvWork, row: int, train: TrainingWork | None = None) -> Grid:
    """The standard op model in row ``row`` of the kernel's table, and the contest conv on its grid
    (``train``: the same kernel's standard training work, costed on that grid too)."""
    t = kc.table
    r, c = int(t.r[row]), int(t.c[row])
    rr, cc = np.array([r]), np.array([c])
    df = DATAFLOW_CODES[int(t.dataflow[row])]
    g = grid_costs(kc.work, costs.arch, costs.options, df, rr, cc)
    bare = grid_costs(replace(kc.work, vector_ops=0), costs.arch, costs.options, df, rr, cc)
    fill = costs.arch.noc.hop_latency_cycles * (r + c)
    machine = Machine.of(costs.arch)
    formula = best_placed(isp.conv, machine, rr, cc, batch=isp.batch, halo=(isp.halo_h, isp.halo_w))
    mac = int(bare.compute_cycles[0])
    trained = 0
    if train is not None:
        trained = int(grid_costs(train, costs.arch, TRAIN_OPTIONS, Dataflow.TRAIN, rr, cc).latency[0])
    return Grid(
        r, c, df, int(g.latency[0]), mac, int(g.compute_cycles[0]) - mac, int(g.noc_cycles[0]), fill, formula,
        choice_of(isp, costs.arch, rr, cc), trained,
    )  # fmt: skip


def fastest_within(kc: KernelCosts, cores: int) -> int | None:
    """Table row of the fastest legal standard op model with at most ``cores`` cores."""
    ok = np.flatnonzero(kc.frontier.cores <= cores)
    return int(kc.frontier.index[ok[-1]]) if ok.size else None


def at_bound(kc: KernelCosts, bound: int) -> int:
    """Table row of the fewest-core legal standard op model within ``bound`` cycles."""
    return int(kc.frontier.index[np.flatnonzero(kc.frontier.latency <= bound)[0]])


def shape_label(isp: IspdConvWork) -> str:
    """'56x56 64>256 1x1 /2' (image, features, filter, stride)."""
    cv = isp.conv
    stride = f" /{cv.T}" if cv.T == cv.U else f" /{cv.T}x{cv.U}"
    return f"{cv.H}x{cv.W} {cv.C}>{cv.K} {cv.R}x{cv.S}{stride if cv.T * cv.U > 1 else ''}"


def members_label(names: list[str]) -> str:
    """'conv2d_6, _9, _12 (3)': the kernels sharing a row, node_ prefixes dropped."""
    short = [n.removeprefix("node_") for n in names]
    head = short[0] + "".join(f", _{s.rsplit('_', 1)[-1]}" if "_" in s else f", {s}" for s in short[1:4])
    return head + (", ..." if len(short) > 4 else "") + (f" ({len(short)})" if len(short) > 1 else "")


def contest_macs(isp: IspdConvWork) -> float:
    """MACs of one sample in the contest's terms: H W C K R S / (T U) per image."""
    cv = isp.conv
    return isp.batch * cv.H * cv.W * cv.C * cv.K * cv.R * cv.S / (cv.T * cv.U)


def fmt_ratio(x: float | None) -> str:
    return "no fit" if x is None else f"{x:.2f}"


def quant(g: Grid, isp: IspdConvWork) -> float:
    """The formula's rounding: time x tiles doing MACs (h'w'c'k') / MACs."""
    ch = g.formula
    tiles = int(ch.h[0]) * int(ch.w[0]) * int(ch.c[0]) * int(ch.k[0])
    return int(ch.units[0]) * isp.batch * tiles / contest_macs(isp)


def decomposition(isp: IspdConvWork, g: Grid, arch: Arch) -> dict[str, Any]:
    """The factors of both predictions at one grid (docs/cost-model.md, section 8)."""
    ch = g.formula
    h, w, c, k = (int(a[0]) for a in (ch.h, ch.w, ch.c, ch.k))
    cores = g.r * g.c
    macs = contest_macs(isp)
    ideal = macs / (cores * arch.core.macs_per_cycle)
    rect = int(ch.grid_rows_used[0]) * int(ch.grid_cols_used[0])
    fits = g.contest_cycles is not None
    return {
        "grid": f"{g.r}x{g.c} {g.dataflow.value}",
        "ideal": f"{ideal:,.0f}",
        "std MAC": f"{g.std_mac:,}",
        "std vec": f"{g.std_vector:,}",
        "std NoC": f"{g.std_noc:,}",
        "std fill": f"{g.std_fill:,}",
        "std": f"{g.std:,}",
        "std/ideal": f"{g.std / ideal:.2f}",
        "args h w c k": f"{h} {w} {c} {k}{' R90' if bool(ch.rotated[0]) else ''}" if fits else "-",
        "(c'+1)/c'": f"{(c + 1) / c:.2f}" if fits else "-",
        "grid/rect": f"{cores / rect:.2f}" if fits else "-",
        "quant": f"{quant(g, isp):.2f}" if fits else "-",
        "contest": f"{g.contest_cycles:,}" if fits else "no fit",
        "contest/ideal": f"{(g.contest_cycles or 0) / ideal:.2f}" if fits else "-",
        "ratio": fmt_ratio(g.ratio),
        "ispd2020": f"{int(g.model.cycles[0]):,}" if int(g.model.fit[0]) == Fit.FITS else "no fit",
        "epilogue": f"{int(g.model.epilogue_cycles[0]):,}",
    }


def summarize(label: str, grids: list[tuple[Grid, IspdConvWork, int]], arch: Arch) -> dict[str, Any]:
    """Ratio range and the medians of the factors over the convs at one core count (each kernel counted)."""
    weights = [n for _, _, n in grids]
    fit = [(g, isp, n) for g, isp, n in grids if g.ratio is not None]
    ratios = np.repeat([g.ratio for g, _, _ in fit], [n for _, _, n in fit])

    def median(values: list[float]) -> str:
        return f"{np.median(np.repeat(values, [n for _, _, n in fit])):.2f}"

    def ideal(g: Grid, isp: IspdConvWork) -> float:
        return contest_macs(isp) / (g.r * g.c * arch.core.macs_per_cycle)

    return {
        "cores": label,
        "convs": f"{ratios.size} of {sum(weights)}",
        "min": f"{ratios.min():.2f}",
        "median": f"{np.median(ratios):.2f}",
        "geomean": f"{math.exp(np.log(ratios).mean()):.2f}",
        "max": f"{ratios.max():.2f}",
        "std/ideal": median([g.std / ideal(g, isp) for g, isp, _ in fit]),
        "std fill share": median([g.std_fill / g.std for g, _, _ in fit]),
        "std vec share": median([g.std_vector / g.std for g, _, _ in fit]),
        "contest/ideal": median([(g.contest_cycles or 0) / ideal(g, isp) for g, isp, _ in fit]),
        "(c'+1)/c'": median([(int(g.formula.c[0]) + 1) / int(g.formula.c[0]) for g, _, _ in fit]),
        "grid/rect": median([g.r * g.c / int(g.formula.grid_rows_used[0] * g.formula.grid_cols_used[0]) for g, _, _ in fit]),
        "quant": median([quant(g, isp) for g, isp, _ in fit]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(ROOT / "models" / "resnet50.onnx"))
    parser.add_argument("--arch", default="wse2")
    parser.add_argument("--budgets", type=int, nargs="*", default=[1024, 4096, 65536])
    args = parser.parse_args()

    arch = load_arch(args.arch)
    source = OnnxSource(path=args.model)
    std_costs = build_costs(source, arch, CostOptions())
    train_costs = build_costs(source, arch, TRAIN_OPTIONS, check_feasible=False)
    isp_costs = build_costs(source, arch, CostOptions(model=CostModelName.ISPD2020))
    bound = optimal_bottleneck(build_problem(std_costs))
    isp_bound = optimal_bottleneck(build_problem(isp_costs))
    assert bound is not None and isp_bound is not None

    groups: dict[int, list[int]] = {}
    for i, kc in enumerate(std_costs.kernels):
        if isinstance(isp_costs.kernels[i].work, IspdConvWork):
            groups.setdefault(kc.signature, []).append(i)

    main_rows: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    at_size: dict[str, list[tuple[Grid, IspdConvWork, int]]] = {}
    mac_mismatch = []
    trained: list[tuple[float | None, int]] = []
    for members in groups.values():
        kc = std_costs.kernels[members[0]]
        isp = isp_costs.kernels[members[0]].work
        assert isinstance(isp, IspdConvWork) and isinstance(kc.work, KernelWork)
        if not math.isclose(contest_macs(isp), kc.work.macs):
            mac_mismatch.append(kc.kernel.name)
        label = members_label([std_costs.kernels[j].kernel.name for j in members])
        train = train_costs.kernels[members[0]].work
        assert isinstance(train, TrainingWork)
        g = grid_of(kc, std_costs, isp, at_bound(kc, bound), train)
        at_size.setdefault("bound", []).append((g, isp, len(members)))
        trained.append((g.train_ratio, len(members)))
        row: dict[str, Any] = {
            "conv": label,
            "shape": shape_label(isp),
            "bound grid": f"{g.r}x{g.c} ({g.r * g.c:,})",
            "std": f"{g.std:,}",
            "contest": f"{g.contest_cycles:,}" if g.contest_cycles is not None else "no fit",
            "ratio": fmt_ratio(g.ratio),
            "std --train": f"{g.std_train:,}",
            "ratio --train": fmt_ratio(g.train_ratio),
        }
        parts.append({"conv": label} | decomposition(isp, g, arch))
        for n in args.budgets:
            col = f"{n:,} cores"
            at = fastest_within(kc, n)
            if at is None:
                row[col] = "-"
                continue
            gb = grid_of(kc, std_costs, isp, at)
            row[col] = fmt_ratio(gb.ratio)
            at_size.setdefault(col, []).append((gb, isp, len(members)))
        main_rows.append(row)

    n_convs = sum(len(m) for m in groups.values())
    words = arch.usable_sram_bytes // arch.dtype.bytes
    print(f"**{Path(args.model).name} on {arch.name}: {n_convs} Conv kernels, {len(groups)} distinct.**\n")
    print(
        f"Unit: 1 contest time unit = 1 MAC of one tile, cycles = ceil(units / {arch.core.macs_per_cycle}) "
        f"(MACs per cycle per core). Memory limit: {arch.usable_sram_bytes:,} B usable / {arch.dtype.bytes} B "
        f"= {words:,} words per core. Allocation bound of the whole model: standard {bound:,} cycles, "
        f"--cost-model ispd2020 {isp_bound:,} cycles (x{isp_bound / bound:.2f}).\n"
    )
    if mac_mismatch:
        print(f"MACs differ between ONNX and the contest's H W C K R S / (T U) for: {', '.join(mac_mismatch)}\n")
    else:
        print("The contest's H W C K R S / (T U) equals the ONNX MAC count of every conv.\n")
    print("#### Contest formula / standard model, on the standard model's grid\n")
    print(
        "`bound grid`: the grid the standard model's optimal allocation gives the kernel at the bound; "
        "`N cores`: the standard model's fastest legal op model within N cores (`-`: none). "
        "`no fit`: no execution arguments fit that grid within the memory limit.\n"
    )
    cols = ["conv", "shape", "bound grid", "std", "contest", "ratio", "std --train", "ratio --train"]
    cols += [f"{n:,} cores" for n in args.budgets]
    print(markdown(main_rows, cols))
    fit = [(x, n) for x, n in trained if x is not None]
    train_ratios = np.repeat([x for x, _ in fit], [n for _, n in fit])
    print(
        f"\n`std --train`: the standard model's training kernel on the bound grid (`--train`: forward, input and "
        f"weight gradients, Adam update; the stem conv has no input gradient). Contest / standard training over "
        f"the convs: min {train_ratios.min():.2f}, median {np.median(train_ratios):.2f}, "
        f"geomean {math.exp(np.log(train_ratios).mean()):.2f}, max {train_ratios.max():.2f}.\n"
    )
    print("#### Over the convs (each kernel counted; medians of the factors)\n")
    summary = [summarize(label, grids, arch) for label, grids in at_size.items()]
    print(
        markdown(
            summary,
            ["cores", "convs", "min", "median", "geomean", "max", "std/ideal", "std fill share", "std vec share"]
            + ["contest/ideal", "(c'+1)/c'", "grid/rect", "quant"],
        )
    )
    print()
    print("#### Both models taken apart at the bound grid (cycles)\n")
    print(
        "ideal = MACs / (cores x MACs per cycle). std = max(std MAC + std vec, std NoC) + std fill. "
        "contest = ideal x 3 copies x (c'+1)/c' x grid/rect x quant (up to the final ceil), so "
        "ratio = contest/ideal / std/ideal. `ispd2020`: what `--cost-model ispd2020` charges on this grid "
        "(its arguments minimize max(formula, `epilogue`): the epilogue is the standard model's vector work "
        "on the output tiles, which do no MACs).\n"
    )
    dcols = ["conv", "grid", "ideal", "std MAC", "std vec", "std NoC", "std fill", "std", "std/ideal", "args h w c k"]
    dcols += ["(c'+1)/c'", "grid/rect", "quant", "contest", "contest/ideal", "ratio", "epilogue", "ispd2020"]
    print(markdown(parts, dcols))


if __name__ == "__main__":
    main()
