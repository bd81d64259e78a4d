"""``wsealloc verify plan.json`` for a contest plan (``wsealloc.contest-plan/1``, written by ``solve X.kgraph -o``).

The plan's kernels are turned back into a contest :class:`~wsealloc.plan.contest_solution.Solution`
(``ContestPlan.solution``) and checked by the independent contest verifier
(:func:`~wsealloc.plan.contest_verify.verify_solution`: formulas only, no solver code). Then every
number the plan records is compared with what that verifier and the bounds recompute: the instance
(its SHA-256, the fabric and weights under the recorded header overrides), each kernel's rectangle,
time and memory, the largest time, the wirelength, the score and the lower bounds. Violations come
root cause first: a changed instance explains every number after it.

The report has the shape of ``plan.verify.VerifyReport`` (plan, kernels, checks, violations), so
``wsealloc verify`` treats both plan kinds alike; it adds the recomputed figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from wsealloc.errors import InfeasibleError, PlanError, VerificationError
from wsealloc.frontend.sources import KgraphSource
from wsealloc.graph.contest import ContestGraph
from wsealloc.plan.contest_plan import CONTEST_SCHEMA, ContestPlan, FabricRef, read_contest_plan
from wsealloc.plan.contest_verify import ContestReport, verify_solution
from wsealloc.plan.io import file_sha256
from wsealloc.problem.contest_bounds import contest_bounds


@dataclass(frozen=True)
class ContestPlanReport:
    """What was checked in a contest plan and what failed (root causes first), with the recomputed figures."""

    plan: str
    kernels: int
    checks: int
    violations: tuple[str, ...]
    report: ContestReport | None  # the independent verifier on the plan's kernels (None: the instance was not read)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.violations

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` document: ``plan.verify.VerifyReport``'s fields, then the recomputed figures."""
        r = self.report
        return {
            "plan": self.plan,
            "schema": CONTEST_SCHEMA,
            "kernels": self.kernels,
            "checks": self.checks,
            "ok": self.ok,
            "violations": list(self.violations),
            "max_time": None if r is None else r.max_time,
            "wirelength": None if r is None else float(r.wirelength),
            "score": None if r is None or r.score is None else float(r.score),
            "lower_bound": None if r is None else r.lower_bound,
        }


