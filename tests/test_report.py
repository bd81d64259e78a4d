"""`wsealloc compare`: JSON/Markdown/HTML reports; the HTML renders in headless Chromium with its pictures."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import wsealloc
import wsealloc.api
from wsealloc.cli import main
from wsealloc.report.compare import Comparison, compare, to_html, to_markdown
from wsealloc.request import RequestOptions

ROOT = Path(__file__).resolve().parents[1]
TRANSFORMER = ROOT / "models" / "tiny" / "transformer.onnx"


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return wsealloc.compare(TRANSFORMER, "tiny", time_limit=2)


def test_python_api_is_typed(comparison: Comparison) -> None:
    import inspect

    assert wsealloc.solve is wsealloc.api.solve and wsealloc.compare is compare  # real signatures for notebooks
    # the keyword arguments are one TypedDict (PEP 692): editors list them, and they are spelled once
    options = inspect.signature(wsealloc.compare).parameters["options"]
    assert options.kind is inspect.Parameter.VAR_KEYWORD and "RequestOptions" in str(options.annotation)
    assert "time_limit" in RequestOptions.__annotations__
    assert isinstance(comparison, Comparison)
    names = [r.name for r in comparison.rows]
    assert names[0].startswith("greedy") and names[-1].startswith("exact bound")
    solver = next(r for r in comparison.rows if r.name.startswith("solver"))
    assert solver.bottleneck_cycles >= comparison.bound_cycles
    outcome = wsealloc.solve(TRANSFORMER, "tiny", place=False)
    assert outcome.plan.objective.status == "OPTIMAL"


def test_markdown_stands_alone(comparison: Comparison) -> None:
    md = to_markdown(comparison)
    assert md.count("data:image/svg+xml;base64,") == 3  # latency bars, core share, floorplan
    assert "| allocation |" in md


def test_html_is_self_contained(comparison: Comparison) -> None:
    page = to_html(comparison)
    assert page.count("<svg") == 3
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no network resources
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids))


@pytest.mark.slow  # (an end-to-end run of the command: the quick suite keeps its unit tests)
def test_cli_compare_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert (
        main(
            ["compare", str(TRANSFORMER), "--arch", "tiny", "--time-limit", "2", "--report", str(html), "--md", str(md), "--json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["speedup"] >= 1.0 and len(doc["kernels"]) == 21
    assert html.stat().st_size > 10_000 and md.stat().st_size > 10_000
    assert main(["compare", str(TRANSFORMER), "--arch", "tiny", "--report", str(tmp_path / "r.pdf")]) == 2
    assert "--report" in capsys.readouterr().err


def test_cli_compare_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(TRANSFORMER), "--arch", "tiny", "--no-place", "--time-limit", "5"]) == 0
    out = capsys.readouterr().out
    for text in ("greedy (notebook rule)", "solver (cpsat)", "exact bound (bisection)", "speed-up over greedy"):
        assert text in out


@pytest.mark.slow  # (an end-to-end run of the command: the quick suite keeps its unit tests)
def test_html_renders_in_headless_chromium(comparison: Comparison, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        # a fresh machine without a browser still passes the README's `pytest`; CI (.ci/run installs
        # Chromium and sets WSEALLOC_REQUIRE_BROWSER=1) must never skip it silently
        reason = "no chromium on PATH (install Debian's chromium to run the browser test)"
        if os.environ.get("WSEALLOC_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason}, and WSEALLOC_REQUIRE_BROWSER=1 makes that an error")
        pytest.skip(reason)
    page = tmp_path / "report.html"
    page.write_text(to_html(comparison))
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-500:]
    assert dom.stdout.count("<svg") == 3 and "Per-kernel stage cycles" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    from matplotlib.image import imread

    pixels = imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels.std() > 0.05  # not blank
    # the solver's bars (#1f77b4) and the floorplan's colour map are drawn, not just the tables
    blue = (
        (abs(pixels[..., 0] - 0x1F / 255) < 0.02)
        & (abs(pixels[..., 1] - 0x77 / 255) < 0.02)
        & (abs(pixels[..., 2] - 0xB4 / 255) < 0.02)
    )
    assert blue.sum() > 500
    saturated = (pixels[..., :3].max(axis=-1) - pixels[..., :3].min(axis=-1)) > 0.3
    assert saturated.sum() > 20_000
