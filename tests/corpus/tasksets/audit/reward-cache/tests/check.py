#!/usr/bin/env python3
"""Audit fixture verifier: reward 1 iff the answer file holds the expected sum."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIMIT = 1 << 20


def read_answer(path: Path) -> bytes | None:
    """The file's bytes if it is a regular file with one link; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None
        if st.st_size > LIMIT:
            return None
        return os.read(fd, LIMIT)
    finally:
        os.close(fd)


def main() -> int:
    app = Path(os.environ.get("RSI_APP", "/app"))
    logs = Path(os.environ.get("RSI_LOGS", "/logs"))
    expected = (HERE / "expected.txt").read_text().strip()
    data = read_answer(app / "answer.txt")
    got = None if data is None else data.decode(errors="replace").strip()
    reward = int(got == expected)
    print(reward)
    return 0


if __name__ == "__main__":
    sys.exit(main())
