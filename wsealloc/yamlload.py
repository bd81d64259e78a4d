"""Strict, bounded YAML for every file wsealloc reads (arch YAMLs, presets, suites, constraints).

PyYAML's ``safe_load`` keeps the last of two equal keys without a word, so a second ``sram_bytes:``
or a second ``noc:`` section would silently change a result. :func:`load_yaml` refuses them,
naming the key and both lines. It also bounds what a small file can ask of the reader, since these
files come from users and suites travel between machines:

* nesting (lists and mappings inside one another) deeper than :data:`MAX_DEPTH` levels is refused at
  the line where it goes too deep: PyYAML's composer recurses once per level, so ``[[[[...]]]]``
  20,000 deep ended in a ``RecursionError`` (an internal error) instead of a message;
* aliases (``*a`` repeating the value anchored ``&a``) are fine for sharing a section, but each one
  stands for its whole value, so a few lines of aliases of aliases expand to 10^9 values (a "billion
  laughs"): every consumer then walks, validates or prints the expanded value (an error message
  quoting it ran for minutes). The values the aliases of one document add, each counted expanded, are
  limited to :data:`MAX_ALIAS_VALUES`; an alias inside the value it names (a recursive alias) and
  aliases nesting the document deeper than :data:`MAX_DEPTH` are refused too;
* an integer longer than Python converts (4,300 digits) is refused at its line (a ``ValueError``
  from PyYAML's constructor before).

Everything else is ``yaml.safe_load`` (same types, same ``yaml.YAMLError`` with its line and column
for syntax errors). Refusals are :class:`StrictYamlError`, which callers re-raise as their own type.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from wsealloc.errors import WseallocError

# Nesting levels a document may have: arch files use three, constraints and suites four or five.
MAX_DEPTH = 64
# Values the aliases of one document may add once expanded (each alias counted as its whole value):
# far more than a merge key or a shared section repeats, far fewer than a consumer would choke on.
MAX_ALIAS_VALUES = 10_000


class StrictYamlError(WseallocError):
    """A YAML document the strict reader refuses (module docstring); callers re-raise it as their own
    error type (``ArchError``, ``ConstraintError``, ...), keeping its message."""


class DuplicateKeyError(StrictYamlError):
    """A YAML mapping gives one key twice."""


class _StrictLoader(yaml.SafeLoader):
    """A ``SafeLoader`` whose mappings refuse duplicate keys (YAML 1.2 says keys must be unique) and
    whose composer bounds nesting and alias expansion (module docstring)."""

    label = "<yaml>"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0  # levels of the node being composed
        self._open: list[str] = []  # anchors of the nodes being composed (an alias to one is recursive)
        self._added = 0  # values the aliases so far add, expanded
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, levels) once expanded

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise StrictYamlError(
                    f"{self.label}: line {line}: lists and mappings nested more than {MAX_DEPTH} levels deep; "
                    "wsealloc's YAML files need a few levels (check the brackets)"
                )
            if isinstance(event, AliasEvent):
                self._alias(str(event.anchor), line)
                return super().compose_node(parent, index)
            anchor = event.anchor
            if anchor is not None:
                self._open.append(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                if anchor is not None:
                    self._open.pop()
        finally:
            self._depth -= 1

    def _alias(self, anchor: str, line: int) -> None:
        """Count what alias ``*anchor`` on ``line`` adds; refuse it past the bounds."""
        if anchor in self._open:
            raise StrictYamlError(
                f"{self.label}: line {line}: alias *{anchor} is inside the value it names (a recursive alias); "
                "write the value out"
            )
        target = self.anchors.get(anchor)
        if target is None:
            return  # an undefined alias: PyYAML's composer reports it with its line
        values, levels = self._measure(target)
        self._added += values
        if self._added > MAX_ALIAS_VALUES:
            raise StrictYamlError(
                f"{self.label}: line {line}: alias *{anchor} stands for {values:,} values; the aliases of this file "
                f"would expand to more than {MAX_ALIAS_VALUES:,} values in all (write the values out, or alias less)"
            )
        if self._depth - 1 + levels > MAX_DEPTH:
            raise StrictYamlError(
                f"{self.label}: line {line}: alias *{anchor} nests lists and mappings more than {MAX_DEPTH} levels deep "
                "once expanded; write the value out"
            )

    def _measure(self, node: Node) -> tuple[int, int]:
        """(values, levels) of ``node`` with every alias in it expanded. A composed node's own levels are
        bounded (``compose_node``) and an alias inside it was measured when it was composed, so the
        recursion stays within :data:`MAX_DEPTH`."""
        found = self._measured.get(id(node))
        if found is None:
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [part for pair in node.value for part in pair]
            else:
                children = []
            values, levels = 1, 1
            for child in children:
                v, lv = self._measure(child)
                values, levels = values + v, max(levels, lv + 1)
            found = self._measured[id(node)] = (values, levels)
        return found

    def construct_yaml_int(self, node: ScalarNode) -> int:
        """An integer; one too long for Python to convert (over 4,300 digits: a ``ValueError``, an
        internal error before) is refused at its line."""
        try:
            return int(super().construct_yaml_int(node))
        except ValueError:
            raise StrictYamlError(
                f"{self.label}: line {node.start_mark.line + 1}: a number of {len(str(node.value)):,} characters; "
                "no field takes one that long"
            ) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # merge keys (`<<: *base`) are resolved by flatten_mapping first: an explicit key that
        # overrides a merged one is the documented YAML idiom, not a duplicate, so only the
        # mapping's own keys are compared (flatten_mapping puts the merged ones before them)
        own = sum(key_node.tag != "tag:yaml.org,2002:merge" for key_node, _ in node.value)
        self.flatten_mapping(node)
        first_own = len(node.value) - own
        seen: dict[Any, int] = {}
        for index, (key_node, _) in enumerate(node.value):
            if index < first_own:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping below reports it as PyYAML does
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKeyError(
                    f"{self.label}: line {line}: key {key!r} is given twice (first on line {seen[key]}); "
                    "YAML keys must be unique, delete one of them"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def load_yaml_node(text: str, label: str) -> tuple[Any, Node | None]:
    """The data of ``text`` (as :func:`load_yaml`) and its composed root node (None: an empty
    document), for callers that report lines of the document's parts (the node's marks)."""
    loader = _StrictLoader(text)
    loader.label = label
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def load_yaml(text: str, label: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load``, but raise :class:`StrictYamlError` for a key given twice,
    nesting deeper than :data:`MAX_DEPTH` or aliases expanding past :data:`MAX_ALIAS_VALUES`.

    ``label`` names the source (a path, ``preset wse2``) in the message. Syntax errors stay
    ``yaml.YAMLError`` so callers keep reporting their line and column.
    """
    return load_yaml_node(text, label)[0]
