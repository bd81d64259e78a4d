"""ONNX-free types of an ISPD-2020 contest instance (a ``.kgraph`` file) and of a kernel's execution arguments.

A contest instance is a fabric (width x height tiles, a per-tile memory limit, score weights) and a
graph of kernels: ``conv`` kernels with their own formal arguments, and ``dblock``/``cblock``
residual blocks (three or four convs sharing the image split). ``input``/``output`` nodes are kept
for completeness but are never placed. See ``docs/ispd2020.md`` for the format as we read it.

Everything here is a frozen value; the reader is ``wsealloc.frontend.kgraph``, the kernel library
(the formulas) is ``wsealloc.cost.ispd2020``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property
from typing import Union


@dataclass(frozen=True)
class Fabric:
    """The fabric and the score weights of one instance (the ``.kgraph`` header)."""

    test: str
    width: int  # tiles along x
    height: int  # tiles along y
    memlimit: int  # per-tile memory limit, in the units of the memory formula
    wdeltat: int  # score weight of the largest kernel time
    wlength: int  # score weight of the wirelength
    wadapter: int  # score weight of the adapter cost (not publicly defined: not modelled)

    @property
    def area(self) -> int:
        """Tiles of the fabric."""
        return self.width * self.height


class ContestKind(str, enum.Enum):
    """The placeable kernel kinds of the contest's kernel library."""

    CONV = "conv"
    DBLOCK = "dblock"
    CBLOCK = "cblock"


class Orientation(str, enum.Enum):
    """How a kernel's rectangle lies on the fabric: R0 (its width along x) or R90 (height and width swap)."""

    R0 = "R0"
    R90 = "R90"


@dataclass(frozen=True)
class ConvArgs:
    """Formal arguments of a conv: image H x W, filter R x S, C input features, K filters, strides T and U."""

    H: int
    W: int
    R: int
    S: int
    C: int
    K: int
    T: int
    U: int

    def solution_order(self) -> tuple[int, ...]:
        """The arguments in the order of a solution line: ``H W C K R S T U``."""
        return (self.H, self.W, self.C, self.K, self.R, self.S, self.T, self.U)


@dataclass(frozen=True)
class BlockArgs:
    """Formal arguments of a dblock or cblock: F features on an H x W image."""

    F: int
    H: int
    W: int

    def solution_order(self) -> tuple[int, ...]:
        """The arguments in the order of a solution line: ``H W F``."""
        return (self.H, self.W, self.F)


FormalArgs = Union[ConvArgs, BlockArgs]  # noqa: UP007 - runtime alias on 3.10


@dataclass(frozen=True)
class ExecArgs:
    """Execution arguments of a kernel: the shared image split h x w, and per sub-conv c_i and k_i.

    A conv has one sub-conv (``c == (c',)``, ``k == (k',)``), a dblock three, a cblock four.
    """

    h: int
    w: int
    c: tuple[int, ...]
    k: tuple[int, ...]

    def solution_order(self) -> tuple[int, ...]:
        """The arguments in the order of a solution line: ``h w c1 .. cn k1 .. kn``."""
        return (self.h, self.w, *self.c, *self.k)


@dataclass(frozen=True)
class ContestKernel:
    """A placed kernel: its position among the placed kernels (file order), file id, name, kind and formal args."""

    index: int
    node_id: int
    name: str
    kind: ContestKind
    args: FormalArgs
    line: int = field(default=0, compare=False)  # line of the file that defines it (0: not from a file)


@dataclass(frozen=True)
class IoNode:
    """An ``input`` or ``output`` node: part of the graph, never placed."""

    node_id: int
    kind: str  # "input" or "output"
    name: str
    shape: tuple[int, ...]  # the ``n=[..]`` field, empty when absent
    line: int = field(default=0, compare=False)  # provenance, not content


@dataclass(frozen=True)
class ContestEdge:
    """A connection between two nodes (by file id) and the tensor it carries, shape (H, W, C)."""

    src: int
    dst: int
    shape: tuple[int, int, int]
    ports: tuple[str, str]  # the port names after ':' at each end ('y', 'x', '_')
    line: int = field(default=0, compare=False)  # provenance, not content


@dataclass(frozen=True)
class ContestGraph:
    """A contest instance: the fabric, the placed kernels in file order, io nodes and edges kept apart."""

    fabric: Fabric
    kernels: tuple[ContestKernel, ...]
    io_nodes: tuple[IoNode, ...]
    edges: tuple[ContestEdge, ...]  # between two placed kernels, file order
    io_edges: tuple[ContestEdge, ...]  # with an input or output node at one end
    source: str  # a label for messages (the file path)

    def __len__(self) -> int:
        return len(self.kernels)

    @cached_property
    def _by_name(self) -> dict[str, ContestKernel]:
        return {k.name: k for k in self.kernels}

    @cached_property
    def _by_id(self) -> dict[int, ContestKernel]:
        return {k.node_id: k for k in self.kernels}

    def by_name(self, name: str) -> ContestKernel:
        """A placed kernel by name (KeyError if absent)."""
        return self._by_name[name]

    def by_id(self, node_id: int) -> ContestKernel:
        """A placed kernel by file id (KeyError if absent, or if the id is an io node)."""
        return self._by_id[node_id]

    def has_kernel(self, name: str) -> bool:
        """Whether a placed kernel has this name."""
        return name in self._by_name

    def edge_pairs(self) -> tuple[tuple[int, int], ...]:
        """Edges between placed kernels as (source index, destination index) into ``kernels``."""
        return tuple((self._by_id[e.src].index, self._by_id[e.dst].index) for e in self.edges)
