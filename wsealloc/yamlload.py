"""Strict YAML for every file wsealloc reads (arch YAMLs, presets, suites): a key given twice is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys without a word, so a second ``sram_bytes:``
or a second ``noc:`` section would silently change a result. :func:`load_yaml` refuses them,
naming the key and both lines; everything else is ``yaml.safe_load`` (same types, same
``yaml.YAMLError`` with its line and column for syntax errors).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode

from wsealloc.errors import WseallocError


class DuplicateKeyError(WseallocError):
    """A YAML mapping gives one key twice; callers re-raise it as their own error type."""


class _StrictLoader(yaml.SafeLoader):
    """A ``SafeLoader`` whose mappings refuse duplicate keys (YAML 1.2 says keys must be unique)."""

    label = "<yaml>"

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


def load_yaml(text: str, label: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load``, but raise :class:`DuplicateKeyError` for a key given twice.

    ``label`` names the source (a path, ``preset wse2``) in the message. Syntax errors stay
    ``yaml.YAMLError`` so callers keep reporting their line and column.
    """
    loader = _StrictLoader(text)
    loader.label = label
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
