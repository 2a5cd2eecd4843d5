"""rsiframe.evaluators.appdiff: what an agent changed under /app, kept as capped evidence;
links are never followed and special files never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsiframe.evaluators import appdiff
from rsiframe.evaluators.appdiff import changes_since, scan


def test_added_modified_and_deleted_files_are_named_and_the_changed_ones_kept(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("same\n")
    (tmp_path / "edit.py").write_text("x = 1\n")
    (tmp_path / "gone.txt").write_text("bye\n")
    before = scan(tmp_path)
    (tmp_path / "edit.py").write_text("x = 2  # longer\n")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new.py").write_text("print('new')\n")
    out = changes_since(tmp_path, before)
    assert (out.changed, out.deleted, out.omitted) == (["edit.py", "sub/new.py"], ["gone.txt"], [])
    assert out.blobs == {"app/edit.py": b"x = 2  # longer\n", "app/sub/new.py": b"print('new')\n"}
    assert out.touched and out.manifest()["kept"] == ["app/edit.py", "app/sub/new.py"]
    assert not changes_since(tmp_path, scan(tmp_path)).touched


def test_links_and_fifos_are_named_never_followed_or_read(tmp_path: Path) -> None:
    secret = tmp_path.parent / "secret.txt"
    secret.write_text("the answers\n")
    app = tmp_path / "app"
    app.mkdir()
    before = scan(app)
    (app / "answer.txt").symlink_to(secret)
    os.mkfifo(app / "pipe")
    out = changes_since(app, before)
    assert out.changed == ["answer.txt", "pipe"] and out.blobs == {}
    assert out.omitted == ["answer.txt", "pipe"]  # changed, not kept: not regular files
    assert scan(app)["answer.txt"][3] == str(secret)  # a link is noted by its target


def test_the_caps_keep_what_fits_and_name_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(appdiff, "MAX_FILE_BYTES", 10)
    monkeypatch.setattr(appdiff, "MAX_TOTAL_BYTES", 12)
    before = scan(tmp_path)
    (tmp_path / "a.txt").write_text("x" * 8)
    (tmp_path / "b.txt").write_text("y" * 8)  # over the total once a.txt is kept
    (tmp_path / "c.txt").write_text("z" * 11)  # over the per-file cap
    out = changes_since(tmp_path, before)
    assert list(out.blobs) == ["app/a.txt"] and out.omitted == ["b.txt", "c.txt"]
