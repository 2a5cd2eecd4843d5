"""Throughput with candidates in flight: wall-time speed-up at K = 1, 2, 4, 8.

A mutator that sleeps 2 s (it stands in for a model call) and an agent that sleeps
1 s per task, 4 tasks per split, one task at a time per evaluation
(``evaluator.config.concurrency: 1``): a child costs 2 s + 4 s (train) + 4 s (gate),
all waiting, so 2 cores are enough. One generation of ``--children`` children (default
8) runs in generational mode at each K; the children's phase (first child proposed to
last child recorded) is timed from the run's own event timestamps, so the seed's
evaluations do not count.

    python bench/throughput.py                  # K = 1 2 4 8, 8 children
    python bench/throughput.py --ks 1 4 --children 4
    python bench/throughput.py --executor both  # local, then the Ray executor, side by side

With ``--executor ray`` (or ``both``) every evaluation is a Ray task on a private local
Ray started here with as many logical CPUs as the largest K (Ray's CPUs are logical;
the work sleeps), ``resources.evaluation: {num_cpus: 1}``.

Targets (issue 11): speed-up >= 0.9 K; the Ray executor within 20 % of local.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.engine.loop import Engine

MUTATE_S = 2.0
TASK_S = 1
TASKS_PER_SPLIT = 4
TOML = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"


class SleepMutate(MutateOperator):
    """Sleeps (a model call), then writes the candidate id into counter.txt."""

    name = "sleep"

    def mutate(self, ctx: MutateContext) -> Mutation:
        time.sleep(MUTATE_S)
        (ctx.workdir / "counter.txt").write_text(ctx.candidate_id)
        return Mutation(description=f"slept, then counter {ctx.candidate_id}")


RECIPE = """\
name: throughput
seed: seed
tasks:
  path: tasks
  split: {{train: {train}, gate: {gate}, sealed: {sealed}}}
surface: {{include: [counter.txt]}}
evaluator:
  engine: local
  config: {{agent: "sleep {task_s}", sandbox: {sandbox}, concurrency: 1}}
{executor}slots:
  select: {{operator: best}}
  rollout: {{operator: local}}
  mutate: {{operator: "{ops}:SleepMutate"}}
  gate: {{operator: always}}
  record: {{operator: notes}}
budget: {{max_generations: 1}}
children_per_generation: {children}
concurrency: {{candidates: {k}, mode: generational}}
"""


RAY = "  executor: {kind: ray, address: null, resources: {evaluation: {num_cpus: 1}}}\n"


def build(root: Path, k: int, children: int, sandbox: str, executor: str = "local") -> Path:
    splits: dict[str, list[str]] = {}
    for split in ("train", "gate", "sealed"):
        for i in range(TASKS_PER_SPLIT):
            name = f"{split}{i}"
            splits.setdefault(split, []).append(name)
            t = root / "tasks" / name
            (t / "tests").mkdir(parents=True)
            (t / "task.toml").write_text(TOML)
            (t / "instruction.md").write_text("wait\n")
            (t / "tests" / "test.sh").write_text(
                'echo 1 > "${RSI_LOGS:-/logs}/verifier/reward.txt"\n'
            )
    (root / "seed").mkdir(parents=True)
    (root / "seed" / "counter.txt").write_text("seed")
    recipe = root / "recipe.yaml"
    recipe.write_text(
        RECIPE.format(
            ops=Path(__file__).resolve(),
            k=k,
            children=children,
            sandbox=sandbox,
            task_s=TASK_S,
            executor=RAY if executor == "ray" else "",
            **{s: json.dumps(v) for s, v in splits.items()},
        )
    )
    return recipe


def measure(
    k: int, children: int, sandbox: str, workdir: Path, executor: str = "local"
) -> dict[str, float]:
    root = workdir / f"{executor}-k{k}"
    engine = Engine.create(build(root, k, children, sandbox, executor), None, root / "run")
    t0 = time.perf_counter()
    state = engine.drive()
    wall = time.perf_counter() - t0
    engine.close()
    assert state == "finished", state
    evs = [json.loads(line) for line in (root / "run" / "events.jsonl").open()]
    first = next(
        e["ts"] for e in evs if e["type"] == "candidate_proposed" and e["data"]["id"] != "c0000"
    )
    last = max(
        e["ts"] for e in evs if e["type"] == "candidate_recorded" and e["data"]["id"] != "c0000"
    )
    return {"k": k, "children_s": last - first, "wall_s": wall}


def start_ray(cpus: int) -> None:
    """A private local Ray with ``cpus`` logical CPUs; the executor joins it."""
    import ray

    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        object_store_memory=80 << 20,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )


def table(rows: list[dict[str, float]]) -> list[float]:
    """Print one executor's rows; return its speed-ups."""
    base = rows[0]["children_s"] * rows[0]["k"]  # K=1's time (scaled if K=1 was not run)
    print(f"{'K':>3} {'children s':>11} {'whole run s':>12} {'speed-up':>9} {'target':>7}  ok")
    speedups = []
    for r in rows:
        speedup = base / r["children_s"] if rows[0]["k"] == 1 else float("nan")
        target = 0.9 * r["k"]
        ok = "yes" if speedup >= target else "no"
        print(
            f"{r['k']:>3} {r['children_s']:>11.1f} {r['wall_s']:>12.1f} {speedup:>9.2f}"
            f" {target:>7.1f}  {ok}"
        )
        speedups.append(speedup)
    return speedups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--children", type=int, default=8)
    ap.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "process"])
    ap.add_argument("--executor", default="local", choices=["local", "ray", "both"])
    args = ap.parse_args()
    kinds = ["local", "ray"] if args.executor == "both" else [args.executor]
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="rsiframe-bench-") as tmp:
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(Path(tmp) / "keys"))
        if "ray" in kinds:
            start_ray(max(args.ks))
        for kind in kinds:
            results[kind] = [
                measure(k, args.children, args.sandbox, Path(tmp), kind) for k in args.ks
            ]
    ideal = args.children * (MUTATE_S + 2 * TASKS_PER_SPLIT * TASK_S)
    print(f"{args.children} children; ideal sleep time at K=1: {ideal:.0f} s")
    for kind, rows in results.items():
        print(f"executor: {kind}")
        table(rows)
    if len(results) == 2:
        print(f"{'K':>3} {'ray s / local s':>16}  within 20 %")
        for loc, ray in zip(results["local"], results["ray"], strict=True):
            ratio = ray["children_s"] / loc["children_s"]
            print(f"{loc['k']:>3} {ratio:>16.2f}  {'yes' if ratio <= 1.2 else 'no'}")


if __name__ == "__main__":
    main()
