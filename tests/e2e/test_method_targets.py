"""The README's "run a published method on your task set", as written, on the mini task set."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.support.cli import cli, status_json
from tests.support.methodtargets import show, target
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


# -- README: run a published method on your task set -------------------------------------


def _readme_section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("### Run a published method on your task set", 1)[1].split("\n#", 1)[0]


def test_readme_runs_a_published_method_on_your_task_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's commands, as written, on a task set that is not sat3: the researcher's
    own recipe is the baseline, GEPA's method runs on it in one line, compare takes both."""
    section = _readme_section()
    commands = section.split("```sh", 1)[1].split("```", 1)[0]
    mini = target(tmp_path / "p")
    mini.recipe.rename(mini.root / "my-target.yaml")
    monkeypatch.chdir(mini.root)
    ran = []
    for line in commands.strip().splitlines():
        argv = shlex.split(line.split("#", 1)[0])
        assert argv[0] == "rsiframe", line
        res = cli(*argv[1:])
        assert res.exit_code == 0, (line, res.stderr)
        ran.append((argv, res))
    assert [a[1] for a, _ in ran] == ["run", "run", "compare"]
    gepa_run = ran[1][1]
    # GEPA's minibatch of 8 is not smaller than this 4-task train split: warned at start
    assert "rsiframe: warning: slots.validate (minibatch): the minibatch of 8" in gepa_run.stderr
    runs = mini.root / "runs"
    warned = status_json(runs / "gepa-policy")["warnings"]
    assert warned and "not smaller than the train split (4 tasks)" in warned[0]
    assert status_json(runs / "baseline")["warnings"] == []
    # compare takes the method beside the baseline: the same evaluator and task set
    res = cli("compare", "runs", "--json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["refused"] == [] and report["unfinished"] == []
    assert sorted(m["name"] for m in report["methods"]) == ["gepa-policy", "my-target"]
    locks = [
        json.loads((runs / r / "evaluator.lock.json").read_text())
        for r in ("baseline", "gepa-policy")
    ]
    assert locks[0]["fingerprint"] == locks[1]["fingerprint"]
    # the README's one-line recipe is the same method as --method
    one_line = section.split("```yaml", 1)[1].split("```", 1)[0]
    assert one_line.strip().startswith("extends: [my-target.yaml,")
    (mini.root / "one-line.yaml").write_text(one_line.replace("path/to/rsiframe", str(REPO)))
    assert (
        show("one-line.yaml")["digest"]
        == show("my-target.yaml", "--method", "gepa-policy")["digest"]
    )
