"""rsiframe.audit.evidence: a candidate's diff read from repo.git, and artifacts read a
page at a time with their hash checked, never trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.archive.log import put_artifact
from rsiframe.archive.state import Candidate
from rsiframe.audit import evidence
from rsiframe.audit.evidence import Pager, Repo, diff_base, read_json, read_text, unified
from rsiframe.errors import ArchiveCorrupt
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import snapshot


def _commit(repo: CandidateRepo, root: Path, files: dict[str, str], parent: str | None) -> str:
    for name, text in files.items():
        (root / name).write_text(text)
    snap = snapshot(root)
    return repo.commit(repo.store(snap), parent, "c", f"refs/test/{len(files)}{parent}")


def test_a_diff_between_two_commits_per_file(tmp_path: Path) -> None:
    git = CandidateRepo.create(tmp_path / "repo.git")
    work = tmp_path / "w"
    work.mkdir()
    first = _commit(git, work, {"config.yaml": "level: 1\n", "old.txt": "x\n"}, None)
    (work / "old.txt").unlink()
    (work / "bin.dat").write_bytes(b"\0\1\2")
    second = _commit(git, work, {"config.yaml": "level: 2\n"}, first)
    diffs = {d.path: d for d in Repo(tmp_path / "repo.git").diff(first, second)}
    assert {p: d.kind for p, d in diffs.items()} == {
        "config.yaml": "modified",
        "old.txt": "deleted",
        "bin.dat": "added",
    }
    assert "-level: 1\n+level: 2\n" in diffs["config.yaml"].text
    assert diffs["bin.dat"].text == "(binary file: 0 -> 3 bytes)"
    assert set(d.path for d in Repo(tmp_path / "repo.git").diff(None, first)) == {
        "config.yaml",
        "old.txt",
    }


def test_large_files_are_not_diffed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "MAX_DIFF_BYTES", 10)
    assert unified(b"a" * 8, b"b" * 8, "f", "f") == "(large file: 8 -> 8 bytes; not diffed)"
    assert unified(b"same\n", b"same\n", "f", "f") == "(no textual change)"


def test_a_rejected_mutation_is_diffed_from_its_evidence_commit() -> None:
    parent = Candidate("c0000", None, 0, 0, commit="p" * 40)
    child = Candidate("c0001", "c0000", 1, 1, rejected={"commit": "e" * 40})
    assert diff_base(child, parent) == ("p" * 40, "e" * 40)
    committed = Candidate("c0002", "c0000", 1, 2, commit="n" * 40, parent_commit="q" * 40)
    assert diff_base(committed, parent) == ("q" * 40, "n" * 40)


def test_artifacts_are_paged_and_their_hash_checked(tmp_path: Path) -> None:
    digest = put_artifact(tmp_path, b"0123456789" * 3)
    pager = Pager(tmp_path, digest, page_bytes=8)
    assert (pager.pages, pager.page(0), pager.page(3)) == (4, "01234567", "456789")
    assert pager.check()
    doc = put_artifact(tmp_path, b'{"a": 1}')
    assert read_json(tmp_path, doc) == {"a": 1}
    pager.path.write_bytes(b"edited")
    assert not pager.check() and read_text(tmp_path, digest) == "edited"
    Pager(tmp_path, doc).path.write_bytes(b'{"a": 2}')
    with pytest.raises(ArchiveCorrupt, match="does not match its hash"):
        read_json(tmp_path, doc)
    missing = "sha256:" + "0" * 64
    assert read_text(tmp_path, missing) == f"(artifact {missing} is missing)"
