"""rsiframe.util.reaper: discarded folders (and files) free their name at once and are
deleted in the background."""

from __future__ import annotations

from pathlib import Path


def test_discarded_folders_free_their_name_at_once_and_are_deleted_in_the_background(
    tmp_path: Path,
) -> None:
    from rsiframe.util import reaper

    trial = tmp_path / "trial"
    (trial / "app" / "deep").mkdir(parents=True)
    (trial / "app" / "deep" / "f.txt").write_text("x")
    reaper.discard(trial)
    assert not trial.exists()  # the name is free as soon as discard returns
    trial.mkdir()  # and can be used again while the old one is being deleted
    reaper.discard(tmp_path / "never-there")  # a missing folder is fine
    (tmp_path / "reward.txt").write_text("1")
    (tmp_path / "link").symlink_to(trial)
    reaper.discard(tmp_path / "reward.txt")  # a file, and a link (not what it names), too
    reaper.discard(tmp_path / "link")
    assert reaper.settle(30)
    assert [p.name for p in tmp_path.iterdir()] == ["trial"]
