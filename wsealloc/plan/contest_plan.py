"""The plan document of a contest solve, ``wsealloc.contest-plan/2`` (``wsealloc solve X.kgraph -o``).

It records the instance (path, SHA-256, header overrides), the fabric and weights used, the
objective (largest kernel time, the proven lower bounds, wirelength, score, what the score leaves
out) and every kernel with its execution arguments and rectangle, i.e. the contest solution plus
the figures. ``wsealloc verify plan.json`` turns it back into a :class:`Solution` and checks it with
the independent contest verifier (``plan.contest_verify``), then checks the recorded figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from wsealloc.graph.contest import Fabric
from wsealloc.plan.contest_solution import Solution, parse_solution
from wsealloc.plan.contest_verify import ADAPTER_NOTE, ContestReport
from wsealloc.plan.headline import Headline
from wsealloc.request import SolveRequest
from wsealloc.solvers.base import Status

CONTEST_SCHEMA = "wsealloc.contest-plan/2"  # version 2 records the request
CONTEST_SCHEMAS = ("wsealloc.contest-plan/1", "wsealloc.contest-plan/2")  # every version this release reads
Whole = Annotated[int, Field(strict=True, ge=0, lt=2**62)]


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InstanceRef(_Doc):
    """Which instance, and the header overrides the solve used."""

    path: str
    sha256: str
    header: dict[str, int] = {}


class FabricRef(_Doc):
    """The fabric, memory limit and score weights as solved (the file's header with overrides)."""

    test: str
    width: Whole
    height: Whole
    memlimit: Whole
    wdeltat: Whole
    wlength: Whole
    wadapter: Whole

    @staticmethod
    def of(fabric: Fabric) -> FabricRef:
        """The record of a fabric."""
        return FabricRef(
            test=fabric.test,
            width=fabric.width,
            height=fabric.height,
            memlimit=fabric.memlimit,
            wdeltat=fabric.wdeltat,
            wlength=fabric.wlength,
            wadapter=fabric.wadapter,
        )


class Bounds(_Doc):
    """The proven lower bounds on the largest kernel time (``problem.contest_bounds``)."""

    single_kernel: Whole
    area: Whole
    fabric: Whole
    value: Whole  # the largest of them


class ContestObjective(_Doc):
    """What was optimized and how well."""

    max_time: Whole
    max_time_kernel: str
    lower_bound: Whole
    time_over_bound: float
    wirelength: float  # sum over edges of the L1 distance between rectangle centres (multiples of 0.5)
    score: float  # wdeltat * max_time + wlength * wirelength
    adapter: str = ADAPTER_NOTE
    status: Status  # FEASIBLE: the score's optimum is not proven (the bounds are on the time alone)
    solver: str
    wall_s: Annotated[float, Field(ge=0.0)]


class ContestKernelPlan(_Doc):
    """One kernel: its kind, formal and execution arguments (the solution's order), where it lies, its figures."""

    name: str
    kind: Literal["conv", "dblock", "cblock"]
    formal: tuple[int, ...]
    exec: tuple[int, ...]
    orientation: Literal["R0", "R90"]
    x: Whole
    y: Whole
    width: Whole  # along x, as placed
    height: Whole  # along y, as placed
    time: Whole
    memory: float


class ContestPlan(_Doc):
    """A complete contest plan document."""

    schema_: Literal["wsealloc.contest-plan/1", "wsealloc.contest-plan/2"] = Field("wsealloc.contest-plan/2", alias="schema")
    created_by: str
    request: SolveRequest | None = None  # what the plan answers (None: a version-1 plan)
    instance: InstanceRef
    fabric: FabricRef
    bounds: Bounds
    objective: ContestObjective
    kernels: tuple[ContestKernelPlan, ...]

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json(self) -> str:
        """Serialize with the public field names (``schema``, not ``schema_``)."""
        return self.model_dump_json(by_alias=True, indent=1)

    def headline(self) -> Headline:
        """The largest kernel time against its proven bound, with the wirelength and score."""
        c = self.objective
        gap = round(max(0.0, (c.max_time - c.lower_bound) / max(c.max_time, 1)), 6)
        return Headline(len(self.kernels), c.max_time, c.lower_bound, gap, c.status, None, c.wirelength, c.score)

    def solution(self) -> Solution:
        """The plan as a contest solution, read back through the solution reader (what the independent
        verifier checks: the plan's kernels, exactly as a solution file would state them)."""
        lines = []
        for k in self.kernels:
            lines.append(f"{k.name} = {k.kind}( {' '.join(str(v) for v in (*k.formal, *k.exec))} )")
            lines.append(f"{k.name} : place( {k.x} {k.y} {k.orientation} )")
        return parse_solution("\n".join(lines) + "\n", self.instance.path)


def kernel_records(solution: Solution, report: ContestReport) -> tuple[ContestKernelPlan, ...]:
    """The plan's kernel records of a verified solution (figures from the verifier's report)."""
    figures = {f.name: f for f in report.kernels}
    out = []
    for sk in solution.kernels:
        fig = figures[sk.name]
        assert sk.placement is not None
        out.append(
            ContestKernelPlan(
                name=sk.name,
                kind=sk.kind.value,
                formal=tuple(sk.args.solution_order()),
                exec=tuple(sk.exec_args.solution_order()),
                orientation="R90" if sk.placement.rotated else "R0",
                x=sk.placement.x,
                y=sk.placement.y,
                width=fig.width,
                height=fig.height,
                time=fig.time,
                memory=float(fig.memory),
            )
        )
    return tuple(out)


def read_contest_plan(path: str | Path, data: object) -> ContestPlan:
    """Validate a parsed JSON document as a contest plan (errors name the field)."""
    from pydantic import ValidationError

    from wsealloc.errors import PlanError

    try:
        return ContestPlan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise PlanError(f"{path}: field {where}: {err['msg']}") from exc
