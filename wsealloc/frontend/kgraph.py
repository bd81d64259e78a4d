"""Read an ISPD-2020 contest instance (a ``.kgraph`` file) into a :class:`ContestGraph`.

The format, as the published instances write it (``docs/ispd2020.md``)::

    (*
    test=compact-balanced-router
    width=633
    height=633
    wdeltat=1
    wlength=1
    wadapter=0
    memlimit=24576
    *)
    (* Node Definitions *)
    input[ 0] n=[112 112 128] name='k0'
    conv[1] W=14 H=14 R=1 S=1 C=1024 K=512 T=1 U=1 name='k1'
    cblock[ 2] f=2048 h=14 w=14 name='k2'
    (* Connectivity *)
    input[ 0]:_    -> cblock[ 2]:x, shape:[112][112][128]
    conv[1]:y\t->\tcblock[ 2]:x, shape:[14][14][1024]

Whitespace is free inside brackets and around ``->``, ``:`` and ``=``; ``(* ... *)`` comments and
blank lines are skipped; a node without ``name=`` is named ``k<ID>``; when ``name=`` is repeated
(``name='x' name='k0'``) the last one wins, as in the contest's own tools. ``input``/``output``
nodes are kept but not placed. Anything else is a one-line :class:`ModelLoadError` naming the file,
the line and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path

from wsealloc.arch.schema import MAX_CORES
from wsealloc.errors import ModelLoadError
from wsealloc.graph.contest import (
    BlockArgs,
    ContestEdge,
    ContestGraph,
    ContestKernel,
    ContestKind,
    ConvArgs,
    Fabric,
    FormalArgs,
    IoNode,
)

# Every number of a file is below 2^31 (as the --set header overrides are), and the fabric holds at
# most as many tiles as an arch's wafer may have cores (the placement's arrays are height x width).
MAX_INT = 2**31 - 1
MAX_TILES = MAX_CORES

IO_TYPES = ("input", "output")
NODE_TYPES = tuple(k.value for k in ContestKind) + IO_TYPES
HEADER_INTS = ("width", "height", "memlimit", "wdeltat", "wlength", "wadapter")
# conv params in the files' own order; blocks take f h w (case-insensitive in both)
CONV_PARAMS = ("W", "H", "R", "S", "C", "K", "T", "U")
BLOCK_PARAMS = ("f", "h", "w")
SNIFF_BYTES = 4096

_NODE = re.compile(r"^(?P<type>[A-Za-z_]\w*)\s*\[\s*(?P<id>[^\]]*?)\s*\](?P<rest>(?:\s.*)?)$")
_END = r"(?P<{0}type>[A-Za-z_]\w*)\s*\[\s*(?P<{0}id>[^\]]*?)\s*\]\s*:\s*(?P<{0}port>\w+)"
_EDGE = re.compile(
    r"^" + _END.format("s") + r"\s*->\s*" + _END.format("d") + r"\s*(?:,\s*shape\s*:\s*(?P<shape>(?:\s*\[[^\]]*\])*))?\s*$"
)
_PARAM = re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^\s\[\]'\"=]+)")
_COMMENT = re.compile(r"\(\*.*?\*\)", re.S)


def looks_like_kgraph(path: str | Path) -> bool:
    """Whether a file is a contest ``.kgraph`` instance: its suffix, or a text header ``(* ... width= height= ...``.

    Cheap (reads at most 4 KiB) and False for ONNX protobufs and other binary files.
    """
    p = Path(path)
    if p.suffix.lower() == ".kgraph":
        return True
    if not p.is_file():  # never open a FIFO or a device to sniff it (it could block)
        return False
    try:
        with p.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    if b"\0" in head:
        return False
    # a multi-byte character cut at the 4 KiB boundary must not make a text file look binary
    text = head.decode("utf-8", errors="replace")
    text = text.lstrip("\ufeff \t\r\n")
    if not text.startswith("(*"):
        return False
    header = text.split("*)", 1)[0]
    return re.search(r"\bwidth\s*=", header) is not None and re.search(r"\bheight\s*=", header) is not None


def fabric_size_error(width: int, height: int) -> str:
    """Why a width x height fabric is too large to place on ("" when it is not)."""
    if width * height > MAX_TILES:
        return (
            f"a {width:,} x {height:,} fabric has {width * height:,} tiles, over the {MAX_TILES:,} wsealloc places on "
            "(an arch's largest wafer)"
        )
    return ""


def parse_kgraph(path: str | Path, *, fabric: Fabric | None = None) -> ContestGraph:
    """Read a ``.kgraph`` file; ``fabric`` stands in for a file without a header (the contest's example had none)."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file; check the path")
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory, expected a .kgraph file")
    data = p.read_bytes()
    if b"\0" in data[:SNIFF_BYTES]:
        raise ModelLoadError(f"{p}: binary file (an ONNX model?), expected a .kgraph text instance")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{p}: not UTF-8 text (byte {exc.start}), expected a .kgraph text instance") from None
    return parse_kgraph_text(text, str(p), fabric=fabric)


def parse_kgraph_text(text: str, label: str, *, fabric: Fabric | None = None) -> ContestGraph:
    """Parse the text of a ``.kgraph`` instance; ``label`` names it in messages (usually the path)."""
    return _Parser(text, label, fabric).parse()


class _Parser:
    """One pass over the lines: header, node lines, edge lines; edges resolved once every node is known."""

    def __init__(self, text: str, label: str, fabric: Fabric | None) -> None:
        self.text = text.lstrip("\ufeff")
        self.label = label
        self.default_fabric = fabric
        self.kernels: list[ContestKernel] = []
        self.io_nodes: list[IoNode] = []
        self.types: dict[int, tuple[str, int]] = {}  # id -> (type, line)
        self.names: dict[str, int] = {}  # name -> line
        self.raw_edges: list[tuple[int, re.Match[str]]] = []

    def fail(self, line: int, message: str) -> ModelLoadError:
        where = f"{self.label}:{line}" if line else self.label
        return ModelLoadError(f"{where}: {message}")

    def parse(self) -> ContestGraph:
        if "\0" in self.text:
            raise self.fail(0, "binary file (an ONNX model?), expected a .kgraph text instance")
        if not self.text.strip():
            raise self.fail(0, "empty file; expected a '(* width=.. height=.. memlimit=.. *)' header, node lines and edge lines")
        lines = self.text.splitlines()
        fabric, body_start = self.header(lines)
        self.body(lines, body_start)
        if not self.kernels:
            raise self.fail(0, "no conv, dblock or cblock node: nothing to place")
        edges, io_edges = self.edges()
        return ContestGraph(fabric, tuple(self.kernels), tuple(self.io_nodes), edges, io_edges, self.label)

    # -- header -------------------------------------------------------------------------------
    def header(self, lines: list[str]) -> tuple[Fabric, int]:
        """The fabric from the leading ``(* key=value ... *)`` comment, and the index of the first body line."""
        first = next((i for i, s in enumerate(lines) if s.strip()), 0)
        start = lines[first].strip()
        if not (start.startswith("(*") and "=" in self._comment_text(lines, first)):
            if self.default_fabric is not None:
                return self.default_fabric, first
            raise self.fail(
                first + 1, "no header: expected '(* test=.. width=.. height=.. memlimit=.. wdeltat=.. wlength=.. wadapter=.. *)'"
            )
        end = first
        while "*)" not in lines[end]:
            end += 1
            if end == len(lines):
                raise self.fail(first + 1, "the header comment '(*' is never closed by '*)'")
        values: dict[str, tuple[str, int]] = {}
        for i in range(first, end + 1):
            body = lines[i].replace("(*", " ").replace("*)", " ")
            for m in re.finditer(r"(\w+)\s*=\s*(\S*)", body):
                values[m.group(1).lower()] = (m.group(2), i + 1)
        ints: dict[str, int] = {}
        for key in HEADER_INTS:
            if key not in values:
                raise self.fail(end + 1, f"header field '{key}=' is missing; the header needs {', '.join(HEADER_INTS)}")
            raw, line = values[key]
            ints[key] = self._int(raw, line, f"header field '{key}'", minimum=1 if key in ("width", "height", "memlimit") else 0)
        test = values.get("test", (Path(self.label).stem, 0))[0]
        fabric = Fabric(test, ints["width"], ints["height"], ints["memlimit"], ints["wdeltat"], ints["wlength"], ints["wadapter"])
        problem = fabric_size_error(fabric.width, fabric.height)
        if problem:
            raise self.fail(values["width"][1], problem)
        return fabric, end + 1

    @staticmethod
    def _comment_text(lines: list[str], first: int) -> str:
        out = []
        for s in lines[first:]:
            out.append(s)
            if "*)" in s:
                break
        return "\n".join(out)

    def _int(self, raw: str, line: int, what: str, *, minimum: int) -> int:
        raw = raw.strip().strip("'\"")
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise self.fail(line, f"{what} must be an integer, got {raw!r}")
        value = int(raw)
        if value < minimum:
            bound = "positive" if minimum == 1 else "non-negative"
            raise self.fail(line, f"{what} must be {bound}, got {value}")
        if value > MAX_INT:
            raise self.fail(line, f"{what} is {value}, over the largest number a .kgraph may hold ({MAX_INT:,})")
        return value

    # -- body ---------------------------------------------------------------------------------
    def body(self, lines: list[str], start: int) -> None:
        in_comment = False
        for i in range(start, len(lines)):
            line_no = i + 1
            s = lines[i]
            if in_comment:
                if "*)" not in s:
                    continue
                s = s.split("*)", 1)[1]
                in_comment = False
            s = _COMMENT.sub(" ", s)
            if "(*" in s:  # a comment opened here and closed on a later line
                s, in_comment = s.split("(*", 1)[0], True
            s = s.strip()
            if not s:
                continue
            if "->" in s:
                m = _EDGE.match(s)
                if m is None:
                    raise self.fail(line_no, f"expected an edge 'TYPE[ID]:port -> TYPE[ID]:port, shape:[H][W][C]', got {s!r}")
                self.raw_edges.append((line_no, m))
                continue
            node = _NODE.match(s)
            if node is None:
                raise self.fail(
                    line_no, f"expected a node 'TYPE[ID] key=value ..' or an edge 'TYPE[ID]:port -> TYPE[ID]:port', got {s!r}"
                )
            self.node(line_no, node)

    def node(self, line: int, m: re.Match[str]) -> None:
        ntype = m.group("type").lower()
        if ntype not in NODE_TYPES:
            raise self.fail(line, f"unknown node type {m.group('type')!r}; known types: {', '.join(sorted(NODE_TYPES))}")
        node_id = self._int(m.group("id"), line, f"{ntype} node id", minimum=0)
        if node_id in self.types:
            other_type, other_line = self.types[node_id]
            raise self.fail(
                line, f"duplicate node id {node_id} (already {other_type}[{node_id}] at line {other_line}); ids must be unique"
            )
        rest = m.group("rest")
        params: dict[str, str] = {}
        name = f"k{node_id}"
        consumed = _PARAM.sub(" ", rest).strip()
        if consumed:
            raise self.fail(line, f"{ntype}[{node_id}]: cannot read {consumed!r}; expected key=value fields")
        for pm in _PARAM.finditer(rest):
            key, value = pm.group("key"), pm.group("value")
            if key.lower() == "name":
                name = value.strip("'\"")  # repeated name=: the last wins, as in the contest's tools
                continue
            norm = key.upper() if ntype == "conv" else key.lower()
            if norm in params:
                raise self.fail(line, f"{ntype}[{node_id}]: field {key!r} given twice")
            params[norm] = value
        if not name:
            raise self.fail(line, f"{ntype}[{node_id}]: empty name=''")
        if name in self.names:
            raise self.fail(line, f"duplicate kernel name {name!r} (already at line {self.names[name]}); names must be unique")
        self.types[node_id] = (ntype, line)
        self.names[name] = line
        if ntype in IO_TYPES:
            shape = self._shape(params.get("n", ""), line, f"{ntype}[{node_id}] n") if "n" in params else ()
            self.io_nodes.append(IoNode(node_id, ntype, name, shape, line))
            return
        kind = ContestKind(ntype)
        args = self._args(kind, node_id, params, line)
        self.kernels.append(ContestKernel(len(self.kernels), node_id, name, kind, args, line))

    def _args(self, kind: ContestKind, node_id: int, params: dict[str, str], line: int) -> FormalArgs:
        expected = CONV_PARAMS if kind is ContestKind.CONV else BLOCK_PARAMS
        where = f"{kind.value}[{node_id}]"
        missing = [p for p in expected if p not in params]
        if missing:
            raise self.fail(line, f"{where}: missing {', '.join(missing)}; a {kind.value} needs {' '.join(expected)} (and name=)")
        extra = sorted(set(params) - set(expected))
        if extra:
            raise self.fail(
                line, f"{where}: unknown field(s) {', '.join(extra)}; a {kind.value} takes {' '.join(expected)} and name="
            )
        v = {p: self._int(params[p], line, f"{where} {p}", minimum=1) for p in expected}
        if kind is ContestKind.CONV:
            return ConvArgs(H=v["H"], W=v["W"], R=v["R"], S=v["S"], C=v["C"], K=v["K"], T=v["T"], U=v["U"])
        if v["f"] % 4:
            # the block's convs have F/4 (and, in a cblock, F/2) channels: F must split evenly
            raise self.fail(line, f"{where}: f={v['f']} must be a multiple of 4 (its convs have f/4 channels)")
        return BlockArgs(F=v["f"], H=v["h"], W=v["w"])

    def _shape(self, raw: str, line: int, what: str) -> tuple[int, ...]:
        inner = raw.strip().strip("[]").replace(",", " ").split()
        return tuple(self._int(x, line, what, minimum=1) for x in inner)

    # -- edges --------------------------------------------------------------------------------
    def edges(self) -> tuple[tuple[ContestEdge, ...], tuple[ContestEdge, ...]]:
        kernel_ids = {k.node_id for k in self.kernels}
        edges: list[ContestEdge] = []
        io_edges: list[ContestEdge] = []
        for line, m in self.raw_edges:
            ends = []
            for side in ("s", "d"):
                etype = m.group(side + "type").lower()
                node_id = self._int(m.group(side + "id"), line, "edge node id", minimum=0)
                if node_id not in self.types:
                    raise self.fail(line, f"edge references {m.group(side + 'type')}[{node_id}], which no node line defines")
                declared = self.types[node_id][0]
                if etype != declared:
                    raise self.fail(
                        line,
                        f"edge says {etype}[{node_id}] but node {node_id} is a {declared} (line {self.types[node_id][1]})",
                    )
                ends.append(node_id)
            raw_shape = m.group("shape")
            if raw_shape is None:
                raise self.fail(line, "edge without ', shape:[H][W][C]'; every edge needs the shape of its tensor")
            dims = re.findall(r"\[([^\]]*)\]", raw_shape)
            if len(dims) != 3:
                raise self.fail(line, f"edge shape {raw_shape.strip()!r} must have three dims [H][W][C]")
            shape = tuple(self._int(d, line, "edge shape dim", minimum=1) for d in dims)
            edge = ContestEdge(ends[0], ends[1], (shape[0], shape[1], shape[2]), (m.group("sport"), m.group("dport")), line)
            (edges if ends[0] in kernel_ids and ends[1] in kernel_ids else io_edges).append(edge)
        return tuple(edges), tuple(io_edges)
