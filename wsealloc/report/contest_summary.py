"""The summary ``wsealloc solve X.kgraph`` prints: time against the proven bound, wirelength, score."""

from __future__ import annotations

from rich.console import Console

from wsealloc.contest import ContestOutcome


def contest_summary_lines(out: ContestOutcome) -> list[str]:
    """Human-readable lines describing a contest solve."""
    plan = out.plan
    obj = plan.objective
    fab = plan.fabric
    b = plan.bounds
    slowest = next(k for k in plan.kernels if k.name == obj.max_time_kernel)
    used = sum(k.width * k.height for k in plan.kernels)
    return [
        f"instance {plan.instance.path} ({fab.test}): {len(plan.kernels)} kernels, {out.report.edges_counted} edges "
        f"on a {fab.width}x{fab.height} fabric, memlimit {fab.memlimit:,}",
        f"solver {obj.solver}: {obj.status.value} in {obj.wall_s:.2f} s; max kernel time {obj.max_time:,}, "
        f"lower bound {obj.lower_bound:,} ({obj.time_over_bound:.4f}x; single kernel {b.single_kernel:,}, area {b.area:,})",
        f"slowest kernel {slowest.name} ({slowest.kind} {' '.join(map(str, slowest.exec))}, {slowest.orientation}, "
        f"{slowest.width}x{slowest.height} tiles)",
        f"wirelength {obj.wirelength:,.1f}; score {fab.wdeltat} x {obj.max_time:,} + {fab.wlength} x {obj.wirelength:,.1f} "
        f"= {obj.score:,.1f} (adapter term not modelled: no public definition)",
        f"tiles used {used:,} of {fab.width * fab.height:,} ({used / (fab.width * fab.height):.1%}); "
        "verified by the independent contest checker",
    ]


def print_contest_summary(out: ContestOutcome, console: Console) -> None:
    """Print the summary lines."""
    for line in contest_summary_lines(out):
        console.print(line, highlight=False, soft_wrap=True)
