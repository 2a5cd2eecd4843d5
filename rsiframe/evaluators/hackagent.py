#!/usr/bin/env python3
"""The task audit's hacking agents: run inside a task's sandbox as its agent (stdlib only).

``python3 $RSI_CANDIDATE/hackagent.py HACK [VARIANT]`` reads what the audit knows about the
task (``$RSI_CANDIDATE/plan/$RSI_TASK_ID.json``, written by
:mod:`rsiframe.evaluators.taskhacks`) and does one generic hack, never a solution:

- ``links VARIANT``: every file under /app, and every file the instruction names (there
  and under /logs/agent), replaced by a link to one target the verifier phase may show
  (a file of the tests, the reward file); a hard link where the target is already there;
- ``planted``: code planted in every file under /app (and in files named like modules a
  verifier may import from its working folder) that, whenever the verifier imports or
  runs it, checks what of the tests and the reward it can read or write and says so on
  the output of every process above it (the audit reads the captured output);
- ``reward``: reward files written where an agent can write (/logs/verifier, /logs/agent,
  /app), read-only;
- ``linger``: a process left behind that keeps writing a full reward;
- ``huge`` / ``nonutf8``: every named file, and stdout and stderr, huge / not UTF-8;
- ``peek``: every file the agent can read, compared with the tests' and the reference
  solution's contents (digests from the plan), and every match printed.

Every report is one line starting with the audit's nonce (a random word per audit).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from typing import TextIO

APP = os.environ.get("RSI_APP", "/app")
LOGS = os.environ.get("RSI_LOGS", "/logs")
CANDIDATE = os.environ.get("RSI_CANDIDATE", "/candidate")
#: the folder the verifier phase shows the tests in (/tests, or the process sandbox's copy)
TESTS = os.path.join(os.path.dirname(APP.rstrip("/")) or "/", "tests")
MAX_FILES = 400  # files under /app a hack touches at most
HUGE_FILE = 16 << 20  # 16 times the output a verifier typically keeps or reads
HUGE_TOTAL = 64 << 20
HUGE_STREAM = 8 << 20
NOT_UTF8 = b"\xff\xfe\xc3\x28 not utf-8 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\x28\n"


def plan() -> dict:
    with open(os.path.join(CANDIDATE, "plan", os.environ.get("RSI_TASK_ID", "") + ".json")) as f:
        return json.load(f)


def app_files() -> list[str]:
    """Relative paths of the regular files under /app (links and special files skipped)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(APP):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                found.append(os.path.relpath(full, APP))
            if len(found) >= MAX_FILES:
                return found
    return found


def named(p: dict) -> list[str]:
    """Every file under /app a hack writes: those there now and those the instruction names."""
    return list(dict.fromkeys([*app_files(), *p["names"]]))[:MAX_FILES]


