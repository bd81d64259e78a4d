"""Structural fuzzing of the zoo's own models, and determinism.

Every case breaks one zoo model in one way (byte flips, truncation, a node losing an input, two
nodes writing one tensor, a node reading a tensor nobody writes, dims 0/-1/2^31-1/2^40 in graph inputs and
value_info, nonsense or empty op types, attributes of the wrong type) and runs the CLI on it. Each
case ends one of three ways:

* **rejected**: the exit code of an error class a user can act on, with exactly one line on stderr;
* **accepted and valid**: exit 0 on a model ONNX's own rules accept (``onnx_rejects``: the protobuf
  parses, every tensor is written once and defined before it is read, every node is an op of an
  imported domain that passes its schema check, strict type-checked shape inference succeeds);
* **accepted although corrupt**: exit 0 on a model those rules reject: a failure, like an internal
  error (exit 70), a second stderr line, a crash, or a case still running after ``CASE_LIMIT_S``.

Truncation, a second writer and a dangling read always corrupt: for them the oracle must agree.
Each case runs in a forked child, so a hang (even inside C code) or a crash fails that case alone,
named, and the run goes on; a child has ``CASE_MEMORY`` of address space more than pytest's, so a case
that would blow up memory fails alone too (MemoryError). Cases are drawn from fixed seeds, so a failure
reproduces; the test ids carry the cases' numbers (the default pytest runs the first 12 of each kind,
the slow group the other 24). Most cases run ``inspect`` (import, kernels, costs); a handful run a
quick ``solve --no-place``.

Determinism: same inputs, seed, workers -> same plan.
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import selectors
import signal
import string
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path

import onnx
import pytest
from google.protobuf.message import DecodeError
from onnx import checker, defs

from wsealloc.api import solve
from wsealloc.cli import main
from wsealloc.errors import ArchError, InfeasibleError, ModelLoadError, ShapeError, SolverError, UnsupportedOpError, UsageError

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
# Small models keep the whole file fast (tiny ones cost milliseconds, the zoo ones ~0.1 s a case);
# the tiny ones are drawn more often.
SEEDS: tuple[tuple[str, int], ...] = (
    ("tiny/attention.onnx", 3),
    ("tiny/mlp.onnx", 3),
    ("tiny/transformer.onnx", 3),
    ("gpt2.onnx", 1),
    ("resnet50.onnx", 1),
    ("bert-base.onnx", 1),
)
# What a broken model may end in: the classes a user can act on (wsealloc/errors.py), by exit code.
EXPECTED = (ModelLoadError, ShapeError, UnsupportedOpError, InfeasibleError, UsageError, ArchError, SolverError)
EXPECTED_CODES = frozenset(cls.exit_code for cls in EXPECTED)
INTERNAL_ERROR = 70
CASE_LIMIT_S = 20  # a case takes well under a second; a hang is anything far beyond
CASE_MEMORY = 4 * 2**30  # address space a case may add: a few hundred MB is what one takes
CASES_PER_KIND = 36
# The default pytest runs the first DEFAULT_CASES of each kind of test_fuzz_inspect, the slow group (.ci/run)
# the rest: every case still runs in CI.
DEFAULT_CASES = 12
SOLVE_CASES = 10

Mutation = Callable[[onnx.ModelProto, random.Random], str]


@cache
def _seed_model(name: str) -> onnx.ModelProto:
    return onnx.load(str(MODELS / name), load_external_data=False)


def _copy(name: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(_seed_model(name))
    return model


def _node(model: onnx.ModelProto, rng: random.Random, need_inputs: bool = False) -> onnx.NodeProto:
    nodes = [n for n in model.graph.node if n.input or not need_inputs]
    return nodes[rng.randrange(len(nodes))]


# -- structural mutations: each edits the model in place and says what it did ---------------------


def _lose_input(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _node(model, rng, need_inputs=True)
    slot = rng.randrange(len(node.input))
    del node.input[slot]
    return f"{node.op_type} {node.name!r} lost input {slot}"


def _double_write(model: onnx.ModelProto, rng: random.Random) -> str:
    first, second = rng.sample(list(model.graph.node), 2)
    second.output[0] = first.output[0]
    return f"{second.op_type} {second.name!r} also writes {first.output[0]!r}"


def _read_unwritten(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _node(model, rng, need_inputs=True)
    slot = rng.randrange(len(node.input))
    node.input[slot] = "nobody_writes_this"
    return f"{node.op_type} {node.name!r} input {slot} reads a tensor nobody writes"


def _bad_dim(model: onnx.ModelProto, rng: random.Random) -> str:
    # 2^31 - 1: the largest size --dim accepts; sized by shape inference it once took tens of GB
    value = rng.choice((0, -1, 2**31 - 1, 2**40))
    infos = [vi for vi in model.graph.input if vi.type.tensor_type.shape.dim]
    infos += [vi for vi in model.graph.value_info if vi.type.tensor_type.shape.dim]
    vi = infos[0] if rng.random() < 0.4 else rng.choice(infos)  # the data input often: every shape follows from it
    dim = rng.randrange(len(vi.type.tensor_type.shape.dim))
    vi.type.tensor_type.shape.dim[dim].dim_value = value
    return f"dim {dim} of {vi.name!r} set to {value}"


def _nonsense_op(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _node(model, rng)
    choice = rng.randrange(4)
    if choice == 0:
        node.op_type = "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 12)))
    elif choice == 1:  # a real op of another arity and attribute set
        node.op_type = rng.choice(("Conv", "Gemm", "If", "Loop", "Resize", "Einsum", "TopK", "Split", "LSTM", "Pad"))
    elif choice == 2:
        node.domain = rng.choice(("com.fuzz", "ai.onnx.ml", "com.microsoft"))
    else:
        node.op_type = ""
    return f"{node.name!r} became {node.domain + '::' if node.domain else ''}{node.op_type or '(empty)'}"


def _bad_attribute(model: onnx.ModelProto, rng: random.Random) -> str:
    with_attrs = [n for n in model.graph.node if n.attribute and n.op_type != "Constant"]
    if not with_attrs:
        return _lose_input(model, rng)
    node = rng.choice(with_attrs)
    attr = rng.choice(list(node.attribute))
    if rng.random() < 0.5:
        node.attribute.remove(attr)
        return f"{node.op_type} {node.name!r} lost attribute {attr.name!r}"
    value = rng.choice((0, -1, 2**40, 7))
    attr.ClearField("ints")
    attr.ClearField("f")
    attr.ClearField("floats")
    attr.ClearField("s")
    attr.type = onnx.AttributeProto.INT
    attr.i = value
    return f"{node.op_type} {node.name!r} attribute {attr.name!r} set to int {value}"


def _other_dim(model: onnx.ModelProto, rng: random.Random) -> str:
    """A plausible size in the data input: the model loads (or value_info contradicts) and is costed."""
    vi = model.graph.input[0]
    dims = vi.type.tensor_type.shape.dim
    dim = rng.randrange(len(dims))
    value = rng.choice((1, 2, 3, 5, 17, 100, 1000, 4097))
    dims[dim].dim_value = value
    if rng.random() < 0.5:
        del model.graph.value_info[:]  # shapes inferred afresh: the resized model goes all the way
    return f"dim {dim} of input {vi.name!r} set to {value}"


_UNARY = ("Relu", "Neg", "Sigmoid", "Tanh", "Exp", "Softmax", "Transpose", "Identity", "Abs", "Erf", "Gelu", "Flatten")
_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Max", "Min", "PRelu", "Gather", "Expand", "Reshape")


def _swap_op(model: onnx.ModelProto, rng: random.Random) -> str:
    """Another real op of the same arity: passes the schema check (attributes dropped), reaches costing."""
    candidates = [n for n in model.graph.node if len(n.input) in (1, 2) and n.op_type != "Constant"]
    node = rng.choice(candidates)
    before = node.op_type
    node.op_type = rng.choice(_UNARY if len(node.input) == 1 else _BINARY)
    del node.attribute[:]
    return f"{before} {node.name!r} became {node.op_type}"


STRUCTURAL: dict[str, Mutation] = {
    "lose_input": _lose_input,
    "double_write": _double_write,
    "read_unwritten": _read_unwritten,
    "bad_dim": _bad_dim,
    "nonsense_op": _nonsense_op,
    "bad_attribute": _bad_attribute,
    "other_dim": _other_dim,
    "swap_op": _swap_op,
}


# -- cases -------------------------------------------------------------------------------------


def _pick_seed(rng: random.Random) -> str:
    names = [name for name, weight in SEEDS for _ in range(weight)]
    return rng.choice(names)


def _bytes_case(kind: str, rng: random.Random) -> tuple[str, bytes]:
    name = _pick_seed(rng)
    data = bytearray((MODELS / name).read_bytes())
    if kind == "truncate":
        cut = rng.randrange(len(data))
        return f"{name} cut at {cut} of {len(data)} bytes", bytes(data[:cut])
    where = sorted(rng.randrange(len(data)) for _ in range(rng.randint(1, 8)))
    for at in where:
        data[at] = rng.randrange(256)
    return f"{name} bytes {where} changed", bytes(data)


def make_case(kind: str, index: int) -> tuple[str, bytes]:
    """(description, model file bytes) of case ``index`` of ``kind``: the same on every run."""
    rng = random.Random(f"wsealloc-fuzz/{kind}/{index}")  # str seeds hash with SHA-512: stable across runs
    if kind in ("byte_flip", "truncate"):
        return _bytes_case(kind, rng)
    name = _pick_seed(rng)
    model = _copy(name)
    what = STRUCTURAL[kind](model, rng)
    return f"{name}: {what}", model.SerializeToString()


# -- the oracle: ONNX's own rules, independent of wsealloc ----------------------------------------

# mutations that corrupt every model they touch (the oracle must say so too)
ALWAYS_CORRUPT = frozenset({"truncate", "double_write", "read_unwritten"})
_DEFAULT_DOMAINS = ("", "ai.onnx")


def onnx_rejects(data: bytes, allow_unknown_ops: bool = False) -> str | None:
    """Why ONNX's own rules refuse the model file ``data`` (None: they accept it). The rules: it parses;
    every tensor is written once, and defined (graph input, initializer, earlier node) before a node
    reads it; every node has an op type of an imported domain, known to ONNX (unless
    ``allow_unknown_ops``), that passes ONNX's per-node schema check; strict, type-checked shape
    inference succeeds. (Not onnx.checker.check_model: it reads external weight data, absent here.)"""
    try:
        model = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        return f"not an ONNX protobuf ({type(exc).__name__})"
    graph = model.graph
    if not graph.node:
        return "no nodes"
    imported = {("" if o.domain in _DEFAULT_DOMAINS else o.domain): int(o.version) for o in model.opset_import}
    if "" not in imported:
        return "no default-domain opset import"
    ctx = checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = imported
    scope = checker.C.LexicalScopeContext()
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for index, node in enumerate(graph.node):
        label = f"node #{index} ({node.op_type or 'no op type'})"
        for name in node.input:
            if name and name not in defined:
                return f"{label} reads {name!r}, which no input, initializer or earlier node defines"
        for name in node.output:
            if name in defined:
                return f"{label} writes {name!r}, which is already defined"
            if name:
                defined.add(name)
        domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
        if not node.op_type or domain not in imported:
            return f"{label}: no op type, or domain {node.domain!r} not imported"
        if not defs.has(node.op_type, domain):
            if allow_unknown_ops:
                continue
            return f"{label}: not an op of domain {domain!r}"
        try:
            checker.C.check_node(node.SerializeToString(), ctx, scope)
        except (checker.ValidationError, ValueError, RuntimeError) as exc:
            return f"{label} fails its schema check: {str(exc).splitlines()[0][:200]}"
    # A declared dim of 0 or -1 on an inner tensor is how exporters say "unknown" (Paddle2ONNX writes
    # [-1, 2]); wsealloc reads it so (docs/errors.md), so the oracle does too: the dim is cleared first.
    for vi in graph.value_info:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, checker.ValidationError, ValueError, RuntimeError) as exc:
        return f"strict shape inference: {' '.join(str(exc).split())[:200]}"
    return None


# -- running cases in forked children: a hang or a crash costs only its case ------------------------

Result = tuple[int, str] | str  # (exit code, stderr), or what went wrong


def _cli(argv: list[str]) -> tuple[int, str]:
    """``wsealloc ARGV`` in this process: (exit code, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def in_children(runs: list[Callable[[], tuple[int, str]]], limit_s: float) -> list[Result]:
    """Each of ``runs`` in order, in forked children (one child for as many runs as go well; forking
    per run would cost more than the runs): each run's (exit code, stderr), or what went wrong: still
    running after ``limit_s`` (its child is killed: a hang inside C code too), killed by a signal, an
    exception. A failed run costs only itself: the next ones go on in a fresh child."""
    results: list[Result] = []
    while len(results) < len(runs):
        results.extend(_child(runs[len(results) :], limit_s))
    return results


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _limit_memory() -> None:
    """Cap this (child) process's address space at what it has plus ``CASE_MEMORY``: a case that sizes
    what it should refuse ends in MemoryError instead of taking the machine's memory."""
    with open("/proc/self/status") as status:
        size = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:")), None)
    if size is not None:
        resource.setrlimit(resource.RLIMIT_AS, (size + CASE_MEMORY, size + CASE_MEMORY))


def _child(runs: list[Callable[[], tuple[int, str]]], limit_s: float) -> list[Result]:
    """Results of the leading ``runs`` in one forked child, up to and including the first that fails."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one JSON line per run, and it never returns into pytest
        try:
            os.close(read_fd)
            _limit_memory()
            for run in runs:
                try:
                    line = list(run())
                except Exception as exc:  # noqa: BLE001 - the parent reports it as that run's failure
                    line = [None, f"{type(exc).__name__}: {exc}"]
                _write_all(write_fd, (json.dumps(line) + "\n").encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    results: list[Result] = []
    pending = b""
    deadline = time.monotonic() + limit_s
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(read_fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    return [*results, f"still running after {limit_s:g} s (hang; its process was killed)"]
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    code, err = json.loads(line)
                    results.append((code, err) if code is not None else f"raised {err}")
                    deadline = time.monotonic() + limit_s
    finally:
        os.close(read_fd)
    if len(results) == len(runs):
        os.waitpid(pid, 0)
        return results
    _, status = os.waitpid(pid, 0)
    died = f"crashed: killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else "ended without a result"
    return [*results, died]


def _judge(result: Result, data: bytes, allow_unknown_ops: bool = False) -> tuple[str, str | None]:
    """(outcome, problem) of one case: the outcome is "rejected", "accepted and valid", "accepted although
    corrupt" or "failed"; the problem is None when the property holds, else what went wrong."""
    if isinstance(result, str):
        return "failed", result
    code, err = result
    lines = err.strip().splitlines()
    if code == 0:
        if "internal error" in err:
            return "failed", f"exit 0 with {err.strip()!r}"
        corrupt = onnx_rejects(data, allow_unknown_ops)
        if corrupt is not None:
            return "accepted although corrupt", f"exit 0 on a model ONNX's rules refuse: {corrupt}"
        return "accepted and valid", None
    if code == INTERNAL_ERROR or code not in EXPECTED_CODES:
        return "failed", f"exit {code}: {err.strip()[:400]!r}"
    if len(lines) != 1 or not lines[0].startswith("wsealloc: error: "):
        return "failed", f"exit {code} without exactly one error line: {err[:400]!r}"
    if len(lines[0]) > 1200:
        return "failed", f"exit {code} with a {len(lines[0])}-character line"
    return "rejected", None


def _check_kind(
    kind: str, count: int, command: list[str], tmp_path: Path, allow_unknown_ops: bool = False, start: int = 0
) -> None:
    """Cases ``start`` .. ``start + count - 1`` of ``kind``."""
    failures = []
    cases = [make_case(kind, index) for index in range(start, start + count)]
    runs = []
    for index, (what, data) in enumerate(cases, start):
        if kind in ALWAYS_CORRUPT and onnx_rejects(data, allow_unknown_ops) is None:
            failures.append(f"{kind} #{index} ({what}): the mutation left a model ONNX's rules accept")
        path = tmp_path / f"{kind}-{index}.onnx"
        path.write_bytes(data)
        runs.append(lambda argv=[command[0], str(path), *command[1:]]: _cli(argv))
    outcomes: dict[str, int] = {}
    for index, ((what, data), result) in enumerate(zip(cases, in_children(runs, CASE_LIMIT_S), strict=True), start):
        outcome, problem = _judge(result, data, allow_unknown_ops)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if problem is not None:
            failures.append(f"{kind} #{index} ({what}): {problem}")
    tally = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    assert not failures, f"{len(failures)} of {count} cases broke the property ({tally}):\n" + "\n".join(failures)


KINDS = ("byte_flip", "truncate", *STRUCTURAL)
INSPECT = ["inspect", "--arch", "wse2"]


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
@pytest.mark.parametrize(
    "cases",
    [
        (0, DEFAULT_CASES),
        # the other 24 cases of each kind (6 s in all): run by .ci/run (pytest -m slow)
        pytest.param((DEFAULT_CASES, CASES_PER_KIND), marks=pytest.mark.slow),
    ],
    ids=[f"cases0-{DEFAULT_CASES - 1}", f"cases{DEFAULT_CASES}-{CASES_PER_KIND - 1}"],
)
def test_fuzz_inspect(kind: str, cases: tuple[int, int], tmp_path: Path) -> None:
    """Broken zoo models through import, kernels and costs: a clean error, or a result on a model
    ONNX's rules accept; never a crash, a hang, or a corrupt model accepted."""
    start, stop = cases
    _check_kind(kind, stop - start, INSPECT, tmp_path, start=start)


@pytest.mark.parametrize("kind", ["nonsense_op"], ids=[f"nonsense_op-allow-unknown-{CASES_PER_KIND // 3}cases"])
def test_fuzz_inspect_allow_unknown_ops(kind: str, tmp_path: Path) -> None:
    """Unknown op types costed by the fallback instead of refused: still no crash (an unknown op type
    is not corruption here; an unimported domain or an empty op type still is)."""
    _check_kind(kind, CASES_PER_KIND // 3, [*INSPECT, "--allow-unknown-ops"], tmp_path, allow_unknown_ops=True)


@pytest.mark.parametrize("case", range(SOLVE_CASES), ids=[f"solve-{i}of{SOLVE_CASES}" for i in range(SOLVE_CASES)])
def test_fuzz_solve(case: int, tmp_path: Path) -> None:
    """A few broken models all the way through a quick allocation (the structural kinds in turn)."""
    kind = tuple(STRUCTURAL)[case % len(STRUCTURAL)]
    what, data = make_case(kind, 1000 + case)
    path = tmp_path / "case.onnx"
    path.write_bytes(data)
    argv = ["solve", str(path), "--arch", "wse2", "--no-place", "--time-limit", "2"]
    _, problem = _judge(in_children([lambda: _cli(argv)], CASE_LIMIT_S)[0], data)
    assert problem is None, f"{kind} ({what}): {problem}"


def test_a_hang_or_a_crash_fails_only_its_case() -> None:
    """The harness turns a case stuck inside C code (signals blocked: no Python handler could run) into
    that case's failure, killing its process, and a crash into a failure naming the signal; the cases
    after each go on in a fresh process."""

    def stuck() -> tuple[int, str]:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT, signal.SIGTERM})
        time.sleep(3600)
        return 0, ""

    def dies() -> tuple[int, str]:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in C code, without a core file
        return 0, ""

    def fine(n: int) -> Callable[[], tuple[int, str]]:
        return lambda: (n, f"wsealloc: error: case {n}\n")

    def raises() -> tuple[int, str]:
        raise KeyError("x")

    start = time.monotonic()
    results = in_children([fine(1), stuck, fine(2), dies, raises, fine(3)], 0.5)
    assert results == [
        (1, "wsealloc: error: case 1\n"),
        "still running after 0.5 s (hang; its process was killed)",
        (2, "wsealloc: error: case 2\n"),
        f"crashed: killed by signal {int(signal.SIGKILL)}",
        "raised KeyError: 'x'",
        (3, "wsealloc: error: case 3\n"),
    ]
    assert time.monotonic() - start < 10


