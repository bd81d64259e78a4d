"""CP-SAT large-neighbourhood search over placements (part of the CP-SAT backend: imports ortools).

Each step frees a *window*: the current bottleneck kernel and its neighbours in dataflow order. Their
rectangles' bounding box is the arena; the other kernels' rectangles and defective cores inside it are
fixed obstacles. CP-SAT then decides shapes and positions of the window's kernels together:

* per kernel, one of a few candidate shapes (Boolean ``use[k,s]``, exactly one), sharing start
  variables ``x[k]``, ``y[k]``; optional intervals feed one ``AddNoOverlap2D`` with the obstacles;
* stage time ``T >= latency[k,s] + hop * dist(k, producer)`` for window kernels, and for kernels
  outside the window fed by one inside (their distance changes too); ``dist`` is the gap distance of
  the rectangles, linear via ``dx >= x_a - x_end_b + 1``, ``dx >= 0``;
* minimize T. The step's result is re-evaluated with the full communication model (congestion, die
  penalty) and kept only if the overall (bottleneck, traffic x distance) improves.

``pack_ignoring_comm`` is the packing relaxation of placement (communication ignored), a diagnostic
for targets.

Integer scale: cycles. Each step has a deterministic-time budget (reproducible for a given seed and
one worker); the wall-clock deadline only caps the whole search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from wsealloc.arch.schema import DieBoundary
from wsealloc.problem.placement import PlacementProblem
from wsealloc.solvers.base import SolveOptions, Status
from wsealloc.solvers.strips import Placed, score

STEP_SECONDS = 10.0  # wall-clock cap per step
STEP_DETERMINISTIC_TIME = 1.0  # CP-SAT deterministic time units per step (~1 s here)
MAX_SHAPES = 24


def _shape_options(
    problem: PlacementProblem, k: int, max_rows: int, max_cols: int, current: tuple[int, int], ceiling: int
) -> list[tuple[int, int, int, int]]:
    """Candidate (r, c, latency, dataflow) for kernel k inside an arena, faster than ``ceiling``."""
    shape = problem.shape(k)
    options: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    hmax = shape.height_index(max_rows)
    lo = problem.lower_bound
    targets = np.unique(np.linspace(lo, max(lo, ceiling), 8).astype(np.int64))
    for hidx in range(hmax + 1):
        for t in targets.tolist():
            c = shape.width_for(hidx, int(t))
            if 0 < c <= max_cols:
                r = int(shape.best_r[hidx, c])
                if r <= max_rows and (r, c) not in options:
                    options[(r, c)] = (r, c, int(shape.best[hidx, c]), int(shape.best_df[hidx, c]))
    # always keep the current shape (a feasible fallback)
    r0, c0 = current
    h0 = shape.height_index(r0)
    if h0 >= 0 and 0 < c0 < shape.best.shape[1]:
        options[(r0, c0)] = (r0, c0, int(shape.best[h0, c0]), int(shape.best_df[h0, c0]))
    ranked = sorted(options.values(), key=lambda o: (o[2], o[0] * o[1]))
    if (r0, c0) not in options or (r0, c0) in {(o[0], o[1]) for o in ranked[:MAX_SHAPES]}:
        return ranked[:MAX_SHAPES]  # (the current shape is legal, so a table row holds it: the first test never holds)
    return ranked[: MAX_SHAPES - 1] + [options[(r0, c0)]]


def _step(problem: PlacementProblem, placed: Placed, window: list[int], options: SolveOptions, seconds: float) -> Placed | None:
    # a kernel whose corner the user fixed (or that touches its group) never moves: an obstacle like the kernels outside
    window = [k for k in window if not problem.fixed(k)]
    if not window:
        return None
    rects = placed.rects
    stage, _ = problem.evaluate(rects, placed.latency)
    ceiling = int(stage.max())
    y0 = int(min(rects[k, 0] for k in window))
    x0 = int(min(rects[k, 1] for k in window))
    y1 = int(max(rects[k, 0] + rects[k, 2] for k in window))
    x1 = int(max(rects[k, 1] + rects[k, 3] for k in window))
    in_window = set(window)
    m = cp_model.CpModel()
    T = m.new_int_var(0, ceiling, "window_stage_cycles")
    xs, ys, xe, ye, uses, opts = {}, {}, {}, {}, {}, {}
    boxes_x, boxes_y = [], []
    for k in window:
        cand = _shape_options(problem, k, y1 - y0, x1 - x0, (int(rects[k, 2]), int(rects[k, 3])), ceiling)
        opts[k] = cand
        xs[k] = m.new_int_var(x0, x1 - 1, f"x_{k}")
        ys[k] = m.new_int_var(y0, y1 - 1, f"y_{k}")
        uses[k] = [m.new_bool_var(f"use_{k}_{s}") for s in range(len(cand))]
        m.add_exactly_one(uses[k])
        width = sum(o[1] * u for o, u in zip(cand, uses[k], strict=True))
        height = sum(o[0] * u for o, u in zip(cand, uses[k], strict=True))
        xe[k] = xs[k] + width
        ye[k] = ys[k] + height
        m.add(xe[k] <= x1)
        m.add(ye[k] <= y1)
        fence = problem.fences[k] if problem.fences else None
        if fence is not None:  # the area the user gave it
            m.add(xs[k] >= fence[1])
            m.add(ys[k] >= fence[0])
            m.add(xe[k] <= fence[1] + fence[3])
            m.add(ye[k] <= fence[0] + fence[2])
        if problem.die_rule is DieBoundary.FORBID:
            # the rectangle stays inside one die: x in [d*W, (d+1)*W - width] for some die column d
            mesh = problem.mesh
            die_x = m.new_int_var(0, mesh.cols // mesh.die_cols, f"diex_{k}")
            die_y = m.new_int_var(0, mesh.rows // mesh.die_rows, f"diey_{k}")
            m.add(xs[k] >= mesh.die_cols * die_x)
            m.add(xe[k] <= mesh.die_cols * (die_x + 1))
            m.add(ys[k] >= mesh.die_rows * die_y)
            m.add(ye[k] <= mesh.die_rows * (die_y + 1))
            m.add_hint(die_x, int(rects[k, 1]) // mesh.die_cols)
            m.add_hint(die_y, int(rects[k, 0]) // mesh.die_rows)
        for o, u in zip(cand, uses[k], strict=True):
            boxes_x.append(m.new_optional_fixed_size_interval_var(xs[k], o[1], u, f"ix_{k}_{o[0]}x{o[1]}"))
            boxes_y.append(m.new_optional_fixed_size_interval_var(ys[k], o[0], u, f"iy_{k}_{o[0]}x{o[1]}"))
        # hint: the current shape at the current position
        cur = next(s for s, o in enumerate(cand) if (o[0], o[1]) == (int(rects[k, 2]), int(rects[k, 3])))
        for s, u in enumerate(uses[k]):
            m.add_hint(u, s == cur)
        m.add_hint(xs[k], int(rects[k, 1]))
        m.add_hint(ys[k], int(rects[k, 0]))
    # obstacles: other kernels' rectangles and defective cores inside the arena
    for j in range(problem.n_kernels):
        if j in in_window:
            continue
        ry, rx, rr, rc = (int(v) for v in rects[j])
        oy0, ox0, oy1, ox1 = max(ry, y0), max(rx, x0), min(ry + rr, y1), min(rx + rc, x1)
        if oy0 < oy1 and ox0 < ox1:
            boxes_x.append(m.new_fixed_size_interval_var(ox0, ox1 - ox0, f"ox_{j}"))
            boxes_y.append(m.new_fixed_size_interval_var(oy0, oy1 - oy0, f"oy_{j}"))
    for i, (ry, rx, rr, rc) in enumerate(problem.keep_out):  # the user's keep-outs: one box each
        oy0, ox0, oy1, ox1 = max(ry, y0), max(rx, x0), min(ry + rr, y1), min(rx + rc, x1)
        if oy0 < oy1 and ox0 < ox1:
            boxes_x.append(m.new_fixed_size_interval_var(ox0, ox1 - ox0, f"keepout_x_{i}"))
            boxes_y.append(m.new_fixed_size_interval_var(oy0, oy1 - oy0, f"keepout_y_{i}"))
    for dy, dx in np.argwhere(problem.defects[y0:y1, x0:x1]).tolist():
        boxes_x.append(m.new_fixed_size_interval_var(x0 + dx, 1, f"dx_{dy}_{dx}"))
        boxes_y.append(m.new_fixed_size_interval_var(y0 + dy, 1, f"dy_{dy}_{dx}"))
    m.add_no_overlap_2d(boxes_x, boxes_y)

    def pos(k: int) -> tuple[Any, Any, Any, Any]:
        if k in in_window:
            return xs[k], ys[k], xe[k], ye[k]
        ry, rx, rr, rc = (int(v) for v in rects[k])
        return rx, ry, rx + rc, ry + rr

    def dist(a: int, b: int) -> Any:
        ax, ay, axe, aye = pos(a)
        bx, by, bxe, bye = pos(b)
        dx = m.new_int_var(0, problem.mesh.cols, "")
        dy = m.new_int_var(0, problem.mesh.rows, "")
        m.add(dx >= ax - bxe + 1)
        m.add(dx >= bx - axe + 1)
        m.add(dy >= ay - bye + 1)
        m.add(dy >= by - aye + 1)
        return dx + dy

    lat = {k: sum(o[2] * u for o, u in zip(opts[k], uses[k], strict=True)) for k in window}
    for k in window:
        m.add(lat[k] <= T)
    if not problem.objective.charges_communication:
        _wire_objective(m, problem, placed, window, T, pos)
    else:
        _stage_objective(m, problem, placed, in_window, lat, T, dist)
    solver = cp_model.CpSolver()
    # A deterministic budget per step makes the search reproducible; wall-clock time only caps it.
    solver.parameters.max_deterministic_time = STEP_DETERMINISTIC_TIME
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = max(1, options.workers)
    solver.parameters.random_seed = options.seed
    solver.parameters.catch_sigint_signal = False  # see cpsat._solver
    with options.stop.active(solver.stop_search):
        status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    new_rects = rects.copy()
    dfs, lats = placed.dataflow.copy(), placed.latency.copy()
    for k in window:
        s = next(i for i, u in enumerate(uses[k]) if solver.boolean_value(u))
        r, c, latency, df = opts[k][s]
        new_rects[k] = (solver.value(ys[k]), solver.value(xs[k]), r, c)
        dfs[k], lats[k] = df, latency
    return Placed(new_rects, dfs, lats)


def _stage_objective(
    m: cp_model.CpModel,
    problem: PlacementProblem,
    placed: Placed,
    in_window: set[int],
    lat: dict[int, Any],
    T: cp_model.IntVar,
    dist: Callable[[int, int], Any],
) -> None:
    """ONNX: every flow touching the window keeps its consumer's latency + hops within T; minimize T."""
    hop = problem.mesh.hop_latency
    for s, t in zip(problem.flows.src.tolist(), problem.flows.dst.tolist(), strict=True):
        if s not in in_window and t not in in_window:
            continue
        base = lat[t] if t in in_window else int(placed.latency[t])
        m.add(base + hop * dist(s, t) <= T)
    m.minimize(T)


