"""The one YAML loader of the framework: safe types, no aliases, no duplicate keys.

Every YAML file rsiframe reads (recipes, ``--set`` values, frozen recipes, operator
configs and knob spaces) goes through :func:`load`. Aliases (``*name``) are refused
outright: they are the lever of "billion laughs" documents, whose few lines expand into
billions of nodes in memory, and no config of ours needs them. A leaf: it imports only
PyYAML.
"""

from __future__ import annotations

from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", mark
            )
        return super().compose_node(parent, index)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(text: str | bytes) -> Any:
    """Parse one YAML document; :class:`yaml.YAMLError` on an alias, a duplicate key or
    anything else that is not plain safe YAML."""
    return yaml.load(text, Loader=_StrictLoader)
