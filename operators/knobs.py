"""mutate ``knobs``: perturb values in YAML/JSON files according to a declared knob space.

Offline and deterministic for a given run seed. A knob names a file, a dotted
key in it, and either ``choices`` or a numeric ``range`` with a ``step``. Each
child changes between one and ``max_changes`` knobs: a choice moves to another
allowed value, a number moves by one to ``max_steps`` steps up or down within
its range. The space can be inline in the recipe or a file in the candidate's
tree (read from the parent's commit, so a mutation cannot widen its own space).

YAML files are rewritten round-trip (``ruamel.yaml``): comments, key order, quoting and
layout stay, so a knob change is a one-line diff. The knob space format, one knob a line::

    knobs:
      - {file: solver.yaml, key: branching, choices: [first, random, moms, jw, dlis]}
      - {file: solver.yaml, key: restarts.base, range: [10, 400], step: 10}
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from ruamel.yaml import YAML

from rsiframe.api import MutateContext, MutateOperator, Mutation, RunStart
from rsiframe.operators.roundrobin import component_index
from rsiframe.yamlsafe import load as yaml_load


class KnobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str = Field(description="YAML or JSON file, relative to the candidate root")
    key: str = Field(description="dotted path of the value inside the file")
    choices: list[Any] | None = Field(None, description="allowed values")
    range: tuple[float, float] | None = Field(None, description="[low, high] for numbers")
    step: float | None = Field(None, gt=0, description="size of one move within the range")

    @model_validator(mode="after")
    def _one_kind(self) -> KnobSpec:
        if (self.choices is None) == (self.range is None):
            raise ValueError("a knob needs exactly one of choices or range")
        if self.choices is not None and len(self.choices) < 2:
            raise ValueError("choices needs at least two values")
        if self.range is not None:
            if self.step is None:
                raise ValueError("a range knob needs a step")
            if self.range[0] >= self.range[1]:
                raise ValueError("range must be [low, high] with low < high")
        return self


class KnobsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    knobs: list[KnobSpec] = Field(default_factory=list, description="the knob space, inline")
    space: str | None = Field(
        None, description="file in the candidate tree holding `knobs: [...]` (read from the parent)"
    )
    max_changes: int = Field(2, ge=1, description="knobs changed per child (1..max_changes)")
    max_steps: int = Field(3, ge=1, description="steps a range knob moves at most")
    order: Literal["random", "round_robin"] = Field(
        "random",
        description="random: 1..max_changes knobs at random; round_robin: one knob per child, "
        "in turn per lineage (GEPA's component selector)",
    )

    @model_validator(mode="after")
    def _has_space(self) -> KnobsConfig:
        if not self.knobs and not self.space:
            raise ValueError("give the knob space inline (knobs) or as a file (space)")
        return self


def _round_trip() -> YAML:
    """YAML that keeps comments, key order, quotes and layout: a knob change is one line."""
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never re-wrap long lines
    return rt


def _load(path: Path) -> Any:
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    yaml_load(text)  # refuses aliases and duplicate keys before the round-trip parse
    return _round_trip().load(text)


def _dump(path: Path, data: Any) -> None:
    if path.suffix == ".json":
        path.write_text(json.dumps(data, indent=2) + "\n")
        return
    buf = io.StringIO()
    _round_trip().dump(data, buf)
    path.write_text(buf.getvalue())


def _plain(value: Any) -> Any:
    """A value read by the round-trip loader as a plain JSON value (for the mutation record)."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def _get(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def _set(data: Any, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _move(knob: KnobSpec, current: Any, rng: random.Random, max_steps: int) -> Any:
    if knob.choices is not None:
        options = [c for c in knob.choices if c != current]
        return rng.choice(options)
    assert knob.range is not None and knob.step is not None
    if not isinstance(current, int | float) or isinstance(current, bool):
        raise TypeError(f"{knob.file}:{knob.key} is {current!r}, not a number")
    lo, hi = knob.range
    integer = isinstance(current, int) and float(knob.step).is_integer()

    def fit(v: float) -> float:
        v = min(max(v, lo), hi)
        return round(v) if integer else round(v, 10)

    delta = rng.randint(1, max_steps) * knob.step * rng.choice((-1, 1))
    value = fit(current + delta)
    if value == current:  # at the edge of the range: move the other way
        value = fit(current - delta)
    if value == current:
        raise ValueError(f"{knob.file}:{knob.key} cannot move within {list(knob.range)}")
    return value


def _seed_yaml(start: RunStart, path: str) -> Any:
    """A YAML or JSON file of the seed, parsed (None: absent or unreadable)."""
    raw = start.seed_file(path)
    try:
        return yaml_load(raw.decode()) if raw is not None else None
    except (yaml.YAMLError, UnicodeDecodeError):
        return None


