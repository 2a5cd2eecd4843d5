"""rsiframe.util.spares: folders set aside and taken back as the next ones, at most
``keep`` at a time; beyond that, and at close, they go to the reaper."""

from __future__ import annotations

import os
from pathlib import Path

from rsiframe.util import reaper
from rsiframe.util.spares import Spares


def _folder(path: Path) -> int:
    path.mkdir()
    (path / "f.txt").write_text(path.name)
    return os.lstat(path).st_ino


def test_a_folder_set_aside_is_the_next_one_taken(tmp_path: Path) -> None:
    spares = Spares(tmp_path, "spare", keep=2)
    inode = _folder(tmp_path / "c0001")
    spares.set_aside(tmp_path / "c0001")
    assert not (tmp_path / "c0001").exists()
    assert spares.take(tmp_path / "c0002")
    assert os.lstat(tmp_path / "c0002").st_ino == inode  # the same folder, as it was left
    assert (tmp_path / "c0002" / "f.txt").read_text() == "c0001"
    assert not spares.take(tmp_path / "c0003")  # none left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c0002"]


def test_beyond_keep_and_at_close_folders_go_to_the_reaper(tmp_path: Path) -> None:
    spares = Spares(tmp_path, "spare", keep=2)
    for name in ("a", "b", "c"):
        _folder(tmp_path / name)
        spares.set_aside(tmp_path / name)
    assert reaper.settle(30)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".spare-")]) == 2
    assert len(list(tmp_path.iterdir())) == 2
    spares.close()
    assert reaper.settle(30)
    assert list(tmp_path.iterdir()) == []


def test_a_spare_is_never_put_over_what_is_there_and_a_link_is_not_kept(
    tmp_path: Path,
) -> None:
    spares = Spares(tmp_path, "spare", keep=2)
    _folder(tmp_path / "a")
    spares.set_aside(tmp_path / "a")
    _folder(tmp_path / "taken")
    assert not spares.take(tmp_path / "taken")  # present: left alone, the spare kept
    assert (tmp_path / "taken" / "f.txt").read_text() == "taken"
    elsewhere = tmp_path / "elsewhere"
    _folder(elsewhere)
    (tmp_path / "link").symlink_to(elsewhere)
    spares.set_aside(tmp_path / "link")  # not a folder: to the reaper, what it names kept
    assert reaper.settle(30)
    assert not os.path.lexists(tmp_path / "link") and (elsewhere / "f.txt").exists()
    assert spares.take(tmp_path / "b") and (tmp_path / "b" / "f.txt").read_text() == "a"
