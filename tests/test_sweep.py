"""`wsealloc sweep`: grid, table, plot, and the warning for a better machine doing worse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wsealloc.bench.sweep import grid, non_monotone, parse_axes
from wsealloc.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_non_monotone_pairs_are_found() -> None:
    axes = parse_axes(["core.sram_bytes=24KiB,48KiB", "noc.link_bytes_per_cycle=2,4"])
    points = grid(axes)  # (24K,2) (24K,4) (48K,2) (48K,4)
    assert non_monotone(axes, points, [100, 90, 90, 80]) == []
    # 48KiB/4 is better than 24KiB/4 in every field yet slower: the ZigZag bug
    assert (1, 3) in non_monotone(axes, points, [100, 90, 90, 95])
    # a worse-when-larger field flips the direction
    hop = parse_axes(["noc.hop_latency_cycles=1,2"])
    assert non_monotone(hop, grid(hop), [10, 9]) == [(1, 0)]


def test_real_sweep_is_monotone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "sweep.svg"
    code = main(
        [
            "sweep",
            str(ROOT / "models" / "tiny" / "transformer.onnx"),
            "--arch",
            "tiny",
            "--set",
            "core.sram_bytes=24KiB,48KiB,96KiB",
            "--set",
            "noc.link_bytes_per_cycle=1,4",
            "-j",
            "2",
            "--plot",
            str(plot),
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    doc = json.loads(captured.out)
    assert len(doc["points"]) == 6 and doc["warnings"] == []
    assert "non-monotone" not in captured.err
    assert plot.read_text().lstrip().startswith("<?xml")


def test_bad_sweep_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(ROOT / "models" / "tiny" / "mlp.onnx"), "--arch", "tiny", "--set", "core.sram_bytes=big"]) == 2
    assert "not a number" in capsys.readouterr().err
