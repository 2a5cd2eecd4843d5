"""Where a no-op candidate's trial folders cost time: the run's disk, memory, or no deletion.

``bench/overhead.py``'s no-op run (process sandbox, two one-task evaluations per
candidate), driven in a fresh process per variant, the variants alternating:

- ``disk``: as rsiframe runs (trial folders under the run's ``work/``, each deleted in
  the background once its trial is over);
- ``memory``: the run's ``work/`` on ``/dev/shm`` (tmpfs): every trial folder made and
  deleted in memory;
- ``keep``: on the disk, but nothing deleted while the run goes (the folders are removed
  at close, which is timed apart).

An experiment, not an option of rsiframe: it patches where ``work/`` lives. Why trials
stay on the disk is in docs/performance.md ("The no-op ratio: where the time goes").

    python bench/scratch.py                      # 300 candidates, 2 rounds
    python bench/scratch.py --candidates 1000 --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

VARIANTS = ("disk", "memory", "keep")


def child(variant: str, n: int, workdir: Path) -> dict[str, float]:
    """One run in this process, with ``variant``'s trial folders."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import overhead  # bench/overhead.py

    from rsiframe.archive import runfolder
    from rsiframe.evaluators import local

    if variant == "memory":
        base = Path("/dev/shm") / f"rsiframe-bench-{uuid.uuid4().hex[:8]}"
        runfolder.RunPaths.work = property(lambda self: base / "work")  # type: ignore[method-assign]
    if variant == "keep":
        kept: list[Path] = []

        def keep(path: Path) -> None:
            aside = path.with_name(f".kept-{uuid.uuid4().hex[:8]}")
            path.rename(aside)
            kept.append(aside)

        local.discard = keep  # type: ignore[assignment]
    row = overhead.drive(n, "process", workdir)
    if variant == "memory":
        shutil.rmtree(base, ignore_errors=True)
    return {"drive_s": row["drive_s"], "close_s": row["close_s"], "task_ms": row["task_ms"]}


def measure(variant: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="rsiframe-scratch-") as tmp:
        cmd = [sys.executable, __file__, "--child", variant, "--candidates", str(n)]
        cmd += ["--workdir", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench/scratch.py: the {variant} run failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the three")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.candidates, args.workdir)))
        return
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for v in VARIANTS:
            rows[v].append(measure(v, args.candidates))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    n = args.candidates
    print(f"{n} no-op candidates, {args.rounds} alternating rounds (load: {_load()})")
    head = f"{'trial folders':<14} {'drive ms/candidate (each round)':<34}"
    print(f"{head} {'median':>7} {'close s':>8}")
    for v in VARIANTS:
        per = [r["drive_s"] / n * 1000 for r in rows[v]]
        close = statistics.median(r["close_s"] for r in rows[v])
        each = " / ".join(f"{x:.1f}" for x in per)
        print(f"{v:<14} {each:<34} {statistics.median(per):7.1f} {close:8.2f}")


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


if __name__ == "__main__":
    main()
