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
the assignment satisfies every clause and K is within the budget.
"""

DOCKERFILE = """\
FROM python:3.11-slim
RUN pip install --no-cache-dir pyyaml
WORKDIR /app
COPY instance.cnf /app/instance.cnf
"""

TEST_SH = """\
#!/usr/bin/env bash
# sat3 verifier entry point: check.py writes 1 or 0 to $RSI_LOGS/verifier/reward.txt.
TESTS="${RSI_TESTS:-/tests}"
LOGS="${RSI_LOGS:-/logs}"
mkdir -p "$LOGS/verifier"
python3 "$TESTS/check.py" || echo "check.py exited with status $?"
if [ ! -s "$LOGS/verifier/reward.txt" ]; then
    printf 0 > "$LOGS/verifier/reward.txt"
fi
exit 0
"""

CHECK_PY = '''\
#!/usr/bin/env python3
"""sat3 verifier (python3 stdlib only).

Reward 1 iff ``$RSI_APP/solution.txt`` says ``s SATISFIABLE``, its ``v`` lines assign
every variable consistently, the assignment satisfies every clause of the verifier's
own ``instance.cnf`` (next to this file, never the agent's copy in /app), and its
``c decisions K`` line reports K <= the ``c max_decisions N`` budget. Anything else,
including a missing or garbled solution, gives 0. The reward is always written.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_SOLUTION_BYTES = 1 << 20


def read_formula(path: Path) -> tuple[int, list[list[int]], int]:
    """Return (number of variables, clauses, max_decisions) of a DIMACS file."""
    num_vars = 0
    max_decisions = -1
    clauses: list[list[int]] = []
    current: list[int] = []
    for line in path.read_text().splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "c":
            if len(tokens) >= 3 and tokens[1] == "max_decisions":
                max_decisions = int(tokens[2])
            continue
        if tokens[0] == "p":
            num_vars = int(tokens[2])
            continue
        for token in tokens:
            lit = int(token)
            if lit == 0:
                clauses.append(current)
                current = []
            else:
                current.append(lit)
    if current:
        clauses.append(current)
    if max_decisions < 0:
        raise ValueError("verifier instance has no max_decisions line")
    return num_vars, clauses, max_decisions


def verdict(solution: Path, formula: Path) -> tuple[int, str]:
    """Return (reward, reason)."""
    num_vars, clauses, max_decisions = read_formula(formula)
    if not solution.is_file():
        return 0, f"no solution file at {solution}"
    if solution.stat().st_size > MAX_SOLUTION_BYTES:
        return 0, "solution file is too large"
    status = None
    decisions = None
    literals: list[int] = []
    terminated = False
    for number, line in enumerate(solution.read_text(errors="replace").splitlines(), 1):
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "s":
            status = " ".join(tokens[1:])
        elif tokens[0] == "c" and len(tokens) >= 3 and tokens[1] == "decisions":
            try:
                decisions = int(tokens[2])
            except ValueError:
                return 0, f"line {number}: decision count is not an integer"
        elif tokens[0] == "v":
            for token in tokens[1:]:
                try:
                    lit = int(token)
                except ValueError:
                    return 0, f"line {number}: {token!r} is not a literal"
                if terminated:
                    return 0, f"line {number}: literals after the terminating 0"
                if lit == 0:
                    terminated = True
                elif abs(lit) > num_vars:
                    return 0, f"line {number}: variable {abs(lit)} out of range 1..{num_vars}"
                else:
                    literals.append(lit)
    if status != "SATISFIABLE":
        return 0, f"status is {status or 'missing'}, not SATISFIABLE"
    if not terminated:
        return 0, "assignment is not terminated by 0"
    if decisions is None:
        return 0, "no 'c decisions K' line"
    if decisions < 0 or decisions > max_decisions:
        return 0, f"reported {decisions} decisions, budget is {max_decisions}"
    chosen = set(literals)
    clash = sorted(abs(lit) for lit in chosen if lit > 0 and -lit in chosen)
    if clash:
        return 0, f"variable {clash[0]} is assigned both true and false"
    for index, clause in enumerate(clauses, 1):
        if not any(lit in chosen for lit in clause):
            return 0, f"clause {index} ({' '.join(map(str, clause))}) is not satisfied"
    return 1, f"all {len(clauses)} clauses satisfied with {decisions}/{max_decisions} decisions"


def main() -> None:
    solution = Path(os.environ.get("RSI_APP", "/app")) / "solution.txt"
    formula = Path(__file__).resolve().parent / "instance.cnf"
    reward_dir = Path(os.environ.get("RSI_LOGS", "/logs")) / "verifier"
    try:
        reward, reason = verdict(solution, formula)
    except Exception as exc:  # never crash without writing a reward
        reward, reason = 0, f"verifier error: {exc!r}"
    reward_dir.mkdir(parents=True, exist_ok=True)
    (reward_dir / "reward.txt").write_text(str(reward))
    print(f"reward {reward}: {reason}")


if __name__ == "__main__":
    main()
'''


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
