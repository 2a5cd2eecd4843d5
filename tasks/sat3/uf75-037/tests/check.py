#!/usr/bin/env python3
"""sat3 verifier (python3 and PyYAML only).

The reward never rests on a number the candidate reports about itself: the verifier
counts the decisions itself. Reward 1 iff

1. ``$RSI_APP/solution.txt`` (a regular file, opened without following links) says
   ``s SATISFIABLE`` and its ``v`` lines assign every variable consistently and satisfy
   every clause of the verifier's own ``instance.cnf`` (next to this file, never the
   agent's copy in /app); and
2. the task's own DPLL engine (``dpll.py`` next to this file: a frozen copy of the shipped
   seed solver, never the candidate's code), run here with the candidate's knobs
   (``$RSI_CANDIDATE/solver.yaml``, read-only, parsed as data) on that formula, finds a
   model within the ``c max_decisions N`` budget.

The solution's ``c decisions K`` line is shown in the reason but decides nothing. A
solver that searches without a budget and reports a small count therefore scores only
where its knobs really solve the formula within the budget. Anything else, including a
missing, linked or garbled file, gives 0. The reward is always written.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MAX_SOLUTION_BYTES = 1 << 20
MAX_KNOBS_BYTES = 64 << 10


class Refused(Exception):
    """The input cannot be scored; the message is the reason."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes with one
    link, opened without following a symlink (or blocking on a FIFO)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Refused(f"no file at {path}") from None
    except OSError as exc:
        raise Refused(f"{path} cannot be opened as a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path} is not a regular file")
        if info.st_nlink != 1:
            raise Refused(f"{path} has {info.st_nlink} hard links")
        chunks, size = [], 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Refused(f"{path} is over {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_engine() -> Any:
    """The task's own DPLL engine (``dpll.py`` beside this file)."""
    sys.dont_write_bytecode = True  # the task folder stays exactly as locked
    sys.path.insert(0, str(HERE))
    try:
        import dpll
    finally:
        sys.path.remove(str(HERE))
    return dpll


def read_knobs(candidate: str | None, engine: Any) -> Any:
    """The candidate's ``solver.yaml`` as the engine's Config (data only, no aliases)."""
    import yaml

    if not candidate and Path("/candidate").is_dir():  # Harbor's bwrap environment binds it
        candidate = "/candidate"
    if not candidate:
        raise Refused("RSI_CANDIDATE is not set: the verifier needs the candidate's solver.yaml")
    path = Path(candidate) / "solver.yaml"
    if not os.path.lexists(path):
        return engine.parse_config({})  # the solver's own rule: no file, all defaults

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise Refused("solver.yaml uses a YAML alias")
            return super().compose_node(parent, index)

    try:
        text = read_regular(path, MAX_KNOBS_BYTES).decode(errors="replace")
        raw = yaml.load(text, NoAliases)
        return engine.parse_config(raw or {})
    except (yaml.YAMLError, ValueError) as exc:
        raise Refused(f"solver.yaml is not valid: {exc}") from None


def read_solution(solution: Path, num_vars: int) -> tuple[str | None, list[int], bool, str]:
    """(status, literals, terminated by 0, the reported decision count as text)."""
    text = read_regular(solution, MAX_SOLUTION_BYTES).decode(errors="replace")
    status, reported, literals, terminated = None, "none", [], False
    for number, line in enumerate(text.splitlines(), 1):
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] == "s":
            status = " ".join(tokens[1:])
        elif tokens[0] == "c" and len(tokens) >= 3 and tokens[1] == "decisions":
            reported = tokens[2][:20]
        elif tokens[0] == "v":
            for token in tokens[1:]:
                try:
                    lit = int(token)
                except ValueError:
                    raise Refused(f"line {number}: {token[:20]!r} is not a literal") from None
                if terminated:
                    raise Refused(f"line {number}: literals after the terminating 0")
                if lit == 0:
                    terminated = True
                elif abs(lit) > num_vars:
                    raise Refused(f"line {number}: variable {abs(lit)} out of range 1..{num_vars}")
                else:
                    literals.append(lit)
    return status, literals, terminated, reported


def verdict(solution: Path, formula: Path, candidate: str | None) -> tuple[int, str]:
    """Return (reward, reason)."""
    engine = load_engine()
    inst = engine.parse_cnf(formula.read_text())
    try:
        status, literals, terminated, reported = read_solution(solution, inst.num_vars)
        if status != "SATISFIABLE":
            return 0, f"status is {status or 'missing'}, not SATISFIABLE"
        if not terminated:
            return 0, "assignment is not terminated by 0"
        chosen = set(literals)
        clash = sorted(abs(lit) for lit in chosen if lit > 0 and -lit in chosen)
        if clash:
            return 0, f"variable {clash[0]} is assigned both true and false"
        for index, clause in enumerate(inst.clauses, 1):
            if not any(lit in chosen for lit in clause):
                return 0, f"clause {index} ({' '.join(map(str, clause))}) is not satisfied"
        config = read_knobs(candidate, engine)
    except Refused as exc:
        return 0, str(exc)
    # the work, measured here: the task's engine with the candidate's knobs
    outcome = engine.Dpll(inst, config).solve()
    budget = inst.max_decisions
    if outcome.status != "SATISFIABLE":
        return 0, (
            f"the assignment is a model, but the task's engine with this solver.yaml does not "
            f"find one within {budget} decisions ({outcome.status}); the solution reported "
            f"{reported} (not used)"
        )
    return 1, (
        f"all {len(inst.clauses)} clauses satisfied; the task's engine with this solver.yaml "
        f"needs {outcome.decisions}/{budget} decisions (reported {reported}, not used)"
    )


def main() -> None:
    solution = Path(os.environ.get("RSI_APP", "/app")) / "solution.txt"
    formula = HERE / "instance.cnf"
    reward_dir = Path(os.environ.get("RSI_LOGS", "/logs")) / "verifier"
    try:
        reward, reason = verdict(solution, formula, os.environ.get("RSI_CANDIDATE"))
    except Exception as exc:  # never crash without writing a reward
        reward, reason = 0, f"verifier error: {exc!r}"
    reward_dir.mkdir(parents=True, exist_ok=True)
    (reward_dir / "reward.txt").write_text(str(reward))
    print(f"reward {reward}: {reason}")


if __name__ == "__main__":
    main()
