"""Broken setups are loud: task errors with an infrastructure reason, counted per split.

A task that scores 0 because the agent could not even start, or because the verifier wrote
no reward, says nothing about the candidate: it says the setup is wrong. The reasons:

* ``agent could not start``: the shell could not run the agent command (status 126/127);
* ``agent exited non-zero before doing anything``: a non-zero exit with /app untouched
  (a wrong path in ``agent:`` ends here: ``python3: can't open file ...``);
* ``verifier wrote no parseable reward``: no reward file, or one that holds no number.

They are read from the error strings of certified records (``predicate.errors``), so
``status``, the summary and the progress line agree with the archive. When every task of
one of the seed's splits fails for the same reason, the run stops (:func:`dead_seed`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rsiframe.archive.state import Candidate
from rsiframe.evaluators.appdiff import UNTOUCHED

COULD_NOT_START = "agent could not start"
EXITED_EARLY = "agent exited non-zero before doing anything"
NO_REWARD = "verifier wrote no parseable reward"

_NO_REWARD_ERRORS = ("verifier wrote no reward", "unreadable reward", "holds no numeric reward")
_HINTS = {
    COULD_NOT_START: "check evaluator.config.agent (the command and the interpreter it names)",
    EXITED_EARLY: "check evaluator.config.agent (paths under $RSI_CANDIDATE) and the seed",
    NO_REWARD: "check the tasks' tests/test.sh: it must write a number to "
    "/logs/verifier/reward.txt (or reward.json)",
}


def reason_of(error: str | None) -> str | None:
    """The infrastructure reason of one task's error, or None (a real failure, or none)."""
    if not error:
        return None
    if re.match(r"agent exited with status (126|127)\b", error):
        return COULD_NOT_START
    if error.startswith("agent exited with status") and UNTOUCHED in error.split(":", 1)[0]:
        return EXITED_EARLY
    if not error.startswith(("agent timed out", "verifier timed out")) and any(
        e in error for e in _NO_REWARD_ERRORS
    ):
        return NO_REWARD
    return None


@dataclass
class SplitHealth:
    """Infrastructure errors of one split: counts by reason, and one example each."""

    tasks: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # reason -> "task: error"

    def add(self, task: str, error: str | None) -> None:
        self.tasks += 1
        reason = reason_of(error)
        if reason is not None:
            self.counts[reason] = self.counts.get(reason, 0) + 1
            self.examples.setdefault(reason, f"{task}: {(error or '').splitlines()[0]}")

    @property
    def errored(self) -> int:
        return sum(self.counts.values())


def of_candidate(c: Candidate) -> dict[str, SplitHealth]:
    """Per split (with a certified record), the candidate's infrastructure errors."""
    out: dict[str, SplitHealth] = {}
    for split in ("train", "gate", "sealed"):
        rec = c.record(split)
        if rec is None:
            continue
        h = out[split] = SplitHealth()
        for task in rec.predicate.rewards:
            h.add(task, rec.predicate.errors.get(task))
    return out


def counts_of(c: Candidate) -> dict[str, dict[str, int]]:
    """``{split: {reason: n}}`` for splits with infrastructure errors (``status --json``)."""
    return {s: dict(h.counts) for s, h in of_candidate(c).items() if h.counts}


def describe(split: str, h: SplitHealth) -> str:
    """``train: 10/10 tasks errored: agent could not start (10) (e.g. t1: ...)``."""
    parts = ", ".join(f"{r} ({n})" for r, n in sorted(h.counts.items(), key=lambda kv: -kv[1]))
    top = max(h.counts, key=lambda r: h.counts[r])
    return f"{split}: {h.errored}/{h.tasks} tasks errored: {parts} (e.g. {h.examples[top]})"


def dead_seed(seed: Candidate) -> str | None:
    """Why the run must stop, when every task of one of the seed's splits failed for the
    same infrastructure reason; None otherwise."""
    for split, h in of_candidate(seed).items():
        if h.tasks and len(h.counts) == 1 and h.errored == h.tasks:
            reason = next(iter(h.counts))
            return (
                f"every seed {split} task failed: {reason} (e.g. {h.examples[reason]}); "
                f"{_HINTS[reason]}, then start a new run"
            )
    return None
