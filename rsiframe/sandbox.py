"""Run a command confined to a few mounted folders: bubblewrap, or a plain process fallback.

One interface, :class:`Sandbox`; the evaluator (and later the mutators) ask for
mounts, a working directory, an environment built from scratch, a time limit
and an output cap. :class:`BwrapSandbox` shows the process nothing of the host
but the system folders, the Python installation and the given mounts, with no
network unless asked. :class:`ProcessSandbox` is the weaker fallback used where
bubblewrap is missing; its isolation level is recorded in every certificate.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rsiframe.errors import SandboxError

DEFAULT_OUTPUT_LIMIT = 1 << 20


@dataclass(frozen=True)
class Mount:
    host: Path
    inside: str
    writable: bool = False


@dataclass
class ProcResult:
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout: bytes
    stderr: bytes
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _python_dirs() -> list[str]:
    dirs = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    return sorted(dirs)


def base_env() -> dict[str, str]:
    """The only environment a sandboxed process starts from (nothing inherited)."""
    py_bins = [os.path.join(d, "bin") for d in (sys.prefix, sys.base_prefix)]
    path = ":".join(dict.fromkeys([*py_bins, "/usr/local/bin", "/usr/bin", "/bin"]))
    return {
        "PATH": path,
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every sandboxed process still running (on Ctrl-C or shutdown)."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


def _execute(
    argv: list[str], cwd: str, env: dict[str, str], timeout: float, output_limit: int
) -> ProcResult:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]}: {exc.strerror}") from exc
        with _live_lock:
            _live.add(proc)
        expired = threading.Event()

        def on_timeout() -> None:
            expired.set()
            _kill_group(proc)

        # a timer rather than wait(timeout): wait() with a timeout polls with sleeps
        timer = threading.Timer(timeout, on_timeout)
        timer.daemon = True
        timer.start()
        try:
            proc.wait()
            # whatever the command left running in its group dies with it, so nothing
            # from one phase (the agent) can act during the next (the verifier)
            _kill_group(proc)
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            timer.cancel()
            with _live_lock:
                _live.discard(proc)
        duration = time.monotonic() - start
        stdout, t1 = _read_capped(out, output_limit)
        stderr, t2 = _read_capped(err, output_limit)
    timed_out = expired.is_set()
    return ProcResult(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=duration,
        stdout=stdout,
        stderr=stderr,
        truncated=t1 or t2,
    )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _read_capped(f, limit: int) -> tuple[bytes, bool]:  # type: ignore[no-untyped-def]
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    return f.read(limit), size > limit


class Sandbox:
    """Runs a command confined to mounts; subclasses say how (``prepare``) and what paths
    the process sees (``view``)."""

    isolation = ""

    def view(self, mount: Mount) -> str:
        raise NotImplementedError

    def prepare(
        self, argv: list[str], mounts: list[Mount], cwd: Mount, env: dict[str, str], network: bool
    ) -> tuple[list[str], str, dict[str, str]]:
        """(command line, host working directory, host environment) for ``argv``."""
        raise NotImplementedError

    def run(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        timeout: float,
        network: bool = False,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ProcResult:
        cmd, host_cwd, host_env = self.prepare(argv, mounts, cwd, env, network)
        return _execute(cmd, host_cwd, host_env, timeout, output_limit)


class ProcessSandbox(Sandbox):
    """Fallback: a plain child process in its own process group. Paths are host paths."""

    isolation = "process"

    def view(self, mount: Mount) -> str:
        return str(mount.host)

    def prepare(
        self, argv: list[str], mounts: list[Mount], cwd: Mount, env: dict[str, str], network: bool
    ) -> tuple[list[str], str, dict[str, str]]:
        return list(argv), str(cwd.host), {**base_env(), **env}


class BwrapSandbox(Sandbox):
    """bubblewrap: fresh namespaces, read-only system, only the given mounts writable."""

    isolation = "bwrap"

    def __init__(self, binary: str = "bwrap") -> None:
        self.binary = binary

    def view(self, mount: Mount) -> str:
        return mount.inside

    def prepare(
        self, argv: list[str], mounts: list[Mount], cwd: Mount, env: dict[str, str], network: bool
    ) -> tuple[list[str], str, dict[str, str]]:
        return (
            self.command(argv, mounts=mounts, cwd=cwd, env=env, network=network),
            "/",
            {**os.environ},
        )

    def command(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
    ) -> list[str]:
        args = [self.binary, "--unshare-all", "--die-with-parent", "--new-session"]
        if network:
            args.append("--share-net")
        # the fresh /tmp first, so a Python installed under /tmp is bound on top of it
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = f"/{top}"
            if os.path.islink(host):
                args += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                args += ["--ro-bind", host, host]
        args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for d in _python_dirs():
            args += ["--ro-bind", d, d]
        for m in mounts:
            args += ["--bind" if m.writable else "--ro-bind", str(m.host), m.inside]
        args += ["--chdir", cwd.inside, "--clearenv"]
        for k, v in {**base_env(), **env}.items():
            args += ["--setenv", k, v]
        return [*args, "--", *argv]


@functools.cache
def bwrap_works() -> bool:
    """True when bubblewrap is installed and can create its namespaces here."""
    binary = shutil.which("bwrap")
    if not binary:
        return False
    sb = BwrapSandbox(binary)
    tmp = Path(tempfile.mkdtemp(prefix="rsiframe-probe-"))
    try:
        m = Mount(tmp, "/probe", writable=True)
        res = sb.run(["/bin/sh", "-c", "true"], mounts=[m], cwd=m, env={}, timeout=20)
        return res.ok
    except SandboxError:
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_sandbox(kind: str) -> Sandbox:
    """``auto`` picks bubblewrap when it works here and the process runner otherwise."""
    if kind == "process":
        return ProcessSandbox()
    if kind in ("bwrap", "auto"):
        if bwrap_works():
            return BwrapSandbox(shutil.which("bwrap") or "bwrap")
        if kind == "bwrap":
            raise SandboxError("bubblewrap was requested but does not work on this machine")
        return ProcessSandbox()
    raise SandboxError(f"unknown sandbox kind {kind!r}")
