"""Generation end to end (``--prompt IN --generate OUT --prefill P.onnx``; plan/generation.py): one
request's prefill, then OUT decode steps with the past growing from IN to IN + OUT - 1, on the tiny
LLM twins (models/README.md: 2 layers, hidden 64, 4 heads of 16, 2 KV heads; the prefill runs 16
tokens). The sums are redone here by hand: every step's cost table built at its own context, and
its time read off it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wsealloc import solve
from wsealloc.arch import load_arch
from wsealloc.cost import CostOptions, grid_costs
from wsealloc.errors import UsageError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import build_costs
from wsealloc.plan.generation import affine_works, prefill_on_grid, works_at
from wsealloc.plan.verify import verify_plan
from wsealloc.request import build_request
from wsealloc.strategy.regions import pack_runs

MODELS = Path(__file__).resolve().parents[1] / "models" / "tiny"
DECODE, PREFILL = str(MODELS / "llm_decode.onnx"), str(MODELS / "llm_prefill.onnx")
IN, OUT = 16, 4


def _generate(tmp_path: Path, **options: object) -> tuple[dict, Path]:
    out = tmp_path / "plan.json"
    solve(DECODE, "tiny", output=out, prompt=IN, generate=OUT, prefill=PREFILL, time_limit=20, **options)  # type: ignore[arg-type]
    return json.loads(out.read_text()), out


def _step_by_hand(context: int, grid: tuple[int, int]) -> int:
    """One decode step at past ``context`` with every kernel on one ``grid`` (one region: a token's
    path is the region's latency, its kernels one after another, each its fastest dataflow in place)."""
    costs = build_costs(OnnxSource(path=DECODE, context=context, batch=1), load_arch("tiny"), CostOptions())
    return sum(int(on_grid(kc.work, costs.arch, costs.options, *grid)[1].latency[0]) for kc in costs.kernels)


def test_the_end_to_end_sum_by_hand_on_a_fixed_grid(tmp_path: Path) -> None:
    plan, path = _generate(tmp_path, objective="latency", grid="4x4", prefill_grid="8x8")
    llm = plan["objective"]["llm"]
    gen = llm["generation"]
    # the decode plan is solved at the last step's past length, IN + OUT - 1
    assert llm["context"] == IN + OUT - 1 and plan["request"]["model"]["context"] == IN + OUT - 1
    steps = [_step_by_hand(IN + j, (4, 4)) for j in range(OUT)]
    assert gen["decode_first_cycles"] == steps[0] and gen["decode_last_cycles"] == steps[-1]
    assert gen["decode_last_cycles"] == llm["token_path_cycles"]  # the plan's own pass
    assert gen["decode_total_cycles"] == sum(steps)
    assert steps[-1] > steps[0]  # the cache grows: the last step is the slowest
    # the prefill: every kernel of the 16-token export on 8 x 8, one after another
    pre = build_costs(OnnxSource(path=PREFILL), load_arch("tiny"), CostOptions())
    prefill = sum(int(on_grid(kc.work, pre.arch, pre.options, 8, 8)[1].latency[0]) for kc in pre.kernels)
    assert gen["prefill_grid"] == [8, 8] and gen["prefill_cycles"] == prefill
    assert gen["prefill_regions"] == len(pack_runs(pre, 8, 8)) and gen["prefill_fits_wafer"]
    clock = load_arch("tiny").clock_hz
    assert gen["time_to_first_token_s"] == pytest.approx(prefill / clock)
    assert gen["time_per_output_token_first_s"] == pytest.approx(steps[0] / clock)
    assert gen["time_per_output_token_last_s"] == pytest.approx(steps[-1] / clock)
    assert gen["time_per_output_token_mean_s"] == pytest.approx(sum(steps) / OUT / clock)
    assert gen["end_to_end_s"] == pytest.approx((prefill + sum(steps)) / clock)
    assert gen["end_to_end_tokens_per_s"] == pytest.approx(OUT * clock / (prefill + sum(steps)))
    assert gen["distinct_step_costs"] == len(set(steps))
    assert verify_plan(path).ok


def test_a_layer_pipeline_plan_sums_its_token_path_by_hand(tmp_path: Path) -> None:
    """Kernels on their own rectangles (throughput plan): each step's path through the kernels in the
    dataflows and grids of the plan, at that step's context, with the placement's communication."""
    plan, path = _generate(tmp_path)
    gen = plan["objective"]["llm"]["generation"]
    kernels = {k["name"]: k for k in plan["kernels"]}
    from wsealloc.cost import Dataflow
    from wsealloc.plan.rules import objective_value
    from wsealloc.problem.objective import ObjectiveKind

    total = []
    for j in range(OUT):
        costs = build_costs(OnnxSource(path=DECODE, context=IN + j, batch=1), load_arch("tiny"), CostOptions())
        stage = []
        for kc in costs.kernels:
            k = kernels[kc.kernel.name]
            g = grid_costs(
                kc.work, costs.arch, costs.options, Dataflow(k["dataflow"]), np.array([k["grid"][0]]), np.array([k["grid"][1]])
            )
            stage.append(int(g.latency[0]) + k["comm_cycles"])
        total.append(objective_value(ObjectiveKind.LATENCY, stage, [list(p) for p in costs.preds()]))
    assert gen["decode_first_cycles"] == total[0] and gen["decode_last_cycles"] == total[-1]
    assert gen["decode_total_cycles"] == sum(total)
    assert verify_plan(path).ok
    # a generation number changed by hand is caught
    plan["objective"]["llm"]["generation"]["decode_total_cycles"] += 1
    path.write_text(json.dumps(plan))
    report = verify_plan(path)
    assert not report.ok and any("generation.decode_total_cycles" in e for e in report.violations)


def test_a_decode_steps_work_is_affine_in_the_context() -> None:
    """Why no step is imported: every field of every kernel's work moves linearly with the past
    length; read at two contexts, the line gives every other exactly (checked against imports)."""
    arch, options = load_arch("tiny"), CostOptions()
    source = OnnxSource(path=DECODE, batch=1)
    at = {c: works_at(source, c, arch, options) for c in (9, 10, 13, 40)}
    work = affine_works([(40, at[40]), (9, at[9])], 40)
    for c in (10, 13):
        assert [work(i, c) for i in range(len(at[c]))] == [w for _, w in at[c]]
    # scores at past c hold (c + 1) keys of 2 KV heads x 16 x 2 B (tests/test_kvcache.py)
    names = [n for n, _ in at[9]]
    scores = names.index("layers.0.scores")
    assert work(scores, 100).state_bytes == 1 * 2 * 101 * 16 * 2


def test_the_default_prefill_grid_is_the_fastest_square() -> None:
    arch, options = load_arch("tiny"), CostOptions()
    request = build_request(DECODE, "tiny", prompt=IN, generate=OUT, prefill=PREFILL)
    assert request.generation is not None
    (r, c), cycles, regions = prefill_on_grid(request.generation, arch, options)
    pre = build_costs(OnnxSource(path=PREFILL), arch, options)
    # its weights and cache packed on that grid as --grid packs them, within the wafer
    assert regions == len(pack_runs(pre, r, c)) and regions * r * c <= arch.total_cores

    def total(side: int) -> int:
        return sum(int(on_grid(kc.work, arch, options, side, side)[1].latency[0]) for kc in pre.kernels)

    assert r == c and cycles == total(r)
    assert all(total(s) >= cycles for s in range(1, min(arch.rows, arch.cols) + 1))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prompt": 15, "generate": 4, "prefill": PREFILL}, "runs a prompt of 16 tokens"),
        ({"prompt": IN, "generate": 4}, "--prefill PREFILL.onnx missing"),
        ({"prompt": IN, "generate": 4, "prefill": PREFILL, "context": 9}, "leave --context out"),
        ({"prompt": IN, "generate": 4, "prefill": PREFILL, "requests": 2}, "--requests must be 1"),
        ({"prompt": IN, "generate": 0, "prefill": PREFILL}, "--generate 0"),
        ({"prompt": IN, "generate": 4, "prefill": PREFILL, "prefill_grid": "0x3"}, "--prefill-grid"),
        ({"prompt": IN, "generate": 4, "prefill": "nowhere.onnx"}, "no such file"),
    ],
)
def test_generation_options_are_checked_at_the_boundary(options: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        build_request(DECODE, "tiny", **options)  # type: ignore[arg-type]


def test_the_request_round_trips_with_its_generation() -> None:
    request = build_request(DECODE, "tiny", prompt=IN, generate=OUT, prefill=PREFILL, prefill_grid="8x8")
    again = type(request).from_json(request.to_json())
    assert again == request and again.generation is not None and again.generation.prefill_grid == (8, 8)


@pytest.mark.slow  # (an end-to-end run of the command: the quick suite keeps its unit tests)
def test_the_command_line_reports_the_generation(tmp_path: Path) -> None:
    """``solve --prompt --generate --prefill --prefill-grid`` end to end, then ``verify``; ``pools`` keeps
    its own ``--prompt`` (the options are solve's and compare's only)."""
    import subprocess
    import sys

    out = tmp_path / "p.json"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wsealloc.cli", *args], capture_output=True, text=True, timeout=300)

    args = ("solve", DECODE, "--arch", "tiny", "--prompt", str(IN), "--generate", "3", "--prefill", PREFILL)
    solved = run(*args, "--prefill-grid", "8x8", "--no-place", "--time-limit", "10", "-o", str(out))
    assert solved.returncode == 0, solved.stderr
    assert "generation end to end, prompt 16 + 3 tokens" in solved.stdout and "prefill on 8 x 8" in solved.stdout
    assert run("verify", str(out)).returncode == 0
    refused = run(*args, "--context", "9")
    assert refused.returncode == 2 and "leave --context out" in refused.stderr
