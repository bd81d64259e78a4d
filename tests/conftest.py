"""Shared fixtures: hand-built models written to a temp dir, and the tiny arch."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

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
    import os

    for candidate in (os.environ.get("WSEALLOC_ISPD2020"), ROOT.parent / "shared" / "ispd2020", "/work/shared/ispd2020"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return ROOT.parent / "shared" / "ispd2020"


SHARED_ISPD2020 = _shared_contest_folder()
# CI reads at most two of the shared contest instances (issue 18); WSEALLOC_ALL_SHARED=1 opts into all
CI_SHARED = ("A", "K")


def shared_letters(letters: list[str]) -> list[object]:
    """``letters`` as pytest params: those outside ``CI_SHARED`` skip unless WSEALLOC_ALL_SHARED=1."""
    import os

    every = os.environ.get("WSEALLOC_ALL_SHARED") == "1"
    reason = "reads a shared contest instance beyond the two CI reads (set WSEALLOC_ALL_SHARED=1)"
    return [pytest.param(x, marks=() if every or x in CI_SHARED else pytest.mark.skip(reason=reason)) for x in letters]


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
