"""What a run warns about as it begins: a config that is valid but likely not what was meant.

Each operator checks its own config against the run (:meth:`rsiframe.api.Operator.
start_warnings`, e.g. a validate minibatch not smaller than the train split). Then, when no
operator can draw from its random generator with its config (:meth:`~rsiframe.api.Operator.
draws`) and no framework step draws either (a merge ``rate`` strictly between 0 and 1, a
stage on a subset of its split), ``random_seed`` reaches no choice: runs that differ only by
seed make the same choices. What the recipe cannot tell (a model's sampling, a candidate's
own randomness, steady mode's timing) is claimed neither way: an operator that may draw
(every model operator, a candidate's own, one without a ``draws`` of its own) stops the
warning.

The lines go to stderr as the run starts and into ``run_started`` (``status`` shows them).
"""

from __future__ import annotations

from pathlib import Path

from rsiframe.api import Operator, RunStart
from rsiframe.recipe.schema import Recipe
from rsiframe.surface import Surface

#: the largest seed file an operator's start check reads
MAX_SEED_FILE = 1 << 20


def start_warnings(
    ops: dict[str, Operator], recipe: Recipe, split: dict[str, list[str]]
) -> list[str]:
    """The run's start warnings, one line each."""
    surface = Surface(tuple(recipe.surface.include), tuple(recipe.surface.exclude))
    start = RunStart(
        splits={name: len(ids) for name, ids in split.items()},
        seed_file=lambda path: seed_file(recipe.seed, path),
        may_change=surface.allows,
    )
    lines = [
        f"slots.{slot} ({op.name or type(op).__name__}): {line}"
        for slot, op in ops.items()
        for line in op.start_warnings(start)
    ]
    if ops and not framework_draws(recipe, split) and not any(o.draws(start) for o in ops.values()):
        named = ", ".join(f"{slot}={op.name or type(op).__name__}" for slot, op in ops.items())
        lines.append(
            f"random_seed reaches no choice: no operator draws from its random generator with "
            f"this config ({named}) and no merge rate or stage subset is drawn, so seeds cannot "
            "make repeats differ (only a nondeterministic evaluation or steady mode's timing can)"
        )
    return lines


def framework_draws(recipe: Recipe, split: dict[str, list[str]]) -> bool:
    """Whether the framework itself draws with the run's seed: a proposal's merge-or-mutate
    coin, a stage's fixed subset of its split."""
    merge = recipe.slots.get("merge")
    rate = getattr(merge, "rate", 0.0)
    if merge is not None and 0.0 < rate < 1.0:
        return True
    return any(
        s.tasks is not None and s.tasks < len(split.get(s.split, []))
        for s in recipe.evaluator.stages
    )


def seed_file(seed: Path, path: str) -> bytes | None:
    """A regular file of the seed folder, at most :data:`MAX_SEED_FILE` bytes (None: no such
    file, or a path that leaves the seed)."""
    root = Path(seed).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        return None
    if target.stat().st_size > MAX_SEED_FILE:
        return None
    return target.read_bytes()
