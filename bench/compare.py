"""Compare benchmark: ``rsiframe compare`` on 50 synthetic runs of 1,000 candidates each.

    .venv/bin/python bench/compare.py [--runs 50] [--candidates 1000] [--keep DIR]

The runs are written like the viewer benchmark's (:func:`viewer.build_run`: the real
archive, signing, artifact and git code with a fake clock), each with its own key, so
each is a valid run folder. ``compare`` then verifies every run before it reads a score:
the hash chain and its newest signature, every certificate's signature and binding, the
locks (verify's read side). Target: at most 30 s for 50 runs x 1,000 candidates.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rsiframe.study.compare import compare
from rsiframe.study.compare_text import print_report
from viewer import build_run

TARGET_S = 30.0


def _cpu() -> float:
    """CPU seconds of this process and its finished children (compare's workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--keep", type=Path, help="write the runs here and keep them")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="rsiframe-bench-compare-"))
    try:
        t0 = time.perf_counter()
        for i in range(args.runs):
            run = root / f"run-{i:03d}"
            if not (run / "events.jsonl").exists():
                build_run(run, args.candidates, name=f"synthetic-{i:03d}", seed=i + 1)
        made = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), _cpu()
        report = compare([root])
        seconds, cpu = time.perf_counter() - t0, _cpu() - c0
        records = sum(r.records for m in report.methods for r in m.runs)
        t0 = time.perf_counter()
        by_run = compare([root], by="run")
        by_run_s = time.perf_counter() - t0
        from rich.console import Console

        print_report(report, Console(width=120))
        print(f"made {args.runs} runs x {args.candidates} candidates in {made:.0f} s")
        print(
            f"compare: {seconds:.1f} s wall, {cpu:.1f} s CPU (workers included) for {args.runs} "
            f"runs, {records} certificates verified (target <= {TARGET_S:.0f} s): "
            f"{'ok' if seconds <= TARGET_S else 'SLOW'} (on a shared machine compare the CPU "
            f"time with the target)"
        )
        print(f"compare --by run: {by_run_s:.1f} s ({len(by_run.pairs)} pairs)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
