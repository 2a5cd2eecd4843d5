"""Issue 15's engine parts: staged evaluation, the merge slot (3-way merge, two parents),
validate ``minibatch`` with the framework's work-tree runner. Real runs on the mini
experiment of conftest.py (task t<i> is solved when the ``level`` knob is >= i)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Mini, cli, events, make_mini, status_json

from rsiframe.api import MergePlan
from rsiframe.engine.evaluation import Stages
from rsiframe.recipe.schema import StageSpec
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import snapshot
from rsiframe.repo.merge import merge_base, three_way
from rsiframe.surface import Surface

STAGES = "  stages: [{split: train, tasks: 2, min_score: 0.5}, {split: train}]\n"


def _edit(mini: Mini, *pairs: tuple[str, str]) -> None:
    text = mini.recipe.read_text()
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    mini.recipe.write_text(text)


def _run(mini: Mini, *sets: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    assert cli("verify", mini.run_dir()).exit_code == 0


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("evaluator.stages=[{split: trian}]", "evaluator.stages.0.split"),
        ("evaluator.stages=[{split: sealed, tasks: 2}]", "evaluator.stages.0.split"),
        ("slots.merg={operator: three_way}", "slots.merg: unknown key"),
        ("slots.mutate.rate=0.3", "slots.mutate.rate: unknown key"),
        ("slots.merge={operator: knobs}", "'knobs' is a mutate operator"),
        ("slots.validate={operator: three_way}", "'three_way' is a merge operator"),
        ("slots.merge={operator: three_way, rate: 1.5}", "slots.merge.rate"),
    ],
)
def test_bad_stages_and_merge_settings_are_one_line_exit_2(
    mini: Mini, setting: str, message: str
) -> None:
    res = cli("recipe", "check", mini.recipe, "--set", setting)
    assert res.exit_code == 2
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- staged evaluation ------------------------------------------------------------------


def test_stage_subsets_are_fixed_for_every_child_and_default_splits_follow() -> None:
    split = {"train": [f"t{i}" for i in range(10)], "gate": ["g1", "g2"]}
    specs = [StageSpec(split="train", tasks=3, min_score=0.5), StageSpec(split="train")]
    a, b = Stages(specs, split, 7), Stages(specs, split, 7)
    assert a.splits == ["train@1", "train", "gate"]
    assert a.task_ids("train@1") == b.task_ids("train@1")
    assert len(a.task_ids("train@1")) == 3 and set(a.task_ids("train@1")) <= set(split["train"])
    assert a.task_ids("train") == split["train"] and a.task_ids("gate") == ["g1", "g2"]
    assert Stages([], split).splits == []  # no stages: the default train, gate
    # a stage asking for at least the whole split is the split itself
    assert Stages([StageSpec(split="train", tasks=99)], split).splits == ["train", "gate"]


def test_a_child_failing_the_cheap_stage_never_pays_for_the_full_splits(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    _edit(
        mini,
        ("  engine: local\n", "  engine: local\n" + STAGES),
        ("{operator: improves_parent}", "{operator: always}"),
    )
    _run(mini)
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


@pytest.fixture(scope="module")
def merge_run(tmp_path_factory: pytest.TempPathFactory) -> Mini:
    """One real mini run with merges (uniform select, every child admitted)."""
    root = tmp_path_factory.mktemp("merge")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(root / "keys"))
        mini = _merge_mini(root)
        _run(mini)
    return mini


def _merge_mini(root: Path) -> Mini:
    mini = make_mini(root / "proj", generations=3, children=3)
    # level and style apart, so both sides' changes merge line by line
    (mini.seed / "config.yaml").write_text("level: 1\na: 0\nb: 0\nc: 0\nstyle: plain\n")
    _edit(
        mini,
        ("{operator: best}", "{operator: uniform}"),
        (
            "  rollout: {operator: local}",
            "  merge: {operator: three_way, rate: 0.5}\n  rollout: {operator: local}",
        ),
        ("{operator: improves_parent}", "{operator: always}"),
    )
    return mini


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
    _edit(
        mini,
        (
            "  novelty: {operator: tree_dedup}",
            "  validate: {operator: minibatch, config: {size: 4}}\n"
            "  novelty: {operator: tree_dedup}",
        ),
    )
    _run(mini)
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


def test_the_lineage_draws_merges_and_the_diff_takes_either_parent(merge_run: Mini) -> None:
    import asyncio

    from test_viewer import _plain, settle

    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.screens.candidate import CandidateScreen
    from rsiframe.viewer.widgets.diff_view import DiffView
    from rsiframe.viewer.widgets.lineage_tree import LineageTree

    status = {c["id"]: c for c in status_json(merge_run.run_dir())["candidates"]}
    mid, (a, b) = next((c["id"], c["parents"]) for c in status.values() if len(c["parents"]) > 1)

    def diff_title(screen: CandidateScreen) -> str:
        return _plain(screen.query_one(DiffView).query(".diff-title").first())

    async def drive() -> None:
        app = ViewerApp(merge_run.run_dir())
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("l")
            await settle(app, pilot)
            tree = app.screen.query_one(LineageTree)
            tree.move_cursor(tree.nodes["c0000"])
            tree.action_expand_subtree()
            await pilot.pause()
            assert f"merge of {a} + {b}" in str(tree.nodes[mid].label)
            links = [n for n in tree.nodes[b].children if n.data == mid]
            assert links and "merge" in str(links[0].label)  # drawn under both parents
            tree.move_cursor(tree.nodes[mid])
            await pilot.press("enter")
            await settle(app, pilot)
            screen = app.screen
            assert isinstance(screen, CandidateScreen) and screen.cid == mid
            await asyncio.sleep(0.3)
            await settle(app, pilot)
            assert diff_title(screen).startswith(f"{a} ")
            await pilot.press("b")
            await asyncio.sleep(0.3)
            await settle(app, pilot)
            assert diff_title(screen).startswith(f"{b} ")
            await pilot.press("q")

    asyncio.run(drive())
