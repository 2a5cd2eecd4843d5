"""Run a command confined to a few mounted folders: bubblewrap, or a plain process fallback.

One interface, :class:`Sandbox`; the evaluator and the mutation operators ask for
mounts, a working directory, an environment built from scratch, a time limit, an output
cap and, optionally, a memory limit (``RLIMIT_AS``, set by the one shell step in front
of the command, :func:`limits_step`), a hard output limit that kills the whole tree, and
paths to hide. :class:`BwrapSandbox` shows the process nothing of the host but the
system folders, the Python installation and the given mounts, with no network unless
asked; its pid namespace and ``--die-with-parent`` take every descendant down with it,
``setsid`` escapes included. The signing-key folder is masked even when it lies under
something mounted. Bubblewrap always runs in a user namespace of its own, also when
rsiframe runs as root: the command is an unprivileged uid inside (:func:`sandbox_ids`,
65534 unless configured), with every capability dropped and no further user namespaces,
so the read-only binds and the masks stay locked; a self-check inside
(:func:`privilege_check`, once per process and kind) refuses to start a sandbox that
still holds host capabilities, and what it found is part of the isolation level recorded
in every certificate. :class:`ProcessSandbox` is the weaker fallback used where
bubblewrap is missing; its isolation level is recorded in every certificate and mutation
event. A Docker implementation can be added beside them behind the same interface: a
:class:`Sandbox` subclass that fills in ``view`` and ``prepare``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import importlib
import os
import re
import shlex
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
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsiframe.certs.keys import key_dir, protected_folders
from rsiframe.errors import SandboxError
from rsiframe.sandbox.cgroups import RunCgroups
from rsiframe.util import ticker

DEFAULT_OUTPUT_LIMIT = 1 << 20
#: the uid and gid a bubblewrap sandbox runs as inside its user namespace, unless
#: ``$RSIFRAME_SANDBOX_UID`` / ``$RSIFRAME_SANDBOX_GID`` say otherwise
DEFAULT_SANDBOX_ID = 65534
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
    #: the resource limit that ended the run (:class:`Limits`), in words; None if none did
    limit: str | None = None
    #: limits held only by a per-process rlimit because no cgroup could hold them, in words
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    #: every process of the command is known gone (its pids cgroup was removed): nothing
    #: it started can still write into the folders it was given
    sealed: bool = False

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


def sandbox_ids() -> tuple[int, int]:
    """(uid, gid) inside every bubblewrap sandbox: ``$RSIFRAME_SANDBOX_UID`` and
    ``$RSIFRAME_SANDBOX_GID``, else :data:`DEFAULT_SANDBOX_ID`. Never 0: root inside is only
    for a task environment's set-up step (``setup_root``)."""
    ids = []
    for name in ("RSIFRAME_SANDBOX_UID", "RSIFRAME_SANDBOX_GID"):
        raw = os.environ.get(name, "").strip()
        try:
            value = int(raw) if raw else DEFAULT_SANDBOX_ID
        except ValueError:
            raise SandboxError(f"{name}={raw!r} is not a number") from None
        if not 0 < value < 1 << 32:
            raise SandboxError(f"{name}={raw!r}: the sandbox's id must be an unprivileged id")
        ids.append(value)
    return ids[0], ids[1]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def exposed(mounts: Sequence[Mount]) -> list[str]:
    """The mounts that would show the key folder or a folder named by :func:`keys.protect`."""
    roots = protected_folders()
    bad = []
    for m in mounts:
        host = os.path.realpath(m.host)
        for root, scratch in roots.items():
            if _inside(root, host) or (
                _inside(host, root) and not (scratch and _inside(host, scratch))
            ):
                bad.append(f"{m.host} (shows {root})")
    return bad


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run, beyond time and output.

    ``memory_mb`` is the memory of all the run's processes together (a memory cgroup,
    :mod:`rsiframe.sandbox.cgroups`; where none can be made, the address space of each process,
    ``RLIMIT_AS``); ``pids`` the processes of the whole run (a pids cgroup, else
    ``RLIMIT_NPROC``, which binds only inside bubblewrap's user namespace and only when
    rsiframe does not run as root: then nothing holds it, and the fallback says so). A limit left
    to an rlimit is named in :attr:`ProcResult.fallbacks` (an error where
    :func:`rsiframe.sandbox.cgroups.required`);
    ``tmp_mb`` the size of bubblewrap's private ``/tmp`` (writes past it fail with
    ENOSPC); ``file_mb`` the size of any one file written (``RLIMIT_FSIZE``); ``watch``
    folders whose total size, past the given bytes, ends the run. A run ended by a limit
    comes back with :attr:`ProcResult.limit` naming it.
    """

    memory_mb: int | None = None
    pids: int | None = None
    tmp_mb: int | None = None
    file_mb: int | None = None
    watch: tuple[tuple[Path, int], ...] = ()


def limits_step(limits: Limits, *, nproc: bool, joins: Sequence[Path] = ()) -> list[str]:
    """One ``/bin/sh`` step in front of a command that joins the run's cgroups (``joins``:
    their ``cgroup.procs`` files), sets the per-process rlimits with the shell's own
    ``ulimit`` (soft and hard), then ``exec``s the command: one process start for all of it
    (it was ``sh`` to join, then ``prlimit``). Any step that fails ends it before the command
    runs. ``RLIMIT_NPROC`` only when ``nproc`` (no pids cgroup holds the run).

    Units: ``-v`` KiB, ``-f`` 512-byte blocks (POSIX; dash and bash as ``sh`` alike); the
    process limit is ``-p`` in dash and ``-u`` in bash, so both are tried.
    ``tests/sandbox/test_bwrap.py`` reads ``/proc/self/limits`` inside to check them."""
    steps = step_commands(limits, nproc=nproc, joins=joins)
    if not steps:
        return []
    return ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "rsiframe-limits"]


def step_commands(
    limits: Limits, *, nproc: bool, joins: Sequence[Path] = (), file_block: int = 512
) -> list[str]:
    """The commands of :func:`limits_step`; ``file_block``: the shell's unit of
    ``ulimit -f`` (512 in ``sh``, dash or bash as ``sh``; 1024 in ``bash`` itself)."""
    steps = [f"echo 0 > {shlex.quote(str(p))}" for p in joins]
    if limits.memory_mb is not None:
        steps.append(f"ulimit -v {int(limits.memory_mb) << 10}")
    if limits.file_mb is not None:
        steps.append(f"ulimit -f {(int(limits.file_mb) << 20) // file_block}")
    if nproc and limits.pids is not None:
        n = int(limits.pids)
        steps.append(f"{{ ulimit -p {n} 2>/dev/null || ulimit -u {n}; }}")
    return steps


#: read by a sandboxed ``bash SCRIPT`` as its ``BASH_ENV`` (:func:`_in_bash`)
BASH_STEP = Path(__file__).with_name("limits.bash")


def _in_bash(
    cmd: list[str], env: dict[str, str], limits: Limits, nproc: bool, joins: Sequence[Path]
) -> dict[str, str] | None:
    """``bash SCRIPT ...`` (an evaluator's verifier under the process sandbox): the
    environment under which bash itself runs the step before the script (its startup
    file, :data:`BASH_STEP`), one process start fewer; None where that does not apply
    (another program, options before the script, a ``BASH_ENV`` of the caller's own or
    a variable that would keep bash from reading it: then the ``sh`` step in front)."""
    if len(cmd) < 2 or os.path.basename(cmd[0]) != "bash" or cmd[1].startswith(("-", "+")):
        return None
    # bash in POSIX mode (POSIXLY_CORRECT, SHELLOPTS) would not read BASH_ENV
    taken = ("BASH_ENV", "RSIFRAME_LIMITS", "POSIXLY_CORRECT", "SHELLOPTS", "BASHOPTS")
    if any(name in env for name in taken) or not BASH_STEP.is_file():
        return None
    found = shutil.which(cmd[0], path=env.get("PATH", os.defpath))
    system = shutil.which("bash", path=os.defpath)
    if found is None or system is None or os.path.realpath(found) != os.path.realpath(system):
        # the system's bash reads BASH_ENV; a program merely named bash (e.g. one written
        # into a folder early on PATH) might not, and would run unconfined
        return None
    steps = step_commands(limits, nproc=nproc, joins=joins, file_block=1024)
    if not steps:
        return None
    return {**env, "BASH_ENV": str(BASH_STEP), "RSIFRAME_LIMITS": " && ".join(steps)}


def _in_front(step: list[str], cmd: list[str], env: dict[str, str]) -> list[str]:
    """``step`` (:func:`limits_step`) in front of ``cmd``. Where ``cmd`` is itself that same
    shell with a script (``sh -c SCRIPT ...``, as an evaluator's agent is under the process
    sandbox), the step's commands open the script instead: the same shell joins, limits,
    then runs the script, one process start fewer; a failing step still ends it first."""
    if not step or len(cmd) < 3 or cmd[1] != "-c" or os.path.basename(cmd[0]) != "sh":
        return [*step, *cmd]
    found = shutil.which(cmd[0], path=env.get("PATH", os.defpath))
    if found is None or os.path.realpath(found) != os.path.realpath(step[0]):
        return [*step, *cmd]
    head = step[2].removesuffix(' && exec "$@"')
    # on the script's first line, so the script's own line numbers are unchanged
    return [cmd[0], "-c", f"{head} || exit $?; {cmd[2]}", *cmd[3:]]


def folder_size(path: Path, stop: int) -> int:
    """Bytes under ``path`` (links not followed), counting up to just past ``stop``."""
    total = 0
    stack = [str(path)]
    while stack and total <= stop:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    with contextlib.suppress(OSError):
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            total += e.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return total


#: per thread: the two output files of its last command, emptied, for its next command
_spare = threading.local()


def _captures() -> tuple[IO[bytes], IO[bytes]]:
    """Two files for a command's stdout and stderr: the thread's spare pair, or new ones.
    Reusing them spares the disk two inodes made and freed per command (on ext4 without a
    journal, freed inodes make every allocation near them slower for seconds)."""
    pair: tuple[IO[bytes], IO[bytes]] | None = getattr(_spare, "pair", None)
    _spare.pair = None
    if pair is not None:
        return pair
    return tempfile.TemporaryFile(), tempfile.TemporaryFile()


def _recycle(pair: tuple[IO[bytes], IO[bytes]], *, sealed: bool) -> None:
    """Keep ``pair`` as the thread's spare, emptied, when ``sealed``: no process of the
    command can still hold them (its pids cgroup was removed, so every one is gone).
    Otherwise close them: a process that escaped could write into the next command's."""
    if sealed and getattr(_spare, "pair", None) is None:
        try:
            for f in pair:
                f.seek(0)
                f.truncate()
        except OSError:
            pass
        else:
            _spare.pair = pair
            return
    for f in pair:
        f.close()


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
    watch: tuple[tuple[Path, int], ...] = (),
    cgroup: RunCgroups | None = None,
    files: tuple[IO[bytes], IO[bytes]] | None = None,
) -> ProcResult:
    """Run ``argv`` to its end under a :class:`_Guard`; its output goes to ``files`` (kept
    open for the caller to recycle, :func:`_captures`), or to two files of its own."""
    with contextlib.ExitStack() as stack:
        if files is None:
            files = (
                stack.enter_context(tempfile.TemporaryFile()),
                stack.enter_context(tempfile.TemporaryFile()),
            )
        out, err = files
        start = time.monotonic()
        proc = _start(argv, cwd, env, out, err)
        guard = _Guard(proc, start + timeout, (out, err), output_cap, watch, cgroup)
        guard.start()
        try:
            proc.wait()
            # whatever the command left running in its group dies with it, so nothing
            # from one phase (the agent) can act during the next (the verifier)
            kill_group(proc)
        except BaseException:
            kill_group(proc)
            raise
        finally:
            guard.finish()
            with _live_lock:
                _live.discard(proc)
        duration = time.monotonic() - start
        guard.last_check()
        stdout, t1 = _read_capped(out, output_limit)
        stderr, t2 = _read_capped(err, output_limit)
    timed_out = guard.expired.is_set()
    return ProcResult(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=duration,
        stdout=stdout,
        stderr=stderr,
        truncated=t1 or t2,
        output_exceeded=guard.overflow.is_set(),
        limit=guard.breached[0] if guard.breached else None,
    )


