"""Front half of every command: model source + arch -> kernels -> cost table (no solving here);
the parsing of ``--dim`` and ``--input-shape``."""

from __future__ import annotations

from collections.abc import Sequence

from wsealloc.arch import Arch
from wsealloc.arch.schema import MAX_WAFERS
from wsealloc.constraints import Constraints
from wsealloc.cost import CostOptions
from wsealloc.cost.ops import op_work
from wsealloc.errors import UsageError
from wsealloc.frontend import import_onnx
from wsealloc.frontend.importer import MemoryLimit
from wsealloc.frontend.llm import cache_dims
from wsealloc.frontend.load import load_model
from wsealloc.frontend.sources import OnnxSource, SyntheticSource
from wsealloc.graph.ir import OpGraph
from wsealloc.graph.kernels import KernelGraph, build_kernels
from wsealloc.graph.state import mark_state
from wsealloc.opmodels import CostTable, build_cost_table
from wsealloc.opmodels.constrain import apply as apply_constraints
from wsealloc.opmodels.table import with_link_stages
from wsealloc.units import ascii_int


def parse_dims(options: Sequence[str]) -> dict[str, int]:
    """Parse repeated ``--dim NAME=VALUE`` options into a mapping."""
    dims: dict[str, int] = {}
    for opt in options:
        name, sep, value = opt.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise UsageError(f"--dim {opt!r}: expected NAME=VALUE, e.g. --dim seq=1024")
        try:
            number = ascii_int(value.strip().replace("_", ""))
        except ValueError:
            raise UsageError(f"--dim {opt!r}: {value.strip()!r} is not an integer in ASCII digits") from None
        if number <= 0:
            raise UsageError(f"--dim {opt!r}: dims must be positive integers")
        if name in dims and dims[name] != number:
            raise UsageError(f"--dim {name} is given twice ({dims[name]} and {number}); keep one")
        dims[name] = number
    return dims


def parse_input_shapes(options: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse repeated ``--input-shape NAME=1x3x48x320`` options (sizes separated by ``x`` or ``,``) into
    a mapping. The last ``=`` separates the name, so input names holding ``=`` work too."""
    shapes: dict[str, tuple[int, ...]] = {}
    for opt in options:
        name, sep, text = opt.rpartition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise UsageError(f"--input-shape {opt!r}: expected NAME=SIZES, e.g. --input-shape x=1x3x48x320")
        parts = text.strip().lower().replace(",", "x").split("x")
        try:
            shape = tuple(ascii_int(p.strip().replace("_", "")) for p in parts)
        except ValueError:
            raise UsageError(
                f"--input-shape {opt!r}: {text.strip()!r} is not a list of sizes; write them in ASCII digits, as 1x3x48x320"
            ) from None
        if any(v <= 0 for v in shape):
            raise UsageError(
                f"--input-shape {opt!r}: sizes must be positive integers (the model's unknown dims are what you give)"
            )
        if name in shapes and shapes[name] != shape:
            raise UsageError(
                f"--input-shape {name} is given twice ({'x'.join(map(str, shapes[name]))} and {text.strip()}); keep one"
            )
        shapes[name] = shape
    return shapes


def graph_work(graph: OpGraph) -> int:
    """MACs + vector ops of every node (ops the cost model does not know: one per output element): how
    the front end weighs the two branches of an If whose condition only a run knows."""
    return sum(w.macs + w.vector_ops for w in (op_work(node, graph, allow_unknown=True) for node in graph.nodes))


def load_kernels(source: OnnxSource | SyntheticSource, arch: Arch | None = None) -> KernelGraph:
    """Import the ONNX model of ``source``, mark its resident state (KV caches, ``graph.state``) and
    group it into kernels. With ``arch``, the inputs of one pass must fit the SRAM of the largest
    cluster of it a plan may use (``MAX_WAFERS`` wafers), checked before any tensor is sized."""
    path = source.onnx_path()
    model = load_model(path)  # the file's one reading: the loader's checks come first, whatever the options
    cache = cache_dims(model, path, source.context, source.batch)
    dims = {**{name: value for name, (value, _) in cache.items()}, **source.dims}  # --dim wins
    memory = None
    if arch is not None:
        memory = MemoryLimit(arch.wafer_sram_bytes * MAX_WAFERS, f"{MAX_WAFERS:,} wafers of {arch.name}")
    graph = import_onnx(
        path,
        dims,
        weights_as_inputs=source.weights_as_inputs,
        input_shapes=source.input_shapes,
        weigh=graph_work,
        memory=memory,
        origins={name: option for name, (_, option) in cache.items() if name not in source.dims},
        model=model,
    )
    return build_kernels(mark_state(graph), fuse=source.fuse)


def build_costs(
    source: OnnxSource | SyntheticSource,
    arch: Arch,
    options: CostOptions,
    *,
    check_feasible: bool = True,
    constraints: Constraints | None = None,
) -> CostTable:
    """Model source + resolved arch -> cost table, with the user's ``constraints`` applied to its
    op-model tables (``opmodels.constrain``; the table before them is kept as ``unconstrained``)."""
    costs = build_cost_table(load_kernels(source, arch), arch, options, check_feasible=check_feasible)
    return apply_constraints(costs, constraints) if constraints is not None else costs


def over_wafers(costs: CostTable, cuts: Sequence[int], constraints: Constraints | None = None) -> CostTable:
    """A training table cut into wafers at ``cuts`` (the partition's, 0 and n included): its training
    kernels costed with the samples each wafer boundary between them and the loss adds
    (``opmodels.table.with_link_stages``), the user's ``constraints`` applied again. Other tables, and
    one wafer, are returned as they are."""
    if costs.options.train is None or len(cuts) <= 2:
        return costs
    wafer_of = [w for w, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)) for _ in range(a, b)]
    base = costs.unconstrained if costs.unconstrained is not None else costs
    linked = with_link_stages(base, wafer_of)
    return apply_constraints(linked, constraints) if constraints is not None else linked


def with_options(costs: CostTable, options: CostOptions, constraints: Constraints | None = None) -> CostTable:
    """The same model's cost table under other cost options (its kernel graph costed again, the user's
    ``constraints`` applied again); no kernel is required to fit (the caller judges)."""
    table = build_cost_table(costs.kgraph, costs.arch, options, check_feasible=False)
    return apply_constraints(table, constraints) if constraints is not None else table
