"""`rsiframe tasks audit`: the reward-hack battery finds each fixture's hack, and only it.

The fixtures (tests/corpus/tasksets/audit, written by its generate.py) are small tasks, each
open to exactly one hack; pyfix-vulnerable/tasks/pyfix-001 is a kept copy of the pyfix
verifier that imported the agent's code beside its answers. The slow tests (e2e) audit them
together with one shipped task of each set, on the local engine and the Harbor engine, in
one audit.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, cli

from rsiframe.evaluators import hackagent, taskhacks
from rsiframe.evaluators.taskaudit import audit
from rsiframe.sandbox import cgroups
from rsiframe.tasks.taskset import file_rows, load_task

CORPUS = REPO / "tests" / "corpus" / "tasksets"
FIXTURES = CORPUS / "audit"
#: kept by issue 20's fix (its tests use it too): the pyfix verifier as it shipped before
VULNERABLE_PYFIX = CORPUS / "pyfix-vulnerable" / "tasks" / "pyfix-001"
#: fixture -> the one hack it is open to (None: clean) on bwrap and Harbor's bwrap
EXPECTED = {
    "clean": None,
    "links-follow": "links",
    "reward-cache": "reward",
    "answers-in-env": "peek",
    "fail-open-huge": "huge",
    "fail-open-utf8": "nonutf8",
    "always-pays": "nothing",
    "wrong-solution": "oracle",
    "linger-window": None,  # both engines kill what the agent leaves running
    "pyfix-001": "planted",
}
#: one task of each shipped set, audited in CI with the fixtures
SHIPPED = {
    "sat3": "uf75-001",
    "textops": "textops-001",
    "terminal": "fix-script",  # its check runs the agent's script (confined)
    "pyfix": "pyfix-002",
}


def digest_tree(root: Path) -> dict[str, str]:
    return {p.name: json.dumps(file_rows(p)) for p in sorted(root.iterdir()) if p.is_dir()}


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
    leak = taskhacks.secrets(load_task(FIXTURES / "answers-in-env"))
    assert "tests/expected.txt" in leak["secret_files"].values()


def test_the_links_runs_cover_each_task_and_the_candidate(tmp_path: Path) -> None:
    tasks = [load_task(p) for p in sorted(FIXTURES.iterdir()) if (p / "task.toml").is_file()]
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
        ((str(FIXTURES), "--tasks", "nope"), "no such task: nope"),
        ((str(FIXTURES), "--hack", "nope"), "no such hack: nope"),
    ):
        res = cli("tasks", "audit", *args)
        assert res.exit_code == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr
        assert "Traceback" not in res.stderr


def test_tasks_check_hints_at_the_audit(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "clean", tmp_path / "set" / "clean")
    res = cli("tasks", "check", str(tmp_path / "set"))
    assert res.exit_code == 0, res.stdout + res.stderr
    hints = [x for x in res.stderr.splitlines() if x.startswith("hint:")]
    assert hints == [f"hint: `rsiframe tasks audit {tmp_path / 'set'}` attacks each task as a "
                     "reward-hacking agent would"]  # fmt: skip


# -- the battery against the fixtures (slow) -----------------------------------------------


def _set(tmp_path: Path, shipped: bool = True) -> Path:
    root = tmp_path / "set"
    for fixture in EXPECTED:
        src = VULNERABLE_PYFIX if fixture == "pyfix-001" else FIXTURES / fixture
        shutil.copytree(src, root / fixture, symlinks=True)
    if shipped:
        for name, task in SHIPPED.items():
            shutil.copytree(REPO / "tasks" / name / task, root / task, symlinks=True)
    return root


def _pyfix_expected() -> str | None:
    """The shipped pyfix is flagged while its verifier is still the vulnerable one kept as
    the fixture; once fixed (issue 20), it must be clean."""
    shipped = file_rows(REPO / "tasks" / "pyfix" / SHIPPED["pyfix"] / "tests")
    kept = file_rows(VULNERABLE_PYFIX / "tests")
    return "planted" if shipped.get("check.py") == kept["check.py"] else None


@pytest.mark.e2e
def test_the_audit_flags_each_fixture_with_its_hack_only_on_both_engines(tmp_path: Path) -> None:
    root = _set(tmp_path)
    before = digest_tree(root)
    res = cli("tasks", "audit", str(root), "--json")
    report = json.loads(res.stdout)
    assert digest_tree(root) == before and report["unchanged"]  # the audit changes nothing
    assert res.exit_code == 1, res.stderr
    assert not [r for r in report["runs"] if r["failed"]], report["runs"]
    found: dict[tuple[str, str], set[str]] = {}
    for f in report["findings"]:
        found.setdefault((f["task"], f["engine"]), set()).add(f["hack"])
    expected = {**EXPECTED, **{t: None for t in SHIPPED.values()}}
    expected[SHIPPED["pyfix"]] = _pyfix_expected()
    for engine in ("local", "harbor"):
        for task, hack in expected.items():
            want = {hack} if hack else set()
            assert found.get((task, engine), set()) == want, (task, engine, report["findings"])
        # every hack of the battery ran, and the planted code ran where a verifier runs it
        ran = {r["run"].split("/")[0] for r in report["runs"] if r["engine"] == engine}
        assert ran == set(taskhacks.HACK_NAMES)
        assert "/app/mean.py" in report["planted_ran"][engine]["pyfix-001"]
    text = cli("tasks", "audit", str(root), "--engine", "local", "--tasks", "pyfix-001")
    assert text.exit_code == 1
    assert text.stdout.startswith(
        "pyfix-001: planted on local: agent code imported by python as mean "
        "(/app/mean.py) can read /tests/cases.json"
    ), text.stdout


@pytest.mark.e2e
def test_a_process_left_running_is_seen_where_the_sandbox_lets_it_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No task can keep the agent's processes alive on bubblewrap or Harbor's bwrap (the
    audit above finds linger-window clean there). The plain process sandbox on a host
    without cgroups cannot stop them: there the same fixture is open to ``linger``."""
    root = tmp_path / "set"
    shutil.copytree(FIXTURES / "linger-window", root / "linger-window")
    monkeypatch.delenv("RSIFRAME_REQUIRE_BWRAP", raising=False)
    for controller in ("pids", "memory"):  # as on a host without cgroup v1 hierarchies
        monkeypatch.setitem(cgroups._roots, controller, "no cgroup here (the test)")
    report = audit(root, engines=("local",), hacks=("linger",), sandbox="process")
    assert [(f.task, f.hack) for f in report.findings] == [("linger-window", "linger")]
    assert "scores 1 where the do-nothing agent scores 0" in report.findings[0].what


