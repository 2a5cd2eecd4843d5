"""Run a command confined to a few mounted folders: bubblewrap, or a plain process fallback.

One interface, :class:`Sandbox`; the evaluator and the mutation operators ask
for mounts, a working directory, an environment built from scratch, a time
limit, an output cap and, optionally, a memory limit (``RLIMIT_AS`` set with
``prlimit`` in the child), a hard output limit that kills the whole tree, and
paths to hide. :class:`BwrapSandbox` shows the process nothing of the host but
the system folders, the Python installation and the given mounts, with no
network unless asked; its pid namespace and ``--die-with-parent`` take every
descendant down with it, ``setsid`` escapes included. The signing-key folder is
masked even when it lies under something mounted. :class:`ProcessSandbox` is
the weaker fallback used where bubblewrap is missing; its isolation level is
recorded in every certificate and mutation event. A Docker implementation can be
added beside them behind the same interface: a :class:`Sandbox` subclass that fills in
``view`` and ``prepare``.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsiframe.errors import SandboxError
from rsiframe.keys import key_dir

DEFAULT_OUTPUT_LIMIT = 1 << 20
#: how often a run with a hard output limit checks the size of what was written
_WATCH_INTERVAL_S = 0.05


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
    #: killed because stdout or stderr grew past the hard ``output_cap``
    output_exceeded: bool = False

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


#: secrets of the host system under the read-only system folders a sandbox shows: password
#: hashes, SSH host keys, TLS private keys (bwrap runs as the user, who may be root)
HOST_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssl/private",
    "/etc/ssh/ssh_host_*key",
)


def host_secrets() -> list[Path]:
    """The :data:`HOST_SECRETS` present on this machine, masked in every sandbox."""
    return [Path(p) for pattern in HOST_SECRETS for p in sorted(glob.glob(pattern))]


def memory_prefix(memory_mb: int | None) -> list[str]:
    """``prlimit --as=...`` in front of a command, so the limit is set in the child."""
    if memory_mb is None:
        return []
    binary = shutil.which("prlimit")
    if binary is None:
        raise SandboxError("a memory limit needs prlimit (util-linux), which is not installed")
    return [binary, f"--as={int(memory_mb) << 20}", "--"]


_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def kill_all() -> None:
    """Kill every sandboxed process still running (on Ctrl-C or shutdown)."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        kill_group(proc)


def _execute(
    argv: list[str],
    cwd: str,
    env: dict[str, str],
    timeout: float,
    output_limit: int,
    output_cap: int | None = None,
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
        overflow = threading.Event()
        done = threading.Event()

        def on_timeout() -> None:
            expired.set()
            kill_group(proc)

        def watch() -> None:
            deadline = start + timeout
            while not done.wait(_WATCH_INTERVAL_S):
                if time.monotonic() >= deadline:
                    on_timeout()
                    return
                sizes = (os.fstat(f.fileno()).st_size for f in (out, err))
                if output_cap is not None and any(n > output_cap for n in sizes):
                    overflow.set()
                    kill_group(proc)
                    return

        # without a hard output cap, a timer rather than polling: it costs nothing per run
        watcher: threading.Timer | threading.Thread
        if output_cap is None:
            watcher = threading.Timer(timeout, on_timeout)
        else:
            watcher = threading.Thread(target=watch)
        watcher.daemon = True
        watcher.start()
        try:
            proc.wait()
            # whatever the command left running in its group dies with it, so nothing
            # from one phase (the agent) can act during the next (the verifier)
            kill_group(proc)
        except BaseException:
            kill_group(proc)
            raise
        finally:
            done.set()
            if isinstance(watcher, threading.Timer):
                watcher.cancel()
            else:
                # it reads the output files' sizes: they must outlive it (they close below)
                watcher.join()
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
        output_exceeded=overflow.is_set(),
    )


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group ``proc`` leads (it was started with a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _read_capped(f, limit: int) -> tuple[bytes, bool]:  # type: ignore[no-untyped-def]
    # pread, not seek+read: the file offset is shared with the child, and a process that
    # outlives the kill by a moment (bwrap's pid namespace dies asynchronously) moves it
    fd = f.fileno()
    size = os.fstat(fd).st_size
    return os.pread(fd, min(limit, size), 0), size > limit


class Sandbox:
    """Runs a command confined to mounts; subclasses say how (``prepare``) and what paths
    the process sees (``view``)."""

    isolation = ""

    def view(self, mount: Mount) -> str:
        raise NotImplementedError

    def prepare(
        self,
        argv: list[str],
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
        hide: Sequence[Path] = (),
    ) -> tuple[list[str], str, dict[str, str]]:
        """(command line, host working directory, host environment) for ``argv``."""
        raise NotImplementedError

    def launch(
        self,
        argv: list[str],
        *,
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool = False,
        memory_mb: int | None = None,
        hide: Sequence[Path] = (),
    ) -> tuple[list[str], str, dict[str, str]]:
        """(command line, host working directory, host environment) that run ``argv``
        confined, for a caller that starts the process itself. ``memory_mb`` caps the
        address space of the command and each descendant. ``hide`` (and always the key
        folder and :func:`host_secrets`) is masked wherever a mount would show it."""
        hidden = [key_dir(), *host_secrets(), *hide]
        return self.prepare([*memory_prefix(memory_mb), *argv], mounts, cwd, env, network, hidden)

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
        memory_mb: int | None = None,
        output_cap: int | None = None,
        hide: Sequence[Path] = (),
    ) -> ProcResult:
        """Run ``argv`` as :meth:`launch` confines it; ``output_limit`` bytes of each stream
        are kept, and a stream that grows past ``output_cap`` kills the tree."""
        cmd, host_cwd, host_env = self.launch(
            argv, mounts=mounts, cwd=cwd, env=env, network=network, memory_mb=memory_mb, hide=hide
        )
        return _execute(cmd, host_cwd, host_env, timeout, output_limit, output_cap)


