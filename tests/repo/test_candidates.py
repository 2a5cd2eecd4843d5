"""rsiframe.repo.candidates: one commit per candidate in a bare repository, checked exports."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

import rsiframe.repo.candidates as candidates_mod
from rsiframe.errors import RunFolderError
from rsiframe.repo.candidates import (
    CANDIDATE_REFS,
    REJECTED_REFS,
    CandidateRepo,
    ExportMismatch,
    fresh_dir,
)
from rsiframe.repo.gittree import MODE_EXEC, MODE_FILE, MODE_LINK, Entry, blob_sha, snapshot
from rsiframe.util import reaper


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _make_seed(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "agent").mkdir()
    (root / "agent" / "main.py").write_text("print('seed')\n")
    (root / "agent" / "run.sh").write_text("#!/bin/sh\nexec python3 main.py\n")
    (root / "agent" / "run.sh").chmod(0o755)
    (root / "config.yaml").write_text("level: 1\n")
    (root / "latest").symlink_to("agent/main.py")
    (root / "data" / "nested").mkdir(parents=True)
    (root / "data" / "nested" / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return root


@pytest.fixture
def repo(tmp_path: Path):  # type: ignore[no-untyped-def]
    r = CandidateRepo.create(tmp_path / "repo.git")
    yield r
    r.close()


def _ref(n: int) -> str:
    return f"{CANDIDATE_REFS}/c{n:04d}"


def test_create_makes_a_bare_repository(tmp_path: Path, repo: CandidateRepo) -> None:
    assert _git(tmp_path / "repo.git", "rev-parse", "--is-bare-repository") == "true"


def test_opening_a_non_repository_fails(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="not a git repository"):
        CandidateRepo(tmp_path / "missing.git")
    (tmp_path / "plain").mkdir()
    with pytest.raises(RunFolderError):
        CandidateRepo(tmp_path / "plain")


def test_store_and_commit_seed_and_child(tmp_path: Path, repo: CandidateRepo) -> None:
    git_dir = tmp_path / "repo.git"
    seed = _make_seed(tmp_path / "seed")
    snap = snapshot(seed)
    tree = repo.store(snap)
    assert tree == snap.tree_sha
    assert _git(git_dir, "cat-file", "-t", tree) == "tree"

    c0 = repo.commit(tree, None, "seed", _ref(0))
    assert _git(git_dir, "rev-parse", _ref(0)) == c0
    assert _git(git_dir, "rev-parse", f"{c0}^{{tree}}") == tree
    assert repo.parents_of(c0) == []
    assert _git(git_dir, "log", "--format=%s", c0) == "seed"

    (seed / "config.yaml").write_text("level: 2\n")
    child_snap = snapshot(seed)
    child_tree = repo.store(child_snap)
    c1 = repo.commit(child_tree, c0, "child of c0000", _ref(1))
    assert _git(git_dir, "rev-parse", _ref(1)) == c1
    assert _git(git_dir, "rev-parse", f"{c1}^@") == c0  # the git parent is the parent candidate
    assert repo.parents_of(c1) == [c0]
    assert repo.tree_of(c1) == child_tree
    assert repo.tree_of(c0) == tree
    # only config.yaml differs between the two commits, as git sees it
    assert _git(git_dir, "diff", "--name-only", c0, c1) == "config.yaml"
    # the object database is sound
    _git(git_dir, "fsck", "--strict", "--no-dangling")


def test_commit_with_two_candidates_from_same_parent(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    (seed / "config.yaml").write_text("level: 5\n")
    c1 = repo.commit(repo.store(snapshot(seed)), c0, "a", _ref(1))
    (seed / "config.yaml").write_text("level: 6\n")
    c2 = repo.commit(repo.store(snapshot(seed)), c0, "b", _ref(2))
    assert repo.parents_of(c1) == repo.parents_of(c2) == [c0]
    assert len({c0, c1, c2}) == 3
    refs = _git(tmp_path / "repo.git", "for-each-ref", "--format=%(refname) %(objectname)")
    assert refs.splitlines() == [f"{_ref(0)} {c0}", f"{_ref(1)} {c1}", f"{_ref(2)} {c2}"]


def test_same_tree_stored_twice_is_idempotent(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    t1 = repo.store(snapshot(seed))
    t2 = repo.store(snapshot(seed))
    assert t1 == t2
    _git(tmp_path / "repo.git", "fsck", "--strict")


def test_flat_tree_read_and_has_commit(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    snap = snapshot(seed)
    c0 = repo.commit(repo.store(snap), None, "seed", _ref(0))
    flat = repo.flat_tree(c0)
    assert flat == snap.entries
    assert flat["agent/run.sh"] == Entry(MODE_EXEC, snap.entries["agent/run.sh"].sha)
    assert flat["config.yaml"].mode == MODE_FILE
    assert flat["latest"] == Entry(MODE_LINK, blob_sha(b"agent/main.py"))
    # the returned dict is a copy: changing it does not change the cache
    flat.pop("config.yaml")
    assert "config.yaml" in repo.flat_tree(c0)

    assert repo.read(c0, "config.yaml") == b"level: 1\n"
    assert repo.read(c0, "latest") == b"agent/main.py"
    assert repo.read(c0, "data/nested/blob.bin") == bytes(range(256)) * 4
    with pytest.raises(KeyError):
        repo.read(c0, "nope")

    assert repo.has_commit(c0)
    assert not repo.has_commit(repo.tree_of(c0))  # a tree is not a commit
    assert not repo.has_commit("f" * 40)
    assert not repo.has_commit("not-a-sha")


def test_has_commit_is_false_for_the_null_sha(repo: CandidateRepo) -> None:
    # no object with the all-zero name exists in any repository
    assert not repo.has_commit("0" * 40)


def test_export_reproduces_files_modes_and_links(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    snap = snapshot(seed)
    c0 = repo.commit(repo.store(snap), None, "seed", _ref(0))
    dest = tmp_path / "export"
    assert repo.export(c0, dest) == snap.tree_sha
    assert (dest / "agent" / "main.py").read_text() == "print('seed')\n"
    assert (dest / "data" / "nested" / "blob.bin").read_bytes() == bytes(range(256)) * 4
    assert os.stat(dest / "agent" / "run.sh").st_mode & stat.S_IXUSR
    assert not os.stat(dest / "config.yaml").st_mode & stat.S_IXUSR
    assert (dest / "latest").is_symlink()
    assert os.readlink(dest / "latest") == "agent/main.py"
    assert snapshot(dest).tree_sha == snap.tree_sha
    # git agrees with what was exported
    assert _git(tmp_path / "repo.git", "rev-parse", f"{c0}^{{tree}}") == snapshot(dest).tree_sha


def test_export_of_an_older_candidate(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    (seed / "agent" / "main.py").unlink()
    (seed / "latest").unlink()
    c1 = repo.commit(repo.store(snapshot(seed)), c0, "child", _ref(1))
    repo.export(c1, tmp_path / "e1")
    repo.export(c0, tmp_path / "e0")
    assert not (tmp_path / "e1" / "agent" / "main.py").exists()
    assert (tmp_path / "e0" / "agent" / "main.py").exists()


def test_export_mismatch_when_hash_differs(
    tmp_path: Path, repo: CandidateRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("something else")
    real_snapshot = candidates_mod.snapshot
    monkeypatch.setattr(candidates_mod, "snapshot", lambda root, ignore=(): real_snapshot(other))
    with pytest.raises(ExportMismatch, match=c0[:12]):
        repo.export(c0, tmp_path / "export")


def test_an_export_over_an_older_one_leaves_exactly_the_tree_writing_only_what_differs(
    tmp_path: Path, repo: CandidateRepo
) -> None:
    """A recycled export (:meth:`CandidateRepo.verified_export`) is rewritten in place:
    what is not in the tree goes (a .git folder included), what is another kind is made
    anew, nothing is written through a link or a second hard link, and a file that already
    holds its bytes keeps its inode."""
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    dest = tmp_path / "export"
    repo.export(c0, dest)
    kept = os.lstat(dest / "agent" / "main.py").st_ino
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (dest / "planted.txt").write_text("not in the commit")
    (dest / ".git").mkdir()
    (dest / "config.yaml").unlink()
    (dest / "config.yaml").symlink_to(outside)  # a link where a file belongs
    (dest / "agent" / "run.sh").unlink()
    os.link(outside, dest / "agent" / "run.sh")  # a second name of a file outside
    (dest / "latest").unlink()
    (dest / "latest").mkdir()  # a folder where a link belongs
    (dest / "data" / "nested" / "blob.bin").chmod(0o755)
    assert repo.export(c0, dest) == snapshot(seed).tree_sha
    assert snapshot(dest, ignore=()).tree_sha == snapshot(seed).tree_sha
    assert not (dest / "planted.txt").exists() and not (dest / ".git").exists()
    assert outside.read_text() == "outside\n"
    assert os.lstat(dest / "agent" / "run.sh").st_nlink == 1
    assert os.lstat(dest / "agent" / "main.py").st_ino == kept


def test_export_mismatch_when_a_written_file_is_corrupted(
    tmp_path: Path, repo: CandidateRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsiframe.repo import exportdir

    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    real_put = exportdir._put_file

    def corrupting_put(target: Path, data: bytes, mode: int) -> None:
        if target.name == "config.yaml":
            data = data + b"# tampered\n"
        real_put(target, data, mode)

    monkeypatch.setattr(exportdir, "_put_file", corrupting_put)
    with pytest.raises(ExportMismatch):
        repo.export(c0, tmp_path / "export")


def test_commit_of_empty_tree(tmp_path: Path, repo: CandidateRepo) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    tree = repo.store(snapshot(empty))
    c = repo.commit(tree, None, "empty", _ref(0))
    assert repo.flat_tree(c) == {}
    assert repo.export(c, tmp_path / "out") == tree
    _git(tmp_path / "repo.git", "fsck", "--strict", "--no-dangling")


def test_reopen_existing_repository(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    again = CandidateRepo(tmp_path / "repo.git")
    try:
        assert again.has_commit(c0)
        assert again.flat_tree(c0) == repo.flat_tree(c0)
    finally:
        again.close()


def test_fresh_dir(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "f").write_text("x")
    assert fresh_dir(d) == d
    assert list(d.iterdir()) == []
    new = tmp_path / "a" / "b"
    assert fresh_dir(new).is_dir()


@pytest.mark.parametrize("target_exists", [False, True])
def test_fresh_dir_replaces_a_symlink(tmp_path: Path, target_exists: bool) -> None:
    elsewhere = tmp_path / "elsewhere"
    if target_exists:
        elsewhere.mkdir()
        (elsewhere / "keep.txt").write_text("must survive")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    fresh_dir(link)
    assert link.is_dir() and not link.is_symlink()
    assert list(link.iterdir()) == []
    if target_exists:  # the link is removed, never what it points to
        assert (elsewhere / "keep.txt").read_text() == "must survive"


def test_commit_with_entries_seeds_the_flat_tree(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    snap = snapshot(seed)
    c0 = repo.commit(repo.store(snap), None, "seed", _ref(0), entries=snap.entries)
    assert repo.flat_tree(c0) == snap.entries
    # a fresh reader, without the cache, sees the same tree in git
    again = CandidateRepo(tmp_path / "repo.git")
    try:
        assert again.flat_tree(c0) == snap.entries
        assert again.tree_of(c0) == snap.tree_sha
    finally:
        again.close()


@pytest.mark.parametrize("ref", ["heads/x", "refs/../../escape", "refs/rsiframe/../../x"])
def test_set_ref_refuses_bad_names(tmp_path: Path, repo: CandidateRepo, ref: str) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", _ref(0))
    with pytest.raises(ValueError, match="bad ref name"):
        repo.set_ref(ref, c0)
    assert not (tmp_path / "escape").exists()


def test_rejected_refs_namespace(tmp_path: Path, repo: CandidateRepo) -> None:
    seed = _make_seed(tmp_path / "seed")
    c0 = repo.commit(repo.store(snapshot(seed)), None, "seed", f"{REJECTED_REFS}/c0007")
    assert _git(tmp_path / "repo.git", "rev-parse", f"{REJECTED_REFS}/c0007") == c0


def test_verified_export_is_reused_rechecked_and_bounded(tmp_path: Path) -> None:
    repo = CandidateRepo.create(tmp_path / "repo.git", tmp_path / "exports")
    seed = _make_seed(tmp_path / "seed")
    snap = snapshot(seed)
    c0 = repo.commit(repo.store(snap), None, "seed", _ref(0))
    first = repo.verified_export("c0000", c0, snap.tree_sha)
    marker = (first / "config.yaml").stat().st_mtime_ns
    assert repo.verified_export("c0000", c0, snap.tree_sha) == first  # reused as it is
    assert (first / "config.yaml").stat().st_mtime_ns == marker
    (first / "config.yaml").write_text("level: 99\n")  # an altered export is not reused
    again = repo.verified_export("c0000", c0, snap.tree_sha)
    assert (again / "config.yaml").read_text() == "level: 1\n"
    assert snapshot(again).tree_sha == snap.tree_sha
    n = candidates_mod.KEEP_EXPORTS + candidates_mod.SPARE_EXPORTS + 3
    for i in range(1, n):
        repo.verified_export(f"c{i:04d}", c0, snap.tree_sha)
    # each pruned export is set aside and becomes the next new one: one spare at a time
    assert _exports(tmp_path / "exports") == (candidates_mod.KEEP_EXPORTS, 1)
    for i in range(candidates_mod.SPARE_EXPORTS + 2):  # dropped at once: spares, then reaped
        repo.drop_export(f"c{n - 1 - i:04d}")
    assert reaper.settle(30)
    left = candidates_mod.KEEP_EXPORTS - candidates_mod.SPARE_EXPORTS - 2
    assert _exports(tmp_path / "exports") == (left, candidates_mod.SPARE_EXPORTS)
    repo.close()


def _exports(folder: Path) -> tuple[int, int]:
    """(exports, spares) in an export folder; nothing else is left there."""
    names = [p.name for p in folder.iterdir()]
    spares = [n for n in names if n.startswith(".spare-")]
    assert all(not n.startswith(".") for n in names if n not in spares), names
    return len(names) - len(spares), len(spares)


def test_an_export_no_longer_kept_becomes_the_next_one_rewritten_where_it_differs(
    tmp_path: Path,
) -> None:
    """A dropped export is set aside and the next new export is written into it: the
    folder and every file whose bytes match keep their inodes, and the result is the new
    commit's tree exactly, even where the spare was tampered with meanwhile."""
    repo = CandidateRepo.create(tmp_path / "repo.git", tmp_path / "exports")
    seed = _make_seed(tmp_path / "seed")
    s0 = snapshot(seed)
    c0 = repo.commit(repo.store(s0), None, "seed", _ref(0))
    (seed / "config.yaml").write_text("level: 2\n")
    (seed / "agent" / "main.py").unlink()
    (seed / "new.txt").write_text("new\n")
    s1 = snapshot(seed)
    c1 = repo.commit(repo.store(s1), c0, "child", _ref(1))
    first = repo.verified_export("c0000", c0, s0.tree_sha)
    folder, blob = os.lstat(first).st_ino, os.lstat(first / "data" / "nested" / "blob.bin").st_ino
    repo.drop_export("c0000")
    (spare,) = (tmp_path / "exports").iterdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (spare / "new.txt").symlink_to(outside)  # planted where the next tree has a file
    second = repo.verified_export("c0001", c1, s1.tree_sha)
    assert os.lstat(second).st_ino == folder
    assert os.lstat(second / "data" / "nested" / "blob.bin").st_ino == blob
    assert snapshot(second, ignore=()).tree_sha == s1.tree_sha
    assert outside.read_text() == "outside\n"
    assert [p.name for p in (tmp_path / "exports").iterdir()] == ["c0001"]
    repo.close()
