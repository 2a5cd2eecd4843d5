"""Every config field of every built-in operator reads well in ``operators describe``: a
one-line description and a type in words (never ``list | None`` or ``typing.Optional``)."""

from __future__ import annotations

import json
import re

import pytest

from rsiframe.slots.registry import installed
from tests.support.cli import cli

BUILT_IN = sorted(
    f"{slot}.{name}"
    for (slot, name), info in installed().items()
    if info.ref.startswith("rsiframe.operators.")
)
# what a type in words may hold: words, quoted literals, punctuation of "a, or b (Model)"
READABLE = re.compile(r"^[A-Za-z0-9 ,/'_.()\-]+$")


def test_the_built_in_operators_are_found() -> None:
    assert len(BUILT_IN) > 20, BUILT_IN


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_field_has_a_description_and_a_readable_type(name: str) -> None:
    res = cli("operators", "describe", name, "--json")
    assert res.exit_code == 0, res.output
    fields = json.loads(res.stdout)["fields"]
    bare = [f["name"] for f in fields if not f["description"].strip()]
    assert not bare, f"{name}: fields without a description: {bare}"
    multi = [f["name"] for f in fields if "\n" in f["description"].strip()]
    assert not multi, f"{name}: descriptions over one line: {multi}"
    odd = [(f["name"], f["type"]) for f in fields if not READABLE.match(f["type"])]
    assert not odd, f"{name}: types not in words: {odd}"


def test_types_read_as_words() -> None:
    from typing import Literal

    from rsiframe.cli.tools import _type_name

    assert _type_name(list[str] | None) == "list of string, or null"
    assert _type_name(list | None) == "list, or null"
    assert _type_name(dict[str, float]) == "mapping of string to number"
    assert _type_name(Literal["a", "b"]) == "one of 'a', 'b'"
    assert _type_name(int | float) == "integer or number"