class ProcessSandbox(Sandbox):
    """Fallback: a plain child process in its own process group. Paths are host paths."""

    isolation = "process"

    def view(self, mount: Mount) -> str:
        return str(mount.host)

    def prepare(
        self,
        argv: list[str],
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
        hide: Sequence[Path] = (),
    ) -> tuple[list[str], str, dict[str, str]]:
        return list(argv), str(cwd.host), {**base_env(), **env}


#: system folders :class:`BwrapSandbox` binds read-only where they are folders (recreated
#: as the symlinks they are otherwise), then those it always binds read-only
_TOP_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_RO_DIRS = ("/usr", "/etc")
#: every system folder the sandbox shows: :func:`_masks` covers hidden paths under each
_SYSTEM_DIRS = (*_TOP_DIRS, *_RO_DIRS)


class BwrapSandbox(Sandbox):
    """bubblewrap: fresh namespaces, read-only system, only the given mounts writable."""

    isolation = "bwrap"

    def __init__(self, binary: str = "bwrap") -> None:
        self.binary = binary

    def view(self, mount: Mount) -> str:
        return mount.inside

    def prepare(
        self,
        argv: list[str],
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
        hide: Sequence[Path] = (),
    ) -> tuple[list[str], str, dict[str, str]]:
        return (
            self.command(argv, mounts=mounts, cwd=cwd, env=env, network=network, hide=hide),
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
        hide: Sequence[Path] = (),
    ) -> list[str]:
        args = [self.binary, "--unshare-all", "--die-with-parent", "--new-session"]
        if network:
            args.append("--share-net")
        # the fresh /tmp first, so a Python installed under /tmp is bound on top of it
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for host in _TOP_DIRS:
            if os.path.islink(host):
                args += ["--symlink", os.readlink(host), host]
            elif os.path.isdir(host):
                args += ["--ro-bind", host, host]
        for host in _RO_DIRS:
            args += ["--ro-bind", host, host]
        for d in _python_dirs():
            args += ["--ro-bind", d, d]
        for m in mounts:
            args += ["--bind" if m.writable else "--ro-bind", str(m.host), m.inside]
        args += _masks(hide, mounts)
        args += ["--chdir", cwd.inside, "--clearenv"]
        for k, v in {**base_env(), **env}.items():
            args += ["--setenv", k, v]
        return [*args, "--", *argv]


