"""rsiframe.errors: each error a user can cause says where, and carries its exit code."""

from __future__ import annotations

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
