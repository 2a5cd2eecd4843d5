"""Sync points, process starts and cgroup operations per candidate, counted with strace.

Runs ``bench/overhead.py``'s no-op run (a counter mutation, one task per split, agent
``true``, process sandbox) twice under ``strace -f``, with ``--small`` and ``--large``
candidates, and reports the difference divided by the difference in candidates: what
one more candidate costs, without the run's start and end. Counted:

- sync points: ``fsync`` + ``fdatasync`` (every file of every process);
- process starts: ``execve`` (successful), and ``fork``/``vfork``/``clone``/``clone3``
  that made a process, not a thread;
- cgroup operations: ``mkdir``/``rmdir`` under ``/sys/fs/cgroup``;
- inodes freed: files and folders removed (``unlink``, ``unlinkat``, ``rmdir`` elsewhere).
  On ext4 without a journal each one slows every new file near it for a minute or more
  (docs/performance.md); choose ``--small`` above 16 (the exports kept) so that what the
  run's close removes is the same in both runs.

    python bench/syscalls.py                       # K=1 and K=4, 10 and 30 candidates
    python bench/syscalls.py --inflight 1 --small 10 --large 20
    python bench/syscalls.py --mode steady         # each candidate reviewed as it is certified

Targets (issue 29): sync points <= 2 per candidate at K=1, <= 1 with 4 in flight;
process starts <= 4 per candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

OVERHEAD = Path(__file__).resolve().parent / "overhead.py"
TRACED = "fsync,fdatasync,execve,clone,clone3,fork,vfork,mkdir,mkdirat,rmdir,unlink,unlinkat"
CALL = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)[( ]")


def drive_child(n: int, k: int, workdir: Path, mode: str = "generational") -> None:
    """In the traced process: the overhead bench's run with ``k`` candidates in flight."""
    sys.path.insert(0, str(OVERHEAD.parent))
    import overhead

    inflight = "concurrency: {{candidates: " + str(k) + ", mode: " + mode + "}}"
    recipe = overhead.RECIPE.replace(
        "children_per_generation: 10", "children_per_generation: 10\n" + inflight
    )
    overhead.RECIPE = recipe
    root = workdir / f"n{n}-k{k}-{mode}"
    path = overhead.build(root, n, "process")
    engine = overhead.Engine.create(path, None, root / "run")
    engine.drive()
    engine.close()


def classify(line: str) -> str | None:
    """The counted kind of one strace line, or None."""
    m = CALL.match(line)
    if m is None or " = -1 " in line:  # a failed call starts or syncs nothing
        return None
    name = m.group(1)
    if name in ("fsync", "fdatasync"):
        return "sync"
    if name == "execve":
        return "execve"
    if name in ("fork", "vfork"):
        return "process"
    if name in ("clone", "clone3"):
        return None if "CLONE_THREAD" in line else "process"
    if name in ("mkdir", "mkdirat", "rmdir") and "/sys/fs/cgroup" in line:
        return "cgroup " + ("rmdir" if name == "rmdir" else "mkdir")
    if name in ("unlink", "unlinkat", "rmdir"):
        return "freed"  # a file or folder removed: its inode freed
    return None


def count(trace: Path) -> Counter[str]:
    """Totals of one ``strace -f -o`` file (unfinished calls joined with their ends)."""
    totals: Counter[str] = Counter()
    pending: dict[str, str] = {}
    for line in trace.read_text(errors="replace").splitlines():
        pid = line.split(" ", 1)[0]
        if "<unfinished ...>" in line:
            pending[pid] = line.split("<unfinished", 1)[0]
            continue
        if "resumed>" in line and pid in pending:
            line = pending.pop(pid) + line.split("resumed>", 1)[1]
        kind = classify(line)
        if kind is not None:
            totals[kind] += 1
    return totals


def traced_run(n: int, k: int, workdir: Path, mode: str) -> Counter[str]:
    trace = workdir / f"trace-{n}-{k}-{mode}.txt"
    cmd = ["strace", "-f", "-qq", "-e", f"trace={TRACED}", "-o", str(trace)]
    cmd += [sys.executable, __file__, "--child", str(n), "--inflight", str(k)]
    cmd += ["--workdir", str(workdir), "--mode", mode]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"syscalls: the traced run failed: {proc.stderr.strip()[-2000:]}")
    return count(trace)


def per_candidate(k: int, small: int, large: int, workdir: Path, mode: str) -> dict[str, Any]:
    a, b = traced_run(small, k, workdir, mode), traced_run(large, k, workdir, mode)
    kinds = sorted(set(a) | set(b))
    row: dict[str, Any] = {"inflight": k, "mode": mode, "small": small, "large": large}
    for kind in kinds:
        row[kind] = round((b[kind] - a[kind]) / (large - small), 2)
    row["starts"] = round(row.get("execve", 0) + row.get("process", 0), 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inflight", type=int, nargs="+", default=[1, 4], help="K values")
    ap.add_argument("--small", type=int, default=10, help="candidates in the first run")
    ap.add_argument("--large", type=int, default=30, help="candidates in the second run")
    ap.add_argument("--mode", default="generational", choices=["generational", "steady"])
    ap.add_argument("--json", action="store_true", help="one JSON object per K")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        drive_child(args.child, args.inflight[0], args.workdir, args.mode)
        return
    if args.large <= args.small:
        sys.exit("syscalls: --large must be more than --small")
    with tempfile.TemporaryDirectory(prefix="rsiframe-syscalls-") as tmp:
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(Path(tmp) / "keys"))
        for k in args.inflight:
            row = per_candidate(k, args.small, args.large, Path(tmp), args.mode)
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            print(
                f"K={k} ({args.mode}): per candidate ({args.small} -> {args.large} candidates):"
                f" sync points {row.get('sync', 0)}, execve {row.get('execve', 0)},"
                f" forks {row.get('process', 0)}, cgroup mkdir {row.get('cgroup mkdir', 0)},"
                f" rmdir {row.get('cgroup rmdir', 0)}, inodes freed {row.get('freed', 0)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
