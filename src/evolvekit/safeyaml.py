"""YAML from outside (config files, ablation specs), loaded with bounded work.

A YAML alias shares a node instead of copying it, so a few hundred bytes of anchors and aliases ("billion laughs")
stand for a document of billions of values; nothing expands them until a validator or a dump walks the shared
structure, and then it takes gigabytes. ``load_yaml`` counts the document's nodes as they would be expanded (each
shared node once per reference, by memo, without expanding anything) and refuses it past a limit, before any Python
object is built.

A leaf module, like ``safejson``.
"""

from __future__ import annotations

from typing import Any

import yaml

# far above any real config (the largest shipped one expands to under 1,000 nodes) and far below what hurts
MAX_YAML_NODES = 200_000
MAX_YAML_BYTES = 8 * 1024 * 1024


class YamlTooLarge(ValueError):
    """The document expands to more nodes than allowed, or refers to itself."""


def expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` has when every alias is replaced by a copy of its anchor's node, counted by memo
    (shared nodes are counted, never copied). Raises ``YamlTooLarge`` past ``limit`` or on a node that contains
    itself (a recursive anchor)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        kids = _children(node)
        if children_done:
            total = 1 + sum(sizes[id(k)] for k in kids)
            if total > limit:
                raise YamlTooLarge(f"it expands to more than {limit:,} values (YAML aliases)")
            sizes[key] = total
            open_.discard(key)
            continue
        if key in open_:
            raise YamlTooLarge("a YAML anchor refers to itself")
        open_.add(key)
        stack.append((node, True))
        for kid in kids:
            if id(kid) in open_:
                raise YamlTooLarge("a YAML anchor refers to itself")
            if id(kid) not in sizes:
                stack.append((kid, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(text: str, max_nodes: int = MAX_YAML_NODES) -> Any:
    """``yaml.safe_load(text)``, refusing (``YamlTooLarge``) a document that expands to more than ``max_nodes``
    nodes or contains itself. Raises ``yaml.YAMLError`` for text that is not YAML, as ``safe_load`` does."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlTooLarge(f"{len(text):,} characters, more than the {MAX_YAML_BYTES:,} a config may have")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_nodes(node, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()
