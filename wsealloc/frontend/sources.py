"""Model sources: *which* model a request plans and *how* to read it, as a type.

A source is validated once, where a request is built (the CLI, the Python API, a suite YAML, a sweep
point), and then travels as a frozen object (and as JSON to a bench worker): nothing downstream
tests string prefixes. Kinds:

- :class:`OnnxSource`: an ONNX file, with its ``--dim`` bindings and the kernel-fusion switch;
- :class:`SyntheticSource`: a generated ONNX model (``synthetic:chain:N``, ``synthetic:transformer:L``,
  see :mod:`wsealloc.frontend.synthetic`), built into a cache folder on first use;
- :class:`KgraphSource`: an ISPD-2020 contest instance (``.kgraph``, :mod:`wsealloc.frontend.kgraph`),
  with overrides of its header (fabric, memory limit, score weights) from ``--arch``/``--set``.

A new format (e.g. another graph file) is one more class here with its own ``kind`` literal, added to
``ModelSource`` and to :func:`parse_model_source`'s recognition rule; ``api.RUNNERS`` maps its kind to
the function that solves it. What the layers above need to know of a source they ask it
(``file``, ``carries_machine``, ``reads_onnx``), never its class.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from wsealloc.errors import UsageError
from wsealloc.frontend.kgraph import HEADER_INTS, fabric_size_error, looks_like_kgraph, parse_kgraph
from wsealloc.frontend.synthetic import PREFIX, parse_spec, resolve
from wsealloc.graph.contest import ContestGraph, Fabric

# A dim bound on the command line (--dim): positive and below 2^31 (ONNX dims are int64, but a
# larger dim could never fit on a wafer and would overflow the cost model's integer arithmetic).
Dim = Annotated[int, Field(strict=True, gt=0, lt=2**31)]
# A whole input shape given on the command line (--input-shape NAME=1x3x48x320): sizes as --dim's, at
# least one (a scalar input has nothing to give), at most 64 (ONNX tensors of higher rank are nonsense).
InputShape = Annotated[tuple[Dim, ...], Field(min_length=1, max_length=64)]


class _Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # the source brings its own machine (a contest instance's fabric header): no --arch needed
    carries_machine: ClassVar[bool] = False
    # the source is (or generates) an ONNX model read by the ONNX front end
    reads_onnx: ClassVar[bool] = True

    @property
    def file(self) -> str | None:
        """The input file a user named (None: generated where it runs)."""
        return None


class OnnxSource(_Source):
    """An ONNX file (paths are kept as given: plans record them, ``verify`` finds them again)."""

    kind: Literal["onnx"] = "onnx"
    path: str = Field(min_length=1)
    dims: dict[str, Dim] = {}
    input_shapes: dict[str, InputShape] = {}
    fuse: bool = True
    weights_as_inputs: bool | None = None  # None: decide from the graph (see frontend.importer)
    context: Dim | None = None  # --context: an LLM export's past length (frontend.llm)
    batch: Dim | None = None  # --batch: requests decoded together

    @property
    def label(self) -> str:
        """How messages name the model."""
        return self.path

    @property
    def file(self) -> str | None:
        """The ONNX file."""
        return self.path

    def onnx_path(self) -> Path:
        """The file to import."""
        return Path(self.path)


class SyntheticSource(_Source):
    """A generated model: ``family`` with ``size`` kernels (chain) or layers (transformer)."""

    kind: Literal["synthetic"] = "synthetic"
    family: Literal["chain", "transformer"]
    size: int = Field(strict=True, ge=1, le=1_000_000)
    dims: dict[str, Dim] = {}
    input_shapes: dict[str, InputShape] = {}
    fuse: bool = True
    weights_as_inputs: bool | None = None
    context: Dim | None = None
    batch: Dim | None = None

    @property
    def label(self) -> str:
        """The spec it was written as (``synthetic:chain:8``)."""
        return f"{PREFIX}{self.family}:{self.size}"

    def onnx_path(self) -> Path:
        """The generated file (built into the cache on first use)."""
        return resolve(self.label)


class KgraphSource(_Source):
    """A contest instance; ``header`` overrides fields of the file's header (``width``, ``height``,
    ``memlimit``, ``wdeltat``, ``wlength``, ``wadapter``)."""

    kind: Literal["kgraph"] = "kgraph"
    path: str = Field(min_length=1)
    header: dict[str, Annotated[int, Field(strict=True, ge=0, lt=2**31)]] = {}

    carries_machine: ClassVar[bool] = True
    reads_onnx: ClassVar[bool] = False

    @property
    def file(self) -> str | None:
        """The instance file."""
        return self.path

    @field_validator("header")
    @classmethod
    def _known_fields(cls, header: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(header) - set(HEADER_INTS))
        if unknown:
            raise ValueError(f"unknown header field(s) {', '.join(unknown)}; a .kgraph header has {', '.join(HEADER_INTS)}")
        zero = [k for k in ("width", "height", "memlimit") if header.get(k) == 0]
        if zero:
            raise ValueError(f"{', '.join(zero)} must be positive")
        return header

    @property
    def label(self) -> str:
        """How messages name the instance."""
        return self.path

    def read(self) -> ContestGraph:
        """The instance, its header overridden by ``header`` (a file without a header is read with
        the fabric the overrides give: width, height and memlimit at least; weights default to 1)."""
        h = self.header
        default = None
        if {"width", "height", "memlimit"} <= set(h):
            default = Fabric(
                test=Path(self.path).stem,
                width=h["width"],
                height=h["height"],
                memlimit=h["memlimit"],
                wdeltat=h.get("wdeltat", 1),
                wlength=h.get("wlength", 1),
                wadapter=h.get("wadapter", 0),
            )
        graph = parse_kgraph(self.path, fabric=default)
        if not self.header:
            return graph
        h = self.header
        f = graph.fabric
        too_large = fabric_size_error(h.get("width", f.width), h.get("height", f.height))
        if too_large:
            raise UsageError(f"{self.label}: header overrides (--arch/--set): {too_large}")
        fabric = replace(
            f,
            width=h.get("width", f.width),
            height=h.get("height", f.height),
            memlimit=h.get("memlimit", f.memlimit),
            wdeltat=h.get("wdeltat", f.wdeltat),
            wlength=h.get("wlength", f.wlength),
            wadapter=h.get("wadapter", f.wadapter),
        )
        return replace(graph, fabric=fabric)


ModelSource = Annotated[OnnxSource | SyntheticSource | KgraphSource, Field(discriminator="kind")]
SOURCE_KINDS: tuple[str, ...] = ("onnx", "synthetic", "kgraph")


def as_onnx(source: OnnxSource | SyntheticSource | KgraphSource) -> OnnxSource | SyntheticSource | None:
    """The source as an ONNX model source, or None (a contest instance)."""
    return source if isinstance(source, (OnnxSource, SyntheticSource)) else None


def read_as_file(source: OnnxSource | SyntheticSource, path: str) -> OnnxSource:
    """``source``'s model read from ``path`` (the file a plan was made from) with every reading option
    of ``source`` kept: how ``verify`` rebuilds a plan's model."""
    options = source.model_dump(exclude={"kind", "path", "family", "size"})
    return OnnxSource.model_validate({**options, "path": path})


