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
