"""Shared fixtures: hand-built models written to a temp dir, and the tiny arch."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

# Bytecode caches on, whatever the environment says (PYTHONDONTWRITEBYTECODE=1 on some machines):
# without them every run and every worker rewrites the asserts of all test modules and compiles the
# package again (7 s of a worker's collection, against 1.5 s from the caches), and every CLI test run as
# a subprocess compiles the package once more. Set before the package and the test modules are imported;
# the environment is cleared too, so that those subprocesses write and read the same caches.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "tiny"))

import build as builders  # noqa: E402

from wsealloc.arch import Arch, load_arch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"


@pytest.fixture(scope="session")
def tiny_arch() -> Arch:
    return load_arch("tiny")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("models")
    builders.save(builders.mlp(), d / "mlp.onnx")
    builders.save(builders.reshape_chain(), d / "chain.onnx")
    return d


def _shared_contest_folder() -> Path:
    """The ISPD-2020 instances (never committed: no licence): ``$WSEALLOC_ISPD2020``, else the
    workplace's ``../shared/ispd2020`` next to the checkout, else ``/work/shared/ispd2020``."""

    for candidate in (os.environ.get("WSEALLOC_ISPD2020"), ROOT.parent / "shared" / "ispd2020", "/work/shared/ispd2020"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return ROOT.parent / "shared" / "ispd2020"


SHARED_ISPD2020 = _shared_contest_folder()
# The 16 shared instances: E-H and O-R are A-D and I-L under other score weights.
SHARED_LETTERS = tuple("ABCDEFGHIJKLOPQR")


def shared_instance(name: str = "") -> Path:
    """``SHARED_ISPD2020 / name`` (the folder itself for ""); where it is absent the calling test skips
    with the reason, or fails under ``WSEALLOC_REQUIRE_SHARED=1`` (.ci/run sets it: CI must never skip
    the shared instances silently)."""

    path = SHARED_ISPD2020 / name if name else SHARED_ISPD2020
    if not path.exists():
        reason = f"shared ISPD-2020 instances absent ({path}; set WSEALLOC_ISPD2020 to their folder)"
        if os.environ.get("WSEALLOC_REQUIRE_SHARED") == "1":
            pytest.fail(f"{reason}, and WSEALLOC_REQUIRE_SHARED=1 makes that an error")
        pytest.skip(reason)
    return path


def zoo(name: str) -> Path:
    """Path of a shipped zoo model; skip-free: a missing zoo file is a test failure."""
    path = MODELS / name
    assert path.exists(), f"zoo model {path} is missing"
    return path


@dataclass(frozen=True)
class Result:
    """What a command printed and returned (the fields of ``subprocess.CompletedProcess`` we use)."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str) -> Result:
    """``wsealloc ARGS`` in this process (click's in-process run: no interpreter start-up)."""
    from wsealloc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Result(code, out.getvalue(), err.getvalue())


def decisions_solved(monkeypatch: pytest.MonkeyPatch, own_packs: bool = True) -> list[str]:
    """The decisions the driver solves, in order ("own": every kernel on its own rectangle, else
    "regions"), recorded in the list returned; with ``own_packs`` False the own rectangles' layout
    fails (NoLayoutError), as a plan that does not pack."""
    from wsealloc import driver
    from wsealloc.errors import NoLayoutError

    real, solved = driver.solve_prepared, []

    def counted(prepared, *args, **kwargs):  # type: ignore[no-untyped-def]
        own = prepared.decision.runs == ()
        solved.append("own" if own else "regions")
        if own and not own_packs:
            raise NoLayoutError("injected: the own rectangles do not pack")
        return real(prepared, *args, **kwargs)

    monkeypatch.setattr(driver, "solve_prepared", counted)
    return solved