def as_kgraph(source: OnnxSource | SyntheticSource | KgraphSource) -> KgraphSource | None:
    """The source as a contest instance, or None."""
    return source if isinstance(source, KgraphSource) else None


def parse_model_source(
    text: str | Path,
    dims: dict[str, int] | None = None,
    fuse: bool = True,
    base: Path | None = None,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
) -> OnnxSource | SyntheticSource | KgraphSource:
    """A model named on a command line or in a suite: ``synthetic:KIND:N`` or a file path (relative
    paths resolved against ``base``, the suite's folder, when given). A ``.kgraph`` suffix, or a file
    that starts like a contest instance (``frontend.kgraph.looks_like_kgraph``), is a contest instance;
    any other file is read as ONNX."""
    spec = str(text)
    if spec.startswith(PREFIX):
        family, size = parse_spec(spec)
        return SyntheticSource.model_validate(
            {"family": family, "size": size, "dims": dict(dims or {}), "input_shapes": dict(input_shapes or {}), "fuse": fuse}
        )
    path = Path(spec)
    if base is not None and not path.is_absolute():
        spec = str((base / path).resolve())
    if looks_like_kgraph(Path(spec)):
        return KgraphSource(path=spec)
    return OnnxSource.model_validate(
        {"path": spec, "dims": dict(dims or {}), "input_shapes": dict(input_shapes or {}), "fuse": fuse}
    )
