"""Framework overhead per candidate, and resume time, at 10, 100 and 1,000 candidates.

Framework time = a candidate's whole transaction (select .. record, both
evaluations included) minus the time spent inside operators and inside task
processes. The mutate operator only writes a counter file, the task set has
one task per split, and the agent is ``true``: what is left is git, guardrail,
export and its tree check, sandbox set-up, signing, archive appends and state.

    python bench/overhead.py                 # 10, 100, 1000
    python bench/overhead.py --sizes 10 100  # quicker

Targets (issue 2): median <= 50 ms, the 1,000-candidate median within 1.5x of
the 10-candidate one, and resume of the 1,000-candidate run <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.engine import Engine


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


def measure(n: int, sandbox: str, workdir: Path) -> dict[str, float]:
    root = workdir / f"n{n}"
    recipe = build(root, n, sandbox)
    engine = Engine.create(recipe, None, root / "run")
    t0 = time.perf_counter()
    engine.drive()
    wall = time.perf_counter() - t0
    tm = engine.timings
    engine.close()
    children = [c for c in tm.total if c != "c0000"]
    framework = [
        (tm.total[c] - tm.operator.get(c, 0.0) - tm.tasks.get(c, 0.0)) * 1000 for c in children
    ]
    t1 = time.perf_counter()
    again, _ = Engine.open(root / "run")
    again.needs_work()
    resume_s = time.perf_counter() - t1
    again.close()
    t2 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rsiframe.cli", "resume", str(root / "run"), "--quiet"],
        capture_output=True,
        text=True,
    )
    cli_s = time.perf_counter() - t2
    assert proc.returncode == 0, proc.stderr
    framework.sort()
    return {
        "candidates": len(children),
        "median_ms": statistics.median(framework),
        "p90_ms": framework[int(0.9 * (len(framework) - 1))],
        "task_ms": statistics.median(tm.tasks[c] * 1000 for c in children),
        "wall_s": wall,
        "resume_s": resume_s,
        "resume_cli_s": cli_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "process"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsiframe-bench-") as tmp:
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(Path(tmp) / "keys"))
        rows = [measure(n, args.sandbox, Path(tmp)) for n in args.sizes]
    print(
        f"{'candidates':>10} {'median ms':>10} {'p90 ms':>8} {'task ms':>8} {'wall s':>8}"
        f" {'resume s':>9} {'resume (cli) s':>15}"
    )
    for r in rows:
        print(
            f"{r['candidates']:>10} {r['median_ms']:>10.1f} {r['p90_ms']:>8.1f}"
            f" {r['task_ms']:>8.1f} {r['wall_s']:>8.1f} {r['resume_s']:>9.3f}"
            f" {r['resume_cli_s']:>15.3f}"
        )
    if len(rows) > 1:
        print(f"largest/smallest median: {rows[-1]['median_ms'] / rows[0]['median_ms']:.2f}x")


if __name__ == "__main__":
    main()
