"""Seeded corpora of hostile inputs other than ONNX models (issue 36, deliverable 6), shared by
tests/test_fuzz_inputs.py (a few dozen cases in the default pytest, the rest in the slow group) and
benchmarks/reliability.py (every case, each in its own process, with the counts of the issue's targets).

Three kinds of input, each a list of cases drawn from fixed seeds (a case's number names it: the same
case on every run), the issue's mutations first:

* ``constraints``: constraints files (``solve --constraints``): the issue's seeds (nesting 20,000 deep,
  aliases of aliases, a recursive alias, a 5,000-digit number, ``shape: 0x8``, a keep-out leaving 16
  cores among harmless rules, a touch group pinned at opposite corners, rules leaving a kernel nothing,
  two pins on one corner, two pins the cut puts on different wafers), then rule lists drawn at random
  (kinds, selectors, values from a pool of edge values) and valid files mutated as text (lines dropped,
  doubled or swapped, values replaced, YAML tokens inserted, truncated);
* ``options``: option strings (``--input-shape``, ``--context``, ``--requests``, ``--train*``, ``--mode``,
  ``--share``, ``--grid``, ``--wafers``, ``--dim``, ``--batch``, ``--set``, ...): the issue's seeds
  (``--context 1000000000`` and ``2147483647``, ``--input-shape x=2147483647x64``, ``--requests 0``,
  digits that are not ASCII), then one to three options drawn with values from the edge pool;
* ``plans``: plans with regions, a fixed grid, training, streaming, constraints and two wafers, edited
  as JSON and fed to ``verify`` and to ``solve --from-plan``: the issue's edits (``request.mode`` of a
  streamed plan made ``pipelined``, ``request.sharing.mode`` of a region plan made ``none``, a ``--grid``
  plan relabelled ``auto``, a version-2 plan relabelled ``wsealloc.plan/1``, a keep-out widened under a
  pinned kernel, a ``shape: 100x100`` rule appended, JSON nested 100,000 deep), then random edits of
  one field (deleted, replaced by an edge value, a number moved by one).

Every case must end in exit 0 (a plan, or ``OK``), or in one line ``wsealloc: error: ...`` of at most
1,200 characters with an exit code docs/errors.md documents; never exit 70 (an internal error), a
traceback, a crash, a hang or a memory blow-up (the runners cap each case's memory and time).
"""

from __future__ import annotations

import copy
import json
import random
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "models" / "tiny"
TRANSFORMER = str(TINY / "transformer.onnx")
MLP = str(TINY / "mlp.onnx")
MLP_DYNAMIC = str(TINY / "mlp_dynamic.onnx")
DECODE = str(TINY / "llm_decode.onnx")
PREFILL = str(TINY / "llm_prefill.onnx")

# exit codes docs/errors.md gives the errors a user can act on (usage, arch, model, shape, plan, output,
# constraint errors: 2; infeasible and conflicts: 3; verify's violations: 4)
DOCUMENTED_CODES = frozenset({2, 3, 4})
INTERNAL_ERROR = 70
LONGEST_LINE = 1200
CASE_TIME_LIMIT = "5"  # --time-limit of every solve (the issue's)
KINDS = ("constraints", "options", "plans")