def _wire_objective(
    m: cp_model.CpModel,
    problem: PlacementProblem,
    placed: Placed,
    window: list[int],
    T: cp_model.IntVar,
    pos: Callable[[int], tuple[Any, Any, Any, Any]],
) -> None:
    """The contest: T is at least every kernel's time (the window's and the fixed ones'), and the
    objective is the window's share of the score, time_weight * T + wire_weight * (centre distances of
    the flows touching the window). Doubled centres (2 * centre = start + end) keep it integral."""
    in_window = set(window)
    outside = [int(placed.latency[k]) for k in range(problem.n_kernels) if k not in in_window]
    if outside:
        m.add(max(outside) <= T)
    cap = problem.objective.time_cap
    if cap is not None and int(placed.latency.max()) <= cap:  # a layout within the cap stays within it
        m.add(cap >= T)
    half: list[Any] = []
    rows, cols = problem.mesh.rows, problem.mesh.cols
    for s, t in zip(problem.flows.src.tolist(), problem.flows.dst.tolist(), strict=True):
        if s not in in_window and t not in in_window:
            continue
        sx, sy, sxe, sye = pos(s)
        tx, ty, txe, tye = pos(t)
        dx = m.new_int_var(0, 2 * cols, "")
        dy = m.new_int_var(0, 2 * rows, "")
        m.add_abs_equality(dx, sx + sxe - tx - txe)
        m.add_abs_equality(dy, sy + sye - ty - tye)
        half += [dx, dy]
    wt, ww = _integral_weights(problem.objective.time_weight, problem.objective.wire_weight)
    m.minimize(2 * wt * T + ww * sum(half))


