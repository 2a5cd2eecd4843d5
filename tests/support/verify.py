"""What ``verify`` says and what a folder holds, for the verify tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.support.cli import cli


def tree_digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def verify_json(out: Path, *args: str) -> tuple[int, dict]:
    res = cli("verify", out, "--json", *args)
    return res.exit_code, json.loads(res.stdout)
