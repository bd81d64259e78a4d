"""Contest instances of branching networks, capped and uncapped: what fan-out and concatenation cost.

    python benchmarks/branching.py --time-limit 60 [-j 2] [--out DIR] [--only googlenet densenet121]

Issue 37 measured that on graphs written from real branching networks (fan-out and concatenation,
as in GoogLeNet and DenseNet blocks) the layouts under ``--time-cap 1.05`` cost 2-8x the wire of the
layouts the score alone chooses. The shared ISPD-2020 instances are ResNet-like chains with short
skips; these are not. This script writes such instances in the contest format from the networks'
published layer tables (nothing is downloaded), solves each twice with ``wsealloc solve X.kgraph``
(the score alone, then ``--time-cap 1.05``), checks every solution with ``wsealloc verify`` and with
``benchmarks/ispd2020.py``'s independent re-implementation of the rules, and prints both runs side by
side with the wire ratio capped / uncapped.

The contest's kernel library has convolutions only: a pooling layer is not a kernel (the tensor on
the edge after it has the pooled size), a concatenation is the fan-in of the consumer's edges (one
edge per concatenated tensor, its channels as the edge's C), GoogLeNet's pool projection is its 1x1
convolution reading the module's input. Fabric, memory limit and weights are those of the contest's
balanced instances (633 x 633 tiles, 24,576, ``wdeltat = wlength = 1``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import markdown  # noqa: E402
from ispd2020 import run_one  # noqa: E402

# GoogLeNet (Szegedy et al. 2014, table 1): per inception module the 1x1, 3x3 reduce, 3x3, 5x5
# reduce, 5x5 and pool projection channels; "pool" halves the image between modules
GOOGLENET = (
    (64, 96, 128, 16, 32, 32),  # 3a (28 x 28)
    (128, 128, 192, 32, 96, 64),  # 3b
    "pool",
    (192, 96, 208, 16, 48, 64),  # 4a (14 x 14)
    (160, 112, 224, 24, 64, 64),  # 4b
    (128, 128, 256, 24, 64, 64),  # 4c
    (112, 144, 288, 32, 64, 64),  # 4d
    (256, 160, 320, 32, 128, 128),  # 4e
    "pool",
    (256, 160, 320, 32, 128, 128),  # 5a (7 x 7)
    (384, 192, 384, 48, 128, 128),  # 5b
)
# DenseNet-121 (Huang et al. 2017): layers per dense block, growth rate; each layer a 1x1 bottleneck
# (4 x growth channels) reading the concatenation of every earlier output of its block, then a 3x3
# to the growth rate; a transition (1x1 halving the channels, 2x2 average pool) between blocks
DENSENET121 = ((6, 12, 24, 16), 32)


class _Graph:
    """Node and edge lines of one contest instance."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[str] = []
        self.edges: list[str] = []

    def io(self, kind: str, h: int, c: int) -> int:
        i = len(self.nodes)
        self.nodes.append(f"{kind}[{i}] n=[ {h} {h} {c} ] name='k{i}'")
        return i

    def conv(self, hw: int, r: int, c: int, k: int, stride: int = 1) -> int:
        """A convolution on an hw x hw image, r x r filter, c -> k channels (its node id)."""
        i = len(self.nodes)
        self.nodes.append(f"conv[{i}] W={hw} H={hw} R={r} S={r} C={c} K={k} T={stride} U={stride} name='k{i}'")
        return i

    def edge(self, a: int, b: int, hw: int, c: int) -> None:
        kind = [line.split("[", 1)[0] for line in (self.nodes[a], self.nodes[b])]
        self.edges.append(f"{kind[0]}[{a}]:y -> {kind[1]}[{b}]:x, shape:[{hw}][{hw}][{c}]")

    def text(self) -> str:
        header = f"(*\ntest={self.name}\nwidth=633\nheight=633\nwdeltat=1\nwlength=1\nwadapter=0\nmemlimit=24576\n*)\n"
        return (
            header
            + "\n(* Node Definitions *)\n"
            + "\n".join(self.nodes)
            + "\n\n(* Connectivity *)\n"
            + "\n".join(self.edges)
            + "\n"
        )


