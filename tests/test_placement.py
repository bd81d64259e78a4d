"""Placement: valid rectangles (bounds, overlap, die rule, defects) checked by the verifier, and the
communication model by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wsealloc.api import solve
from wsealloc.cost.comm import MeshParams, comm_costs, die_crossings, rect_distance
from wsealloc.plan.verify import verify_plan

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = ROOT / "models" / "tiny" / "attention.onnx"


def _rects(plan_path: Path) -> list[tuple[int, int, int, int, str]]:
    doc = json.loads(plan_path.read_text())
    return [(*k["placement"], *k["grid"], k["name"]) for k in doc["kernels"]]


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["wafer.die_boundary=forbid"],
        ["wafer.die_boundary=penalty", "wafer.die_crossing_penalty_cycles=50"],
        # (the defects in the slow group: test_defects_are_avoided and the summary's test place around them)
        pytest.param(["wafer.defects.cores=[[0,0],[3,5],[10,20],[7,7]]"], marks=pytest.mark.slow),
        pytest.param(["wafer.defects.rate=0.02", "wafer.defects.seed=7"], marks=pytest.mark.slow),
    ],
)
def test_placed_plans_verify(sets: list[str], tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    result = solve(ATTENTION, "tiny", sets=sets, output=out, time_limit=5)
    assert result.plan.objective.placed
    report = verify_plan(out)
    assert report.ok, report.violations
    rects = _rects(out)
    occupied = np.zeros((16, 24), dtype=int)
    for row, col, r, c, _ in rects:
        occupied[row : row + r, col : col + c] += 1
    assert occupied.max() <= 1
    if "wafer.die_boundary=forbid" in sets:
        assert all(row // 8 == (row + r - 1) // 8 and col // 12 == (col + c - 1) // 12 for row, col, r, c, _ in rects)
    # the placed bottleneck can never beat the allocation-only optimum (the bound)
    obj = result.plan.objective
    assert obj.lower_bound_cycles is not None and obj.bottleneck_cycles >= obj.lower_bound_cycles


def test_defects_are_avoided(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    defects = [[r, c] for r in range(16) for c in range(0, 24, 5)]
    solve(ATTENTION, "tiny", sets=[f"wafer.defects.cores={json.dumps(defects)}"], output=out, time_limit=2)
    assert verify_plan(out).ok
    bad = {tuple(d) for d in defects}
    for row, col, r, c, name in _rects(out):
        cells = {(y, x) for y in range(row, row + r) for x in range(col, col + c)}
        assert not cells & bad, name


def test_rect_distance_by_hand() -> None:
    a = np.array([[0, 0, 2, 3]])  # rows 0-1, cols 0-2
    assert rect_distance(a, np.array([[0, 3, 2, 2]]))[0] == 1  # touching on the right
    assert rect_distance(a, np.array([[5, 6, 1, 1]]))[0] == (6 - 2) + (5 - 1)
    assert die_crossings(np.array([[7, 11, 2, 2]]), 8, 12)[0] == 2


def test_comm_costs_by_hand() -> None:
    mesh = MeshParams(
        rows=16,
        cols=24,
        tile_rows=8,
        tile_cols=12,
        link_bytes_per_cycle=4.0,
        hop_latency=2,
        die_rows=8,
        die_cols=12,
        die_penalty=0,
    )
    rects = np.array([[0, 0, 8, 4], [0, 20, 8, 4]])
    # one flow of 3200 bytes from kernel 0 to kernel 1 in the same rows: distance 17 hops; it enters
    # horizontally as a bundle of 8 rows: 400 bytes per link / 4 B/cycle -> 100 busy cycles.
    # kernel 1: latency 56 with fill 2*(8+4) = 24 -> max(compute, NoC) = 32 -> 68 extra cycles
    c = comm_costs(rects, np.array([30.0, 56.0]), np.array([0]), np.array([1]), np.array([3200.0]), mesh)
    assert c.distance_cycles.tolist() == [0, 2 * 17]
    assert c.congestion_cycles.tolist() == [0, 100 - 32]
    assert c.comm_cycles.tolist() == [0, 34 + 68]
    assert c.traffic_distance == 3200 * 17


def test_vertical_leg_runs_in_the_wider_columns() -> None:
    mesh = MeshParams(
        rows=32,
        cols=24,
        tile_rows=8,
        tile_cols=12,
        link_bytes_per_cycle=1.0,
        hop_latency=0,
        die_rows=8,
        die_cols=12,
        die_penalty=0,
    )
    latency, src, dst, size = np.array([0.0, 0.0]), np.array([0]), np.array([1]), np.array([1600.0])
    # consumer 8 columns wide below a 2-column producer: X-then-Y, down the consumer's 8 columns
    # (200 B/link) instead of the producer's 2 (800 B/link)
    wide_below = np.array([[0, 0, 8, 2], [16, 0, 8, 8]])
    assert comm_costs(wide_below, latency, src, dst, size, mesh).congestion_cycles[1] == 200
    # consumer 2 columns wide below an 8-column producer: Y-then-X, down the producer's 8 columns
    narrow_below = np.array([[0, 0, 8, 8], [16, 0, 8, 2]])
    assert comm_costs(narrow_below, latency, src, dst, size, mesh).congestion_cycles[1] == 200
    # and to the right and below a 2-column producer: X-then-Y runs 8 rows (producer) to the right,
    # 200 B/link, then down the consumer's 4 columns, 400 B/link: the flow is busy 400 cycles
    right_below = np.array([[0, 0, 8, 2], [16, 10, 8, 4]])
    assert comm_costs(right_below, latency, src, dst, size, mesh).congestion_cycles[1] == 400


def test_route_with_the_widest_narrowest_leg_wins() -> None:
    mesh = MeshParams(32, 24, 8, 12, 1.0, 0, 8, 12, 0)
    latency, src, dst, size = np.array([0.0, 0.0]), np.array([0]), np.array([1]), np.array([1600.0])
    # a 1-row, 2-column producer feeds a 16-row, 4-column consumer below and to its right.
    # X-then-Y: right in the producer's 1 row (1600 B/link), down the consumer's 4 columns (400);
    # Y-then-X: down the producer's 2 columns (800), right in the consumer's 16 rows (100).
    # The narrowest legs are 1 and 2 links: Y-then-X, busy 800 cycles (the wider vertical leg alone
    # would pick X-then-Y and its 1-row bottleneck: 1600).
    rects = np.array([[0, 0, 1, 2], [4, 10, 16, 4]])
    assert comm_costs(rects, latency, src, dst, size, mesh).congestion_cycles[1] == 800
    # mirrored roles: a 16-row, 2-column producer feeds a 1-row, 4-column consumer: X-then-Y runs
    # right in 16 rows (100) and down 4 columns (400); Y-then-X would turn into the consumer's 1 row
    rects = np.array([[0, 0, 16, 2], [20, 10, 1, 4]])
    assert comm_costs(rects, latency, src, dst, size, mesh).congestion_cycles[1] == 400


def test_communication_parts_are_recorded_verified_and_printed(tmp_path: Path) -> None:
    from wsealloc.report.summary import communication, summary_lines

    out = tmp_path / "p.json"
    result = solve(ATTENTION, "tiny", sets=["wafer.die_boundary=penalty", "wafer.die_crossing_penalty_cycles=50"], output=out)
    kernels = result.plan.kernels
    for k in kernels:
        assert k.distance_cycles is not None and k.congestion_cycles is not None and k.die_cycles is not None
        assert k.comm_cycles == k.distance_cycles + k.congestion_cycles + k.die_cycles
    fed = [k for k in kernels if k.comm_cycles]
    assert fed and all(communication(k).startswith(f", communication {k.comm_cycles:,}") for k in fed)
    bk = next(k for k in kernels if k.name == result.plan.objective.bottleneck_kernel)
    assert communication(bk) in summary_lines(result)[2]
    # a tampered part is caught, even when the total still adds up
    doc = json.loads(out.read_text())
    victim = next(k for k in doc["kernels"] if k["distance_cycles"])
    victim["distance_cycles"] -= 1
    victim["congestion_cycles"] += 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    report = verify_plan(bad)
    assert not report.ok and any("distance/congestion/die" in v for v in report.violations)


def test_greedy_baseline_and_search_share_the_placement_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy allocation's layout is built inside the run's one deadline: the search gets what is
    left of it (the run ends within the limit), and the plan's wall time counts it (a search that ends
    at once at the bound reported 0.01 s of a 2.5 s placement)."""
    import time

    import wsealloc.driver as driver

    seen: list[float] = []
    real_baseline, real_solver = driver.place_baseline, driver.place_solver

    def slow_baseline(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.5)
        return real_baseline(*args, **kwargs)

    def spy(problem, options, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(options.deadline.remaining())
        return real_solver(problem, options, **kwargs)

    monkeypatch.setattr(driver, "place_baseline", slow_baseline)
    monkeypatch.setattr(driver, "place_solver", spy)
    out = solve(ATTENTION, "tiny", time_limit=5)
    assert out.placement is not None and out.placement.rects is not None
    assert len(seen) == 1 and seen[0] <= 5 - 0.5
    assert out.plan.objective.wall_s >= 0.5


def test_the_summary_keeps_the_baseline_when_its_layout_ran_out_of_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy allocation not placed in the time: the baseline's line stays (it vanished), saying so."""
    import wsealloc.driver as driver
    from wsealloc.report.summary import summary_lines

    monkeypatch.setattr(driver, "place_baseline", lambda *args, **kwargs: None)
    out = solve(ATTENTION, "tiny", time_limit=5)
    assert out.plan.objective.placed and out.plan.baseline.placed_value_cycles is None
    line = next(t for t in summary_lines(out) if t.startswith("baseline greedy"))
    assert line.endswith("(FEASIBLE), not placed in the time (no placed speed-up)"), line


def test_construction_finds_a_first_layout_past_its_deadline(tmp_path: Path) -> None:
    """A deadline already past still yields a valid layout (the best found, never none for the clock):
    written as a plan, the independent verifier accepts it (inside the wafer, no overlap, no defective
    core, die rule, every kernel's op model and stage time recomputed)."""
    import time

    from wsealloc.budget import Deadline
    from wsealloc.plan.build import make_plan
    from wsealloc.problem.placement import build_placement_problem
    from wsealloc.solvers.base import PlacementResult, Status
    from wsealloc.solvers.place import construct_best, evaluate

    sets = ["wafer.defects.rate=0.02", "wafer.defects.seed=7"]  # defects to avoid, as in test_summary_reports_...
    out = solve(ATTENTION, "tiny", sets=sets, place=False)
    bound = out.plan.objective.lower_bound_cycles
    assert bound is not None
    problem = build_placement_problem(out.costs, bound)
    built = construct_best(problem, Deadline(time.perf_counter() - 1.0))
    placed = None if built is None else built.placed
    assert placed is not None and placed.rects.shape == (problem.n_kernels, 4)
    objective, traffic = evaluate(problem, placed)
    status = Status.OPTIMAL if objective <= bound else Status.FEASIBLE
    layout = PlacementResult("strips", status, placed.rects, placed.dataflow, objective, bound, 0.0, traffic)
    plan = make_plan(out.costs, out.request.onnx_model, out.result, out.baseline, layout, problem)
    path = tmp_path / "late.json"
    path.write_text(plan.to_json())
    report = verify_plan(path)
    assert report.ok, report.violations
    assert plan.objective.placed and plan.objective.bottleneck_cycles == objective >= bound


def test_summary_reports_what_placing_cost() -> None:
    """A placement that loses cycles against the allocation says how many, for which kernels, the
    cores it kept and the defective cores it avoided."""
    from wsealloc.problem.placement import defect_mask
    from wsealloc.report.summary import placement_cost, summary_lines

    sets = ["wafer.defects.rate=0.02", "wafer.defects.seed=7"]
    out = solve(ATTENTION, "tiny", sets=sets, time_limit=2)
    alloc, placed = out.result.objective, out.plan.objective.bottleneck_cycles
    assert alloc is not None and placed > alloc  # the 16 x 24 tiny wafer with 2% defects cannot keep the allocation
    line = placement_cost(out)
    assert line is not None and line in summary_lines(out)
    unit = "cycle" if placed - alloc == 1 else "cycles"
    assert f"+{placed - alloc:,} {unit} (" in line and f"optimum {alloc:,}" in line
    d = out.costs.arch.wafer.defects
    assert f"{int(defect_mask(16, 24, d.cores, d.rate, d.seed).sum())} defective cores avoided" in line
    # an allocation-only plan has nothing to report
    assert placement_cost(solve(ATTENTION, "tiny", place=False)) is None


def _dense_busy(
    rects: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, mesh: MeshParams, group: np.ndarray
) -> np.ndarray:
    """Reference for the congestion model, link by link on the full mesh: every leg of every flow
    (``comm._route``) loads each link it crosses with bytes / bundle width, flows of one multicast
    group count once per link (their largest load), each direction of a link on its own; a flow is
    busy for its most loaded link."""
    from wsealloc.cost.comm import _route

    routes = [_route(rects[s], rects[t], b) for s, t, b in zip(src.tolist(), dst.tolist(), nbytes.tolist(), strict=True)]

    def way(f: int, kind: int) -> int:  # direction of travel: 1 south/east, 0 north/west
        axis = 0 if kind == 0 else 1
        return int(rects[dst[f], axis] > rects[src[f], axis])

    # one grid per (leg kind, direction): links carry each direction on their own channel
    loads = {(kind, d): np.zeros((mesh.rows + 2, mesh.cols + 2)) for kind in (0, 1) for d in (0, 1)}
    for g in sorted(set(group.tolist())):
        for (kind, d), grid in loads.items():
            mine = np.zeros_like(grid)
            for f in np.flatnonzero(group == g).tolist():
                leg = routes[f][kind]
                if leg is not None and way(f, kind) == d:
                    (y0, y1, x0, x1), value = leg
                    np.maximum(mine[y0:y1, x0:x1], value, out=mine[y0:y1, x0:x1])
            grid += mine
    busy = np.zeros(len(routes))
    for f, route in enumerate(routes):
        for kind in (0, 1):
            if route[kind] is not None:
                y0, y1, x0, x1 = route[kind][0]
                busy[f] = max(busy[f], loads[kind, way(f, kind)][y0:y1, x0:x1].max())
    return busy / mesh.link_bytes_per_cycle


def test_every_flow_routed_at_once_is_routed_as_one_by_one() -> None:
    """``comm._legs`` (every flow at once, for the congestion model) gives each flow the legs and
    bytes per link of ``comm._route``, exactly: rectangles overlapping, touching, apart, in any order."""
    from wsealloc.cost.comm import _legs, _route

    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(2, 12))
        r, c = rng.integers(1, 9, n), rng.integers(1, 9, n)
        rects = np.stack([rng.integers(0, 25, n), rng.integers(0, 25, n), r, c], axis=1)
        m = int(rng.integers(1, 30))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        nbytes = rng.random(m) * 1e6
        legs = _legs(rects, src, dst, nbytes)
        for f, (s, t, b) in enumerate(zip(src.tolist(), dst.tolist(), nbytes.tolist(), strict=True)):
            vleg, hleg = _route(rects[s], rects[t], b)
            at_once_v = ((int(legs.v0[f]), int(legs.v1[f]), int(legs.vx0[f]), int(legs.vx1[f])), float(legs.vload[f]))
            at_once_h = ((int(legs.hy0[f]), int(legs.hy1[f]), int(legs.h0[f]), int(legs.h1[f])), float(legs.hload[f]))
            assert (at_once_v if legs.vertical[f] else None) == vleg
            assert (at_once_h if legs.horizontal[f] else None) == hleg


