"""TODO"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "keys"
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(d))
    return d