def googlenet(modules: tuple[tuple[int, ...] | str, ...] = GOOGLENET, name: str = "googlenet") -> str:
    """GoogLeNet's stem and inception modules as a contest instance (57 kernels, 152 edges between
    kernels): every branch's first kernel reads every tensor of the module's input concatenation."""
    g = _Graph(name)
    x = g.io("input", 224, 3)
    stem = g.conv(224, 7, 3, 64, 2)  # 7x7/2, then a 3x3/2 max pool: 56 x 56
    g.edge(x, stem, 224, 3)
    reduce = g.conv(56, 1, 64, 64)
    g.edge(stem, reduce, 56, 64)
    conv = g.conv(56, 3, 64, 192)  # then a max pool: 28 x 28
    g.edge(reduce, conv, 56, 64)
    inputs, hw = [(conv, 192)], 28  # the module input's tensors (pooled to the module's image), the image
    for module in modules:
        if isinstance(module, str):
            hw //= 2
            continue
        one, r3, three, r5, five, proj = module
        c = sum(ch for _, ch in inputs)
        k1, k3r = g.conv(hw, 1, c, one), g.conv(hw, 1, c, r3)
        k3 = g.conv(hw, 3, r3, three)
        k5r = g.conv(hw, 1, c, r5)
        k5 = g.conv(hw, 5, r5, five)
        kp = g.conv(hw, 1, c, proj)
        for src, ch in inputs:
            for head in (k1, k3r, k5r, kp):
                g.edge(src, head, hw, ch)
        g.edge(k3r, k3, hw, r3)
        g.edge(k5r, k5, hw, r5)
        inputs = [(k1, one), (k3, three), (k5, five), (kp, proj)]
    out = g.io("output", hw, sum(ch for _, ch in inputs))
    for src, ch in inputs:
        g.edge(src, out, hw, ch)
    return g.text()


def densenet(blocks: tuple[int, ...] = DENSENET121[0], growth: int = DENSENET121[1], name: str = "densenet121") -> str:
    """DenseNet's stem, dense blocks and transitions as a contest instance (DenseNet-121: 120 kernels,
    638 edges between kernels): a layer's bottleneck reads every earlier tensor of its block."""
    g = _Graph(name)
    x = g.io("input", 224, 3)
    stem = g.conv(224, 7, 3, 64, 2)  # then a max pool: 56 x 56
    g.edge(x, stem, 224, 3)
    tensors, hw = [(stem, 64)], 56
    for b, layers in enumerate(blocks):
        for _ in range(layers):
            bottleneck = g.conv(hw, 1, sum(ch for _, ch in tensors), 4 * growth)
            for src, ch in tensors:
                g.edge(src, bottleneck, hw, ch)
            layer = g.conv(hw, 3, 4 * growth, growth)
            g.edge(bottleneck, layer, hw, 4 * growth)
            tensors.append((layer, growth))
        if b < len(blocks) - 1:
            c = sum(ch for _, ch in tensors)
            transition = g.conv(hw, 1, c, c // 2)  # then a 2x2 average pool
            for src, ch in tensors:
                g.edge(src, transition, hw, ch)
            hw //= 2
            tensors = [(transition, c // 2)]
    out = g.io("output", hw, sum(ch for _, ch in tensors))
    for src, ch in tensors:
        g.edge(src, out, hw, ch)
    return g.text()


INSTANCES = {
    "googlenet": googlenet,
    "densenet121": densenet,
    "densenet-small": lambda: densenet((6, 12), 32, "densenet-small"),  # its first two blocks
}


def write(folder: Path, only: list[str] | None = None) -> list[Path]:
    """Write the instances (``INSTANCES``, or those named) into ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in INSTANCES.items():
        if only is None or name in only:
            path = folder / f"{name}.kgraph"
            path.write_text(make())
            paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(INSTANCES))
    parser.add_argument("--out", type=Path, default=None, help="instances and solutions go here (default: a temporary folder)")
    parser.add_argument("--time-cap", type=float, default=1.05)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="branching-"))
    files = write(out, args.only)
    runs = [(path, cap) for path in files for cap in (None, args.time_cap)]

    def one(run: tuple[Path, float | None]) -> dict[str, object]:
        path, cap = run
        folder = out / ("capped" if cap else "score")
        folder.mkdir(exist_ok=True)
        return run_one(path, args.time_limit, folder, [] if cap is None else ["--time-cap", str(cap)])

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, runs))
    rows = []
    for i, path in enumerate(files):
        alone, capped = results[2 * i], results[2 * i + 1]
        row: dict[str, object] = {"instance": path.stem, "kernels": alone.get("kernels", "")}
        for tag, res in (("score", alone), ("capped", capped)):
            if "error" in res:
                row[f"{tag}: time/bound"] = res["error"]
                continue
            row[f"{tag}: time/bound"] = res["ratio"]
            row[f"{tag}: wire"] = res["wirelength"]
            row[f"{tag}: score"] = res["score"]
            row[f"{tag}: legal"] = bool(res["verify"]) and res["independent"] is True and bool(res["agree"])
        wires = alone.get("wirelength"), capped.get("wirelength")
        if all(isinstance(w, (int, float)) and w for w in wires):
            row["wire capped / score alone"] = round(float(wires[1]) / float(wires[0]), 2)  # type: ignore[arg-type]
        rows.append(row)
    columns = ["instance", "kernels"] + [
        f"{tag}: {c}" for tag in ("score", "capped") for c in ("time/bound", "wire", "score", "legal")
    ]
    print(markdown(rows, columns + ["wire capped / score alone"]))
    print(f"\ninstances and solutions in {out}")


if __name__ == "__main__":
    main()
