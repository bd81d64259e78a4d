"""The CLI contract: outputs, and one clear line on stderr with a non-zero exit for bad input.

Commands run in this process (``main(argv)`` with stdout/stderr captured) wherever a real process is
not the point; the entry point itself and the signal tests start real processes."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run

from wsealloc.plan.verify import verify_plan

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = str(ROOT / "models" / "tiny" / "attention.onnx")
MLP_DYNAMIC = str(ROOT / "models" / "tiny" / "mlp_dynamic.onnx")


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``wsealloc ARGS`` as a real process (the entry point and signals are the point)."""
    return subprocess.run([sys.executable, "-m", "wsealloc.cli", *args], capture_output=True, text=True, timeout=120)


def test_entry_point_runs_as_a_process() -> None:
    out = run_process()
    assert out.returncode == 0 and "Commands:" in out.stdout and not out.stderr
    bad = run_process("inspect", "/no/such.onnx")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such file" in bad.stderr


def test_inspect_json() -> None:
    out = run("inspect", ATTENTION, "--arch", "tiny", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc["summary"]) >= {"total_macs", "weight_bytes", "kernels", "onnx_nodes"}
    assert doc["summary"]["kernels"] == len(doc["kernels"]) == 4


def test_inspect_kernel_reasons() -> None:
    out = run("inspect", ATTENTION, "--arch", "tiny", "--kernel", "qk", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["counts"]["legal"] > 0 and sum(doc["counts"].values()) == len(doc["op_models"])
    assert any(r["reason"] == "taller than the wafer" for r in doc["op_models"])


def test_solve_writes_verifiable_plan(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    out = run("solve", ATTENTION, "--arch", "tiny", "-o", str(plan), "--no-place")
    assert out.returncode == 0, out.stderr
    assert "bottleneck kernel" in out.stdout and "speed-up" in out.stdout
    check = run("verify", str(plan))
    assert check.returncode == 0 and "OK" in check.stdout


def test_the_offwafer_bandwidth_is_a_field_streaming_reads_without_a_warning() -> None:
    out = run("inspect", ATTENTION, "--arch", "tiny", "--json", "--set", "cluster.offwafer_bytes_per_s=1e12")
    assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.parametrize("solver", ["cpsat", "pulp", "bisect", "greedy", "greedy-seed"])
def test_every_solver_runs(solver: str, tmp_path: Path) -> None:
    out = run("solve", ATTENTION, "--arch", "tiny", "--solver", solver, "--json", "--no-place")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["objective"]["solver"] == solver


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["inspect", "/no/such.onnx"], "no such file"),
        (["inspect", MLP_DYNAMIC, "--arch", "tiny"], "unbound symbolic dims batch"),
        (["inspect", MLP_DYNAMIC, "--arch", "tiny", "--dim", "batch"], "expected NAME=VALUE"),
        (["inspect", MLP_DYNAMIC, "--arch", "tiny", "--dim", "batch=x"], "is not an integer"),
        (["inspect", ATTENTION, "--arch", "wse9"], "neither a preset nor a file"),
        (["inspect", ATTENTION, "--arch", "tiny", "--set", "core.sram_bytes"], "expected FIELD=VALUE"),
        (["inspect", ATTENTION, "--arch", "tiny", "--set", "core.sram_bytes=-1"], "core.sram_bytes"),
        (["solve", ATTENTION, "--arch", "tiny", "--solver", "gurobi"], "unknown solver 'gurobi'"),
        (["solve", ATTENTION, "--arch", "tiny", "-o", "/no/dir/plan.json"], "does not exist"),
        (["inspect", ATTENTION, "--arch", "tiny", "--cost-model", "magic"], "unknown cost model"),
        (["verify", "/no/plan.json"], "no such plan file"),
    ],
)
def test_bad_input_one_line(args: list[str], needle: str) -> None:
    out = run(*args)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0] and "Traceback" not in out.stderr


def test_debug_shows_traceback() -> None:
    out = run("inspect", "/no/such.onnx", "--debug")
    assert out.returncode == 2 and "Traceback" in out.stderr  # the error's own exit code, not Python's 1


def test_group_without_subcommand_shows_help() -> None:
    out = run()
    assert out.returncode == 0 and "Commands:" in out.stdout and not out.stderr


def test_unknown_command_lists_commands() -> None:
    out = run("slove")
    commands = "arch, bench, compare, export-llm, frontier, inspect, pools, solve, sweep, verify"
    assert out.returncode == 2 and f"choose one of: {commands}" in out.stderr


def test_debug_on_a_command_without_it_is_a_usage_error() -> None:
    out = run("arch", "list", "--debug")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_infeasible_names_kernels(tmp_path: Path) -> None:
    out = run(
        "solve",
        ATTENTION,
        "--arch",
        "tiny",
        "--set",
        "wafer.dies.rows=1",
        "--set",
        "wafer.dies.cols=1",
        "--set",
        "wafer.die_cores.rows=1",
        "--set",
        "wafer.die_cores.cols=2",
    )
    assert out.returncode == 3, out.stderr
    assert "does not fit" in out.stderr and "short by" in out.stderr