def _start(
    argv: list[str], cwd: str, env: dict[str, str], out: IO[bytes], err: IO[bytes]
) -> subprocess.Popen[bytes]:
    """The command started in a session of its own, known to :func:`kill_all`."""
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
    return proc


class _Guard:
    """Ends a running command that outlives its deadline, writes past its output cap or
    breaches a limit (a watched folder's size, its cgroup), and keeps which it was."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        deadline: float,
        files: tuple[IO[bytes], IO[bytes]],
        output_cap: int | None,
        watch: tuple[tuple[Path, int], ...],
        cgroup: RunCgroups | None,
    ) -> None:
        self.proc, self.deadline, self.files = proc, deadline, files
        self.output_cap, self.watch, self.cgroup = output_cap, watch, cgroup
        self.expired = threading.Event()
        self.overflow = threading.Event()
        self.done = threading.Event()
        self.breached: list[str] = []
        self._ticks = 0  # the folders in ``watch`` are measured every twentieth tick (1 s)
        self._ticking: ticker.Ticking | None = None

    def start(self) -> None:
        # one thread ticks every running command's guard (a thread each cost a start and
        # a join per command: rsiframe.util.ticker)
        self._ticking = ticker.every(_WATCH_INTERVAL_S, self._tick)

    def finish(self) -> None:
        self.done.set()
        if self._ticking is not None:
            # a tick reads the output files' sizes: they must outlive it (they close later)
            self._ticking.cancel()

    def last_check(self) -> None:
        """A breach found once the command has ended (a quick exit's folder size)."""
        if not self.breached and (why := _breach(self.watch, self.cgroup)):
            self.breached.append(why)

    def _stop(self) -> None:
        kill_group(self.proc)
        if self.cgroup is not None:  # also what left the group (the cgroup holds all)
            self.cgroup.kill()

    def _expire(self) -> None:
        self.expired.set()
        self._stop()

    def _tick(self) -> bool:
        """One check of the running command; True once it is stopped (or has ended)."""
        if self.done.is_set():
            return True
        if time.monotonic() >= self.deadline:
            self._expire()
            return True
        sizes = (os.fstat(f.fileno()).st_size for f in self.files)
        if self.output_cap is not None and any(n > self.output_cap for n in sizes):
            self.overflow.set()
            self._stop()
            return True
        self._ticks += 1
        why = _breach(self.watch if self._ticks % 20 == 0 else (), self.cgroup)
        if why:
            self.breached.append(why)
            self._stop()
            return True
        return False


def _breach(watch: tuple[tuple[Path, int], ...], cgroup: RunCgroups | None) -> str | None:
    """The limit a running command has broken, in words, or None."""
    if cgroup is not None and (why := cgroup.breach()):
        return why
    for folder, cap in watch:
        if folder_size(folder, cap) > cap:
            return f"{folder.name} grew past {cap >> 20} MiB"
    return None


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group ``proc`` leads (it was started with a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _read_capped(f: IO[bytes], limit: int) -> tuple[bytes, bool]:
    # pread, not seek+read: the file offset is shared with the child, and a process that
    # outlives the kill by a moment (bwrap's pid namespace dies asynchronously) moves it
    fd = f.fileno()
    size = os.fstat(fd).st_size
    return os.pread(fd, min(limit, size), 0), size > limit


class Sandbox:
    """Runs a command confined to mounts; subclasses say how (``prepare``) and what paths
    the process sees (``view``). ``kind`` names the mechanism; ``isolation`` is the level
    recorded in certificates and fingerprints (the mechanism and what it grants inside)."""

    kind = ""
    isolation = ""
    #: whether ``prepare`` masks paths (``hide``, the key folder, :func:`host_secrets`)
    masks = True

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
        setup_root: bool = False,
        tmp_mb: int | None = None,
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
        setup_root: bool = False,
        limits: Limits | None = None,
        nproc: bool = True,
    ) -> tuple[list[str], str, dict[str, str]]:
        """(command line, host working directory, host environment) that run ``argv``
        confined, for a caller that starts the process itself. ``memory_mb`` caps the
        address space of the command and each descendant; ``limits`` sets the others
        (:class:`Limits`; its ``pids`` becomes ``RLIMIT_NPROC`` here unless ``nproc`` is
        off because a pids cgroup holds the run, and its ``watch`` is :meth:`run`'s).
        ``hide`` (and always the key folder and :func:`host_secrets`) is masked wherever a
        mount would show it.

        ``setup_root`` is the one hook for a task environment's own set-up step (installing
        packages into its environment): under bubblewrap the command is root inside its
        user namespace, with that namespace's capabilities only (never the host's), and it
        is refused when a mount would show the key folder or a run folder
        (:func:`keys.protect`). Agents, verifiers, mutations, builds, the model server and
        operators never use it."""
        lim = limits or Limits()
        if memory_mb is not None:
            lim = dataclasses.replace(lim, memory_mb=memory_mb)
        return self._confined(argv, mounts, cwd, env, network, hide, setup_root, lim, nproc)

    def _confined(
        self,
        argv: list[str],
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
        hide: Sequence[Path],
        setup_root: bool,
        lim: Limits,
        nproc: bool,
        joins: Sequence[Path] = (),
    ) -> tuple[list[str], str, dict[str, str]]:
        """:meth:`launch`, with the cgroups the command joins first (``joins``)."""
        if setup_root and (bad := exposed([*mounts, cwd])):
            raise SandboxError(f"a set-up step may not mount {bad[0]}")
        # a plain process sees the host as it is: nothing to mask (no glob per command)
        hidden = [key_dir(), *host_secrets(), *hide] if self.masks else list(hide)
        cmd, host_cwd, host_env = self.prepare(
            argv, mounts, cwd, env, network, hidden, setup_root, lim.tmp_mb
        )
        # one shell step on the host, in front of bubblewrap too (the rlimits are inherited
        # through it). RLIMIT_NPROC counts a user's processes per user namespace: only a
        # bubblewrap sandbox has one of its own (outside, it would count the whole host's;
        # bubblewrap itself, root on the host, is not bound by it)
        nproc = nproc and self.kind == "bwrap"
        if (bash_env := _in_bash(cmd, host_env, lim, nproc, joins)) is not None:
            return cmd, host_cwd, bash_env
        step = limits_step(lim, nproc=nproc, joins=joins)
        return _in_front(step, cmd, host_env), host_cwd, host_env

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
        setup_root: bool = False,
        limits: Limits | None = None,
    ) -> ProcResult:
        """Run ``argv`` as :meth:`launch` confines it; ``output_limit`` bytes of each stream
        are kept, and a stream that grows past ``output_cap`` kills the tree, as does a
        broken :class:`Limits` (named in :attr:`ProcResult.limit`)."""
        cgroup = None
        if limits is not None and (limits.pids is not None or limits.memory_mb is not None):
            # raises where a limit has no cgroup and cgroups.required() says it must
            cgroup = RunCgroups(pids=limits.pids, memory_mb=limits.memory_mb)
            if "memory" in cgroup.made:  # the cgroup holds it: no address-space rlimit
                limits = dataclasses.replace(limits, memory_mb=None)
        lim = limits or Limits()
        if memory_mb is not None:
            lim = dataclasses.replace(lim, memory_mb=memory_mb)
        files = _captures()
        res: ProcResult | None = None
        try:
            cmd, host_cwd, host_env = self._confined(
                argv,
                mounts,
                cwd,
                env,
                network,
                hide,
                setup_root,
                lim,
                nproc=cgroup is None or "pids" not in cgroup.made,
                joins=cgroup.joins() if cgroup is not None else (),
            )
            watch = limits.watch if limits is not None else ()
            res = _execute(
                cmd, host_cwd, host_env, timeout, output_limit, output_cap, watch, cgroup, files
            )
            if cgroup is not None:
                # root's processes are exempt from RLIMIT_NPROC (bubblewrap maps the sandbox's
                # uid to root's), and outside bubblewrap it is not set at all
                binds = self.kind == "bwrap" and os.geteuid() != 0
                res.fallbacks = cgroup.fallbacks(nproc_binds=binds)
            return res  # marked sealed (or not) below, once its cgroups are removed
        finally:
            sealed = cgroup is not None and "pids" in cgroup.made
            if cgroup is not None:
                # kills first: nothing in the run's cgroups outlives it
                sealed = cgroup.remove() and sealed
            _recycle(files, sealed=sealed)
            if res is not None:
                res.sealed = sealed