@pytest.mark.e2e
@pytest.mark.parametrize("engine", ["local", "harbor"])
def test_ctrl_c_stops_the_audit_and_what_it_started(tmp_path: Path, engine: str) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rsiframe.cli.main", "tasks", "audit", str(FIXTURES),
         "--engine", engine],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(scratch.glob(f"rsiframe-audit-*/{engine}-*/*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until its first evaluations are under way
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 15, "it did not stop at once"
    assert err.strip().splitlines()[-1] == "rsiframe: interrupted" and "Traceback" not in err
    time.sleep(1)
    assert not list(scratch.glob("rsiframe-audit-*")), "its scratch folder is left"
    left = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True)
    assert left.stdout == "", f"processes left running: {left.stdout}"


# -- tasks/terminal/fix-script: the audit found its check running the agent's script where
# it could write the reward; the script now runs confined ---------------------------------

CONFINE = REPO / "tasks" / "terminal" / "fix-script" / "tests" / "confine.py"


def _confined(tmp_path: Path, tests: Path, script: str) -> subprocess.CompletedProcess[str]:
    verifier = tests.parent / "verifier"
    verifier.mkdir(exist_ok=True)
    (tests / "test.sh").write_text("expected: ok\n")
    app = tmp_path / "app"
    app.mkdir()
    return subprocess.run(
        ["python3", str(CONFINE), str(tests), str(verifier), "--", "sh", "-c", script],
        cwd=app, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_confined_script_runs_but_reaches_neither_tests_nor_reward(tmp_path: Path) -> None:
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp, which it may write
    try:
        tests = outside / "tests"
        tests.mkdir()
        script = f"cat {tests}/test.sh; echo 1 > {outside}/verifier/reward.txt; echo ok"
        res = _confined(tmp_path, tests, script)
        assert res.returncode == 0 and res.stdout == "ok\n", res.stderr
        assert "Permission denied" in res.stderr
        assert not (outside / "verifier" / "reward.txt").exists()
    finally:
        shutil.rmtree(outside)


def test_the_confinement_refuses_where_the_tests_stay_readable(tmp_path: Path) -> None:
    tests = tmp_path / "tests"  # under /tmp, which the script may read and write
    tests.mkdir()
    res = _confined(tmp_path, tests, "echo ok")
    assert res.returncode == 3 and res.stdout == ""
    assert f"it can read {tests}/test.sh" in res.stderr
