#!/usr/bin/env python3
"""Run the agent's program where it can neither read the tests nor write the reward.

``python3 confine.py TESTS VERIFIER -- COMMAND...`` (python3 stdlib only; copied by
``generate.py`` into the tests of the tasks whose check runs the agent's code). It
confines itself with Landlock: reading and running the system (``/usr``, ``/etc``, the
libraries, Python), reading and writing the working folder, ``/tmp`` and ``/dev``,
nothing else; then it checks from inside that TESTS cannot be read and that nothing can
be written in VERIFIER, and only then runs COMMAND (every process it starts inherits the
confinement). Where that cannot be had (no Landlock, a seccomp filter refusing it, a
sandbox that shows the tests under an allowed folder), it runs nothing and exits 3 with
the reason: the check then fails, never the confinement.
"""

from __future__ import annotations

import ctypes
import os
import sys

REFUSED = 3
#: landlock_create_ruleset, landlock_add_rule, landlock_restrict_self (the generic table)
SYSCALLS = (444, 445, 446)
PR_SET_NO_NEW_PRIVS = 38
RULE_PATH_BENEATH = 1
CREATE_RULESET_VERSION = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
TRUNCATE, IOCTL_DEV = 1 << 14, 1 << 15
READ = EXECUTE | READ_FILE | READ_DIR
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")


class Refused(Exception):
    pass


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def handled(abi: int) -> int:
    """Every file-system right this kernel's Landlock knows (ABI 1: 13 of them)."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def confine(writable: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    create, add, restrict = SYSCALLS
    abi = libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    if abi < 1:
        raise Refused(f"Landlock is not available ({os.strerror(ctypes.get_errno())})")
    all_rights = handled(abi)
    attr = ctypes.c_uint64(all_rights)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise Refused(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    file_rw = READ_FILE | WRITE_FILE | READ_DIR | (all_rights & (TRUNCATE | IOCTL_DEV))
    system = [*SYSTEM, sys.prefix, sys.base_prefix, "/proc"]
    rules = [(p, READ) for p in system] + [("/dev", file_rw)]
    rules += [(p, all_rights) for p in writable]
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # a folder this system does not have
        rule = PathBeneath(rights, fd)
        if libc.syscall(add, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)):
            raise Refused(f"landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.syscall(restrict, ruleset, 0):
        raise Refused(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")


def problems(tests: str, verifier: str) -> list[str]:
    """What the confined process can still reach that it must not (checked from inside)."""
    found = []
    for dirpath, _dirs, files in os.walk(tests):
        for name in files:
            try:
                with open(os.path.join(dirpath, name), "rb"):
                    found.append(f"it can read {os.path.join(dirpath, name)}")
            except OSError:
                pass
    try:
        os.listdir(tests)
        found.append(f"it can list {tests}")
    except OSError:
        pass
    probe = os.path.join(verifier, f".confine-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
        found.append(f"it can write in {verifier}")
    except OSError:
        pass
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: confine.py TESTS VERIFIER -- COMMAND...", file=sys.stderr)
        return 2
    tests, verifier, command = argv[0], argv[1], argv[3:]
    try:
        confine([os.getcwd(), "/tmp"])
        left = problems(tests, verifier)
        if left:
            raise Refused("confined, but " + "; ".join(left))
    except Refused as exc:
        print(f"confine: refused to run {command[0]}: {exc}", file=sys.stderr)
        return REFUSED
    os.execvp(command[0], command)
    return REFUSED  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
