"""rsiframe.repo.exportdir: a tree written into a folder that already holds another, in
place: exactly the tree afterwards, nothing written through a link or a second hard link,
and what already matches left as it is."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rsiframe.evaluators.trialfolders import manifest
from rsiframe.repo.exportdir import GitlinkInTree, copy_into, write_tree
from rsiframe.repo.gittree import MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK


def _source(root: Path) -> Path:
    src = root / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "run.sh").write_text("echo hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "a" / "b" / "data.txt").write_text("data\n")
    (src / "a" / "same.txt").write_text("same\n")
    (src / "link").symlink_to("a/b/data.txt")
    return src


@pytest.mark.parametrize("left", ["nothing", "new", "dirty"])
def test_copy_into_makes_what_copytree_makes(tmp_path: Path, left: str) -> None:
    src = _source(tmp_path)
    dst, outside = tmp_path / "dst", tmp_path / "outside.txt"
    outside.write_text("outside\n")
    if left != "nothing":
        dst.mkdir()
    if left == "dirty":  # what an earlier folder left: every kind of difference
        (dst / "a").mkdir()
        (dst / "a" / "same.txt").write_text("same\n")
        (dst / "run.sh").symlink_to(outside)  # a link where a file belongs
        os.link(outside, dst / "extra-hard")
        (dst / "a" / "b").write_text("a file where a folder belongs")
        (dst / "link").mkdir()  # a folder where a link belongs
        (dst / "stale" / "deep").mkdir(parents=True)
        (dst / "empty").write_text("")
        (dst / "a").chmod(0o700)
        dst.chmod(0o777)
    kept = os.lstat(dst / "a" / "same.txt").st_ino if left == "dirty" else None
    copy_into(src, dst)
    shutil.copytree(src, tmp_path / "ref", symlinks=True)
    assert manifest(dst, own=True) == manifest(tmp_path / "ref")
    assert outside.read_text() == "outside\n" and os.lstat(outside).st_nlink == 1
    if kept is not None:
        assert os.lstat(dst / "a" / "same.txt").st_ino == kept


def test_write_tree_writes_a_changed_file_in_place_and_refuses_a_gitlink(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    blobs = {"f": b"one\n", "x": b"#!/bin/sh\n", "l": b"f"}
    modes = {"f": MODE_FILE, "x": MODE_EXEC, "l": MODE_LINK}
    write_tree(dest, modes, blobs.__getitem__)
    inode = os.lstat(dest / "f").st_ino
    blobs["f"] = b"two, longer\n"
    write_tree(dest, modes, blobs.__getitem__)
    assert (dest / "f").read_bytes() == b"two, longer\n"
    assert os.lstat(dest / "f").st_ino == inode  # rewritten, not made anew
    assert os.lstat(dest / "x").st_mode & 0o777 == 0o755
    assert os.readlink(dest / "l") == "f"
    with pytest.raises(GitlinkInTree):
        write_tree(dest, {"sub": MODE_GITLINK}, lambda p: b"")


def test_a_file_swapped_for_a_fifo_is_removed_not_opened(tmp_path: Path) -> None:
    """A named pipe where a file belongs would hang an open for reading: it is removed in
    the first pass, never opened."""
    dest = tmp_path / "dest"
    dest.mkdir()
    os.mkfifo(dest / "f")
    write_tree(dest, {"f": MODE_FILE}, lambda p: b"data\n")
    assert (dest / "f").read_bytes() == b"data\n"
