#!/usr/bin/env python3
"""pyfix verifier (python3 stdlib only): the agent's code never runs beside the answers.

The parent (this script, as ``test.sh`` starts it) reads ``cases.json`` and never imports
the agent's module. Each case runs in a child of its own (this script again, ``--child``)
that first confines itself with Landlock (no read of ``/tests``, no write anywhere but
``/dev/null``, so none to ``/logs/verifier``; with newer kernels no TCP and no signals to
the parent; ptrace of the parent never), checks from inside that it is confined, and
refuses to run otherwise. It gets that one case's arguments on stdin, imports
``$RSI_APP/<module>.py`` (a regular file, never a link), calls the function for at most
CASE_SECONDS and writes the result as JSON. The parent compares it with the expected value
(``==``), kills whatever the child left running, and writes the reward once every child
process is gone: 1 iff every case passes, else 0 with the reason on stdout (the first
failing case's index, never its expected value). The reward is always written.

Where the agent's code cannot be confined it is not run, and the reward is 0 with the
reason: a kernel without Landlock (or a seccomp filter refusing it), or tests that are not
mounted at ``/tests`` (the process fallback, where the task set's answers are also readable
at their host path).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import platform
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = Path("/tests")
MAX_MODULE_BYTES = 1 << 20
MAX_RESULT_BYTES = 1 << 20
CASE_SECONDS = 2  # a case that runs longer (an endless loop) fails
START_SECONDS = 10  # the child's start and the module's import, on a loaded machine
REAP_SECONDS = 5
REFUSED = 3  # the child's exit status when it cannot confine itself

# -- Landlock, through the raw system calls -------------------------------------------------

#: landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: the generic syscall
#: numbers, the same on these architectures (others number them differently)
SYSCALLS = (444, 445, 446)
ARCHES = {"x86_64", "aarch64", "arm64", "armv7l", "riscv64", "ppc64le", "s390x", "i686"}
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
TRUNCATE, IOCTL_DEV = 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
NET_TCP = 3  # bind and connect (ABI 4)
SCOPES = 3  # abstract unix sockets and signals to processes outside the domain (ABI 6)


class Unconfined(Exception):
    """The child cannot confine itself; the message says why."""


class RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _call(libc: ctypes.CDLL, what: str, *args: object) -> int:
    res = libc.syscall(*args)
    if res < 0:
        raise Unconfined(f"{what}: {os.strerror(ctypes.get_errno())}")
    return res


def landlock_abi(libc: ctypes.CDLL) -> int:
    """The kernel's Landlock ABI version; raises :class:`Unconfined` without one."""
    if platform.machine() not in ARCHES:
        raise Unconfined(f"Landlock's system call numbers are not known on {platform.machine()}")
    create = ctypes.c_long(SYSCALLS[0])
    flag = ctypes.c_uint32(CREATE_RULESET_VERSION)
    return _call(libc, "Landlock is not available", create, None, ctypes.c_size_t(0), flag)


def handled_fs(abi: int) -> int:
    """Every file-system right the ABI knows: each is denied unless a rule grants it."""
    bits = 13 + (abi >= 2) + (abi >= 3) + (abi >= 5)  # REFER, TRUNCATE, IOCTL_DEV
    return (1 << bits) - 1


def readable(denied: list[str]) -> list[str]:
    """The largest subtrees of ``/`` that hold none of ``denied`` (symlinks left out: their
    targets are reached through their own subtree)."""
    found: list[str] = []

    def walk(folder: str) -> None:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.path in denied or e.is_symlink():
                    continue
                if any(d.startswith(e.path.rstrip("/") + "/") for d in denied):
                    walk(e.path)
                else:
                    found.append(e.path)

    walk("/")
    return found


