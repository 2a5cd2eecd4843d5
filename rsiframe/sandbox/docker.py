"""``sandbox: docker``: the :class:`~rsiframe.sandbox.bwrap.Sandbox` interface over the docker SDK.

Each command is one container of the local base image (``rsiframe-base:bookworm``, built
offline from a debootstrap rootfs by ``scripts/ci-setup.sh docker``; nothing is pulled),
with the guarantees of the bubblewrap sandbox:

- only the given mounts (read-only unless writable: the candidate is read-only), the
  Python installations read-only (as bubblewrap shows them), a read-only root file system
  and a fresh ``/tmp``; hidden paths (the key folder and the host's secrets always) are
  covered wherever a mount would show them, so the key folder is never visible;
- no network unless asked (``network_mode: none``); all capabilities dropped,
  ``no-new-privileges``, a pid limit;
- a run's :class:`~rsiframe.sandbox.bwrap.Limits` as under bubblewrap: ``memory_mb`` the
  container's memory, ``pids`` its pid limit (read back from its pids cgroup, so reaching
  it is named), ``tmp_mb`` the size of ``/tmp``, ``file_mb`` ``RLIMIT_FSIZE``, ``watch``
  the writable folders' sizes; a broken limit, the time limit and the hard output cap
  kill the container, and removing it at the end kills every process it started.

Certificates record ``isolation: docker`` and the image's digest (``record``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsiframe.certs.keys import key_dir
from rsiframe.errors import EngineUnavailable, SandboxError
from rsiframe.sandbox.bwrap import (
    DEFAULT_OUTPUT_LIMIT,
    Limits,
    Mount,
    ProcResult,
    Sandbox,
    _breach,
    base_env,
    host_secrets,
    register,
)

IMAGE = os.environ.get("RSIFRAME_DOCKER_IMAGE", "rsiframe-base:bookworm")
_POLL_S = 0.05
PIDS_LIMIT = 1024  # when the run's Limits give none
TMP_MB = 512


#: the command's streams to files of ours; after it, the container's own pids.events (as the
#: shell's builtins copy it: no fork, which a container at its pid limit could not do), since
#: Docker removes the container's cgroup on the host as soon as it exits
_WRAPPER = (
    '"$@" >/.rsi-out/stdout 2>/.rsi-out/stderr; rc=$?; '
    "for f in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do "
    '[ -r "$f" ] && while read -r k v; do echo "$k $v"; done <"$f" >/.rsi-out/pids.events; '
    "done; exit $rc"
)


def _pids_events(container_id: str) -> Path | None:
    """The container's ``pids.events`` on the host (cgroup v1, or v2 with either driver)."""
    for where in (
        f"/sys/fs/cgroup/pids/docker/{container_id}",
        f"/sys/fs/cgroup/docker/{container_id}",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope",
    ):
        path = Path(where) / "pids.events"
        if path.is_file():
            return path
    return None


def _pids_reached(events: Path | None) -> bool:
    """A fork was refused at the pid limit (``max N`` with N > 0)."""
    if events is None:
        return False
    try:
        words = dict(line.split(None, 1) for line in events.read_text().splitlines())
        return int(words.get("max", "0")) > 0
    except (OSError, ValueError):
        return False


def _python_dirs() -> list[str]:
    return sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)})


