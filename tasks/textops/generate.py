#!/usr/bin/env python3
"""Generate the textops task set: batches of short text problems scored by exact match.

``python3 tasks/textops/generate.py`` rewrites every ``textops-NNN`` folder
byte-identically. The items of the tasks the shipped split puts in train come from the
public RNG seed (CPython's Mersenne Twister); the items of its gate and sealed tasks are
**stored** (each such task's ``environment/items.jsonl``), drawn once from a secret seed
that appears nowhere (``--hidden-seed``, from ``os.urandom``, never written down), so no
code a candidate can read derives them. Without ``--hidden-seed`` the stored items are
read back and every other file is rewritten around them. Each task holds
``ITEMS`` problems of three kinds, interleaved so every task mixes them: reverse a
string, sort its letters, add two numbers. Difficulty varies with the length
(5-6 letters) and carries (3-digit operands). The agent sees only
``environment/items.jsonl``; the answers live in ``tests/expected.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import string
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

NUM_TASKS = 60
ITEMS = 8
RNG_SEED = 20261130
KINDS = ("reverse", "sort", "add")
#: the split of the shipped recipes (``tasks.split`` in recipes/textops-base.yaml; the
#: same rule as ``rsiframe.tasks.taskset.make_split``): its gate and sealed tasks hold stored items
SPLIT_SEED = 0
TRAIN_RATIO = 0.4
# Problem sizes of the stored items. The contamination audit counts an item only when its
# whole text occurs as a word/number in the training data, so a chance overlap needs the
# generator to draw that exact problem: 5-6 random letters (26^5 ~ 1.2e7 strings) and
# 3+3-digit additions (8.1e5 pairs) keep that rare for a few thousand training rows.
LETTERS = (5, 6)
DIGITS = (3, 3)

TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "rsiframe"
difficulty = "easy"
category = "text"
tags = ["textops", "reverse", "sort", "add", "exact-match"]

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120.0

[environment]
workdir = "/app"
"""

INSTRUCTION_MD = """\
# {task_id}

`/app/items.jsonl` holds {n} short text problems, one JSON object per line:
`{{"id", "kind", "prompt_text"}}`. For kind `reverse` write `prompt_text` backwards; for
`sort` write its letters in alphabetical order; for `add` (`A+B`) write the sum in
decimal without leading zeros. Write `/app/answers.jsonl` with one line
`{{"id": ..., "answer": ...}}` per problem. The reward is the fraction of answers that
match exactly.
"""

DOCKERFILE = """\
FROM python:3.11-slim
RUN pip install --no-cache-dir pyyaml
WORKDIR /app
COPY items.jsonl /app/items.jsonl
"""

# The verifier every task carries a copy of (Harbor tasks are self-contained);
# verifier/ is the one place it is edited.
VERIFIER = HERE / "verifier"


def solve(kind: str, problem: str) -> str:
    if kind == "reverse":
        return problem[::-1]
    if kind == "sort":
        return "".join(sorted(problem))
    a, b = problem.split("+")
    return str(int(a) + int(b))


def draw_problem(rng: random.Random, kind: str) -> str:
    if kind == "add":
        digits = rng.randint(*DIGITS)  # both operands have this many digits
        a, b = (rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(2))
        return f"{a}+{b}"
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(*LETTERS)))


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)


def write_task(root: Path, task_id: str, problems: list[tuple[str, str]]) -> None:
    task = root / task_id
    if task.exists():
        shutil.rmtree(task)
    items = [
        {"id": f"{task_id}-{i}", "kind": kind, "prompt_text": text}
        for i, (kind, text) in enumerate(problems, 1)
    ]
    expected = [{"id": it["id"], "answer": solve(it["kind"], it["prompt_text"])} for it in items]
    write(task / "task.toml", TASK_TOML)
    write(task / "instruction.md", INSTRUCTION_MD.format(task_id=task_id, n=len(items)))
    write(task / "environment" / "Dockerfile", DOCKERFILE)
    write(task / "environment" / "items.jsonl", jsonl(items))
    write(task / "tests" / "test.sh", (VERIFIER / "test.sh").read_text(), executable=True)
    write(task / "tests" / "check.py", (VERIFIER / "check.py").read_text(), executable=True)
    write(task / "tests" / "expected.jsonl", jsonl(expected))


def hidden_ids(ids: list[str]) -> set[str]:
    """The gate and sealed tasks of the shipped split (everything but its train share)."""
    order = sorted(ids)
    random.Random(SPLIT_SEED).shuffle(order)
    return set(order[round(len(order) * TRAIN_RATIO) :])


def stored_problems(task: Path) -> list[tuple[str, str]]:
    """A hidden task's stored items, read back from its ``environment/items.jsonl``."""
    path = task / "environment" / "items.jsonl"
    if not path.is_file():
        raise SystemExit(
            f"{path} is missing: restore it from git, or draw new hidden items with "
            "--hidden-seed $(python3 -c 'import os; print(os.urandom(16).hex())')"
        )
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["kind"], r["prompt_text"]) for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where the task folders go")
    parser.add_argument("--tasks", type=int, default=NUM_TASKS)
    parser.add_argument("--items", type=int, default=ITEMS, help="problems per task")
    parser.add_argument("--seed", type=int, default=RNG_SEED, help="seed of the train items")
    parser.add_argument(
        "--hidden-seed",
        help="hex secret to draw new gate/sealed items from (never write it down); "
        "without it the stored items are kept",
    )
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    secret = random.Random(bytes.fromhex(args.hidden_seed)) if args.hidden_seed else None
    args.out.mkdir(parents=True, exist_ok=True)
    ids = [f"textops-{i:03d}" for i in range(1, args.tasks + 1)]
    hidden = hidden_ids(ids)
    stored = {t: stored_problems(HERE / t) for t in sorted(hidden)} if secret is None else {}
    for path in args.out.iterdir():
        if re.fullmatch(r"textops-\d{3}", path.name) and path.name not in ids:
            shutil.rmtree(path)
    seen: set[str] = set()
    tasks: dict[str, list[tuple[str, str]]] = {}
    slot = 0
    for task_id in ids:  # the public stream, drawn for every task as always
        problems = []
        for _ in range(args.items):
            kind = KINDS[slot % len(KINDS)]
            slot += 1
            while (text := draw_problem(rng, kind)) in seen:  # no item twice in the set
                pass
            seen.add(text)
            problems.append((kind, text))
        tasks[task_id] = problems
    seen |= {text for problems in stored.values() for _, text in problems}
    for task_id in sorted(hidden):  # ... but gate and sealed tasks hold other items
        if secret is None:
            tasks[task_id] = stored[task_id]
            continue
        problems = []
        for kind, _ in tasks[task_id]:
            while (text := draw_problem(secret, kind)) in seen:
                pass
            seen.add(text)
            problems.append((kind, text))
        tasks[task_id] = problems
    for task_id, problems in tasks.items():
        write_task(args.out, task_id, problems)
    how = "new hidden items" if secret else "stored hidden items"
    print(
        f"wrote {args.tasks} tasks textops-001..textops-{args.tasks:03d} "
        f"({args.items} items each, train seed {args.seed}, {len(hidden)} gate/sealed tasks "
        f"with {how}) to {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