def test_the_oracle_tells_corrupt_from_valid() -> None:
    """ONNX's rules as the fuzzer applies them: the seed models pass; each way of corrupting one is named."""
    for name, _ in SEEDS:
        assert onnx_rejects((MODELS / name).read_bytes()) is None, name
    assert "not an ONNX protobuf" in str(onnx_rejects((MODELS / "tiny" / "mlp.onnx").read_bytes()[:-100]))
    model = _copy("tiny/mlp.onnx")
    model.graph.node[1].output[0] = model.graph.node[0].output[0]
    assert "is already defined" in str(onnx_rejects(model.SerializeToString()))
    model = _copy("tiny/mlp.onnx")
    model.graph.node[1].input[0] = "nobody_writes_this"
    assert "which no input, initializer or earlier node defines" in str(onnx_rejects(model.SerializeToString()))
    model = _copy("tiny/mlp.onnx")
    model.graph.node[1].op_type = "Frobnicate"
    assert "not an op of domain" in str(onnx_rejects(model.SerializeToString()))
    assert onnx_rejects(model.SerializeToString(), allow_unknown_ops=True) is None
    model = _copy("tiny/mlp.onnx")
    fc2 = next(n for n in model.graph.node if n.name == "fc2")
    fc2.op_type = "PRelu"  # a valid node, but its [16, 64] weight does not fit what follows
    assert "strict shape inference" in str(onnx_rejects(model.SerializeToString()))


def test_cases_are_deterministic() -> None:
    assert make_case("lose_input", 3) == make_case("lose_input", 3)
    assert make_case("byte_flip", 3) == make_case("byte_flip", 3)


def _stable(doc: dict) -> dict:  # type: ignore[type-arg]
    doc["objective"]["wall_s"] = 0
    return doc


@pytest.mark.parametrize(
    "name",
    ["attention.onnx", pytest.param("transformer.onnx", marks=pytest.mark.slow)],  # the LNS runs in both
)
def test_same_inputs_same_plan(tmp_path: Path, name: str) -> None:
    model = ROOT / "models" / "tiny" / name
    plans = []
    for i in range(2):
        out = tmp_path / f"p{i}.json"
        solve(model, "tiny", output=out, time_limit=60, seed=7, workers=1)
        plans.append(_stable(json.loads(out.read_text())))
    assert plans[0] == plans[1]
