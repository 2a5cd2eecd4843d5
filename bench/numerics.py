"""How far D/T/H scores move across CPU kernel paths and thread counts, on one host.

CPU training and generation are bit-for-bit repeatable on one host type, not across
processors: torch picks other kernels (its CPU capability, the ISA of MKL and oneDNN) and
other thread splits. This emulates other processors on this one: for each *profile* it
sets the kernel-path variables (:data:`rsiframe.dth.hostfacts.KERNEL_ENV`, which the build
steps and the model server get from the host) and a thread count, builds the candidate
from an empty cache and evaluates its gate and sealed splits exactly as a run does (the
recipe's evaluator, the locked split). Each row is compared with the first (this CPU's
own kernels, the recipe's threads).

    python bench/numerics.py                           # quickstart seed, 3 ISAs x 1,2 threads
    python bench/numerics.py --candidates seed,champion --json --out numerics.json

Profiles this CPU cannot run (``avx512`` on an AVX2 processor) are skipped and said so.
``champion`` is the quickstart champion's configuration (README: 4,000 examples, no
addition problems, learning rate 0.0025), applied to the seed's files.
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
from typing import Any

import yaml

from rsiframe.dth.hostfacts import KERNEL_ENV, host_facts
from rsiframe.engine.preflight import plan
from rsiframe.evaluators.local import LocalEngine
from rsiframe.tasks.taskset import tasks_by_split

REPO = Path(__file__).resolve().parents[1]
SPLITS = ("gate", "sealed")

#: ISA name -> the variables that make torch, MKL and oneDNN use only that ISA
PROFILES: dict[str, dict[str, str]] = {
    "avx512": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
    },
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
}
ORDER = ("default", "avx2", "avx512")

#: the quickstart champion's changes to the seed (file -> dotted key -> value)
CHAMPION = {
    "data/config.yaml": {"count": 4000, "mix.add": 0},
    "trainer/config.yaml": {"train.lr": 0.0025},
}


def candidate(name: str, seed: Path, into: Path) -> Path:
    shutil.copytree(seed, into)
    if name == "champion":
        for rel, changes in CHAMPION.items():
            cfg = yaml.safe_load((into / rel).read_text())
            for dotted, value in changes.items():
                node = cfg
                *path, last = dotted.split(".")
                for part in path:
                    node = node[part]
                node[last] = value
            (into / rel).write_text(yaml.safe_dump(cfg, sort_keys=False))
    return into


def set_profile(env: dict[str, str]) -> None:
    for k in KERNEL_ENV:
        os.environ.pop(k, None)
    os.environ.update(env)


def measure(p: Any, cand: Path, threads: int, work: Path, train_s: float) -> dict[str, Any]:
    """Build from an empty cache, then the gate and sealed splits, under the current env."""
    config = p.resolved.evaluator_config
    build = config.build.model_copy(update={"threads": threads, "train_timeout_s": train_s})
    engine = LocalEngine(config.model_copy(update={"build": build}), work)
    engine.protect(tasks_by_split(p.taskset, p.split))
    t0 = time.perf_counter()
    built: dict[str, Any] = {}
    rewards: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    try:
        for split in SPLITS:
            out = engine.run(
                cand,
                [p.taskset.tasks[t] for t in p.split[split]],
                lambda data: "",
                on_built=built.update,
            )
            rewards[split] = {t: r.reward for t, r in sorted(out.runs.items())}
            errors |= {t: r.error for t, r in out.runs.items() if r.error}
    finally:
        engine.close()
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "training_seconds": built["steps"]["train"]["built_seconds"],
        "weights": built["weights_digest"],
        "final_loss": built["train_metrics"].get("final_loss"),
        "host": {k: built["host"][k] for k in ("cpu_capability", "kernel_env", "threads")},
        "scores": {s: round(sum(r.values()) / len(r), 4) for s, r in rewards.items()},
        "rewards": rewards,
        "task_errors": errors,  # task -> its error (a timeout, a crash): said, never hidden
    }


def compare(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    tasks = [(s, t) for s in SPLITS for t in base["rewards"][s]]
    moved = [abs(row["rewards"][s][t] - base["rewards"][s][t]) for s, t in tasks]
    return {
        "same_weights": row["weights"] == base["weights"],
        "d_gate": round(row["scores"]["gate"] - base["scores"]["gate"], 4),
        "d_sealed": round(row["scores"]["sealed"] - base["scores"]["sealed"], 4),
        "tasks_moved": sum(1 for m in moved if m > 0),
        "tasks": len(tasks),
        "max_task_delta": round(max(moved), 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "quickstart.yaml")
    ap.add_argument("--profiles", default="avx512,avx2,default", help="ISAs, best first")
    ap.add_argument("--threads", default="1,2", help="thread counts (the first is the baseline)")
    ap.add_argument("--candidates", default="seed", help="seed and/or champion")
    ap.add_argument(
        "--train-timeout", type=float, default=1800, help="train step limit, s (threads > cores)"
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()

    best = host_facts(1)["cpu_capability"]
    runnable = ORDER[: ORDER.index(best) + 1] if best in ORDER else ()
    wanted = [x for x in args.profiles.split(",") if x]
    profiles = [x for x in wanted if x in runnable]
    skipped = [x for x in wanted if x not in runnable]
    threads = [int(t) for t in args.threads.split(",")]
    p = plan(args.recipe)
    tmp = Path(tempfile.mkdtemp(prefix="rsiframe-bench-numerics-"))
    os.environ["RSIFRAME_CACHE_DIR"] = str(tmp / "cache")  # every row builds: keys differ
    saved = {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    try:
        for name in args.candidates.split(","):
            cand = candidate(name, Path(p.resolved.recipe.seed), tmp / name)
            base: dict[str, Any] | None = None
            for prof in profiles:
                for t in threads:
                    set_profile(PROFILES[prof])
                    work = tmp / f"work-{name}-{prof}-{t}"
                    work.mkdir()
                    row = {"candidate": name, "profile": prof, "threads": t}
                    row |= measure(p, cand, t, work, args.train_timeout)
                    base = base or row
                    row["vs_first"] = compare(row, base)
                    rows.append(row)
                    if not args.json:
                        print(line(row), flush=True)
    finally:
        set_profile(saved)
        shutil.rmtree(tmp, ignore_errors=True)
    total = round(time.perf_counter() - t_all, 1)
    summary = {
        "cpu": host_facts(1)["cpu_model"],
        "native_capability": best,
        "skipped_profiles": skipped,
        "seconds": total,
        "max_abs_d_gate": max(abs(r["vs_first"]["d_gate"]) for r in rows),
        "max_abs_d_sealed": max(abs(r["vs_first"]["d_sealed"]) for r in rows),
        "max_task_delta": max(r["vs_first"]["max_task_delta"] for r in rows),
    }
    report = {"rows": rows, "summary": summary}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(json.dumps(summary))
    return 0


def line(r: dict[str, Any]) -> str:
    v = r["vs_first"]
    return (
        f"| {r['candidate']} | {r['profile']} ({r['host']['cpu_capability']}) | {r['threads']} "
        f"| {'same' if v['same_weights'] else r['weights'][:12]} | {r['scores']['gate']:.3f} "
        f"| {r['scores']['sealed']:.3f} | {v['d_gate']:+.3f} | {v['d_sealed']:+.3f} "
        f"| {v['tasks_moved']}/{v['tasks']} | {len(r['task_errors'])} | {r['seconds']:.0f} |"
    )


if __name__ == "__main__":
    sys.exit(main())
