"""The pyfix verifier runs the agent's code where neither the answers nor the reward are.

A module that looks its answers up in ``cases.json`` (on disk, in the verifier's frames or
objects, through ``/proc``) and forges the reward (now, and from a process it leaves) must
score 0 through the local engine in bubblewrap and in Docker and through the Harbor
engine's bwrap environment, while the reference solution keeps scoring 1. The verifier as
it shipped before (``tests/corpus/tasksets/pyfix-vulnerable``) gave that module 1.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rsiframe.sandbox.bwrap import BwrapSandbox, Mount
from tests.support.paths import REPO
from tests.support.pyfix import (
    LOOKUP,
    LOOKUP_ONLY,
    PYFIX,
    local_engine,
    lookup_candidate,
    score,
    solution,
    task_set,
)

VULNERABLE = REPO / "tests" / "corpus" / "tasksets" / "pyfix-vulnerable" / "tasks"


# -- the local engine in bubblewrap ---------------------------------------------------------


def test_the_old_verifier_gave_the_lookup_module_full_marks(tmp_path: Path) -> None:
    """The kept copy of the old verifier: the attack this issue is about (fixture check).
    Its lookup alone: the writer it leaves behind can race the old test.sh's empty-file
    fallback (``printf 0``) under load, so the full attack's reward there is 0 or 1."""
    ts = task_set(tmp_path, VULNERABLE)
    reward, out = score(
        local_engine(tmp_path, "bwrap", "w"), ts, lookup_candidate(tmp_path, LOOKUP_ONLY)
    )
    assert reward == 1.0, out


def test_the_lookup_module_scores_zero_and_the_solution_one_in_bubblewrap(tmp_path: Path) -> None:
    ts = task_set(tmp_path)
    reward, out = score(
        local_engine(tmp_path, "bwrap", "w1"), ts, lookup_candidate(tmp_path, LOOKUP)
    )
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    reward, out = score(
        local_engine(tmp_path, "bwrap", "w2"), ts, lookup_candidate(tmp_path, solution())
    )
    assert (reward, out) == (1.0, "all 3 cases pass")


def test_the_process_fallback_runs_nothing_and_says_why(tmp_path: Path) -> None:
    ts = task_set(tmp_path)
    reward, out = score(
        local_engine(tmp_path, "process", "w"), ts, lookup_candidate(tmp_path, solution())
    )
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
    assert _verify_in_bwrap(tmp_path, solution()) == ("1", "all 3 cases pass")
    with tempfile.TemporaryFile() as prog:
        prog.write(NO_LANDLOCK)
        prog.seek(0)
        reward, out = _verify_in_bwrap(tmp_path, solution(), prog.fileno())
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
