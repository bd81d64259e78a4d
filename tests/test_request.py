"""The solve request: built once at every boundary, validated, JSON round-trippable; the deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wsealloc.arch import load_arch
from wsealloc.budget import DEFAULT_TIME_LIMIT_S, Deadline, StopHook
from wsealloc.errors import ArchError, UsageError
from wsealloc.frontend.sources import OnnxSource, SyntheticSource, parse_model_source
from wsealloc.request import SolveRequest, build_request

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "models" / "tiny" / "mlp.onnx"


def test_defaults_are_the_documented_ones() -> None:
    r = build_request(MLP, "tiny")
    assert r.solver.name == "cpsat" and r.solver.time_limit_s == DEFAULT_TIME_LIMIT_S == 30.0
    assert (r.solver.workers, r.solver.seed, r.place, r.wafers) == (1, 0, True, 1)
    assert r.arch == load_arch("tiny") and r.cost.model.value == "standard"


def test_a_request_is_complete_options_beside_it_are_refused() -> None:
    r = build_request(MLP, "tiny")
    assert build_request(r) is r
    with pytest.raises(UsageError, match="time_limit given with a SolveRequest"):
        build_request(r, time_limit=5)  # was silently ignored
    with pytest.raises(UsageError, match="arch given with a SolveRequest"):
        build_request(r, "wse2")


def test_request_round_trips_through_json() -> None:
    r = build_request(MLP, "tiny", sets=["core.sram_bytes=24KiB"], dims={"batch": 2}, time_limit=7.5, wafers="auto")
    back = SolveRequest.from_json(r.to_json())
    assert back == r and back.arch.core.sram_bytes == 24 * 1024 and back.wafer_count is None


def test_sources_are_types_not_prefixes() -> None:
    synth = parse_model_source("synthetic:chain:3")
    assert isinstance(synth, SyntheticSource) and synth.label == "synthetic:chain:3" and synth.size == 3
    onnx = parse_model_source("m.onnx", {"seq": 4}, fuse=False, base=Path("/suites"))
    assert isinstance(onnx, OnnxSource) and onnx.path == "/suites/m.onnx" and not onnx.fuse
    with pytest.raises(UsageError, match="expected synthetic:chain:N"):
        parse_model_source("synthetic:ring:2")


def test_none_wafers_means_the_arch_setting() -> None:
    assert build_request(MLP, "tiny", sets=["cluster.wafers=3"], wafers=None).wafers == 3
    assert build_request(MLP, "tiny", sets=["cluster.wafers=3"]).wafers == 1  # the API's default


@pytest.mark.parametrize(
    ("knobs", "needle"),
    [
        ({"time_limit": 0}, "--time-limit 0: Input should be greater than 0"),
        ({"time_limit": -5}, "--time-limit -5"),
        ({"time_limit": float("nan")}, "--time-limit nan"),
        ({"time_limit": "5"}, "--time-limit '5'"),
        ({"workers": 0}, "--workers 0"),
        ({"seed": 2**40}, "--seed"),
        ({"seed": -1}, "--seed -1"),
        ({"solver": "gurobi"}, "unknown solver 'gurobi'; choose one of"),
        ({"wafers": 0}, "--wafers 0"),
        ({"cost": "fancy"}, "unknown cost model 'fancy'"),
        ({"timelimit": 3}, "unknown option(s) timelimit"),
    ],
)
def test_bad_knobs_fail_before_any_work(knobs: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        build_request(MLP, "tiny", **knobs)  # type: ignore[arg-type]


def test_arch_errors_name_the_field() -> None:
    with pytest.raises(ArchError, match="sram_byte"):
        build_request(MLP, "tiny", sets=["core.sram_byte=1KiB"])


def test_worker_json_is_validated_again() -> None:
    bad = build_request(MLP, "tiny").to_json().replace('"workers":1', '"workers":0')
    with pytest.raises(UsageError, match="solve request: --workers 0"):
        SolveRequest.from_json(bad)


def test_deadline_shares_never_outlive_their_parent() -> None:
    d = Deadline.after(10.0)
    # half of what remains when share() runs: between the clock readings around the call, whatever the load
    before = time.perf_counter()
    half = d.share(0.5)
    after = time.perf_counter()
    assert before + 0.5 * (d.end - before) <= half.end <= after + 0.5 * (d.end - after)
    assert half.end <= d.end and half.stop is d.stop
    assert d.share(1.0).end <= d.end
    with pytest.raises(ValueError, match="fraction"):
        d.share(1.5)


def test_a_stop_request_expires_every_share() -> None:
    stop = StopHook()
    d = Deadline.after(100.0, stop)
    child = d.share(0.1).share(0.5)
    stop.stop()
    assert d.expired() and child.expired() and child.stopped


def test_passed_deadline_is_expired() -> None:
    d = Deadline(time.perf_counter() - 1.0)
    assert d.expired() and d.remaining() == 0.0 and d.seconds_for_solver() == 0.01


def test_python_api_keeps_a_kgraph_header() -> None:
    """``wsealloc.solve("X.kgraph")`` solves on the file's own fabric: the API's arch defaults to None
    (wse2 for ONNX models), as the CLI's --arch does, instead of overriding the header with wse2."""
    import inspect

    import wsealloc
    from wsealloc.contest import ContestOutcome

    assert inspect.signature(wsealloc.solve).parameters["arch"].default is None
    out = wsealloc.solve(str(ROOT / "tests" / "data" / "kgraph" / "tiny_fabric.kgraph"), time_limit=1)
    assert isinstance(out, ContestOutcome)
    assert (out.graph.fabric.width, out.graph.fabric.height, out.graph.fabric.memlimit) == (24, 18, 64)
    assert out.request.model.header == {}  # type: ignore[union-attr]


