"""rsiframe.evaluators.local: the local engine on tiny Harbor tasks, in both sandboxes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rsiframe.evaluators.base import TaskRun
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.trialfolders import WRITABLE
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.sandbox import cgroups
from rsiframe.sandbox.bwrap import ProcessSandbox, bwrap_works
from rsiframe.tasks.taskset import Task, load_task
from rsiframe.util import reaper
from rsiframe.util.digest import sha256_bytes
from tests.support.cgroups import need_cgroup

HAVE_BWRAP = bwrap_works()


MODES = [
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(
            not HAVE_BWRAP, reason="platform limit: bubblewrap is missing or cannot run here"
        ),
    ),
    "process",
]


TEST_SH = """#!/bin/bash
app="${RSI_APP:-/app}"
tests="${RSI_TESTS:-/tests}"
out="${RSI_LOGS:-/logs}/verifier"
want=$(cat "$tests/expected.txt")
got=$(cat "$app/answer.txt" 2>/dev/null || echo missing)
echo "want $want got $got"
if [ "$got" = "$want" ]; then echo 1 > "$out/reward.txt"; else echo 0 > "$out/reward.txt"; fi
"""


def _task(
    root: Path,
    name: str = "t1",
    *,
    expected: str = "42",
    agent_timeout: float = 20,
    verifier_timeout: float = 20,
    test_sh: str = TEST_SH,
) -> Task:
    t = root / name
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "task.toml").write_text(
        f'version = "1.0"\n[agent]\ntimeout_sec = {agent_timeout}\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout}\n"
    )
    (t / "instruction.md").write_text(f"Write {expected} into /app/answer.txt.\n")
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (t / "environment" / "given.txt").write_text("input data\n")
    (t / "tests" / "expected.txt").write_text(expected + "\n")
    (t / "tests" / "test.sh").write_text(test_sh)
    return load_task(t)


class Store:
    """A dict-backed artifact store standing in for the archive."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = "sha256:" + sha256_bytes(data)
        self.blobs[digest] = data
        return digest


_ENGINES: list[LocalEngine] = []


@pytest.fixture(autouse=True)
def _close_engines():  # type: ignore[no-untyped-def]
    yield
    while _ENGINES:
        close = getattr(_ENGINES.pop(), "close", None)  # engines that keep a worker pool
        if close is not None:
            close()


def _engine(tmp_path: Path, agent: str, sandbox: str, **kw: object) -> LocalEngine:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    engine = LocalEngine(LocalEngineConfig(agent=agent, sandbox=sandbox, **kw), work)  # type: ignore[arg-type]
    _ENGINES.append(engine)
    return engine


def _candidate(tmp_path: Path) -> Path:
    c = tmp_path / "candidate"
    c.mkdir(exist_ok=True)
    (c / "agent.sh").write_text('echo 42 > "$RSI_APP/answer.txt"\necho "agent says hi"\n')
    return c


def _run_one(tmp_path: Path, agent: str, sandbox: str, task: Task | None = None, **kw: object):  # type: ignore[no-untyped-def]
    engine = _engine(tmp_path, agent, sandbox, **kw)
    store = Store()
    task = task or _task(tmp_path / "tasks")
    out = engine.run(_candidate(tmp_path), [task], store.put)
    return out.runs[task.id], store


@pytest.mark.parametrize("mode", MODES)
def test_correct_agent_gets_reward_1(tmp_path: Path, mode: str) -> None:
    run, _ = _run_one(tmp_path, 'sh "$RSI_CANDIDATE/agent.sh"', mode)
    assert run.error is None, run.trajectory
    assert run.reward == 1.0
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got 42\n"
    assert run.trajectory["agent"]["exit_code"] == 0
    assert run.seconds > 0


@pytest.mark.parametrize("mode", MODES)
def test_wrong_agent_gets_reward_0(tmp_path: Path, mode: str) -> None:
    run, _ = _run_one(tmp_path, 'echo 41 > "$RSI_APP/answer.txt"', mode)
    assert run.reward == 0.0
    assert run.error is None
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got 41\n"


