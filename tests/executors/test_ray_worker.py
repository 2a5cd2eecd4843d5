"""rsiframe.executors.ray_worker without a cluster: packing, and the worker's own checks
of what arrived."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rsiframe.executors.ray_worker import (
    Job,
    PackMismatch,
    TaskPack,
    TreePack,
    evaluate,
    pack_folder,
    pack_tree,
    unpack,
)
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import snapshot
from tests.support.mini import Mini


def test_a_packed_tree_round_trips_and_is_verified(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a\n")
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("sub/run.sh")
    pack = pack_tree(src)
    assert pack.tree == snapshot(src, ignore=()).tree_sha
    dest = tmp_path / "dest"
    unpack(pack.files, dest)
    assert snapshot(dest, ignore=()).tree_sha == pack.tree
    assert (dest / "link").is_symlink() and (dest / "sub" / "run.sh").stat().st_mode & 0o100

    files, rows = pack_folder(src)
    unpack(files, tmp_path / "again")
    from rsiframe.tasks.taskset import file_rows

    assert file_rows(tmp_path / "again") == rows == file_rows(src)


@pytest.mark.parametrize("path", ["../escape", "/etc/x", "a/../../b", ""])
def test_unpack_refuses_paths_that_leave_the_folder(tmp_path: Path, path: str) -> None:
    with pytest.raises(PackMismatch):
        unpack([(path, "f", b"x")], tmp_path / "d")


def test_unpack_refuses_to_write_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with pytest.raises(PackMismatch):
        unpack([("l", "l", str(outside).encode()), ("l/x", "f", b"x")], tmp_path / "d")
    assert not (outside / "x").exists()


def _job(mini: Mini, tmp_path: Path, **over: object) -> tuple[Job, TaskPack]:
    from rsiframe.evaluators.local import LocalEngine

    config = LocalEngineConfig(agent='python3 "$RSI_CANDIDATE/agent.py"', sandbox="process")
    engine = LocalEngine(config, tmp_path / "w")
    files, rows = pack_folder(mini.tasks / "t1")
    job = Job(
        engine="local",
        config=config.model_dump(mode="json"),
        fingerprint=engine.fingerprint(),
        candidate=pack_tree(mini.seed),
        task_ids=["t1"],
        protected={},
    )
    for k, v in over.items():
        setattr(job, k, v)
    return job, TaskPack({"t1": files}, {"t1": rows})


def test_the_worker_evaluates_what_arrived(mini: Mini, tmp_path: Path) -> None:
    job, tasks = _job(mini, tmp_path)
    res = evaluate(job, tasks, "node-1")
    assert res.refused is None and res.node["node"] == "node-1"
    assert [r.reward for r in res.runs] == [1.0]
    traj = res.runs[0].trajectory_digest
    assert traj in res.blobs and all(
        d in res.blobs for d in res.runs[0].trajectory["artifacts"].values()
    )


def test_the_worker_refuses_another_evaluator(mini: Mini, tmp_path: Path) -> None:
    job, tasks = _job(mini, tmp_path, fingerprint="0" * 64)
    res = evaluate(job, tasks, "node-1")
    assert res.refused is not None and "differs from the run's" in res.refused
    assert res.runs == []


def test_the_worker_refuses_an_export_or_task_that_changed_in_transit(
    mini: Mini, tmp_path: Path
) -> None:
    job, tasks = _job(mini, tmp_path)
    bad = [(p, k, d + b"#" if p == "config.yaml" else d) for p, k, d in job.candidate.files]
    job.candidate = TreePack(bad, job.candidate.tree)
    with pytest.raises(PackMismatch, match="export hashes to"):
        evaluate(job, tasks, "n")
    job, tasks = _job(mini, tmp_path)
    tasks.rows["t1"] = {**tasks.rows["t1"], "tests/need.txt": "f:" + "0" * 64}
    with pytest.raises(PackMismatch, match="task t1 arrived different"):
        evaluate(job, tasks, "n")


def test_the_export_on_the_driver_is_what_the_repo_holds(mini: Mini, tmp_path: Path) -> None:
    repo = CandidateRepo.create(tmp_path / "repo.git")
    snap = snapshot(mini.seed)
    tree = repo.store(snap)
    commit = repo.commit(tree, None, "seed", "refs/rsi/c0", entries=snap.entries)
    repo.export(commit, tmp_path / "export")
    assert pack_tree(tmp_path / "export").tree == tree


def test_a_shipped_model_is_installed_only_when_it_matches_its_build_record(
    tmp_path: Path,
) -> None:
    """The evaluation task checks the model a build task shipped against the record's
    ``model_digest`` (as the build cache computes it) before the server may load it."""
    from types import SimpleNamespace

    from rsiframe.dth.build import files_of
    from rsiframe.executors.ray_worker import ModelPack, install_model
    from rsiframe.util.digest import sha256_json

    built = tmp_path / "built"
    built.mkdir()
    (built / "model.safetensors").write_bytes(b"weights" * 100)
    (built / "config.json").write_text("{}")
    rows = files_of(built)
    files = [(rel, "f", (built / rel).read_bytes()) for rel in sorted(rows)]
    record = {"name": "m", "model_digest": sha256_json(rows)}
    engine: Any = SimpleNamespace(builder=SimpleNamespace(models_root=tmp_path / "models"))

    target = install_model(engine, ModelPack(files, rows), record)
    assert target.parent == tmp_path / "models" and files_of(target) == rows
    assert install_model(engine, ModelPack(files, rows), record) == target  # reused

    (target / "model.safetensors").write_bytes(b"edited")  # an edited copy is replaced
    assert files_of(install_model(engine, ModelPack(files, rows), record)) == rows

    # bytes changed in transit, on a node that has no copy yet: refused, nothing left
    fresh: Any = SimpleNamespace(builder=SimpleNamespace(models_root=tmp_path / "other"))
    changed = [(r, k, b"other" if r == "model.safetensors" else d) for r, k, d in files]
    with pytest.raises(PackMismatch, match="arrived different"):
        install_model(fresh, ModelPack(changed, rows), record)
    assert list((tmp_path / "other").iterdir()) == []
    other = {"name": "m", "model_digest": sha256_json({**rows, "config.json": "0" * 64})}
    with pytest.raises(PackMismatch, match="does not hash to its model digest"):
        install_model(fresh, ModelPack(files, rows), other)
