"""rsiframe.util.fsflags: inode flags read and the top-of-hierarchy mark set, where the
file system has them (ext4 here); False, not an error, where it does not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsiframe.util import fsflags


def _flags(path: Path) -> int | None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = fsflags.query(fd, fsflags.GETFLAGS, 8)
    finally:
        os.close(fd)
    return None if got is None else int.from_bytes(got[:4], "little")


def test_mark_top_sets_the_t_attribute_and_only_that(tmp_path: Path) -> None:
    before = _flags(tmp_path)
    if before is None:
        assert not fsflags.mark_top(tmp_path)  # no flags here: nothing to do, no error
        pytest.skip("platform limit: this file system has no inode flags")
    assert fsflags.mark_top(tmp_path)
    assert _flags(tmp_path) == before | fsflags.TOPDIR
    (tmp_path / "sub").mkdir()
    assert not (_flags(tmp_path / "sub") or 0) & fsflags.TOPDIR  # not inherited


def test_mark_top_of_what_is_not_a_folder_is_false(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    assert not fsflags.mark_top(tmp_path / "f")
    assert not fsflags.mark_top(tmp_path / "link")
    assert not fsflags.mark_top(tmp_path / "missing")
