"""Structural fuzzing of the zoo's own models, and determinism.

Every case breaks one zoo model in one way (byte flips, truncation, a node losing an input, two
nodes writing one tensor, a node reading a tensor nobody writes, dims 0/-1/2^40 in graph inputs and
value_info, nonsense or empty op types, attributes of the wrong type) and runs the CLI in-process.
The property: exit 0, or the exit code of an error class a user can act on with exactly one line on
stderr, never an internal error (exit 70), and every case done within ``CASE_LIMIT_S`` (a hang fails
the test naming the case). Cases are drawn from fixed seeds, so a failure reproduces; the test ids
carry the number of cases. Most cases run ``inspect`` (import, kernels, costs); a handful run a
quick ``solve --no-place``.

Determinism: same inputs, seed, workers -> same plan.
"""

from __future__ import annotations

import faulthandler
import json
import random
import signal
import string
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import FrameType

import onnx
import pytest

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
CASE_LIMIT_S = 10  # a case takes well under a second; a hang is anything far beyond
CASES_PER_KIND = 36
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
    value = rng.choice((0, -1, 2**40))
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


class _Hang(BaseException):
    """Raised in the main thread when a case runs past its limit (a BaseException: the CLI turns
    every Exception into an internal error, which would hide the hang)."""


@contextmanager
def _hang_guard(seconds: float) -> Iterator[None]:
    """Raise :class:`_Hang` after ``seconds``; dump every thread's stack and exit if even that fails
    (a hang inside C code never returns to the interpreter to raise)."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 3, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def _run_case(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str | None:
    """Run the CLI on one case; None if the property holds, else what went wrong."""
    try:
        with _hang_guard(CASE_LIMIT_S):
            code = main(argv)
    except _Hang:
        capsys.readouterr()
        return f"still running after {CASE_LIMIT_S} s (hang)"
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    if code == 0:
        return None if "internal error" not in err else f"exit 0 with {err.strip()!r}"
    if code == INTERNAL_ERROR or code not in EXPECTED_CODES:
        return f"exit {code}: {err.strip()[:400]!r}"
    if len(lines) != 1 or not lines[0].startswith("wsealloc: error: "):
        return f"exit {code} without exactly one error line: {err[:400]!r}"
    if len(lines[0]) > 1200:
        return f"exit {code} with a {len(lines[0])}-character line"
    return None


def _check_kind(kind: str, count: int, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failures = []
    for index in range(count):
        what, data = make_case(kind, index)
        path = tmp_path / f"{kind}-{index}.onnx"
        path.write_bytes(data)
        problem = _run_case([command[0], str(path), *command[1:]], capsys)
        if problem is not None:
            failures.append(f"{kind} #{index} ({what}): {problem}")
        path.unlink()
    assert not failures, f"{len(failures)} of {count} cases broke the property:\n" + "\n".join(failures)


KINDS = ("byte_flip", "truncate", *STRUCTURAL)
INSPECT = ["inspect", "--arch", "wse2"]


@pytest.mark.parametrize("kind", KINDS, ids=[f"{k}-{CASES_PER_KIND}cases" for k in KINDS])
def test_fuzz_inspect(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Broken zoo models through import, kernels and costs: a clean error or a result, never a crash."""
    _check_kind(kind, CASES_PER_KIND, INSPECT, tmp_path, capsys)


@pytest.mark.parametrize("kind", ["nonsense_op"], ids=[f"nonsense_op-allow-unknown-{CASES_PER_KIND // 3}cases"])
def test_fuzz_inspect_allow_unknown_ops(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown op types costed by the fallback instead of refused: still no crash."""
    _check_kind(kind, CASES_PER_KIND // 3, [*INSPECT, "--allow-unknown-ops"], tmp_path, capsys)


@pytest.mark.parametrize("case", range(SOLVE_CASES), ids=[f"solve-{i}of{SOLVE_CASES}" for i in range(SOLVE_CASES)])
def test_fuzz_solve(case: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A few broken models all the way through a quick allocation (the structural kinds in turn)."""
    kind = tuple(STRUCTURAL)[case % len(STRUCTURAL)]
    what, data = make_case(kind, 1000 + case)
    path = tmp_path / "case.onnx"
    path.write_bytes(data)
    problem = _run_case(["solve", str(path), "--arch", "wse2", "--no-place", "--time-limit", "2"], capsys)
    assert problem is None, f"{kind} ({what}): {problem}"


def test_hang_guard_fires() -> None:
    # the guard is what turns a hang into a failure naming the case: it must actually fire
    with pytest.raises(_Hang), _hang_guard(0.2):
        time.sleep(5)


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