# this verifier answers in reward.json, so a reward.txt left by the agent would win
JSON_TEST_SH = """#!/bin/bash
want=$(cat "${RSI_TESTS:-/tests}/expected.txt")
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null || echo missing)
echo "want $want got $got"
if [ "$got" = "$want" ]; then r=1; else r=0; fi
echo "{\\"reward\\": $r}" > "${RSI_LOGS:-/logs}/verifier/reward.json"
"""


def test_json_verifier_is_what_the_cheating_test_needs(tmp_path: Path) -> None:
    assert "reward.txt" not in JSON_TEST_SH
    task = _task(tmp_path / "tasks", test_sh=JSON_TEST_SH)
    run, _ = _run_one(tmp_path, 'echo 42 > "$RSI_APP/answer.txt"', "process", task=task)
    assert (run.reward, run.error) == (1.0, None)


@pytest.mark.parametrize("mode", MODES)
def test_agent_cannot_write_its_own_reward(tmp_path: Path, mode: str) -> None:
    # in bwrap RSI_LOGS is /logs, so this covers /logs/verifier/reward.txt as well
    agent = (
        'mkdir -p "$RSI_LOGS/verifier" && echo 1 > "$RSI_LOGS/verifier/reward.txt" && '
        'cat "$RSI_LOGS/verifier/reward.txt"'
    )
    task = _task(tmp_path / "tasks", test_sh=JSON_TEST_SH)
    run, _ = _run_one(tmp_path, agent, mode, task=task)
    assert run.trajectory["agent"]["exit_code"] == 0, run.trajectory["agent"]
    assert run.trajectory["agent"]["stdout_tail"] == "1\n"  # the write did happen
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got missing\n"
    assert run.reward == 0.0
    assert run.error is None


@pytest.mark.parametrize("mode", MODES)
def test_lingering_agent_process_cannot_write_the_reward(tmp_path: Path, mode: str) -> None:
    """A background process the agent leaves behind must not outlive the agent phase.

    It waits until the verifier has written its reward, then overwrites it with 1.
    """
    agent = (
        '( d="$RSI_LOGS/verifier"; i=0; '
        'while [ ! -s "$d/reward.txt" ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i+1)); done; '
        'echo 1 > "$d/.r" && mv -f "$d/.r" "$d/reward.txt" ) >/dev/null 2>&1 & '
        "exit 0"
    )
    slow_verifier = TEST_SH + "sleep 0.5\n"
    task = _task(tmp_path / "tasks", test_sh=slow_verifier)
    run, _ = _run_one(tmp_path, agent, mode, task=task)
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got missing\n"
    assert run.reward == 0.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "link", ["../tests/expected.txt", "/tests/expected.txt", "TESTS/expected.txt"]
)
def test_an_answer_linked_to_the_tests_scores_0_and_is_named(
    tmp_path: Path, mode: str, link: str
) -> None:
    # TESTS: the host path the process fallback's verifier sees, guessed by the agent
    tests = "$(dirname $RSI_APP)/tests" if mode == "process" else "/tests"
    agent = f'ln -s "{link.replace("TESTS", tests)}" "$RSI_APP/answer.txt"; ln -s / "$RSI_APP/root"'
    run, _ = _run_one(tmp_path, agent, mode)
    assert run.reward == 0.0, run.trajectory
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got missing\n"
    removed = {r["path"]: r["reason"] for r in run.trajectory["app_removed"]}
    assert set(removed) == {"answer.txt", "root"}
    assert removed["answer.txt"].startswith("symlink leaves /app")


