"""rsiframe.evaluators.trialfolders: a task's trial folder kept for its next trial, with
nothing a sandbox wrote in it and nothing left as found unless it is exactly the task's."""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from pathlib import Path

import pytest

from rsiframe.evaluators.trialfolders import (
    SPENT_FILE,
    WRITABLE,
    TrialFolders,
    manifest,
    sync_tree,
)
from rsiframe.util import fsflags, reaper


def _used(folder: Path) -> None:
    """What a trial's phases leave: every writable part, with files in it."""
    for name in WRITABLE:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "out.txt").write_text("left by the trial")


def test_a_tasks_folder_is_kept_for_its_next_trial_without_what_the_trial_wrote(
    tmp_path: Path,
) -> None:
    folders = TrialFolders(tmp_path)
    first = folders.take("t1", "do it\n")
    assert (first / "task" / "instruction.md").read_text() == "do it\n"
    inode = os.lstat(first / "task" / "instruction.md").st_ino
    _used(first)
    folders.give_back("t1", first)
    assert not any(os.path.lexists(first / name) for name in WRITABLE)
    again = folders.take("t1", "do it\n")
    assert again == first
    assert os.lstat(again / "task" / "instruction.md").st_ino == inode  # not written anew
    other = folders.take("t2", "other\n")
    second = folders.take("t1", "do it\n")
    assert other != first  # another task: a folder of its own
    assert second not in (first, other)  # a second trial at once: another one
    for task, folder in (("t1", again), ("t2", other), ("t1", second)):
        folders.give_back(task, folder)
    assert reaper.settle(30)  # what the trial wrote is gone, not set aside for ever
    assert sorted(tmp_path.iterdir()) == sorted([first, other, second])


def test_close_hands_every_kept_folder_to_the_reaper(tmp_path: Path) -> None:
    folders = TrialFolders(tmp_path)
    for task in ("a", "b", "c"):
        folders.give_back(task, folders.take(task, task))
    assert len(list(tmp_path.iterdir())) == 3
    folders.close()
    assert reaper.settle(30)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tamper", ["content", "symlink", "hardlink", "folder", "fifo"])
def test_an_instruction_left_otherwise_is_written_anew_as_a_plain_file(
    tmp_path: Path, tamper: str
) -> None:
    folders = TrialFolders(tmp_path / "work")
    folder = folders.take("t1", "the task\n")
    path = folder / "task" / "instruction.md"
    outside = tmp_path / "outside.txt"
    outside.write_text("the task\n")
    path.unlink()
    if tamper == "content":
        path.write_text("a forged task\n")
    elif tamper == "symlink":
        path.symlink_to(outside)
    elif tamper == "hardlink":
        os.link(outside, path)
    elif tamper == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    folders.give_back("t1", folder)
    assert folders.take("t1", "the task\n") == folder
    st = os.lstat(path)
    assert path.is_file() and not path.is_symlink() and st.st_nlink == 1
    assert path.read_text() == "the task\n"
    assert outside.read_text() == "the task\n"  # what a link named is untouched


@pytest.mark.parametrize("left", ["verifier", "notes.txt", "logs/other", "task/answers.txt"])
def test_a_folder_holding_more_than_is_kept_is_not_reused(tmp_path: Path, left: str) -> None:
    """Anything beyond what is kept (under the process sandbox an agent can write beside
    its folders, for the task's next trial to find), and the folder goes."""
    folders = TrialFolders(tmp_path)
    folder = folders.take("t1", "x")
    (folder / "logs").mkdir()
    folders.give_back("t1", folder)
    if left == "verifier":
        (folder / left).mkdir()  # appeared after the hand-back
    else:
        (folder / left).write_text("for the next trial")
    taken = folders.take("t1", "x")
    assert taken != folder and not (taken / left).exists()
    assert reaper.settle(30) and not folder.exists()


