"""rsiframe.sandbox.bwrap: bubblewrap confinement and the plain process fallback, run for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rsiframe.certs import signing
from rsiframe.errors import SandboxError
from rsiframe.sandbox import bwrap as sandbox
from rsiframe.sandbox.bwrap import (
    BwrapSandbox,
    Mount,
    ProcessSandbox,
    ProcResult,
    _python_dirs,
    base_env,
    bwrap_works,
    host_secrets,
    make_sandbox,
)
from tests.support.cgroups import need_cgroup
from tests.support.paths import REPO

HAVE_BWRAP = bwrap_works()
needs_bwrap = pytest.mark.skipif(
    not HAVE_BWRAP, reason="platform limit: bubblewrap is not installed or cannot make namespaces"
)


def _sh(
    sb: BwrapSandbox | ProcessSandbox,
    script: str,
    mounts: list[Mount],
    *,
    cwd: Mount | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 20,
    network: bool = False,
    output_limit: int = 1 << 20,
    hide: list[Path] | None = None,
) -> ProcResult:
    return sb.run(
        ["/bin/sh", "-c", script],
        mounts=mounts,
        cwd=cwd or mounts[0],
        env=env or {},
        timeout=timeout,
        network=network,
        output_limit=output_limit,
        hide=hide or [],
    )


@pytest.fixture
def box(tmp_path: Path) -> tuple[Mount, Path]:
    host = tmp_path / "box"
    host.mkdir()
    return Mount(host, "/box", writable=True), host


# -- bubblewrap ----------------------------------------------------------------------------


@needs_bwrap
def test_bwrap_runs_and_reports_exit_status(box: tuple[Mount, Path]) -> None:
    m, _ = box
    res = _sh(BwrapSandbox(), "echo out; echo err >&2; exit 3", [m])
    assert res.exit_code == 3
    assert not res.ok and not res.timed_out
    assert res.stdout == b"out\n"
    assert res.stderr == b"err\n"
    assert res.duration_s > 0
    assert _sh(BwrapSandbox(), "pwd", [m]).stdout == b"/box\n"


@needs_bwrap
def test_bwrap_sees_only_its_mounts(tmp_path: Path, box: tuple[Mount, Path]) -> None:
    m, host = box
    (host / "inside.txt").write_text("visible")
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    script = f"""
        for p in {REPO}/pyproject.toml {REPO}/rsiframe {REPO}/.git {tmp_path} {secret} \
                 /root/.bashrc /root/.gitconfig /home /var /opt /srv /mnt; do
            if [ -e "$p" ]; then echo "VISIBLE $p"; fi
        done
        cat /box/inside.txt; echo
        ls -A /root
    """
    res = _sh(BwrapSandbox(), script, [m])
    assert res.exit_code == 0, res.stderr
    out = res.stdout.decode()
    assert "VISIBLE" not in out, out
    assert "visible" in out
    # /root holds nothing but the path down to the Python installation (when it lives there)
    listed = set(out.split("visible", 1)[1].split())
    needed = {
        Path(d).relative_to("/root").parts[0] for d in _python_dirs() if d.startswith("/root/")
    }
    assert listed == needed


@needs_bwrap
def test_bwrap_has_python_and_a_fresh_tmp(box: tuple[Mount, Path]) -> None:
    m, _ = box
    marker = Path("/tmp") / f"rsiframe-test-marker-{os.getpid()}"
    marker.write_text("host tmp")
    try:
        res = _sh(
            BwrapSandbox(),
            f'python3 -c "import sys; print(sys.version_info[:2])"; ls -A /tmp; '
            f"test -e {marker} && echo LEAK; echo ok > /tmp/x && cat /tmp/x",
            [m],
        )
    finally:
        marker.unlink()
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.decode().strip().split("\n")
    assert lines[0] == str(tuple(sys.version_info[:2]))
    assert "LEAK" not in res.stdout.decode()
    # /tmp is fresh: nothing but the way to a Python installed under /tmp, then writable
    under_tmp = {
        Path(d).relative_to("/tmp").parts[0] for d in _python_dirs() if d.startswith("/tmp/")
    }
    assert set(lines[1:-1]) == under_tmp
    assert lines[-1] == "ok"


@needs_bwrap
def test_bwrap_read_only_and_writable_mounts(tmp_path: Path) -> None:
    ro_host = tmp_path / "ro"
    rw_host = tmp_path / "rw"
    ro_host.mkdir()
    rw_host.mkdir()
    (ro_host / "data.txt").write_text("original")
    ro = Mount(ro_host, "/ro")
    rw = Mount(rw_host, "/rw", writable=True)
    res = _sh(
        BwrapSandbox(),
        "echo changed > /ro/data.txt && echo RO-WRITE-OK; "
        "touch /ro/new 2>/dev/null && echo RO-CREATE-OK; "
        "rm -f /ro/data.txt 2>/dev/null; "
        "echo made > /rw/out.txt && echo RW-OK; "
        "touch /usr/rsiframe-probe 2>/dev/null && echo USR-WRITE-OK; "
        "touch /etc/rsiframe-probe 2>/dev/null && echo ETC-WRITE-OK; true",
        [ro, rw],
        cwd=rw,
    )
    out = res.stdout.decode()
    assert "RO-WRITE-OK" not in out
    assert "RO-CREATE-OK" not in out
    assert "USR-WRITE-OK" not in out and "ETC-WRITE-OK" not in out
    assert "RW-OK" in out
    assert (ro_host / "data.txt").read_text() == "original"
    assert not (ro_host / "new").exists()
    assert (rw_host / "out.txt").read_text() == "made\n"
    assert not Path("/usr/rsiframe-probe").exists()


@needs_bwrap
def test_bwrap_has_no_network(box: tuple[Mount, Path]) -> None:
    m, _ = box
    res = _sh(BwrapSandbox(), "cat /proc/net/dev", [m])
    assert res.exit_code == 0, res.stderr
    interfaces = {
        line.split(":")[0].strip() for line in res.stdout.decode().splitlines()[2:] if ":" in line
    }
    assert interfaces == {"lo"}
    probe = (
        "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "s.settimeout(3)\n"
        "try:\n"
        "    s.connect(('1.1.1.1', 53))\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('FAILED', e.errno)\n"
    )
    res = BwrapSandbox().run([sys.executable, "-c", probe], mounts=[m], cwd=m, env={}, timeout=20)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith(b"FAILED"), res.stdout


@needs_bwrap
def test_bwrap_network_flag_shares_the_host_network(box: tuple[Mount, Path]) -> None:
    m, _ = box
    host_ifaces = {
        line.split(":")[0].strip()
        for line in Path("/proc/net/dev").read_text().splitlines()[2:]
        if ":" in line
    }
    res = _sh(BwrapSandbox(), "cat /proc/net/dev", [m], network=True)
    inside = {
        line.split(":")[0].strip() for line in res.stdout.decode().splitlines()[2:] if ":" in line
    }
    assert inside == host_ifaces


@needs_bwrap
def test_bwrap_env_is_rebuilt(box: tuple[Mount, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    m, _ = box
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    res = _sh(BwrapSandbox(), "env", [m], env={"GIVEN": "yes"})
    env = dict(line.split("=", 1) for line in res.stdout.decode().splitlines() if "=" in line)
    assert "SECRET_TOKEN" not in env
    assert b"hunter2" not in res.stdout
    assert env["GIVEN"] == "yes"
    expected = base_env()
    for key, value in expected.items():
        assert env[key] == value
    assert set(env) <= {*expected, "GIVEN", "PWD", "SHLVL", "_", "OLDPWD"}


def _writer(path: str) -> str:
    """A shell loop that appends to ``path`` every 50 ms for as long as it lives."""
    return f"while :; do echo x >> {path}; sleep 0.05; done"


def _quiet(path: Path, within: float = 10.0) -> bool:
    """True once nothing writes ``path`` any more: its size holds still for half a second,
    within ``within`` s. No timing guess: bubblewrap's PID namespace dies a moment after
    the command returns (longer on a loaded host), but a writer that outlived the run
    keeps writing every 50 ms and never holds still."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        before = path.stat().st_size if path.exists() else -1
        time.sleep(0.5)
        if before == (path.stat().st_size if path.exists() else -1):
            return True
    return False


