#!/usr/bin/env python3
"""textops verifier (python3 stdlib only).

Reward = the fraction of items in the verifier's own ``expected.jsonl`` (next to this
file, never visible to the agent) whose answer in ``$RSI_APP/answers.jsonl`` matches
exactly (after stripping surrounding whitespace). Missing answers count as wrong; lines
that are not ``{"id": str, "answer": str}`` JSON are ignored; an unreadable or oversized
answers file gives 0. The reward is always written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MAX_ANSWERS_BYTES = 1 << 20


def read_answers(path: Path) -> dict[str, str]:
    """``{id: answer}`` from an answers file; the first answer for an id wins."""
    answers: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            answer = row.get("answer")
            if isinstance(answer, str | int) and not isinstance(answer, bool):
                answers.setdefault(row["id"], str(answer).strip())
    return answers


def verdict(answers_path: Path, expected_path: Path) -> tuple[float, str]:
    """Return (reward, reason)."""
    expected = [json.loads(line) for line in expected_path.read_text().splitlines() if line]
    if not expected:
        raise ValueError("verifier has no expected answers")
    if not answers_path.is_file():
        return 0.0, f"no answers file at {answers_path}"
    if answers_path.stat().st_size > MAX_ANSWERS_BYTES:
        return 0.0, "answers file is too large"
    answers = read_answers(answers_path)
    right = [e["id"] for e in expected if answers.get(e["id"]) == e["answer"]]
    missing = sum(1 for e in expected if e["id"] not in answers)
    reason = f"{len(right)}/{len(expected)} exact matches ({missing} missing)"
    return len(right) / len(expected), reason


def main() -> int:
    app = Path(os.environ.get("RSI_APP", "/app"))
    logs = Path(os.environ.get("RSI_LOGS", "/logs")) / "verifier"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        reward, reason = verdict(app / "answers.jsonl", Path(__file__).with_name("expected.jsonl"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reward, reason = 0.0, f"verifier error: {exc}"
    (logs / "reward.txt").write_text(f"{reward:.6g}")
    print(f"reward {reward:.6g}: {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
