"""The one YAML loader of the framework: safe types, no aliases, no duplicate keys, caps.

Every YAML file rsiframe reads (recipes, ``--set`` values, frozen recipes, operator
configs, and what comes from a candidate or a task: knob spaces, island descriptors,
Harbor's ``agent_config``) goes through :func:`load` or :func:`load_file`. Aliases
(``*name``) are refused outright: they are the lever of "billion laughs" documents, whose
few lines expand into billions of nodes (in memory, or when the value is later written out
as JSON), and no config of ours needs them. A document is also refused past
:data:`MAX_BYTES` or nested deeper than :data:`MAX_DEPTH` (which would otherwise end in a
``RecursionError``). A leaf: it imports only PyYAML and :mod:`rsiframe.util.safefile`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rsiframe.util.safefile import read_regular

#: the largest YAML document read (bytes)
MAX_BYTES = 4 << 20
#: the deepest nesting of mappings and sequences
MAX_DEPTH = 64


class _StrictLoader(yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                msg = f"YAML nested deeper than {MAX_DEPTH} levels"
                raise yaml.composer.ComposerError(None, None, msg, mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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


def load(text: str | bytes, max_bytes: int = MAX_BYTES) -> Any:
    """Parse one YAML document; :class:`yaml.YAMLError` on an alias, a duplicate key, a
    document over ``max_bytes`` or nested too deep, or anything else that is not plain
    safe YAML."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise yaml.YAMLError(f"the YAML document is {size} bytes, over the {max_bytes}-byte limit")
    return yaml.load(text, Loader=_StrictLoader)


def load_file(path: Path | str, max_bytes: int = MAX_BYTES) -> Any:
    """:func:`load` of a regular file (never a link, FIFO or device), read only up to
    ``max_bytes``; OSError when it cannot be read so, ``ValueError`` when it is not UTF-8."""
    return load(read_regular(path, max_bytes).decode(), max_bytes)
