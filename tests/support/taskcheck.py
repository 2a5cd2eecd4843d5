"""Copies of the shipped terminal tasks for ``tasks check``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.paths import TERMINAL


def copy_tasks(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "set"
    for n in names:
        shutil.copytree(TERMINAL / n, root / n)
    return root
