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
from wsealloc.api import run
from wsealloc.arch import Arch, load_arch
from wsealloc.cost import CostOptions, grid_costs
from wsealloc.errors import InfeasibleError, UsageError, WseallocError
from wsealloc.frontend.sources import OnnxSource
from wsealloc.opmodels.enumerate import on_grid
from wsealloc.pipeline import build_costs
from wsealloc.plan.generation import affine_works, works_at
from wsealloc.plan.io import read_plan
from wsealloc.plan.verify import verify_plan
from wsealloc.report.summary import llm_lines
from wsealloc.request import build_request
from wsealloc.strategy.generation import prefill_on_grid, prefill_tiles
from wsealloc.strategy.regions import pack_runs, packed_regions

MODELS = Path(__file__).resolve().parents[1] / "models" / "tiny"
DECODE, PREFILL = str(MODELS / "llm_decode.onnx"), str(MODELS / "llm_prefill.onnx")
IN, OUT = 16, 4


def _generate(tmp_path: Path, time_limit: float = 20, **options: object) -> tuple[dict, Path]:
    out = tmp_path / "plan.json"
    solve(DECODE, "tiny", output=out, prompt=IN, generate=OUT, prefill=PREFILL, time_limit=time_limit, **options)  # type: ignore[arg-type]
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
    plan, path = _generate(tmp_path, time_limit=3)  # (any placement's plan is summed: no need to search long)
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


# The tiny wafer (16 x 24 cores) with 5 KiB of SRAM a core (1 KiB usable beside the 4 KiB reserve): the
# 16-token prefill's weights and cache no longer fit one region of the fastest square, 16 x 16.
SMALL_SRAM = ("core.sram_bytes=5120",)


