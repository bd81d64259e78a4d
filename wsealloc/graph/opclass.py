"""What each ONNX op is, for kernel grouping: a MAC anchor, a vector anchor, a fusable elementwise
op, or a layout-only op. The cost model (``wsealloc.cost.ops``) has a work function for every op
listed here except the layout ones; a test keeps the two tables in step.
"""

from __future__ import annotations

import enum


class OpClass(enum.Enum):
    """Role of an op in kernel grouping."""

    MAC = "mac"  # MatMul/Gemm/Conv family and recurrent layers: anchors a kernel, counted in total_macs
    VECTOR = "vector"  # softmax, norms, reductions, pooling, gather: anchors a vector kernel
    ELEMENTWISE = "elementwise"  # fusable into the producer kernel as an epilogue
    LAYOUT = "layout"  # moves or relabels data only: absorbed, no arithmetic
    UNKNOWN = "unknown"  # not known to the cost model


class KernelKind(enum.Enum):
    """Kind of a kernel, named after its anchor op family."""

    MATMUL = "matmul"
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    EINSUM = "einsum"
    RECURRENT = "recurrent"  # LSTM, GRU, RNN: a sequence of dependent steps on one grid
    NORM = "norm"
    SOFTMAX = "softmax"
    REDUCE = "reduce"
    POOL = "pool"
    GATHER = "gather"
    ELEMENTWISE = "elementwise"
    DATA_MOVEMENT = "data_movement"  # a lone layout op (only when fusion is off)
    OTHER = "other"  # unknown op with the fallback cost
    REGION = "region"  # several kernels sharing one grid in time (cost.region)
    EXPERTS = "experts"  # a mixture-of-experts layer: E expert FFNs, k at work per token (cost.experts)


MAC_OPS: dict[str, KernelKind] = {
    "MatMul": KernelKind.MATMUL,
    "Gemm": KernelKind.MATMUL,
    "MatMulInteger": KernelKind.MATMUL,
    "QLinearMatMul": KernelKind.MATMUL,
    "Conv": KernelKind.CONV,
    "ConvInteger": KernelKind.CONV,
    "QLinearConv": KernelKind.CONV,
    "ConvTranspose": KernelKind.CONV_TRANSPOSE,
    "Einsum": KernelKind.EINSUM,
    # recurrent layers: every step is a GEMM of [x_t, h_t-1] with the stacked weights [W; R]
    "LSTM": KernelKind.RECURRENT,
    "GRU": KernelKind.RECURRENT,
    "RNN": KernelKind.RECURRENT,
    # ONNX Runtime's mixture-of-experts contrib ops (com.microsoft): every expert's FFN in one node
    "MoE": KernelKind.EXPERTS,
    "QMoE": KernelKind.EXPERTS,
}

VECTOR_OPS: dict[str, KernelKind] = {
    **{
        op: KernelKind.NORM
        for op in (
            "LayerNormalization",
            "InstanceNormalization",
            "GroupNormalization",
            "RMSNormalization",
            "SimplifiedLayerNormalization",
            "SkipLayerNormalization",
            "LpNormalization",
            "MeanVarianceNormalization",
            "LRN",
        )
    },
    **{op: KernelKind.SOFTMAX for op in ("Softmax", "LogSoftmax", "Hardmax")},
    **{
        op: KernelKind.REDUCE
        for op in (
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
    },
    **{
        op: KernelKind.POOL
        for op in (
            "MaxPool",
            "AveragePool",
            "GlobalAveragePool",
            "GlobalMaxPool",
            "LpPool",
            "GlobalLpPool",
            "Resize",
            "Upsample",
        )
    },
    **{op: KernelKind.GATHER for op in ("Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "OneHot")},
}

ELEMENTWISE_OPS: frozenset[str] = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Erf",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Elu",
        "Selu",
        "Celu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Softplus",
        "Softsign",
        "Gelu",
        "FastGelu",
        "BiasGelu",
        "Mish",
        "Swish",
        "ThresholdedRelu",
        "Clip",
        "Max",
        "Min",
        "Mean",
        "Sum",
        "Where",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "Sin",
        "Cos",
        "Tan",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Mod",
        "IsNaN",
        "IsInf",
        "QuantizeLinear",
        "DequantizeLinear",
        "Trilu",
        "BitShift",
        # inference batch norm is a per-channel scale and shift: an epilogue of the conv before it
        "BatchNormalization",
    }
)

LAYOUT_OPS: frozenset[str] = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Transpose",
        "Cast",
        "CastLike",
        "Dropout",
        "Concat",
        "Split",
        "Slice",
        "Pad",
        "Expand",
        "Tile",
        "DepthToSpace",
        "SpaceToDepth",
        "Shape",
        "Size",
        "ConstantOfShape",
        "Range",
        "NonZero",
    }
)


def op_class(op_type: str, domain: str = "") -> OpClass:
    """Classify an ONNX op (custom domains are UNKNOWN except Microsoft's common fusions)."""
    if domain not in ("", "ai.onnx", "com.microsoft"):
        return OpClass.UNKNOWN
    if op_type in MAC_OPS:
        return OpClass.MAC
    if op_type in VECTOR_OPS:
        return OpClass.VECTOR
    if op_type in ELEMENTWISE_OPS:
        return OpClass.ELEMENTWISE
    if op_type in LAYOUT_OPS:
        return OpClass.LAYOUT
    return OpClass.UNKNOWN


def kernel_kind(op_type: str, domain: str = "") -> KernelKind:
    """Kernel kind for a kernel anchored by this op."""
    cls = op_class(op_type, domain)
    if cls is OpClass.MAC:
        return MAC_OPS[op_type]
    if cls is OpClass.VECTOR:
        return VECTOR_OPS[op_type]
    if cls is OpClass.ELEMENTWISE:
        return KernelKind.ELEMENTWISE
    if cls is OpClass.LAYOUT:
        return KernelKind.DATA_MOVEMENT
    return KernelKind.OTHER