@needs_bwrap
def test_bwrap_timeout_kills_the_whole_tree(box: tuple[Mount, Path]) -> None:
    m, host = box
    script = (
        f"({_writer('/box/late.txt')}) & "
        f"setsid sh -c '{_writer('/box/escaped.txt')}' & "
        "echo started; sleep 30"
    )
    start = time.monotonic()
    # 3 s: room for bubblewrap to start on a loaded host before the timeout
    res = _sh(BwrapSandbox(), script, [m], timeout=3)
    assert time.monotonic() - start < 20
    assert res.timed_out
    assert res.exit_code is None
    assert not res.ok
    assert res.stdout == b"started\n"
    assert (host / "late.txt").exists() and (host / "escaped.txt").exists()  # they ran
    assert _quiet(host / "late.txt")
    assert _quiet(host / "escaped.txt")


@needs_bwrap
def test_bwrap_background_process_dies_with_the_command(box: tuple[Mount, Path]) -> None:
    m, host = box
    res = _sh(BwrapSandbox(), f"({_writer('/box/late.txt')}) & sleep 0.2; exit 0", [m])
    assert res.ok
    assert _quiet(host / "late.txt")


@needs_bwrap
def test_bwrap_output_limit(box: tuple[Mount, Path]) -> None:
    m, _ = box
    res = _sh(
        BwrapSandbox(),
        "head -c 5000 /dev/zero | tr '\\0' a; head -c 100 /dev/zero | tr '\\0' b >&2",
        [m],
        output_limit=1024,
    )
    assert res.exit_code == 0
    assert res.stdout == b"a" * 1024
    assert res.stderr == b"b" * 100
    assert res.truncated
    small = _sh(BwrapSandbox(), "printf 1234", [m], output_limit=1024)
    assert small.stdout == b"1234" and not small.truncated