LOG_READING_TEST_SH = """#!/bin/bash
want=$(cat /tests/expected.txt)
got=$(cat /logs/agent/answer.txt 2>/dev/null || echo missing)
echo "want $want got $got"
r=0; if [ "$got" = "$want" ]; then r=1; fi
echo $r > /logs/verifier/reward.txt
"""


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_an_answer_linked_from_the_agents_logs_scores_0_and_is_named(tmp_path: Path) -> None:
    """A verifier that reads the agent's logs gets the same sanitised copy as /app: a link
    planted in /logs/agent during the agent phase (dangling then) is dropped and named."""
    agent = "ln -s /tests/expected.txt /logs/agent/answer.txt; echo kept > /logs/agent/note.txt"
    task = _task(tmp_path / "tasks", test_sh=LOG_READING_TEST_SH)
    run, _ = _run_one(tmp_path, agent, "bwrap", task=task)
    assert run.reward == 0.0, run.trajectory
    assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got missing\n"
    removed = {r["path"]: r["reason"] for r in run.trajectory["agent_logs_removed"]}
    assert set(removed) == {"answer.txt"}, removed


@pytest.mark.parametrize("mode", MODES)
def test_the_verifier_sees_what_the_agent_left_in_app(tmp_path: Path, mode: str) -> None:
    agent = 'echo 42 > "$RSI_APP/real.txt"; ln -s real.txt "$RSI_APP/answer.txt"'
    run, _ = _run_one(tmp_path, agent, mode)
    assert (run.reward, run.error) == (1.0, None)
    assert "app_removed" not in run.trajectory


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_agent_cannot_see_the_tests_in_bwrap(tmp_path: Path) -> None:
    agent = (
        "for p in /tests /tests/test.sh /tests/expected.txt /logs/verifier; do "
        '[ -e "$p" ] && echo "SEES $p"; done; '
        'ls /; echo "app=$(ls /app)"; echo "task=$(cat /task/instruction.md)"; '
        'echo "cand=$(ls /candidate)"; '
        "echo x > /candidate/new 2>/dev/null && echo CAND-WRITABLE; "
        "echo log > /logs/agent/note.txt; true"
    )
    run, store = _run_one(tmp_path, agent, "bwrap")
    out = run.trajectory["agent"]["stdout_tail"]
    assert "SEES" not in out, out
    assert "CAND-WRITABLE" not in out
    assert "app=given.txt" in out  # the Dockerfile is not copied into /app
    assert "task=Write 42 into /app/answer.txt." in out
    assert "cand=agent.sh" in out
    assert not (tmp_path / "candidate" / "new").exists()
    refs = run.trajectory["artifacts"]
    assert store.blobs[refs["logs/agent/note.txt"]] == b"log\n"


@pytest.mark.parametrize("mode", MODES)
def test_agent_timeout(tmp_path: Path, mode: str) -> None:
    task = _task(tmp_path / "tasks", agent_timeout=0.3)
    run, _ = _run_one(tmp_path, "sleep 30", mode, task=task)
    assert run.reward == 0.0
    assert run.error is not None and "agent timed out after 0.3s" in run.error
    assert run.trajectory["agent"]["timed_out"] is True
    assert run.trajectory["agent"]["exit_code"] is None
    assert run.seconds < 10


@pytest.mark.parametrize("mode", MODES)
def test_config_caps_the_agent_timeout(tmp_path: Path, mode: str) -> None:
    run, _ = _run_one(tmp_path, "sleep 30", mode, agent_timeout_s=0.3)
    assert run.reward == 0.0
    assert run.error is not None and "agent timed out after 0.3s" in run.error


@pytest.mark.parametrize("mode", MODES)
def test_verifier_timeout(tmp_path: Path, mode: str) -> None:
    slow = TEST_SH + "sleep 30\n"  # writes reward 1, then hangs
    task = _task(tmp_path / "tasks", verifier_timeout=0.3, test_sh=slow)
    run, _ = _run_one(tmp_path, 'sh "$RSI_CANDIDATE/agent.sh"', mode, task=task)
    assert run.reward == 0.0
    assert run.error == "verifier timed out after 0.3s"