class ProcessSandbox(Sandbox):
    """Fallback: a plain child process in its own process group. Paths are host paths."""

    kind = "process"
    isolation = "process"
    masks = False  # a plain process: nothing can be masked

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
        setup_root: bool = False,
        tmp_mb: int | None = None,
    ) -> tuple[list[str], str, dict[str, str]]:
        return list(argv), str(cwd.host), {**base_env(), **env}


#: system folders :class:`BwrapSandbox` binds read-only where they are folders (recreated
#: as the symlinks they are otherwise), then those it always binds read-only
_TOP_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_RO_DIRS = ("/usr", "/etc")
#: every system folder the sandbox shows: :func:`_masks` covers hidden paths under each
_SYSTEM_DIRS = (*_TOP_DIRS, *_RO_DIRS)


class BwrapSandbox(Sandbox):
    """bubblewrap: fresh namespaces (the user namespace included), an unprivileged uid with
    no capabilities, read-only system, only the given mounts writable."""

    kind = "bwrap"

    def __init__(self, binary: str = "bwrap", uid: int | None = None, gid: int | None = None):
        self.binary = binary
        if uid is None or gid is None:
            default_uid, default_gid = sandbox_ids()
            uid = default_uid if uid is None else uid
            gid = default_gid if gid is None else gid
        self.uid, self.gid = uid, gid
        # what privilege_check demands (and so what every sandbox that starts has)
        self.isolation = f"bwrap userns uid={uid} gid={gid} caps=none"

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
        setup_root: bool = False,
        tmp_mb: int | None = None,
    ) -> tuple[list[str], str, dict[str, str]]:
        privilege_check(self, setup_root)
        return (
            self.command(
                argv,
                mounts=mounts,
                cwd=cwd,
                env=env,
                network=network,
                hide=hide,
                setup_root=setup_root,
                tmp_mb=tmp_mb,
            ),
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
        setup_root: bool = False,
        tmp_mb: int | None = None,
    ) -> list[str]:
        # a user namespace also when we are root: capabilities inside are the namespace's
        # own, mounts made outside it are locked, and it may not nest another one
        args = [self.binary, "--unshare-all", "--unshare-user", "--disable-userns"]
        if setup_root:
            args += ["--uid", "0", "--gid", "0"]
        else:
            args += ["--uid", str(self.uid), "--gid", str(self.gid), "--cap-drop", "ALL"]
        args += ["--die-with-parent", "--new-session"]
        if network:
            args.append("--share-net")
        # the fresh /tmp first, so a Python installed under /tmp is bound on top of it
        args += ["--proc", "/proc", "--dev", "/dev"]
        if tmp_mb is not None:
            args += ["--size", str(int(tmp_mb) << 20)]
        args += ["--tmpfs", "/tmp", *_system_binds()]
        for m in mounts:
            args += ["--bind" if m.writable else "--ro-bind", str(m.host), m.inside]
        args += _masks(hide, mounts)
        args += ["--chdir", cwd.inside, "--clearenv"]
        for k, v in {**base_env(), **env}.items():
            args += ["--setenv", k, v]
        return [*args, "--", *argv]


