"""rsiframe.slots.registry: operators found by entry point (built-ins too), ``module:Class``
or ``file.py:Class``; a wrong name says what was meant, a wrong class says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.errors import OperatorNotFound
from rsiframe.operators.select import Best
from rsiframe.slots.registry import describe, installed, resolve


def test_built_ins_are_entry_points_found_by_name_or_slot_dot_name() -> None:
    assert resolve("select", "best") is Best
    assert resolve("select", "select.best") is Best
    assert resolve("select", "rsiframe.operators.select:Best") is Best
    assert ("mutate", "knobs") in installed() and ("gate", "improves_parent") in installed()
    info, cls = describe("tournament")
    assert (info.slot, cls.__name__) == ("select", "Tournament")


@pytest.mark.parametrize(
    ("slot", "ref", "message"),
    [
        ("select", "bset", "unknown select operator 'bset' (did you mean 'best'"),
        ("select", "knobs", "'knobs' is a mutate operator"),
        ("mutate", "rsiframe.operators.select:Best", "is not a mutate operator (subclass"),
        ("select", "no.such.module:Cls", "cannot import module 'no.such.module'"),
        ("select", "rsiframe.operators.select:Nope", "has no attribute 'Nope'"),
        ("select", "nothing-here.py:X", "operator file not found"),
        ("select", ":X", "is not module:Class or path/file.py:Class"),
    ],
)
def test_a_wrong_reference_is_one_clear_error(slot: str, ref: str, message: str) -> None:
    with pytest.raises(OperatorNotFound) as info:
        resolve(slot, ref)
    assert message in str(info.value)


def test_an_operator_from_a_file_relative_to_the_recipe(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "mine.py").write_text(
        "from rsiframe.api import SelectOperator, Selection\n"
        "class Oldest(SelectOperator):\n"
        "    name = 'oldest'\n"
        "    def select(self, ctx):\n"
        "        return Selection(parent=ctx.run.admitted()[0].id)\n"
    )
    cls = resolve("select", "ops/mine.py:Oldest", base_dir=tmp_path)
    assert cls.__name__ == "Oldest" and resolve("select", "ops/mine.py:Oldest", tmp_path) is cls
    (tmp_path / "ops" / "broken.py").write_text("raise RuntimeError('at import')\n")
    with pytest.raises(OperatorNotFound, match=r"importing .*broken\.py failed: at import"):
        resolve("select", "ops/broken.py:X", base_dir=tmp_path)


def test_an_operator_may_not_grant_itself_reads_its_slot_does_not_allow(tmp_path: Path) -> None:
    (tmp_path / "peek.py").write_text(
        "from rsiframe.api import SelectOperator\n"
        "class Peek(SelectOperator):\n"
        "    name = 'peek'\n"
        "    grants = frozenset({'rewards:gate'})\n"
    )
    with pytest.raises(OperatorNotFound, match="declares grants its slot does not allow"):
        resolve("select", "peek.py:Peek", base_dir=tmp_path)
