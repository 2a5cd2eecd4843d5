"""rsiframe.repo.guardrail: every change of a mutation is checked against its surface."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rsiframe.repo.gittree import (
    MODE_FILE,
    MODE_GITLINK,
    Entry,
    FlatTree,
    Snapshot,
    blob_sha,
    snapshot,
)
from rsiframe.repo.guardrail import check, symlink_escapes
from rsiframe.surface import Surface

SURFACE = Surface(include=("agent/**", "config.yaml"), exclude=("agent/frozen/",))


def _seed(root: Path) -> None:
    (root / "agent" / "frozen").mkdir(parents=True)
    (root / "agent" / "main.py").write_text("print('hi')\n")
    (root / "agent" / "frozen" / "rules.txt").write_text("rules\n")
    (root / "config.yaml").write_text("level: 1\n")
    (root / "eval").mkdir()
    (root / "eval" / "run.sh").write_text("#!/bin/sh\n")
    (root / "README.md").write_text("readme\n")


@pytest.fixture
def parent_and_child(tmp_path: Path) -> tuple[FlatTree, Path]:
    """The parent's flat tree and a copy of its folder for the mutation to edit."""
    parent_dir = tmp_path / "parent"
    parent_dir.mkdir()
    _seed(parent_dir)
    child = tmp_path / "child"
    shutil.copytree(parent_dir, child, symlinks=True)
    return snapshot(parent_dir).entries, child


def _violations(parent: FlatTree, child: Path, surface: Surface = SURFACE) -> list[tuple[str, str]]:
    report = check(parent, snapshot(child), surface)
    assert report.ok == (not report.violations)
    return sorted((v.path, v.kind) for v in report.violations)


def test_unchanged_tree_is_ok(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    report = check(parent, snapshot(child), SURFACE)
    assert report.ok
    assert report.changes == []
    assert report.violations == []


def test_changes_inside_the_surface_pass(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "agent" / "main.py").write_text("print('better')\n")  # edit
    (child / "agent" / "lib").mkdir()
    (child / "agent" / "lib" / "util.py").write_text("x = 1\n")  # add
    (child / "config.yaml").unlink()  # delete
    (child / "agent" / "tool.sh").write_text("#!/bin/sh\n")
    (child / "agent" / "tool.sh").chmod(0o755)  # executable add
    (child / "agent" / "link").symlink_to("main.py")  # link staying in the tree
    report = check(parent, snapshot(child), SURFACE)
    assert report.violations == []
    assert report.ok
    kinds = sorted((c.kind, c.path) for c in report.changes)
    assert kinds == [
        ("added", "agent/lib/util.py"),
        ("added", "agent/link"),
        ("added", "agent/tool.sh"),
        ("deleted", "config.yaml"),
        ("modified", "agent/main.py"),
    ]


def test_rename_inside_the_surface_passes(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "agent" / "main.py").rename(child / "agent" / "entry.py")
    report = check(parent, snapshot(child), SURFACE)
    assert report.ok
    assert [(c.kind, c.path, c.old_path) for c in report.changes] == [
        ("renamed", "agent/entry.py", "agent/main.py")
    ]


def test_add_outside_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "eval" / "extra.sh").write_text("echo pwned\n")
    assert _violations(parent, child) == [("eval/extra.sh", "added")]


def test_edit_outside_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "README.md").write_text("changed\n")
    assert _violations(parent, child) == [("README.md", "modified")]


def test_edit_in_excluded_part_of_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "agent" / "frozen" / "rules.txt").write_text("no rules\n")
    assert _violations(parent, child) == [("agent/frozen/rules.txt", "modified")]


def test_delete_outside_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "eval" / "run.sh").unlink()
    assert _violations(parent, child) == [("eval/run.sh", "deleted")]


def test_rename_from_inside_to_outside(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "agent" / "main.py").rename(child / "eval" / "main.py")
    report = check(parent, snapshot(child), SURFACE)
    assert [(v.path, v.kind) for v in report.violations] == [("eval/main.py", "renamed")]
    assert "outside the surface" in report.violations[0].reason


def test_rename_from_outside_to_inside(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "README.md").rename(child / "agent" / "README.md")
    assert _violations(parent, child) == [("README.md", "renamed")]


def test_chmod_outside_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "README.md").chmod(0o755)
    assert _violations(parent, child) == [("README.md", "mode")]


def test_type_change_outside_surface(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "README.md").unlink()
    (child / "README.md").symlink_to("agent/main.py")
    assert _violations(parent, child) == [("README.md", "type")]


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc/passwd", "../..", "../../outside"])
def test_symlink_inside_surface_pointing_out_of_the_tree(
    parent_and_child: tuple[FlatTree, Path], target: str
) -> None:
    parent, child = parent_and_child
    (child / "agent" / "evil").symlink_to(target)
    report = check(parent, snapshot(child), SURFACE)
    assert [(v.path, v.kind) for v in report.violations] == [("agent/evil", "added")]
    assert "outside the tree" in report.violations[0].reason
    assert target in report.violations[0].reason


def test_symlink_retargeted_out_of_the_tree(tmp_path: Path) -> None:
    parent_dir = tmp_path / "p2"
    (parent_dir / "agent").mkdir(parents=True)
    (parent_dir / "agent" / "link").symlink_to("../config.yaml")
    (parent_dir / "config.yaml").write_text("x")
    parent = snapshot(parent_dir).entries
    child = tmp_path / "c2"
    shutil.copytree(parent_dir, child, symlinks=True)
    assert check(parent, snapshot(child), SURFACE).ok  # the link stays inside the tree
    (child / "agent" / "link").unlink()
    (child / "agent" / "link").symlink_to("../../config.yaml")
    assert _violations(parent, child) == [("agent/link", "modified")]