def confine(denied: list[Path]) -> int:
    """Restrict this process (and all it starts) for good: read everywhere but ``denied``,
    write nowhere but ``/dev/null``. Returns the Landlock ABI version used."""
    libc = _libc()
    abi = landlock_abi(libc)
    fs = handled_fs(abi)
    attr = RulesetAttr(fs, NET_TCP if abi >= 4 else 0, SCOPES if abi >= 6 else 0)
    size = ctypes.c_size_t(8 if abi < 4 else 16 if abi < 6 else 24)  # the fields this ABI knows
    create, no_flags = ctypes.c_long(SYSCALLS[0]), ctypes.c_uint32(0)
    ruleset = _call(libc, "landlock_create_ruleset", create, ctypes.byref(attr), size, no_flags)
    grants = [(p, READ) for p in readable([os.path.realpath(d) for d in denied])]
    for path, access in [*grants, ("/dev/null", READ_FILE | WRITE_FILE)]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # gone since the scan: nothing to grant
        try:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            rule = PathBeneath(access & fs & (~0 if is_dir else FILE_RIGHTS), fd)
            add = ctypes.c_long(SYSCALLS[1])
            kind, flags = ctypes.c_int(RULE_PATH_BENEATH), ctypes.c_uint32(0)
            _call(libc, f"landlock_add_rule {path}", add, ruleset, kind, ctypes.byref(rule), flags)
        finally:
            os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise Unconfined(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
    _call(libc, "landlock_restrict_self", ctypes.c_long(SYSCALLS[2]), ruleset, ctypes.c_uint32(0))
    os.close(ruleset)
    return abi


def confinement_problems(tests: Path, verifier: Path) -> list[str]:
    """What this process can still do that it must not: read the tests (their listing or
    any file), create a file in the verifier's folder, read the parent's memory."""
    problems = []
    probes = [(tests, os.O_RDONLY | os.O_DIRECTORY), (tests / "cases.json", os.O_RDONLY)]
    probes += [(Path(f"/proc/{os.getppid()}/mem"), os.O_RDONLY)]
    probes += [(verifier / f".probe-{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)]
    for path, flags in probes:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        os.close(fd)
        if flags & os.O_CREAT:
            os.unlink(path)
        problems.append(f"{path} is {'writable' if flags & os.O_CREAT else 'readable'}")
    return problems


# -- the child: one case of the agent's code, confined --------------------------------------


class CaseTimeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


def plain(value: object, depth: int = 0) -> object:
    """``value`` as JSON data (tuples become lists, as JSON has none); raises TypeError for
    anything else, dicts with keys that are not strings included (JSON would make them so)."""
    if depth > 100:
        raise TypeError("nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"returned a {type(value).__name__}, not plain data")


def run_case(module_path: Path, request: dict) -> dict:
    """Import the module, call the function on the case's arguments: the outcome as JSON."""
    st = os.lstat(module_path)
    if not stat.S_ISREG(st.st_mode):
        return {"load": f"{module_path} is not a regular file"}
    loader = importlib.util.spec_from_file_location(request["module"], module_path)
    module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
    try:
        loader.loader.exec_module(module)  # type: ignore[union-attr]
        fn = getattr(module, request["function"])
    except BaseException as exc:  # the agent's code: any failure is a 0
        return {"load": f"cannot load {request['function']}: {type(exc).__name__}: {exc}"}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        return {"value": plain(fn(*request["args"]))}
    except CaseTimeout:
        return {"error": f"took longer than {CASE_SECONDS} s"}
    except BaseException as exc:
        return {"error": f"raised {type(exc).__name__}"}
    finally:
        signal.alarm(0)


def child(app: Path, tests: Path, verifier: Path) -> int:
    try:
        abi = confine([tests, verifier])
    except Unconfined as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return REFUSED
    problems = confinement_problems(tests, verifier)
    if problems:
        print(f"refused: confined (Landlock ABI {abi}) but {'; '.join(problems)}", file=sys.stderr)
        return REFUSED
    request = json.loads(sys.stdin.read())
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the module prints goes to stderr, never into the result
    try:
        outcome = run_case(app / f"{request['module']}.py", request)
        data = json.dumps(outcome)
    except BaseException as exc:
        data = json.dumps({"error": f"raised {type(exc).__name__}"})
    result.write(data)
    result.flush()
    os._exit(0)  # nothing of the module runs at exit


# -- the parent: the cases, one child each ---------------------------------------------------


def children() -> list[int]:
    """This process's children, those its descendants left to it (the subreaper) included."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(entry))
    return found


def reap_all() -> bool:
    """Kill and wait for every process the children left; False if some would not go."""
    deadline = time.monotonic() + REAP_SECONDS
    while time.monotonic() < deadline:
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return True
    return False


def _limits() -> None:  # in the child, before it starts: a result file of bounded size
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_RESULT_BYTES, MAX_RESULT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def one_case(app: Path, verifier: Path, request: dict) -> tuple[dict, str]:
    """Run one case in a child: (its outcome, what it said on stderr)."""
    argv = [sys.executable, "-I", "-B", str(HERE / "check.py"), "--child"]
    argv += [str(app), str(HERE), str(verifier)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": "/tmp"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=app, env=env,
            start_new_session=True, preexec_fn=_limits,
        )  # fmt: skip
        try:
            proc.communicate(json.dumps(request).encode(), timeout=CASE_SECONDS + START_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        timed_out = proc.poll() is None
        code = proc.wait()
        out.seek(0)
        err.seek(0)
        said = err.read(4096).decode(errors="replace")
        if timed_out:
            return {"error": f"took longer than {CASE_SECONDS} s"}, said
        if code == REFUSED:
            return {"refused": said.strip().splitlines()[-1:] or ["(no reason)"]}, said
        try:
            return json.loads(out.read(MAX_RESULT_BYTES + 1)), said
        except ValueError:
            return {"error": f"gave no result (exit {code})"}, said


def verdict(app: Path, verifier: Path) -> tuple[int, str]:
    if HERE != TESTS:
        return 0, (
            f"not run: the tests are at {HERE}, not {TESTS}; without a sandbox that mounts "
            "them there (the process fallback) the task set's answers are readable at "
            "their host path, so the agent's code is not run beside them"
        )
    spec = json.loads((HERE / "cases.json").read_text())
    module_path = app / f"{spec['module']}.py"
    try:
        st = os.lstat(module_path)
    except FileNotFoundError:
        return 0, f"no module at {module_path}"
    if not stat.S_ISREG(st.st_mode):
        return 0, f"{module_path} is not a regular file"
    if st.st_size > MAX_MODULE_BYTES:
        return 0, f"{module_path} is too large"
    for i, (args, expected) in enumerate(spec["cases"]):
        request = {"module": spec["module"], "function": spec["function"], "args": args}
        outcome, _ = one_case(app, verifier, request)
        if not reap_all():
            return 0, f"case {i}: processes the agent's code started would not end"
        if "refused" in outcome:
            return 0, f"not run: the agent's code cannot be confined: {outcome['refused'][0]}"
        if "load" in outcome:
            return 0, outcome["load"]
        if "error" in outcome:
            return 0, f"case {i}: {outcome['error']}"
        if outcome.get("value") != expected:
            return 0, f"case {i}: wrong answer"
    return 1, f"all {len(spec['cases'])} cases pass"


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return child(*(Path(p) for p in sys.argv[2:5]))
    app = Path(os.environ.get("RSI_APP", "/app"))
    verifier = Path(os.environ.get("RSI_LOGS", "/logs")) / "verifier"
    _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a child come back here
    try:
        reward, reason = verdict(app, verifier)
    except Exception as exc:  # a verifier error is a 0, never a crash without a reward
        reward, reason = 0, f"verifier error: {type(exc).__name__}: {exc}"
    if not reap_all():
        reward, reason = 0, "processes the agent's code started would not end"
    print(reason)
    verifier.mkdir(parents=True, exist_ok=True)
    (verifier / "reward.txt").write_text(str(reward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