@needs_bwrap
def test_bwrap_command_shape(box: tuple[Mount, Path]) -> None:
    m, host = box
    ro = Mount(Path("/x"), "/y")
    cmd = BwrapSandbox("bwrap").command(
        ["echo", "hi"], mounts=[m, ro], cwd=m, env={"A": "1"}, network=False
    )
    assert cmd[0] == "bwrap"
    assert "--unshare-all" in cmd and "--share-net" not in cmd
    assert "--clearenv" in cmd
    assert cmd[-3:] == ["--", "echo", "hi"]
    i = cmd.index(str(host))
    assert cmd[i - 1 : i + 2] == ["--bind", str(host), "/box"]
    j = cmd.index("/x")
    assert cmd[j - 1 : j + 2] == ["--ro-bind", "/x", "/y"]
    assert "--share-net" in BwrapSandbox().command(
        ["true"], mounts=[m], cwd=m, env={}, network=True
    )


def test_missing_binary_is_a_sandbox_error(box: tuple[Mount, Path]) -> None:
    m, _ = box
    with pytest.raises(SandboxError, match="cannot start"):
        _sh(BwrapSandbox("/nonexistent/bwrap"), "true", [m])
    with pytest.raises(SandboxError, match="cannot start"):
        ProcessSandbox().run(["/nonexistent/prog"], mounts=[m], cwd=m, env={}, timeout=5)


# -- the process fallback ------------------------------------------------------------------