def _tests(root: Path) -> Path:
    src = root / "src"
    (src / "data").mkdir(parents=True)
    (src / "test.sh").write_text("echo ok\n")
    (src / "test.sh").chmod(0o755)
    (src / "data" / "expected.txt").write_text("42\n")
    (src / "link").symlink_to("data/expected.txt")
    return src


def test_sync_tree_leaves_an_exact_copy_alone(tmp_path: Path) -> None:
    src, dst = _tests(tmp_path), tmp_path / "dst"
    sync_tree(src, dst)
    assert manifest(dst, own=True) == manifest(src)
    inode = os.lstat(dst / "test.sh").st_ino
    sync_tree(src, dst)
    assert os.lstat(dst / "test.sh").st_ino == inode


@pytest.mark.parametrize(
    "tamper",
    ["content", "mode", "root-mode", "extra", "missing", "relink", "hardlink", "fifo", "swap"],
)
def test_sync_tree_copies_anew_whatever_differs(tmp_path: Path, tamper: str) -> None:
    src, dst = _tests(tmp_path), tmp_path / "dst"
    sync_tree(src, dst)
    other = tmp_path / "other.txt"
    other.write_text("forged\n")
    if tamper == "content":
        (dst / "test.sh").write_text("echo 1 > reward.txt\n")
    elif tamper == "mode":
        (dst / "test.sh").chmod(0o777)
    elif tamper == "root-mode":
        dst.chmod(0o700)
    elif tamper == "extra":
        (dst / "data" / "conftest.py").write_text("forged\n")
    elif tamper == "missing":
        (dst / "data" / "expected.txt").unlink()
    elif tamper == "relink":
        (dst / "link").unlink()
        (dst / "link").symlink_to(other)
    elif tamper == "hardlink":  # same content, but a second name outside can change it
        (dst / "data" / "expected.txt").unlink()
        shutil.copy(src / "data" / "expected.txt", other)
        os.link(other, dst / "data" / "expected.txt")
    elif tamper == "fifo":
        (dst / "data" / "expected.txt").unlink()
        os.mkfifo(dst / "data" / "expected.txt")
    else:  # the whole folder swapped for a link to a look-alike
        look = tmp_path / "look"
        shutil.copytree(src, look, symlinks=True)
        shutil.rmtree(dst)
        dst.symlink_to(look)
    assert manifest(dst, own=True) != manifest(src)
    sync_tree(src, dst)
    assert not dst.is_symlink()
    assert manifest(dst, own=True) == manifest(src)