def _masks(hide: Sequence[Path], mounts: list[Mount]) -> list[str]:
    """bwrap arguments covering each hidden path wherever a bind would show it."""
    roots = [(d, d) for d in (*_SYSTEM_DIRS, *_python_dirs())]
    roots += [(os.path.realpath(m.host), m.inside) for m in mounts]
    args: list[str] = []
    for p in hide:
        host = os.path.realpath(p)
        if not os.path.exists(host):
            continue
        for root, inside in roots:
            if host == root or host.startswith(root.rstrip("/") + "/"):
                rel = os.path.relpath(host, root)
                where = inside if rel == "." else os.path.join(inside, rel)
                if os.path.isdir(host):
                    args += ["--tmpfs", where]
                else:
                    args += ["--ro-bind", "/dev/null", where]
    return args


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


_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")
#: never passed into a sandbox, whatever a recipe says
FORBIDDEN_ENV_PREFIXES = ("RSIFRAME_",)


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allow: list[str] = Field(
        default_factory=list,
        description="endpoints host:port the command may reach; empty = no network "
        "(bubblewrap cannot filter by host: non-empty turns the whole network on)",
    )

    @field_validator("allow")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        for item in v:
            if not _ENDPOINT.match(item):
                raise ValueError(f"{item!r} is not host:port")
        return v


class SandboxOptions(BaseModel):
    """How an operator's command or code is confined (part of operator configs).

    Network is off unless ``network.allow`` names endpoints (``host:port``). Bubblewrap
    shares the host network or none: a non-empty allow-list turns the whole network on,
    and the endpoints are recorded with the mutation rather than enforced one by one.
    """

    model_config = ConfigDict(extra="forbid")
    sandbox: Literal["bwrap", "auto", "process", "docker"] = Field(
        "bwrap",
        description="bwrap (fail if it does not work), auto (fall back to a plain process), "
        "process, or docker (a container of the local base image)",
    )
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    memory_mb: int | None = Field(4096, gt=0, description="address-space limit per process")
    output_limit_bytes: int = Field(1 << 20, gt=0, description="output kept per stream")
    output_cap_bytes: int = Field(
        64 << 20, gt=0, description="a stream past this size kills the command"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")
    pass_env: list[str] = Field(
        default_factory=list,
        description="host environment variables passed through by name (e.g. an API key)",
    )

    @field_validator("pass_env")
    @classmethod
    def _no_framework_env(cls, v: list[str]) -> list[str]:
        for name in v:
            if name.startswith(FORBIDDEN_ENV_PREFIXES):
                raise ValueError(f"{name} may not be passed into a sandbox")
        return v

    @field_validator("env")
    @classmethod
    def _no_framework_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if name.startswith(FORBIDDEN_ENV_PREFIXES):
                raise ValueError(f"{name} may not be set inside a sandbox")
        return v

    def host_env(self) -> dict[str, str]:
        """The environment a command starts from: the ``pass_env`` names the host has,
        then ``env``."""
        passed = {k: os.environ[k] for k in self.pass_env if k in os.environ}
        return {**passed, **self.env}

    def use_fields(self, isolation: str, timeout: float) -> dict[str, Any]:
        """The fields of ``api.SandboxUse`` for a command run under these options (a leaf,
        this module may not import ``api``)."""
        return {
            "isolation": isolation,
            "requested": self.sandbox,
            "network": list(self.network.allow),
            "memory_mb": self.memory_mb,
            "timeout_s": timeout,
            "passed_env": sorted(k for k in self.pass_env if k in os.environ),
        }


#: sandboxes implemented outside this module, by kind; the module named in ``_MODULES``
#: registers its kind when first asked for (the docker SDK loads only then)
_KINDS: dict[str, Callable[[], Sandbox]] = {}
_MODULES = {"docker": "rsiframe.docker_sandbox"}


def register(kind: str, factory: Callable[[], Sandbox]) -> None:
    """Make ``make_sandbox(kind)`` return ``factory()`` (a sandbox module registers itself)."""
    _KINDS[kind] = factory


def make_sandbox(kind: str) -> Sandbox:
    """``auto`` picks bubblewrap when it works here and the process runner otherwise."""
    if kind in _MODULES and kind not in _KINDS:
        importlib.import_module(_MODULES[kind])
    if kind in _KINDS:
        return _KINDS[kind]()
    if kind == "process":
        return ProcessSandbox()
    if kind in ("bwrap", "auto"):
        if bwrap_works():
            return BwrapSandbox(shutil.which("bwrap") or "bwrap")
        if kind == "bwrap":
            raise SandboxError("bubblewrap was requested but does not work on this machine")
        return ProcessSandbox()
    raise SandboxError(f"unknown sandbox kind {kind!r}")
