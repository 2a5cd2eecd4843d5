"""Issue 15's engine parts: staged evaluation, the merge slot (3-way merge, two parents),
validate ``minibatch`` with the framework's work-tree runner. Real runs on the mini
experiment (tests/support/mini.py; task t<i> is solved when the ``level`` knob is >= i)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cli import cli, events, status_json
from tests.support.merge import edit_recipe, run_and_verify
from tests.support.mini import Mini, make_mini

STAGES = "  stages: [{split: train, tasks: 2, min_score: 0.5}, {split: train}]\n"


def test_a_child_failing_the_cheap_stage_never_pays_for_the_full_splits(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    edit_recipe(
        mini,
        ("  engine: local\n", "  engine: local\n" + STAGES),
        ("{operator: improves_parent}", "{operator: always}"),
    )
    run_and_verify(mini)
    evs = events(mini.run_dir())
    started: dict[str, list[str]] = {}
    for e in evs:
        if e["type"] == "evaluation_started":
            started.setdefault(e["data"]["id"], []).append(e["data"]["split"])
    status = {c["id"]: c for c in status_json(mini.run_dir())["candidates"]}
    stopped = [cid for cid, c in status.items() if c["stopped_at"]]
    passed = [cid for cid, c in status.items() if c["parent"] and c["state"] == "admitted"]
    assert stopped and passed  # level <= 2 fails the 2-task stage, higher levels pass
    for cid in stopped:
        assert started[cid] == ["train@1"]  # one cheap evaluation, no train or gate
        assert status[cid]["state"] == "rejected"
        assert status[cid]["stopped_at"] == "train@1"
        assert "stopped at stage 1/3" in status[cid]["reasons"][0]
    for cid in passed:
        assert started[cid][:3] == ["train@1", "train", "gate"]  # (the champion: + sealed)
    assert status_json(mini.run_dir())["budget"]["used"]["evaluations"] == sum(
        len(v) for v in started.values()
    )
    # the stage subset is the same for every child (comparable, deterministic)
    subsets = {
        tuple(
            sorted(
                e["data"]["task"]
                for e in evs
                if e["type"] == "task_finished"
                and e["data"]["id"] == cid
                and e["data"]["split"] == "train@1"
            )
        )
        for cid in started
        if cid != "c0000"
    }
    assert len(subsets) == 1 and len(next(iter(subsets))) == 2
    assert "train@1" in cli("status", mini.run_dir()).stdout


def test_merges_are_git_merge_commits_with_two_parents_in_events_and_status(
    merge_run: Mini,
) -> None:
    mini = merge_run
    proposed = [e["data"] for e in events(mini.run_dir()) if e["type"] == "candidate_proposed"]
    merges = [p for p in proposed if p["parents"]]
    assert merges, "rate 0.5 over 9 proposals made no merge"
    status = {c["id"]: c for c in status_json(mini.run_dir())["candidates"]}
    repo = mini.run_dir() / "repo.git"
    committed = 0
    for p in merges:
        a, b = p["parents"]
        assert p["parent"] == a and a != b
        c = status[p["id"]]
        assert c["parents"] == [a, b] and c["parent"] == a
        if c["commit"]:
            committed += 1
            git_parents = subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(repo),
                    "rev-parse",
                    f"{c['commit']}^1",
                    f"{c['commit']}^2",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            assert git_parents == [status[a]["commit"], status[b]["commit"]]
    assert committed, "no merge got past novelty"
    plain = [c for c in status.values() if c["parent"] and c["id"] not in {p["id"] for p in merges}]
    assert all(c["parents"] == [c["parent"]] for c in plain)


# -- validate minibatch --------------------------------------------------------------------


def test_minibatch_validate_runs_the_work_tree_against_the_parents_rewards(
    tmp_path: Path,
) -> None:
    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    edit_recipe(
        mini,
        (
            "  novelty: {operator: tree_dedup}",
            "  validate: {operator: minibatch, config: {size: 4}}\n"
            "  novelty: {operator: tree_dedup}",
        ),
    )
    run_and_verify(mini)
    evs = events(mini.run_dir())
    mutated = {e["data"]["id"]: e["data"] for e in evs if e["type"] == "candidate_mutated"}
    rejected = {e["data"]["id"]: e["data"] for e in evs if e["type"] == "candidate_rejected"}
    by_validate = {cid: r for cid, r in rejected.items() if r["stage"] == "validate"}
    # on all four train tasks the minibatch is the train split: a child that does not
    # raise its level above its parent's cannot beat it, one that does always does
    for r in by_validate.values():
        assert "minibatch" in r["reasons"][0] and "parent" in r["reasons"][0]
    assert by_validate, "no child was turned away by the minibatch"
    status = {c["id"]: c for c in status_json(mini.run_dir())["candidates"]}
    for cid in mutated:
        if cid == "c0000":
            continue
        c = status[cid]
        parent = status[c["parent"]]
        assert c["scores"]["train"] > parent["scores"]["train"]
    # minibatch runs are uncertified: no certificate or evaluation names them
    assert not any(e["data"].get("split") == "minibatch" for e in evs)
