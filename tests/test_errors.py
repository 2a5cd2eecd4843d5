"""rsiframe.errors: each error a user can cause says where, and carries its exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe import errors
from rsiframe.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    ArchiveCorrupt,
    OperatorNotFound,
    RecipeError,
    RsiError,
)


def test_the_message_names_where_when_it_is_known() -> None:
    assert str(RecipeError("slots.select: unknown key", where="r.yaml")) == (
        "r.yaml: slots.select: unknown key"
    )
    bare = RecipeError("no recipe")
    assert (str(bare), bare.message, bare.where) == ("no recipe", "no recipe", None)


def test_bad_input_exits_2_and_a_broken_run_exits_1() -> None:
    assert RecipeError("x").exit_code == OperatorNotFound("x").exit_code == EXIT_BAD_INPUT == 2
    assert ArchiveCorrupt("x").exit_code == EXIT_FAILED == 1
    assert issubclass(OperatorNotFound, RecipeError)


@pytest.mark.parametrize(
    "cls",
    [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, RsiError)],
)
def test_every_user_error_is_an_rsi_error_with_an_exit_code(cls: type[RsiError]) -> None:
    err = cls("what happened", where="here")
    assert err.exit_code in (EXIT_BAD_INPUT, EXIT_FAILED)
    assert str(err) == "here: what happened"


def test_files_are_named_relative_below_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    below = RecipeError("x", where=str(tmp_path / "work" / "m5-tabs.yaml"))
    beside = RecipeError("x", where=str(tmp_path / "other" / "m5-tabs.yaml"))
    given = RecipeError("x", where="m1-slot-typo.yaml")
    assert str(below) == "m5-tabs.yaml: x"
    assert str(beside) == f"{tmp_path}/other/m5-tabs.yaml: x"
    assert str(given) == "m1-slot-typo.yaml: x"


def test_an_extended_file_is_named_like_the_one_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.cli import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m5-tabs.yaml").write_text("name: x\nslots:\n\tselect: best\n")
    (tmp_path / "m6.yaml").write_text("extends: m5-tabs.yaml\n")
    for given in ("m6.yaml", "m5-tabs.yaml"):
        res = cli("recipe", "check", given)
        assert res.exit_code == 2
        assert res.stderr.startswith("rsiframe: error: m5-tabs.yaml: line 3"), res.stderr
