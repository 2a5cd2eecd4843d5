"""Contamination audit: does what a candidate trains on contain gate or sealed items?

The audit reads everything the build could hand to training (:func:`build_texts`):
every string of every record of the dataset, at any depth (keys too: a ``meta`` field
is read like ``prompt``), every other file the data step wrote, and every file of the
train step's own inputs (``trainer/``), as text and, where a file is JSON or JSON lines,
as the strings inside it (so ``\\u`` escapes do not hide an item). The train step then
gets only the dataset's canonical ``{prompt, completion}`` rows (:mod:`rsiframe.dth.build`),
a subset of what was read here.

Character n-gram overlap (default n = 13) between that text (whitespace collapsed) and
the text of each protected item (``prompt_text`` of ``environment/items.jsonl``, or the
whole ``environment/`` text for tasks without items). An item shorter than n counts when
it occurs whole (not inside a longer word or number). Both sides are also compared
folded, to undo encodings a trainer could invert cheaply (``k_u_g``, ``K-U-G``, ``k u g``
for ``kug``): :func:`fold` keeps only letters and digits, case folded, for the n-grams;
an item shorter than n once folded counts when it occurs whole spelt out
(:func:`spelt`: its letters and digits in order, any case, at most
:data:`MAX_GAP` other characters between two of them). What no view sees (any other
reversible encoding) is listed in ``docs/security.md``. The recipe picks the policy:
``reject`` ends the candidate, ``flag`` records the overlap and lets it go on. Sealed
items are only ever counted: their text and ids never leave this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.recipe.evaluator import ContaminationConfig
from rsiframe.tasks.taskset import Task

_SPACE = re.compile(r"\s+")
#: the most characters (separators, spaces) between two characters of a spelt-out item
MAX_GAP = 3


@dataclass(frozen=True)
class Item:
    split: str
    task: str
    id: str
    text: str


@dataclass
class AuditResult:
    n: int
    policy: str
    items: dict[str, int]  # split -> items checked
    hits: dict[str, list[Item]] = field(default_factory=dict)
    matches: dict[tuple[str, str], str] = field(default_factory=dict)  # (task, id) -> n-gram

    @property
    def contaminated(self) -> bool:
        return any(self.hits.values())

    def summary(self, max_examples: int = 5) -> dict[str, Any]:
        """Counts per split; gate items named with the matching text; sealed: counts only."""
        gate = self.hits.get("gate", [])
        return {
            "n": self.n,
            "policy": self.policy,
            "contaminated": self.contaminated,
            "checked": dict(self.items),
            "overlapping": {s: len(self.hits.get(s, [])) for s in self.items},
            "gate_examples": [
                {"task": it.task, "item": it.id, "match": self.matches[(it.task, it.id)]}
                for it in gate[:max_examples]
            ],
        }

    def reason(self) -> str:
        parts = [f"{len(v)} {s} item(s)" for s, v in self.hits.items() if v]
        named = ", ".join(f"{it.task}#{it.id}" for it in self.hits.get("gate", [])[:3])
        return f"training data overlaps {' and '.join(parts)} (character {self.n}-grams)" + (
            f"; gate: {named}" if named else ""
        )


def normalize(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def fold(text: str) -> str:
    """Only the letters and digits, case folded: no separator or space splits an item."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def spelt(folded: str) -> re.Pattern[str]:
    """A short (folded) item spelt out whole: its characters in order, in any case, with at
    most :data:`MAX_GAP` other characters (never a letter, digit or line break) between
    two of them, not inside a longer word or number."""
    gap = f"[^A-Za-z0-9\\n]{{0,{MAX_GAP}}}"
    body = gap.join(re.escape(ch) for ch in folded)
    return re.compile(r"(?<![A-Za-z0-9])" + body + r"(?![A-Za-z0-9])", re.IGNORECASE)


def _item_text(row: dict[str, Any]) -> str:
    for key in ("prompt_text", "prompt", "input", "text"):
        value = row.get(key)
        if isinstance(value, str):
            return value
    return json.dumps({k: v for k, v in row.items() if k not in ("id", "kind")}, sort_keys=True)