def _system_binds() -> list[str]:
    """The host's system and Python folders, read-only (top-level links kept as links)."""
    args: list[str] = []
    for host in _TOP_DIRS:
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    for d in (*_RO_DIRS, *_python_dirs()):
        args += ["--ro-bind", d, d]
    return args


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


# -- the privilege self-check ------------------------------------------------------------

#: the uid_map line of the initial user namespace: whoever sees it holds host capabilities
_INIT_USERNS = (0, 0, 4294967295)
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def privilege_problems(status: str, uid_map: str, *, uid: int, setup_root: bool) -> list[str]:
    """What is wrong with the privileges ``/proc/self/status`` and ``/proc/self/uid_map``
    show inside a sandbox: none of the host's capabilities, ever; and outside a set-up
    step, no capability at all and the configured uid."""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    caps = {k: int(fields.get(k, "0").strip() or "0", 16) for k in _CAP_FIELDS}
    rows = [tuple(int(x) for x in line.split()) for line in uid_map.splitlines() if line.strip()]
    problems = []
    if _INIT_USERNS in rows or not rows:
        problems.append("it runs in the host's user namespace (uid_map " + uid_map.strip() + ")")
    if not setup_root:
        held = {k: f"{v:x}" for k, v in caps.items() if v}
        if held:
            problems.append(f"it holds capabilities {held}")
        real = fields.get("Uid", "").split()
        if not real or any(int(x) != uid for x in real):
            problems.append(f"it runs as uid {' '.join(real) or '?'}, not {uid}")
    return problems