def _squares_by_hand(arch: Arch) -> dict[int, tuple[int, int | None, int]]:
    """Every square side: (the prefill's cycles on it, its regions as pack_runs packs them or None where a
    kernel alone does not fit, how many lie side by side on the 16 x 24 wafer: (16 // s) x (24 // s))."""
    options = CostOptions()
    pre = build_costs(OnnxSource(path=PREFILL), arch, options, check_feasible=False)
    out: dict[int, tuple[int, int | None, int]] = {}
    for s in range(1, 17):
        cycles = sum(int(on_grid(kc.work, arch, options, s, s)[1].latency[0]) for kc in pre.kernels)
        try:
            regions: int | None = len(pack_runs(pre, s, s))
        except WseallocError:
            regions = None
        out[s] = (cycles, regions, (16 // s) * (24 // s))
    return out


def test_the_prefill_grid_is_the_fastest_square_whose_regions_fit_side_by_side() -> None:
    """The fastest square's regions do not fit the wafer; the grid chosen is the fastest square whose
    regions do, laid side by side (not only counted in cores), and the record says so."""
    arch = load_arch("tiny", SMALL_SRAM)
    assert (arch.rows, arch.cols) == (16, 24)
    by_hand = _squares_by_hand(arch)
    fastest = min((s for s, (_, k, _) in by_hand.items() if k), key=lambda s: (by_hand[s][0], s))
    assert fastest == 16 and by_hand[16][1:] == (2, 1)  # 2 regions of 16 x 16; the wafer holds 1
    fitting = [s for s, (_, k, room) in by_hand.items() if k and k <= room]
    best = min(fitting, key=lambda s: (by_hand[s][0], s))
    assert best == 8 and by_hand[8][1:] == (6, 6)  # 6 regions of 8 x 8: 2 rows of 3 on the wafer
    # the old rule counted cores: 3 regions of 11 x 11 (363 of 384 cores) passed, but only 2 lie side by side
    assert by_hand[11][1:] == (3, 2) and arch.total_cores >= 3 * 11 * 11 and by_hand[11][0] < by_hand[8][0]
    request = build_request(DECODE, arch, prompt=IN, generate=OUT, prefill=PREFILL)
    assert request.generation is not None
    layout = prefill_on_grid(request.generation, arch, CostOptions())
    assert layout == ((8, 8), by_hand[8][0], 6)
    assert prefill_tiles(arch, 8, 8) == 6 and prefill_tiles(arch, 11, 11) == 2 and prefill_tiles(arch, 16, 16) == 1


def test_no_square_fits_then_the_fastest_tiling_and_none_fits_is_refused() -> None:
    """At 5,000 B a core no square's regions fit (each needs more than the wafer holds of it); the whole
    16 x 24 wafer, one tiling of it, holds the prefill in one region. At 4,800 B nothing fits: refused,
    naming the fixes, and an unfit --prefill-grid is refused too."""
    arch = load_arch("tiny", ("core.sram_bytes=5000",))
    by_hand = _squares_by_hand(arch)
    assert not [s for s, (_, k, room) in by_hand.items() if k and k <= room]
    request = build_request(DECODE, arch, prompt=IN, generate=OUT, prefill=PREFILL)
    assert request.generation is not None
    options = CostOptions()
    pre = build_costs(OnnxSource(path=PREFILL), arch, options, check_feasible=False)
    whole = sum(int(on_grid(kc.work, arch, options, 16, 24)[1].latency[0]) for kc in pre.kernels)
    assert len(pack_runs(pre, 16, 24)) == 1
    assert prefill_on_grid(request.generation, arch, options) == ((16, 24), whole, 1)

    tight = load_arch("tiny", ("core.sram_bytes=4800",))
    request = build_request(DECODE, tight, prompt=IN, generate=OUT, prefill=PREFILL)
    assert request.generation is not None
    with pytest.raises(InfeasibleError, match=r"fits no square or tiling of tiny: .*shorter --prompt.*--wafers auto"):
        prefill_on_grid(request.generation, tight, options)
    request = build_request(DECODE, load_arch("tiny", SMALL_SRAM), prompt=IN, generate=OUT, prefill=PREFILL, prefill_grid="16x16")
    assert request.generation is not None
    with pytest.raises(InfeasibleError, match=r"--prefill-grid 16x16: .* need 2 regions of 16 x 16, tiny holds 1 side by side"):
        prefill_on_grid(request.generation, load_arch("tiny", SMALL_SRAM), options)


def test_an_unfit_prefill_is_refused_before_the_decode_is_solved() -> None:
    """The refusal comes before the decode export is read or solved (a solve can take minutes)."""
    heard: list[str] = []
    request = build_request(DECODE, load_arch("tiny", SMALL_SRAM), prompt=IN, generate=OUT, prefill=PREFILL, prefill_grid="16x16")
    with pytest.raises(InfeasibleError, match="--prefill-grid 16x16"):
        run(request, progress=heard.append)
    assert not any(DECODE in message for message in heard)


def test_the_prefill_layout_is_chosen_once_per_solve_by_the_strategy_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request that generates runs its decode's strategy wrapped (``EndToEnd``: the prefill's layout
    chosen before the decode is read, the plan's record reading the same), and the layout is worked out
    once per solve (it was twice: 0.6 s more for Llama-3-8B's)."""
    import wsealloc.strategy.generation as gen_mod
    from wsealloc.strategy.registry import strategy_for

    request = build_request(DECODE, "tiny", prompt=IN, generate=OUT, prefill=PREFILL, time_limit=10, place=False)
    wrapped = strategy_for(request)
    assert isinstance(wrapped, gen_mod.EndToEnd) and wrapped.name == wrapped.inner.name
    assert not isinstance(strategy_for(build_request(DECODE, "tiny", context=IN, time_limit=10)), gen_mod.EndToEnd)
    calls: list[object] = []
    work = gen_mod._prefill_layout
    monkeypatch.setattr(gen_mod, "_prefill_layout", lambda *a: calls.append(a) or work(*a))
    monkeypatch.setattr(gen_mod, "_REMEMBERED", {})
    out = run(request)
    assert len(calls) == 1 and out.plan.objective.llm is not None and out.plan.objective.llm.generation is not None


def test_packed_regions_counts_as_pack_runs_packs() -> None:
    """The count of every grid at once (the prefill's choice) against pack_runs grid by grid: every
    rectangle of the tiny wafer and a few past it, at two SRAM sizes."""
    for sets in ((), SMALL_SRAM):
        arch = load_arch("tiny", sets)
        pre = build_costs(OnnxSource(path=PREFILL), arch, CostOptions(), check_feasible=False)
        shapes = np.array([(r, c) for r in range(1, 18) for c in range(1, 26)])
        counts = packed_regions(pre, shapes)
        for (r, c), count in zip(shapes.tolist(), counts.tolist(), strict=True):
            try:
                expected = len(pack_runs(pre, r, c))
            except WseallocError:
                expected = 0
            assert count == expected, (r, c)


@pytest.mark.parametrize(("rows", "cols", "r", "c"), [(5, 7, 2, 3), (6, 6, 4, 2), (7, 5, 3, 3), (6, 7, 2, 2)])
def test_rectangles_of_one_shape_pack_no_better_than_in_rows_and_columns(rows: int, cols: int, r: int, c: int) -> None:
    """prefill_tiles' premise, by exhaustive search on small wafers: the most non-overlapping r x c
    rectangles (not turned) is (rows // r) x (cols // c)."""
    spots = [(i, j) for i in range(rows - r + 1) for j in range(cols - c + 1)]

    def most(free: frozenset[tuple[int, int]], start: int) -> int:
        best = 0
        for n in range(start, len(spots)):
            i, j = spots[n]
            cells = {(i + a, j + b) for a in range(r) for b in range(c)}
            if cells <= free:
                best = max(best, 1 + most(free - cells, n + 1))
        return best

    every = frozenset((i, j) for i in range(rows) for j in range(cols))
    assert most(every, 0) == (rows // r) * (cols // c)
    arch = load_arch(
        "tiny", ("wafer.dies.rows=1", "wafer.dies.cols=1", f"wafer.die_cores.rows={rows}", f"wafer.die_cores.cols={cols}")
    )
    assert prefill_tiles(arch, r, c) == (rows // r) * (cols // c)


def test_a_die_the_arch_forbids_crossing_holds_its_own_regions() -> None:
    """Regions may not cross a die boundary: they tile each 8 x 12 die of the tiny wafer's 2 x 2."""
    arch = load_arch("tiny", ("wafer.die_boundary=forbid",))
    assert prefill_tiles(arch, 8, 12) == 4 and prefill_tiles(arch, 5, 5) == 1 * 2 * 4 and prefill_tiles(arch, 9, 9) == 0
    assert prefill_tiles(load_arch("tiny"), 5, 5) == 3 * 4


def test_verify_rejects_a_generation_whose_prefill_does_not_fit(tmp_path: Path) -> None:
    """A plan as the release before wrote it: an unfit prefill grid, its time to first token read off
    it and flagged ``prefill_fits_wafer: false``. verify recomputes the fit from the recorded grid."""
    arch = load_arch("tiny", SMALL_SRAM)
    out = tmp_path / "plan.json"
    options = {"objective": "latency", "grid": "8x8", "prefill_grid": "8x8", "place": False, "time_limit": 20}
    solve(DECODE, arch, output=out, prompt=IN, generate=OUT, prefill=PREFILL, **options)  # type: ignore[arg-type]
    assert verify_plan(out).ok
    said = " ".join(llm_lines(read_plan(out)))
    assert "(prefill on 8 x 8, 7,711 cycles; its weights and cache in 6 regions of that grid, side by side on the wafer)" in said
    plan = json.loads(out.read_text())
    gen = plan["objective"]["llm"]["generation"]
    by_hand = _squares_by_hand(arch)
    prefill, decode = by_hand[16][0], gen["decode_total_cycles"]
    plan["request"]["generation"]["prefill_grid"] = [16, 16]
    gen.update(
        prefill_grid=[16, 16],
        prefill_cycles=prefill,
        prefill_regions=2,
        prefill_fits_wafer=False,
        time_to_first_token_s=prefill / arch.clock_hz,
        end_to_end_s=(prefill + decode) / arch.clock_hz,
        end_to_end_tokens_per_s=OUT * arch.clock_hz / (prefill + decode),
    )
    out.write_text(json.dumps(plan))
    report = verify_plan(out)
    assert not report.ok
    assert report.violations[0].startswith("objective.llm.generation.prefill_fits_wafer is false")
    assert any(v.startswith("objective.llm.generation.prefill_regions: 2 regions of 16 x 16") for v in report.violations)
    assert any("objective.llm.generation: recomputed, --prefill-grid 16x16" in v for v in report.violations)
    assert "in 2 regions of that grid, more than the wafer holds: no plan, re-solve" in " ".join(llm_lines(read_plan(out)))
    # the flag alone turned true does not pass either: the regions are recomputed against the wafer
    gen["prefill_fits_wafer"] = True
    out.write_text(json.dumps(plan))
    report = verify_plan(out)
    assert not report.ok and report.violations[0].startswith("objective.llm.generation.prefill_regions: 2 regions")


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


def test_a_prefill_grid_across_a_die_boundary_is_refused_naming_its_option(tmp_path: Path) -> None:
    """Where crossing a die is forbidden, a --prefill-grid taller than a die (tiny's dies: 8 x 12) is
    refused naming --prefill-grid (it was packed first, and the packer's message named --grid, the
    decode's option: a review finding)."""
    arch = load_arch("tiny", ("wafer.die_boundary=forbid",))
    request = build_request(DECODE, arch, prompt=IN, generate=OUT, prefill=PREFILL, prefill_grid="16x12")
    with pytest.raises(UsageError, match=r"--prefill-grid 16x12: crosses a die boundary of tiny \(dies of 8x12 cores"):
        run(request)
