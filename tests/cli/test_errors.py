"""Error messages a person can act on: typos lead with the unknown key and a did-you-mean,
no pydantic prefixes, split errors name the recipe file, and --json errors are JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import assert_user_error, cli, edit
from tests.support.mini import Mini


def test_slot_name_typo_leads_with_the_unknown_key(mini: Mini) -> None:
    edit(mini, "select: {operator: best}", "selct: {operator: best}")
    res = cli("recipe", "check", mini.recipe)
    assert_user_error(res, 2, str(mini.recipe))
    assert "slots.selct: unknown key (did you mean 'select'?)" in res.stderr
    assert res.stderr.index("slots.selct") < res.stderr.index("more problem")


def test_optional_slot_and_config_typos_suggest(mini: Mini) -> None:
    edit(mini, "analyze: {operator: failures}", "analyse: {operator: failures}")
    assert_user_error(
        cli("recipe", "check", mini.recipe),
        2,
        "slots.analyse: unknown key (did you mean 'analyze'?)",
    )
    edit(mini, "analyse: {operator: failures}", "analyze: {operator: failures}")
    edit(mini, "max_changes: 1", "max_change: 1")
    assert_user_error(
        cli("recipe", "check", mini.recipe),
        2,
        "slots.mutate.config.max_change: unknown key (did you mean 'max_changes'?)",
    )


def test_no_pydantic_prefixes(mini: Mini) -> None:
    res = cli("recipe", "check", mini.recipe, "--unset", "tasks.split", "--set",
              "tasks.split.ratios={train: 0.9, gate: 0.9}")  # fmt: skip
    assert_user_error(res, 2, "tasks.split: ratios must be non-negative and sum to at most 1")
    assert "Value error" not in res.stderr


def test_split_errors_name_the_recipe_file(mini: Mini) -> None:
    edit(mini, "sealed: [t9, t10]", "sealed: [t9, t99]")
    res = cli("recipe", "check", mini.recipe)
    assert_user_error(res, 2, f"{mini.recipe}: tasks.split: split sealed names unknown task 't99'")


def test_json_errors_go_to_stdout_with_the_same_exit_code(mini: Mini, tmp_path: Path) -> None:
    edit(mini, "select: {operator: best}", "selct: {operator: best}")
    for cmd in (["recipe", "check"], ["recipe", "show"], ["run"]):
        res = cli(*cmd, mini.recipe, "--json")
        assert res.exit_code == 2
        err = json.loads(res.stdout)
        assert err["file"] == str(mini.recipe)
        assert err["key"] == "slots.selct"
        assert err["error"].startswith("slots.selct: unknown key")
    res = cli("status", tmp_path, "--json")
    assert res.exit_code == 2
    err = json.loads(res.stdout)
    assert err["file"] == str(tmp_path.resolve()) or err["file"] == str(tmp_path)
    assert "not a run folder" in err["error"] and err["key"] is None
