"""rsiframe.certs.keys: where run keys live."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.certs.signing import (
    key_dir,
)


def test_key_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tmp_path / "explicit"))
    assert key_dir() == tmp_path / "explicit"
    monkeypatch.delenv("RSIFRAME_KEY_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert key_dir() == tmp_path / "xdg" / "rsiframe" / "keys"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_dir() == tmp_path / "home" / ".local" / "share" / "rsiframe" / "keys"
