"""How fast a solve stops on SIGINT/SIGTERM: seconds from the signal to the process's exit.

Target (issues 17 and 36; docs/cli.md): every phase stops within 2 s of the signal with exit 130,
writing the best plan so far where there is one. The tests (slow group, tests/test_cli.py) check the
same runs with a wide margin, since a loaded CI machine cannot promise 2 s; this script keeps the
strict target. Each case is a real ``wsealloc solve -v`` signalled a few seconds after the progress
line that starts the phase it interrupts:

* ``frontend``: a generated chain of 30,000 MatMul+GELU kernels (60,000 ONNX nodes) while it is read
  (shape inference, folding, kernels: about 8 s); nothing is written;
* ``conflicts``: two pins at one corner among 10,000 harmless grid rules on the tiny transformer, while
  the conflict search looks for the smallest subset; nothing is written;
* ``segments``: GPT-2 training (``--train``), while the recomputation segment lengths are tried (each
  a cost table and a proven bound); nothing is written;
* ``sharing``: Llama-3-8B decode at context 4,096 (``--objective latency --share auto``, about 9 s of
  search), while the regions are chosen; nothing is written;
* ``construction``: LLaMA-7B's placement construction (about 35 s of work): the allocation's plan;
* ``pipeline``: LLaMA-70B on 4 wafers, while placing stage 0: the best plan so far.

Usage::

    python benchmarks/stop_latency.py [--repeat 3] [--target 2.0] [--cases frontend,sharing]

Exits 1 when a run misses the target (or does not exit 130, or leaves an invalid plan).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402

CHAIN_KERNELS = 30_000
CONFLICT_RULES = 10_000


class Case(NamedTuple):
    """A solve (``args``; ``CHAIN`` and ``RULES`` stand for the inputs :func:`inputs` writes) signalled
    ``wait_s`` after the progress line holding ``marker``; ``plan``: whether a plan exists by then."""

    args: tuple[str, ...]
    marker: str
    wait_s: float
    plan: bool


CASES: dict[str, Case] = {
    "frontend": Case(("CHAIN", "--arch", "wse2", "--no-place"), "reading", 3.0, False),
    "conflicts": Case(
        ("models/tiny/transformer.onnx", "--arch", "tiny", "--constraints", "RULES"), "constraints: testing", 1.0, False
    ),
    "segments": Case(
        ("models/gpt2.onnx", "--arch", "wse2", "--train", "--no-place"), "recomputation segments: trying", 1.0, False
    ),
    "sharing": Case(
        (
            "models/llama3-8b-decode.onnx",
            *("--arch", "wse2-measured", "--objective", "latency", "--share", "auto", "--context", "4096", "--no-place"),
        ),
        "sharing: choosing",
        2.0,
        False,
    ),
    "construction": Case(("models/llama-7b.onnx", "--arch", "wse2"), "placing", 3.0, True),
    "pipeline": Case(("models/llama-70b.onnx", "--arch", "wse2", "--wafers", "4"), "stage 0", 2.0, True),
}
RUNS: tuple[tuple[str, signal.Signals], ...] = (
    ("frontend", signal.SIGTERM),
    ("conflicts", signal.SIGTERM),
    ("segments", signal.SIGTERM),
    ("sharing", signal.SIGTERM),
    ("sharing", signal.SIGINT),
    ("construction", signal.SIGINT),
    ("construction", signal.SIGTERM),
    ("pipeline", signal.SIGINT),
)


def inputs(folder: Path) -> dict[str, str]:
    """The generated inputs: the chain model and the rules file."""
    from wsealloc.frontend.synthetic import build_chain

    chain = folder / "chain.onnx"
    build_chain(chain, CHAIN_KERNELS)
    rules = folder / "rules.yaml"
    harmless = "".join(f"- grid: l{i % 2}.fc1\n  cores: [1, {384 - i % 7}]\n" for i in range(CONFLICT_RULES))
    pins = "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [0, 0]\n"
    rules.write_text(harmless + pins)
    return {"CHAIN": str(chain), "RULES": str(rules)}


def stop_after(args: list[str], marker: str, wait_s: float, sig: int, plan: Path) -> tuple[int, float, str]:
    """Run ``wsealloc solve ARGS -o plan -v``, signal it ``wait_s`` after ``marker``; (exit code, seconds
    from the signal to the exit, stderr)."""
    cmd = [sys.executable, "-m", "wsealloc.cli", "solve", *args, "-o", str(plan), "--time-limit", "300", "-v"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            break
    time.sleep(wait_s)
    sent = time.perf_counter()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, time.perf_counter() - sent, "".join(seen) + err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", type=float, default=2.0, help="seconds from the signal to the exit")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args()
    from wsealloc.plan.verify import verify_plan

    wanted = args.cases.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as shared:
        given = inputs(Path(shared))
        for name, sig in RUNS:
            if name not in wanted:
                continue
            case = CASES[name]
            solve_args = [given.get(a, a) for a in case.args]
            for i in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    plan = Path(tmp) / "p.json"
                    code, took, err = stop_after(solve_args, case.marker, case.wait_s, sig, plan)
                    written = plan.exists()
                    valid = written and verify_plan(plan).ok
                # a phase before any plan writes nothing; a later one the best plan so far
                ok = code == 130 and took < args.target and (valid if case.plan else not written)
                rows.append(
                    {
                        "case": name,
                        "signal": sig.name,
                        "run": i + 1,
                        "exit": code,
                        "plan": ("valid" if valid else "INVALID") if written else "none",
                        "stop_s": round(took, 2),
                        f"within_{args.target:g}s": ok,
                    }
                )
                if code != 130:
                    print(f"{name} {sig.name}: exit {code}\n{err[-2000:]}", file=sys.stderr)
    print(markdown(rows, list(rows[0])))
    worst = max(r["stop_s"] for r in rows)
    print(f"\nslowest stop {worst:.2f} s (target {args.target:g} s)")
    if not all(r[f"within_{args.target:g}s"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