def test_takes_of_one_task_at_once_get_folders_of_their_own(tmp_path: Path) -> None:
    folders = TrialFolders(tmp_path)
    for _ in range(4):
        folders.give_back("t", folders.take("t", "x"))
    got: list[Path] = []
    barrier = threading.Barrier(6)

    def take() -> None:
        barrier.wait()
        got.append(folders.take("t", "x"))

    threads = [threading.Thread(target=take) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 6


def _trial(folders: TrialFolders) -> Path:
    """One trial of task t: each writable folder made fresh and written into."""
    folder = folders.take("t", "x")
    for name in WRITABLE:
        part = folders.fresh(folder / name)
        (part / "out.txt").write_text("left by the trial")
        (part / "sub").mkdir()
        part.chmod(0o777)
    return folder


def _inodes(folder: Path) -> dict[str, int]:
    return {name: os.lstat(folder / name).st_ino for name in WRITABLE}


def test_a_sealed_trials_writable_folders_are_kept_emptied_with_their_mode_as_made(
    tmp_path: Path,
) -> None:
    folders = TrialFolders(tmp_path / "work")
    folder = _trial(folders)
    before = _inodes(folder)
    folders.give_back("t", folder, sealed=True)
    for name in WRITABLE:
        assert os.listdir(folder / name) == []
        assert os.lstat(folder / name).st_mode & 0o7777 == 0o755
    assert folders.take("t", "x") == folder
    assert {name: os.lstat(folders.fresh(folder / name)).st_ino for name in WRITABLE} == before
    assert reaper.settle(30)
    # the small files wait in .spent/ until close (each deletion slows the disk), the rest
    # (the folders the trial made, a large file) is deleted in the background
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [".spent", folder.name]
    spent = sorted((tmp_path / "work" / ".spent").iterdir())
    assert [p.read_text() for p in spent] == ["left by the trial"] * len(WRITABLE)
    (folder / "app" / "big.bin").write_bytes(b"x" * (SPENT_FILE + 1))
    folders.give_back("t", folder, sealed=True)
    assert reaper.settle(30)
    assert len(list((tmp_path / "work" / ".spent").iterdir())) == len(WRITABLE)
    folders.close()
    assert reaper.settle(30)
    assert list((tmp_path / "work").iterdir()) == []


def test_an_unsealed_trials_writable_folders_go_whole(tmp_path: Path) -> None:
    """A process of the trial may still hold them (no pids cgroup told that all are gone):
    they go to the reaper, folder and all, and the next trial gets new ones."""
    folders = TrialFolders(tmp_path / "work")
    folder = _trial(folders)
    held = os.open(folder / "app", os.O_RDONLY | os.O_DIRECTORY)  # keeps its inode number
    try:
        folders.give_back("t", folder, sealed=False)
        assert not any(os.path.lexists(folder / name) for name in WRITABLE)
        assert folders.take("t", "x") == folder
        assert os.lstat(folders.fresh(folder / "app")).st_ino != os.fstat(held).st_ino
    finally:
        os.close(held)


def _set_flag(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, fsflags.GETFLAGS, bytes(8))[:4], "little")
        fcntl.ioctl(fd, fsflags.SETFLAGS, (flags | 0x40).to_bytes(8, "little"))  # chattr +d
    except OSError as exc:
        pytest.skip(f"platform limit: this filesystem has no inode flags ({exc})")
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "tamper", ["file", "mode", "xattr", "flag", "link", "swapped", "grown", "owner"]
)
def test_a_kept_writable_folder_left_otherwise_is_made_anew(tmp_path: Path, tamper: str) -> None:
    """Whatever changed a kept folder after its trial ended, or what emptying does not
    undo, and the next trial gets a new, empty folder (the old one, and what a link named,
    untouched by the new trial)."""
    folders = TrialFolders(tmp_path / "work")
    folder = _trial(folders)
    part = folder / "app"
    if tamper == "grown":  # a folder that held many entries keeps its size: not as made
        for i in range(400):
            (part / f"f{i:04d}-{'x' * 40}").write_text("")
    folders.give_back("t", folder, sealed=True)
    held = os.open(part, os.O_RDONLY | os.O_DIRECTORY)
    outside = tmp_path / "outside"
    outside.mkdir()
    if tamper == "file":
        (part / "planted").write_text("for the next trial")
    elif tamper == "mode":
        part.chmod(0o2777)
    elif tamper == "xattr":
        os.setxattr(part, "user.planted", b"1")
    elif tamper == "flag":
        _set_flag(part)
    elif tamper == "link":
        part.rmdir()
        part.symlink_to(outside)
    elif tamper == "swapped":  # a look-alike: empty, same mode
        part.rename(tmp_path / "old-app")
        part.mkdir()
    elif tamper == "owner":
        os.chown(part, 1234, 1234)
    try:
        assert folders.take("t", "x") == folder
        got = folders.fresh(part)
        st = os.lstat(got)
        assert got == part and not part.is_symlink() and os.listdir(part) == []
        assert st.st_ino != os.fstat(held).st_ino
        assert (st.st_uid, st.st_mode & 0o7777, os.listxattr(part)) == (os.getuid(), 0o755, [])
        assert os.listdir(outside) == []
    finally:
        os.close(held)
