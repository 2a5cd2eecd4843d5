"""The pyfix verifier against a module that looks its answers up and forges its reward,
through the local engine (the shipped set's tests and their e2e part)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet
from tests.support.paths import PYFIX

AGENT = 'cp "$RSI_CANDIDATE/module.py" "$RSI_APP/mean.py"'

#: the right answers of pyfix-001 (mean) and pyfix-002 (clamp), as a scripted model writes
#: them for the seed agent
MEAN = (
    'def mean(xs):\n    """Arithmetic mean of a non-empty list of numbers."""\n'
    "    return sum(xs) / len(xs)\n"
)
CLAMP = (
    'def clamp(x, lo, hi):\n    """Return x limited to the closed interval [lo, hi]."""\n'
    "    return max(lo, min(x, hi))\n"
)


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

#: the part of LOOKUP that forges the reward from a process it leaves behind
LINGER = LOOKUP[LOOKUP.index("try:  # and again") : LOOKUP.index("\n\n\ndef mean(")]


#: the lookup without its process left behind: what reads the answers, with no writer of its
#: own racing a verifier's "wrote no reward" fallback (the old verifier's fixture check)
LOOKUP_ONLY = LOOKUP.replace(LINGER, "")


def lookup_candidate(tmp_path: Path, module: str) -> Path:
    cand = tmp_path / "cand"
    cand.mkdir(exist_ok=True)
    (cand / "module.py").write_text(module)
    return cand


def local_engine(tmp_path: Path, sandbox: str, name: str) -> LocalEngine:
    return LocalEngine(LocalEngineConfig(agent=AGENT, sandbox=sandbox), tmp_path / name)


def score(engine, ts: TaskSet, cand: Path) -> tuple[float, str]:
    try:
        run = run_tasks(engine, ts, cand, ["pyfix-001"], put=lambda b: "x").runs["pyfix-001"]
    finally:
        engine.close()
    out = run.trajectory["verifier"].get("stdout_tail") or ""
    return run.reward, out.strip()


def solution() -> str:
    spec = importlib.util.spec_from_file_location("pyfix_specs", PYFIX / "specs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyfix_specs"] = module
    spec.loader.exec_module(module)
    return next(s.solution for s in module.SPECS if s.name == "mean")


def task_set(tmp_path: Path, source: Path = PYFIX) -> TaskSet:
    root = tmp_path / "tasks"
    shutil.copytree(source / "pyfix-001", root / "pyfix-001")
    return TaskSet.load(root)