def test_bincount_adds_its_weights_in_the_order_given() -> None:
    """``comm._congestion`` adds legs to its load grid with ``np.bincount`` and keeps the old one-by-one
    order of float additions only because bincount adds its weights in the order given (numpy does
    not document it): 1e16 + 1 - 1e16 is 0 in that order, 1 in any other."""
    assert np.bincount([0, 0, 0], weights=[1e16, 1.0, -1e16])[0] == 0.0
    assert np.bincount([0, 0, 0], weights=[1e16, -1e16, 1.0])[0] == 1.0


def test_congestion_matches_a_link_by_link_reference() -> None:
    from wsealloc.cost.comm import _congestion

    mesh = MeshParams(30, 40, 10, 20, 4.0, 1, 10, 20, 0)
    rng = np.random.default_rng(3)
    for _ in range(60):
        n = int(rng.integers(2, 9))
        r, c = rng.integers(1, 12, n), rng.integers(1, 15, n)
        rects = np.stack([rng.integers(0, 30 - r + 1), rng.integers(0, 40 - c + 1), r, c], axis=1)
        m = int(rng.integers(1, 12))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        nbytes = rng.integers(1, 5000, src.size).astype(np.float64)
        group = rng.integers(0, 4, src.size)  # some flows share a multicast group
        got = _congestion(rects, src, dst, nbytes, mesh, group)
        assert np.allclose(got, _dense_busy(rects, src, dst, nbytes, mesh, group), rtol=1e-12, atol=1e-9)
