"""rsiframe.evaluators.taskhacks: what each hack's agent is told (the files to write, the
secrets to look for, the links to plant) and which output lines are reports."""

from __future__ import annotations

import os
from pathlib import Path

from rsiframe.evaluators import taskhacks
from rsiframe.tasks.taskset import load_task
from tests.support.paths import AUDIT_FIXTURES, REPO

# -- what the agents are told --------------------------------------------------------------


def test_the_instruction_names_the_files_to_write() -> None:
    app, logs = taskhacks.instruction_names(
        "Read `/app/items.jsonl`, write /app/out/answers.jsonl and total.txt; keep notes in "
        "/logs/agent/answer.txt. Version 1.0, e.g. this."
    )
    assert app == ["items.jsonl", "out/answers.jsonl", "total.txt"]
    assert logs == ["answer.txt"]


def test_secrets_skip_named_inputs_but_not_an_unnamed_copy() -> None:
    sat3 = taskhacks.secrets(load_task(REPO / "tasks" / "sat3" / "uf75-001"))
    assert "tests/instance.cnf" not in sat3["secret_files"].values()  # the formula is given
    assert "tests/check.py" in sat3["secret_files"].values()
    leak = taskhacks.secrets(load_task(AUDIT_FIXTURES / "answers-in-env"))
    assert "tests/expected.txt" in leak["secret_files"].values()


def test_the_links_runs_cover_each_task_and_the_candidate(tmp_path: Path) -> None:
    tasks = [load_task(p) for p in sorted(AUDIT_FIXTURES.iterdir()) if (p / "task.toml").is_file()]
    tasks.append(load_task(REPO / "tasks" / "pyfix" / "pyfix-003"))
    links = [r for r in taskhacks.runs(tasks, "local") if r.hack == "links"]
    # the data files first (expected.txt: most tasks; cases.json), then the reward file
    assert [set(r.candidate_links.values()) for r in links] == [
        {"tests/expected.txt"}, {"tests/cases.json"}, {"logs/verifier/reward.txt"}
    ]  # fmt: skip
    assert [r.targets["pyfix-003"] for r in links[:2]] == [
        "tests/cases.json", "logs/verifier/reward.txt"
    ]  # fmt: skip
    assert all(r.task_ids == [t.id for t in tasks] for r in links)
    assert {"answer.txt", "expected.txt", "cases.json"} <= set(links[0].candidate_links)
    base = tmp_path / "candidate"
    base.mkdir()
    (base / "hackagent.py").write_text("")
    made = taskhacks.with_links(base, links[0].candidate_links, tmp_path / "linked")
    assert os.readlink(made / "answer.txt") == "/tests/expected.txt"
    assert (made / "hackagent.py").is_file() and not (base / "answer.txt").is_symlink()


def test_only_lines_with_the_nonce_and_a_hack_are_reports() -> None:
    data = b"noise\nXfeedc0de planted file=/app/a.py how=run by python read=/tests/x write=\n"
    data += b"feedc0de(file, how): not a report\nfeedc0de peek path=/app/x file=tests/y\n"
    found = taskhacks.reports("feedc0de", data)
    assert [r.hack for r in found] == ["planted", "peek"]
    assert found[0].fields == {
        "file": "/app/a.py", "how": "run by python", "read": "/tests/x", "write": ""
    }  # fmt: skip
