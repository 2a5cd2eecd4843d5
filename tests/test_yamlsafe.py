"""rsiframe.yamlsafe: the one YAML loader refuses aliases and duplicate keys."""

from __future__ import annotations

import pytest
import yaml

from rsiframe import yamlsafe


def test_plain_yaml_loads() -> None:
    assert yamlsafe.load("a: [1, 2]\nb: {c: x}\n") == {"a": [1, 2], "b": {"c": "x"}}


def test_an_alias_bomb_is_refused_before_anything_expands() -> None:
    rows = ['l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(yaml.YAMLError, match="aliases"):
        yamlsafe.load("\n".join(rows))
    with pytest.raises(yaml.YAMLError, match="aliases"):
        yamlsafe.load("a: &x 1\nb: *x\n")


def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        yamlsafe.load("a: 1\na: 2\n")


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(yaml.YAMLError):
        yamlsafe.load("!!python/object/apply:os.system ['true']")
