"""A task's ``environment/Dockerfile``, built offline ``FROM`` the base image when it only adds
Debian packages (``sandbox: docker``).

Nothing can be pulled here, so a task's own base (``debian:bookworm-slim`` in Harbor's
templates) is replaced by the local base image (``rsiframe-base:bookworm``, built from a
debootstrap rootfs by ``scripts/ci-setup.sh docker``). That is only faithful when the
Dockerfile does nothing else than add packages, so exactly these lines are accepted::

    FROM debian:bookworm[-slim]  (or the base image itself)
    WORKDIR /app
    COPY . /app                  (rsiframe copies environment/ into /app itself)
    RUN apt-get update && apt-get install -y [--no-install-recommends] PKG ...
        [&& rm -rf /var/lib/apt/lists/*]    (apt as well; DEBIAN_FRONTEND=... allowed)

and anything else is one line naming the file, the line and what it does. The image
(``rsiframe-task:<digest of base image and packages>``) is built once and reused by tag;
Debian's mirror is reachable, a registry is not. The trial's record names it and its id.
"""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.errors import TaskSetError

#: what a task's FROM may name: Debian 12 (the base image is a bookworm rootfs)
_DEBIAN = re.compile(r"^(docker\.io/)?(library/)?debian:bookworm(-slim)?(@sha256:[0-9a-f]{64})?$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$")
_APT_FLAGS = {"-y", "--yes", "-q", "-qq", "--quiet", "--no-install-recommends", "--assume-yes"}
_CLEAN = ("rm -rf /var/lib/apt/lists/*", "apt-get clean", "apt clean")
TAG = "rsiframe-task"
_PLACED = {("WORKDIR", "/app"), ("WORKDIR", "/app/"), ("COPY", ". /app"), ("COPY", ". /app/")}
_PLACED |= {("COPY", ". .")}


@dataclass(frozen=True)
class TaskImage:
    """The image a task's trials run in: its tag, id and the packages it adds."""

    tag: str
    image_id: str
    packages: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        return {"image": self.tag, "image_digest": self.image_id, "packages": list(self.packages)}


def _lines(text: str) -> list[tuple[int, str]]:
    """Instructions with their first line number: comments dropped, continuations joined."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf:
        out.append((start, buf.strip()))
    return out


def _run_packages(command: str) -> list[str] | None:
    """The packages a RUN line installs, or None when it does anything else."""
    packages: list[str] = []
    for part in (p.strip() for p in command.split("&&")):
        if part in _CLEAN:
            continue
        words = shlex.split(part)
        while words and re.match(r"^DEBIAN_FRONTEND=\w+$", words[0]):
            words = words[1:]
        if words[:1] not in (["apt-get"], ["apt"]) or len(words) < 2:
            return None
        flags = [w for w in words[1:] if w.startswith("-")]
        if any(f not in _APT_FLAGS for f in flags):
            return None
        rest = [w for w in words[1:] if not w.startswith("-")]
        if rest == ["update"]:
            continue
        if rest[:1] != ["install"] or len(rest) < 2:
            return None
        if any(not _PACKAGE.match(p) for p in rest[1:]):
            return None
        packages += rest[1:]
    return packages


def packages(dockerfile: Path, base: str) -> tuple[str, ...]:
    """The Debian packages a Dockerfile adds (sorted); :class:`TaskSetError` (one line,
    exit 2) when it does more than that."""
    where = str(dockerfile)
    try:
        text = dockerfile.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskSetError(f"cannot read: {exc}", where=where) from None
    found: list[str] = []
    froms = 0
    for no, line in _lines(text):
        word, _, arg = line.partition(" ")
        op, arg = word.upper(), arg.strip()
        bad = (
            f"line {no}: {line[:80]!r} does more than add packages; a Dockerfile built "
            f"offline FROM {base} may only have FROM debian:bookworm, WORKDIR /app, "
            "COPY . /app and RUN apt-get install lines"
        )
        if op == "FROM":
            froms += 1
            image = arg.split()[0] if arg else ""
            if froms > 1 or not (image == base or _DEBIAN.match(image)) or " " in arg:
                raise TaskSetError(bad, where=where)
        elif (op, arg) in _PLACED:  # rsiframe places environment/ at /app itself
            continue
        elif op == "RUN" and (got := _run_packages(arg)) is not None:
            found += got
        else:
            raise TaskSetError(bad, where=where)
    if froms != 1:
        raise TaskSetError("no FROM line", where=where)
    return tuple(sorted(set(found)))


def dockerfile_text(base: str, pkgs: tuple[str, ...]) -> str:
    install = " ".join(pkgs)
    return (
        f"FROM {base}\n"
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        f"--no-install-recommends {install} && rm -rf /var/lib/apt/lists/*\n"
    )


_lock = threading.Lock()


def ensure(
    client: Any, base: str, base_id: str, pkgs: tuple[str, ...], where: str = ""
) -> TaskImage:
    """The image for ``pkgs`` on ``base`` (built once, then found by its tag); a package
    list apt cannot install is the task's fault (:class:`TaskSetError`, exit 2)."""
    digest = hashlib.sha256(f"{base_id}\n{' '.join(pkgs)}".encode()).hexdigest()[:16]
    tag = f"{TAG}:{digest}"
    with _lock:  # two trials of one task must not build it twice
        try:
            return TaskImage(tag, client.images.get(tag).id, pkgs)
        except Exception:  # not built yet (the SDK's ImageNotFound)
            pass
        try:
            image, _ = client.images.build(
                fileobj=io.BytesIO(dockerfile_text(base, pkgs).encode()),
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
            )
        except Exception as exc:  # BuildError: apt's own message, last line
            detail = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            raise TaskSetError(
                f"cannot build its image ({' '.join(pkgs)}) FROM {base}: {detail[0][:200]}",
                where=where or None,
            ) from None
        return TaskImage(tag, image.id, pkgs)


class TaskImages:
    """Per-task sandboxes of a docker sandbox: a task whose Dockerfile adds packages runs in
    its own image, every other task in the base image."""

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox
        self.built: dict[str, TaskImage] = {}  # task id -> image
        self._sandboxes: dict[str, Any] = {}

    def for_task(self, task_id: str, task_path: Path) -> Any:
        if getattr(self.sandbox, "kind", "") != "docker":
            return self.sandbox
        if task_id not in self._sandboxes:
            self._sandboxes[task_id] = self._make(task_id, task_path)
        return self._sandboxes[task_id]

    def _make(self, task_id: str, task_path: Path) -> Any:
        sb = self.sandbox
        dockerfile = task_path / "environment" / "Dockerfile"
        if not dockerfile.is_file():
            return sb
        pkgs = packages(dockerfile, sb.image)
        if not pkgs:
            return sb
        image = ensure(sb.client, sb.image, sb.image_id, pkgs, str(dockerfile))
        self.built[task_id] = image
        return type(sb)(sb.client, image.tag, image.image_id)

    def record(self) -> dict[str, Any]:
        """``task_images`` for a certificate's evaluator part (tasks run so far)."""
        return {t: self.built[t].record() for t in sorted(self.built)}


def preflight(task_paths: dict[str, Path]) -> None:
    """Before a run folder: the engine is up, every Dockerfile only adds packages (one line,
    exit 2, otherwise), and each task's image is built (cached by tag)."""
    from rsiframe.sandbox.docker import DockerSandbox

    images = TaskImages(DockerSandbox.connect())
    for task_id in sorted(task_paths):
        images.for_task(task_id, task_paths[task_id])