@dataclass(frozen=True)
class Case:
    """One run: ``argv`` of ``wsealloc`` where ``@name`` is the path of ``files[name]`` written into the
    case's folder; ``what`` says what the case is."""

    kind: str
    index: int
    what: str
    argv: tuple[str, ...]
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.kind}#{self.index}"

    def materialize(self, folder: Path) -> list[str]:
        """Write the files into ``folder``; the argv with their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name, data in self.files.items():
            path = folder / name
            path.write_bytes(data)
            paths[f"@{name}"] = str(path)
        return [paths.get(a, a) for a in self.argv]


def judge(code: int | None, err: str) -> str | None:
    """What is wrong with a run that exited ``code`` printing ``err`` (None: nothing)."""
    if code is None:
        return err  # the runner's own account (a hang, a crash)
    if "Traceback (most recent call last)" in err or "internal error" in err:
        return f"exit {code} with a traceback or an internal error: {err.strip()[-600:]!r}"
    if code == 0:
        return None
    if code == INTERNAL_ERROR or code not in DOCUMENTED_CODES:
        return f"exit {code}: {err.strip()[-600:]!r}"
    lines = err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("wsealloc: error: "):
        return f"exit {code} without exactly one error line: {err[:600]!r}"
    if len(lines[0]) > LONGEST_LINE:
        return f"exit {code} with a {len(lines[0]):,}-character line"
    return None


# -- edge values -----------------------------------------------------------------------------------

EDGE_NUMBERS = ("0", "-1", "1", "2", "3", "16", "384", "1000000000", "2147483647", "2147483648", "9" * 40, "1e9", "1.5")
EDGE_WORDS = ("", " ", "nan", "inf", "-inf", "٣", "²", "x", "auto", "none", "true", "null", "0x8", "1_000", "+1", "0o7")
EDGE_SHAPES = ("1x1", "4x4", "16x24", "100x100", "0x8", "8x0", "4", "x4", "4x", "2x2x2", "٣x4", "4x-1", "2147483647x1")


def _edge(rng: random.Random) -> str:
    pool = rng.choice((EDGE_NUMBERS, EDGE_WORDS, EDGE_SHAPES))
    value = rng.choice(pool)
    if rng.random() < 0.03:
        value = rng.choice(string.ascii_letters) * rng.choice((100, 5000))
    return value


def _rng(kind: str, index: int) -> random.Random:
    return random.Random(f"wsealloc-fuzz-inputs/{kind}/{index}")  # str seeds hash with SHA-512: stable


def _solve(model: str, *options: str, place: bool = False) -> tuple[str, ...]:
    return ("solve", model, "--arch", "tiny", "--time-limit", CASE_TIME_LIMIT, *(() if place else ("--no-place",)), *options)


# -- constraints files -----------------------------------------------------------------------------

KERNELS = ("embed", "l0.ln1", "l0.qkv", "l0.scores", "l0.softmax", "l0.fc1", "l0.fc2", "l1.qkv", "l1.fc2", "ln_f", "lm_head")


def _nested(head: str, depth: int = 20_000) -> str:
    return head + "[" * depth + "1" + "]" * depth + "\n"


def _aliases(levels: int) -> str:
    lists = ["&a0 [" + ", ".join(["x"] * 10) + "]"]
    lists += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(lists) + "]"


def _harmless(count: int) -> str:
    return "".join(f"- grid: l{i % 2}.fc1\n  cores: [1, {384 - i % 7}]\n" for i in range(count))


CONSTRAINT_SEEDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (what, file text, extra options)
    ("grid nested 20,000 deep", _nested("- grid: "), ()),
    ("keep-out nested 20,000 deep", _nested("- keep-out: "), ()),
    ("aliases of aliases (10^8 values) as a keep-out", f"- keep-out: {_aliases(8)}\n", ()),
    ("aliases of aliases (10^5 values) as a grid's kernels", f"- grid: {_aliases(5)}\n  shape: 2x2\n", ()),
    ("a recursive alias", "- keep-out: &a {rows: *a}\n", ()),
    ("a 5,000-digit number", f"- grid: l0.fc1\n  rows: {'1' * 5000}\n", ()),
    ("shape 0x8 (YAML hexadecimal)", "- grid: l0.fc1\n  shape: 0x8\n", ()),
    ("shape with a superscript digit", "- grid: l0.fc1\n  shape: ²x8\n", ()),
    ("200 harmless rules and a keep-out leaving 16 cores", _harmless(200) + "- keep-out: {rows: [0, 15], cols: [0, 22]}\n", ()),
    (
        "a touch group pinned at opposite corners",
        "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [15, 23]\n- together: [embed, l0.ln1, lm_head]\n  how: touch\n",
        ("--place",),
    ),
    ("a rule leaving a kernel nothing", "- grid: l0.fc1\n  shape: 100x100\n", ()),
    ("a keep-out under a pinned kernel", "- place: l0.fc1\n  at: [2, 2]\n- keep-out: {rows: [0, 5], cols: [0, 5]}\n", ()),
    ("two pins on one corner", "- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [0, 0]\n", ()),
    (
        "pins the cut puts on different wafers",
        "- cut: l0.fc2\n- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [0, 0]\n",
        ("--wafers", "2", "--place"),
    ),
    ("a place off the wafer", "- place: embed\n  at: [1000000000, 2147483647]\n", ()),
    ("a key given twice", "- grid: l0.fc1\n  shape: 2x2\n  shape: 4x4\n", ()),
    ("an unknown kind", "- frobnicate: l0.fc1\n", ()),
    ("not a list", "grid: l0.fc1\n", ()),
    ("empty", "", ()),
    ("binary", "\x00\xff\xfe garbage \x01", ()),
    ("a Python tag", "- grid: !!python/object/apply:os.system ['true']\n", ()),
    ("a 1,000-value area", f"- keep-out: {list(range(1000))}\n", ()),
    ("a cut after the last kernel", "- cut: lm_head\n", ("--wafers", "2")),
    ("region together without --share", "- together: [l0.qkv, l0.scores]\n  how: region\n", ()),
)

VALID_RULES = (
    "- grid: l0.fc1\n  shape: 2x4\n",
    "- grid: {ops: [MatMul]}\n  cores: [1, 64]\n",
    "- place: embed\n  at: [0, 0]\n",
    "- place: lm_head\n  within: {rows: [8, 15], cols: [12, 23]}\n",
    "- keep-out: {rows: [12, 15], cols: [20, 23]}\n",
    "- together: [l0.qkv, l0.scores]\n  how: touch\n",
    "- together: {range: [l0.ln1, l0.fc2]}\n  how: wafer\n",
    "- cut: l0.fc2\n",
    "- grid: l1.fc2\n  rows: [1, 4]\n  cols: [2, 8]\n  dataflow: output-stationary\n",
)
YAML_TOKENS = (
    "&a ",
    "*a",
    "!!binary ",
    "{",
    "[",
    "---\n",
    "...\n",
    "? ",
    ": ",
    "- ",
    "\t",
    "#",
    "|\n",
    ">\n",
    "'",
    '"',
    "%YAML 1.1\n",
)


def _random_rule(rng: random.Random) -> str:
    kind = rng.choice(("grid", "place", "keep-out", "together", "cut"))

    def sel() -> str:
        return rng.choice(
            (
                rng.choice(KERNELS),
                f"[{', '.join(rng.sample(KERNELS, rng.randint(1, 3)))}]",
                "{ops: [MatMul]}",
                f"{{range: [{rng.choice(KERNELS)}, {rng.choice(KERNELS)}]}}",
                _edge(rng),
            )
        )

    def pair() -> str:
        first, second = (_edge(rng) if rng.random() < 0.4 else rng.randint(0, 30) for _ in range(2))
        return f"[{first}, {second}]"

    if kind == "grid":
        field_ = rng.choice(("shape", "rows", "cols", "cores", "dataflow"))
        value = rng.choice(EDGE_SHAPES) if field_ == "shape" else (pair() if field_ != "dataflow" else _edge(rng))
        return f"- grid: {sel()}\n  {field_}: {value}\n"
    if kind == "place":
        if rng.random() < 0.5:
            return f"- place: {sel()}\n  at: {pair()}\n"
        return f"- place: {sel()}\n  within: {{rows: {pair()}, cols: {pair()}}}\n"
    if kind == "keep-out":
        return f"- keep-out: {{rows: {pair()}, cols: {pair()}}}\n"
    if kind == "together":
        return f"- together: {sel()}\n  how: {rng.choice(('wafer', 'region', 'touch', _edge(rng)))}\n"
    return f"- cut: {sel()}\n" + ("  must: false\n" if rng.random() < 0.2 else "")


def _mutate_text(text: str, rng: random.Random) -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    how = rng.choice(("drop", "double", "swap", "value", "token", "truncate", "indent"))
    at = rng.randrange(len(lines))
    if how == "drop":
        del lines[at]
    elif how == "double":
        lines.insert(at, lines[at])
    elif how == "swap":
        other = rng.randrange(len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    elif how == "value":
        line = lines[at]
        cut = line.rfind(":")
        lines[at] = (line[: cut + 1] + " " + _edge(rng) + "\n") if cut >= 0 else _edge(rng) + "\n"
    elif how == "token":
        line = lines[at]
        pos = rng.randrange(len(line) + 1)
        lines[at] = line[:pos] + rng.choice(YAML_TOKENS) + line[pos:]
    elif how == "truncate":
        joined = "".join(lines)
        return joined[: rng.randrange(len(joined))], f"truncated ({how})"
    else:
        lines[at] = " " * rng.randint(1, 5) + lines[at].lstrip()
    return "".join(lines), f"{how} at line {at + 1}"


def constraints_case(index: int) -> Case:
    """Case ``index`` of the constraints corpus."""
    if index < len(CONSTRAINT_SEEDS):
        what, text, extra = CONSTRAINT_SEEDS[index]
        place = "--place" in extra
        extra = tuple(a for a in extra if a != "--place")
        argv = _solve(TRANSFORMER, "--constraints", "@c.yaml", *extra, place=place)
        return Case("constraints", index, what, argv, {"c.yaml": text.encode("utf-8", "surrogateescape")})
    rng = _rng("constraints", index)
    if rng.random() < 0.5:
        rules = [_random_rule(rng) for _ in range(rng.randint(1, 4))]
        text, what = "".join(rules), f"{len(rules)} random rule(s)"
    else:
        base = "".join(rng.sample(VALID_RULES, rng.randint(2, 5)))
        text, what = _mutate_text(base, rng)
        what = f"valid rules mutated: {what}"
    extra: tuple[str, ...] = ()
    if rng.random() < 0.2:
        extra = ("--wafers", rng.choice(("2", "auto")))
    elif rng.random() < 0.1:
        extra = ("--from-plan", "@nothing.json")
    argv = _solve(TRANSFORMER, "--constraints", "@c.yaml", *extra, place=rng.random() < 0.3)
    return Case("constraints", index, what, argv, {"c.yaml": text.encode()})


# -- option strings --------------------------------------------------------------------------------

OPTION_SEEDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--context 1000000000", _solve(DECODE, "--objective", "latency", "--context", "1000000000")),
    ("--context 2147483647", _solve(DECODE, "--objective", "latency", "--context", "2147483647")),
    ("--context 2147483648", _solve(DECODE, "--objective", "latency", "--context", "2147483648")),
    ("--input-shape x=2147483647x64", _solve(MLP_DYNAMIC, "--input-shape", "x=2147483647x64")),
    ("--input-shape in Arabic-Indic digits", _solve(MLP_DYNAMIC, "--input-shape", "x=٣x64")),
    ("--requests 0", _solve(DECODE, "--objective", "latency", "--context", "16", "--requests", "0")),
    ("--requests 2147483647", _solve(DECODE, "--objective", "latency", "--context", "16", "--requests", "2147483647")),
    ("--recompute-segment 0", _solve(TRANSFORMER, "--train", "--recompute-segment", "0")),
    ("--train-batch 0", _solve(TRANSFORMER, "--train", "--train-batch", "0")),
    ("--train-batch 2147483647", _solve(TRANSFORMER, "--train", "--train-batch", "2147483647")),
    ("--train --mode streaming without an off-wafer stream", _solve(TRANSFORMER, "--train", "--mode", "streaming")),
    ("--share auto without latency", _solve(DECODE, "--context", "16", "--share", "auto")),
    ("--grid 4 (no x)", _solve(DECODE, "--objective", "latency", "--context", "16", "--grid", "4")),
    ("--grid 100x100", _solve(DECODE, "--objective", "latency", "--context", "16", "--grid", "100x100")),
    ("--wafers 2 --share auto", _solve(DECODE, "--objective", "latency", "--context", "16", "--wafers", "2", "--share", "auto")),
    ("--wafers 1025", _solve(TRANSFORMER, "--wafers", "1025")),
    ("--dim batch=2147483647", _solve(MLP_DYNAMIC, "--dim", "batch=2147483647")),
    ("--batch 1000000000", _solve(DECODE, "--objective", "latency", "--context", "16", "--batch", "1000000000")),
    ("--time-limit nan", ("solve", MLP, "--arch", "tiny", "--time-limit", "nan")),
    ("--set sram 5,000 digits", _solve(MLP, "--set", f"core.sram_bytes={'1' * 5000}")),
)

ARCH_FIELDS = ("core.sram_bytes", "cluster.offwafer_bytes_per_s", "wafer.dies.rows", "noc.link_bytes_per_cycle")
OPTION_MODELS = (MLP, MLP_DYNAMIC, TRANSFORMER, DECODE, PREFILL)
OPTIONS: dict[str, Callable[[random.Random], tuple[str, ...]]] = {
    "--input-shape": lambda r: (
        "--input-shape",
        f"{r.choice(('x', 'input_ids', 'y', ''))}={r.choice(EDGE_SHAPES) if r.random() < 0.6 else _edge(r)}",
    ),
    "--dim": lambda r: ("--dim", f"{r.choice(('batch', 'seq', 'past', 'nope'))}={_edge(r)}"),
    "--context": lambda r: ("--context", _edge(r)),
    "--batch": lambda r: ("--batch", _edge(r)),
    "--requests": lambda r: ("--requests", _edge(r)),
    "--train": lambda r: ("--train",),
    "--train-batch": lambda r: ("--train", "--train-batch", _edge(r)),
    "--recompute-segment": lambda r: ("--train", "--recompute-segment", _edge(r)),
    "--recompute": lambda r: ("--train", "--recompute", r.choice(("none", "all", "auto", _edge(r)))),
    "--optimizer": lambda r: ("--train", "--optimizer", r.choice(("sgd", "momentum", "adam", _edge(r)))),
    "--mode": lambda r: ("--mode", r.choice(("pipelined", "streaming", "auto", _edge(r)))),
    "--stream-batch": lambda r: ("--stream-batch", _edge(r)),
    "--share": lambda r: ("--share", r.choice(("none", "auto", _edge(r)))),
    "--grid": lambda r: ("--grid", r.choice(EDGE_SHAPES)),
    "--wafers": lambda r: ("--wafers", r.choice(("1", "2", "auto", "1024", "1025", _edge(r)))),
    "--objective": lambda r: ("--objective", r.choice(("throughput", "latency", _edge(r)))),
    "--set": lambda r: (
        "--set",
        f"{r.choice(ARCH_FIELDS)}={_edge(r)}",
    ),
    "--seed": lambda r: ("--seed", _edge(r)),
    "--workers": lambda r: ("--workers", r.choice(("1", "2", _edge(r)))),
    "--solver": lambda r: ("--solver", r.choice(("cpsat", "greedy", "bisect", "pulp", _edge(r)))),
}


def options_case(index: int) -> Case:
    """Case ``index`` of the option-string corpus."""
    if index < len(OPTION_SEEDS):
        what, argv = OPTION_SEEDS[index]
        return Case("options", index, what, argv)
    rng = _rng("options", index)
    model = rng.choice(OPTION_MODELS)
    chosen = rng.sample(sorted(OPTIONS), rng.randint(1, 3))
    extra: list[str] = []
    for name in chosen:
        extra += OPTIONS[name](rng)
    if model in (DECODE,) and "--context" not in chosen and rng.random() < 0.7:
        extra += ["--context", "16"]
    if model == MLP_DYNAMIC and "--input-shape" not in chosen and "--dim" not in chosen:
        extra += ["--dim", "batch=4"]
    argv = _solve(model, *extra, place=rng.random() < 0.2)
    return Case("options", index, " ".join(extra), argv)


# -- plans -----------------------------------------------------------------------------------------

OFFWAFER = ("--set", "cluster.offwafer_bytes_per_s=150e9")
BASE_RULES = "- place: l0.fc1\n  at: [2, 2]\n- keep-out: {rows: [12, 15], cols: [20, 23]}\n- grid: l1.fc1\n  shape: 2x4\n"
WAFER_RULES = "- cut: l0.fc2\n- place: embed\n  at: [0, 0]\n- place: lm_head\n  at: [0, 0]\n"
# name: (model, solve options, whether --from-plan re-solves it with the same options)
BASE_PLANS: dict[str, tuple[str, tuple[str, ...]]] = {
    "regions": (DECODE, ("--objective", "latency", "--share", "auto", "--context", "16")),
    "grid": (DECODE, ("--objective", "latency", "--grid", "4x4", "--context", "16")),
    "training": (TRANSFORMER, ("--train",)),
    "streaming": (TRANSFORMER, ("--train", "--mode", "streaming", "--no-place", *OFFWAFER)),
    "constrained": (TRANSFORMER, ("--constraints", "@rules.yaml")),
    "wafers": (TRANSFORMER, ("--wafers", "2", "--constraints", "@wafer-rules.yaml")),
}
RULE_FILES = {"rules.yaml": BASE_RULES.encode(), "wafer-rules.yaml": WAFER_RULES.encode()}


def base_plans(folder: Path, time_limit: str = "10") -> dict[str, dict[str, Any]]:
    """The base plans solved once into ``folder`` (kept there: a second call reads them), as JSON."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from wsealloc.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    for name, data in RULE_FILES.items():
        (folder / name).write_bytes(data)
    plans = {}
    for name, (model, options) in BASE_PLANS.items():
        path = folder / f"{name}.json"
        if not path.exists():
            argv = [str(folder / a[1:]) if a.startswith("@") else a for a in options]
            err = io.StringIO()
            with redirect_stdout(io.StringIO()), redirect_stderr(err):
                code = main(["solve", model, "--arch", "tiny", "--time-limit", time_limit, *argv, "-o", str(path)])
            if code != 0:
                raise RuntimeError(f"base plan {name}: {err.getvalue().strip()}")
        plans[name] = json.loads(path.read_text())
    return plans


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _v2(doc: dict[str, Any]) -> dict[str, Any]:
    out = {**doc, "schema": "wsealloc.plan/2", "baseline": {k: v for k, v in doc["baseline"].items() if k != "layout"}}
    out.pop("decision", None)
    return out


