"""Time per D/T/H candidate: a cold build, a cache hit (harness-only child), evaluation alone.

Uses the shipped quickstart recipe's evaluator (build config, sandbox, concurrency) and
seed, with an empty build cache in a temporary folder, and evaluates each candidate the
way the engine evaluates a child: its train split, then its gate split.

    python bench/build.py                    # recipes/quickstart.yaml
    python bench/build.py --recipe R --json

Target (issue 5): a harness-only child spends no time training (asserted: 0 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from rsiframe.engine.preflight import plan
from rsiframe.evaluators.local import LocalEngine
from rsiframe.tasks.taskset import tasks_by_split

REPO = Path(__file__).resolve().parents[1]


def evaluate(engine: LocalEngine, cand: Path, tasks: dict, split_ids: dict) -> dict:
    """Train then gate, as for a child; seconds split into build and the rest."""
    t0 = time.perf_counter()
    build_s = 0.0
    training_s = 0.0
    scores = {}
    tokens = 0
    for split in ("train", "gate"):
        t = time.perf_counter()
        hit: dict = {}
        out = engine.run(
            cand,
            [tasks[i] for i in split_ids[split]],
            lambda data: "",
            on_built=lambda m, hit=hit: hit.update(m, at=time.perf_counter()),
        )
        build_s += hit["at"] - t
        training_s += hit["training_seconds"]
        scores[split] = round(sum(r.reward for r in out.runs.values()) / len(out.runs), 3)
        tokens += (out.usage or {}).get("total_tokens", 0)
    total = time.perf_counter() - t0
    return {
        "total_s": round(total, 2),
        "build_s": round(build_s, 2),
        "training_s": round(training_s, 2),
        "evaluation_s": round(total - build_s, 2),
        "scores": scores,
        "tokens": tokens,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "quickstart.yaml")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    p = plan(args.recipe)
    tmp = Path(tempfile.mkdtemp(prefix="rsiframe-bench-build-"))
    os.environ["RSIFRAME_CACHE_DIR"] = str(tmp / "cache")
    (tmp / "work").mkdir()
    engine = LocalEngine(p.resolved.evaluator_config, tmp / "work")
    engine.protect(tasks_by_split(p.taskset, p.split))
    seed = tmp / "seed"
    shutil.copytree(p.resolved.recipe.seed, seed)
    child = tmp / "harness-child"
    shutil.copytree(seed, child)
    hcfg = child / "harness" / "config.yaml"
    cfg = yaml.safe_load(hcfg.read_text())
    cfg.setdefault("decoding", {})["temperature"] = 0  # a harness-only change: greedy
    hcfg.write_text(yaml.safe_dump(cfg, sort_keys=False))
    try:
        rows = {
            "cold build (seed)": evaluate(engine, seed, p.taskset.tasks, p.split),
            "cache hit (harness-only child)": evaluate(engine, child, p.taskset.tasks, p.split),
            "evaluation alone (seed again)": evaluate(engine, seed, p.taskset.tasks, p.split),
        }
    finally:
        engine.close()
        shutil.rmtree(tmp, ignore_errors=True)
    hit = rows["cache hit (harness-only child)"]
    ok = hit["training_s"] == 0.0
    if args.json:
        print(json.dumps({"rows": rows, "cache_hit_trains": not ok}, indent=2))
    else:
        print(f"{'':34} {'total s':>8} {'build s':>8} {'train s':>8} {'eval s':>8}  scores")
        for name, r in rows.items():
            print(
                f"{name:34} {r['total_s']:8.2f} {r['build_s']:8.2f} {r['training_s']:8.2f} "
                f"{r['evaluation_s']:8.2f}  {r['scores']} tokens={r['tokens']}"
            )
        print("cache hit trains for 0 s:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