def task_items(split: str, task: Task) -> list[Item]:
    """The protected text of one task: its items, or its whole environment as one item."""
    path = task.path / "environment" / "items.jsonl"
    out: list[Item] = []
    if path.is_file():
        for n, line in enumerate(path.read_text().splitlines()):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = {"text": line}
            if not isinstance(row, dict):
                row = {"text": str(row)}
            out.append(Item(split, task.id, str(row.get("id", n)), normalize(_item_text(row))))
        return out
    env = task.path / "environment"
    texts = [
        p.read_text(errors="replace")
        for p in sorted(env.rglob("*"))
        if env.is_dir() and p.is_file() and p.name != "Dockerfile"
    ]
    return [Item(split, task.id, "environment", normalize("\n".join(texts)))] if texts else []


def protected_items(tasks: dict[str, list[Task]]) -> list[Item]:
    return [it for split, ts in tasks.items() for t in ts for it in task_items(split, t)]


def strings_in(value: Any) -> Iterable[str]:
    """Every string inside a JSON value, keys included, at any depth, in document order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)
    elif value is not None:
        yield str(value)


def training_texts(train_jsonl: Path) -> Iterable[str]:
    """One text per record: every string in it, joined (a line that is not JSON as is)."""
    for line in train_jsonl.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            yield normalize(line)
            continue
        yield normalize(" ".join(strings_in(row)))


def file_texts(root: Path, skip: Iterable[str] = ()) -> Iterable[str]:
    """Every regular file under ``root`` (not following links) as text, and the strings
    inside it where it is JSON or JSON lines."""
    skipped = set(skip)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel in skipped or path.is_symlink() or not path.is_file():
            continue
        text = path.read_bytes().decode(errors="replace")
        yield normalize(text)
        try:
            yield normalize(" ".join(strings_in(json.loads(text))))
            continue
        except ValueError:
            pass
        for line in text.splitlines():
            try:
                yield normalize(" ".join(strings_in(json.loads(line))))
            except ValueError:
                continue


def build_texts(dataset: Path, train_inputs: Iterable[Path]) -> Iterable[str]:
    """What the train step could be handed: the dataset (every string of every record of
    ``train.jsonl``, every other file) and every file of its own inputs."""
    yield from training_texts(dataset / "train.jsonl")
    yield from file_texts(dataset, skip=["train.jsonl"])
    for root in train_inputs:
        yield from file_texts(root)


def _scan(
    corpus: list[str], items: list[tuple[Item, str]], n: int, match: Callable[[str], Any]
) -> dict[tuple[str, str, str], str]:
    """Items (each with its text in this view) found in ``corpus`` (in the same view): by
    n-gram, or, shorter than n, by the pattern ``match`` makes of the item's text."""
    grams: dict[str, list[Item]] = {}
    short: list[tuple[Item, str]] = []
    for it, text in items:
        if len(text) < n:
            if text:
                short.append((it, text))
            continue
        for i in range(len(text) - n + 1):
            grams.setdefault(text[i : i + n], []).append(it)
    found: dict[tuple[str, str, str], str] = {}
    for text in corpus:
        for i in range(len(text) - n + 1):
            for it in grams.get(text[i : i + n], ()):
                found.setdefault((it.split, it.task, it.id), text[i : i + n])
    joined = "\n".join(corpus) if short else ""
    for it, text in short:
        if (m := match(text).search(joined)) is not None:
            found.setdefault((it.split, it.task, it.id), m.group(0))
    return found


def _whole(text: str) -> re.Pattern[str]:
    """A short item as it is, whole: not part of a longer word or number."""
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(text) + r"(?![A-Za-z0-9])")


def audit(texts: Iterable[str], items: list[Item], config: ContaminationConfig) -> AuditResult:
    """Scan the training text as it is and folded; look each window up among the items'
    n-grams, and each short item up whole (spelt out, in the folded view)."""
    n = config.n
    result = AuditResult(n=n, policy=config.policy, items={})
    for it in items:
        result.items[it.split] = result.items.get(it.split, 0) + 1
        result.hits.setdefault(it.split, [])
    corpus = list(texts)
    found = _scan(corpus, [(it, it.text) for it in items], n, _whole)
    folded = [(it, fold(it.text)) for it in items]
    more = _scan([fold(t) for t in corpus], [x for x in folded if len(x[1]) >= n], n, spelt)
    more |= _scan(corpus, [x for x in folded if len(x[1]) < n], n, spelt)
    found = {**more, **found}  # where the text as it is matched, that match is named
    for it in items:
        match = found.get((it.split, it.task, it.id))
        if match is not None:
            result.hits[it.split].append(it)
            if it.split != "sealed":
                result.matches[(it.task, it.id)] = match
    return result