@pytest.mark.parametrize("mode", MODES)
def test_no_reward_file(tmp_path: Path, mode: str) -> None:
    task = _task(tmp_path / "tasks", test_sh="#!/bin/bash\necho silent\n")
    run, _ = _run_one(tmp_path, "true", mode, task=task)
    assert run.reward == 0.0
    assert run.error == "verifier wrote no reward"


def test_trajectory_and_artifacts(tmp_path: Path) -> None:
    agent = 'echo to-stdout; echo to-stderr >&2; sh "$RSI_CANDIDATE/agent.sh"'
    run, store = _run_one(tmp_path, agent, "process")
    traj = run.trajectory
    assert traj["task"] == "t1"
    assert traj["reward"] == 1.0
    assert traj["agent"]["stdout_tail"] == "to-stdout\nagent says hi\n"
    assert traj["agent"]["stderr_tail"] == "to-stderr\n"
    refs = traj["artifacts"]
    assert set(refs) >= {"agent.stdout", "agent.stderr", "verifier.stdout", "verifier.stderr"}
    assert store.blobs[refs["agent.stdout"]] == b"to-stdout\nagent says hi\n"
    assert store.blobs[refs["agent.stderr"]] == b"to-stderr\n"
    assert store.blobs[refs["verifier.stdout"]] == b"want 42 got 42\n"
    for digest in refs.values():
        assert digest == "sha256:" + sha256_bytes(store.blobs[digest])
    # the trajectory itself is stored, and it names the artifacts
    stored = json.loads(store.blobs[run.trajectory_digest])
    assert stored == traj


def test_stdout_tail_is_bounded(tmp_path: Path) -> None:
    agent = "head -c 10000 /dev/zero | tr '\\0' q; echo; echo END"
    run, store = _run_one(tmp_path, agent, "process", output_limit_bytes=1024 * 6)
    tail = run.trajectory["agent"]["stdout_tail"]
    assert len(tail) == 4000
    assert run.trajectory["agent"]["truncated"] is True
    assert len(store.blobs[run.trajectory["artifacts"]["agent.stdout"]]) == 1024 * 6


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_tasks_all_come_back(tmp_path: Path, mode: str) -> None:
    tasks = [_task(tmp_path / "tasks", f"t{i}", expected=str(40 + i)) for i in range(5)]
    engine = _engine(tmp_path, 'echo 42 > "$RSI_APP/answer.txt"', mode, concurrency=3)
    store = Store()
    done: list[TaskRun] = []
    out = engine.run(_candidate(tmp_path), tasks, store.put, on_done=done.append)
    assert sorted(out.runs) == [f"t{i}" for i in range(5)]
    assert {t: r.reward for t, r in out.runs.items()} == {
        "t0": 0.0,
        "t1": 0.0,
        "t2": 1.0,
        "t3": 0.0,
        "t4": 0.0,
    }
    assert sorted(r.task_id for r in done) == sorted(out.runs)
    assert out.task_seconds == pytest.approx(sum(r.seconds for r in out.runs.values()))
    # what the phases wrote is deleted in the background; each task's folder is kept for
    # its next trial with the instruction, the tests and its writable folders, emptied (a
    # pids cgroup said every process was gone), until the engine closes
    assert reaper.settle(30)
    kept = sorted((tmp_path / "work").glob("trial-*"))  # (and .spent/: small files)
    assert len(kept) == 5
    sealed = not isinstance(cgroups.root("pids"), str)  # else they went whole
    writable = [n for n in WRITABLE if sealed]
    for k in kept:
        got = {str(p.relative_to(k)) for p in k.rglob("*") if k / "tests" not in p.parents}
        assert got == {"logs", "task", "task/instruction.md", "tests", *writable}
        assert all(list((k / n).iterdir()) == [] for n in writable)
    engine.close()
    assert reaper.settle(30)
    assert list((tmp_path / "work").iterdir()) == []


