"""Every node checked against its ONNX schema before any folding or costing.

A node that lost an input (a Shape with none, a MatMul with one), an output too many, an attribute
of the wrong type or one its op does not have: ONNX's own per-node check
(``onnx.checker.check_node``, run with the model's IR version and opset imports) rejects them, and
so do we, naming the node, condensing ONNX's message to one line and saying what to do. Without
this, such nodes reached the folding and cost code as index errors, or were planned as if nothing
were wrong (a GatherND with one input).

Ops without a schema are left alone here: custom-domain ops and op types ONNX does not define keep
their own diagnosis downstream (shapes from ``value_info``, ``--allow-unknown-ops``). Nodes inside
subgraphs (If/Loop/Scan bodies) are checked one by one too: ONNX's check of a whole subgraph would
reject every read of an outer-scope tensor, because its Python API cannot pass the outer scope.
"""

from __future__ import annotations

import re

import onnx
from onnx import checker, defs

from wsealloc.errors import ModelLoadError
from wsealloc.frontend.topo import node_label

# The default domain has two spellings; ONNX's schema registry only knows the empty one.
_DEFAULT_DOMAINS = ("", "ai.onnx")
_MAX_MESSAGE = 240


def _context(model: onnx.ModelProto) -> checker.C.CheckerContext:
    """A checker context with the model's own IR version and opset imports (``ai.onnx`` read as ``""``)."""
    ctx = checker.C.CheckerContext()
    ctx.ir_version = model.ir_version if model.ir_version > 0 else onnx.IR_VERSION
    imports = {("" if o.domain in _DEFAULT_DOMAINS else o.domain): int(o.version) for o in model.opset_import}
    ctx.opset_imports = imports
    return ctx


_ARITY = re.compile(r"has (input|output) size (\d+) not in range \[min=(\d+), max=(\d+)\]")
_PREFIX = re.compile(r"^Node(?:\([^)]*\))? with schema\((\S*)\) ")


def _condensed(exc: Exception) -> str:
    """ONNX's message on one line: without its context block and its ``Node(x) with schema(::Op:13)``
    preamble (our message names the node already), arity said in words, and shortened."""
    text = " ".join(str(exc).split("==> Context:")[0].split()).rstrip(".")
    prefix = _PREFIX.match(text)
    schema = "its schema"
    if prefix:
        text = text[prefix.end() :]
        domain, _, rest = prefix.group(1).partition("::")
        op, _, version = rest.partition(":")
        schema = f"{domain + '::' if domain else ''}{op}-{version}" if op and version else schema
    arity = _ARITY.search(text)
    if arity:
        kind, got, low, high = arity.group(1), int(arity.group(2)), int(arity.group(3)), int(arity.group(4))
        wanted = f"{low}" if low == high else (f"at least {low}" if high >= 2**31 - 1 else f"{low} to {high}")
        text = f"it has {got} {kind}{'' if got == 1 else 's'} where {schema} takes {wanted}"
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _fix(message: str, op_type: str) -> str:
    if message.startswith("it has "):
        return "an input or output was lost or added when the file was edited or exported; re-export the model"
    if "attribute" in message.lower():
        return f"an attribute of {op_type} is missing, unknown or of the wrong type; re-export the model"
    if "deprecated" in message:
        return f"{op_type} is deprecated at this opset; re-export the model with a current exporter"
    return "re-export the model (e.g. torch.onnx.export(..., dynamo=True))"


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held by the node's attributes (If branches, Loop and Scan bodies)."""
    out: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def _checkable_copy(node: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of ``node`` that ONNX's node check accepts for what it is: graph attributes as empty
    stubs (their nodes are checked one by one) and the default domain spelled ``""``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    if copy.domain == "ai.onnx":
        copy.domain = ""
    for attr in copy.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            attr.g.CopyFrom(onnx.GraphProto(name=attr.g.name or attr.name))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for g in attr.graphs:
                g.CopyFrom(onnx.GraphProto(name=g.name or attr.name))
    return copy


def check_nodes(model: onnx.ModelProto, source: str) -> None:
    """Run ONNX's per-node schema check over every node of the model, subgraphs included.

    Raises :class:`ModelLoadError` for the first node ONNX rejects, and for a node without an op
    type (which ONNX's message would call a missing field of "node")."""
    ctx = _context(model)
    local_functions = {(f.domain, f.name) for f in model.functions}
    _check_graph(model.graph, ctx, local_functions, source, "")


def _check_graph(
    graph: onnx.GraphProto,
    ctx: checker.C.CheckerContext,
    local_functions: set[tuple[str, str]],
    source: str,
    where: str,
) -> None:
    # this runs over every node of the biggest zoo models (13,000 in LLaMA-70B) on every load: the
    # schema lookup is cached per op, the C checker is called directly, labels are built on error only
    lexical = checker.C.LexicalScopeContext()
    has_schema: dict[tuple[str, str], bool] = {}
    for index, node in enumerate(graph.node):
        if not node.op_type:
            name = f"{node.name!r}" if node.name else f"#{index}"
            raise ModelLoadError(
                f"{source}: node {name}{where} has an empty op type (the file is corrupt or its exporter is broken); "
                "re-export the model"
            )
        if type(node.name) is bytes or type(node.op_type) is bytes or type(node.domain) is bytes:
            # protobuf hands back strings that are not valid UTF-8 as bytes (ONNX requires UTF-8)
            raise ModelLoadError(
                f"{source}: node #{index}{where} has a name, op type or domain that is not valid UTF-8 "
                f"({node.name!r}, {node.op_type!r}, {node.domain!r}): the file is corrupt; re-export the model"
            )
        key = (node.domain, node.op_type)
        known = has_schema.get(key)
        if known is None:
            domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
            # a model-local function has no registered schema to check against
            known = has_schema[key] = key not in local_functions and bool(defs.has(node.op_type, domain))
        subgraphs = _subgraphs(node) if node.attribute else []
        if known:
            checked = node
            if subgraphs or node.domain == "ai.onnx":
                checked = _checkable_copy(node)
            try:
                checker.C.check_node(checked.SerializeToString(), ctx, lexical)
            except (checker.ValidationError, ValueError, RuntimeError) as exc:
                message = _condensed(exc)
                raise ModelLoadError(
                    f"{source}: node {node_label(node, index)}{where} fails ONNX's schema check: {message}; "
                    f"{_fix(message, node.op_type)}"
                ) from exc
            if node.op_type == "Split":
                _check_split(node, source, f"{node_label(node, index)}{where}")
        for sub in subgraphs:
            _check_graph(sub, ctx, local_functions, source, f" in subgraph {sub.name!r} of {node_label(node, index)}{where}")


def _check_split(node: onnx.NodeProto, source: str, label: str) -> None:
    """``num_outputs`` must match the node's outputs: ONNX's schema does not check it, and its shape
    inference allocates that many outputs before comparing (2^40 of them: ``std::bad_alloc``)."""
    for attr in node.attribute:
        if attr.name == "num_outputs" and attr.type == onnx.AttributeProto.INT and attr.i != len(node.output):
            raise ModelLoadError(
                f"{source}: node {label} has num_outputs {attr.i:,} but {len(node.output)} outputs; they must be "
                "equal: re-export the model"
            )