def _forced(knob: KnobSpec, start: RunStart) -> bool:
    """A knob whose every move is forced: a choice of two values, the seed's one of them."""
    if knob.choices is None or len(knob.choices) != 2 or knob.choices[0] == knob.choices[1]:
        return False
    try:
        current = _get(_seed_yaml(start, knob.file), knob.key)
    except KeyError:
        return False
    return current in knob.choices


def _show(value: Any) -> str:
    """Values as the YAML/JSON file spells them (true, not True)."""
    return value if isinstance(value, str) else json.dumps(value)


class Knobs(MutateOperator):
    """Perturbs 1..max_changes knobs of a declared space (no model, no network).

    The knob space (inline as `knobs:`, or a file named by `space:` holding `knobs:`) is a
    list of knobs, each `{file, key, choices}` or `{file, key, range: [low, high], step}`:
    `file` is a YAML or JSON file relative to the candidate root, `key` a dotted path in it.

        knobs:
          - {file: solver.yaml, key: branching, choices: [first, random, moms, jw, dlis]}
          - {file: solver.yaml, key: restarts.base, range: [10, 400], step: 10}

    A choice moves to another allowed value; a number moves by 1..max_steps steps within
    its range. YAML is rewritten round-trip, so a change is a one-line diff.
    With `order: round_robin` each child changes exactly one knob, the knobs taking turns
    per lineage as GEPA's round-robin component selector does (resume continues the turn).
    """

    name = "knobs"
    Config = KnobsConfig
    config: KnobsConfig

    def space(self, ctx: MutateContext) -> list[KnobSpec]:
        knobs = list(self.config.knobs)
        if self.config.space:
            raw = yaml_load(ctx.run.read_file(ctx.parent.id, self.config.space))
            try:
                knobs += [KnobSpec.model_validate(k) for k in (raw or {}).get("knobs", [])]
            except (ValidationError, AttributeError) as exc:
                raise ValueError(f"{self.config.space}: not a valid knob space: {exc}") from exc
        if not knobs:
            raise ValueError("the knob space is empty")
        # knobs outside the surface would only be refused by the guardrail: skip them, so
        # an ablation that narrows the surface spends its children on allowed changes
        allowed = [k for k in knobs if ctx.may_change(k.file)]
        if not allowed:
            raise ValueError("no knob of the space lies inside the recipe's surface")
        return allowed

    def draws(self, start: RunStart) -> bool:
        """Whether a child's change can depend on the seed: which knobs change (drawn,
        unless round-robin or a single knob) and how (a range moves by a drawn step; a
        choice of more than one other value is drawn). Yes when the space cannot be read
        from the seed, or is a file the run may change."""
        knobs = self._start_space(start)
        if not knobs or (self.config.order == "random" and len(knobs) > 1):
            return True
        return not all(_forced(k, start) for k in knobs)

    def _start_space(self, start: RunStart) -> list[KnobSpec] | None:
        """The knobs a child may change, as the seed has the space (None: unknown)."""
        knobs = list(self.config.knobs)
        if self.config.space:
            raw = _seed_yaml(start, self.config.space)
            if not isinstance(raw, dict) or start.may_change(self.config.space):
                return None
            try:
                knobs += [KnobSpec.model_validate(k) for k in raw.get("knobs") or []]
            except (ValidationError, TypeError):
                return None
        return [k for k in knobs if start.may_change(k.file)]

    def mutate(self, ctx: MutateContext) -> Mutation:
        knobs = self.space(ctx)
        if self.config.order == "round_robin":
            k = component_index(
                ctx.run, ctx.parent.id, ctx.candidate_id, ctx.generation, len(knobs)
            )
            chosen = [knobs[k]]
        else:
            n = ctx.rng.randint(1, min(self.config.max_changes, len(knobs)))
            chosen = ctx.rng.sample(knobs, n)
        files: dict[str, Any] = {}
        moves = []
        for knob in chosen:
            path = ctx.workdir / knob.file
            if knob.file not in files:
                if not path.is_file():
                    raise FileNotFoundError(f"knob file {knob.file} is not in the candidate")
                files[knob.file] = _load(path)
            data = files[knob.file]
            try:
                current = _get(data, knob.key)
            except KeyError:
                raise KeyError(f"{knob.file} has no key {knob.key}") from None
            new = _move(knob, current, ctx.rng, self.config.max_steps)
            _set(data, knob.key, new)
            moves.append(
                {"file": knob.file, "key": knob.key, "from": _plain(current), "to": _plain(new)}
            )
        for name, data in files.items():
            _dump(ctx.workdir / name, data)
        text = "; ".join(f"{m['key']}: {_show(m['from'])} -> {_show(m['to'])}" for m in moves)
        return Mutation(description=text, details={"moves": moves})