def _integral_weights(time_weight: float, wire_weight: float) -> tuple[int, int]:
    """The two weights as integers in the same ratio (the contest's are integers already)."""
    scale = 1 if float(time_weight).is_integer() and float(wire_weight).is_integer() else 1000
    return round(time_weight * scale), round(wire_weight * scale)


def _window_centres(problem: PlacementProblem, placed: Placed) -> list[int]:
    """Kernels to centre LNS windows on, most promising first: the bottleneck; for the contest then
    every kernel by the weighted wirelength of its flows (long wires first)."""
    stage, _ = problem.evaluate(placed.rects, placed.latency)
    first = int(np.argmax(stage))
    if problem.objective.charges_communication:
        return [first]
    r = placed.rects.astype(np.int64)
    cy2, cx2 = 2 * r[:, 0] + r[:, 2], 2 * r[:, 1] + r[:, 3]
    fl = problem.flows
    length = np.abs(cy2[fl.src] - cy2[fl.dst]) + np.abs(cx2[fl.src] - cx2[fl.dst])
    per_kernel = np.zeros(problem.n_kernels)
    np.add.at(per_kernel, fl.src, length)
    np.add.at(per_kernel, fl.dst, length)
    ranked = [int(k) for k in np.argsort(-per_kernel, kind="stable")]
    return [first] + [k for k in ranked if k != first]


