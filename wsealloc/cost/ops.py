"""Registry of pure per-op work functions: how much arithmetic one ONNX node does, and how it tiles.

``op_work(node, graph)`` returns an :class:`OpWork`: MACs for MatMul/Gemm/Conv-family ops (with the
generalized-matmul shape G x M x N x K used for tiling), vector operations for everything else (with
the rows x cols view used for tiling). To support a new op type, add a function decorated with
``@register("OpType")`` (and classify the op in ``wsealloc/graph/opclass.py``).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np

from wsealloc.errors import ShapeError, UnsupportedOpError
from wsealloc.graph.ir import OpGraph, OpNode, TensorKind
from wsealloc.graph.opclass import ELEMENTWISE_OPS, LAYOUT_OPS


@dataclass(frozen=True)
class Gemm:
    """Generalized matmul: out[g, m, n] = sum_k a[g, m, k] * b[g, k, n].

    ``weight`` names the parameter operand (the B side after any swap), or None when both
    operands are per-sample activations (attention QK^T and AV).
    """

    g: int
    m: int
    n: int
    k: int
    a: str
    b: str
    weight: str | None
    # further parameters stacked under B along K (a recurrent layer's R under its W): resident like B
    also: tuple[str, ...] = ()

    @property
    def macs(self) -> int:
        """Multiply-accumulates."""
        return self.g * self.m * self.n * self.k


@dataclass(frozen=True)
class OpWork:
    """Work of one node. ``rows`` x ``cols`` is the 2D view of its output used for tiling."""

    macs: int = 0
    vector_ops: int = 0
    gemm: Gemm | None = None
    rows: int = 1
    cols: int = 1
    row_reduce: bool = False  # reduces along cols (softmax, norms): costs a row reduction when cols are split
    table: str | None = None  # a parameter looked up by index (embedding): sharded over all cores
    # Recurrent layers (LSTM, GRU, RNN): ``steps`` dependent time steps run one after the other on the
    # same grid; ``gemm``, ``rows`` and ``cols`` describe ONE step, ``macs`` and ``vector_ops`` all of
    # them. ``step_syncs``: dependent phases per step, each a round trip over the grid (GRU's reset
    # gate before its recurrent product: 2); ``state_elems``: hidden-state elements fed back each step.
    steps: int = 1
    step_syncs: int = 1
    state_elems: int = 0


WorkFn = Callable[[OpNode, OpGraph], OpWork]
_REGISTRY: dict[str, WorkFn] = {}

# Vector operations per output element of elementwise ops (transcendentals cost several SIMD ops).
OPS_PER_ELEMENT: dict[str, int] = {
    "Exp": 4,
    "Log": 4,
    "Erf": 4,
    "Tanh": 4,
    "Sigmoid": 4,
    "Softplus": 4,
    "Elu": 4,
    "Selu": 4,
    "Celu": 4,
    "Gelu": 8,
    "FastGelu": 8,
    "BiasGelu": 9,
    "Mish": 8,
    "Swish": 5,
    "Sin": 4,
    "Cos": 4,
    "Tan": 5,
    "Pow": 4,
    "Sqrt": 2,
    "Reciprocal": 2,
    "Div": 2,
    "Softsign": 2,
    "HardSigmoid": 2,
    "HardSwish": 3,
    "Clip": 2,
    "Mod": 2,
    "QuantizeLinear": 2,
    "DequantizeLinear": 2,
}


def register(*op_types: str) -> Callable[[WorkFn], WorkFn]:
    """Decorator: register a work function for one or more ONNX op types."""

    def deco(fn: WorkFn) -> WorkFn:
        for op in op_types:
            _REGISTRY[op] = fn
        return fn

    return deco


def registered_ops() -> frozenset[str]:
    """Op types with a work function (layout ops need none: they do no arithmetic)."""
    return frozenset(_REGISTRY)


def op_work(node: OpNode, graph: OpGraph, *, allow_unknown: bool = False) -> OpWork:
    """Work of ``node``; unknown ops raise unless ``allow_unknown`` (then: 1 vector op per output element)."""
    if node.op_type in LAYOUT_OPS and node.domain in ("", "ai.onnx"):
        return OpWork(rows=_rows_cols(graph, node.outputs[0])[0], cols=_rows_cols(graph, node.outputs[0])[1])
    fn = _REGISTRY.get(node.op_type) if node.domain in ("", "ai.onnx", "com.microsoft") else None
    if fn is None:
        if not allow_unknown:
            dom = f"{node.domain}::" if node.domain else ""
            raise UnsupportedOpError(
                f"{graph.source}: node {node.name!r} uses op {dom}{node.op_type}, which the cost model does not know; "
                "pass --allow-unknown-ops to cost it as 1 vector op per output element, or add it to wsealloc/cost/ops.py"
            )
        return _elementwise_like(node, graph, 1)
    try:
        return fn(node, graph)
    except (IndexError, KeyError, ValueError, ZeroDivisionError) as exc:
        # The front end checks every node's schema and shapes, but a graph can still pair operands
        # ONNX accepts with ranks an op's arithmetic cannot read (a Conv whose data input was lost
        # reads its weight as data and its bias as the weight): a one-line error, not a traceback.
        shapes = ", ".join(
            f"{name} {list(graph.tensors[name].shape)}" if name in graph.tensors else repr(name) for name in node.inputs
        )
        raise ShapeError(
            f"{graph.source}: node {node.name!r} ({node.op_type}): its operand shapes ({shapes}) do not fit "
            f"{node.op_type} ({exc.__class__.__name__}: {exc}); the graph is inconsistent, re-export the model"
        ) from exc


# -- helpers -----------------------------------------------------------------------------------


def _shape(graph: OpGraph, name: str) -> tuple[int, ...]:
    return graph.tensors[name].shape


def _numel(graph: OpGraph, name: str) -> int:
    return prod(_shape(graph, name))


def _rows_cols(graph: OpGraph, name: str, axis: int = -1) -> tuple[int, int]:
    """2D view of a tensor: cols = product of dims from ``axis`` on, rows = the rest."""
    shape = _shape(graph, name)
    if not shape:
        return 1, 1
    ax = axis % len(shape)
    cols = prod(shape[ax:])
    return prod(shape[:ax]), cols


def _is_weight(graph: OpGraph, name: str) -> bool:
    """A resident operand: a parameter, a folded constant, or state (a KV cache stays where it lives,
    so a MatMul over it keeps it stationary like a weight)."""
    return bool(name) and graph.tensors[name].kind in (TensorKind.WEIGHT, TensorKind.CONSTANT, TensorKind.STATE)


def _elementwise_like(node: OpNode, graph: OpGraph, per_element: int) -> OpWork:
    out = next((o for o in node.outputs if o), None)
    if out is None:
        return OpWork()
    rows, cols = _rows_cols(graph, out)
    return OpWork(vector_ops=per_element * rows * cols, rows=rows, cols=cols)


def _int_attr(node: OpNode, key: str, default: int) -> int:
    value = node.attr(key, default)
    return int(value) if isinstance(value, (int, float)) else default


# -- MAC family ----------------------------------------------------------------------------------


@register("MatMul", "MatMulInteger", "QLinearMatMul")
def matmul(node: OpNode, graph: OpGraph) -> OpWork:
    """MatMul with numpy semantics: 1-D operands promoted, batch dims broadcast."""
    if node.op_type == "QLinearMatMul":
        a_name, b_name = node.inputs[0], node.inputs[3]
    else:
        a_name, b_name = node.inputs[0], node.inputs[1]
    a, b = _shape(graph, a_name), _shape(graph, b_name)
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = tuple(int(x) for x in np.broadcast_shapes(a2[:-2], b2[:-2]))
    a_w, b_w = _is_weight(graph, a_name), _is_weight(graph, b_name)
    if b_w and not a_w and prod(b2[:-2]) == 1:
        # x @ W with a 2-D weight: the batch dims just add rows that stream through the same weights.
        gemm = Gemm(1, prod(batch) * m, n, k, a_name, b_name, b_name)
    elif a_w and not b_w and prod(a2[:-2]) == 1:
        # W @ x: transpose the problem so the weight is the B side (same MACs, same tiling freedom).
        gemm = Gemm(1, prod(batch) * n, m, k, b_name, a_name, a_name)
    else:
        weight = b_name if b_w and not a_w else None
        gemm = Gemm(prod(batch), m, n, k, a_name, b_name, weight)
    rows = gemm.m if gemm.weight else gemm.g * gemm.m
    cols = gemm.g * gemm.n if gemm.weight else gemm.n
    return OpWork(macs=gemm.macs, gemm=gemm, rows=rows, cols=cols)


@register("Gemm")
def gemm_op(node: OpNode, graph: OpGraph) -> OpWork:
    """Y = alpha * A' B' + beta * C; the C term is a bias-add epilogue (1 op per output element)."""
    a, b = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    m, k = (a[1], a[0]) if _int_attr(node, "transA", 0) else (a[0], a[1])
    n = b[0] if _int_attr(node, "transB", 0) else b[1]
    a_w, b_w = _is_weight(graph, node.inputs[0]), _is_weight(graph, node.inputs[1])
    if a_w and not b_w:
        g = Gemm(1, n, m, k, node.inputs[1], node.inputs[0], node.inputs[0])
    else:
        g = Gemm(1, m, n, k, node.inputs[0], node.inputs[1], node.inputs[1] if b_w else None)
    bias = m * n if len(node.inputs) > 2 and node.inputs[2] else 0
    return OpWork(macs=g.macs, vector_ops=bias, gemm=g, rows=g.m, cols=g.n)


@register("Conv", "ConvInteger", "QLinearConv")
def conv(node: OpNode, graph: OpGraph) -> OpWork:
    """Convolution as an implicit GEMM: M = output pixels, N = Cout/groups, K = Cin/groups * kernel."""
    x_name, w_name = (node.inputs[0], node.inputs[3]) if node.op_type == "QLinearConv" else node.inputs[:2]
    w = _shape(graph, w_name)
    y = _shape(graph, node.outputs[0])
    groups = _int_attr(node, "group", 1)
    cout, cin_g, kernel = w[0], w[1], prod(w[2:])
    m = y[0] * prod(y[2:])
    g = Gemm(groups, m, cout // groups, cin_g * kernel, x_name, w_name, w_name if _is_weight(graph, w_name) else None)
    has_bias = node.op_type == "Conv" and len(node.inputs) > 2 and bool(node.inputs[2])
    return OpWork(macs=g.macs, vector_ops=prod(y) if has_bias else 0, gemm=g, rows=m, cols=cout)


@register("ConvTranspose")
def conv_transpose(node: OpNode, graph: OpGraph) -> OpWork:
    """Transposed convolution: every input pixel scatters Cout/groups * kernel products (col2im adds)."""
    x, w = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    y = _shape(graph, node.outputs[0])
    groups = _int_attr(node, "group", 1)
    cin, cout_g, kernel = w[0], w[1], prod(w[2:])
    m = x[0] * prod(x[2:])
    g = Gemm(
        groups,
        m,
        cout_g * kernel,
        cin // groups,
        node.inputs[0],
        node.inputs[1],
        node.inputs[1] if _is_weight(graph, node.inputs[1]) else None,
    )
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    # col2im accumulation: one add per product column written, plus the optional bias.
    vec = g.g * g.m * g.n + (prod(y) if has_bias else 0)
    return OpWork(macs=g.macs, vector_ops=vec, gemm=g, rows=m, cols=groups * cout_g * kernel)


@register("Einsum")
def einsum(node: OpNode, graph: OpGraph) -> OpWork:
    """Two-operand einsum as a batched GEMM; other forms are vector work over the iteration space."""
    eq = str(node.attr("equation", "")).replace(" ", "")
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if "..." in eq or not out and "->" not in eq:
        return _elementwise_like(node, graph, 1)
    sizes: dict[str, int] = {}
    for term, name in zip(terms, node.inputs, strict=False):
        for ch, d in zip(term, _shape(graph, name), strict=False):
            sizes[ch] = max(sizes.get(ch, 1), d)
    space = prod(sizes[c] for c in sizes if c in string.ascii_letters)
    if len(terms) != 2:
        return OpWork(vector_ops=space, rows=_rows_cols(graph, node.outputs[0])[0], cols=_rows_cols(graph, node.outputs[0])[1])
    a, b = terms
    batch = [c for c in out if c in a and c in b]
    m_idx = [c for c in out if c in a and c not in b]
    n_idx = [c for c in out if c in b and c not in a]
    k_idx = [c for c in a if c in b and c not in out]
    gb, m, n, k = (prod(sizes[c] for c in idx) for idx in (batch, m_idx, n_idx, k_idx))
    b_w = _is_weight(graph, node.inputs[1])
    gm = Gemm(gb, m, n, k, node.inputs[0], node.inputs[1], node.inputs[1] if b_w and gb == 1 else None)
    return OpWork(
        macs=space if k_idx or (batch or m_idx or n_idx) else 0, gemm=gm, rows=gm.m if gm.weight else gm.g * gm.m, cols=gm.n
    )


# -- vector family --------------------------------------------------------------------------------


def _axis(node: OpNode, rank: int, default: int) -> int:
    return _int_attr(node, "axis", default) % max(rank, 1)


@register("Softmax", "LogSoftmax", "Hardmax")
def softmax(node: OpNode, graph: OpGraph) -> OpWork:
    """Max, subtract, exp, sum, divide: ~8 ops per element (exp is 4), reduced along the softmax axis."""
    x = node.inputs[0]
    rank = len(_shape(graph, x))
    default = -1 if graph.opset >= 13 else 1
    axis = _axis(node, rank, default)
    shape = _shape(graph, x)
    if graph.opset >= 13:
        cols = shape[axis]
        rows = prod(shape) // max(cols, 1)
    else:
        rows, cols = _rows_cols(graph, x, axis)
    return OpWork(vector_ops=8 * rows * cols, rows=rows, cols=cols, row_reduce=True)


@register(
    "LayerNormalization",
    "SkipLayerNormalization",
    "GroupNormalization",
    "InstanceNormalization",
    "MeanVarianceNormalization",
    "LpNormalization",
    "LRN",
)
def layer_norm(node: OpNode, graph: OpGraph) -> OpWork:
    """Mean, variance, normalize, scale, shift: ~8 ops per element, reduced along the normalized axes."""
    x = node.inputs[0]
    shape = _shape(graph, x)
    if node.op_type in ("LayerNormalization", "SkipLayerNormalization"):
        rows, cols = _rows_cols(graph, x, _int_attr(node, "axis", -1))
    elif len(shape) > 2:
        rows, cols = shape[0] * shape[1], prod(shape[2:])
    else:
        rows, cols = _rows_cols(graph, x)
    return OpWork(vector_ops=8 * rows * cols, rows=rows, cols=cols, row_reduce=True)


@register("RMSNormalization", "SimplifiedLayerNormalization")
def rms_norm(node: OpNode, graph: OpGraph) -> OpWork:
    """Square, mean, rsqrt, scale: ~5 ops per element."""
    rows, cols = _rows_cols(graph, node.inputs[0], _int_attr(node, "axis", -1))
    return OpWork(vector_ops=5 * rows * cols, rows=rows, cols=cols, row_reduce=True)


@register("BatchNormalization")
def batch_norm(node: OpNode, graph: OpGraph) -> OpWork:
    """Inference batch norm folds to a per-channel scale and shift: 2 ops per element."""
    shape = _shape(graph, node.inputs[0])
    rows = shape[0] * (shape[1] if len(shape) > 1 else 1)
    cols = prod(shape[2:]) if len(shape) > 2 else 1
    return OpWork(vector_ops=2 * prod(shape), rows=rows, cols=cols)


@register(
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "ArgMax",
    "ArgMin",
    "CumSum",
    "TopK",
)
def reduce(node: OpNode, graph: OpGraph) -> OpWork:
    """One op per input element (two for TopK/LogSumExp), rows = output elements."""
    n_in = _numel(graph, node.inputs[0])
    n_out = max(_numel(graph, node.outputs[0]), 1)
    per = 2 if node.op_type in ("TopK", "ReduceLogSumExp", "ReduceSumSquare", "ReduceL2") else 1
    if node.op_type == "CumSum":
        rows, cols = _rows_cols(graph, node.inputs[0])
        return OpWork(vector_ops=n_in, rows=rows, cols=cols, row_reduce=True)
    cols = max(n_in // n_out, 1)
    return OpWork(vector_ops=per * n_in, rows=n_out, cols=cols, row_reduce=True)


@register("MaxPool", "AveragePool", "LpPool")
def pool(node: OpNode, graph: OpGraph) -> OpWork:
    """One op per window element per output element."""
    y = _shape(graph, node.outputs[0])
    kernel = node.attr("kernel_shape", ())
    window = prod(kernel) if isinstance(kernel, tuple) and kernel else 1
    rows, cols = _rows_cols(graph, node.outputs[0])
    return OpWork(vector_ops=prod(y) * int(window), rows=rows, cols=cols)


@register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(node: OpNode, graph: OpGraph) -> OpWork:
    """One op per input element, one output per (sample, channel)."""
    x = _shape(graph, node.inputs[0])
    rows = x[0] * (x[1] if len(x) > 1 else 1)
    return OpWork(vector_ops=prod(x), rows=rows, cols=max(prod(x) // rows, 1), row_reduce=True)


@register("Resize", "Upsample")
def resize(node: OpNode, graph: OpGraph) -> OpWork:
    """Interpolation: ~4 ops per output element (bilinear weights)."""
    return _elementwise_like(node, graph, 4)


@register("Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "OneHot")
def gather(node: OpNode, graph: OpGraph) -> OpWork:
    """One copy per output element; a parameter table (embedding) stays resident, sharded over the cores."""
    table = node.inputs[0] if node.op_type == "Gather" and _is_weight(graph, node.inputs[0]) else None
    work = _elementwise_like(node, graph, 1)
    return OpWork(vector_ops=work.vector_ops, rows=work.rows, cols=work.cols, table=table)


# -- recurrent family ------------------------------------------------------------------------------

# gates per step: RNN one (the new state), GRU three (update z, reset r, candidate), LSTM four (i, o, f, c)
RECURRENT_GATES: dict[str, int] = {"RNN": 1, "GRU": 3, "LSTM": 4}
# the activations ONNX's recurrent ops accept, in vector ops per element (as OPS_PER_ELEMENT; ScaledTanh
# and Affine scale around their function)
ACTIVATION_OPS: dict[str, int] = {
    "Tanh": 4,
    "Sigmoid": 4,
    "Relu": 1,
    "Affine": 2,
    "LeakyRelu": 2,
    "ThresholdedRelu": 2,
    "ScaledTanh": 6,
    "HardSigmoid": 2,
    "Elu": 4,
    "Softsign": 2,
    "Softplus": 4,
}
_DEFAULT_ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "RNN": ("Tanh",),
    "GRU": ("Sigmoid", "Tanh"),
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
}


def _activation_ops(node: OpNode, directions: int) -> list[int]:
    """Vector ops per element of each activation of one direction (f, g, h as ONNX names them): the
    ``activations`` attribute (all directions' lists one after the other) or the op's defaults."""
    default = _DEFAULT_ACTIVATIONS[node.op_type]
    given = node.attr("activations", ())
    names = list(given[: len(default)]) if isinstance(given, tuple) and len(given) >= len(default) else list(default)
    return [ACTIVATION_OPS.get(str(name), 4) for name in names]


def recurrent_step_vector_ops(node: OpNode, hidden: int, directions: int) -> int:
    """Vector ops of one step, one direction, one sequence of the batch (docs/cost-model.md, section 1):
    the gate activations, the cell/state update, the biases, the peepholes and the clip."""
    op = node.op_type
    gates = RECURRENT_GATES[op]
    act = _activation_ops(node, directions)
    if op == "LSTM":
        # f(i), f(f), f(o), g(c~), h(c); c = f*c + i*c~ (3), h = o*h(c) (1)
        per = hidden * (3 * act[0] + act[1] + act[2]) + 4 * hidden
        if len(node.inputs) > 7 and node.inputs[7]:
            per += 6 * hidden  # peepholes: p_i*c, p_f*c, p_o*c and their adds
    elif op == "GRU":
        # f(z), f(r), g(h~); r*h (or r*(h R + Rb)) (1); h = (1 - z)*h~ + z*h (4)
        per = hidden * (2 * act[0] + act[1]) + 5 * hidden
    else:
        per = hidden * act[0]
    if len(node.inputs) > 3 and node.inputs[3]:
        per += 2 * gates * hidden  # B holds Wb and Rb: two adds per gate element
    if node.attr("clip") is not None:
        per += 2 * gates * hidden  # clip each gate input to [-clip, clip]: a min and a max
    return per


@register("LSTM", "GRU", "RNN")
def recurrent(node: OpNode, graph: OpGraph) -> OpWork:
    """A recurrent layer as ONNX defines it: per time step and direction, the gates' pre-activations are
    ``[x_t, h_t-1] . [W; R]^T`` (gates x hidden outputs, input + hidden long), then the activations and
    the state update. Steps depend on each other (h_t needs h_t-1): the grid runs them one after the
    other, so ``gemm`` is one step (G = directions, M = batch, N = gates x hidden, K = input + hidden).

    ``layout`` 0: X is [seq, batch, input]; 1: [batch, seq, input]. A constant ``sequence_lens`` caps the
    steps at its largest length; data lengths are not known ahead, so every step is counted."""
    op = node.op_type
    gates = RECURRENT_GATES[op]
    x = _shape(graph, node.inputs[0])
    w = _shape(graph, node.inputs[1])
    if len(x) != 3 or len(w) != 3:
        raise ValueError(f"X must be rank 3 and W rank 3, got {list(x)} and {list(w)}")
    seq, batch = (x[1], x[0]) if _int_attr(node, "layout", 0) == 1 else (x[0], x[1])
    inp = x[2]
    directions = w[0]
    hidden = _int_attr(node, "hidden_size", w[1] // gates)
    if hidden <= 0 or w[1] != gates * hidden:
        raise ValueError(f"W {list(w)} does not hold {gates} gates of hidden size {hidden}")
    steps = seq
    lens = node.inputs[4] if len(node.inputs) > 4 else ""
    if lens and lens in graph.constants:
        steps = max(1, min(seq, int(np.max(graph.constants[lens]))))
    k = inp + hidden
    r_name = node.inputs[2]
    w_name = node.inputs[1]
    weight = w_name if _is_weight(graph, w_name) else None
    gemm = Gemm(directions, batch, gates * hidden, k, node.inputs[0], w_name, weight, (r_name,) if weight else ())
    vec = steps * directions * batch * recurrent_step_vector_ops(node, hidden, directions)
    lbr = _int_attr(node, "linear_before_reset", 0)
    return OpWork(
        macs=steps * gemm.macs,
        vector_ops=vec,
        gemm=gemm,
        rows=batch,
        cols=directions * gates * hidden,
        steps=steps,
        step_syncs=2 if op == "GRU" and lbr == 0 else 1,
        state_elems=directions * batch * hidden,
    )


# -- mixture of experts (ONNX Runtime's com.microsoft MoE / QMoE) ---------------------------------

# vector ops per element of an expert's activation (``activation_type``); swiglu is silu(gate) x up,
# its product counted apart (``ExpertsWork.gated``)
MOE_ACTIVATIONS: dict[str, int] = {"identity": 0, "relu": 1, "gelu": OPS_PER_ELEMENT["Gelu"], "silu": 5, "swiglu": 5}
# input slots of each op: (fc1, fc1 scales, fc1 bias, fc2, fc2 scales, fc2 bias, fc3, fc3 scales, fc3 bias); -1: none
_MOE_SLOTS: dict[str, tuple[int, ...]] = {"MoE": (2, -1, 3, 4, -1, 5, 6, -1, 7), "QMoE": (2, 3, 4, 5, 6, 7, 8, 9, 10)}


@dataclass(frozen=True)
class MoeShape:
    """What one ``com.microsoft`` ``MoE`` / ``QMoE`` node is: E experts of hidden -> f -> hidden, k per
    token, the matrices' bytes as stored (QMoE packs 8 / ``expert_weight_bits`` weights a byte)."""

    experts: int
    top_k: int
    tokens: int
    hidden: int
    ffn: int
    gated: bool  # fc3 given, or SwiGLU with fc1 holding gate and up (2f wide)
    activation: str
    matrices: tuple[str, ...]  # fc1, fc2 (and fc3): every expert's matrices, packed as stored
    columns: tuple[str, ...]  # their biases and dequantization scales


def _given(node: OpNode, slot: int) -> str:
    return node.inputs[slot] if 0 <= slot < len(node.inputs) else ""


def moe_shape(node: OpNode, graph: OpGraph) -> MoeShape:
    """Read a MoE / QMoE node (ONNX Runtime's contrib operators): the input [tokens, hidden] or
    [batch, seq, hidden], router_probs [tokens, E], fc1 [E, F1, hidden / pack] (ONNX Runtime's current
    layout, (experts, out, in)) or [E, hidden, F1 / pack] (the layout before it), fc2 [E, hidden, f / pack]
    or [E, f, hidden / pack], fc3 as fc1 unfused; F1 = 2f for SwiGLU without fc3 (gate and up fused).
    Raises ValueError (``op_work`` turns it into a one-line ShapeError naming the node)."""
    slots = _MOE_SLOTS[node.op_type]
    x, probs = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    if len(x) not in (2, 3) or len(probs) != 2:
        raise ValueError(f"input must be rank 2 or 3 and router_probs rank 2, got {list(x)} and {list(probs)}")
    hidden, tokens, experts = x[-1], prod(x[:-1]), probs[1]
    if probs[0] != tokens:
        raise ValueError(f"router_probs has {probs[0]} rows for {tokens} tokens")
    bits = _int_attr(node, "expert_weight_bits", 4) if node.op_type == "QMoE" else 16
    if bits not in (4, 8, 16):
        raise ValueError(f"expert_weight_bits {bits}: ONNX Runtime packs 4 or 8")
    pack = 8 // bits if bits < 16 else 1  # weights per stored byte (4 bits: two)
    activation = str(node.attr("activation_type", "relu"))
    if activation not in MOE_ACTIVATIONS:
        raise ValueError(f"activation_type {activation!r}: expected one of {', '.join(MOE_ACTIVATIONS)}")
    top_k = _int_attr(node, "k", 1)
    if not 1 <= top_k <= experts:
        raise ValueError(f"k {top_k} must be between 1 and the {experts} experts")
    fc3 = _given(node, slots[6])

    def out_width(name: str, into: int) -> int:
        """Columns of an expert matrix reading ``into`` elements, in either layout."""
        w = _shape(graph, name)
        if len(w) != 3 or w[0] != experts:
            raise ValueError(f"{name} {list(w)} is not [{experts} experts, rows, cols]")
        if w[2] * pack == into:  # (experts, out, in / pack)
            return w[1]
        if w[1] == into:  # (experts, in, out / pack)
            return w[2] * pack
        raise ValueError(f"{name} {list(w)} reads neither {into} elements per row nor per column")

    first = out_width(node.inputs[slots[0]], hidden)
    fused = activation == "swiglu" and not fc3
    ffn = first // 2 if fused else first
    if ffn < 1 or (fused and first % 2):
        raise ValueError(f"fc1 is {first} wide: SwiGLU fused needs gate and up of one width")
    if out_width(node.inputs[slots[3]], ffn) != hidden:
        raise ValueError(f"fc2 {list(_shape(graph, node.inputs[slots[3]]))} does not map {ffn} back to {hidden}")
    if fc3 and out_width(fc3, hidden) != ffn:
        raise ValueError(f"fc3 {list(_shape(graph, fc3))} is not {ffn} wide as fc1")
    names = [_given(node, s) for s in slots]
    return MoeShape(
        experts=experts,
        top_k=top_k,
        tokens=tokens,
        hidden=hidden,
        ffn=ffn,
        gated=bool(fc3) or fused,
        activation=activation,
        matrices=tuple(n for n in (names[0], names[3], names[6]) if n),
        columns=tuple(n for i, n in enumerate(names) if n and i not in (0, 3, 6)),
    )


@register("MoE", "QMoE")
def mixture_of_experts(node: OpNode, graph: OpGraph) -> OpWork:
    """A mixture-of-experts layer: the active work only (k experts per token; ``cost.experts`` costs
    it on tiles of its grid). No ``gemm``: it is no single matmul."""
    m = moe_shape(node, graph)
    projections = 3 if m.gated else 2
    per_pair = m.ffn * (MOE_ACTIVATIONS[m.activation] + int(m.gated)) + 2 * m.hidden
    return OpWork(
        macs=m.tokens * m.top_k * projections * m.hidden * m.ffn,
        vector_ops=m.tokens * m.top_k * per_pair,
        rows=m.tokens,
        cols=m.hidden,
    )


def _elementwise(node: OpNode, graph: OpGraph) -> OpWork:
    return _elementwise_like(node, graph, OPS_PER_ELEMENT.get(node.op_type, 1))


for _op in ELEMENTWISE_OPS:
    _REGISTRY.setdefault(_op, _elementwise)
