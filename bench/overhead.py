"""Framework overhead per candidate, whole-process wall time, and resume time.

Framework time = a candidate's whole transaction (select .. record, both
evaluations included) minus the time spent inside operators and inside task
processes. The mutate operator only writes a counter file, the task set has
one task per split, and the agent is ``true``: what is left is git, guardrail,
export and its tree check, sandbox set-up, signing, archive appends and state.

Whole-process wall time per candidate = the wall time of a fresh ``python``
process from its start until it has created the run, driven it to the end and
closed it, divided by the
number of candidates: it also counts what happens between transactions (the
engine's own steps, views, scans), which the framework median does not.

Resume = ``Engine.open`` + ``needs_work`` of the finished run in-process (from
the signed state snapshot the run left; "load s" is the loader's part of it,
``load_run(snapshot=True)``), "full load s" = ``load_run`` with every event
refolded and every certificate checked (what resume cost before the snapshot),
and ``rsiframe resume`` as a fresh process (interpreter start and imports included).

    python bench/overhead.py                          # 10, 100, 1000, 10000 (process sandbox)
    python bench/overhead.py --sizes 10 100           # quicker

Targets (issue 11): median <= 25 ms, the 10,000-candidate median within 1.3x of
the 10-candidate one, whole-process wall per candidate flat, and resume of the
10,000-candidate run <= 1 s in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.archive.loader import load_run
from rsiframe.archive.snapshot import SNAPSHOT
from rsiframe.engine.loop import Engine


class CounterMutate(MutateOperator):
    """Writes the candidate id into counter.txt: a change, at no cost."""

    name = "counter"

    def mutate(self, ctx: MutateContext) -> Mutation:
        (ctx.workdir / "counter.txt").write_text(ctx.candidate_id)
        return Mutation(description=f"counter {ctx.candidate_id}")


RECIPE = """\
name: overhead
seed: seed
tasks:
  path: tasks
  split: {{train: [one], gate: [two], sealed: [three]}}
surface: {{include: [counter.txt]}}
evaluator:
  engine: local
  config: {{agent: "true", sandbox: {sandbox}, concurrency: 1}}
slots:
  select: {{operator: best}}
  rollout: {{operator: local}}
  mutate: {{operator: "{ops}:CounterMutate"}}
  novelty: {{operator: tree_dedup}}
  gate: {{operator: always}}
  record: {{operator: notes}}
budget: {{max_generations: null, max_candidates: {n}}}
children_per_generation: 10
"""


def build(root: Path, n: int, sandbox: str) -> Path:
    for name in ("one", "two", "three"):
        t = root / "tasks" / name
        (t / "tests").mkdir(parents=True)
        (t / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n")
        (t / "instruction.md").write_text("nothing to do\n")
        (t / "tests" / "test.sh").write_text('echo 1 > "${RSI_LOGS:-/logs}/verifier/reward.txt"\n')
    (root / "seed").mkdir()
    (root / "seed" / "counter.txt").write_text("seed")
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE.format(ops=Path(__file__).resolve(), n=n, sandbox=sandbox))
    return recipe


def drive(n: int, sandbox: str, workdir: Path) -> dict[str, float]:
    """The child process: create, drive and close one run, then resume it in-process."""
    root = workdir / f"n{n}"
    recipe = build(root, n, sandbox)
    t_create = time.perf_counter()
    engine = Engine.create(recipe, None, root / "run")
    t0 = time.perf_counter()
    engine.drive()
    wall = time.perf_counter() - t0
    tm = engine.timings
    t_close = time.perf_counter()
    engine.close()
    closed_at = time.time()
    close_s = time.perf_counter() - t_close
    children = [c for c in tm.total if c != "c0000"]
    framework = [
        (tm.total[c] - tm.operator.get(c, 0.0) - tm.tasks.get(c, 0.0)) * 1000 for c in children
    ]
    t1, c1 = time.perf_counter(), time.process_time()
    again, _ = Engine.open(root / "run")
    again.needs_work()
    resume_s, resume_cpu_s = time.perf_counter() - t1, time.process_time() - c1
    again.close()
    t1 = time.perf_counter()
    load_run(root / "run", snapshot=True)
    snapshot_load_s = time.perf_counter() - t1
    (root / "run" / SNAPSHOT).rename(root / "snapshot.aside")
    t1 = time.perf_counter()
    load_run(root / "run")
    fold_s = time.perf_counter() - t1
    (root / "snapshot.aside").rename(root / "run" / SNAPSHOT)
    framework.sort()
    return {
        "candidates": len(children),
        "median_ms": statistics.median(framework),
        "p90_ms": framework[int(0.9 * (len(framework) - 1))],
        "task_ms": statistics.median(tm.tasks[c] * 1000 for c in children),
        "drive_s": wall,
        "create_s": t0 - t_create,
        "close_s": close_s,
        "resume_s": resume_s,
        "resume_cpu_s": resume_cpu_s,
        "fold_s": fold_s,
        "snapshot_load_s": snapshot_load_s,
        "closed_at": closed_at,
    }


def measure(n: int, sandbox: str, workdir: Path, *, resume_cli: bool = True) -> dict[str, float]:
    t0 = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--sandbox",
            sandbox,
            "--workdir",
            str(workdir),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    # start of the process .. its run closed (the resume measurements after are not counted)
    row["process_ms"] = (row.pop("closed_at") - t0) / row["candidates"] * 1000
    if not resume_cli:
        return row
    t2 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "resume",
            str(workdir / f"n{n}" / "run"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    row["resume_cli_s"] = time.perf_counter() - t2
    assert proc.returncode == 0, proc.stderr
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    ap.add_argument("--sandbox", default="process", choices=["auto", "bwrap", "process"])
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(drive(args.child, args.sandbox, args.workdir)))
        return
    with tempfile.TemporaryDirectory(prefix="rsiframe-bench-") as tmp:
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(Path(tmp) / "keys"))
        rows = []
        for n in args.sizes:
            rows.append(measure(n, args.sandbox, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"{'candidates':>10} {'median ms':>10} {'p90 ms':>8} {'task ms':>8} {'process ms':>11}"
        f" {'resume s':>9} {'(cpu s)':>8} {'load s':>7} {'full load s':>12} {'resume (cli) s':>15}"
    )
    for r in rows:
        print(
            f"{r['candidates']:>10} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f}"
            f" {r['task_ms']:>8.1f} {r['process_ms']:>11.1f}"
            f" {r['resume_s']:>9.3f} {r['resume_cpu_s']:>8.3f}"
            f" {r['snapshot_load_s']:>7.3f} {r['fold_s']:>12.3f} {r['resume_cli_s']:>15.3f}"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"largest/smallest median: {last['median_ms'] / first['median_ms']:.2f}x")
        print(f"largest/smallest process ms: {last['process_ms'] / first['process_ms']:.2f}x")


if __name__ == "__main__":
    main()
