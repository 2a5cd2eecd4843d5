"""The CLI contract of `run`, `resume`, `status` and `verify`: one clear line and exit 2
for every bad recipe and run folder, nothing created for bad input, the run's summary."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from tests.support.cli import assert_user_error, cli, cli_proc, edit, events, status_json
from tests.support.mini import Mini

# -- bad recipes -----------------------------------------------------------------------


def test_malformed_yaml(mini: Mini) -> None:
    edit(mini, "name: mini", "name: [mini")
    assert_user_error(cli("run", mini.recipe), 2, str(mini.recipe), "line", "invalid YAML")


def test_duplicate_key(mini: Mini) -> None:
    edit(mini, "name: mini", "name: mini\nname: other")
    assert_user_error(cli("recipe", "check", mini.recipe), 2, "duplicate key 'name'")


def test_unknown_key_names_the_dotted_path(mini: Mini) -> None:
    edit(mini, "  include: [config.yaml]", "  include: [config.yaml]\n  inclde: [x]")
    assert_user_error(cli("run", mini.recipe), 2, "surface.inclde: unknown key")


def test_wrong_type(mini: Mini) -> None:
    edit(mini, "max_generations: 2", "max_generations: lots")
    assert_user_error(cli("run", mini.recipe), 2, "budget.max_generations", "integer")


def test_unknown_operator_suggests(mini: Mini) -> None:
    edit(mini, "select: {operator: best}", "select: {operator: bset}")
    assert_user_error(
        cli("run", mini.recipe),
        2,
        "slots.select.operator",
        "unknown select operator 'bset'",
        "did you mean 'best'",
    )


def test_operator_in_the_wrong_slot(mini: Mini) -> None:
    edit(mini, "gate: {operator: improves_parent}", "gate: {operator: best}")
    assert_user_error(cli("run", mini.recipe), 2, "'best' is a select operator")


def test_bad_operator_config_names_the_field(mini: Mini) -> None:
    edit(mini, "select: {operator: best}", "select: {operator: tournament, config: {sise: 3}}")
    assert_user_error(cli("run", mini.recipe), 2, "slots.select.config.sise: unknown key")


def test_missing_required_slot(mini: Mini) -> None:
    edit(mini, "  gate: {operator: improves_parent}\n", "")
    assert_user_error(cli("run", mini.recipe), 2, "slots.gate: Field required")


def test_missing_seed_folder(mini: Mini) -> None:
    shutil.rmtree(mini.seed)
    assert_user_error(cli("run", mini.recipe), 2, "seed: folder not found")


def test_empty_split(mini: Mini) -> None:
    edit(mini, "gate: [t2, t4, t6, t8]", "gate: []")
    assert_user_error(cli("run", mini.recipe), 2, "split gate is empty")


def test_split_with_unknown_task(mini: Mini) -> None:
    edit(mini, "gate: [t2, t4, t6, t8]", "gate: [t2, t99]")
    assert_user_error(cli("run", mini.recipe), 2, "unknown task 't99'")


def test_surface_matching_nothing(mini: Mini) -> None:
    edit(mini, "include: [config.yaml]", "include: [prompts/**]")
    assert_user_error(cli("run", mini.recipe), 2, "surface", "match no file in the seed")


def test_task_without_a_verifier(mini: Mini) -> None:
    (mini.tasks / "t3" / "tests" / "test.sh").unlink()
    assert_user_error(cli("run", mini.recipe), 2, "t3", "no verifier")


def test_missing_recipe_file(tmp_path: Path) -> None:
    assert_user_error(cli("run", tmp_path / "nope.yaml"), 2, "nope.yaml", "file not found")


def test_extends_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    assert_user_error(cli("recipe", "check", tmp_path / "a.yaml"), 2, "cycle")


def test_bad_set_syntax(mini: Mini) -> None:
    assert_user_error(
        cli("run", mini.recipe, "--set", "budget.max_generations"), 2, "--set expects KEY=VALUE"
    )


def test_nothing_is_created_for_bad_input(mini: Mini) -> None:
    edit(mini, "select: {operator: best}", "select: {operator: bset}")
    out = mini.run_dir()
    cli("run", mini.recipe, "--out", out)
    assert not out.exists()


# -- bad run folders -------------------------------------------------------------------


def _finished(mini: Mini) -> Path:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    return out


def test_not_a_run_folder(tmp_path: Path) -> None:
    for cmd in ("status", "verify", "resume"):
        assert_user_error(cli(cmd, tmp_path), 2, "not a run folder")


def test_corrupt_archive(mini: Mini) -> None:
    out = _finished(mini)
    log = out / "events.jsonl"
    lines = log.read_text().splitlines()
    lines[5] = lines[5].replace('"type":', '"type" :', 1)
    log.write_text("\n".join(lines) + "\n")
    before = log.read_bytes()
    assert_user_error(cli("status", out), 1, "hash chain broken", "event 5")
    assert_user_error(cli("resume", out), 1, "hash chain broken")
    res = cli("verify", out, "--json")
    assert res.exit_code == 1
    assert not json.loads(res.stdout)["ok"]
    assert log.read_bytes() == before


def test_unreadable_event(mini: Mini) -> None:
    out = _finished(mini)
    log = out / "events.jsonl"
    lines = log.read_text().splitlines()
    lines[3] = "{not json"
    log.write_text("\n".join(lines) + "\n")
    assert_user_error(cli("status", out), 1, "event 3", "unreadable event")


def test_truncated_archive_is_repaired_on_resume(mini: Mini) -> None:
    out = _finished(mini)
    log = out / "events.jsonl"
    data = log.read_bytes()
    log.write_bytes(data[:-40])  # the last event loses its tail
    res = cli("status", out, "--json")
    assert res.exit_code == 0
    assert any("torn" in n for n in json.loads(res.stdout)["notes"])
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert "dropped a torn last event" in res.stderr
    assert (out / "events.torn-1").exists()
    assert json.loads(cli("verify", out, "--json").stdout)["ok"]


def test_tampered_and_missing_evidence_fail_verify(mini: Mini) -> None:
    import base64

    from rsiframe.archive.log import artifact_path, get_json

    out = _finished(mini)
    assert cli("verify", out).exit_code == 0
    cert = next(e for e in events(out) if e["type"] == "evaluation_certified")
    payload = json.loads(base64.b64decode(cert["data"]["envelope"]["payload"]))
    trajectories = sorted(payload["predicate"]["trajectories"].values())
    stdout_log = get_json(out, trajectories[1])["artifacts"]["agent.stdout"]
    artifact_path(out, trajectories[0]).write_bytes(b"tampered")
    artifact_path(out, stdout_log).unlink()
    res = cli("verify", out, "--json")
    assert res.exit_code == 1
    problems = json.loads(res.stdout)["problems"]
    assert any("does not match its hash" in p for p in problems)
    assert any("is missing" in p for p in problems)
    assert cli("status", out).exit_code == 0  # scores come from certificates, not artifacts


def test_task_edited_since_run_began(mini: Mini) -> None:
    out = mini.run_dir()
    killed = cli_proc(
        "run",
        mini.recipe,
        "--out",
        out,
        "--quiet",
        env={"RSIFRAME_FAULT": "kill:after:candidate_gated:1"},
    )
    assert killed.returncode == -signal.SIGKILL
    (mini.tasks / "t1" / "instruction.md").write_text("changed\n")
    assert_user_error(
        cli("resume", out), 2, "task set changed since the run began", "train/t1/instruction.md"
    )


def test_output_folder_not_empty(mini: Mini) -> None:
    out = mini.run_dir()
    out.mkdir()
    (out / "x").write_text("keep me")
    assert_user_error(cli("run", mini.recipe, "--out", out), 2, "not empty")
    assert (out / "x").read_text() == "keep me"


# -- the rest of the contract ------------------------------------------------------------


def test_default_run_folder_name(mini: Mini, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(mini.root)
    res = cli("run", mini.recipe, "--quiet", "--set", "budget.max_generations=0")
    assert res.exit_code == 0, res.stderr
    first = Path(res.stdout.splitlines()[0])
    assert first.parent == (mini.root / "archive").resolve()
    # the folder names the override too (mini[budget.max_generations=0])
    assert first.name.startswith("mini.budget.max_generations=0-") and first.name.endswith("Z")
    assert status_json(first)["state"] == "finished"


def test_run_prints_summary(mini: Mini) -> None:
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet")
    assert res.exit_code == 0
    assert "seed" in res.stdout and "champion" in res.stdout and "sealed" in res.stdout
