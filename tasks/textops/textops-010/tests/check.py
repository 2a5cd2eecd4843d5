#!/usr/bin/env python3
"""textops verifier (python3 stdlib only).

Reward = the fraction of items in the verifier's own ``expected.jsonl`` (next to this
file, never visible to the agent) whose answer in ``$RSI_APP/answers.jsonl`` matches
exactly (after stripping surrounding whitespace). Missing answers count as wrong; lines
that are not ``{"id": str, "answer": str}`` JSON are ignored; an answers file that is
missing, oversized, a symlink, hard-linked or not a regular file (opened with
``O_NOFOLLOW``, checked with ``fstat``) gives 0. The reward is always written.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MAX_ANSWERS_BYTES = 1 << 20


class Refused(Exception):
    """The answers file cannot be scored; the message is the reason."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes with one
    link, opened without following a symlink (or blocking on a FIFO)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Refused(f"no answers file at {path}") from None
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
                raise Refused("answers file is too large")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_answers(path: Path) -> dict[str, str]:
    """``{id: answer}`` from an answers file; the first answer for an id wins."""
    answers: dict[str, str] = {}
    text = read_regular(path, MAX_ANSWERS_BYTES).decode(errors="replace")
    for line in text.splitlines():
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
    try:
        answers = read_answers(answers_path)
    except Refused as exc:
        return 0.0, str(exc)
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
