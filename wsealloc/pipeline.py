"""Front half of every command: model + arch -> kernels -> cost table (no solving here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wsealloc.arch import Arch, load_arch
from wsealloc.cost import CostOptions
from wsealloc.errors import UsageError
from wsealloc.frontend import import_onnx
from wsealloc.graph.kernels import KernelGraph, build_kernels
from wsealloc.opmodels import CostTable, build_cost_table


@dataclass(frozen=True)
class ModelSpec:
    """Which model to plan and how to read it (recorded in plans so ``verify`` can redo it)."""

    path: str
    dims: Mapping[str, int] = field(default_factory=dict)
    fuse: bool = True
    weights_as_inputs: bool | None = None

    def to_dict(self) -> dict[str, object]:
        """Plain-data form for plan files."""
        return {"path": self.path, "dims": dict(self.dims), "fuse": self.fuse, "weights_as_inputs": self.weights_as_inputs}


def parse_dims(options: Sequence[str]) -> dict[str, int]:
    """Parse repeated ``--dim NAME=VALUE`` options into a mapping."""
    dims: dict[str, int] = {}
    for opt in options:
        name, sep, value = opt.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise UsageError(f"--dim {opt!r}: expected NAME=VALUE, e.g. --dim seq=1024")
        try:
            number = int(value.strip().replace("_", ""))
        except ValueError:
            raise UsageError(f"--dim {opt!r}: {value.strip()!r} is not an integer") from None
        if number <= 0:
            raise UsageError(f"--dim {opt!r}: dims must be positive integers")
        if name in dims and dims[name] != number:
            raise UsageError(f"--dim {name} is given twice ({dims[name]} and {number}); keep one")
        dims[name] = number
    return dims


def load_kernels(spec: ModelSpec) -> KernelGraph:
    """Import the ONNX model and group it into kernels."""
    graph = import_onnx(Path(spec.path), spec.dims, weights_as_inputs=spec.weights_as_inputs)
    return build_kernels(graph, fuse=spec.fuse)


def cost_model(
    spec: ModelSpec, arch: Arch | str, options: CostOptions, sets: Sequence[str] = (), *, check_feasible: bool = True
) -> CostTable:
    """Model spec + arch (object, or preset/path with ``--set`` overrides) -> cost table."""
    resolved = load_arch(arch, sets)  # an Arch object gets the overrides too
    return build_cost_table(load_kernels(spec), resolved, options, check_feasible=check_feasible)
