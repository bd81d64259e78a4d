"""How fast a solve stops on SIGINT/SIGTERM: seconds from the signal to the process's exit.

Target (issue 17; docs/cli.md): every phase stops within 2 s of the signal, writing the best plan so
far (exit 130). The tests (slow group, tests/test_cli.py) check the same runs with a wide margin, since
a loaded CI machine cannot promise 2 s; this script keeps the strict target. Each case is a real
``wsealloc solve -v`` signalled a few seconds after the progress line of the phase it interrupts:

* ``construction``: LLaMA-7B's placement construction (about 35 s of work), SIGINT and SIGTERM;
* ``pipeline``: LLaMA-70B on 4 wafers, while placing stage 0.

Usage::

    python benchmarks/stop_latency.py [--repeat 3] [--target 2.0]

Exits 1 when a run misses the target (or does not exit 130 with a valid plan).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, markdown  # noqa: E402

CASES: dict[str, tuple[list[str], str, float]] = {
    # name: (solve arguments, progress marker, seconds after it)
    "construction": (["models/llama-7b.onnx", "--arch", "wse2"], "placing", 3.0),
    "pipeline": (["models/llama-70b.onnx", "--arch", "wse2", "--wafers", "4"], "stage 0", 2.0),
}


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
    args = parser.parse_args()
    from wsealloc.plan.verify import verify_plan

    rows = []
    runs = [("construction", signal.SIGINT), ("construction", signal.SIGTERM), ("pipeline", signal.SIGINT)]
    for name, sig in runs:
        solve_args, marker, wait_s = CASES[name]
        for i in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                plan = Path(tmp) / "p.json"
                code, took, err = stop_after(solve_args, marker, wait_s, sig, plan)
                valid = plan.exists() and verify_plan(plan).ok
            ok = code == 130 and valid and took < args.target
            rows.append(
                {
                    "case": name,
                    "signal": signal.Signals(sig).name,
                    "run": i + 1,
                    "exit": code,
                    "plan_valid": valid,
                    "stop_s": round(took, 2),
                    f"within_{args.target:g}s": ok,
                }
            )
            if code != 130:
                print(f"{name} {signal.Signals(sig).name}: exit {code}\n{err[-2000:]}", file=sys.stderr)
    print(markdown(rows, list(rows[0])))
    worst = max(r["stop_s"] for r in rows)
    print(f"\nslowest stop {worst:.2f} s (target {args.target:g} s)")
    if not all(r[f"within_{args.target:g}s"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
