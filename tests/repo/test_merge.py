"""rsiframe.repo.merge: the 3-way merge of two candidates and their merge base in the DAG."""

from __future__ import annotations

from pathlib import Path

from rsiframe.api import MergePlan
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import snapshot
from rsiframe.repo.merge import merge_base, three_way
from rsiframe.surface import Surface

# -- merge ----------------------------------------------------------------------------


def _commit(repo: CandidateRepo, root: Path, files: dict[str, str], parent: str | None) -> str:
    for name, text in files.items():
        (root / name).write_text(text)
    snap = snapshot(root)
    return repo.commit(repo.store(snap), parent, "c", f"refs/test/{len(files)}{parent}")


def test_three_way_merges_lines_resolves_conflicts_by_plan_and_keeps_outside_files(
    tmp_path: Path,
) -> None:
    repo = CandidateRepo.create(tmp_path / "repo.git")
    work = tmp_path / "w"
    work.mkdir()
    lines = "one\ntwo\nthree\nfour\nfive\n"
    base = _commit(repo, work, {"a.txt": lines, "b.txt": "x\n", "out.txt": "o\n"}, None)
    first = _commit(repo, work, {"a.txt": lines.replace("one", "ONE"), "b.txt": "first\n"}, base)
    second = _commit(
        repo,
        work,
        {"a.txt": lines.replace("five", "FIVE"), "b.txt": "second\n", "out.txt": "changed\n"},
        base,
    )
    surface = Surface(("a.txt", "b.txt"))
    for prefer, b_text in (("first", "first\n"), ("second", "second\n")):
        dest = tmp_path / f"merge-{prefer}"
        repo.export(first, dest)
        plan = MergePlan(partner="x", prefer=prefer)  # type: ignore[arg-type]
        out = three_way(repo, base, first, second, surface, plan, dest)
        assert (dest / "a.txt").read_text() == "ONE\ntwo\nthree\nfour\nFIVE\n"
        assert (dest / "b.txt").read_text() == b_text
        assert (dest / "out.txt").read_text() == "o\n"  # outside the surface: first's
        assert out.line_merged == ["a.txt"] and out.conflicts == {"b.txt": prefer}
    dest = tmp_path / "per-file"
    repo.export(first, dest)
    plan = MergePlan(partner="x", prefer="first", files={"b.*": "second"})
    three_way(repo, base, first, second, surface, plan, dest)
    assert (dest / "b.txt").read_text() == "second\n"
    repo.close()


def test_merge_base_is_the_nearest_common_ancestor_in_the_dag() -> None:
    dag = {"s": [], "a": ["s"], "b": ["s"], "c": ["a"], "d": ["a"], "m": ["c", "b"]}
    assert merge_base(dag, "c", "d") == "a"
    assert merge_base(dag, "m", "d") == "a"
    assert merge_base(dag, "b", "d") == "s"
    assert merge_base(dag, "c", "m") == "c"