_checked: dict[tuple[str, int, int, bool], str] = {}
_check_lock = threading.Lock()


def privilege_check(sb: BwrapSandbox, setup_root: bool = False) -> str:
    """Start a sandbox of this kind once per process, read its privileges from inside, and
    raise :class:`SandboxError` (the sandbox refuses to start) if it still holds host
    capabilities; the summary (``caps=none`` or ``caps=namespace``) is cached."""
    key = (sb.binary, sb.uid, sb.gid, setup_root)
    with _check_lock:
        if key in _checked:
            return _checked[key]
        tmp = Path(tempfile.mkdtemp(prefix="rsiframe-probe-"))
        try:
            m = Mount(tmp, "/probe")
            argv = ["/bin/sh", "-c", "cat /proc/self/status; echo @@; cat /proc/self/uid_map"]
            cmd = sb.command(argv, mounts=[m], cwd=m, env={}, network=False, setup_root=setup_root)
            res = _execute(cmd, "/", {**os.environ}, 20, DEFAULT_OUTPUT_LIMIT)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not res.ok:
            why = res.stderr.decode(errors="replace").strip()[-300:]
            raise SandboxError(f"cannot start bubblewrap ({sb.binary}): {why or res.exit_code}")
        status, _, uid_map = res.stdout.decode(errors="replace").partition("@@")
        problems = privilege_problems(status, uid_map, uid=sb.uid, setup_root=setup_root)
        if problems:
            raise SandboxError(
                "the sandbox refuses to start: a self-check inside found host privileges: "
                + "; ".join(problems)
            )
        _checked[key] = "caps=namespace" if setup_root else "caps=none"
        return _checked[key]


@functools.cache
def bwrap_works() -> bool:
    """True when bubblewrap is installed and can create its namespaces here (the user
    namespace included); a sandbox that starts but keeps host capabilities still raises."""
    binary = shutil.which("bwrap")
    if not binary:
        return False
    try:
        privilege_check(BwrapSandbox(binary))
    except SandboxError as exc:
        if "refuses to start" in str(exc):
            raise
        return False
    return True


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
    network: NetworkSpec = Field(
        default_factory=NetworkSpec, description="network.allow: endpoints the command may reach"
    )
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
_MODULES = {"docker": "rsiframe.sandbox.docker"}


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