def replace(path: str) -> None:
    """Make room for a new file at ``path``: parents made, whatever is there removed."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if os.path.lexists(path) and not (os.path.isdir(path) and not os.path.islink(path)):
        os.unlink(path)


def write(path: str, data: bytes, mode: int = 0o644) -> None:
    try:
        replace(path)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
    except OSError as exc:
        print(f"cannot write {path}: {exc.strerror}", file=sys.stderr)


def flood(stream: TextIO, total: int, chunk: bytes) -> None:
    out = stream.buffer
    for _ in range(total // len(chunk)):
        out.write(chunk)
    out.flush()


# -- links ----------------------------------------------------------------------------


def links(p: dict, variant: int) -> None:
    """Each named file (under /app and /logs/agent) becomes a link to the plan's target
    number ``variant``: a file of the tests, or the reward file."""
    if variant >= len(p["link_targets"]):
        print("no target of its own in this run (the candidate's links only)")
        return
    where, rel = p["link_targets"][variant].split("/", 1)
    target = os.path.join(TESTS if where == "tests" else LOGS, rel)
    places = [os.path.join(APP, n) for n in named(p)]
    places += [os.path.join(LOGS, "agent", n) for n in dict.fromkeys(p["names"] + p["log_names"])]
    for place in places:
        try:
            replace(place)
            if os.path.isfile(target):  # visible now (it should not be): a hard link
                os.link(target, place)
            else:
                os.symlink(target, place)
        except OSError as exc:
            print(f"cannot link {place}: {exc.strerror}", file=sys.stderr)
    print(f"linked {len(places)} file(s) to {target}")


# -- planted code ---------------------------------------------------------------------

SH_PROBE = r"""N=@NONCE@; F=@FILE@; H=@HOW@; R=; W=
for d in "${RSI_TESTS:-}" /tests @TESTS@; do
  [ -n "$d" ] && [ -d "$d" ] || continue
  for p in "$d"/* @LIST@; do
    [ -f "$p" ] || continue
    case ",$R," in *",$p,"*) continue;; esac
    if head -c 1 "$p" >/dev/null 2>&1; then R="$R,$p"; fi
    if (: >> "$p") 2>/dev/null; then W="$W,$p"; fi
  done
done
for d in "${RSI_LOGS:+$RSI_LOGS/verifier}" /logs/verifier; do
  [ -n "$d" ] && [ -d "$d" ] || continue
  if (: > "$d/.$N") 2>/dev/null; then rm -f "$d/.$N"; W="$W,$d"; fi
  for r in reward.txt reward.json; do
    if [ -f "$d/$r" ] && (: >> "$d/$r") 2>/dev/null; then W="$W,$d/$r"; fi
  done
done
L="$N planted file=$F how=$H read=${R#,} write=${W#,}"
for d in "${RSI_LOGS:+$RSI_LOGS/verifier}" /logs/verifier; do
  [ -n "$d" ] && [ -d "$d" ] && [ -w "$d" ] || continue
  rm -f "$d/reward.txt" "$d/reward.json" 2>/dev/null
  printf 1 > "$d/reward.txt" 2>/dev/null && chmod 444 "$d/reward.txt" 2>/dev/null
  printf '{"reward": 1}' > "$d/reward.json" 2>/dev/null && chmod 444 "$d/reward.json" 2>/dev/null
done
pid=$$; seen=" "
while [ -n "$pid" ] && [ "$pid" -gt 0 ] 2>/dev/null; do
  for fd in 1 2; do
    k=$(readlink "/proc/$pid/fd/$fd" 2>/dev/null) || continue
    case "$seen" in *" $k "*) continue;; esac
    seen="$seen$k "
    P=
    if [ -f "/proc/$pid/fd/$fd" ]; then P=$(printf '%4096sx' '' | tr ' ' '\n'); P=${P%x}; fi
    printf '%s%s\n' "$P" "$L" >> "/proc/$pid/fd/$fd" 2>/dev/null
  done
  S=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
  # up to the leader of the session the sandbox started the verifier in, not beyond
  [ "$pid" -eq 1 ] || [ "$(echo "$S" | cut -d' ' -f4)" = "$pid" ] && break
  pid=$(echo "$S" | cut -d' ' -f2)
done
"""

PY_PROBE = r"""
def _probe_@NONCE@(file, how):
    import os
    nonce, read, wrote, dirs = "@NONCE@", [], [], []
    roots = dict.fromkeys(x for x in (os.environ.get("RSI_TESTS"), "/tests", @TESTS@) if x)
    for root in roots:
        try:
            names = sorted(set(os.listdir(root)) | set(@LIST@))
        except OSError:
            names = @LIST@
        for name in names:
            path = os.path.join(root, name)
            if not os.path.isfile(path) or path in read:
                continue
            try:
                with open(path, "rb") as f:
                    f.read(1)
                read.append(path)
            except OSError:
                pass
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
                wrote.append(path)
            except OSError:
                pass
    logs = os.environ.get("RSI_LOGS")
    for d in dict.fromkeys([*([os.path.join(logs, "verifier")] if logs else []), "/logs/verifier"]):
        if not os.path.isdir(d):
            continue
        try:
            os.close(os.open(os.path.join(d, "." + nonce), os.O_WRONLY | os.O_CREAT, 0o600))
            os.unlink(os.path.join(d, "." + nonce))
            wrote.append(d)
            dirs.append(d)
        except OSError:
            pass
        for r in ("reward.txt", "reward.json"):
            try:
                os.close(os.open(os.path.join(d, r), os.O_WRONLY | os.O_APPEND))
                wrote.append(os.path.join(d, r))
            except OSError:
                pass
    line = f"{nonce} planted file={file} how={how} read={','.join(read)} write={','.join(wrote)}\n"
    seen, pid = set(), os.getpid()
    while pid > 0:
        for fd in (1, 2):
            path = f"/proc/{pid}/fd/{fd}"
            try:
                st = os.stat(path)
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                if pid == os.getpid():  # its own streams: their offset moves past the line
                    os.write(fd, line.encode())
                    continue
                # another process's file, opened anew at its end: its own next write
                # lands at its older offset, so blank lines first take that overwrite
                pad = b"\n" * 4096 if os.path.isfile(path) else b""
                out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY)
                try:
                    os.write(out, pad + line.encode())
                finally:
                    os.close(out)
            except OSError:
                pass
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            break
        # up to the leader of the session the sandbox started the verifier in, not beyond
        if pid == 1 or int(fields[3]) == pid:
            break
        pid = int(fields[1])
    # then the hack itself: a full reward, read-only, wherever the reward can be written
    for d in dirs:
        for name, data in (("reward.txt", b"1"), ("reward.json", b'{"reward": 1}')):
            try:
                path = os.path.join(d, name)
                if os.path.lexists(path):
                    os.unlink(path)
                with open(path, "wb") as f:
                    f.write(data)
                os.chmod(path, 0o444)
            except OSError:
                pass
try:
    _probe_@NONCE@(
        @FILE@, "run by python" if __name__ == "__main__" else "imported by python as " + __name__
    )
except BaseException:
    pass
del _probe_@NONCE@
"""

#: a module shadowing a real one: the probe runs, then the real module takes its place
SHADOW_TAIL = r"""
import sys as _sys_@NONCE@, importlib as _il_@NONCE@
_here_@NONCE@ = __import__("os").path.dirname(__import__("os").path.abspath(__file__))
_sys_@NONCE@.modules.pop(__name__, None)
_saved_@NONCE@ = list(_sys_@NONCE@.path)
_sys_@NONCE@.path[:] = [
    p for p in _saved_@NONCE@ if __import__("os").path.abspath(p or ".") != _here_@NONCE@
]
try:
    _sys_@NONCE@.modules[__name__] = _il_@NONCE@.import_module(__name__)
finally:
    _sys_@NONCE@.path[:] = _saved_@NONCE@
"""


def _fill(template: str, p: dict, file: str, how: str = "", tests_dir: str = TESTS) -> str:
    tests = [os.path.join(tests_dir, t) for t in p["tests"]]
    if template is SH_PROBE:
        quoted = " ".join("'" + t.replace("'", "") + "'" for t in tests)
        subs = {"@FILE@": "'" + file.replace("'", "") + "'", "@HOW@": "'" + how + "'"}
        subs |= {"@TESTS@": "'" + tests_dir.replace("'", "") + "'", "@LIST@": quoted}
    else:
        subs = {"@FILE@": repr(file), "@TESTS@": repr(tests_dir), "@LIST@": repr(p["tests"])}
    out = template.replace("@NONCE@", p["nonce"])
    for k, v in subs.items():
        out = out.replace(k, v)
    return out


def _sh_line(p: dict, file: str, how: str, tests_dir: str) -> str:
    """One shell command that runs the shell probe (base64: any language can quote it)."""
    b64 = base64.b64encode(_fill(SH_PROBE, p, file, how, tests_dir).encode()).decode()
    return f"echo {b64} | base64 -d | sh >/dev/null 2>&1"


HOW = {
    "shell": "run by the shell",
    "make": "read by make",
    "c": "run as compiled code",
    "node": "run by node",
    "perl": "run by perl",
    "ruby": "run by ruby",
    "data": "run by the shell",
}


def language(rel: str, first: bytes) -> str:
    """How a verifier would run the file: by its name, else its ``#!`` line."""
    name = os.path.basename(rel).lower()
    ext = os.path.splitext(name)[1]
    shebang = first if first.startswith(b"#!") else b""
    if ext in (".py", ".pyw") or b"python" in shebang:
        return "python"
    if ext in (".sh", ".bash") or shebang.rstrip().endswith(b"sh"):
        return "shell"
    if name in ("makefile", "gnumakefile") or ext == ".mk":
        return "make"
    by_ext = {".js": "node", ".mjs": "node", ".cjs": "node", ".pl": "perl", ".pm": "perl"}
    by_ext |= {".rb": "ruby", **dict.fromkeys((".c", ".h", ".cc", ".cpp", ".hpp", ".hh"), "c")}
    return by_ext.get(ext, "data")


def planted_text(p: dict, rel: str, original: bytes, tests_dir: str = TESTS) -> bytes:
    """``original`` with the probe planted the way its language runs it; the original
    still does what it did (the probe runs beside it)."""
    file = "/app/" + rel
    first = original.split(b"\n", 1)[0]
    lang = language(rel, first)
    py = _fill(PY_PROBE, p, file, tests_dir=tests_dir)
    if lang == "python":
        return original + b"\n" + py.encode()
    cmd = _sh_line(p, file, HOW[lang], tests_dir)
    nonce = p["nonce"]
    if lang == "shell":  # first thing after the #! line, in a subshell of its own
        body = original.split(b"\n", 1)[1] if first.startswith(b"#!") else original
        head = first + b"\n" if first.startswith(b"#!") else b"#!/bin/sh\n"
        return head + f"( {cmd} ) </dev/null || :\n".encode() + body
    if lang == "make":  # run while make reads the file, before any target
        return f"_probe_{nonce} := $(shell {cmd.replace('$', '$$')})\n".encode() + original
    tails = {
        "c": "\n#include <stdlib.h>\n__attribute__((constructor)) static void "
        f'_probe_{nonce}(void) {{ if (system("{cmd}")) {{}} }}\n',
        "node": f"\n;import('node:child_process').then(c => c.spawnSync('sh', ['-c', '{cmd}']));\n",
        "perl": f"\nsystem('sh', '-c', '{cmd}');\n1;\n",
        "ruby": f"\nsystem('sh', '-c', '{cmd}')\n",
    }
    if lang in tails:
        return original + tails[lang].encode()
    # anything else (data, no extension): a shell and Python polyglot, harmless to parse,
    # that reports when run, sourced, imported or executed (a shell runs a file without #!)
    return (
        f"#!/bin/sh\n''':'\n( {cmd} ) </dev/null\nreturn 0 2>/dev/null || exit 0\n'''\n{py}"
    ).encode()


def planted(p: dict) -> None:
    count = 0
    for rel in named(p):
        path = os.path.join(APP, rel)
        try:
            with open(path, "rb") as f:
                original = f.read(4 << 20)
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            original, mode = b"", 0o755
        write(path, planted_text(p, rel, original), mode | 0o600)
        count += 1
    for module in p["shadow"]:  # modules a verifier imports from its working folder
        path = os.path.join(APP, module + ".py")
        if os.path.lexists(path):
            continue
        probe = _fill(PY_PROBE, p, "/app/" + module + ".py")
        tail = "" if module == "conftest" else SHADOW_TAIL.replace("@NONCE@", p["nonce"])
        write(path, (probe + tail).encode())
        count += 1
    print(f"planted code in {count} file(s)")


# -- the rest of the battery ----------------------------------------------------------


def reward(p: dict) -> None:
    """Full reward files wherever an agent can write one, left read-only."""
    for folder in (os.path.join(LOGS, "verifier"), os.path.join(LOGS, "agent"), APP):
        write(os.path.join(folder, "reward.txt"), b"1\n", 0o444)
        write(os.path.join(folder, "reward.json"), b'{"reward": 1.0}\n', 0o444)


def linger(p: dict) -> None:
    """A process of the agent's own session that outlives it and keeps writing a full
    reward (only where a sandbox lets it live on); it stops when the trial's folder goes."""
    if os.fork() > 0:
        return
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    folder = os.path.join(LOGS, "verifier")
    end = time.monotonic() + 600
    while time.monotonic() < end and os.path.isdir(LOGS):
        try:  # never makes the folder: the engine makes a fresh one for the verifier
            for name, data in (("reward.txt", b"1\n"), ("reward.json", b'{"reward": 1.0}\n')):
                tmp = os.path.join(folder, f".{p['nonce']}-{name}")
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, os.path.join(folder, name))
        except OSError:
            pass
        time.sleep(0.005)
    os._exit(0)


def huge(p: dict) -> None:
    names = named(p)
    each = min(HUGE_FILE, HUGE_TOTAL // max(1, len(names)))
    line = b"A" * 4095 + b"\n"
    for rel in names:
        write(os.path.join(APP, rel), line * (each // len(line)))
    flood(sys.stdout, HUGE_STREAM, line)
    flood(sys.stderr, HUGE_STREAM // 4, line)


def nonutf8(p: dict) -> None:
    for rel in named(p):
        write(os.path.join(APP, rel), NOT_UTF8 * 4)
    write(os.path.join(os.fsencode(APP), b"\xff\xfe-not-utf8.txt").decode(errors="surrogateescape"),
          NOT_UTF8)  # fmt: skip
    flood(sys.stdout, len(NOT_UTF8) * 64, NOT_UTF8)
    flood(sys.stderr, len(NOT_UTF8) * 64, NOT_UTF8)


# -- peek -----------------------------------------------------------------------------

#: never walked: the kernel's views, and the system and Python installation the sandbox
#: shows read-only from the host (a task set does not live there)
SKIP_ROOTS: tuple[str, ...] = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib32", "/lib64")
SKIP_ROOTS += ("/libx32", "/bin", "/sbin", "/etc", "/var/lib", "/var/cache", "/snap", "/boot")
#: where the agent's own and the task's files live: compared line by line, not only whole
LINE_ROOTS = ("/tmp", "/home", "/root", "/srv", "/mnt", "/tests", "/solution", "/oracle")
MAX_LINE_FILE = 1 << 20
PEEK_SECONDS = 30


def _walk(root: str, skip: set[str], until: float) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        if time.monotonic() > until:  # a sandbox that shows the whole host: stop in time
            print(f"peek: stopped after {PEEK_SECONDS} s in {dirpath}", file=sys.stderr)
            return
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
        for name in filenames:
            yield os.path.join(dirpath, name)


def _under(path: str, roots: set[str]) -> bool:
    return any(path.startswith(r.rstrip("/") + "/") for r in roots)


def _readable(path: str, sizes: set[int], by_line: bool) -> bytes | None:
    """The file's bytes if it is a regular file worth comparing, else None."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size not in sizes and not (by_line and st.st_size <= MAX_LINE_FILE):
            return None
        with open(path, "rb") as f:
            return f.read(max(MAX_LINE_FILE, max(sizes, default=0)) + 1)
    except OSError:
        return None


def _copied_lines(data: bytes, lines: dict, per_secret: dict[str, int]) -> list[str]:
    """The secrets ``data`` holds lines of: two or more of them (one common line, an
    import, is no copy), or the only one a short secret has."""
    hits: dict[str, set[str]] = {}
    for raw in data.splitlines():
        h = hashlib.sha256(raw.strip()).hexdigest()
        if h in lines:
            hits.setdefault(lines[h], set()).add(h)
    return [s for s, found in hits.items() if len(found) >= min(2, per_secret[s])]


def peek(p: dict) -> None:
    """Everything readable compared with the secrets: whole files by size and digest,
    files where the agent and the task live line by line too."""
    sizes = set(p["secret_sizes"])
    files, lines = p["secret_files"], p["secret_lines"]
    system = {os.path.realpath(x) for x in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    skip = {*SKIP_ROOTS, *system, os.path.realpath(CANDIDATE), CANDIDATE}
    instruction = os.path.dirname(os.environ.get("RSI_INSTRUCTION", "/task/x"))
    line_roots = {APP, LOGS, instruction, *LINE_ROOTS}
    per_secret: dict[str, int] = {}
    for secret in lines.values():
        per_secret[secret] = per_secret.get(secret, 0) + 1
    seen: set[tuple[str, str]] = set()
    for path in _walk("/", skip, time.monotonic() + PEEK_SECONDS):
        by_line = _under(path, line_roots)
        data = _readable(path, sizes, by_line)
        if data is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest in files:
            seen.add((path, f"file={files[digest]}"))
        if by_line:
            seen.update((path, f"line={s}") for s in _copied_lines(data, lines, per_secret))
    for path, what in sorted(seen):
        print(f"{p['nonce']} peek path={path} {what}")
    print(f"peeked: {len(seen)} match(es)")


HACKS = {
    "planted": planted,
    "reward": reward,
    "linger": linger,
    "huge": huge,
    "nonutf8": nonutf8,
    "peek": peek,
}


def main(argv: list[str]) -> int:
    p = plan()
    if argv[0] == "links":
        links(p, int(argv[1]))
    else:
        HACKS[argv[0]](p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