def test_engine_runs_again(tmp_path: Path) -> None:
    engine = _engine(tmp_path, 'echo 42 > "$RSI_APP/answer.txt"', "process", concurrency=2)
    tasks = [_task(tmp_path / "tasks", f"t{i}") for i in range(3)]
    store = Store()
    first = engine.run(_candidate(tmp_path), tasks, store.put)
    second = engine.run(_candidate(tmp_path), tasks[:1], store.put)
    assert {t: r.reward for t, r in first.runs.items()} == {"t0": 1.0, "t1": 1.0, "t2": 1.0}
    assert list(second.runs) == ["t0"] and second.runs["t0"].reward == 1.0


def test_fingerprint(tmp_path: Path) -> None:
    a = _engine(tmp_path, "agent-a", "process")
    assert a.fingerprint() == _engine(tmp_path, "agent-a", "process").fingerprint()
    assert len(a.fingerprint()) == 64
    assert a.fingerprint() != _engine(tmp_path, "agent-b", "process").fingerprint()
    assert a.fingerprint() != _engine(tmp_path, "agent-a", "process", concurrency=5).fingerprint()
    assert (
        a.fingerprint() != _engine(tmp_path, "agent-a", "process", agent_timeout_s=5).fingerprint()
    )


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_fingerprint_depends_on_isolation(tmp_path: Path) -> None:
    b = _engine(tmp_path, "x", "bwrap")
    p = _engine(tmp_path, "x", "process")
    assert (b.isolation, p.isolation) == ("bwrap userns uid=65534 gid=65534 caps=none", "process")
    assert b.fingerprint() != p.fingerprint()
    # same config ("auto"), different sandbox actually in use: still different
    auto = _engine(tmp_path, "x", "auto")
    assert auto.isolation == "bwrap userns uid=65534 gid=65534 caps=none"
    before = auto.fingerprint()
    auto.sandbox = ProcessSandbox()
    assert auto.isolation == "process"
    assert auto.fingerprint() != before


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        LocalEngineConfig(agent="x", sandbox="podman")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LocalEngineConfig(agent="x", concurrency=0)
    with pytest.raises(ValueError):
        LocalEngineConfig(agent="x", unknown=1)  # type: ignore[call-arg]


def test_the_fingerprint_covers_the_build_config_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsiframe.dth import serving
    from rsiframe.evaluators import local as evaluator

    plain = LocalEngine(LocalEngineConfig(agent="true", sandbox="process"), tmp_path)
    built = LocalEngine(
        LocalEngineConfig.model_validate(
            {"agent": "true", "sandbox": "process", "build": {"threads": 2}}
        ),
        tmp_path,
    )
    assert plain.builder is None and built.builder is not None
    assert plain.fingerprint() != built.fingerprint()
    before = evaluator._code_digest()
    other = tmp_path / "serving.py"
    other.write_text(Path(serving.__file__).read_text() + "\n# changed\n")
    monkeypatch.setattr(serving, "__file__", str(other))
    assert evaluator._code_digest() != before


# -- per-task resource limits ---------------------------------------------------------------


