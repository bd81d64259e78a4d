"""Reliability over hostile inputs (issue 36's targets): the issue's cases and the fuzzers' corpora.

Every case is a real ``wsealloc`` process (``solve`` with ``--time-limit 5``, ``verify``, ``solve
--from-plan``) with its address space capped (``RLIMIT_AS``, 4 GiB unless ``--memory``) and killed as
hung after ``--kill-after`` seconds (120 s: the issue's ``timeout 120``). The cases: the issue's own
(``ISSUE_CASES``: 10,000 harmless grid rules beside a keep-out leaving 16 cores, among them) and the
corpora of tests/fuzz_inputs.py (constraints files, option strings, edited plans with regions,
training, streaming, constraints and two wafers), the issue's mutations first; and the serving
commands (``solve``, ``frontier``, ``inspect``, ``sweep``, ``compare`` with ``--context``, ``pools``,
``solve --prefill``) on a wrong path, a Hugging Face config.json and a truncated file (a user pass,
session 35: each was an internal error). Printed: the counts of
the targets (each 0): internal errors (exit 70, a traceback, a crash, an exit code docs/errors.md
does not document, an error of more than one line or 1,200 characters), hangs, runs above
2 x time limit + 10 s, runs above 4 GiB resident (the child's peak RSS from ``wait4``); and the clean
errors and accepted runs; then every case that missed a target.

Usage::

    python benchmarks/reliability.py [--constraints 120] [--options 120] [--plans 120] [-j 2]
    python benchmarks/reliability.py --only serving      # one kind of cases (issue, serving, constraints, ...)

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _util import ROOT, markdown  # noqa: E402
from fuzz_inputs import CASE_TIME_LIMIT, TINY, TRANSFORMER, Case, base_plans, corpus, judge  # noqa: E402

GIB = 2**30
KINDS = ("issue", "serving", "constraints", "options", "plans")


def _issue_cases(time_limit: str) -> list[Case]:
    """The issue's cases the corpora do not hold (they are slow: the benchmark runs them, the tests
    run smaller ones)."""
    harmless = "".join(f"- grid: l{i % 2}.fc1\n  cores: [1, {384 - i % 7}]\n" for i in range(10_000))
    keep_out = "- keep-out: {rows: [0, 15], cols: [0, 22]}\n"
    pins = "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [0, 0]\n"
    solve = ("solve", TRANSFORMER, "--arch", "tiny", "--time-limit", time_limit, "--constraints", "@c.yaml")
    few = "".join(f"- grid: l{i % 2}.fc1\n  cores: [1, {384 - i % 7}]\n" for i in range(1_000))
    return [
        Case(
            "issue", 30, "1,000 harmless grid rules and a keep-out leaving 16 cores", solve, {"c.yaml": (few + keep_out).encode()}
        ),
        Case(
            "issue",
            3,
            "10,000 harmless grid rules and a keep-out leaving 16 cores",
            solve,
            {"c.yaml": (harmless + keep_out).encode()},
        ),
        Case("issue", 31, "10,000 harmless grid rules and two pins on one corner", solve, {"c.yaml": (harmless + pins).encode()}),
    ]


def _serving_cases() -> list[Case]:
    """A user pass's (session 35) serving commands on a model file that is not one: with ``--context``
    the KV cache's dims were read before the loader's checks, and a wrong path, a Hugging Face
    config.json or a truncated file ended in an internal error (exit 70); a decode export without
    ``--context``, and ``pools`` with its two files swapped."""
    decode, prefill = str(TINY / "llm_decode.onnx"), str(TINY / "llm_prefill.onnx")
    config = (ROOT / "models" / "configs" / "qwen3-8b.json").read_bytes()
    files = {"config.json": config, "trunc.onnx": Path(decode).read_bytes()[:2000]}
    fast = ("--arch", "tiny", "--time-limit", CASE_TIME_LIMIT)
    pools = ("--arch", "tiny", "--cluster", "2", "--output", "4", "--ttft", "1", "--tpot", "1", "--requests", "1")
    models = {"a wrong path": "nope-decode.onnx", "a config.json": "@config.json", "a truncated file": "@trunc.onnx"}
    runs: list[tuple[str, tuple[str, ...]]] = []
    for what, model in models.items():
        runs += [
            (f"solve --context on {what}", ("solve", model, *fast, "--context", "8", "--objective", "latency")),
            (f"frontier --context on {what}", ("frontier", model, *fast, "--context", "8", "--requests", "1", "--out", "out")),
            (f"inspect --context on {what}", ("inspect", model, "--arch", "tiny", "--context", "8")),
            (f"sweep --context on {what}", ("sweep", model, *fast, "--context", "8", "--set", "context=8,16", "--out", "out")),
            (f"compare --context on {what}", ("compare", model, *fast, "--context", "8")),
            (f"pools on {what} as DECODE.onnx", ("pools", model, prefill, *pools, "--out", "out")),
            (f"pools on {what} as PREFILL.onnx", ("pools", decode, model, *pools, "--out", "out")),
            (f"solve --prefill {what}", ("solve", decode, *fast, "--prompt", "16", "--generate", "2", "--prefill", model)),
        ]
    runs += [
        ("a decode export without --context", ("solve", decode, *fast, "--objective", "latency")),
        ("pools with DECODE.onnx and PREFILL.onnx swapped", ("pools", prefill, decode, *pools, "--out", "out")),
    ]
    return [Case("serving", i, what, argv, files) for i, (what, argv) in enumerate(runs)]


class Run(NamedTuple):
    case: Case
    code: int | None  # None: killed as hung
    wall_s: float
    rss_bytes: int
    problem: str | None


def run_case(case: Case, folder: Path, kill_after: float, memory: int) -> Run:
    """``case`` in a child process with ``memory`` bytes of address space, killed after ``kill_after`` s."""
    argv = case.materialize(folder)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    err_path = folder / "stderr.txt"
    killed = threading.Event()
    start = time.perf_counter()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wsealloc.cli", *argv],
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=limit,  # noqa: PLW1509 - the child sets its own limit before exec
            cwd=folder,
            env=env,
        )

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(kill_after, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    wall = time.perf_counter() - start
    rss = usage.ru_maxrss * 1024  # Linux: KiB
    text = err_path.read_text(errors="replace")
    if killed.is_set():
        return Run(case, None, wall, rss, f"hang: killed after {kill_after:g} s")
    code = proc.returncode
    problem = judge(code, text) if code >= 0 else f"crashed: killed by signal {-code}"
    return Run(case, code, wall, rss, problem)


def run_all(cases: list[Case], workers: int, kill_after: float, memory: int) -> list[Run]:
    """Every case (``workers`` at a time), each in a folder of its own."""
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(workers) as pool:
        folders = [Path(tmp) / f"{c.kind}-{c.index}" for c in cases]
        return list(pool.map(lambda cf: run_case(cf[0], cf[1], kill_after, memory), zip(cases, folders, strict=True)))


def tally(runs: list[Run], time_limit: float, memory: int) -> dict[str, int]:
    """The issue's counts."""
    slow = 2 * time_limit + 10
    counts = Counter[str]()
    for r in runs:
        hung = r.code is None
        counts["hangs"] += hung
        counts["internal errors"] += (not hung) and r.problem is not None
        counts[f"above {slow:g} s"] += r.wall_s > slow
        counts[f"above {memory / GIB:g} GiB resident"] += r.rss_bytes > memory
        counts["clean errors"] += r.problem is None and r.code not in (None, 0)
        counts["accepted"] += r.problem is None and r.code == 0
    return {"cases": len(runs), **counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--constraints", type=int, default=120, help="cases of the constraints corpus")
    parser.add_argument("--options", type=int, default=120, help="cases of the option-string corpus")
    parser.add_argument("--plans", type=int, default=120, help="cases of the plan corpus")
    parser.add_argument("--no-issue", action="store_true", help="leave out the issue's slow cases")
    parser.add_argument("--no-serving", action="store_true", help="leave out the serving commands' bad model files")
    parser.add_argument(
        "--only", choices=KINDS, default=None, help="run the cases of one kind only (the others' counts are ignored)"
    )
    parser.add_argument("--time-limit", type=float, default=5.0, help="--time-limit of every solve")
    parser.add_argument("--kill-after", type=float, default=120.0, help="seconds after which a case is a hang")
    parser.add_argument("--memory", type=float, default=4.0, help="GiB of address space per case")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    limit = f"{args.time_limit:g}"
    memory = int(args.memory * GIB)
    start = time.perf_counter()
    left_out = {kind for kind, out in (("issue", args.no_issue), ("serving", args.no_serving)) if out}
    wanted = {args.only} if args.only else set(KINDS) - left_out
    cases = _issue_cases(limit) if "issue" in wanted else []
    cases += _serving_cases() if "serving" in wanted else []
    cases += corpus("constraints", 0, args.constraints) if "constraints" in wanted else []
    cases += corpus("options", 0, args.options) if "options" in wanted else []
    if args.plans and "plans" in wanted:
        with tempfile.TemporaryDirectory() as tmp:
            plans = base_plans(Path(tmp))
        cases += corpus("plans", 0, args.plans, plans)
    from fuzz_inputs import with_time_limit

    if limit != CASE_TIME_LIMIT:
        cases = [replace(c, argv=tuple(with_time_limit(list(c.argv), args.time_limit))) for c in cases]
    runs = run_all(cases, args.jobs, args.kill_after, memory)
    counts = tally(runs, args.time_limit, memory)
    by_kind = []
    for kind in KINDS:
        mine = [r for r in runs if r.case.kind == kind]
        if mine:
            by_kind.append(
                {"inputs": kind, **tally(mine, args.time_limit, memory), "slowest_s": round(max(r.wall_s for r in mine), 1)}
            )
    by_kind.append({"inputs": "all", **counts, "slowest_s": round(max(r.wall_s for r in runs), 1)})
    columns = list(by_kind[-1])
    print(markdown(by_kind, columns))
    peak = max(runs, key=lambda r: r.rss_bytes)
    took = time.perf_counter() - start
    print(f"\npeak resident {peak.rss_bytes / 2**20:,.0f} MiB ({peak.case.name}: {peak.case.what[:80]}); {took:.0f} s in all")
    slow = 2 * args.time_limit + 10
    missed = [r for r in runs if r.problem is not None or r.wall_s > slow or r.rss_bytes > memory]
    for r in missed:
        print(f"- {r.case.name} ({r.case.what[:120]}): {r.problem or ''} wall {r.wall_s:.1f} s, {r.rss_bytes / 2**20:,.0f} MiB")
    if missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
