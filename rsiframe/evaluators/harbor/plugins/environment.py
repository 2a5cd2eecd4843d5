"""Harbor's ``bwrap`` environment: a trial in bubblewrap with overlays over the system.

Runs inside Harbor's own process (Python 3.12, ``harbor`` importable); it imports only
the standard library, Harbor and ``appcopy`` (staged beside it; standard library only),
never rsiframe. Every ``exec`` is one bubblewrap call:

- ``/`` is the trial's own folder (``fs/``), so files persist between calls like in a
  container; ``/usr``, ``/etc``, ``/var``, ``/opt`` are overlays of the host's folders
  (``apt-get install`` writes to the overlay, never to the host); ``/bin``, ``/lib*``
  follow the host; the Python installations named in ``ro_binds`` and the candidate
  (``candidate_dir`` at ``/candidate``) are read-only; nothing else of the host is there:
  no home, no run folder, no key folder, no task set; ``hide`` masks what a bind would show.
- a user namespace (``--unshare-user``; uid 1000, or namespace-local uid 0 when Harbor asks
  for ``root``) with ``--cap-drop ALL``, a pid namespace per call (whatever a command leaves
  running dies when it returns), no network unless the task's policy is public.
- phases: the first upload to ``/tests`` starts grading, as the local engine grades.
  First every process of the agent phase is gone (none should outlive its ``exec``'s pid
  namespace; any whose root is the trial's folder is killed and waited for). Then the
  verifier gets a root of its own: a sanitised copy of the work folder and of
  ``/logs/agent`` (``appcopy.freeze``: links that leave them removed, hard links to files
  outside broken, special files and set-uid bits dropped, size capped at ``app_mb``; what
  was removed is recorded in the trial's ``rsiframe-grading.json``), fresh ``/tmp``,
  ``/root``, ``/home``, and nothing else the agent (or a ``RUN`` line) wrote outside the
  system folders; ``/tests`` and ``/logs/verifier`` are fresh host folders, and the system
  overlays drop the agent's layer (only the set-up layer stays), so nothing the agent wrote
  or linked can become its reward or change the tools the verifier runs.
- set-up: with ``run_dockerfile`` the ``RUN`` lines of ``environment/Dockerfile`` run as
  namespace-local root at start, into the set-up layer; by default the host's system stands
  in for the image, like rsiframe's ``local`` engine. The task's ``environment/`` files are
  copied into the work folder either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import stat
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

from .appcopy import AppTooLarge, freeze  # staged beside this module (standard library only)

#: system folders shown as overlays (writable in the agent phase, into the trial's layer)
OVERLAID = ("/usr", "/etc", "/var", "/opt")
#: system folders shown as they are on the host (symlinks kept as symlinks)
FOLLOWED = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SKIP_ENV_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_UID = 1000
#: the verifier's root holds these fresh folders, the work folder's copy and /logs/agent's
GRADE_DIRS = ("tmp", "root", "home", "logs/verifier", "logs/artifacts")
GRADING_RECORD = "rsiframe-grading.json"
#: how long the processes of the agent phase get to be gone once killed
REAP_SECONDS = 10


class BwrapEnvironment(BaseEnvironment):
    """A Harbor environment on this host, confined by bubblewrap (see the module doc)."""

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        session_id: str,
        trial_paths: Any,
        task_env_config: Any,
        *args: Any,
        bwrap: str = "bwrap",
        ro_binds: list[str] | None = None,
        hide: list[str] | None = None,
        path: str = DEFAULT_PATH,
        candidate_dir: str | None = None,
        run_dockerfile: bool = False,
        output_limit_bytes: int = 1 << 20,
        memory_mb: int | None = None,
        app_mb: int = 1024,
        **kwargs: Any,
    ) -> None:
        self._bwrap = bwrap
        self._ro_binds = [str(p) for p in ro_binds or []]
        self._hide = [str(p) for p in hide or []]
        self._path = path
        self._candidate = candidate_dir
        self._run_dockerfile = run_dockerfile in (True, "true", "True", "1")
        self._output_limit = int(output_limit_bytes)
        self._memory_mb = int(memory_mb) if memory_mb else None
        self._app_cap = int(app_mb) << 20
        self._root = Path(tempfile.mkdtemp(prefix="rsiframe-hb-"))
        self._grading = False
        self._overlays = os.geteuid() == 0 and shutil.which("unshare") is not None
        self._holder: asyncio.subprocess.Process | None = None
        self._held: set[str] = set()  # phases whose overlays the holder keeps mounted
        super().__init__(
            environment_dir, environment_name, session_id, trial_paths, task_env_config,
            *args, **kwargs,
        )  # fmt: skip

    # -- Harbor's contract -----------------------------------------------------------

    @staticmethod
    def type() -> str:
        return "bwrap"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @property
    def mounts_candidate(self) -> bool:
        """True when the candidate is already read-only at ``/candidate`` (no upload)."""
        return self._candidate is not None

    @staticmethod
    def preflight() -> None:
        return None

    def _validate_definition(self) -> None:
        for name in ("docker-compose.yaml", "docker-compose.yml"):
            if (self.environment_dir / name).exists():
                raise ValueError("the bwrap environment does not run Docker Compose tasks")

    @property
    def _workdir(self) -> str:
        return self.task_env_config.workdir or "/app"

    async def start(self, force_build: bool) -> None:
        fs = self._root / "fs"
        for d in ("tmp", "root", "home", "logs/agent", "logs/verifier", "logs/artifacts"):
            (fs / d).mkdir(parents=True, exist_ok=True)
        os.chmod(fs / "tmp", 0o1777)
        work = fs / self._workdir.lstrip("/")
        work.mkdir(parents=True, exist_ok=True)
        if self.environment_dir.is_dir():
            for child in self.environment_dir.iterdir():
                if child.name in SKIP_ENV_FILES:
                    continue
                dest = work / child.name
                if child.is_dir() and not child.is_symlink():
                    shutil.copytree(child, dest, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(child, dest, follow_symlinks=False)
        for layer in ("setup", "agent"):
            for d in OVERLAID:
                if os.path.isdir(d):
                    (self._root / layer / "upper" / d.lstrip("/")).mkdir(parents=True)
                    (self._root / layer / "work" / d.lstrip("/")).mkdir(parents=True)
        if self._run_dockerfile:
            for line in _run_lines(self.environment_dir / "Dockerfile"):
                res = await self._call(
                    ["bash", "-c", line], user=0, layer="setup", timeout=None, cwd=None, env={}
                )
                if res.return_code != 0:
                    raise RuntimeError(
                        f"Dockerfile RUN failed ({res.return_code}): {line}: "
                        f"{(res.stderr or '')[-500:]}"
                    )
        await self._hold("agent")

    async def stop(self, delete: bool) -> None:
        if self._holder is not None:
            _kill(self._holder.pid)
            await self._holder.wait()
        shutil.rmtree(self._root, ignore_errors=True)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        resolved = self._resolve_user(user)
        uid = 0 if resolved in ("root", 0, "0") else AGENT_UID
        return await self._call(
            ["bash", "-c", command],
            user=uid,
            layer=None,
            timeout=timeout_sec,
            cwd=cwd,
            env=self._merge_env(env) or {},
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        t = shlex.quote(target_path)
        await self._copy_in(source_path, f'mkdir -p "$(dirname {t})" && cp "$SRC" {t}')

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        if target_dir.rstrip("/") == "/tests":
            await self._start_grading()
            shutil.copytree(source_dir, self._root / "tests", symlinks=True, dirs_exist_ok=True)
            return
        t = shlex.quote(target_dir)
        await self._copy_in(source_dir, f'mkdir -p {t} && cp -a "$SRC"/. {t}/')

    async def _copy_in(self, source: Path | str, script: str) -> None:
        """Copy host files in from inside the sandbox, so paths resolve in its own view."""
        name = f".rsi-upload-{uuid.uuid4().hex[:12]}"
        try:
            res = await self._call(
                ["sh", "-c", script], user=0, layer=None, timeout=300, cwd="/",
                env={"SRC": f"/{name}"}, extra=[("--ro-bind", str(source), f"/{name}")],
            )  # fmt: skip
        finally:
            point = self._fs / name
            if point.is_dir() and not point.is_symlink():
                point.rmdir()
            elif point.exists() or point.is_symlink():
                point.unlink()
        if res.return_code != 0:
            raise RuntimeError(f"upload failed: {res.stderr}")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await self._read(["cat", source_path])
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        Path(target_path).write_bytes(data)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        # packed inside the sandbox and unpacked with tarfile's "data" filter: a link the
        # agent planted resolves inside its own view, never on this host
        data = await self._read(["tar", "-C", source_dir, "-cf", "-", "."])
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.seek(0)
            with tarfile.open(fileobj=f, mode="r:") as tf:
                tf.extractall(target, filter="data")

    # -- the sandbox ------------------------------------------------------------------

    @property
    def _fs(self) -> Path:
        """The folder bound at ``/``: the trial's own, or from grading on the verifier's."""
        return self._root / ("grade-fs" if self._grading else "fs")

    async def _start_grading(self) -> None:
        """Grading starts (see the module doc): the agent phase's processes gone, the
        verifier's own root, fresh /tests and /logs/verifier, the agent's layer dropped."""
        if not self._grading:
            await self._end_agent_processes()
            removed = self._grade_root()
            record = {"workdir": self._workdir, **removed}
            path = Path(self.trial_paths.trial_dir) / GRADING_RECORD
            path.write_text(json.dumps(record, indent=1))
        self._grading = True
        for d in ("tests", "verifier"):
            shutil.rmtree(self._root / d, ignore_errors=True)
            (self._root / d).mkdir()

    async def _end_agent_processes(self) -> None:
        """Kill every process whose root is the trial's folder and wait until none is left;
        raises (the trial fails, no reward) if one outlives ``REAP_SECONDS``."""
        fs = os.stat(self._root / "fs")
        deadline = time.monotonic() + REAP_SECONDS
        while left := _rooted_at(fs.st_dev, fs.st_ino):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of the agent phase would not end: {left[:5]}")
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.05)

    def _grade_root(self) -> dict[str, list[dict[str, str]]]:
        """The verifier's root: fresh folders, and sanitised copies of the work folder and
        of ``/logs/agent``; what the copies left out, by folder."""
        fs, grade = self._root / "fs", self._root / "grade-fs"
        for d in GRADE_DIRS:
            (grade / d).mkdir(parents=True, exist_ok=True)
        os.chmod(grade / "tmp", 0o1777)
        removed = {}
        for key, inside in (("app_removed", self._workdir), ("agent_logs_removed", "/logs/agent")):
            rel = inside.strip("/")
            (grade / rel).parent.mkdir(parents=True, exist_ok=True)
            if not _real_folder(fs, rel):  # a link (or a file) where the folder was
                (grade / rel).mkdir()
                removed[key] = [{"path": ".", "reason": f"{inside} is not a folder"}]
                continue
            try:
                kept_out = freeze(fs / rel, grade / rel, max_bytes=self._app_cap, inside=inside)
            except AppTooLarge as exc:
                raise RuntimeError(f"agent exceeded a limit: {exc}") from None
            removed[key] = [r.as_dict() for r in kept_out]
        return removed

    def _sanitize(self) -> None:
        """Every mount point under the trial's ``/`` is a real folder again: a link the
        agent put there would redirect a mount (lstat and unlink, never followed)."""
        fs = self._fs
        names = [*OVERLAID, *FOLLOWED, "/proc", "/dev", "/candidate", "/tests", "/logs"]
        for name in [*names, *self._ro_binds, "/logs/verifier"]:
            parts = Path(name).parts[1:]
            for i in range(1, len(parts) + 1):
                p = fs.joinpath(*parts[:i])
                if p.is_symlink() or (p.exists() and not p.is_dir()):
                    p.unlink()

    async def _read(self, argv: list[str]) -> bytes:
        res = await self._call(argv, user=0, layer=None, timeout=300, cwd="/", env={}, raw=True)
        if res.return_code != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {res.stderr}")
        return res.data

    def _command(
        self,
        argv: list[str],
        *,
        user: int,
        layer: str | None,
        cwd: str | None,
        env: dict[str, str],
        extra: list[tuple[str, str, str]],
    ) -> list[str]:
        fs = self._fs
        args = [self._bwrap, "--unshare-all", "--unshare-user", "--die-with-parent"]
        args += ["--new-session", "--cap-drop", "ALL", "--uid", str(user), "--gid", str(user)]
        if not self._network_disabled:
            args.append("--share-net")
        args += ["--bind", str(fs), "/", "--proc", "/proc", "--dev", "/dev"]
        for d in FOLLOWED:  # a merged-/usr link is bound as the folder it names
            if os.path.isdir(d):
                args += ["--ro-bind", os.path.realpath(d), d]
        phase = layer or ("grade" if self._grading else "agent")
        for d in OVERLAID:
            if os.path.isdir(d):  # without root here: the host's folder, read-only
                where = self._root / "mnt" / phase / d.lstrip("/")
                args += ["--bind", str(where), d] if self._overlays else ["--ro-bind", d, d]
        overlays = self._overlay_mounts(phase) if phase not in self._held else []
        for p in self._ro_binds:
            if os.path.exists(p):
                args += ["--ro-bind", p, p]
        if self._candidate is not None:
            args += ["--ro-bind", self._candidate, "/candidate"]
        if self._grading:
            args += ["--bind", str(self._root / "tests"), "/tests"]
            args += ["--bind", str(self._root / "verifier"), "/logs/verifier"]
        for kind, src, dest in extra:
            args += [kind, src, dest]
        args += self._masks()
        args += ["--chdir", cwd or self._workdir, "--clearenv"]
        base = {"PATH": self._path, "HOME": "/root" if user == 0 else "/tmp", "LANG": "C.UTF-8"}
        for k, v in {**base, **env}.items():
            args += ["--setenv", k, v]
        prefix = []
        if self._memory_mb and shutil.which("prlimit"):
            prefix = [shutil.which("prlimit") or "prlimit", f"--as={self._memory_mb << 20}", "--"]
        args += ["--", *prefix, *argv]
        if phase in self._held and self._holder is not None:  # the holder's mounts, joined
            return ["nsenter", "-t", str(self._holder.pid), "-m", "--", *args]
        if not overlays:
            return args
        # the overlays are mounted by this host's root in a mount namespace of their own,
        # which ends with the command; bubblewrap then binds them like any folder
        script = " && ".join([*overlays, 'exec "$@"'])
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            *args,
        ]

    def _overlay_mounts(self, phase: str) -> list[str]:
        """Shell commands mounting the system overlays of ``phase`` (setup, agent, grade)."""
        if not self._overlays:
            return []
        cmds = []
        for d in OVERLAID:
            if not os.path.isdir(d):
                continue
            rel = d.lstrip("/")
            setup = self._root / "setup" / "upper" / rel
            target = self._root / "mnt" / phase / rel
            target.mkdir(parents=True, exist_ok=True)
            if phase == "setup":
                opts = f"lowerdir={d},upperdir={setup},workdir={self._root / 'setup/work' / rel}"
            elif phase == "grade":  # the set-up layer only, read-only: the agent's is dropped
                opts = f"ro,lowerdir={setup}:{d}"
            else:
                up, wk = (self._root / "agent" / x / rel for x in ("upper", "work"))
                opts = f"lowerdir={setup}:{d},upperdir={up},workdir={wk}"
            cmds.append(f"mount -t overlay overlay -o {opts} {shlex.quote(str(target))}")
        return cmds

    async def _hold(self, phase: str) -> None:
        """Mount ``phase``'s overlays once, in a mount namespace a holder process keeps
        alive (and that dies with Harbor), so each exec only joins it."""
        mounts = self._overlay_mounts(phase)
        if not mounts or shutil.which("nsenter") is None or shutil.which("setpriv") is None:
            return
        if self._holder is None:
            script = " && ".join([*mounts, "echo ready", "exec sleep infinity"])
            self._holder = await asyncio.create_subprocess_exec(
                "setpriv", "--pdeathsig", "KILL", "--",
                "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
            assert self._holder.stdout is not None
            if (await self._holder.stdout.readline()).strip() != b"ready":
                _kill(self._holder.pid)
                self._holder = None
                return
        else:
            proc = await asyncio.create_subprocess_exec(
                "nsenter", "-t", str(self._holder.pid), "-m", "--", "sh", "-c", " && ".join(mounts),
                stdin=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            if await proc.wait() != 0:
                return
        self._held.add(phase)

    def _masks(self) -> list[str]:
        roots = [(d, d) for d in (*OVERLAID, *FOLLOWED, *self._ro_binds)]
        if self._candidate is not None:
            roots.append((os.path.realpath(self._candidate), "/candidate"))
        args: list[str] = []
        for p in self._hide:
            host = os.path.realpath(p)
            if not os.path.exists(host):
                continue
            for root, inside in roots:
                if host == root or host.startswith(root.rstrip("/") + "/"):
                    rel = os.path.relpath(host, root)
                    where = inside if rel == "." else os.path.join(inside, rel)
                    kind = "--tmpfs" if os.path.isdir(host) else "--ro-bind"
                    args += [kind, where] if kind == "--tmpfs" else [kind, "/dev/null", where]
        return args

    async def _call(
        self,
        argv: list[str],
        *,
        user: int,
        layer: str | None,
        timeout: float | None,
        cwd: str | None,
        env: dict[str, str],
        extra: list[tuple[str, str, str]] | None = None,
        raw: bool = False,
    ) -> _Result:
        self._sanitize()
        if self._grading and "grade" not in self._held and self._holder is not None:
            await self._hold("grade")
        cmd = self._command(argv, user=user, layer=layer, cwd=cwd, env=env, extra=extra or [])
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                raise RuntimeError(f"Command timed out after {timeout} seconds") from None
            finally:  # the whole group, on timeout, cancellation, and after a normal exit
                _kill(proc.pid)
                if proc.returncode is None:
                    await asyncio.shield(proc.wait())
            limit = None if raw else self._output_limit
            stdout, stderr = _read(out, limit), _read(err, self._output_limit)
        text = stdout.decode(errors="replace") if not raw else None
        return _Result(
            stdout=text or None,
            stderr=stderr.decode(errors="replace") or None,
            return_code=proc.returncode if proc.returncode is not None else -9,
            data=stdout if raw else b"",
        )


class _Result(ExecResult):
    data: bytes = b""


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _rooted_at(dev: int, ino: int) -> list[int]:
    """Processes of this host whose root folder is (``dev``, ``ino``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/{entry}/root")
            if (st.st_dev, st.st_ino) == (dev, ino):
                found.append(int(entry))
    return found


def _real_folder(base: Path, rel: str) -> bool:
    """Whether every component of ``rel`` under ``base`` is a folder, none a link."""
    here = base
    for part in Path(rel).parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except OSError:
            return False
        if not stat.S_ISDIR(mode):
            return False
    return True


def _read(f: Any, limit: int | None) -> bytes:
    size = os.fstat(f.fileno()).st_size
    return os.pread(f.fileno(), size if limit is None else min(size, limit), 0)


def _run_lines(dockerfile: Path) -> list[str]:
    """The ``RUN`` lines of a Dockerfile (shell form, continuations joined)."""
    if not dockerfile.is_file():
        return []
    lines, cur = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        cur = f"{cur} {line[:-1]}" if line.endswith("\\") else f"{cur} {line}"
        if line.endswith("\\"):
            continue
        words = cur.strip().split(None, 1)
        if words and words[0].upper() == "RUN" and len(words) > 1:
            lines.append(words[1])
        cur = ""
    return lines
