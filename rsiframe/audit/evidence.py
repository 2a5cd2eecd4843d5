"""Evidence of one candidate, read on demand: diffs from repo.git, artifacts paged, and the
text of its model calls (shared by the viewer and the report page).

Everything here reads: git objects through :class:`rsiframe.repo.candidates.CandidateRepo`
(``git cat-file``, never a command that writes), artifacts by seeking into their
content-addressed files. Large files are read one page at a time; the hash of an
artifact is checked by streaming it, separately from showing it.
"""

from __future__ import annotations

import difflib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.archive.log import Event, artifact_path
from rsiframe.archive.state import Candidate
from rsiframe.errors import ArchiveCorrupt, RsiError
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import MODE_LINK, diff
from rsiframe.util.digest import sha256_bytes, sha256_file

PAGE_BYTES = 64 * 1024
MAX_DIFF_BYTES = 512 * 1024


@dataclass(frozen=True)
class FileDiff:
    path: str
    kind: str  # added | deleted | modified | mode | renamed | type
    text: str  # a unified diff, or a one-line note for binary/large files
    old_path: str | None = None


class Repo:
    """A lazily opened, thread-safe reader of the run's repo.git."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo: CandidateRepo | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._repo is not None:
                self._repo.close()
                self._repo = None

    def diff(self, old: str | None, new: str) -> list[FileDiff]:
        """Per-file unified diffs from commit ``old`` (None: empty tree) to ``new``."""
        with self._lock:
            if self._repo is None:
                self._repo = CandidateRepo(self.path)
            repo = self._repo
            before = repo.flat_tree(old) if old else {}
            after = repo.flat_tree(new)
            out = []
            for ch in diff(before, after):
                a = repo.read(old, ch.old_path or ch.path) if old and ch.old else b""
                b = repo.read(new, ch.path) if ch.new else b""
                if ch.kind == "mode":
                    text = (
                        f"mode {ch.old.mode if ch.old else '?'} -> {ch.new.mode if ch.new else '?'}"
                    )
                elif ch.new is not None and ch.new.mode == MODE_LINK:
                    text = f"symlink -> {b.decode(errors='replace')}"
                else:
                    text = unified(a, b, ch.old_path or ch.path, ch.path)
                out.append(FileDiff(ch.path, ch.kind, text, ch.old_path))
            return out


def unified(a: bytes, b: bytes, old_name: str, new_name: str) -> str:
    if len(a) + len(b) > MAX_DIFF_BYTES:
        return f"(large file: {len(a)} -> {len(b)} bytes; not diffed)"
    if b"\0" in a[:8000] or b"\0" in b[:8000]:
        return f"(binary file: {len(a)} -> {len(b)} bytes)"
    lines = difflib.unified_diff(
        a.decode(errors="replace").splitlines(keepends=True),
        b.decode(errors="replace").splitlines(keepends=True),
        fromfile=f"a/{old_name}",
        tofile=f"b/{new_name}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text or "(no textual change)"


def diff_base(c: Candidate, parent: Candidate | None) -> tuple[str | None, str | None]:
    """(parent commit, candidate commit) to diff; a rejected mutation's evidence commit."""
    new = c.commit or (c.rejected or {}).get("commit")
    old = c.parent_commit or (parent.commit if parent else None)
    return old, new


class Pager:
    """One artifact read a page at a time."""

    def __init__(self, run: Path, digest: str, page_bytes: int = PAGE_BYTES) -> None:
        self.digest = digest
        self.path = artifact_path(run, digest)
        self.page_bytes = page_bytes
        try:
            self.size = self.path.stat().st_size
        except FileNotFoundError as exc:
            raise ArchiveCorrupt(f"artifact {digest} is missing") from exc

    @property
    def pages(self) -> int:
        return max(1, -(-self.size // self.page_bytes))

    def page(self, n: int) -> str:
        with self.path.open("rb") as f:
            f.seek(n * self.page_bytes)
            data = f.read(self.page_bytes)
        return data.decode(errors="replace")

    def check(self) -> bool:
        """Whether the file still hashes to its name (streamed)."""
        return "sha256:" + sha256_file(self.path) == self.digest


def read_json(run: Path, digest: str, limit: int = 8 << 20) -> Any:
    """A small JSON artifact (trajectory, analysis, rollout, mutation), hash-checked."""
    pager = Pager(run, digest)
    if pager.size > limit:
        raise ArchiveCorrupt(f"artifact {digest} is too large to show as JSON ({pager.size} B)")
    data = pager.path.read_bytes()
    if "sha256:" + sha256_bytes(data) != digest:
        raise ArchiveCorrupt(f"artifact {digest} does not match its hash")
    return json.loads(data)


def read_text(run: Path, digest: str, limit: int = PAGE_BYTES) -> str:
    """The first ``limit`` bytes of a text artifact (lessons, tracebacks)."""
    try:
        return Pager(run, digest, limit).page(0)
    except RsiError as exc:
        return f"({exc})"


# -- model calls: a request as the model saw it, a response's answer -----------------


def calls_of(events: list[Event]) -> list[dict[str, Any]]:
    """The ``model_call`` events among a candidate's events, in ledger order."""
    return sorted((ev.data for ev in events if ev.type == "model_call"), key=lambda d: d["seq"])


def prompt_text(request: Any) -> str:
    """A request body as the model saw it: system text, then each message by role."""
    if not isinstance(request, dict):
        return str(request)
    parts = []
    for key in ("system", "instructions"):
        if isinstance(request.get(key), str):
            parts.append(f"[{key}]\n{request[key]}")
    msgs = request.get("messages", request.get("input"))
    if isinstance(msgs, str):
        msgs = [{"role": "user", "content": msgs}]
    for m in msgs if isinstance(msgs, list) else []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(f"[{m.get('role', '?')}]\n{content or ''}")
    if "prompt" in request and not parts:
        parts.append(str(request["prompt"]))
    return "\n\n".join(parts)


def answer_text(data: bytes) -> str:
    """A response body's answer: a JSON completion, or a stream's deltas joined."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return _stream_text(data)
    return _completion_text(parsed)


def _stream_text(data: bytes) -> str:
    """A server-sent event stream's text: each ``data:`` line's deltas, joined."""
    chunks = []
    for line in data.decode(errors="replace").splitlines():
        payload = line[5:].strip() if line.startswith("data:") else ""
        if not payload or payload == "[DONE]":
            continue
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        chunks += _event_deltas(ev)
    return "".join(chunks)


def _event_deltas(ev: Any) -> list[str]:
    """The text of one stream event: OpenAI's choices (text or delta) and Anthropic's delta."""
    out = [
        str(ch.get("text") or (ch.get("delta") or {}).get("content") or "")
        for ch in ev.get("choices") or []
    ]
    delta = ev.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("text"), str):
        out.append(delta["text"])
    return out


def _completion_text(parsed: Any) -> str:
    """A JSON completion's text: OpenAI's choices (tool calls shown) or Anthropic's blocks."""
    out = []
    for ch in parsed.get("choices") or [] if isinstance(parsed, dict) else []:
        msg = ch.get("message") or {}
        out.append(str(ch.get("text") or msg.get("content") or ""))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append(f"\n[tool call] {fn.get('name')}({fn.get('arguments')})")
    for block in parsed.get("content") or [] if isinstance(parsed, dict) else []:
        if isinstance(block, dict):
            out.append(str(block.get("text", "")))
    return "".join(out)
