"""The operator graph: what the front end hands to the rest of wsealloc (no ``onnx`` types here).

Every tensor has a concrete, positive shape; shape-only computation and Constant nodes are gone;
nodes are in topological order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from math import prod
from typing import Union

import numpy as np

AttrValue = Union[int, float, str, tuple[int, ...], tuple[float, ...], tuple[str, ...]]  # noqa: UP007 - runtime alias on 3.10


class TensorKind(enum.Enum):
    """What a tensor is, which decides where its bytes are counted."""

    INPUT = "input"  # graph input carrying per-sample data
    ACTIVATION = "activation"  # produced by a node from per-sample data
    WEIGHT = "weight"  # a parameter: resident in SRAM, counted in weight bytes
    STATE = "state"  # per-request resident data (a KV cache): in SRAM with its kernels, counted as state
    CONSTANT = "constant"  # a small folded value (shapes, axes, scalars)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Shape and type of one tensor."""

    name: str
    shape: tuple[int, ...]
    elem_bytes: int  # bytes per element in the source model's own dtype
    is_float: bool
    kind: TensorKind

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        return prod(self.shape)


@dataclass(frozen=True, slots=True)
class OpNode:
    """One ONNX node that does work on per-sample data."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]  # "" marks an omitted optional input
    outputs: tuple[str, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue | None:
        """An attribute value, or ``default`` when absent."""
        return self.attrs.get(key, default)


@dataclass(frozen=True)
class OpGraph:
    """A model with every shape resolved, ready for kernel grouping and costing."""

    source: str
    nodes: tuple[OpNode, ...]
    tensors: Mapping[str, TensorInfo]
    constants: Mapping[str, np.ndarray]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opset: int
    dims: Mapping[str, int]
    onnx_nodes: int  # nodes in the file, before dropping shape-only/constant ones
    dropped_nodes: int
    # STATE tensor -> the tensor holding its cache after this step (``graph.state``); empty: no state
    state_roots: Mapping[str, str] = field(default_factory=dict)
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # --input-shape, as given
    # how control flow was read (If branches taken, Loops unrolled), one sentence each, for reports
    control_flow: tuple[str, ...] = ()

    @cached_property
    def node_by_name(self) -> dict[str, OpNode]:
        """Map node name -> node (built once: lookups are on hot paths)."""
        return {n.name: n for n in self.nodes}

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Map node name -> position in topological order."""
        return {n.name: i for i, n in enumerate(self.nodes)}

    def consumers(self) -> dict[str, list[OpNode]]:
        """Map tensor name -> nodes reading it (in node order)."""
        result: dict[str, list[OpNode]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    result.setdefault(name, []).append(node)
        return result
