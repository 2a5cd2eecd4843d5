#!/usr/bin/env python3
"""Deliberately plain DPLL solver for the sat3 task set, configured by ``solver.yaml``.

Contract (see ../README.md):

* reads ``$RSI_APP/instance.cnf`` (DIMACS, with a ``c max_decisions N`` comment);
* reads its knobs from ``solver.yaml`` next to this file;
* makes at most N branching decisions (unit propagations and pure-literal
  assignments are not decisions), then gives up;
* writes ``$RSI_APP/solution.txt`` (``s SATISFIABLE`` + ``v ... 0`` lines, or
  ``s UNKNOWN``) and a ``c decisions K`` line;
* prints a short human-readable trace to stdout.

Everything is deterministic: randomness comes from ``random.Random(random_seed)``.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BRANCHING = ("first", "random", "moms", "jw", "dlis")
POLARITY = ("positive", "negative", "random", "occurrence")
RESTARTS = ("none", "luby", "geometric")
GEOMETRIC_FACTOR = 1.5


@dataclass(frozen=True)
class Config:
    """The knobs read from ``solver.yaml``."""

    branching: str = "first"
    unit_propagation: bool = True
    pure_literals: bool = False
    polarity: str = "negative"
    restart_strategy: str = "none"
    restart_base: int = 100
    random_seed: int = 1

    def describe(self) -> str:
        restarts = self.restart_strategy
        if restarts != "none":
            restarts += f"(base={self.restart_base} conflicts)"
        return (
            f"branching={self.branching} unit_propagation={str(self.unit_propagation).lower()} "
            f"pure_literals={str(self.pure_literals).lower()} polarity={self.polarity} "
            f"restarts={restarts} random_seed={self.random_seed}"
        )


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"{key} must be true or false, got {value!r}")


def _as_choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in choices:
        raise ValueError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return text


def _as_int(value: Any, key: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value!r}")
    return number


def load_config(path: Path) -> Config:
    """Read ``solver.yaml``; a missing file means all defaults."""
    raw: Any = yaml.safe_load(path.read_text()) if path.is_file() else {}
    return parse_config(raw or {})


def parse_config(raw: Any) -> Config:
    """Build a Config from a knobs mapping; missing keys keep the defaults, bad values raise."""
    if not isinstance(raw, dict):
        raise ValueError("solver.yaml must hold a mapping")
    default = Config()
    restarts = raw.get("restarts") or {}
    if not isinstance(restarts, dict):
        raise ValueError("restarts must be a mapping with strategy and base")
    return Config(
        branching=_as_choice(raw.get("branching", default.branching), "branching", BRANCHING),
        unit_propagation=_as_bool(
            raw.get("unit_propagation", default.unit_propagation), "unit_propagation"
        ),
        pure_literals=_as_bool(raw.get("pure_literals", default.pure_literals), "pure_literals"),
        polarity=_as_choice(raw.get("polarity", default.polarity), "polarity", POLARITY),
        restart_strategy=_as_choice(
            restarts.get("strategy", default.restart_strategy), "restarts.strategy", RESTARTS
        ),
        restart_base=_as_int(restarts.get("base", default.restart_base), "restarts.base", 1),
        random_seed=_as_int(raw.get("random_seed", default.random_seed), "random_seed", 0),
    )


@dataclass
class Instance:
    num_vars: int
    clauses: list[list[int]]
    max_decisions: int


def parse_cnf(text: str) -> Instance:
    """Parse DIMACS CNF text; ``c max_decisions N`` sets the decision budget."""
    num_vars = 0
    max_decisions = -1
    clauses: list[list[int]] = []
    current: list[int] = []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "%":
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
                num_vars = max(num_vars, abs(lit))
    if current:
        clauses.append(current)
    if max_decisions < 0:
        raise ValueError("instance has no 'c max_decisions N' line")
    return Instance(num_vars, clauses, max_decisions)


def luby(i: int) -> int:
    """The i-th term (1-based) of the Luby sequence 1 1 2 1 1 2 4 1 1 2 ..."""
    k = 1
    while (1 << k) - 1 < i:
        k += 1
    while i != (1 << k) - 1:
        i -= (1 << (k - 1)) - 1
        k = 1
        while (1 << k) - 1 < i:
            k += 1
    return 1 << (k - 1)


@dataclass
class Outcome:
    status: str  # "SATISFIABLE", "UNSATISFIABLE" or "UNKNOWN"
    model: list[int]
    decisions: int
    conflicts: int
    restarts: int
    propagations: int
    pure_assignments: int
    max_depth: int
    best_satisfied: int


class Dpll:
    """Iterative DPLL with counter-based clause bookkeeping.

    Literals index Python lists directly: ``lit`` and ``-lit`` map to distinct
    slots of a list of length ``2 * num_vars + 1`` thanks to negative indexing.
    """

    def __init__(self, inst: Instance, cfg: Config) -> None:
        self.cfg = cfg
        self.num_vars = inst.num_vars
        self.clauses = [list(dict.fromkeys(c)) for c in inst.clauses]
        self.max_decisions = inst.max_decisions
        self.rng = random.Random(cfg.random_seed)
        size = 2 * self.num_vars + 1
        self.occ: list[list[int]] = [[] for _ in range(size)]
        for index, clause in enumerate(self.clauses):
            for lit in clause:
                self.occ[lit].append(index)
        self.size = [len(c) for c in self.clauses]
        self.litval = [0] * size  # 1 true, -1 false, 0 unassigned
        self.ntrue = [0] * len(self.clauses)
        self.nfalse = [0] * len(self.clauses)
        self.nsat = 0
        self.trail: list[int] = []
        self.units: list[int] = []
        self.decisions = 0
        self.conflicts = 0
        self.restarts = 0
        self.propagations = 0
        self.pure_assignments = 0
        self.max_depth = 0
        self.best_satisfied = 0

    # -- assignment bookkeeping -------------------------------------------------

    def assign(self, lit: int) -> int:
        """Make ``lit`` true; return the index of a falsified clause, or -1."""
        litval = self.litval
        litval[lit] = 1
        litval[-lit] = -1
        self.trail.append(lit)
        ntrue = self.ntrue
        for c in self.occ[lit]:
            if ntrue[c] == 0:
                self.nsat += 1
            ntrue[c] += 1
        nfalse = self.nfalse
        size = self.size
        units = self.units
        collect = self.cfg.unit_propagation
        conflict = -1
        for c in self.occ[-lit]:
            k = nfalse[c] + 1
            nfalse[c] = k
            if ntrue[c] == 0:
                left = size[c] - k
                if left == 0:
                    conflict = c
                elif left == 1 and collect:
                    units.append(c)
        return conflict

    def propagate(self, conflict: int) -> int:
        """Run unit propagation (if enabled) after an assignment; return a conflict or -1."""
        units = self.units
        if conflict >= 0:
            units.clear()
            return conflict
        litval = self.litval
        ntrue = self.ntrue
        while units:
            c = units.pop()
            if ntrue[c]:
                continue
            for lit in self.clauses[c]:
                if litval[lit] == 0:
                    break
            else:
                continue
            self.propagations += 1
            conflict = self.assign(lit)
            if conflict >= 0:
                units.clear()
                return conflict
        return -1

    def undo(self, position: int) -> None:
        """Unassign everything on the trail above ``position``."""
        trail = self.trail
        litval = self.litval
        ntrue = self.ntrue
        nfalse = self.nfalse
        occ = self.occ
        while len(trail) > position:
            lit = trail.pop()
            litval[lit] = 0
            litval[-lit] = 0
            for c in occ[lit]:
                ntrue[c] -= 1
                if ntrue[c] == 0:
                    self.nsat -= 1
            for c in occ[-lit]:
                nfalse[c] -= 1

    # -- heuristics -------------------------------------------------------------

    def active_count(self, lit: int) -> int:
        """Number of not-yet-satisfied clauses containing ``lit``."""
        ntrue = self.ntrue
        return sum(1 for c in self.occ[lit] if not ntrue[c])

    def assign_pure_literals(self) -> None:
        """Assign every pure literal (repeat until none is left); cannot conflict."""
        litval = self.litval
        found = True
        while found:
            found = False
            for var in range(1, self.num_vars + 1):
                if litval[var]:
                    continue
                pos = self.active_count(var)
                neg = self.active_count(-var)
                if pos and not neg:
                    self.assign(var)
                elif neg and not pos:
                    self.assign(-var)
                else:
                    continue
                self.pure_assignments += 1
                found = True

    def literal_scores(self) -> list[float]:
        """Score every unassigned literal over the not-yet-satisfied clauses."""
        cfg = self.cfg
        litval = self.litval
        ntrue = self.ntrue
        nfalse = self.nfalse
        size = self.size
        clauses = self.clauses
        scores = [0.0] * len(litval)
        active = [c for c in range(len(clauses)) if not ntrue[c]]
        if cfg.branching == "moms":
            shortest = min(size[c] - nfalse[c] for c in active)
            active = [c for c in active if size[c] - nfalse[c] == shortest]
        for c in active:
            weight = 2.0 ** (nfalse[c] - size[c]) if cfg.branching == "jw" else 1.0
            for lit in clauses[c]:
                if litval[lit] == 0:
                    scores[lit] += weight
        return scores

    def pick_variable(self) -> int:
        cfg = self.cfg
        litval = self.litval
        free = [v for v in range(1, self.num_vars + 1) if litval[v] == 0]
        if cfg.branching == "first":
            return free[0]
        if cfg.branching == "random":
            return self.rng.choice(free)
        scores = self.literal_scores()
        if cfg.branching == "dlis":
            keyed = [(max(scores[v], scores[-v]), v) for v in free]
        elif cfg.branching == "moms":
            # Freeman's MOMS: prefer variables that occur often in both polarities.
            keyed = [((scores[v] + scores[-v]) * 64 + scores[v] * scores[-v], v) for v in free]
        else:  # jw, two-sided
            keyed = [(scores[v] + scores[-v], v) for v in free]
        best = max(score for score, _ in keyed)
        return self.rng.choice([v for score, v in keyed if score == best])

    def pick_literal(self, var: int) -> int:
        polarity = self.cfg.polarity
        if polarity == "positive":
            return var
        if polarity == "negative":
            return -var
        if polarity == "random":
            return var if self.rng.random() < 0.5 else -var
        pos = self.active_count(var)
        neg = self.active_count(-var)
        if pos == neg:
            return var if self.rng.random() < 0.5 else -var
        return var if pos > neg else -var

    # -- search -----------------------------------------------------------------

    def restart_limit(self) -> int:
        cfg = self.cfg
        if cfg.restart_strategy == "luby":
            return cfg.restart_base * luby(self.restarts + 1)
        if cfg.restart_strategy == "geometric":
            return int(cfg.restart_base * GEOMETRIC_FACTOR**self.restarts)
        return -1

    def model(self) -> list[int]:
        default = -1 if self.cfg.polarity == "negative" else 1
        return [
            v if self.litval[v] > 0 else -v if self.litval[v] < 0 else default * v
            for v in range(1, self.num_vars + 1)
        ]

    def outcome(self, status: str) -> Outcome:
        model = self.model() if status == "SATISFIABLE" else []
        return Outcome(
            status,
            model,
            self.decisions,
            self.conflicts,
            self.restarts,
            self.propagations,
            self.pure_assignments,
            self.max_depth,
            self.best_satisfied,
        )

    def solve(self) -> Outcome:
        cfg = self.cfg
        num_clauses = len(self.clauses)
        if any(s == 0 for s in self.size):
            return self.outcome("UNSATISFIABLE")
        if cfg.unit_propagation:
            self.units.extend(c for c in range(num_clauses) if self.size[c] == 1)
        conflict = self.propagate(-1)
        if conflict >= 0:
            return self.outcome("UNSATISFIABLE")
        root = len(self.trail)
        # Each frame: (trail length before the decision, decision literal, already flipped?)
        frames: list[tuple[int, int, bool]] = []
        since_restart = 0
        limit = self.restart_limit()
        while True:
            if conflict >= 0:
                self.conflicts += 1
                since_restart += 1
                while frames:
                    position, lit, flipped = frames.pop()
                    self.undo(position)
                    if not flipped:
                        frames.append((position, -lit, True))
                        conflict = self.propagate(self.assign(-lit))
                        break
                else:
                    # The tree below the root (since the last restart) is exhausted.
                    return self.outcome("UNSATISFIABLE")
                continue
            if 0 <= limit <= since_restart:
                self.undo(root)
                frames.clear()
                self.restarts += 1
                since_restart = 0
                limit = self.restart_limit()
            if cfg.pure_literals and self.nsat < num_clauses:
                self.assign_pure_literals()
            self.best_satisfied = max(self.best_satisfied, self.nsat)
            if self.nsat == num_clauses:
                return self.outcome("SATISFIABLE")
            if self.decisions >= self.max_decisions:
                return self.outcome("UNKNOWN")
            lit = self.pick_literal(self.pick_variable())
            self.decisions += 1
            frames.append((len(self.trail), lit, False))
            self.max_depth = max(self.max_depth, len(frames))
            conflict = self.propagate(self.assign(lit))


def write_solution(path: Path, outcome: Outcome) -> None:
    lines = ["c rsiframe sat3 DPLL seed", f"c decisions {outcome.decisions}"]
    lines.append(f"s {outcome.status}")
    if outcome.status == "SATISFIABLE":
        lits = [str(lit) for lit in outcome.model] + ["0"]
        lines.extend("v " + " ".join(lits[i : i + 15]) for i in range(0, len(lits), 15))
    path.write_text("\n".join(lines) + "\n")


def report(outcome: Outcome, inst: Instance) -> str:
    num_clauses = len(inst.clauses)
    stats = (
        f"{outcome.decisions} decisions (budget {inst.max_decisions}), "
        f"{outcome.conflicts} conflicts, "
        f"{outcome.restarts} restarts, {outcome.propagations} unit propagations, "
        f"{outcome.pure_assignments} pure-literal assignments, max depth {outcome.max_depth}"
    )
    if outcome.status == "SATISFIABLE":
        return f"result: SATISFIABLE after {stats}"
    if outcome.status == "UNSATISFIABLE":
        return f"result: UNSATISFIABLE (search space exhausted) after {stats}"
    return (
        f"result: UNKNOWN - gave up after {stats}; "
        f"best partial assignment satisfied {outcome.best_satisfied}/{num_clauses} clauses"
    )


def give_up(solution: Path, reason: str) -> int:
    """Report a setup failure and leave an UNKNOWN solution behind (exit status 2)."""
    print(reason)
    try:
        solution.write_text(f"c {reason}\nc decisions 0\ns UNKNOWN\n")
    except OSError as exc:
        print(f"cannot write {solution}: {exc}")
    return 2


def main() -> int:
    app = Path(os.environ.get("RSI_APP", "/app"))
    knobs = Path(os.path.dirname(os.path.abspath(__file__))) / "solver.yaml"
    solution = app / "solution.txt"
    print(f"sat3 DPLL seed, task {os.environ.get('RSI_TASK_ID', '?')}")
    try:
        cfg = load_config(knobs)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return give_up(solution, f"config error in {knobs.name}: {exc}")
    print(f"config: {cfg.describe()}")
    try:
        inst = parse_cnf((app / "instance.cnf").read_text())
    except (OSError, ValueError, IndexError) as exc:
        return give_up(solution, f"cannot read {app / 'instance.cnf'}: {exc}")
    print(
        f"instance: {inst.num_vars} vars, {len(inst.clauses)} clauses, "
        f"max_decisions {inst.max_decisions}"
    )
    outcome = Dpll(inst, cfg).solve()
    print(report(outcome, inst))
    try:
        write_solution(solution, outcome)
    except OSError as exc:
        print(f"cannot write {solution}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
