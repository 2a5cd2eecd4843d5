"""Pydantic validation errors as one line a person can act on.

An unknown key comes first (``slots.selct: unknown key (did you mean 'select'?)``), since
a typo also makes the key it meant look missing; pydantic's own prefixes
(``Value error, ``) are dropped; the count of further problems is appended.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

_PREFIXES = ("Value error, ", "Assertion failed, ")


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join("validate" if p == "validate_" else str(p) for p in loc)


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model found by following ``loc`` from ``model`` (None if not a model)."""
    for part in loc:
        if model is None:
            return None
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        if field is None:
            return None
        model = _as_model(field.annotation)
    return model


def _as_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _as_model(arg)
            if found is not None:
                return found
    return None


def _names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def clean(msg: str) -> str:
    for p in _PREFIXES:
        msg = msg.removeprefix(p)
    return msg


def first_error(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> tuple[str, str]:
    """(dotted key, message) of the error to show first; ``model`` gives did-you-means."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
        known = _model_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), _names(known), n=1) if known else []
        if close:
            msg += f" (did you mean {close[0]!r}?)"
    else:
        msg = clean(err["msg"])
    extra = len(errors) - 1
    if extra:
        msg += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return ".".join(p for p in (prefix, _dotted(loc)) if p), msg