def test_process_runs_with_cwd_and_env(
    box: tuple[Mount, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    m, host = box
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    sb = ProcessSandbox()
    assert sb.view(m) == str(host)
    script = 'pwd; echo "$GIVEN"; echo "$HOME"; echo "${SECRET_TOKEN:-unset}"'
    res = _sh(sb, script, [m], env={"GIVEN": "yes"})
    assert res.exit_code == 0
    assert res.stdout.decode().splitlines() == [str(host), "yes", "/tmp", "unset"]


def test_process_timeout_kills_its_process_group(box: tuple[Mount, Path]) -> None:
    m, host = box
    late = host / "late.txt"
    start = time.monotonic()
    res = _sh(ProcessSandbox(), f"({_writer(str(late))}) & echo started; sleep 30", [m], timeout=3)
    assert time.monotonic() - start < 20
    assert res.timed_out and res.exit_code is None
    assert res.stdout == b"started\n"
    assert late.exists()  # it ran
    assert _quiet(late)


def test_process_output_limit(box: tuple[Mount, Path]) -> None:
    m, _ = box
    res = _sh(ProcessSandbox(), "head -c 3000 /dev/zero | tr '\\0' z >&2", [m], output_limit=2000)
    assert res.stderr == b"z" * 2000
    assert res.stdout == b""
    assert res.truncated


# -- choosing a sandbox --------------------------------------------------------------------


def test_make_sandbox_kinds() -> None:
    assert isinstance(make_sandbox("process"), ProcessSandbox)
    with pytest.raises(SandboxError, match="unknown sandbox kind 'nope'"):
        make_sandbox("nope")


@needs_bwrap
def test_make_sandbox_auto_picks_bwrap_here() -> None:
    assert shutil.which("bwrap")
    sb = make_sandbox("auto")
    assert isinstance(sb, BwrapSandbox)
    assert sb.kind == "bwrap" and sb.isolation.startswith("bwrap userns uid=65534")
    assert isinstance(make_sandbox("bwrap"), BwrapSandbox)
    assert ProcessSandbox.isolation == "process"


def test_auto_falls_back_to_process_without_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    import rsiframe.sandbox.bwrap as sandbox_mod

    monkeypatch.setattr(sandbox_mod, "bwrap_works", lambda: False)
    assert isinstance(sandbox_mod.make_sandbox("auto"), ProcessSandbox)
    with pytest.raises(SandboxError, match="bubblewrap was requested"):
        sandbox_mod.make_sandbox("bwrap")


# -- limits and hiding (the mutation sandbox builds on these) -------------------------------


@needs_bwrap
def test_bwrap_memory_limit(box: tuple[Mount, Path]) -> None:
    m, _ = box
    grab = [sys.executable, "-c", "b = bytearray(800 << 20); print(len(b))"]
    small = BwrapSandbox().run(grab, mounts=[m], cwd=m, env={}, timeout=20, memory_mb=200)
    assert small.exit_code != 0
    assert b"MemoryError" in small.stderr
    roomy = BwrapSandbox().run(grab, mounts=[m], cwd=m, env={}, timeout=20, memory_mb=2000)
    assert roomy.ok, roomy.stderr
    # the limit holds for descendants too
    nested = BwrapSandbox().run(
        ["/bin/sh", "-c", f"{sys.executable} -c 'bytearray(800 << 20)' || echo child-denied"],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        memory_mb=200,
    )
    assert b"child-denied" in nested.stdout


def test_process_memory_limit(box: tuple[Mount, Path]) -> None:
    m, _ = box
    res = ProcessSandbox().run(
        [sys.executable, "-c", "bytearray(800 << 20)"],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        memory_mb=200,
    )
    assert res.exit_code != 0 and b"MemoryError" in res.stderr


def _limits_inside(text: str) -> dict[str, tuple[str, str]]:
    """``/proc/self/limits`` as {name: (soft, hard)}."""
    rows = {}
    for line in text.splitlines()[1:]:
        cols = line[26:].split()
        rows[line[:26].strip()] = (cols[0], cols[1])
    return rows


@pytest.mark.parametrize("kind", ["bwrap", "process"])
def test_the_rlimits_inside_are_the_ones_asked_for(
    box: tuple[Mount, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits are set by the shell step in front of the command (``ulimit``, whose
    units differ from prlimit's): read back from ``/proc/self/limits`` inside, in bytes.
    No cgroup here, so memory and processes fall back to rlimits; RLIMIT_NPROC only
    under bubblewrap (a user namespace of its own)."""
    if kind == "bwrap" and not HAVE_BWRAP:
        pytest.skip("platform limit: bubblewrap does not work here")
    from rsiframe.sandbox import cgroups

    monkeypatch.setattr(cgroups, "_roots", {"pids": "none (test)", "memory": "none (test)"})
    monkeypatch.delenv("RSIFRAME_REQUIRE_BWRAP", raising=False)
    m, _ = box
    sb = BwrapSandbox() if kind == "bwrap" else ProcessSandbox()
    res = sb.run(
        ["cat", "/proc/self/limits"],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        limits=sandbox.Limits(memory_mb=300, pids=40, file_mb=7),
    )
    assert res.ok, res.stderr
    got = _limits_inside(res.stdout.decode())
    assert got["Max address space"] == (str(300 << 20), str(300 << 20))
    assert got["Max file size"] == (str(7 << 20), str(7 << 20))
    if kind == "bwrap":
        assert got["Max processes"] == ("40", "40")
    else:
        assert got["Max processes"] != ("40", "40")
    assert len(res.fallbacks) == 2
    # root's processes are exempt from RLIMIT_NPROC: the fallback says nothing holds it
    unheld = kind == "process" or os.geteuid() == 0
    assert any(f.startswith("processes not limited") for f in res.fallbacks) == unheld


@pytest.mark.parametrize("kind", ["bwrap", "process"])
def test_a_command_joins_its_cgroups_in_the_one_shell_step_in_front_of_it(
    box: tuple[Mount, Path], kind: str
) -> None:
    """Joining the run's cgroups and setting the rlimits is one ``/bin/sh`` step that
    ``exec``s the command (or bubblewrap): no ``prlimit`` between them."""
    if kind == "bwrap" and not HAVE_BWRAP:
        pytest.skip("platform limit: bubblewrap does not work here")

    need_cgroup("pids")
    m, _ = box
    sb = BwrapSandbox() if kind == "bwrap" else ProcessSandbox()
    argv = ["cat", "/proc/self/cgroup", "/proc/self/limits"]
    lim = sandbox.Limits(pids=40, file_mb=7)
    joins = [Path("/sys/fs/cgroup/pids/x/cgroup.procs")]
    cmd, _, _ = sb._confined(argv, [m], m, {}, False, (), False, lim, nproc=False, joins=joins)
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == "rsiframe-limits"
    assert cmd[2] == f'echo 0 > {joins[0]} && ulimit -f {7 << 11} && exec "$@"'
    assert "prlimit" not in " ".join(cmd)
    if kind == "process":
        assert cmd[4:] == argv
    else:
        assert cmd[4] == sb.binary and cmd[-len(argv) - 1 :] == ["--", *argv]
    res = sb.run(argv, mounts=[m], cwd=m, env={}, timeout=20, limits=lim)
    assert res.ok, res.stderr
    text = res.stdout.decode()
    limits = _limits_inside(text[text.index("Limit") :])
    assert limits["Max file size"] == (str(7 << 20), str(7 << 20))
    if kind == "process":  # (bubblewrap's own cgroup namespace shows its root as /)
        pids_row = next(r for r in text.splitlines() if ":pids:" in r)
        assert f"/rsiframe/run-{os.getpid()}-" in pids_row


def test_a_shell_script_under_the_process_sandbox_starts_with_the_step(
    box: tuple[Mount, Path],
) -> None:
    """``sh -c SCRIPT`` (an evaluator's agent) under the process sandbox: the step's
    commands open the script, in the same shell (one process start); the script runs
    in the run's cgroups with the limits, and a failing step ends it before the script."""

    need_cgroup("pids")
    m, host = box
    script = 'echo "$0 $1"; cat /proc/$$/cgroup; grep "^Max file size" /proc/$$/limits'
    argv = ["sh", "-c", script, "name", "arg"]
    lim = sandbox.Limits(pids=40, file_mb=7)
    sb = ProcessSandbox()
    joins = [Path("/nonexistent-rsiframe/cgroup.procs")]
    cmd, _, _ = sb._confined(argv, [m], m, {}, False, (), False, lim, nproc=False, joins=joins)
    head = f"echo 0 > {joins[0]} && ulimit -f {7 << 11}"
    assert cmd == ["sh", "-c", f"{head} || exit $?; {script}", "name", "arg"]
    res = sb.run(argv, mounts=[m], cwd=m, env={}, timeout=20, limits=lim)
    assert res.ok, res.stderr
    lines = res.stdout.decode().splitlines()
    assert lines[0] == "name arg"
    assert any(f":pids:/rsiframe/run-{os.getpid()}-" in r for r in lines)
    assert lines[-1].split()[3:5] == [str(7 << 20), str(7 << 20)]
    # a step that fails (here: a cgroup it cannot join) ends the shell before the script
    failing = [*cmd[:2], cmd[2].replace(f"{head}", f"echo 0 > {joins[0]}"), *cmd[3:]]
    failing[2] = failing[2].replace(script, f"touch {host / 'ran'}")
    res = sandbox._execute(failing, str(host), sandbox.base_env(), 20, 1 << 20)
    assert res.exit_code != 0 and not (host / "ran").exists()
    # another program named sh (not /bin/sh's) keeps the step in front of it
    other = host / "bin"
    other.mkdir()
    (other / "sh").symlink_to(shutil.which("bash") or "/bin/bash")
    cmd, _, _ = sb._confined(
        argv, [m], m, {"PATH": str(other)}, False, (), False, lim, nproc=False, joins=joins
    )
    assert cmd[:4] == ["/bin/sh", "-c", f'{head} && exec "$@"', "rsiframe-limits"]
    assert cmd[4:] == argv


def test_a_bash_script_under_the_process_sandbox_runs_the_step_itself(
    box: tuple[Mount, Path],
) -> None:
    """``bash SCRIPT`` (an evaluator's verifier) under the process sandbox: bash itself
    runs the step (its ``BASH_ENV``) before the script, no shell in front of it (issue 29);
    the script runs unchanged (``$0``, arguments) in the run's cgroups with the limits in
    bash's units, sees neither variable, and a failing step ends bash before it."""
    need_cgroup("pids")
    m, host = box
    (host / "t.sh").write_text(
        'echo "$0 $1 ${BASH_ENV-unset} ${RSIFRAME_LIMITS-unset}"\n'
        "cat /proc/$$/cgroup\n"
        'grep "^Max file size" /proc/$$/limits\n'
        "bash -c 'echo \"child ${BASH_ENV-unset}\"'\n"
    )
    sb = ProcessSandbox()
    script = sb.view(m) + "/t.sh"
    argv = ["bash", script, "arg"]
    lim = sandbox.Limits(memory_mb=300, pids=40, file_mb=7)
    joins = [Path("/nonexistent-rsiframe/cgroup.procs")]
    cmd, _, env = sb._confined(argv, [m], m, {}, False, (), False, lim, nproc=False, joins=joins)
    assert cmd == argv  # one process start: bash, nothing in front of it
    assert env["BASH_ENV"] == str(sandbox.BASH_STEP)
    assert env["RSIFRAME_LIMITS"] == (
        f"echo 0 > {joins[0]} && ulimit -v {300 << 10} && ulimit -f {7 << 10}"
    )
    res = sb.run(argv, mounts=[m], cwd=m, env={}, timeout=20, limits=lim)
    assert res.ok, res.stderr
    lines = res.stdout.decode().splitlines()
    assert lines[0] == f"{script} arg unset unset"
    assert any(f":pids:/rsiframe/run-{os.getpid()}-" in r for r in lines)
    limits = {r.split("  ")[0]: r.split()[-3:-1] for r in lines if r.startswith("Max ")}
    assert limits["Max file size"] == [str(7 << 20), str(7 << 20)]
    assert lines[-1] == "child unset"
    # a step that fails (here: a cgroup it cannot join) ends bash before the script
    (host / "ran.sh").write_text(f"touch {host / 'ran'}\n")
    failing = {**env, "RSIFRAME_LIMITS": f"echo 0 > {joins[0]}"}
    res = sandbox._execute(["bash", str(host / "ran.sh")], str(host), failing, 20, 1 << 20)
    assert res.exit_code != 0 and not (host / "ran").exists()
    # bash options, or a variable that would keep bash from reading BASH_ENV: sh in front
    for other, extra in ((["bash", "-e", *argv[1:]], {}), (argv, {"POSIXLY_CORRECT": "1"})):
        cmd, _, env = sb._confined(
            other, [m], m, extra, False, (), False, lim, nproc=False, joins=joins
        )
        assert cmd[:2] == ["/bin/sh", "-c"] and cmd[4:] == other and "BASH_ENV" not in env


def test_a_program_named_bash_early_on_path_gets_the_sh_step_in_front(
    box: tuple[Mount, Path], tmp_path: Path
) -> None:
    """A ``bash`` planted in a folder early on PATH would not read ``BASH_ENV`` (and run
    unconfined): only the system's bash runs the step itself; anything else gets the
    ``sh`` step in front, as before issue 29."""
    m, _ = box
    planted = tmp_path / "bin"
    planted.mkdir()
    (planted / "bash").write_text('#!/bin/sh\nexec /bin/sh "$@"\n')
    (planted / "bash").chmod(0o755)
    sb = ProcessSandbox()
    argv = ["bash", sb.view(m) + "/t.sh"]
    lim = sandbox.Limits(memory_mb=300, pids=40, file_mb=7)
    joins = [Path("/nonexistent-rsiframe/cgroup.procs")]
    path = f"{planted}:{os.defpath}"
    cmd, _, env = sb._confined(
        argv, [m], m, {"PATH": path}, False, (), False, lim, nproc=False, joins=joins
    )
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[4:] == argv and "BASH_ENV" not in env


@pytest.mark.parametrize("kind", ["bwrap", "process"])
def test_output_cap_kills_a_flood(box: tuple[Mount, Path], kind: str) -> None:
    if kind == "bwrap" and not HAVE_BWRAP:
        pytest.skip("platform limit: bubblewrap does not work here")
    m, _ = box
    sb = BwrapSandbox() if kind == "bwrap" else ProcessSandbox()
    start = time.monotonic()
    res = sb.run(
        ["/bin/sh", "-c", "echo begin; yes flood"],
        mounts=[m],
        cwd=m,
        env={},
        timeout=60,
        output_limit=1000,
        output_cap=1 << 20,
    )
    assert time.monotonic() - start < 30
    assert res.output_exceeded and not res.timed_out and not res.ok
    assert res.stdout.startswith(b"begin\nflood\n") and len(res.stdout) == 1000
    assert res.truncated
    calm = _sh(sb, "echo fine", [m])
    assert calm.ok and not calm.output_exceeded


@needs_bwrap
def test_bwrap_daemon_that_escapes_with_setsid_dies(box: tuple[Mount, Path]) -> None:
    m, host = box
    # double fork + setsid: the classic daemon, detached from the command's session and group
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            open('/box/daemon.txt', 'a').write('alive')\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
    )
    res = BwrapSandbox().run([sys.executable, "-c", daemon], mounts=[m], cwd=m, env={}, timeout=20)
    assert res.ok, res.stderr
    assert _quiet(host / "daemon.txt")


@needs_bwrap
def test_bwrap_hides_the_key_folder_even_under_a_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    keys = shared / "keys"
    keys.mkdir(parents=True)
    (keys / "run.key").write_text("PRIVATE")
    (shared / "other.txt").write_text("fine")
    secret = shared / "secret.txt"
    secret.write_text("also private")
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(keys))
    m = Mount(shared, "/shared")
    res = _sh(
        BwrapSandbox(),
        "cat /shared/other.txt; ls -A /shared/keys; cat /shared/keys/run.key; "
        "cat /shared/secret.txt; true",
        [m],
        hide=[secret],
    )
    assert res.stdout == b"fine"
    assert b"PRIVATE" not in res.stdout and b"also private" not in res.stdout
    assert (keys / "run.key").read_text() == "PRIVATE"  # masked, not touched


@needs_bwrap
def test_bwrap_hides_the_hosts_secrets_but_not_the_rest_of_etc(tmp_path: Path) -> None:
    present = host_secrets()
    assert Path("/etc/shadow") in present  # Debian always has it
    m = Mount(tmp_path, "/work", writable=True)
    script = "cat /etc/passwd >/dev/null && echo passwd-ok; " + "; ".join(
        f"cat {p} 2>/dev/null | wc -c" if not p.is_dir() else f"ls -A {p} | wc -l" for p in present
    )
    res = _sh(BwrapSandbox(), script, [m])
    lines = res.stdout.decode().split()
    assert lines[0] == "passwd-ok"
    assert lines[1:] == ["0"] * len(present), dict(zip(map(str, present), lines[1:], strict=False))


@pytest.mark.parametrize("explicit", [None, "abs", "~/keys"])
@pytest.mark.parametrize("xdg", [None, "", "set"])
def test_the_sandbox_masks_the_key_folder_signing_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, explicit: str | None, xdg: str | None
) -> None:
    # the folder signing writes keys to is the one the sandbox masks, in every environment
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if explicit is None:
        monkeypatch.delenv("RSIFRAME_KEY_DIR", raising=False)
    else:
        value = str(tmp_path / "explicit") if explicit == "abs" else explicit
        monkeypatch.setenv("RSIFRAME_KEY_DIR", value)
    if xdg is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg") if xdg else "")
    assert sandbox.key_dir() == signing.key_dir()


@needs_bwrap
def test_bwrap_hides_a_key_written_under_xdg_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RSIFRAME_KEY_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    signing.create_signer("run-1")
    pem = tmp_path / "xdg" / "rsiframe" / "keys" / "run-1.pem"
    assert pem.is_file()
    (tmp_path / "xdg" / "other.txt").write_text("fine")
    m = Mount(tmp_path, "/host")
    res = _sh(
        BwrapSandbox(),
        "cat /host/xdg/other.txt; ls -A /host/xdg/rsiframe/keys; "
        "cat /host/xdg/rsiframe/keys/run-1.pem; true",
        [m],
    )
    assert res.stdout == b"fine"
    assert b"PRIVATE KEY" in pem.read_bytes()  # masked, not touched


def test_output_watcher_is_gone_before_the_output_files_close(
    box: tuple[Mount, Path],
) -> None:
    # the watcher polls the output files' sizes; still running once they close, it raised
    # "I/O operation on closed file" in its thread (found by the integrity self-test)
    m, _ = box
    before = {t.ident for t in threading.enumerate()}
    for _ in range(20):
        res = ProcessSandbox().run(
            ["/bin/sh", "-c", "echo hi"], mounts=[m], cwd=m, env={}, timeout=10, output_cap=1 << 20
        )
        assert res.ok
        # other tests' daemon threads may end meanwhile; none may be added by the sandbox
        assert {t.ident for t in threading.enumerate()} <= before


# -- privileges: a user namespace, an unprivileged uid, no capabilities (also as root) -------


@needs_bwrap
def test_bwrap_runs_as_an_unprivileged_uid_with_no_capabilities(box: tuple[Mount, Path]) -> None:
    m, host = box
    res = _sh(BwrapSandbox(), "id -u; grep -E '^Cap(Eff|Bnd|Prm)' /proc/self/status", [m])
    lines = res.stdout.decode().split("\n")
    assert lines[0] == "65534"
    assert all(line.split()[1] == "0000000000000000" for line in lines[1:4])
    # what it writes into a writable mount still belongs to the user running rsiframe
    _sh(BwrapSandbox(), "echo x > /box/made", [m])
    assert (host / "made").stat().st_uid == os.getuid()


@needs_bwrap
@pytest.mark.skipif(os.getuid() != 0, reason="the attack is about a sandbox started by root")
def test_root_cannot_remount_unmask_mknod_or_plant_a_pth(box: tuple[Mount, Path]) -> None:
    m, _ = box
    site = next(p for p in sys.path if p.endswith("site-packages"))
    script = (
        "for d in /usr /etc "
        + sys.prefix
        + "; do mount -o remount,rw,bind $d && echo REMOUNT; done;"
        " umount /etc/shadow && echo UMOUNT; mknod /tmp/n c 1 3 && echo MKNOD;"
        " unshare -Urm true && echo USERNS;"
        f" echo '# x' > {site}/rsiframe-test-planted.pth && echo PTH; true"
    )
    res = _sh(BwrapSandbox(), script, [m], hide=[])
    assert res.ok and res.stdout == b"", res.stdout
    assert not Path(site, "rsiframe-test-planted.pth").exists()


@needs_bwrap
def test_a_sandbox_that_keeps_host_capabilities_refuses_to_start(
    box: tuple[Mount, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a "bubblewrap" that ignores every option: its command runs with the host's privileges
    fake = tmp_path / "fake-bwrap"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "_checked", {})
    m, host = box
    with pytest.raises(SandboxError, match="refuses to start: a self-check inside found host"):
        _sh(BwrapSandbox(str(fake)), "touch /box/ran", [m])
    assert not (host / "ran").exists()


def test_privilege_problems_name_what_was_found() -> None:
    status = "Uid:\t0\t0\t0\t0\nCapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n"
    init = "         0          0 4294967295\n"
    problems = sandbox.privilege_problems(status, init, uid=65534, setup_root=False)
    assert len(problems) == 3 and "host's user namespace" in problems[0]
    ns = "     65534          0          1\n"
    clean = "Uid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\n"
    assert sandbox.privilege_problems(clean, ns, uid=65534, setup_root=False) == []
    # a set-up step may hold its namespace's capabilities, never the host's
    assert sandbox.privilege_problems(status, "0 0 1\n", uid=65534, setup_root=True) == []
    assert sandbox.privilege_problems(status, init, uid=65534, setup_root=True) != []


@needs_bwrap
def test_setup_root_is_namespace_root_and_never_sees_keys_or_a_live_run(
    box: tuple[Mount, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, _ = box
    res = BwrapSandbox().run(
        ["/bin/sh", "-c", "id -u; mount -o remount,rw,bind /usr || echo LOCKED"],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        setup_root=True,
    )
    assert res.stdout.decode().split() == ["0", "LOCKED"]
    keys = tmp_path / "keys"
    keys.mkdir()
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(keys))
    with pytest.raises(SandboxError, match="a set-up step may not mount"):
        BwrapSandbox().run(
            ["true"], mounts=[Mount(tmp_path, "/x")], cwd=m, env={}, timeout=20, setup_root=True
        )
    run = tmp_path / "run"
    (run / "work" / "trial").mkdir(parents=True)
    from rsiframe.certs import keys

    monkeypatch.setattr(keys, "_protected", {})
    keys.protect(run, run / "work")
    inside = Mount(run / "work" / "trial", "/app", writable=True)
    assert (
        BwrapSandbox()
        .run(["true"], mounts=[inside], cwd=inside, env={}, timeout=20, setup_root=True)
        .ok
    )
    with pytest.raises(SandboxError, match="a set-up step may not mount"):
        BwrapSandbox().run(
            ["true"], mounts=[Mount(run, "/r")], cwd=m, env={}, timeout=20, setup_root=True
        )


def test_sandbox_ids_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sandbox.sandbox_ids() == (65534, 65534)
    monkeypatch.setenv("RSIFRAME_SANDBOX_UID", "1234")
    assert BwrapSandbox().isolation == "bwrap userns uid=1234 gid=65534 caps=none"
    for bad in ("0", "x"):
        monkeypatch.setenv("RSIFRAME_SANDBOX_UID", bad)
        with pytest.raises(SandboxError, match="RSIFRAME_SANDBOX_UID"):
            sandbox.sandbox_ids()


# -- the output files: reused by the thread's next command only when none can hold them ------

_ESCAPE = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"  # out of the process group: kill_group does not reach it
    "    for _ in range(400):\n"
    "        os.write(1, b'LATE\\n')\n"
    "        time.sleep(0.01)\n"
    "    os._exit(0)\n"
    "print('first', flush=True)\n"
)


def _output_inodes() -> tuple[int, int] | None:
    pair = getattr(sandbox._spare, "pair", None)
    if pair is None:
        return None
    a, b = (os.fstat(f.fileno()).st_ino for f in pair)
    return a, b


@pytest.mark.parametrize("held", [True, False], ids=["pids-cgroup", "no-cgroup"])
def test_a_commands_output_files_are_reused_only_when_no_process_of_it_is_left(
    box: tuple[Mount, Path], held: bool
) -> None:
    """With a pids cgroup every process of the command is gone when it returns (even one
    that left its group with setsid), so its two output files, emptied, serve the thread's
    next command; without one such a process may still write, and the files are closed:
    the next command's output is its own either way."""
    if held:
        need_cgroup("pids")
    m, _ = box
    limits = sandbox.Limits(pids=32) if held else None
    sandbox._spare.pair = None

    def run(argv: list[str]) -> ProcResult:
        return ProcessSandbox().run(argv, mounts=[m], cwd=m, env={}, timeout=20, limits=limits)

    try:
        first = run([sys.executable, "-c", _ESCAPE])
        assert first.ok and first.stdout.startswith(b"first\n")
        assert first.sealed is held  # what a trial's folders are kept by (trialfolders)
        kept = _output_inodes()
        assert (kept is not None) is held
        time.sleep(0.1)  # the escaped writer, where it lives, writes meanwhile
        second = run(["/bin/sh", "-c", "echo second"])
        assert second.ok and second.stdout == b"second\n"
        assert second.stderr == b""
        if held:
            assert _output_inodes() == kept  # the same two files, emptied
    finally:
        if not held:
            subprocess.run(["pkill", "-f", "b'LATE"], check=False)
