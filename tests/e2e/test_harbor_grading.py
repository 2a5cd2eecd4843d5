"""The Harbor engine's bwrap environment grades as the local engine does (issue 20, item 2).

When ``/tests`` appears, every process of the agent phase is gone and the verifier runs in
a root of its own: a sanitised copy of the work folder (links that leave it removed and
recorded, hard links broken, special files and set-uid bits dropped) and nothing else the
agent wrote. All but the first need Harbor's own environment (``make harbor``): e2e.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import HarborEngineConfig
from tests.support.harbor import SECRET, secret_task

pytestmark = pytest.mark.e2e


#: the agent solves nothing: it links the answer to the tests, the verifier's logs and out
#: of /app, hard links a file it keeps outside, makes a FIFO and a set-uid script, and
#: plants a usercustomize (run by any verifier's python3) and files outside /app
LINKER = r"""
ln -sf /tests/expected.txt /app/answer.txt
ln -s /logs/verifier /app/vlogs
ln -s ../tests /app/up-tests
echo hi > /app/note.txt && ln -s note.txt /app/again
echo outside > /tmp/outside && ln /tmp/outside /app/hard.txt
mkfifo /app/fifo
printf '#!/bin/sh\n' > /app/run.sh && chmod 4755 /app/run.sh
for home in /tmp /root "$HOME"; do
    site=$(python3 -c 'import site, sys; sys.stdout.write(site.getusersitepackages())')
    site="$home${site#$HOME}"
    mkdir -p "$site" && printf '%s\n' \
        'open("/logs/verifier/reward.txt", "w").write("1")' > "$site/usercustomize.py"
done
mkdir -p /srv && echo planted > /srv/answer
echo planted
"""


def _run(tmp_path: Path, script: str):
    cand = tmp_path / "cand"
    cand.mkdir(exist_ok=True)
    (cand / "agent.sh").write_text(script)
    eng = HarborEngine(HarborEngineConfig(agent='sh "$RSI_CANDIDATE/agent.sh"'), tmp_path / "w")
    try:
        return run_tasks(eng, secret_task(tmp_path), cand, ["secret"], put=lambda b: "x").runs[
            "secret"
        ]
    finally:
        eng.close()


def _harbor_python() -> str:
    try:
        return harborenv.python(create=False)
    except Exception as exc:
        pytest.skip(f"platform limit: Harbor's environment is not installed: {exc}")


def test_links_out_of_app_are_removed_and_recorded_before_grading(tmp_path: Path) -> None:
    run = _run(tmp_path, LINKER)
    out = run.trajectory["verifier"]["stdout_tail"]
    assert run.reward == 0.0, out
    assert "planted" in run.trajectory["agent"]["stdout_tail"]
    removed = {r["path"]: r["reason"] for r in run.trajectory["app_removed"]}
    assert removed == {
        "answer.txt": "symlink leaves /app (-> /tests/expected.txt)",
        "vlogs": "symlink leaves /app (-> /logs/verifier)",
        "up-tests": "symlink leaves /app (-> ../tests)",
        "fifo": removed["fifo"],
    }
    assert removed["fifo"].startswith("not a regular file")
    assert "python ran" in out
    assert "links=/app/again " in out  # the link that stays inside is kept
    assert "hard=1 run=755 fifo=ls: cannot access '/app/fifo'" in out
    # nothing else the agent wrote reaches the verifier: no usercustomize, no /srv
    assert "planted=." in out


def test_an_honest_answer_still_scores(tmp_path: Path) -> None:
    run = _run(tmp_path, f"echo {SECRET} > /app/answer.txt && ln -s answer.txt /app/link")
    assert run.reward == 1.0, run.trajectory["verifier"]["stdout_tail"]
    assert "app_removed" not in run.trajectory


def test_the_staged_plugins_import_nothing_of_rsiframe(tmp_path: Path) -> None:
    staged = harborenv.stage_plugins(tmp_path / "plugins")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "import rsiframe_inharbor.environment, rsiframe_inharbor.agent; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rsiframe'))"
    )
    res = subprocess.run(
        [_harbor_python(), "-I", "-c", code, str(staged)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-800:]
    assert res.stdout.strip() == "[]"
    assert sorted(p.name for p in (staged / harborenv.PLUGIN_PACKAGE).glob("*.py")) == [
        "__init__.py",
        "agent.py",
        "appcopy.py",
        "environment.py",
    ]


#: drives the bwrap environment directly in Harbor's process, as a trial would
DIRECT = r"""
import asyncio, json, os, subprocess, sys, time
from pathlib import Path
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths
from rsiframe_inharbor.environment import BwrapEnvironment

def rooted_sleep(fs):  # our "sleep 600", once it runs with the trial's folder as its root
    want = os.stat(fs)
    for _ in range(400):
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    mine = f.read() == b"sleep\0" + b"600\0"
                st = os.stat(f"/proc/{pid}/root")
            except OSError:
                continue
            if mine and (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
                return pid
        time.sleep(0.05)
    raise RuntimeError("the leftover process never started")

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

async def trial(tmp, agent):
    (tmp / "env").mkdir(parents=True)
    (tmp / "tests").mkdir()
    (tmp / "tests" / "expected.txt").write_text("x")
    paths = TrialPaths(trial_dir=tmp / "trial")
    paths.mkdir()
    env = BwrapEnvironment(tmp / "env", "t", "s", paths, EnvironmentConfig())
    await env.start(force_build=False)
    try:
        await env.exec(agent)
        # a process of the agent phase still alive (as while its pid namespace dies)
        argv = env._command(["sleep", "600"], user=1000, layer=None, cwd="/", env={}, extra=[])
        left = subprocess.Popen(argv, start_new_session=True)
        pid = rooted_sleep(env._root / "fs")
        await env.upload_dir(tmp / "tests", "/tests")
        gone = not alive(pid)
        seen = await env.exec("ls -A /app; cat /app/answer.txt 2>&1")
        if left.poll() is None:
            os.killpg(left.pid, 9)
        left.wait()
        record = json.loads((tmp / "trial" / "rsiframe-grading.json").read_text())
        return {"gone": gone, "seen": seen.stdout, "record": record}
    finally:
        await env.stop(delete=True)

tmp = Path(sys.argv[1])
links = "echo 1 > /app/ok; ln -s /tests/expected.txt /app/answer.txt"
out = {
    "links": asyncio.run(trial(tmp / "a", links)),
    "app_is_a_link": asyncio.run(trial(tmp / "b", "rm -rf /app && ln -s /tests /app")),
}
print(json.dumps(out))
"""


def test_grading_waits_for_the_agent_phase_and_a_linked_work_folder_is_empty(
    tmp_path: Path,
) -> None:
    staged = harborenv.stage_plugins(tmp_path / "plugins")
    res = subprocess.run(
        [_harbor_python(), "-c", DIRECT, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        env=harborenv.harbor_env(staged),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-1500:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    links = out["links"]
    assert links["gone"]  # the leftover process was gone before /tests appeared
    assert links["seen"].split("\n")[0] == "ok"
    assert "No such file" in links["seen"]
    assert links["record"]["app_removed"] == [
        {"path": "answer.txt", "reason": "symlink leaves /app (-> /tests/expected.txt)"}
    ]
    linked = out["app_is_a_link"]
    assert linked["seen"].startswith("cat: /app/answer.txt: No such file")
    assert linked["record"]["app_removed"] == [{"path": ".", "reason": "/app is not a folder"}]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-m", "e2e"]))