def _widen_keep_out(doc: dict[str, Any]) -> None:
    rule = next(r for r in doc["request"]["constraints"]["rules"] if r["kind"] == "keep-out")
    rule["area"] = {"rows": [0, 15], "cols": [0, 23]}


def _append_rule(doc: dict[str, Any]) -> None:
    rules = doc["request"]["constraints"]["rules"]
    rules.append({**next(r for r in rules if r["kind"] == "grid"), "line": 99, "shape": [100, 100]})


def _relabel_auto(doc: dict[str, Any]) -> None:
    doc["request"]["sharing"] = {"mode": "auto", "grid": None, "family": "stacked"}


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


PLAN_SEEDS: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    # (what, base plan, edit: in place (None), a new document, or the file's text)
    ("a streamed training plan's request.mode made pipelined", "streaming", lambda d: _set(d, "request.mode", "pipelined")),
    ("a region plan's request.sharing.mode made none", "regions", lambda d: _set(d, "request.sharing.mode", "none")),
    ("a --grid plan relabelled auto", "grid", _relabel_auto),
    ("a version-2 latency plan relabelled wsealloc.plan/1", "regions", lambda d: {**_v2(d), "schema": "wsealloc.plan/1"}),
    ("a current plan relabelled wsealloc.plan/2", "training", lambda d: _set(d, "schema", "wsealloc.plan/2")),
    ("a version-2 plan (valid)", "training", _v2),
    ("a keep-out widened under a pinned kernel", "constrained", _widen_keep_out),
    ("a grid rule shape 100x100 appended", "constrained", _append_rule),
    ("the decision deleted", "regions", lambda d: d.pop("decision") and None),
    ("the decision's segment changed", "training", lambda d: _set(d, "decision.segment", 1)),
    ("a two-wafer plan's cut moved", "wafers", lambda d: _set(d, "decision.cuts", [0, 1, 21])),
    ("a schema from the future", "training", lambda d: _set(d, "schema", "wsealloc.plan/9")),
    ("a field nested 100,000 deep", "training", lambda d: json.dumps(d).replace('"message": ""', '"message": ' + _deep(100_000))),
    ("a plan that is JSON nested 100,000 deep", "training", lambda d: _deep(100_000)),
    ("a 10 MB string", "regions", lambda d: _set(d, "objective.message", "x" * 10_000_000)),
    ("cores 2^63", "training", lambda d: _set(d, "kernels.0.cores", 2**63)),
)
EDGE_JSON: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1,
    2**31,
    2**53,
    2**63,
    -(2**63),
    1e308,
    0.5,
    "",
    "x",
    "٣",
    [],
    {},
    [0, 0],
    [1, 2, 3],
    {"a": 1},
)


