"""Shared fixtures: hand-built models written to a temp dir, and the tiny arch."""

from __future__ import annotations

import sys
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


def zoo(name: str) -> Path:
    """Path of a shipped zoo model; skip-free: a missing zoo file is a test failure."""
    path = MODELS / name
    assert path.exists(), f"zoo model {path} is missing"
    return path
