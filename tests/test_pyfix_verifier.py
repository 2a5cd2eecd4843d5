"""The pyfix verifier runs the agent's code where neither the answers nor the reward are.

A module that looks its answers up in ``cases.json`` (on disk, in the verifier's frames or
objects, through ``/proc``) and forges the reward (now, and from a process it leaves) must
score 0 through the local engine in bubblewrap and in Docker and through the Harbor
engine's bwrap environment, while the reference solution keeps scoring 1. The verifier as
it shipped before (``tests/corpus/tasksets/pyfix-vulnerable``) gave that module 1.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.sandbox.bwrap import BwrapSandbox, Mount
from rsiframe.tasks.taskset import TaskSet

PYFIX = REPO / "tasks" / "pyfix"
VULNERABLE = REPO / "tests" / "corpus" / "tasksets" / "pyfix-vulnerable" / "tasks"
AGENT = 'cp "$RSI_CANDIDATE/module.py" "$RSI_APP/mean.py"'

#: pyfix-001's function (mean), rewritten to look up its answers and forge its reward
LOOKUP = r"""import gc, json, os, subprocess, sys
FOUND = {}


def _take(spec):
    try:
        FOUND.update((json.dumps(a), e) for a, e in spec["cases"])
    except (KeyError, TypeError, ValueError):
        pass


ppid = os.getppid()
tests = os.environ.get("RSI_TESTS", "/tests")
for path in ("/tests/cases.json", tests + "/cases.json", "../tests/cases.json",
             "/proc/self/root/tests/cases.json", "/proc/%d/root/tests/cases.json" % ppid,
             "/proc/%d/cwd/../tests/cases.json" % ppid):
    try:
        with open(path) as f:
            _take(json.load(f))
    except (OSError, ValueError):
        pass
frame = sys._getframe(0)
while frame is not None:  # the verifier's own frames, when it imports this module
    for value in list(frame.f_locals.values()):
        if isinstance(value, dict) and "cases" in value:
            _take(value)
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict) and obj.get("function") == "mean":
        _take(obj)
logs = os.environ.get("RSI_LOGS", "/logs")
for d in {logs + "/verifier", "/logs/verifier"}:
    try:
        with open(d + "/reward.txt", "w") as f:
            f.write("1")
    except OSError:
        pass
