"""ONNX file -> :class:`~wsealloc.graph.OpGraph` with every shape concrete.

Pipeline: load without weight data -> structural checks -> classify graph inputs (per-sample data
vs. parameters listed as inputs) -> bind symbolic dims -> repeat {ONNX shape inference with data
propagation; fold constant shape subgraphs} until nothing changes -> check that every tensor that
carries work has a static positive shape -> drop constant and shape-only nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from wsealloc.errors import InputShapeError, ModelLoadError, ShapeError, UnsupportedOpError, UsageError, WseallocError
from wsealloc.frontend.contrib import dynamic_dispatch, shape_stand_ins
from wsealloc.frontend.control import (
    MAX_UNROLLED_NODES,
    count_nodes,
    graph_attr,
    holds_graph,
    inline_branch,
    is_if,
    is_loop,
    is_scan,
    loop_trip_count,
    refusal,
    scan_length,
    truth,
    unroll_loop,
    unroll_scan,
)
from wsealloc.frontend.fold import constant_node_value, evaluate, predicted_elements, small_enough
from wsealloc.frontend.llm import CACHE_INPUT, cache_inputs, past_dims
from wsealloc.frontend.load import SMALL_CONSTANT_ELEMENTS, load_model
from wsealloc.frontend.normalize import rewrite_sequences
from wsealloc.frontend.schema import check_nodes
from wsealloc.frontend.topo import node_label, sorted_nodes
from wsealloc.graph.ir import AttrValue, OpGraph, OpNode, TensorInfo, TensorKind
from wsealloc.units import format_bytes

# Rounds of folding and shape inference; each ends early when nothing changes. Nested If branches
# (Silero VAD: four levels) take a few rounds per level.
_MAX_FOLD_ROUNDS = 64
# If nodes whose condition is known only at run time, one inside the other's choice: each doubles the
# graphs imported and weighed (2^4 = 16 at most).
MAX_RUNTIME_IFS = 4
# Input slots that hold parameters, for models that list weights as graph inputs without data.
_PARAM_SLOTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": (1, 2),
    "MatMul": (1,),
    "MatMulInteger": (1,),
    "ConvInteger": (1,),
    "QLinearMatMul": (3,),
    "QLinearConv": (3, 8),  # weight, int32 bias
    "Gather": (0,),
    "LayerNormalization": (1, 2),
    "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2),
    "GroupNormalization": (1, 2),
    "SimplifiedLayerNormalization": (1,),
    "RMSNormalization": (1,),
    "Add": (0, 1),
    "Mul": (0, 1),
    "Sub": (0, 1),
    "Div": (0, 1),
    "PRelu": (1,),
}
# Ops we never evaluate at import time even if their inputs are known.
_NO_FOLD = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


# Integer MAC ops (quantized models): their weight operands (slots in _PARAM_SLOTS) are weights
# however small and integer they are, unlike shape-like integer constants.
_INT_MAC_OPS = ("MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv")

# Largest --dim value, and the bound on every dim of every tensor: sizes stay far from int64
# overflow in the cost arithmetic (2^31 tokens is already beyond any model a wafer holds).
MAX_DIM = 2**31
# Largest tensor (bytes) a model may hold: 1 PiB, over 20,000 times the SRAM of the largest preset
# wafer (WSE-3, 41 GiB), and far beyond any multi-wafer plan; a bigger tensor is a corrupt or
# mistyped shape (an image width of 2^40), refused with its size instead of planned as nonsense.
MAX_TENSOR_BYTES = 2**50
# ONNX's data propagation (shape inference following the values of 1-D integer tensors) keeps every
# element of a tensor it follows, about 140 bytes each: key positions over a context of 10^9 tokens
# grew past 24 GB. Shape subgraphs are folded here anyway (``fold_round``), so when an input has a dim
# above this, inference runs without it.
DATA_PROP_MAX_DIM = 2**20


@dataclass(frozen=True)
class MemoryLimit:
    """The most memory any plan of a model could hold (the pipeline gives the SRAM of the largest
    cluster of the arch), and how a message names that machine."""

    bytes: int
    machine: str  # "1,024 wafers of tiny"


_UNNAMED = ("", "?")


def _dims_of(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """Dims of a value info: int, symbolic name, or None (unknown); None when the rank is unknown.

    Called for every value info of every inference round (40,000 times for LLaMA-70B): one
    ``WhichOneof`` per dim instead of two ``HasField`` calls."""
    if vi.type.WhichOneof("value") != "tensor_type":
        return None
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in t.shape.dim:
        kind = d.WhichOneof("value")
        if kind == "dim_value":
            out.append(d.dim_value)
        else:  # "?" is how some exporters (Paddle2ONNX) spell an unnamed dim: no symbol shared by inputs
            out.append(d.dim_param if kind == "dim_param" and d.dim_param not in _UNNAMED else None)
    return out


def _static(dims: list[int | str | None] | None) -> bool:
    """True for a fully known shape (every dim an int)."""
    return dims is not None and all(isinstance(d, int) for d in dims)


def _known(dims: list[int | str | None] | None) -> bool:
    """True for a shape of sizes only (every dim a positive int)."""
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


# bfloat16 is floating point, but onnx maps it to ml_dtypes' type, which ``np.issubdtype(t, np.floating)``
# denies: without this, a bfloat16 model's KV cache would not be found as state, nor its activations
# costed in the arch's datatype. (The float8 kinds have the same gap; they are left as they were.)
_ML_FLOATS = frozenset({onnx.TensorProto.BFLOAT16})


def _elem_info(elem_type: int) -> tuple[int, bool] | None:
    """(bytes per element, is floating point) of an ONNX element type; None if ONNX knows no such type
    (a corrupt or newer file: the caller names the tensor)."""
    if elem_type == 0:
        return 4, True
    try:
        np_type = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except KeyError:
        return None
    return int(np.dtype(np_type).itemsize), elem_type in _ML_FLOATS or bool(np.issubdtype(np_type, np.floating))


def _attr_value(attr: onnx.AttributeProto) -> AttrValue | None:
    kind = attr.type
    if kind == onnx.AttributeProto.INT:
        return int(attr.i)
    if kind == onnx.AttributeProto.FLOAT:
        return float(attr.f)
    if kind == onnx.AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if kind == onnx.AttributeProto.INTS:
        return tuple(int(x) for x in attr.ints)
    if kind == onnx.AttributeProto.FLOATS:
        return tuple(float(x) for x in attr.floats)
    if kind == onnx.AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in attr.strings)
    return None  # tensors/graphs: not needed by the cost model


def _default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


class _Importer:
    """One import run. Holds the mutable working state of the passes; not exported."""

    def __init__(
        self,
        model: onnx.ModelProto,
        source: str,
        dims: Mapping[str, int],
        weights_as_inputs: bool | None,
        input_shapes: Mapping[str, tuple[int, ...]] | None = None,
        weigh: Callable[[OpGraph], int] | None = None,
        memory: MemoryLimit | None = None,
        origins: Mapping[str, str] | None = None,
    ):
        self.model = model
        self.source = source
        self.dims = dict(dims)
        self.input_shapes = {name: tuple(int(v) for v in shape) for name, shape in (input_shapes or {}).items()}
        self.weights_as_inputs = weights_as_inputs
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.onnx_nodes = count_nodes(model.graph)  # subgraphs' nodes included
        self.weigh = weigh or _output_elements
        self.notes: list[str] = []  # how control flow was read (OpGraph.control_flow)
        self.folded_ifs = 0  # If nodes whose condition the shapes fixed
        self.forks_left = MAX_RUNTIME_IFS
        self.order: list[str] = []
        self.elem_types: dict[str, int] = {}
        self.values: dict[str, np.ndarray] = {}
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.strict_failed = False  # some strict shape inference pass failed (see infer)
        self.memory = memory
        self.origins = dict(origins or {})  # dim name -> the option that bound it ("--context 4096")
        self.data_prop = True  # ONNX's data propagation (off for inputs with dims above DATA_PROP_MAX_DIM)

    # -- checks ------------------------------------------------------------------------------
    def check_opset(self) -> None:
        known = onnx.defs.onnx_opset_version()
        if self.opset > known:
            raise ModelLoadError(
                f"{self.source}: uses ONNX opset {self.opset}, newer than this onnx package knows "
                f"({known}); re-export with opset <= {known} or upgrade onnx"
            )

    # -- inputs and dims -----------------------------------------------------------------------
    def classify_inputs(self) -> tuple[list[onnx.ValueInfoProto], set[str]]:
        """Split graph inputs into per-sample data inputs and parameters (names)."""
        params: set[str] = set()
        data_inputs: list[onnx.ValueInfoProto] = []
        consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in self.graph.node:
            for slot, name in enumerate(node.input):
                consumers.setdefault(name, []).append((node, slot))
        for vi in self.graph.input:
            if vi.name in self.initializers:
                params.add(vi.name)  # old exporters list initializers as inputs too
                continue
            if self.weights_as_inputs is not False and self._parameter_like(vi, consumers.get(vi.name, [])):
                params.add(vi.name)
                continue
            data_inputs.append(vi)
        return data_inputs, params

    def _parameter_like(self, vi: onnx.ValueInfoProto, uses: list[tuple[onnx.NodeProto, int]]) -> bool:
        dims = _dims_of(vi)
        if self.weights_as_inputs is True:
            return dims is not None and all(isinstance(d, int) for d in dims)
        if not uses or dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
            return False
        for node, slot in uses:
            slots = _PARAM_SLOTS.get(node.op_type)
            if slots is None or slot not in slots:
                return False
            if node.op_type in ("Add", "Mul", "Sub", "Div") and len(dims) > 1:
                return False  # elementwise operands of rank > 1 are likely data, e.g. a mask
            if node.op_type == "MatMul" and len(dims) > 2:
                return False
        return True

    def apply_input_shapes(self) -> dict[str, int]:
        """Set the full shape of every input named by ``--input-shape`` (whatever its dims were: named,
        unnamed, -1 or 0); the symbols those dims carried are bound to the sizes given (so another input
        sharing the symbol follows). A shape that names no input, has another rank, or contradicts a
        static positive dim of the model is a one-line error naming both."""
        inputs = [vi for vi in self.graph.input if vi.name not in self.initializers]
        by_name = {vi.name: vi for vi in inputs}
        implied: dict[str, tuple[int, str]] = {}  # symbol -> (size, input that set it)
        for name, shape in self.input_shapes.items():
            given = "x".join(str(v) for v in shape)
            vi = by_name.get(name)
            if vi is None:
                listed = "; ".join(f"{v.name} {_shape_text(_dims_of(v))}" for v in inputs) or "none"
                raise UsageError(f"{self.source}: --input-shape {name}={given} names no input of the model; its inputs: {listed}")
            if vi.type.WhichOneof("value") != "tensor_type":
                raise ShapeError(f"{self.source}: --input-shape {name}={given}: input {name!r} is not a tensor")
            dims = _dims_of(vi)
            if dims is not None and len(dims) != len(shape):
                raise ShapeError(
                    f"{self.source}: --input-shape {name}={given} has rank {len(shape)}, but input {name!r} is "
                    f"{_shape_text(dims)} (rank {len(dims)}); give {len(dims)} sizes"
                )
            for axis, (d, v) in enumerate(zip(dims or [], shape, strict=False)):
                if isinstance(d, int) and d > 0 and d != v:
                    raise ShapeError(
                        f"{self.source}: --input-shape {name}={given} contradicts the model: dim {axis} of input {name!r} "
                        f"{_shape_text(dims)} is fixed at {d}, not {v}"
                    )
                if isinstance(d, str):
                    if d in self.dims and self.dims[d] != v:
                        raise UsageError(
                            f"{self.source}: --input-shape {name}={given} sets dim {d} to {v}, but --dim {d}={self.dims[d]}"
                        )
                    if d in implied and implied[d][0] != v:
                        size, other = implied[d]
                        raise UsageError(
                            f"{self.source}: --input-shape {name}={given} sets dim {d} to {v}, but --input-shape for "
                            f"{other!r} sets it to {size}; inputs sharing a named dim must agree"
                        )
                    implied.setdefault(d, (v, name))
            shape_proto = vi.type.tensor_type.shape
            shape_proto.ClearField("dim")
            for v in shape:
                shape_proto.dim.add().dim_value = v
        return {symbol: size for symbol, (size, _) in implied.items()}

    def bind_dims(self, data_inputs: list[onnx.ValueInfoProto], implied: Mapping[str, int] | None = None) -> None:
        """Replace symbolic dims of data inputs by --dim values (and the sizes --input-shape implies for
        the symbols it replaced); error on unbound/unknown/zero, naming the options that fix it."""
        implied = dict(implied or {})
        symbols: dict[str, list[str]] = {}
        for vi in data_inputs:
            dims = _dims_of(vi)
            if dims is None:
                raise self._unbound(data_inputs, f"graph input {vi.name!r} has no shape")
            for d in dims:
                if isinstance(d, str):
                    symbols.setdefault(d, []).append(vi.name)
                elif d is None or d <= 0:
                    what = (
                        "an unknown dim" if d is None else "a zero-sized dim (unknown)" if d == 0 else "a negative dim (unknown)"
                    )
                    raise self._unbound(data_inputs, f"graph input {vi.name!r} has {what} {_shape_text(dims)}")
                elif d >= MAX_DIM:
                    raise ShapeError(
                        f"{self.source}: graph input {vi.name!r} has a dim of {d:,} in {dims}, beyond any wafer "
                        f"(dims must be below {MAX_DIM:,}); re-export with real shapes, or give --input-shape"
                    )
        unknown = sorted(set(self.dims) - set(symbols) - set(implied))
        if unknown:
            listed = ", ".join(sorted(symbols)) or "none (all input dims are static)"
            raise UsageError(f"{self.source}: --dim {unknown[0]} does not name a symbolic dim of the model; model dims: {listed}")
        bound = {**implied, **self.dims}
        unbound = sorted(set(symbols) - set(bound))
        if unbound:
            example = " ".join(f"--dim {s}=N" for s in unbound)
            err = self._unbound(
                data_inputs, f"unbound symbolic dims {', '.join(unbound)}; bind them with {example}", bound=bound, named=True
            )
            raise _decode_unbound(self.source, data_inputs, unbound, err) or err
        for name, value in self.dims.items():
            if not 0 < value < MAX_DIM:
                raise UsageError(f"--dim {name}={value}: dims must be positive integers below {MAX_DIM:,}")
        for vi in data_inputs:
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param:
                    d.dim_value = bound[d.dim_param]
        # Value infos and outputs may carry the exporter's own symbols ("s0*2"): drop what is not static.
        # A declared -1 or 0 is an exporter's "unknown" (Paddle2ONNX writes [-1, 2]), not a size.
        keep = [vi for vi in self.graph.value_info if _known(_dims_of(vi))]
        del self.graph.value_info[:]
        self.graph.value_info.extend(keep)
        for out in self.graph.output:
            dims = _dims_of(out)
            if dims is not None and not _known(dims):
                out.type.tensor_type.ClearField("shape")

    def size_inputs(self, data_inputs: list[onnx.ValueInfoProto], declared: Mapping[str, list[int | str | None] | None]) -> None:
        """Size the inputs of one pass, now that their dims are bound, before any other tensor is sized.

        Their bytes (a decode export's KV cache among them) must fit ``memory``, the most any plan
        could hold; if not, the error names the options that sized them (``--context``, ``--batch``,
        ``--dim``, ``--input-shape``: ``declared`` has the dims as the file gave them) and the bytes they
        would need. Every later size follows from these: refusing here is what keeps an absurd
        ``--context`` from being sized by shape inference and folding (which ran out of memory). With
        a dim above ``DATA_PROP_MAX_DIM`` inference runs without ONNX's data propagation."""
        sized: list[tuple[onnx.ValueInfoProto, list[int], int]] = []
        for vi in data_inputs:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            info = _elem_info(vi.type.tensor_type.elem_type)  # None: named where the tensor is read
            sized.append((vi, shape, math.prod(shape) * (info[0] if info else 1)))
        self.data_prop = all(d <= DATA_PROP_MAX_DIM for _, shape, _ in sized for d in shape)
        total = sum(size for _, _, size in sized)
        if self.memory is None or total <= self.memory.bytes:
            return
        sized.sort(key=lambda item: -item[2])
        options = list(dict.fromkeys(o for vi, shape, _ in sized for o in self._sized_by(vi.name, declared.get(vi.name), shape)))
        caches = [item for item in sized if CACHE_INPUT.search(item[0].name) and len(item[1]) >= 3]
        vi, shape, size = caches[0] if caches else sized[0]
        what = (
            f"the KV cache: {_big_bytes(sum(s for _, _, s in caches))} in {len(caches)} input(s) like {vi.name} {shape}"
            if caches
            else f"the largest: input {vi.name!r} {shape}, {_big_bytes(size)}"
        )
        by = ", ".join(options[:3]) if options else "the model's input sizes"
        raise ShapeError(
            f"{self.source}: {by} would need {_big_bytes(total)} for the inputs of one pass ({what}), more than "
            f"{self.memory.machine} hold ({_big_bytes(self.memory.bytes)} of SRAM); no plan could hold them: "
            + ("give smaller sizes" if options else "check the exported shapes")
        )

    def _sized_by(self, name: str, declared: list[int | str | None] | None, shape: list[int]) -> list[str]:
        """The options that set input ``name``'s sizes: its ``--input-shape``, or the ``--context``,
        ``--batch`` or ``--dim`` that bound its named dims."""
        if name in self.input_shapes:
            return [f"--input-shape {name}={'x'.join(map(str, shape))}"]
        named = [d for d in declared or [] if isinstance(d, str)]
        return [self.origins.get(d, f"--dim {d}={self.dims[d]}") for d in named if d in self.dims or d in self.origins]

    def _unbound(
        self, data_inputs: list[onnx.ValueInfoProto], what: str, *, bound: Mapping[str, int] | None = None, named: bool = False
    ) -> InputShapeError:
        """The error for inputs whose sizes the model leaves open: it names the problem, lists every data
        input with its shape, and carries the ``--input-shape`` options that fix it (known sizes filled
        in, ``N`` where the user must choose)."""
        bound = bound or {}
        listing: list[tuple[str, str]] = []
        options: list[str] = []
        for vi in data_inputs:
            dims = _dims_of(vi)
            listing.append((vi.name, _shape_text(dims)))
            if dims is None:
                options.append(f"{vi.name}=N")
                continue
            filled = [
                d if isinstance(d, int) and d > 0 else bound[d] if isinstance(d, str) and d in bound else None for d in dims
            ]
            if any(f is None for f in filled):
                options.append(f"{vi.name}=" + "x".join("N" if f is None else str(f) for f in filled))
        fix = " ".join(f"--input-shape {_quoted(o)}" for o in options)
        lead = what if named else f"{what}; wsealloc needs every input size"
        joiner = ", or give whole shapes with" if named else ": give the shape with"
        return InputShapeError(
            f"{self.source}: {lead}{joiner} {fix} (N: the size you run with)", inputs=tuple(listing), options=tuple(options)
        )

    # -- shapes ----------------------------------------------------------------------------------
    def check_declared(self, order: list[str]) -> None:
        """Shapes the file declares (``value_info``, graph outputs) must agree with inference.

        The import loop infers with the declarations in place (they supply what inference cannot
        know, e.g. custom ops' outputs), and ONNX's lenient inference keeps a declared shape wherever
        it contradicts a node, swallowing the node's error: a stale ``value_info`` would be planned.
        So when a strict inference pass failed during the loop (``infer``), once everything is folded
        inference runs once more over the graph without them, and a declared shape that differs from
        an inferred one is an error naming the tensor and both shapes (the first in graph order).
        Where inference knows nothing, the declaration stands.
        """
        bare = self._undeclared()
        sources = {vi.name for vi in self.graph.input} | {t.name for t in self.graph.initializer}
        declared = {vi.name: vi for vi in (*self.graph.value_info, *self.graph.output) if vi.name not in sources}
        try:
            inferred_model = self.infer_shapes(bare, strict=False)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError):
            return  # the import loop's inference of the same graph succeeded; nothing to compare against
        conflicts: list[tuple[str, list[int | str | None], list[int | str | None]]] = []
        for vi in (*inferred_model.graph.value_info, *inferred_model.graph.output):
            mine = declared.get(vi.name)
            if mine is None or mine.type == vi.type:
                continue
            said, found = _dims_of(mine), _dims_of(vi)
            if _static(said) and _static(found) and said != found:
                conflicts.append((vi.name, said or [], found or []))
        if conflicts:
            position = {name: i for i, name in enumerate(order)}
            name, said, found = min(conflicts, key=lambda c: position.get(c[0], len(position)))
            raise ShapeError(
                f"{self.source}: tensor {name!r} is declared {said} (value_info or graph output) but ONNX shape "
                f"inference over the graph gives {found}; the declaration is stale: re-export the model, or delete "
                "its value_info so that shapes are inferred"
            )

    def check_consistent(self) -> None:
        """The graph's nodes must agree with one another.

        Run when strict inference first fails (before any folding: folding could evaluate the bad node
        away). If a strict pass (types checked) over the graph without the file's declarations fails
        too, the graph itself is inconsistent, whatever the declarations say: some node cannot take what
        it is given (a Sub of shapes that do not broadcast, a Reshape whose target cannot hold its input,
        an Add of float and int64, a MatMul of a scalar). The lenient pass would skip that node silently
        and the model would be planned as if nothing were wrong. If it passes, a declaration is stale:
        ``check_declared`` names it once folding is done. A graph holding control flow (If, Loop,
        Scan) is left to the control-flow reader (``frontend.control``): a branch that cannot run with
        the given shapes fails ONNX's strict pass without making the graph inconsistent."""
        if any(n.op_type in ("If", "Loop", "Scan") for n in self.graph.node):
            return
        bare = self._undeclared()
        in_order = sorted_nodes(bare.graph, self.source)  # ONNX infers in file order: a file may list nodes unsorted
        del bare.graph.node[:]
        bare.graph.node.extend(in_order)
        try:
            self.infer_shapes(bare, strict=True, check_type=True)
        except ValueError:
            return  # an element type ONNX does not define: named where the tensor is read (_elem_info)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
            said = " ".join(str(exc).split())
            raise ShapeError(
                f"{self.source}: the graph is inconsistent, ONNX shape inference says: "
                f"{said if len(said) <= 300 else said[:297] + '...'}; re-export the model"
            ) from exc

    def _undeclared(self) -> onnx.ModelProto:
        """A copy of the model without the shapes the file declares (value_info, graph outputs' shapes)."""
        bare = onnx.ModelProto()
        bare.CopyFrom(self.model)
        del bare.graph.value_info[:]
        for out in bare.graph.output:
            out.type.tensor_type.ClearField("shape")
        return bare

    def known_values(self) -> None:
        for name, init in self.initializers.items():
            if name not in self.values and init.data_location != onnx.TensorProto.EXTERNAL:
                try:
                    self.values[name] = numpy_helper.to_array(init)
                except (ValueError, TypeError):
                    continue

    def infer_shapes(self, model: onnx.ModelProto, *, strict: bool, check_type: bool = False) -> onnx.ModelProto:
        """ONNX shape inference with data propagation; an allocation that fails inside it is a ShapeError.

        ONNX allocates what a node's attributes ask for before checking them (a Split with
        ``num_outputs`` 2^40 ends in ``std::bad_alloc``, seen by the fuzzer). Data propagation is off
        when an input has a dim above ``DATA_PROP_MAX_DIM`` (see there)."""
        try:
            return onnx.shape_inference.infer_shapes(
                shape_stand_ins(model), check_type=check_type, strict_mode=strict, data_prop=self.data_prop
            )
        except MemoryError as exc:
            raise ShapeError(
                f"{self.source}: ONNX shape inference ran out of memory: some size in the model is absurd (an attribute "
                "such as Split's num_outputs, or a dim); re-export the model"
            ) from exc

    def infer(self) -> dict[str, list[int | str | None] | None]:
        # Strict first (types checked): on a sound graph it returns what the lenient pass would, at the
        # same cost, and it is the cheap way to notice that some node's inference failed, e.g. because
        # its output contradicts a declared value_info (which the lenient pass silently keeps) or its
        # inputs do not fit it. Only then is the lenient pass run: at the first failure check_consistent
        # tells an inconsistent graph (an error) from a stale declaration, which check_declared names
        # once folding is done.
        try:
            inferred = self.infer_shapes(self.model, strict=True, check_type=True)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError):
            # (ValueError: the type check met an element type ONNX does not define; _elem_info names it)
            if not self.strict_failed:
                self.check_consistent()  # the first failure (before folding): the graph itself, or a declaration?
            self.strict_failed = True
            try:
                inferred = self.infer_shapes(self.model, strict=False)
            except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
                raise ShapeError(f"{self.source}: ONNX shape inference failed: {str(exc).splitlines()[0]}") from exc
        shapes: dict[str, list[int | str | None] | None] = {}
        for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
            dims = _dims_of(vi)
            if dims is not None or vi.name not in shapes:
                shapes[vi.name] = dims
        self.elem_types = {
            vi.name: vi.type.tensor_type.elem_type
            for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)
        }
        for init in self.graph.initializer:
            shapes[init.name] = [int(d) for d in init.dims]
            self.elem_types[init.name] = init.data_type
        return shapes

    def fold_round(
        self, nodes: list[onnx.NodeProto], shapes: Mapping[str, list[int | str | None] | None]
    ) -> list[onnx.NodeProto]:
        """Evaluate every node computable from known values; return the remaining nodes."""
        remaining: list[onnx.NodeProto] = []
        for node in nodes:
            result = self._try_fold(node, shapes)
            if result is None or not small_enough(result):
                remaining.append(node)
                continue
            for name, value in zip(node.output, result, strict=False):
                if name:
                    self.values[name] = value
        return remaining

    def _try_fold(self, node: onnx.NodeProto, shapes: Mapping[str, list[int | str | None] | None]) -> list[np.ndarray] | None:
        if node.domain not in ("", "ai.onnx") or node.op_type in _NO_FOLD:
            return None
        if node.op_type == "Constant":
            value = constant_node_value(node)
            return None if value is None else [value]
        if node.op_type in ("Shape", "Size"):
            dims = shapes.get(node.input[0])
            if dims is None or not all(isinstance(d, int) for d in dims):
                return None
            static = [int(d) for d in dims if isinstance(d, int)]
            if node.op_type == "Size":
                return [np.array(int(np.prod(static, dtype=np.int64)), dtype=np.int64)]
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), len(static))
            return [np.array(static[slice(start, end)], dtype=np.int64)]
        if any(sub.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for sub in node.attribute):
            return None
        if not all(not name or name in self.values for name in node.input):
            return None
        args: list[np.ndarray | None] = [self.values[n] if n else None for n in node.input]
        size = predicted_elements(node, args)
        if size is not None and size > SMALL_CONSTANT_ELEMENTS:
            return None  # not shape data (the result would be refused by small_enough after allocating it)
        try:
            return evaluate(node, args, self.opset)
        except Exception:  # noqa: BLE001 - an op we cannot evaluate stays in the graph; shapes decide later
            return None

    def rebuild(self, nodes: list[onnx.NodeProto]) -> None:
        """Put the remaining nodes back and expose folded values as initializers for shape inference."""
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        present = {t.name for t in self.graph.initializer}
        for name, value in self.values.items():
            if name not in present:
                self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))

    # -- result ----------------------------------------------------------------------------------
    def run(self) -> OpGraph:
        self.check_opset()
        # ONNX's own per-node checks (arity, attribute types) before anything reads a node's inputs
        check_nodes(self.model, self.source)
        nodes = sorted_nodes(self.graph, self.source)
        data_inputs, params = self.classify_inputs()
        if not data_inputs:
            raise ModelLoadError(f"{self.source}: the graph has no data inputs (every input looks like a parameter)")
        declared = {vi.name: _dims_of(vi) for vi in data_inputs}
        self.bind_dims(data_inputs, self.apply_input_shapes())
        self.size_inputs(data_inputs, declared)
        self.order = [out for node in nodes for out in node.output]
        self.known_values()
        return self.finish(nodes, self.infer(), data_inputs, params)

    def finish(
        self,
        nodes: list[onnx.NodeProto],
        shapes: dict[str, list[int | str | None] | None],
        data_inputs: list[onnx.ValueInfoProto],
        params: set[str],
    ) -> OpGraph:
        """Resolve shapes and control flow, then emit: an If whose condition is known only at run time
        is weighed branch by branch (:meth:`fork`); a subgraph left over is refused, never dropped."""
        nodes, shapes = self.resolve(nodes, shapes)
        runtime_if = next((n for n in nodes if is_if(n)), None)
        if runtime_if is not None:
            return self.fork(runtime_if, data_inputs, params)
        left = next((n for n in nodes if holds_graph(n)), None)
        if left is not None:
            why = (
                loop_trip_count(left, self.values)[1]
                if is_loop(left)
                else scan_length(left, shapes, self.opset)[1]
                if is_scan(left)
                else ""
            )
            raise UnsupportedOpError(f"{self.source}: node {refusal(left, why)}")
        if self.strict_failed:
            self.check_declared(self.order)
        graph = self.emit(nodes, shapes, data_inputs, params)
        notes = list(self.notes)
        if self.folded_ifs:
            notes.append(f"{self.folded_ifs} If node(s) with a condition the shapes fix: the branch taken inlined")
        return replace(graph, control_flow=tuple(notes))

    def clone(self) -> _Importer:
        """An independent copy of this import's state (the graph, the folded values, the notes)."""
        twin = _Importer.__new__(_Importer)
        twin.__dict__.update(self.__dict__)
        twin.model = onnx.ModelProto()
        twin.model.CopyFrom(self.model)
        twin.graph = twin.model.graph
        twin.values = dict(self.values)
        twin.initializers = {t.name: t for t in twin.graph.initializer}
        twin.notes = list(self.notes)
        twin.elem_types = dict(self.elem_types)
        return twin

    def fork(self, node: onnx.NodeProto, data_inputs: list[onnx.ValueInfoProto], params: set[str]) -> OpGraph:
        """An If whose condition only a run knows: import the graph once with each branch inlined, weigh
        both (the caller's measure of work: MACs + vector ops in the pipeline) and keep the costlier,
        saying so in ``control_flow``."""
        label = f"{node.name!r}" if node.name else f"with output {node.output[0]!r}"
        if self.forks_left <= 0:
            why = (
                f"more than {MAX_RUNTIME_IFS} nested If nodes have conditions known only at run time (each doubles the "
                "graphs weighed); give the input shapes that fix them, or re-export the model with them folded"
            )
            raise UnsupportedOpError(f"{self.source}: node {refusal(node, why)}")
        names = ("then_branch", "else_branch")
        graphs: list[OpGraph | None] = []
        failures: list[WseallocError] = []
        for branch in names:
            twin = self.clone()
            twin.forks_left = self.forks_left - 1
            twin.replace_node(node, inline_branch(twin.graph, _twin_node(twin.graph, node), branch))
            twin_nodes = sorted_nodes(twin.graph, twin.source)
            try:
                graphs.append(twin.finish(twin_nodes, twin.infer(), data_inputs, params))
            except (ShapeError, UnsupportedOpError) as exc:
                # a branch that cannot run with these input shapes (exporters trace one branch per input
                # size: Silero VAD's 8 kHz branch on a 16 kHz chunk) is not what a run executes
                graphs.append(None)
                failures.append(exc)
        sizes = [len(graph_attr(node, b).node) for b in names]
        cond = f"If {label}: condition {node.input[0]!r} is known only at run time"
        first, second = graphs
        if first is None and second is None:
            raise failures[0]
        if first is None or second is None:
            pick = 0 if second is None else 1
            other = str(failures[0]).removeprefix(f"{self.source}: ")
            note = (
                f"{cond}: {names[pick]} ({sizes[pick]} nodes) is planned; {names[1 - pick]} ({sizes[1 - pick]} nodes) "
                f"cannot run with these input shapes ({other[:160]})"
            )
            chosen = graphs[pick]
            assert chosen is not None
            return replace(chosen, control_flow=(note, *chosen.control_flow))
        weights = [self.weigh(first), self.weigh(second)]
        pick = 0 if weights[0] >= weights[1] else 1
        note = (
            f"{cond}: the costlier branch is planned, {names[pick]} ({sizes[pick]} nodes, {weights[pick]:,} MACs + vector "
            f"ops) over {names[1 - pick]} ({sizes[1 - pick]} nodes, {weights[1 - pick]:,})"
        )
        chosen = (first, second)[pick]
        return replace(chosen, control_flow=(note, *chosen.control_flow))

    def replace_node(self, node: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> None:
        """Put ``nodes`` where ``node`` is in the graph; refresh the initializers and known values."""
        out: list[onnx.NodeProto] = []
        for n in self.graph.node:
            if list(n.output) == list(node.output) and n.op_type == node.op_type:
                out.extend(nodes)
            else:
                out.append(n)
        del self.graph.node[:]
        self.graph.node.extend(out)
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.known_values()

    def expand_control_flow(self, shapes: Mapping[str, list[int | str | None] | None]) -> bool:
        """Inline every If whose condition is known and unroll every Loop whose trip count is; True if
        anything changed (see :mod:`wsealloc.frontend.control`)."""
        out: list[onnx.NodeProto] = []
        changed = False
        for node in list(self.graph.node):
            if is_if(node) and node.input[0] in self.values:
                branch = "then_branch" if truth(self.values[node.input[0]]) else "else_branch"
                out.extend(inline_branch(self.graph, node, branch))
                self.folded_ifs += 1
                changed = True
            elif is_loop(node):
                trips, why = loop_trip_count(node, self.values)
                if trips is None:
                    out.append(node)
                    continue
                body = graph_attr(node, "body")
                scans = len(body.output) - 1 - (len(node.input) - 2)
                if trips == 0 and scans > 0:
                    raise UnsupportedOpError(f"{self.source}: node {refusal(node, why + ' and its scan outputs would be empty')}")
                if trips * len(body.node) > MAX_UNROLLED_NODES:
                    why = (
                        f"its {trips:,} iterations of {len(body.node)} nodes exceed the {MAX_UNROLLED_NODES:,} unrolled "
                        "nodes wsealloc plans"
                    )
                    raise UnsupportedOpError(f"{self.source}: node {refusal(node, why)}")
                nodes, note = unroll_loop(self.graph, node, trips, self.opset)
                out.extend(nodes)
                self.notes.append(note)
                changed = True
            elif is_scan(node):
                length, why = scan_length(node, shapes, self.opset)
                if length is None:
                    out.append(node)
                    continue
                body = graph_attr(node, "body")
                if length * len(body.node) > MAX_UNROLLED_NODES:
                    why = (
                        f"its {length:,} iterations of {len(body.node)} nodes exceed the {MAX_UNROLLED_NODES:,} unrolled "
                        "nodes wsealloc plans"
                    )
                    raise UnsupportedOpError(f"{self.source}: node {refusal(node, why)}")
                nodes, note = unroll_scan(self.graph, node, length, self.opset)
                out.extend(nodes)
                self.notes.append(note)
                changed = True
            else:
                out.append(node)
        if changed:
            del self.graph.node[:]
            self.graph.node.extend(out)
        return changed

    def resolve(
        self, nodes: list[onnx.NodeProto], shapes: dict[str, list[int | str | None] | None]
    ) -> tuple[list[onnx.NodeProto], dict[str, list[int | str | None] | None]]:
        """Alternate folding and shape inference until nothing changes; the remaining nodes and shapes."""
        for _ in range(_MAX_FOLD_ROUNDS):
            before = len(nodes)
            nodes = self.fold_round(nodes, shapes)
            self.rebuild(nodes)
            rewritten = rewrite_sequences(self.graph, shapes, self.values)
            expanded = self.expand_control_flow(shapes)
            if rewritten or expanded:
                self.initializers = {t.name: t for t in self.graph.initializer}
                self.known_values()
                nodes = sorted_nodes(self.graph, self.source)
            elif len(nodes) == before:
                break
            shapes = self.infer()
        return nodes, shapes

    def emit(
        self,
        nodes: list[onnx.NodeProto],
        shapes: Mapping[str, list[int | str | None] | None],
        data_inputs: list[onnx.ValueInfoProto],
        params: set[str],
    ) -> OpGraph:
        data_names = {vi.name for vi in data_inputs}
        live: set[str] = set(data_names)
        live_nodes: list[onnx.NodeProto] = []
        for node in nodes:
            if any(n in live for n in node.input if n):
                live_nodes.append(node)
                live.update(o for o in node.output if o)
        if not live_nodes:
            raise ModelLoadError(f"{self.source}: no node depends on the model inputs; nothing to allocate")
        tensors: dict[str, TensorInfo] = {}
        missing: list[str] = []
        # integer tensors read as the operands of integer MAC ops are weights however small they are
        # (a 64x64 int8 MatMulInteger weight), not shape-like constants
        params = params | {
            node.input[i]
            for node in live_nodes
            if node.op_type in _INT_MAC_OPS
            for i in _PARAM_SLOTS[node.op_type]
            if i < len(node.input) and node.input[i]
        }
        for idx, node in enumerate(live_nodes):
            for name in (*node.input, *node.output):
                if not name or name in tensors:
                    continue
                dims = shapes.get(name)
                if dims is None or not all(isinstance(d, int) for d in dims):
                    if name in live:
                        missing.append(f"{name!r} of {node_label(node, idx)}{self._why_unknown(node)}")
                        continue
                    raise ShapeError(f"{self.source}: shape of constant {name!r} read by {node_label(node, idx)} is unknown")
                shape = tuple(int(d) for d in dims if isinstance(d, int))
                if name in live and any(d <= 0 for d in shape):
                    raise ShapeError(
                        f"{self.source}: tensor {name!r} of {node_label(node, idx)} has a non-positive dim {list(shape)}; "
                        "check the --dim values and the exported shapes"
                    )
                elem_type = self.elem_types.get(name, 1)
                info = _elem_info(elem_type)
                if info is None:
                    raise ModelLoadError(
                        f"{self.source}: tensor {name!r} of {node_label(node, idx)} has element type {elem_type}, "
                        "which ONNX does not define; re-export the model (the file may be corrupt)"
                    )
                elem_bytes, is_float = info
                self._check_size(name, node_label(node, idx), shape, elem_bytes)
                kind = self._kind(name, live, data_names, params, shape, is_float)
                tensors[name] = TensorInfo(name, shape, elem_bytes, is_float, kind)
        if missing:
            dispatch = dynamic_dispatch(self.graph)
            if dispatch is not None:
                raise UnsupportedOpError(
                    f"{self.source}: a mixture-of-experts dispatch with data-dependent shapes (NonZero {dispatch[1]!r} of the "
                    f"indices of TopK {dispatch[0]!r}): its experts' token sets are known only at run time; export the "
                    "block as ONNX Runtime's com.microsoft MoE (its model builder does) or with a fixed capacity per expert"
                )
            more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
            raise ShapeError(f"{self.source}: cannot resolve the shape of {'; '.join(missing[:3])}{more}{self._strict_reason()}")
        constants = {n: v for n, v in self.values.items() if n in tensors and tensors[n].kind is TensorKind.CONSTANT}
        op_nodes = tuple(
            OpNode(
                name=node.name or f"{node.op_type}_{i}",
                op_type=node.op_type,
                domain=node.domain if node.domain != "ai.onnx" else "",
                inputs=tuple(node.input),
                outputs=tuple(node.output),
                attrs={a.name: v for a in node.attribute if (v := _attr_value(a)) is not None},
            )
            for i, node in enumerate(live_nodes)
        )
        outputs = tuple(o.name for o in self.graph.output if o.name in tensors)
        return OpGraph(
            source=self.source,
            nodes=_unique_names(op_nodes),
            tensors=tensors,
            constants=constants,
            inputs=tuple(vi.name for vi in data_inputs),
            outputs=outputs,
            opset=self.opset,
            dims=dict(self.dims),
            input_shapes=dict(self.input_shapes),
            onnx_nodes=self.onnx_nodes,
            dropped_nodes=max(self.onnx_nodes - len(live_nodes), 0),
        )

    def _check_size(self, name: str, label: str, shape: tuple[int, ...], elem_bytes: int) -> None:
        """Refuse a tensor no wafer could ever hold (a dim of 2^31 or more, more than 1 PiB)."""
        size = math.prod(shape) * elem_bytes  # Python ints: no overflow before the check
        if any(d >= MAX_DIM for d in shape) or size > MAX_TENSOR_BYTES:
            raise ShapeError(
                f"{self.source}: tensor {name!r} of {label} has shape {list(shape)} ({_big_bytes(size)}), beyond any "
                f"wafer (at most 1 PiB per tensor, dims below {MAX_DIM:,}); check the --dim values and the exported shapes"
            )

    def _kind(
        self, name: str, live: set[str], data: set[str], params: set[str], shape: tuple[int, ...], is_float: bool
    ) -> TensorKind:
        if name in data:
            return TensorKind.INPUT
        if name in live:
            return TensorKind.ACTIVATION
        if name in params or is_float or int(np.prod(shape, dtype=np.int64)) > 4096:
            return TensorKind.WEIGHT
        return TensorKind.CONSTANT if name in self.values else TensorKind.WEIGHT

    def _strict_reason(self) -> str:
        """Why shape inference left a tensor unknown, in ONNX's words: the lenient pass used for
        importing skips failing nodes silently; the strict one names the node and the mismatch
        (e.g. incompatible MatMul dimensions, an axis out of range, a zero stride)."""
        try:
            self.infer_shapes(self.model, strict=True, check_type=True)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as exc:
            return f"; ONNX shape inference says: {' '.join(str(exc).split())[:300]}"
        return ""

    @staticmethod
    def _why_unknown(node: onnx.NodeProto) -> str:
        if node.domain not in ("", "ai.onnx"):
            return (
                f" (custom-domain op {node.domain}::{node.op_type}, unknown to ONNX shape inference; "
                "add value_info for its outputs)"
            )
        return ""


def _shape_text(dims: list[int | str | None] | None) -> str:
    """An input's shape as users read it: ``[?, 3, 48, 320]`` (``?`` unknown or unnamed, names as they are)."""
    if dims is None:
        return "(no shape)"
    return "[" + ", ".join("?" if d is None or (isinstance(d, int) and d <= 0) else str(d) for d in dims) + "]"


def _quoted(option: str) -> str:
    """A shell-safe spelling of an option value (input names may hold any character)."""
    return option if all(ch.isalnum() or ch in "._-=/:" for ch in option) else "'" + option.replace("'", "'\\''") + "'"


def _twin_node(graph: onnx.GraphProto, node: onnx.NodeProto) -> onnx.NodeProto:
    """The node of a cloned graph that is ``node`` of the original (outputs are unique: SSA)."""
    return next(n for n in graph.node if list(n.output) == list(node.output) and n.op_type == node.op_type)


def _output_elements(graph: OpGraph) -> int:
    """A stand-in measure of work when the caller gives none: elements written by the graph's nodes."""
    return sum(graph.tensors[o].numel for n in graph.nodes for o in n.outputs if o in graph.tensors)


def _big_bytes(size: int) -> str:
    """A byte count in PiB from 1 PiB on (``format_bytes`` stops at TiB)."""
    return f"{size / 2**50:,.1f} PiB" if size >= 2**50 else format_bytes(size)


def _decode_unbound(
    source: str, data_inputs: list[onnx.ValueInfoProto], unbound: list[str], err: InputShapeError
) -> InputShapeError | None:
    """``err`` as a short line leading with the fix where the unbound dims are a decode export's KV
    cache's: ``--context S`` binds its past length (and the batch to 1), ``--requests N`` keeps N
    requests' caches; ``--batch B`` the batch alone. The ``--input-shape`` of every input (65 on a
    LLaMA-3 8B: 3,000 characters) stays in ``err``'s options, which ``inspect`` lists. None for other
    models."""
    caches = cache_inputs(data_inputs)
    in_caches = sorted({d.dim_param for vi in caches for d in vi.type.tensor_type.shape.dim} & set(unbound))
    if not in_caches:
        return None
    pasts = sorted(past_dims(caches) & set(unbound))
    lead = f"{source}: a decode export (KV cache {caches[0].name}, ...)"
    if pasts:
        fix = (
            f"give --context S for its past length {', '.join(pasts)} (e.g. --context 4096) and --requests N for N "
            "requests in flight"
        )
    else:
        fix = f"give --batch B for {', '.join(in_caches)} (the requests decoded together; --batch 1 for one)"
    return InputShapeError(f"{lead}: {fix}", inputs=err.inputs, options=err.options)


def _unique_names(nodes: tuple[OpNode, ...]) -> tuple[OpNode, ...]:
    """Node names label kernels and plan entries, so they must be unique; suffix duplicates.

    A repeated name gets the first free ``__N`` suffix: free of every name in the graph, so a
    renamed node never collides with a node that already carries that suffix (``a, a, a__1``
    becomes ``a, a__2, a__1``)."""
    taken = {node.name for node in nodes}
    seen: set[str] = set()
    out: list[OpNode] = []
    for node in nodes:
        if node.name in seen:
            count = 1
            while f"{node.name}__{count}" in taken:
                count += 1
            name = f"{node.name}__{count}"
            taken.add(name)
            node = OpNode(name, node.op_type, node.domain, node.inputs, node.outputs, node.attrs)
        seen.add(node.name)
        out.append(node)
    return tuple(out)


def import_onnx(
    path: str | Path,
    dims: Mapping[str, int] | None = None,
    *,
    weights_as_inputs: bool | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    weigh: Callable[[OpGraph], int] | None = None,
    memory: MemoryLimit | None = None,
    origins: Mapping[str, str] | None = None,
    model: onnx.ModelProto | None = None,
) -> OpGraph:
    """Load ``path`` and return its :class:`OpGraph` with every shape resolved.

    ``dims`` binds symbolic input dims (``--dim NAME=VALUE``); ``input_shapes`` sets whole input shapes
    (``--input-shape NAME=1x3x48x320``), whatever their dims are in the file. ``weigh`` measures a
    graph's work where an ``If`` condition is known only at run time (the costlier branch is kept; the
    pipeline passes MACs + vector ops; default: elements written). ``weights_as_inputs``: None detects
    parameters listed as graph inputs without data (older exporters), True treats every static
    input as a parameter, False none. ``memory``: the most the inputs of one pass may need (None: no
    limit), checked as soon as their dims are bound; ``origins`` names the option that bound a dim
    where it is not a ``--dim`` (``{"past_sequence_length": "--context 4096"}``) for that message.
    ``model``: the file at ``path`` as ``load_model`` read it already (the pipeline reads it once for
    ``--context`` and the import); it is changed in place. None: read here.
    """
    source = str(path)
    model = load_model(path) if model is None else model
    return _Importer(model, source, dims or {}, weights_as_inputs, input_shapes, weigh, memory, origins).run()