def refine(problem: PlacementProblem, placed: Placed, options: SolveOptions) -> Placed | None:
    """Improve ``placed`` by CP-SAT steps on windows around the bottleneck until the options' deadline."""
    deadline = options.deadline
    best = placed
    best_score = score(problem, best)
    tried: set[tuple[int, int]] = set()
    radius = 4
    while deadline.remaining() > 0.5 and not deadline.stopped:
        b = next((k for k in _window_centres(problem, best) if (k, radius) not in tried), None)
        if b is None:
            if radius >= 16:
                break
            radius *= 2
            continue
        tried.add((b, radius))
        window = list(range(max(0, b - radius), min(problem.n_kernels, b + radius + 1)))
        seconds = min(STEP_SECONDS, max(0.1, deadline.remaining() - 0.2))
        candidate = _step(problem, best, window, options, seconds)
        if candidate is None:
            continue
        new_score = score(problem, candidate)
        if new_score < best_score:
            best, best_score = candidate, new_score
            tried.clear()
            radius = 4
    return best


def pack_ignoring_comm(problem: PlacementProblem, target: int, options: SolveOptions) -> tuple[Status, np.ndarray | None]:
    """Can every kernel get a legal rectangle meeting ``target``, all packed without overlap on the
    wafer's working cores, if communication is ignored? A relaxation of placement (a diagnostic for
    targets, ``benchmarks/placement_limits.py``): "no packing" proves no placement reaches ``target``.

    Each kernel with a producer must meet ``target - hop`` (its distance is at least one hop). The
    user's corners and areas hold as in every placement (a kernel at a fixed corner starts there, one
    kept within an area stays inside it), so a packing found keeps them and "no packing" under them
    is still a proof. Die rules and touch groups are ignored (a further relaxation). Besides
    ``AddNoOverlap2D``, the two cumulative views of
    the packing (each column holds at most the wafer's rows of rectangles, each row at most its
    columns) are stated: redundant, but without them CP-SAT finds no packing of a tight instance
    (ResNet-50 at 84% area) in minutes; with them it does in 6-70 s (measured).

    Returns (FEASIBLE, rects [n, 4]: row, col, r, c) for a packing, (INFEASIBLE, None) when none exists
    (a proof that no placement reaches ``target``) or (UNKNOWN, None) at
    the time limit."""
    mesh = problem.mesh
    has_producer = np.zeros(problem.n_kernels, dtype=bool)
    has_producer[problem.flows.dst] = True
    m = cp_model.CpModel()
    xs, ys, hs, ws, left, top = [], [], [], [], [], []
    for k in range(problem.n_kernels):
        shape = problem.shape(k)
        limit = target - (mesh.hop_latency if has_producer[k] else 0)
        legal = {
            (int(shape.best_r[h, c]), int(c)) for h in range(shape.heights.size) for c in np.flatnonzero(shape.best[h] <= limit)
        }
        # a rectangle containing another legal one is never needed
        minimal = sorted(a for a in legal if not any(b != a and b[0] <= a[0] and b[1] <= a[1] for b in legal))
        if not minimal:
            return Status.INFEASIBLE, None
        use = [m.new_bool_var(f"use_{k}_{r}x{c}") for r, c in minimal]
        m.add_exactly_one(use)
        h = m.new_int_var(min(r for r, _ in minimal), max(r for r, _ in minimal), f"rows_{k}")
        w = m.new_int_var(min(c for _, c in minimal), max(c for _, c in minimal), f"cols_{k}")
        m.add(h == sum(r * u for (r, _), u in zip(minimal, use, strict=True)))
        m.add(w == sum(c * u for (_, c), u in zip(minimal, use, strict=True)))
        x, y = m.new_int_var(0, mesh.cols, f"x_{k}"), m.new_int_var(0, mesh.rows, f"y_{k}")
        x_end, y_end = m.new_int_var(0, mesh.cols, f"x_end_{k}"), m.new_int_var(0, mesh.rows, f"y_end_{k}")
        if (pin := problem.pins[k] if problem.pins else None) is not None:
            m.add(y == pin[0])
            m.add(x == pin[1])
        if (fence := problem.fences[k] if problem.fences else None) is not None:
            fy, fx, fr, fc = fence
            m.add(y >= fy)
            m.add(x >= fx)
            m.add(y_end <= fy + fr)
            m.add(x_end <= fx + fc)
        left.append(x)
        top.append(y)
        xs.append(m.new_interval_var(x, w, x_end, f"ix_{k}"))
        ys.append(m.new_interval_var(y, h, y_end, f"iy_{k}"))
        hs.append(h)
        ws.append(w)
    m.add_cumulative(xs, hs, mesh.rows)
    m.add_cumulative(ys, ws, mesh.cols)
    bx, by = list(xs), list(ys)
    for i, (ry, rx, rr, rc) in enumerate(problem.keep_out):
        bx.append(m.new_fixed_size_interval_var(rx, rc, f"keepout_x_{i}"))
        by.append(m.new_fixed_size_interval_var(ry, rr, f"keepout_y_{i}"))
    for dy, dx in np.argwhere(problem.defects).tolist():
        bx.append(m.new_fixed_size_interval_var(dx, 1, f"dx_{dy}_{dx}"))
        by.append(m.new_fixed_size_interval_var(dy, 1, f"dy_{dy}_{dx}"))
    m.add_no_overlap_2d(bx, by)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = options.deadline.seconds_for_solver()
    solver.parameters.num_workers = max(1, options.workers)
    solver.parameters.random_seed = options.seed
    solver.parameters.catch_sigint_signal = False  # see cpsat._solver
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        return Status.INFEASIBLE, None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Status.UNKNOWN, None
    rects = [
        [solver.value(top[k]), solver.value(left[k]), solver.value(hs[k]), solver.value(ws[k])] for k in range(problem.n_kernels)
    ]
    return Status.FEASIBLE, np.array(rects, dtype=np.int64)