class DockerSandbox(Sandbox):
    """One container per command, removed (with every process in it) when it ends."""

    kind = "docker"
    isolation = "docker"

    def __init__(self, client: Any, image: str, image_id: str) -> None:
        self.client = client
        self.image = image
        self.image_id = image_id

    @classmethod
    def connect(cls, image: str = IMAGE) -> DockerSandbox:
        """The sandbox on the local Docker engine; bad input (exit 2) when it is down or
        the base image is missing."""
        try:
            import docker
        except ImportError as exc:
            raise EngineUnavailable(
                "sandbox docker needs the docker SDK: pip install 'rsiframe[docker]'"
            ) from exc
        try:
            client = docker.from_env(timeout=30)
            client.ping()
        except Exception as exc:  # the SDK raises several kinds for an engine that is down
            raise EngineUnavailable(
                f"the Docker engine is not running ({type(exc).__name__})"
            ) from exc
        try:
            found = client.images.get(image)
        except Exception as exc:
            raise EngineUnavailable(
                f"the Docker base image {image} is missing; build it offline with "
                "`scripts/ci-setup.sh docker`"
            ) from exc
        return cls(client, image, found.id)

    def record(self) -> dict[str, Any]:
        """What a certificate records of this sandbox."""
        return {"isolation": self.isolation, "image": self.image, "image_digest": self.image_id}

    def view(self, mount: Mount) -> str:
        return mount.inside

    def _spec(
        self,
        argv: list[str],
        mounts: list[Mount],
        cwd: Mount,
        env: dict[str, str],
        network: bool,
        memory_mb: int | None,
        hide: Sequence[Path],
        limits: Limits | None = None,
    ) -> dict[str, Any]:
        binds = [(d, d, True) for d in _python_dirs()]
        binds += [(str(m.host), m.inside, not m.writable) for m in mounts]
        tmp_mb = limits.tmp_mb if limits is not None and limits.tmp_mb else TMP_MB
        tmpfs = {"/tmp": f"rw,exec,size={int(tmp_mb)}m"}
        hidden = [key_dir(), *host_secrets(), *hide]
        roots = [(d, d) for d in _python_dirs()]
        roots += [(os.path.realpath(m.host), m.inside) for m in mounts]
        for p in hidden:
            host = os.path.realpath(p)
            if not os.path.exists(host):
                continue
            for root, inside in roots:
                if host == root or host.startswith(root.rstrip("/") + "/"):
                    rel = os.path.relpath(host, root)
                    where = inside if rel == "." else os.path.join(inside, rel)
                    if os.path.isdir(host):
                        tmpfs[where] = "ro,size=4k"
                    else:
                        binds.append(("/dev/null", where, True))
        spec: dict[str, Any] = {
            "image": self.image_id,
            "command": list(argv),
            "working_dir": cwd.inside,
            "environment": {**base_env(), **env},
            "binds": binds,
            "tmpfs": tmpfs,
            "network_mode": "bridge" if network else "none",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": limits.pids if limits is not None and limits.pids else PIDS_LIMIT,
            "read_only": True,
            "detach": True,
            "stdin_open": False,
        }
        if memory_mb is not None:
            spec["mem_limit"] = f"{int(memory_mb)}m"
            spec["memswap_limit"] = f"{int(memory_mb)}m"
        if limits is not None and limits.file_mb is not None:
            spec["fsize"] = int(limits.file_mb) << 20  # RLIMIT_FSIZE, in bytes
        return spec

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
        limits: Limits | None = None,
    ) -> tuple[list[str], str, dict[str, str]]:
        """A ``docker run`` command line, for callers that start the process themselves."""
        spec = self._spec(argv, mounts, cwd, env, network, None, hide, limits)
        cmd = ["docker", "run", "--rm", "-i", "--read-only", "--cap-drop", "ALL"]
        cmd += ["--security-opt", "no-new-privileges", "--pids-limit", str(spec["pids_limit"])]
        if "fsize" in spec:
            cmd += ["--ulimit", f"fsize={spec['fsize']}:{spec['fsize']}"]
        cmd += ["--network", spec["network_mode"], "-w", spec["working_dir"]]
        for src, dst, ro in spec["binds"]:
            cmd += ["--mount", f"type=bind,src={src},dst={dst}" + (",readonly" if ro else "")]
        for where, opts in spec["tmpfs"].items():
            cmd += ["--tmpfs", f"{where}:{opts}"]
        for k, v in spec["environment"].items():
            cmd += ["-e", f"{k}={v}"]
        return [*cmd, self.image_id, *argv], "/", {**os.environ}

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
        if memory_mb is None and limits is not None:
            memory_mb = limits.memory_mb
        cmd, where, host_env = self.prepare(argv, mounts, cwd, env, network, hide, limits=limits)
        if memory_mb is not None:
            at = cmd.index(self.image_id)
            cmd[at:at] = ["--memory", f"{int(memory_mb)}m", "--memory-swap", f"{int(memory_mb)}m"]
        return cmd, where, host_env

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
        from docker.types import LogConfig, Ulimit
        from docker.types import Mount as DockerMount

        if memory_mb is None and limits is not None:
            memory_mb = limits.memory_mb

        # the streams go to files in a folder of ours, not through Docker's log driver: their
        # sizes are checked cheaply against the output cap, as the other sandboxes do
        out_dir = Path(tempfile.mkdtemp(prefix="rsiframe-docker-out-"))
        wrapped = ["sh", "-c", _WRAPPER, "sh", *argv]
        spec = self._spec(wrapped, mounts, cwd, env, network, memory_mb, hide, limits)
        if "fsize" in spec:
            n = spec.pop("fsize")
            spec["ulimits"] = [Ulimit(name="fsize", soft=n, hard=n)]
        watch = limits.watch if limits is not None else ()
        spec["binds"].append((str(out_dir), "/.rsi-out", False))
        spec["mounts"] = [
            DockerMount(dst, src, type="bind", read_only=ro) for src, dst, ro in spec.pop("binds")
        ]
        spec["log_config"] = LogConfig(type="none")
        (out_dir / "stdout").touch()
        (out_dir / "stderr").touch()
        start = time.monotonic()
        try:
            with open(out_dir / "stdout", "rb") as out, open(out_dir / "stderr", "rb") as err:
                try:
                    container = self.client.containers.run(**spec)
                except Exception as exc:
                    raise SandboxError(f"cannot start a container: {exc}") from exc
                timed_out, overflow, code, why = self._wait(
                    container, start, timeout, output_cap, (out, err), watch, spec["pids_limit"]
                )
                if why is None and _pids_reached(out_dir / "pids.events"):  # a quick exit
                    why = f"it reached its limit of {spec['pids_limit']} processes"
                stdout, t1 = _read_capped(out, output_limit)
                stderr, t2 = _read_capped(err, output_limit)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        return ProcResult(
            exit_code=code,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
            stdout=stdout,
            stderr=stderr,
            truncated=t1 or t2,
            output_exceeded=overflow,
            # a limit the container broke, named as the bubblewrap sandbox's cgroups name it
            limit=(f"it passed its memory limit of {memory_mb} MiB" if why == "oom" else why),
        )

    def _wait(
        self,
        container: Any,
        start: float,
        timeout: float,
        cap: int | None,
        streams: tuple[Any, Any],
        watch: tuple[tuple[Path, int], ...],
        pids: int,
    ) -> tuple[bool, bool, int | None, str | None]:
        """Wait for the container, killing it past the time limit, the output cap, its pid
        limit or a watched folder's size; it is removed either way (with every process in
        it). The last item: the limit it broke (``"oom"``: Docker saw an OOM kill in it)."""
        timed_out = overflow = False
        why: str | None = None
        events = _pids_events(container.id)
        ticks = 0
        result: dict[str, Any] = {}
        done = threading.Event()

        def wait() -> None:
            try:
                result.update(container.wait())
            except Exception:  # the container was removed under us: nothing to report
                pass
            finally:
                done.set()

        try:
            threading.Thread(target=wait, daemon=True).start()
            while not done.wait(_POLL_S):
                if time.monotonic() - start >= timeout:
                    timed_out = True
                    break
                sizes = (os.fstat(f.fileno()).st_size for f in streams)
                if cap is not None and any(n > cap for n in sizes):
                    overflow = True
                    break
                ticks += 1
                why = _limit(events, pids, watch if ticks % 20 == 0 else ())
                if why is not None:
                    break
        finally:
            why = why or _limit(events, pids, watch)
            try:
                container.reload()
                if container.attrs.get("State", {}).get("OOMKilled"):
                    why = "oom"
            except Exception:  # gone already: nothing more to learn
                pass
            container.remove(force=True)
            done.wait(30)
        return timed_out, overflow, None if timed_out else result.get("StatusCode"), why


def _limit(events: Path | None, pids: int, watch: tuple[tuple[Path, int], ...]) -> str | None:
    """The limit a running container has broken, in words (as the cgroups word it)."""
    if _pids_reached(events):
        return f"it reached its limit of {pids} processes"
    return _breach(watch, None)


def _read_capped(f: Any, limit: int) -> tuple[bytes, bool]:
    size = os.fstat(f.fileno()).st_size
    return os.pread(f.fileno(), min(limit, size), 0), size > limit


def check() -> None:
    """Preflight: the engine is up and the base image exists (bad input otherwise)."""
    DockerSandbox.connect()


register("docker", DockerSandbox.connect)
