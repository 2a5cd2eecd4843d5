"""rsiframe.repo.gittree: pure-Python git trees, cross-checked against the real git binary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rsiframe.repo.gittree import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Entry,
    blob_sha,
    diff,
    snapshot,
    tree_hash,
)


def _git(*args: str, cwd: Path | None = None) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _git_tree(work: Path, git_dir: Path) -> str:
    """What real git computes for ``work`` (its repository kept outside the folder)."""
    _git("init", "-q", "--bare", str(git_dir))
    base = ("--git-dir", str(git_dir), "--work-tree", str(work))
    _git(*base, "config", "core.fileMode", "true")
    _git(*base, "config", "core.symlinks", "true")
    _git(*base, "add", "-A")
    return _git(*base, "write-tree")


def _tricky_tree(root: Path) -> None:
    (root / "a").mkdir(parents=True)
    (root / "a" / "inner.txt").write_text("inner\n")
    (root / "a" / "deeper" / "x").mkdir(parents=True)
    (root / "a" / "deeper" / "x" / "leaf.bin").write_bytes(bytes(range(256)))
    # these sort around the directory "a" only if it is compared as "a/"
    (root / "a-b").write_text("dash\n")
    (root / "a.c").write_text("dot\n")
    (root / "a0").write_text("zero\n")
    (root / "a_").write_text("underscore\n")
    (root / "B").write_text("upper\n")
    (root / "empty").write_bytes(b"")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("a/inner.txt")
    (root / "dirlink").symlink_to("a")
    (root / "dangling").symlink_to("does/not/exist")
    (root / "é-unicode.txt").write_text("unicode\n")
    (root / "emptydir").mkdir()


def test_tree_sha_matches_real_git(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _tricky_tree(work)
    snap = snapshot(work)
    assert snap.problems == []
    assert snap.tree_sha == _git_tree(work, tmp_path / "g.git")


def test_entries_have_git_modes_and_blob_shas(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _tricky_tree(work)
    snap = snapshot(work)
    assert snap.entries["run.sh"].mode == MODE_EXEC
    assert snap.entries["a-b"].mode == MODE_FILE
    assert snap.entries["link"] == Entry(MODE_LINK, blob_sha(b"a/inner.txt"))
    assert snap.entries["dirlink"].mode == MODE_LINK  # a link to a dir is not followed
    assert "dirlink/inner.txt" not in snap.entries
    assert snap.entries["a/deeper/x/leaf.bin"].sha == blob_sha(bytes(range(256)))
    assert "emptydir" not in snap.entries  # git stores no empty directories
    # the blob hashes agree with git hash-object
    assert snap.entries["a/inner.txt"].sha == _git("hash-object", str(work / "a" / "inner.txt"))
    assert snap.content("link") == b"a/inner.txt"
    assert snap.content("a.c") == b"dot\n"


def test_tree_sha_changes_with_content_mode_and_name(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "f").write_text("1")
    base = snapshot(work).tree_sha
    (work / "f").chmod(0o755)
    exec_sha = snapshot(work).tree_sha
    assert exec_sha != base
    assert exec_sha == _git_tree(work, tmp_path / "g1.git")
    (work / "f").chmod(0o644)
    assert snapshot(work).tree_sha == base
    (work / "f").write_text("2")
    assert snapshot(work).tree_sha != base
    (work / "f").write_text("1")
    (work / "f").rename(work / "g")
    assert snapshot(work).tree_sha != base


def test_empty_tree_is_gits_empty_tree(tmp_path: Path) -> None:
    assert snapshot(tmp_path).tree_sha == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert tree_hash({}) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def test_git_entries_and_special_files_are_problems(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text("ok")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".git").write_text("gitdir: /elsewhere\n")
    os.mkfifo(tmp_path / "sub" / "pipe")
    snap = snapshot(tmp_path)
    problem_paths = sorted(p for p, _ in snap.problems)
    assert problem_paths == [".git", "sub/.git", "sub/pipe"]
    reasons = dict(snap.problems)
    assert ".git" in reasons["sub/.git"]
    assert "special file" in reasons["sub/pipe"]
    # nothing inside .git and no problem path leaks into the tree
    assert sorted(snap.entries) == ["ok.txt"]


def test_default_ignore_drops_caches(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    for d in (tmp_path / "__pycache__", tmp_path / "pkg" / "__pycache__"):
        d.mkdir(parents=True)
        (d / "m.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (tmp_path / "pkg" / "stray.pyc").write_bytes(b"\x00")
    (tmp_path / "pkg" / ".pytest_cache").mkdir()
    (tmp_path / "pkg" / ".pytest_cache" / "v").write_text("cache")
    (tmp_path / "pkg" / "mod.py").write_text("y = 2\n")
    (tmp_path / ".DS_Store").write_bytes(b"junk")
    snap = snapshot(tmp_path)
    assert sorted(snap.entries) == ["m.py", "pkg/mod.py"]
    # with no ignore globs everything is taken
    full = snapshot(tmp_path, ignore=())
    assert "pkg/__pycache__/m.cpython-311.pyc" in full.entries
    assert "pkg/stray.pyc" in full.entries
    assert ".DS_Store" in full.entries
    # and custom globs are honoured
    custom = snapshot(tmp_path, ignore=("pkg/",))
    assert sorted(p for p in custom.entries if not p.startswith("__pycache__")) == [
        ".DS_Store",
        "m.py",
    ]


F1 = Entry(MODE_FILE, blob_sha(b"one"))
F2 = Entry(MODE_FILE, blob_sha(b"two"))
X1 = Entry(MODE_EXEC, blob_sha(b"one"))
L1 = Entry(MODE_LINK, blob_sha(b"one"))


def _kinds(changes) -> list[tuple[str, str, str | None]]:  # type: ignore[no-untyped-def]
    return [(c.kind, c.path, c.old_path) for c in changes]


def test_diff_identical_trees_is_empty() -> None:
    t = {"a": F1, "b/c": F2}
    assert diff(t, dict(t)) == []


def test_diff_reports_each_kind() -> None:
    old = {"keep": F1, "edit": F1, "gone": F2, "chmod": F2, "retype": F2}
    new = {
        "keep": F1,
        "edit": F2,
        "chmod": Entry(MODE_EXEC, F2.sha),
        "retype": Entry(MODE_LINK, F2.sha),
        "new/file": Entry(MODE_FILE, blob_sha(b"brand new")),
    }
    changes = diff(old, new)
    assert _kinds(changes) == [
        ("mode", "chmod", None),
        ("modified", "edit", None),
        ("deleted", "gone", None),
        ("added", "new/file", None),
        ("type", "retype", None),
    ]
    by_path = {c.path: c for c in changes}
    assert by_path["edit"].old == F1 and by_path["edit"].new == F2
    assert by_path["gone"].old == F2 and by_path["gone"].new is None
    assert by_path["new/file"].old is None


def test_diff_pairs_exact_renames() -> None:
    old = {"src/a.py": F1, "src/b.py": F2}
    new = {"lib/a.py": F1, "src/b.py": F2}
    changes = diff(old, new)
    assert _kinds(changes) == [("renamed", "lib/a.py", "src/a.py")]
    assert changes[0].old == F1 and changes[0].new == F1


def test_diff_does_not_pair_rename_with_different_mode() -> None:
    old = {"a.sh": F1}
    new = {"b.sh": X1}
    assert _kinds(diff(old, new)) == [("deleted", "a.sh", None), ("added", "b.sh", None)]
    # nor a file that became a symlink with the same blob
    assert _kinds(diff({"a": F1}, {"b": L1})) == [("deleted", "a", None), ("added", "b", None)]


def test_diff_pairs_each_source_at_most_once() -> None:
    old = {"a": F1}
    new = {"b": F1, "c": F1}
    changes = diff(old, new)
    assert [c.kind for c in changes] == ["renamed", "added"]
    assert changes[0].old_path == "a"
    # two identical deleted files become two renames
    changes = diff({"a1": F1, "a2": F1}, {"b1": F1, "b2": F1})
    assert sorted((c.old_path, c.path) for c in changes if c.kind == "renamed") == [
        ("a1", "b1"),
        ("a2", "b2"),
    ]


def test_diff_of_real_snapshots(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "x.txt").write_text("x")
    (d / "y.txt").write_text("y")
    before = snapshot(d).entries
    (d / "x.txt").rename(d / "z.txt")
    (d / "y.txt").chmod(0o755)
    after = snapshot(d).entries
    assert _kinds(diff(before, after)) == [("mode", "y.txt", None), ("renamed", "z.txt", "x.txt")]


def test_a_name_that_is_not_utf8_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    from rsiframe.repo.gittree import snapshot

    (tmp_path / "ok.txt").write_text("fine")
    with open(os.path.join(os.fsencode(tmp_path), b"bad-\xff.txt"), "w") as f:
        f.write("x")
    snap = snapshot(tmp_path)
    assert list(snap.entries) == ["ok.txt"]
    assert snap.problems == [("bad-\\xff.txt", "the path is not valid UTF-8 text")]
    assert snap.tree_sha  # the rest still hashes