def _stop_after(args: list[str], marker: str, wait_s: float, sig: int = signal.SIGINT) -> tuple[int, str, float]:
    """Start ``wsealloc ARGS -v``, send ``sig`` ``wait_s`` seconds after the progress line containing
    ``marker``; return (exit code, stderr, seconds from the signal to the exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wsealloc.cli", *args, "-v"], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            break
    time.sleep(wait_s)
    sent = time.perf_counter()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, "".join(seen) + err, time.perf_counter() - sent


# LLaMA-7B's placement construction takes ~35 s: a signal 3 s in lands inside it
LLAMA_7B = str(ROOT / "models" / "llama-7b.onnx")
# The product's target is 2 s from the signal to the exit (docs/cli.md), measured on a quiet machine by
# benchmarks/stop_latency.py. A test on a loaded CI machine checks the property with a margin: the run
# stops far sooner than the work it interrupts would take (a construction of ~30 s more, a 300 s limit).
STOP_MARGIN_S = 10.0


# real processes signalled mid-solve (5 s each): end-to-end checks of the slow group, run by .ci/run
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_construction_stops_promptly(sig: int, tmp_path: Path) -> None:
    """Ctrl-C / SIGTERM while the placement constructs: out promptly (the 2 s target is the benchmark's),
    the best plan so far written (valid), exit 130."""
    plan = tmp_path / "p.json"
    code, err, took = _stop_after(
        ["solve", LLAMA_7B, "--arch", "wse2", "-o", str(plan), "--time-limit", "300"], "placing", 3.0, sig
    )
    assert code == 130, err
    assert took < STOP_MARGIN_S, f"exited {took:.2f} s after the signal"
    assert "best plan so far was written" in err and "Traceback" not in err
    assert verify_plan(plan).ok


@pytest.mark.slow
def test_signal_during_a_pipeline_stops_promptly(tmp_path: Path) -> None:
    """A multi-wafer solve stopped while placing its first wafer: out promptly, the other wafers are
    allocated without placing, the plan is written and valid."""
    plan = tmp_path / "p.json"
    args = ["solve", str(ROOT / "models" / "llama-70b.onnx"), "--arch", "wse2", "--wafers", "4", "-o", str(plan)]
    code, err, took = _stop_after([*args, "--time-limit", "300"], "stage 0", 2.0)
    assert code == 130 and took < STOP_MARGIN_S, (took, err)
    assert verify_plan(plan).ok


def test_second_signal_exits_at_once() -> None:
    """The first signal asks for the best plan so far; a second one does not wait for it."""
    from wsealloc.budget import StopHook
    from wsealloc.cli.app import _stop_on_signals

    stop = StopHook()
    with _stop_on_signals(stop):
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)
        assert stop.stopped.is_set()
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGINT, None)


def test_arch_commands() -> None:
    out = run("arch", "list")
    assert out.returncode == 0 and "wse2" in out.stdout and "975,744" in out.stdout
    shown = run("arch", "show", "wse2", "--set", "core.sram_bytes=96KiB")
    doc = json.loads(shown.stdout)
    assert doc["core"]["sram_bytes"] == 96 * 1024 and doc["derived"]["total_cores"] == 975_744


@pytest.mark.slow
def test_seed_cost_model_plans_verify(tmp_path: Path) -> None:
    plan = tmp_path / "seed.json"
    out = run(
        "solve",
        str(ROOT / "models" / "tiny" / "transformer.onnx"),
        "--arch",
        "tiny",
        "--cost-model",
        "seed",
        "-o",
        str(plan),
        "--time-limit",
        "2",
    )
    assert out.returncode == 0, out.stderr
    assert run("verify", str(plan)).returncode == 0
    faithful = run(
        "solve",
        str(ROOT / "models" / "tiny" / "transformer.onnx"),
        "--arch",
        "tiny",
        "--cost-model",
        "seed",
        "--no-place",
        "--solver",
        "greedy-seed",
        "--json",
    )
    assert faithful.returncode == 0, faithful.stderr
    # By hand: the notebook's rule gives Gemm kernels the compute share and every other kernel
    # floor(output bytes / SRAM per core) cores. The tiny transformer has no Gemm, and its largest tensor
    # (even at 4 bytes an element) is below one core's usable SRAM: every kernel gets 0 cores, below its
    # smallest legal op model, so the faithful plan is INVALID with every kernel short.
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(ROOT / "models" / "tiny" / "transformer.onnx")))
    assert "Gemm" not in {n.op_type for n in model.graph.node}
    infos = [*model.graph.value_info, *model.graph.output, *model.graph.input]
    largest = max(4 * math.prod(d.dim_value for d in vi.type.tensor_type.shape.dim) for vi in infos)
    doc = json.loads(faithful.stdout)
    usable = doc["arch"]["sram_bytes_per_core"]
    assert largest < usable, (largest, usable)
    n = len(doc["kernels"])
    assert doc["objective"]["status"] == "INVALID"
    assert doc["objective"]["message"].startswith(f"{n} of {n} kernels got fewer cores than their smallest legal op model")


def test_inspect_lists_open_input_sizes_as_text() -> None:
    """A shape with a named size is text, not Rich markup: ``[batch, 64]`` printed an empty cell."""
    out = run("inspect", MLP_DYNAMIC, "--arch", "tiny")
    assert out.returncode != 0 and "│ x     │ [batch, 64] │" in out.stdout, out.stdout


def test_inspect_suggests_the_names_a_typo_is_close_to() -> None:
    out = run("inspect", str(ROOT / "models" / "tiny" / "transformer.onnx"), "--arch", "tiny", "--kernel", "l0.fcx")
    assert out.returncode == 2 and "similar: l0.fc2, l0.fc1" in out.stderr, out.stderr


def test_a_solver_without_a_bound_says_so_beside_the_communication_bound() -> None:
    out = run("solve", ATTENTION, "--arch", "tiny", "--solver", "greedy-seed", "--time-limit", "3")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "(no allocation bound: the solver proves none)" in text and "allocation bound 0" not in text
