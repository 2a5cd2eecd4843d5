"""The mini project: a tiny, fast task set with a seed, and whole runs of it.

Task ``t<i>`` is solved when the candidate's ``level`` knob is >= i; the seed has level 1,
so knobs can climb, and every evaluation is a few shell commands.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import cli, events, status_json

# The mini task set: task t<i> is solved when the candidate's `level` knob is >= i.
# The seed has level 1, so knobs can climb; every evaluation is a few shell commands.
TEST_SH = """#!/bin/bash
need=$(cat "${RSI_TESTS:-/tests}/need.txt")
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null || echo -1)
if [ "$got" -ge "$need" ] 2>/dev/null; then r=1; else r=0; fi
echo "need $need got $got reward $r"
echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"
"""


AGENT = """import os, yaml
here = os.path.dirname(os.path.abspath(__file__))
cfg = yaml.safe_load(open(os.path.join(here, "config.yaml")))
print("level", cfg["level"], "style", cfg["style"])
open("answer.txt", "w").write(str(cfg["level"]))
"""


@dataclass
class Mini:
    root: Path
    recipe: Path
    tasks: Path
    seed: Path

    def run_dir(self, name: str = "run") -> Path:
        return self.root / name


def write_tasks(root: Path, n: int) -> None:
    for i in range(1, n + 1):
        t = root / f"t{i}"
        (t / "environment").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "task.toml").write_text(
            'version = "1.0"\n[agent]\ntimeout_sec = 20\n[verifier]\ntimeout_sec = 20\n'
        )
        (t / "instruction.md").write_text("Write your level to /app/answer.txt.\n")
        (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (t / "tests" / "need.txt").write_text(f"{i}\n")
        (t / "tests" / "test.sh").write_text(TEST_SH)


def recipe_text(
    *, generations: int = 2, children: int = 2, sandbox: str = "auto", extra: str = ""
) -> str:
    return (
        textwrap.dedent(f"""\
        name: mini
        seed: seed
        tasks:
          path: tasks
          split:
            train: [t1, t3, t5, t7]
            gate: [t2, t4, t6, t8]
            sealed: [t9, t10]
        surface:
          include: [config.yaml]
        evaluator:
          engine: local
          config:
            agent: python3 "$RSI_CANDIDATE/agent.py"
            sandbox: {sandbox}
            concurrency: 2
        slots:
          select: {{operator: best}}
          rollout: {{operator: local}}
          analyze: {{operator: failures}}
          mutate:
            operator: knobs
            config:
              max_changes: 1
              knobs:
                - {{file: config.yaml, key: level, range: [0, 9], step: 1}}
                - {{file: config.yaml, key: style, choices: [plain, fancy]}}
          novelty: {{operator: tree_dedup}}
          gate: {{operator: improves_parent}}
          record: {{operator: notes}}
          reflect: {{operator: lessons}}
        budget:
          max_generations: {generations}
        children_per_generation: {children}
        random_seed: 7
        """)
        + extra
        + in_flight(extra)
    )


def in_flight(extra: str = "") -> str:
    """``RSIFRAME_TEST_CANDIDATES=4 make test``: every mini recipe that does not set its own
    ``concurrency`` keeps that many candidates in flight (generational mode, so the same
    candidates, scores and champion as K=1; only the order of event lines may differ)."""
    k = os.environ.get("RSIFRAME_TEST_CANDIDATES")
    if not k or "concurrency:" in extra:
        return ""
    return f"\nconcurrency: {{candidates: {int(k)}}}\n"


def make_mini(root: Path, *, n_tasks: int = 10, **recipe_kw: object) -> Mini:
    root.mkdir(parents=True, exist_ok=True)
    write_tasks(root / "tasks", n_tasks)
    seed = root / "seed"
    seed.mkdir()
    (seed / "agent.py").write_text(AGENT)
    (seed / "config.yaml").write_text("level: 1\nstyle: plain\n")
    text = recipe_text(**recipe_kw)  # type: ignore[arg-type]
    recipe = root / "recipe.yaml"
    recipe.write_text(text)
    return Mini(root=root, recipe=recipe, tasks=root / "tasks", seed=seed)


def run_mini(mini: Mini, *extra: str, name: str = "run") -> Path:
    out = mini.run_dir(name)
    res = cli("run", mini.recipe, "--out", out, "--quiet", *extra)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0] == str(out.resolve())
    return out


def run_named(mini: Mini, name: str, *sets: str) -> Path:
    out = mini.run_dir(name)
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", mini.recipe, "--out", out, "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    return out


def outcome(out: Path) -> dict:
    """What must not depend on K: every candidate's parent, tree, state and scores."""
    st = status_json(out)
    rows = {c["id"]: (c["parent"], c["state"], c["scores"]) for c in st["candidates"]}
    trees = {
        e["data"]["id"]: e["data"]["tree"] for e in events(out) if e["type"] == "candidate_mutated"
    }
    return {"rows": rows, "trees": trees, "champion": st["champion"]}
