#!/usr/bin/env python3
"""Generate the sat3 task set: satisfiable uniform random 3-SAT near the phase transition.

``python3 tasks/sat3/generate.py`` rewrites every task folder byte-identically
(fixed RNG seed, CPython's Mersenne Twister). Each formula is drawn uniformly
(3 distinct variables per clause, random signs) and kept only if an independent,
complete DPLL solver below finds a model (SATLIB "uf" style filtering).
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent

NUM_VARS = 75
RATIO = 4.26
NUM_TASKS = 60
MAX_DECISIONS = 60
RNG_SEED = 20240603

Clause = tuple[int, ...]

TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "rsiframe"
difficulty = "medium"
category = "sat"
tags = ["3-sat", "dpll", "uf{n}"]

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 60.0

[environment]
workdir = "/app"
"""

INSTRUCTION_MD = """\
# {task_id}

Find a satisfying assignment for the satisfiable 3-SAT formula in `/app/instance.cnf`
(DIMACS CNF, {n} variables, {m} clauses) using at most {max_decisions} branching decisions,
as stated by its `c max_decisions {max_decisions}` line; unit propagations and pure-literal
assignments are not decisions. Write `/app/solution.txt` in DIMACS solution format: a line
`s SATISFIABLE`, the assignment as `v ...` lines ending with `0`, and a line `c decisions K`
reporting how many decisions you made (or `s UNKNOWN` if you gave up). The reward is 1 only if
the assignment satisfies every clause and the verifier's own run of the task's DPLL engine with
your `solver.yaml` also finds a model within the budget: the verifier counts the decisions
itself, and the reported K decides nothing.
"""

DOCKERFILE = """\
FROM python:3.11-slim
RUN pip install --no-cache-dir pyyaml
WORKDIR /app
COPY instance.cnf /app/instance.cnf
"""

# The verifier every task carries a copy of (Harbor tasks are self-contained);
# verifier/ is the one place it is edited.
VERIFIER = Path(__file__).resolve().parent / "verifier"
TEST_SH = (VERIFIER / "test.sh").read_text()
CHECK_PY = (VERIFIER / "check.py").read_text()
# the engine the verifier runs to count decisions itself: a frozen copy of the shipped
# seed solver (the verifier never runs the candidate's code, only reads its solver.yaml)
ENGINE_PY = (Path(__file__).resolve().parent / "seed" / "solver.py").read_text()


def random_formula(rng: random.Random, num_vars: int, num_clauses: int) -> list[Clause]:
    """Uniform random 3-SAT: 3 distinct variables per clause, each negated with p=1/2."""
    formula = []
    for _ in range(num_clauses):
        variables = rng.sample(range(1, num_vars + 1), 3)
        formula.append(tuple(v if rng.random() < 0.5 else -v for v in variables))
    return formula


def _simplify(clauses: list[Clause], lit: int) -> list[Clause] | None:
    """Clauses under ``lit`` = true, or None if one becomes empty."""
    out = []
    for clause in clauses:
        if lit in clause:
            continue
        if -lit in clause:
            clause = tuple(x for x in clause if x != -lit)
            if not clause:
                return None
        out.append(clause)
    return out


def _search(clauses: list[Clause], assignment: list[int]) -> list[int] | None:
    """Complete DPLL: unit propagation, MOMS branching, no decision cap."""
    while True:
        unit = next((c[0] for c in clauses if len(c) == 1), None)
        if unit is None:
            break
        assignment = [*assignment, unit]
        simplified = _simplify(clauses, unit)
        if simplified is None:
            return None
        clauses = simplified
    if not clauses:
        return assignment
    shortest = min(len(c) for c in clauses)
    counts = Counter(abs(x) for c in clauses if len(c) == shortest for x in c)
    var = max(counts, key=lambda v: (counts[v], -v))
    for lit in (var, -var):
        simplified = _simplify(clauses, lit)
        if simplified is not None:
            model = _search(simplified, [*assignment, lit])
            if model is not None:
                return model
    return None


def find_model(num_vars: int, clauses: list[Clause]) -> list[int] | None:
    """A full satisfying assignment (verified), or None if the formula is unsatisfiable."""
    partial = _search(clauses, [])
    if partial is None:
        return None
    chosen = set(partial)
    model = [v if -v not in chosen else -v for v in range(1, num_vars + 1)]
    truth = set(model)
    if not all(any(x in truth for x in c) for c in clauses):
        raise AssertionError("strong solver returned a non-model")
    return model


def cnf_text(task_id: str, num_vars: int, clauses: list[Clause], max_decisions: int) -> str:
    ratio = len(clauses) / num_vars
    lines = [
        f"c {task_id}: uniform random 3-SAT, {num_vars} variables, {len(clauses)} clauses "
        f"(ratio {ratio:.2f}), satisfiable",
        "c generated by tasks/sat3/generate.py (rsiframe)",
        f"c max_decisions {max_decisions}",
        f"p cnf {num_vars} {len(clauses)}",
    ]
    lines.extend(" ".join(map(str, c)) + " 0" for c in clauses)
    return "\n".join(lines) + "\n"


def write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755 if executable else 0o644)


def write_task(root: Path, task_id: str, num_vars: int, clauses: list[Clause], budget: int) -> None:
    task = root / task_id
    if task.exists():
        shutil.rmtree(task)
    cnf = cnf_text(task_id, num_vars, clauses, budget)
    fields = {"task_id": task_id, "n": num_vars, "m": len(clauses), "max_decisions": budget}
    write(task / "task.toml", TASK_TOML.format(**fields))
    write(task / "instruction.md", INSTRUCTION_MD.format(**fields))
    write(task / "environment" / "Dockerfile", DOCKERFILE)
    write(task / "environment" / "instance.cnf", cnf)
    write(task / "tests" / "test.sh", TEST_SH, executable=True)
    write(task / "tests" / "check.py", CHECK_PY, executable=True)
    write(task / "tests" / "dpll.py", ENGINE_PY)
    write(task / "tests" / "instance.cnf", cnf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where the task folders go")
    parser.add_argument("--vars", type=int, default=NUM_VARS)
    parser.add_argument("--ratio", type=float, default=RATIO)
    parser.add_argument("--tasks", type=int, default=NUM_TASKS)
    parser.add_argument("--max-decisions", type=int, default=MAX_DECISIONS)
    parser.add_argument("--seed", type=int, default=RNG_SEED)
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    num_clauses = round(args.vars * args.ratio)
    prefix = f"uf{args.vars}"
    args.out.mkdir(parents=True, exist_ok=True)
    stale = [p for p in args.out.iterdir() if re.fullmatch(r"uf\d+-\d{3}", p.name) and p.is_dir()]
    wanted = {f"{prefix}-{i:03d}" for i in range(1, args.tasks + 1)}
    for path in stale:
        if path.name not in wanted and (path / "task.toml").is_file():
            shutil.rmtree(path)
    drawn = 0
    for index in range(1, args.tasks + 1):
        while True:
            drawn += 1
            clauses = random_formula(rng, args.vars, num_clauses)
            if find_model(args.vars, clauses) is not None:
                break
        write_task(args.out, f"{prefix}-{index:03d}", args.vars, clauses, args.max_decisions)
    print(
        f"wrote {args.tasks} satisfiable tasks {prefix}-001..{prefix}-{args.tasks:03d} "
        f"({args.vars} vars, {num_clauses} clauses, max_decisions {args.max_decisions}) "
        f"to {args.out}; drew {drawn} formulas, {drawn - args.tasks} unsatisfiable"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
