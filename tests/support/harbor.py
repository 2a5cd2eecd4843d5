"""Recipes and tasks for the Harbor engine's tests (fast and e2e)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rsiframe.tasks.taskset import TaskSet
from tests.support.paths import SAT3

SOLVER = 'python3 "$RSI_CANDIDATE/solver.py"'


def harbor_recipe(tmp_path: Path, tasks: Path, **config: object) -> Path:
    data = {
        "name": "h",
        "seed": str(SAT3 / "seed"),
        "tasks": {
            "path": str(tasks),
            "split": {"ratios": {"train": 0.4, "gate": 0.4, "sealed": 0.2}},
        },
        "surface": {"include": ["solver.yaml"]},
        "evaluator": {"engine": "harbor", "config": {"agent": SOLVER, **config}},
        "slots": {
            "select": {"operator": "best"},
            "rollout": {"operator": "local"},
            "mutate": {"operator": "knobs", "config": {"space": "knobs.yaml"}},
            "gate": {"operator": "improves_parent"},
            "record": {"operator": "notes"},
        },
        "budget": {"max_generations": 0},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


SECRET = "s3cret-42"


#: reward 1 iff /app/answer.txt holds the hidden expected value; says what it sees
TEST_SH = """#!/bin/bash
echo 0 > /logs/verifier/reward.txt
python3 -c 'print("python ran")'
if [ "$(cat /app/answer.txt 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; then
    echo 1 > /logs/verifier/reward.txt
fi
echo "links=$(find /app -type l | sort | tr '\\n' ' ')"
echo "hard=$(stat -c %h /app/hard.txt) run=$(stat -c %a /app/run.sh) fifo=$(ls /app/fifo 2>&1)"
echo "planted=$(find /tmp /root /home /srv -name usercustomize.py -o -name answer 2>/dev/null)."
"""


def secret_task(tmp_path: Path) -> TaskSet:
    t = tmp_path / "tasks" / "secret"
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "task.toml").write_text(
        'version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        '[environment]\nworkdir = "/app"\n'
    )
    (t / "instruction.md").write_text("Write the secret to /app/answer.txt.\n")
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (t / "tests" / "expected.txt").write_text(SECRET + "\n")
    (t / "tests" / "test.sh").write_text(TEST_SH)
    return TaskSet.load(tmp_path / "tasks")