def _limited(tmp_path: Path, agent: str, mode: str = "bwrap", toml: str = "", **limits: int):  # type: ignore[no-untyped-def]
    task = _task(tmp_path / "tasks")
    if toml:
        with open(task.path / "task.toml", "a") as f:
            f.write(toml)
        task = load_task(task.path)
    return _run_one(tmp_path, agent, mode, task=task, limits=limits)[0]


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_an_agent_past_its_process_limit_ends_with_the_reason(tmp_path: Path) -> None:
    # the sleeps outlast any load: the limit is reached however slowly the shell forks
    agent = "echo 42 > answer.txt; for i in $(seq 100); do sleep 600 & done; wait"
    run = _limited(tmp_path, agent, pids=30)
    assert run.reward == 0.0
    if isinstance(cgroups.root("pids"), Path):  # a pids cgroup: the breach is seen and named
        assert run.error == "agent exceeded a limit: it reached its limit of 30 processes"
        assert run.trajectory["limit"] == run.error
        assert "limits_fallback" not in run.trajectory["agent"]
    else:  # only RLIMIT_NPROC held it: the trajectory says so
        assert "RLIMIT_NPROC" in run.trajectory["agent"]["limits_fallback"][0]


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_an_agent_past_its_memory_limit_ends_with_the_reason(tmp_path: Path) -> None:
    agent = "echo 42 > answer.txt; python3 -c 'b = bytearray(400 << 20); print(len(b))'; sleep 600"
    run = _limited(tmp_path, agent, memory_mb=200)
    assert run.reward == 0.0
    if isinstance(cgroups.root("memory"), Path):  # a memory cgroup: the breach is named
        assert run.error == "agent exceeded a limit: it passed its memory limit of 200 MiB"
        assert run.trajectory["limit"] == run.error
    else:  # only RLIMIT_AS held it: the allocation failed, and the trajectory says so
        assert "RLIMIT_AS" in " ".join(run.trajectory["agent"]["limits_fallback"])


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_filling_app_is_stopped_with_the_reason(tmp_path: Path, mode: str) -> None:
    agent = "echo 42 > answer.txt; while true; do head -c 1048576 /dev/zero >> big; done"
    run = _limited(tmp_path, agent, mode, toml="[rsiframe]\napp_mb = 4\n")
    assert run.reward == 0.0
    assert run.error == "agent exceeded a limit: app grew past 4 MiB"
    assert run.trajectory["limit"] == run.error


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap is missing")
def test_tmp_is_a_small_tmpfs(tmp_path: Path) -> None:
    agent = "head -c 3000000 /dev/zero > /tmp/x || echo TMPFULL; echo 42 > answer.txt"
    run = _limited(tmp_path, agent, tmp_mb=2, memory_mb=200)
    assert run.reward == 1.0
    assert run.trajectory["agent"]["stdout_tail"] == "TMPFULL\n"


@pytest.mark.parametrize("mode", MODES)
def test_artifacts_per_task_are_capped_and_named(tmp_path: Path, mode: str) -> None:
    agent = (
        "echo 42 > answer.txt; for i in 1 2 3 4 5; do "
        'yes $i | head -c 700000 > "$RSI_LOGS/agent/$i.log"; done;'
        ' mkfifo "$RSI_LOGS/agent/pipe"; ln -s /etc/passwd "$RSI_LOGS/agent/link"'
    )
    run, store = _run_one(tmp_path, agent, mode, limits={"artifacts_mb": 2})
    assert run.reward == 1.0
    stored = [k for k in store.blobs.values() if len(k) == 700000]
    assert len(stored) == 2
    dropped = run.trajectory["artifacts_dropped"]
    assert len(dropped) == 5 and any("named pipe" in d for d in dropped)
    assert any(d.startswith("link: ") for d in dropped)


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_cannot_plant_tests_in_the_folder_kept_from_its_tasks_last_trial(
    tmp_path: Path, mode: str
) -> None:
    """A task's trial folder is kept for its next trial, tests included. Under the process
    sandbox the agent can reach it (``$RSI_APP/../tests``): one that rewrites the kept
    test.sh, the expected answer, or swaps the folder for a link, still gets the task's
    own verdict, because the tests are checked and copied anew after the agent ends."""
    forge = (
        'tests="$RSI_APP/../tests"; '
        'echo 41 > "$RSI_APP/answer.txt"; '
        'if [ -d "$tests" ]; then '
        '  printf "echo 1 > \\"\\$RSI_LOGS/verifier/reward.txt\\"\\n" > "$tests/test.sh"; '
        '  echo 41 > "$tests/expected.txt"; chmod 777 "$tests/test.sh"; '
        '  mkdir -p "$tests/sub" && echo x > "$tests/sub/extra"; '
        "fi"
    )
    engine = _engine(tmp_path, forge, mode)
    task = _task(tmp_path / "tasks")
    store = Store()
    rewards = []
    for _ in range(3):
        out = engine.run(_candidate(tmp_path), [task], store.put)
        run = out.runs[task.id]
        assert run.error is None, run.trajectory
        assert run.trajectory["verifier"]["stdout_tail"] == "want 42 got 41\n"
        rewards.append(run.reward)
    assert rewards == [0.0, 0.0, 0.0]