def test_a_stop_before_the_first_contest_layout_is_an_interrupt() -> None:
    """A signal during a contest solve ends it as interrupted (exit 130), not as an infeasible instance."""
    from wsealloc.contest import run_contest
    from wsealloc.errors import Interrupted

    deadline = Deadline.after(30)
    deadline.stop.stop()
    with pytest.raises(Interrupted, match="interrupted while solving .*tiny_chain.kgraph, before a first layout") as err:
        run_contest(build_request(str(ROOT / "tests" / "data" / "kgraph" / "tiny_chain.kgraph")), deadline)
    assert err.value.exit_code == 130


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        ("tests/data/kgraph/tiny_chain.kgraph", {"wafers": 2}, "a .kgraph instance is placed on one fabric: --wafers must be 1"),
        (str(MLP), {"time_cap": 1.1}, "--time-cap bounds a .kgraph instance's largest kernel time"),
    ],
)
def test_whole_request_rules_read_as_one_sentence(model: str, options: dict[str, object], message: str) -> None:
    # a rule over several fields has no field to name: the message starts with the rule (was ": a .kgraph ...")
    arch = "tiny" if model.endswith(".onnx") else None
    with pytest.raises(UsageError) as err:
        build_request(str(ROOT / model), arch, **options)  # type: ignore[arg-type]
    assert str(err.value).startswith(message)


def test_the_request_checks_solver_names_without_importing_the_solvers() -> None:
    """``--solver`` is checked against ``problem.objective.ALL_BACKENDS``; importing the request
    (and refusing an unknown name) loads no module of the solvers package."""
    code = (
        "import sys\n"
        "from wsealloc.request import SolverSettings\n"
        "try:\n"
        "    SolverSettings(name='gurobi')\n"
        "except ValueError as e:\n"
        "    assert 'choose one of: bisect, cpsat' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('gurobi accepted')\n"
        "assert SolverSettings(name='pulp-highs').name == 'pulp-highs'\n"
        "print(sorted(m for m in sys.modules if m.startswith('wsealloc.solvers')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