def test_symlink_escaping_through_another_symlink(
    parent_and_child: tuple[FlatTree, Path],
) -> None:
    """Two links that each look inside the tree, but together resolve outside it."""
    parent, child = parent_and_child
    (child / "agent" / "self").symlink_to(".")  # agent/self -> agent
    # lexically agent/self/../.. is the tree root; really it is agent/../.., the root's parent
    (child / "agent" / "up").symlink_to("self/../..")
    up = child / "agent" / "up"
    assert not symlink_escapes("agent/self", ".")
    assert os.path.realpath(up) == str(child.parent.resolve())  # outside the tree on disk
    report = check(parent, snapshot(child), SURFACE)
    assert any(v.path == "agent/up" for v in report.violations), report.violations


def test_symlink_escapes_helper() -> None:
    assert symlink_escapes("a/l", "/abs")
    assert symlink_escapes("a/l", "../..")
    assert symlink_escapes("a/l", "../../x")
    assert symlink_escapes("l", "..")
    assert not symlink_escapes("a/l", "..")
    assert not symlink_escapes("a/l", "../b")
    assert not symlink_escapes("a/b/l", "../../c")
    assert not symlink_escapes("l", "a/../b")
    assert not symlink_escapes("l", "..x")  # a file called "..x" is inside


def test_git_directory_written_anywhere(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    hooks = child / "agent" / "sub" / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nrm -rf /\n")
    report = check(parent, snapshot(child), Surface(include=("**",)))
    assert [(v.path, v.kind) for v in report.violations] == [("agent/sub/.git", "forbidden")]
    assert ".git" in report.violations[0].reason
    assert not report.ok


def test_git_file_at_root(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / ".git").write_text("gitdir: /somewhere/else\n")
    assert _violations(parent, child, Surface(include=("**",))) == [(".git", "forbidden")]


def test_gitmodules_added_even_when_surface_allows(
    parent_and_child: tuple[FlatTree, Path],
) -> None:
    parent, child = parent_and_child
    (child / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = /tmp/x\n')
    (child / "agent" / ".gitmodules").write_text("[submodule]\n")
    report = check(parent, snapshot(child), Surface(include=("**",)))
    assert sorted((v.path, v.kind) for v in report.violations) == [
        (".gitmodules", "added"),
        ("agent/.gitmodules", "added"),
    ]
    assert all(".gitmodules may not change" in v.reason for v in report.violations)


def test_gitmodules_edit_and_delete_are_refused(tmp_path: Path) -> None:
    allow_all = Surface(include=("**",))
    base = tmp_path / "base"
    base.mkdir()
    (base / ".gitmodules").write_text("a\n")
    parent = snapshot(base).entries
    (base / ".gitmodules").write_text("b\n")
    assert [(v.path, v.kind) for v in check(parent, snapshot(base), allow_all).violations] == [
        (".gitmodules", "modified")
    ]
    (base / ".gitmodules").unlink()
    assert [(v.path, v.kind) for v in check(parent, snapshot(base), allow_all).violations] == [
        (".gitmodules", "deleted")
    ]


def test_gitmodules_renamed_away_is_refused(tmp_path: Path) -> None:
    """Moving .gitmodules elsewhere changes it as much as deleting it does."""
    base = tmp_path / "base"
    base.mkdir()
    (base / ".gitmodules").write_text('[submodule "x"]\n')
    parent = snapshot(base).entries
    (base / ".gitmodules").rename(base / "notes.txt")
    report = check(parent, snapshot(base), Surface(include=("**",)))
    assert [c.kind for c in report.changes] == ["renamed"]
    assert any(".gitmodules" in v.reason for v in report.violations), report.violations


def test_fifo_is_forbidden(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    os.mkfifo(child / "agent" / "pipe")
    report = check(parent, snapshot(child), SURFACE)
    assert [(v.path, v.kind) for v in report.violations] == [("agent/pipe", "forbidden")]
    assert "special file" in report.violations[0].reason


def test_gitlink_in_new_tree_is_refused() -> None:
    new = {"agent/sub": Entry(MODE_GITLINK, "1" * 40)}
    snap = Snapshot(root=Path("/nonexistent"), entries=new)
    report = check({}, snap, Surface(include=("**",)))
    assert [(v.path, v.kind) for v in report.violations] == [("agent/sub", "added")]
    assert "gitlink" in report.violations[0].reason


def test_several_violations_are_all_reported(parent_and_child: tuple[FlatTree, Path]) -> None:
    parent, child = parent_and_child
    (child / "README.md").write_text("x")
    (child / "eval" / "run.sh").unlink()
    (child / "agent" / "main.py").write_text("fine")
    (child / "agent" / "abs").symlink_to("/")
    assert _violations(parent, child) == [
        ("README.md", "modified"),
        ("agent/abs", "added"),
        ("eval/run.sh", "deleted"),
    ]


def test_parent_entries_are_compared_by_mode_and_blob(tmp_path: Path) -> None:
    # a parent tree given directly: a file whose content matches is unchanged
    (tmp_path / "f").write_text("same")
    parent = {"f": Entry(MODE_FILE, blob_sha(b"same"))}
    assert check(parent, snapshot(tmp_path), Surface(include=())).ok