_SEEN = (
    'echo "app: $(ls -A "$RSI_APP" | tr "\\n" " ")$(stat -c %a "$RSI_APP")"; '
    'echo "logs: $(ls -A "$RSI_LOGS/agent" | tr "\\n" " ")$(stat -c %a "$RSI_LOGS/agent")"; '
    "echo \"xattrs: $(python3 -c 'import os,sys; print(os.listxattr(sys.argv[1]))' "
    '"$RSI_APP")"; '
)
_LEAVE = (
    'echo 42 > "$RSI_APP/answer.txt"; echo left > "$RSI_APP/leftover"; '
    'mkdir "$RSI_APP/d"; echo left > "$RSI_APP/d/f"; echo left > "$RSI_LOGS/agent/leftover"; '
    'echo 1 > "$RSI_LOGS/verifier/reward.txt" 2>/dev/null; '
    'chmod 777 "$RSI_APP" "$RSI_LOGS/agent"; '
)
_PLANT_XATTR = (
    "python3 -c \"import os; os.setxattr(os.environ['RSI_APP'], 'user.planted', b'1')\"; "
)
_VERIFIER_SEES = """#!/bin/bash
app="${RSI_APP:-/app}"
out="${RSI_LOGS:-/logs}/verifier"
echo "app: $(ls -A "$app" | tr '\\n' ' ')"
echo "verifier logs: $(ls -A "$out" | tr '\\n' ' ')"
if [ "$(cat "$app/answer.txt")" = 42 ]; then echo 1 > "$out/reward.txt"; fi
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tamper", ["files", "xattr"])
def test_a_kept_writable_folder_shows_the_next_trial_nothing_of_the_last(
    tmp_path: Path, mode: str, tamper: str
) -> None:
    """A task's writable folders are kept, emptied, for its next trial once every process
    of the trial is gone. Whatever the agent left in them, the next agent and verifier see
    the folders as new: only the task's environment, mode 755, no extended attribute, no
    reward file. A folder given an attribute emptying would not undo is made anew."""
    need_cgroup("pids")  # kept only where every process is known gone (a pids cgroup)
    agent = _SEEN + _LEAVE + (_PLANT_XATTR if tamper == "xattr" else "")
    engine = _engine(tmp_path, agent, mode)
    task = _task(tmp_path / "tasks", test_sh=_VERIFIER_SEES)
    store = Store()
    held: list[int] = []  # the folders' inodes, held open so that no number is used twice
    for _ in range(3):
        run = engine.run(_candidate(tmp_path), [task], store.put).runs[task.id]
        assert run.error is None and run.reward == 1.0, run.trajectory
        assert run.trajectory["agent"]["stdout_tail"] == (
            "app: given.txt 755\nlogs: 755\nxattrs: []\n"
        )
        assert run.trajectory["verifier"]["stdout_tail"] == (
            "app: answer.txt d given.txt leftover \nverifier logs: \n"
        )
        (folder,) = (tmp_path / "work").glob("trial-t1-*")
        assert os.listdir(folder / "app") == []  # emptied when the trial ended
        held.append(os.open(folder / "app", os.O_RDONLY | os.O_DIRECTORY))
    try:
        inodes = {os.fstat(fd).st_ino for fd in held}
        assert len(inodes) == (1 if tamper == "files" else 3)
    finally:
        for fd in held:
            os.close(fd)
