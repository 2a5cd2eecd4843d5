"""rsiframe.util.validation: a pydantic error as the one line a person can act on."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from rsiframe.util.validation import clean, first_error


class Slot(BaseModel):
    model_config = ConfigDict(extra="forbid")
    operator: str


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_generations: int = 1

    @field_validator("max_generations")
    @classmethod
    def positive(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be at least 0")
        return v


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    select: Slot
    budget: Budget = Budget()


def _error(data: dict) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Recipe.model_validate(data)
    return info.value


def test_an_unknown_key_comes_first_with_a_did_you_mean() -> None:
    exc = _error({"selct": {"operator": "best"}})  # also makes 'select' missing
    assert first_error(exc, "slots", Recipe) == (
        "slots.selct",
        "unknown key (did you mean 'select'?) (and 1 more problem)",
    )
    nested = _error({"select": {"operator": "best"}, "budget": {"max_generatons": 2}})
    assert first_error(nested, model=Recipe) == (
        "budget.max_generatons",
        "unknown key (did you mean 'max_generations'?)",
    )
    assert first_error(nested)[1] == "unknown key"  # without the model: no suggestion


def test_pydantic_prefixes_are_dropped() -> None:
    exc = _error({"select": {"operator": "best"}, "budget": {"max_generations": -1}})
    assert first_error(exc) == ("budget.max_generations", "must be at least 0")
    assert clean("Value error, bad") == "bad" and clean("Assertion failed, x") == "x"