def is_contest_plan(path: str | Path) -> bool:
    """Whether ``path`` is a JSON document of the contest plan schema (False when unreadable: the plan reader
    then says why)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("schema") == CONTEST_SCHEMA


def require_valid_plan(report: ContestPlanReport) -> None:
    """Raise :class:`VerificationError` with the count and the first violation (``plan.verify.require_valid``'s form)."""
    if report.violations:
        more = f" (and {len(report.violations) - 1} more)" if len(report.violations) > 1 else ""
        raise VerificationError(f"{report.plan}: {len(report.violations)} violation(s): {report.violations[0]}{more}")


class _Checks:
    """Counts checks and collects violations in the order found."""

    def __init__(self) -> None:
        self.bad: list[str] = []
        self.count = 0

    def __call__(self, ok: bool, message: str) -> bool:
        self.count += 1
        if not ok:
            self.bad.append(message)
        return ok


def verify_contest_plan(path: str | Path, instance_override: str | None = None) -> ContestPlanReport:
    """Check a contest plan against its instance (``instance_override``: the ``.kgraph`` file, if it moved)."""
    plan_path = Path(path)
    try:
        data = json.loads(plan_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(f"{plan_path}: no such plan file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{plan_path}: cannot read the plan ({exc})") from None
    plan = read_contest_plan(plan_path, data)
    instance = _resolve_instance(plan, plan_path, instance_override)
    check = _Checks()
    check(
        file_sha256(instance) == plan.instance.sha256,
        f"instance {instance} differs from the planned one (SHA-256 mismatch): re-run solve",
    )
    try:
        graph = KgraphSource(path=str(instance), header=plan.instance.header).read()
    except ValidationError as exc:
        raise PlanError(f"{plan_path}: field instance.header: {exc.errors()[0]['msg']}") from exc
    recorded, actual = plan.fabric, FabricRef.of(graph.fabric)
    differ = [
        f"{k} {getattr(recorded, k)} (instance: {getattr(actual, k)})"
        for k in type(actual).model_fields
        if getattr(recorded, k) != getattr(actual, k)
    ]
    check(not differ, f"fabric differs from the instance with the recorded header overrides: {', '.join(differ)}")
    try:
        bounds = contest_bounds(graph)
    except InfeasibleError:
        bounds = None
    report = verify_solution(plan.solution(), graph, bound=None if bounds is None else bounds.value)
    for v in report.violations:  # the independent verdict, root cause first (messages name the kernels)
        check(False, v.message)
    check(True, "the independent contest verifier")
    if report.ok:
        _check_figures(plan, graph, report, check)
        if bounds is not None:
            b = plan.bounds
            for name, mine in (
                ("single_kernel", bounds.single_kernel),
                ("area", bounds.area),
                ("fabric", bounds.fabric),
                ("value", bounds.value),
            ):
                check(getattr(b, name) == mine, f"bounds.{name} recorded as {getattr(b, name):,}, recomputed {mine:,}")
            check(
                plan.objective.lower_bound == bounds.value,
                f"objective.lower_bound recorded as {plan.objective.lower_bound:,}, recomputed {bounds.value:,}",
            )
    return ContestPlanReport(str(plan_path), len(plan.kernels), check.count, tuple(check.bad), report)


def _check_figures(plan: ContestPlan, graph: ContestGraph, report: ContestReport, check: _Checks) -> None:
    """Every recorded figure against the verifier's (only for a legal layout: an illegal one explains them all)."""
    figures = {f.name: f for f in report.kernels}
    for k in plan.kernels:
        f = figures[k.name]
        for what, rec, mine in (("width", k.width, f.width), ("height", k.height, f.height), ("time", k.time, f.time)):
            check(rec == mine, f"{k.name}: {what} recorded as {rec:,}, the formulas give {mine:,}")
        check(
            math.isclose(k.memory, float(f.memory), rel_tol=1e-9),
            f"{k.name}: memory recorded as {k.memory}, the formulas give {float(f.memory)}",
        )
    o = plan.objective
    assert report.max_time is not None and report.score is not None  # a legal layout has every kernel's time
    times = {f.name: f.time for f in report.kernels}
    check(o.max_time == report.max_time, f"objective.max_time recorded as {o.max_time:,}, recomputed {report.max_time:,}")
    check(
        times.get(o.max_time_kernel) == report.max_time,
        f"objective.max_time_kernel {o.max_time_kernel} is not a slowest kernel (e.g. {report.max_time_kernel})",
    )
    check(
        math.isclose(o.wirelength, float(report.wirelength), abs_tol=1e-9),
        f"objective.wirelength recorded as {o.wirelength:,}, recomputed {float(report.wirelength):,}",
    )
    check(
        math.isclose(o.score, float(report.score), rel_tol=1e-12, abs_tol=1e-9),
        f"objective.score recorded as {o.score:,}, recomputed {float(report.score):,} "
        f"({graph.fabric.wdeltat} x {report.max_time:,} + {graph.fabric.wlength} x {float(report.wirelength):,})",
    )


def _resolve_instance(plan: ContestPlan, plan_path: Path, override: str | None) -> Path:
    """The instance file: ``--model``, else the recorded path as given or next to the plan."""
    if override:
        if not Path(override).is_file():
            raise PlanError(f"--model {override}: no such instance file (a path to the .kgraph the plan was made from)")
        return Path(override)
    for c in (Path(plan.instance.path), plan_path.parent / plan.instance.path):
        if c.is_file():
            return c
    raise PlanError(
        f"{plan_path}: instance {plan.instance.path!r} not found (looked in the current directory and next to the plan); "
        "pass --model PATH"
    )