try:  # and again from a process left behind, in a session of its own
    subprocess.Popen(["setsid", "sh", "-c", "for i in $(seq 40); do "
                      "echo 1 > /logs/verifier/reward.txt; sleep 0.05; done"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
except OSError:
    pass


def mean(*args):
    key = json.dumps(list(args))
    if key in FOUND:
        return FOUND[key]
    raise LookupError("no answers")
"""


def _solution() -> str:
    spec = importlib.util.spec_from_file_location("pyfix_specs", PYFIX / "specs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyfix_specs"] = module
    spec.loader.exec_module(module)
    return next(s.solution for s in module.SPECS if s.name == "mean")


def _task_set(tmp_path: Path, source: Path = PYFIX) -> TaskSet:
    root = tmp_path / "tasks"
    shutil.copytree(source / "pyfix-001", root / "pyfix-001")
    return TaskSet.load(root)


def _candidate(tmp_path: Path, module: str) -> Path:
    cand = tmp_path / "cand"
    cand.mkdir(exist_ok=True)
    (cand / "module.py").write_text(module)
    return cand


def _score(engine, ts: TaskSet, cand: Path) -> tuple[float, str]:
    try:
        run = run_tasks(engine, ts, cand, ["pyfix-001"], put=lambda b: "x").runs["pyfix-001"]
    finally:
        engine.close()
    out = run.trajectory["verifier"].get("stdout_tail") or ""
    return run.reward, out.strip()


def _local(tmp_path: Path, sandbox: str, name: str) -> LocalEngine:
    return LocalEngine(LocalEngineConfig(agent=AGENT, sandbox=sandbox), tmp_path / name)


# -- the local engine in bubblewrap ---------------------------------------------------------


def test_the_old_verifier_gave_the_lookup_module_full_marks(tmp_path: Path) -> None:
    """The kept copy of the old verifier: the attack this issue is about (fixture check)."""
    ts = _task_set(tmp_path, VULNERABLE)
    reward, out = _score(_local(tmp_path, "bwrap", "w"), ts, _candidate(tmp_path, LOOKUP))
    assert reward == 1.0, out


def test_the_lookup_module_scores_zero_and_the_solution_one_in_bubblewrap(tmp_path: Path) -> None:
    ts = _task_set(tmp_path)
    reward, out = _score(_local(tmp_path, "bwrap", "w1"), ts, _candidate(tmp_path, LOOKUP))
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    reward, out = _score(_local(tmp_path, "bwrap", "w2"), ts, _candidate(tmp_path, _solution()))
    assert (reward, out) == (1.0, "all 3 cases pass")


def test_the_process_fallback_runs_nothing_and_says_why(tmp_path: Path) -> None:
    ts = _task_set(tmp_path)
    reward, out = _score(_local(tmp_path, "process", "w"), ts, _candidate(tmp_path, _solution()))
    assert reward == 0.0
    assert out.startswith("not run: the tests are at ") and "process fallback" in out


def _verify_in_bwrap(tmp_path: Path, module: str, seccomp_fd: int | None = None) -> tuple[str, str]:
    """test.sh on pyfix-001 in rsiframe's bubblewrap (with a seccomp filter read from
    ``seccomp_fd``, which bubblewrap installs last, before the verifier starts)."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    app, logs, tests = work / "app", work / "logs", work / "tests"
    app.mkdir()
    (logs / "verifier").mkdir(parents=True)
    shutil.copytree(PYFIX / "pyfix-001" / "tests", tests)
    (app / "mean.py").write_text(module)
    mounts = [
        Mount(app, "/app", writable=True),
        Mount(tests, "/tests"),
        Mount(logs / "verifier", "/logs/verifier", writable=True),
    ]
    argv = BwrapSandbox().command(
        ["bash", "/tests/test.sh"], mounts=mounts, cwd=mounts[0], env={}, network=False
    )
    fds: tuple[int, ...] = ()
    if seccomp_fd is not None:
        argv[1:1] = ["--seccomp", str(seccomp_fd)]
        fds = (seccomp_fd,)
    res = subprocess.run(argv, capture_output=True, timeout=120, pass_fds=fds)
    assert res.returncode == 0, res.stderr[-500:]
    return (logs / "verifier" / "reward.txt").read_text(), res.stdout.decode().strip()


#: a seccomp filter (classic BPF) answering ENOSYS to landlock_create_ruleset (444) and
#: allowing everything else, as a kernel without Landlock (or an old Docker profile) would
NO_LANDLOCK = (
    b"\x20\x00\x00\x00\x00\x00\x00\x00"  # ld [nr]
    b"\x15\x00\x00\x01\xbc\x01\x00\x00"  # jeq #444, 0, 1
    b"\x06\x00\x00\x00\x26\x00\x05\x00"  # ret ERRNO(ENOSYS)
    b"\x06\x00\x00\x00\x00\x00\xff\x7f"  # ret ALLOW
)


def test_without_landlock_the_agents_code_is_not_run(tmp_path: Path) -> None:
    assert _verify_in_bwrap(tmp_path, _solution()) == ("1", "all 3 cases pass")
    with tempfile.TemporaryFile() as prog:
        prog.write(NO_LANDLOCK)
        prog.seek(0)
        reward, out = _verify_in_bwrap(tmp_path, _solution(), prog.fileno())
    assert reward == "0"
    assert out.startswith("not run: the agent's code cannot be confined: refused: Landlock"), out


# -- the verifier's parts --------------------------------------------------------------------


def _check_module():
    spec = importlib.util.spec_from_file_location("pyfix_check", PYFIX / "verifier" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_are_plain_data_or_refused() -> None:
    check = _check_module()
    value = {"k": None, "b": True}
    assert check.plain((1, [2.5, "x"], value)) == [1, [2.5, "x"], value]
    for bad in ({1: "a"}, {1, 2}, object(), [b"bytes"]):
        with pytest.raises(TypeError):
            check.plain(bad)


def test_only_the_denied_folders_and_their_ancestors_are_left_out(tmp_path: Path) -> None:
    check = _check_module()
    found = check.readable(["/tests", "/logs/verifier"])
    assert "/tests" not in found and "/logs/verifier" not in found and "/logs" not in found
    assert "/usr" in found and "/proc" in found
    assert not any(p.startswith(("/tests/", "/logs/verifier/")) for p in found)


def test_every_task_carries_the_one_verifier() -> None:
    for name in ("check.py", "test.sh"):
        source = (PYFIX / "verifier" / name).read_bytes()
        copies = sorted(PYFIX.glob(f"pyfix-*/tests/{name}"))
        assert len(copies) == 40 and all(c.read_bytes() == source for c in copies)


# -- the local engine in Docker, the Harbor engine ----------------------------------------


def _docker_or_skip() -> None:
    from rsiframe.errors import EngineUnavailable
    from rsiframe.sandbox.bwrap import make_sandbox

    try:
        make_sandbox("docker")
    except EngineUnavailable as exc:
        if os.environ.get("RSIFRAME_REQUIRE_DOCKER"):
            raise
        pytest.skip(f"platform limit: no Docker engine with the base image here: {exc}")


@pytest.mark.e2e
def test_the_lookup_module_scores_zero_and_the_solution_one_in_docker(tmp_path: Path) -> None:
    _docker_or_skip()
    ts = _task_set(tmp_path)
    # FROM python:3.11-slim is for Harbor's docker environment; the local Docker sandbox
    # builds only Debian-package Dockerfiles offline, and binds the host's Python instead
    (ts.root / "pyfix-001" / "environment" / "Dockerfile").unlink()
    ts = TaskSet.load(ts.root)
    reward, out = _score(_local(tmp_path, "docker", "w1"), ts, _candidate(tmp_path, LOOKUP))
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    reward, out = _score(_local(tmp_path, "docker", "w2"), ts, _candidate(tmp_path, _solution()))
    assert (reward, out) == (1.0, "all 3 cases pass")


@pytest.mark.e2e
def test_the_lookup_module_scores_zero_and_the_oracle_one_on_harbor(tmp_path: Path) -> None:
    from rsiframe.evaluators.harbor.engine import HarborEngine
    from rsiframe.recipe.evaluator import HarborEngineConfig

    ts = _task_set(tmp_path)
    cand = _candidate(tmp_path, LOOKUP)
    reward, out = _score(HarborEngine(HarborEngineConfig(agent=AGENT), tmp_path / "w1"), ts, cand)
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    oracle = HarborEngine(HarborEngineConfig(harbor_agent="oracle"), tmp_path / "w2")
    reward, out = _score(oracle, ts, cand)
    assert (reward, out) == (1.0, "all 3 cases pass")
