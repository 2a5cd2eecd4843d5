"""rsiframe.study.export_mlflow and ``rsiframe export``, against a real MLflow tracking
store (SQLite): params, metrics stepped by evaluation, tags, artifacts; a second export
updates the same MLflow run; a grid is a parent run with a child per run; the run folder is
only read; the champion's symbolic links are never followed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import git
from mlflow.tracking import MlflowClient

from rsiframe.study.export_mlflow import RUN_TAG, flat_params, write_champion
from tests.support.cli import assert_user_error, cli, status_json
from tests.support.mini import Mini, run_mini, run_named
from tests.support.verify import tree_digest


def _export(mini: Mini, path: Path, *extra: str) -> tuple[dict, str]:
    uri = f"sqlite:///{mini.root / 'mlflow.db'}"
    res = cli(
        "export",
        path,
        "--mlflow",
        uri,
        "--artifact-location",
        str(mini.root / "mlartifacts"),
        "--json",
        *extra,
    )
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout), uri


def test_export_logs_a_run_and_a_second_export_updates_it(mini: Mini) -> None:
    out = run_mini(mini)
    before = tree_digest(out)
    st = status_json(out)
    first, uri = _export(mini, out)
    assert tree_digest(out) == before  # export only reads the run folder
    client = MlflowClient(tracking_uri=uri)
    (exp,) = [e for e in client.search_experiments() if e.name == "rsiframe"]
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == first["runs"][0]["mlflow_run_id"] and first["runs"][0]["created"]
    assert run.data.tags[RUN_TAG] == st["run_id"]
    assert run.data.tags["rsiframe.chain_head"] == st["head"]
    assert len(run.data.tags["rsiframe.method_digest"]) == 64
    assert run.data.params["budget.max_generations"] == "2"
    by_id = {c["id"]: c for c in st["candidates"]}
    assert run.data.metrics["champion.gate"] == by_id[st["champion"]]["scores"]["gate"]
    gate = client.get_metric_history(run.info.run_id, "gate")
    admitted = [c for c in st["candidates"] if c["state"] == "admitted"]
    assert sorted(m.value for m in gate) == sorted(c["scores"]["gate"] for c in admitted)
    steps = [m.step for m in sorted(gate, key=lambda m: m.step)]
    assert steps == sorted(steps) and steps[-1] <= st["budget"]["used"]["evaluations"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report", "champion"} <= artifacts
    report = client.list_artifacts(run.info.run_id, "report")
    assert [a.path for a in report] == ["report/report.html"]
    champion = {a.path for a in client.list_artifacts(run.info.run_id, "champion")}
    assert "champion/agent.py" in champion and "champion/config.yaml" in champion
    # again: the same MLflow run, nothing logged twice
    second, _ = _export(mini, out)
    assert second["runs"][0]["mlflow_run_id"] == run.info.run_id
    assert not second["runs"][0]["created"] and second["runs"][0]["metrics_logged"] == 0
    assert len(client.search_runs([exp.experiment_id])) == 1
    assert len(client.get_metric_history(run.info.run_id, "gate")) == len(gate)
    assert tree_digest(out) == before


def test_a_grid_exports_as_a_parent_with_a_child_per_run(mini: Mini) -> None:
    run_named(mini, "grid/a", "random_seed=1")
    run_named(mini, "grid/b", "random_seed=2")
    data, uri = _export(mini, mini.root / "grid")
    again, _ = _export(mini, mini.root / "grid")
    assert again["parent"] == data["parent"]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([data["experiment_id"]])
    assert len(runs) == 3  # parent + two children, not duplicated
    children = [r for r in runs if r.info.run_id != data["parent"]]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {data["parent"]}


def test_export_refuses_a_run_that_fails_verify_and_bad_input(mini: Mini) -> None:
    out = run_mini(mini)
    shutil.rmtree(out / "artifacts")
    uri = f"sqlite:///{mini.root / 'mlflow.db'}"
    assert_user_error(cli("export", out, "--mlflow", uri), 1, "does not verify")
    assert_user_error(cli("export", mini.root / "nope", "--mlflow", uri), 2, "no such folder")


def test_champion_links_are_listed_never_followed(tmp_path: Path) -> None:
    repo_dir = tmp_path / "repo.git"
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text("print(1)\n")
    (work / "key").symlink_to("/etc/passwd")
    repo = git.Repo.init(work)
    repo.index.add(["agent.py", "key"])
    commit = repo.index.commit("c").hexsha
    git.Repo.clone_from(work, repo_dir, bare=True)
    champ = SimpleNamespace(commit=commit)
    loaded = SimpleNamespace(
        state=SimpleNamespace(champion=lambda: champ), paths=SimpleNamespace(repo=repo_dir)
    )
    dest = tmp_path / "out"
    dest.mkdir()
    assert write_champion(loaded, dest) == ["key -> /etc/passwd"]  # type: ignore[arg-type]
    assert sorted(p.name for p in dest.iterdir()) == ["SYMLINKS.txt", "agent.py"]
    assert not any(p.is_symlink() for p in dest.rglob("*"))


def test_flat_params_dot_nested_keys_and_cut_long_values() -> None:
    flat = flat_params({"budget": {"max_generations": 2}, "slots": {"x": "y" * 7000}, "e": {}})
    assert flat["budget.max_generations"] == "2" and flat["e"] == "{}"
    assert len(flat["slots.x"]) == 6000