def _leaves(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
        if not node:
            yield prefix.rstrip(".")
    elif isinstance(node, list) and node:
        for i, value in enumerate(node):
            yield from _leaves(value, f"{prefix}{i}.")
    else:
        yield prefix.rstrip(".")


def _random_edit(doc: dict[str, Any], rng: random.Random) -> str:
    paths = [p for p in _leaves(doc) if p and not p.startswith(("request.machine", "arch.spec", "request.arch"))]
    if rng.random() < 0.1:  # the machine too, now and then
        paths = [p for p in _leaves(doc) if p]
    path = rng.choice(paths)
    how = rng.choice(("edge", "edge", "nudge", "delete"))
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key: Any = int(last) if isinstance(node, list) else last
    old = node[key]
    if how == "nudge" and isinstance(old, (int, float)) and not isinstance(old, bool):
        node[key] = old + rng.choice((-1, 1)) * (1 if isinstance(old, int) else max(abs(old) * 0.01, 1e-9))
        return f"{path} {old!r} -> {node[key]!r}"
    if how == "delete":
        del node[key]
        return f"{path} deleted"
    node[key] = copy.deepcopy(rng.choice(EDGE_JSON))
    return f"{path} = {json.dumps(node[key])[:40]}"


def plans_case(index: int, plans: dict[str, dict[str, Any]]) -> Case:
    """Case ``index`` of the plan corpus, edited from ``plans`` (:func:`base_plans`): even cases run
    ``verify``, odd ones ``solve --from-plan`` with the base plan's own options."""
    rng = _rng("plans", index)
    if index < len(PLAN_SEEDS):
        what, base, edit = PLAN_SEEDS[index]
        doc = copy.deepcopy(plans[base])
        edited = edit(doc)
        text = edited if isinstance(edited, str) else json.dumps(edited if isinstance(edited, dict) else doc)
    else:
        base = rng.choice(sorted(plans))
        doc = copy.deepcopy(plans[base])
        changes = [_random_edit(doc, rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        what = f"{base}: " + "; ".join(changes)
        text = json.dumps(doc)
    files = {"plan.json": text.encode(), **RULE_FILES}
    if index % 2 == 0:
        return Case("plans", index, what, ("verify", "@plan.json"), files)
    model, options = BASE_PLANS[base]
    options = tuple(a for a in options if not a.startswith("@") and a != "--constraints")
    place = "--no-place" not in options
    options = tuple(a for a in options if a != "--no-place")
    argv = _solve(model, *options, "--from-plan", "@plan.json", place=place)
    return Case("plans", index, f"--from-plan of {what}", argv, files)


def with_time_limit(argv: list[str], seconds: float) -> list[str]:
    """``argv`` with the case's ``--time-limit`` (the corpus's own: ``CASE_TIME_LIMIT``) set to ``seconds``."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--time-limit" and out[i + 1] == CASE_TIME_LIMIT:
            out[i + 1] = f"{seconds:g}"
    return out


def corpus(kind: str, start: int, stop: int, plans: dict[str, dict[str, Any]] | None = None) -> list[Case]:
    """Cases ``start`` .. ``stop - 1`` of ``kind``."""
    if kind == "constraints":
        return [constraints_case(i) for i in range(start, stop)]
    if kind == "options":
        return [options_case(i) for i in range(start, stop)]
    assert plans is not None
    return [plans_case(i, plans) for i in range(start, stop)]
