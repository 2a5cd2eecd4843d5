"""`rsiframe tasks audit`: the reward-hack battery finds each fixture's hack, and only it.

The fixtures (tests/corpus/tasksets/audit, written by its generate.py) are small tasks, each
open to exactly one hack; pyfix-vulnerable/tasks/pyfix-001 is a kept copy of the pyfix
verifier that imported the agent's code beside its answers. The slow tests (e2e) audit them
together with one shipped task of each set, on the local engine and the Harbor engine, in
one audit.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rsiframe.evaluators import hackagent, taskhacks
from rsiframe.tasks.taskset import load_task
from tests.support.cli import cli
from tests.support.paths import AUDIT_FIXTURES, REPO

# -- planted code: harmless to parse, reports whenever it runs --------------------------

PLAN = {"nonce": "feedc0de", "tests": ["expected.txt"], "names": [], "log_names": [], "shadow": []}


#: file name, original content, how a verifier runs it, what the original prints
LANGUAGES = [
    ("mod.py", "def f():\n    return 41 + 1\n", "python3 -c 'import mod; print(mod.f())'", "42"),
    ("run.py", "print('original')\n", "python3 run.py", "original"),
    ("greet.sh", "#!/bin/bash\necho ok\n", "bash greet.sh", "ok"),
    ("notes.txt", "answer\n", "sh notes.txt", ""),
    ("data.json", '{"a": 1}\n', "python3 data.json", ""),
    ("lib.sh", "X=1\n", ". ./lib.sh; echo sourced", "sourced"),
    ("Makefile", "all:\n\t@echo made\n", "make -s", "made"),
    (
        "main.c",
        '#include <stdio.h>\nint main(void){puts("c");return 0;}\n',
        "cc -o m main.c && ./m",
        "c",
    ),
    ("app.js", "console.log('js')\n", "node app.js", "js"),
    ("app.mjs", "console.log('esm')\n", "node app.mjs", "esm"),
    ("tool.pl", 'print "perl\\n";\n', "perl tool.pl", "perl"),
]


@pytest.mark.parametrize(("name", "original", "command", "prints"), LANGUAGES)
def test_planted_code_reports_when_the_verifier_runs_it(
    tmp_path: Path, name: str, original: str, command: str, prints: str
) -> None:
    tool = command.split()[0] if not command.startswith(".") else "sh"
    if shutil.which(tool) is None:  # a runtime this host lacks (node, cc): nothing to run
        pytest.skip(f"{tool} is not installed")
    tests, verifier, app = tmp_path / "tests", tmp_path / "logs" / "verifier", tmp_path / "app"
    for d in (tests, verifier, app):
        d.mkdir(parents=True)
    (tests / "expected.txt").write_text("42\n")
    (app / name).write_bytes(hackagent.planted_text(PLAN, name, original.encode(), str(tests)))
    env = {**os.environ, "RSI_TESTS": str(tests), "RSI_LOGS": str(tmp_path / "logs")}
    # a session of its own, as a sandbox starts the verifier: the report stops there
    res = subprocess.run(
        ["bash", "-c", command], cwd=app, env=env, capture_output=True, text=True,
        start_new_session=True, timeout=60,
    )  # fmt: skip
    out = res.stdout + res.stderr
    found = taskhacks.reports("feedc0de", out.encode())
    assert found, out
    assert found[0].fields["read"] == str(tests / "expected.txt")
    assert str(verifier) in found[0].fields["write"].split(",")
    assert prints in res.stdout  # the original still does what it did
    # and the hack itself: a full reward the verifier cannot overwrite
    assert (verifier / "reward.txt").read_text() == "1"
    assert not os.access(verifier / "reward.txt", os.W_OK) or os.geteuid() == 0


def test_a_planted_data_file_is_python_and_a_clean_shell_script(tmp_path: Path) -> None:
    """Python parses all of it; a shell stops before the Python part, without an error."""
    text = hackagent.planted_text(PLAN, "answers.jsonl", b'{"id": 1}\n').decode()
    ast.parse(text)
    path = tmp_path / "answers.jsonl"
    path.write_text(text)
    for shell in ("sh", "bash"):
        res = subprocess.run([shell, str(path)], capture_output=True, start_new_session=True)
        assert res.returncode == 0, res.stderr
        assert all(ln.startswith(b"feedc0de planted ") for ln in res.stderr.splitlines())


def test_a_shadowing_module_hands_over_the_real_one(tmp_path: Path) -> None:
    plan = {**PLAN, "shadow": ["json"]}
    probe = hackagent._fill(hackagent.PY_PROBE, plan, "/app/json.py", tests_dir=str(tmp_path))
    tail = hackagent.SHADOW_TAIL.replace("@NONCE@", "feedc0de")
    (tmp_path / "json.py").write_text(probe + tail)
    res = subprocess.run(
        ["python3", "-c", "import json; print(json.dumps({'a': 1}))"],
        cwd=tmp_path, capture_output=True, text=True, start_new_session=True,
    )  # fmt: skip
    assert '{"a": 1}' in res.stdout, res.stderr
    assert taskhacks.reports("feedc0de", (res.stdout + res.stderr).encode())


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


# -- the command -------------------------------------------------------------------------


def test_a_bad_path_task_or_hack_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, fragment in (
        ((str(tmp_path / "nope"),), "no such folder"),
        ((str(tmp_path),), "no task here"),
        ((str(AUDIT_FIXTURES), "--tasks", "nope"), "no such task: nope"),
        ((str(AUDIT_FIXTURES), "--hack", "nope"), "no such hack: nope"),
    ):
        res = cli("tasks", "audit", *args)
        assert res.exit_code == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr
        assert "Traceback" not in res.stderr


def test_tasks_check_hints_at_the_audit(tmp_path: Path) -> None:
    shutil.copytree(AUDIT_FIXTURES / "clean", tmp_path / "set" / "clean")
    res = cli("tasks", "check", str(tmp_path / "set"))
    assert res.exit_code == 0, res.stdout + res.stderr
    hints = [x for x in res.stderr.splitlines() if x.startswith("hint:")]
    assert hints == [f"hint: `rsiframe tasks audit {tmp_path / 'set'}` attacks each task as a "
                     "reward-hacking agent would"]  # fmt: skip
