"""Harbor engine and Docker sandbox costs, on the same tasks as the local engine.

1. Overhead per trial: the seed solver on N sat3 tasks through the ``local`` engine
   (bubblewrap) and through the ``harbor`` engine (bwrap environment), both at
   concurrency 1; (harbor - local) / N.
2. Throughput: trials per second of the harbor engine at ``n_concurrent`` 1, 4 and 8 on
   ``tasks/terminal`` with Harbor's oracle agent.
3. Sandbox start-to-exit: ``true`` in the Docker sandbox against bubblewrap (median of R).

    python bench/harbor.py                 # 16 sat3 tasks, 20 terminal tasks, 20 runs
    python bench/harbor.py --tasks 8 --runs 10 --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rsiframe.errors import RsiError
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import HarborEngineConfig, LocalEngineConfig
from rsiframe.sandbox.bwrap import Mount, make_sandbox
from rsiframe.tasks.taskset import TaskSet

REPO = Path(__file__).resolve().parents[1]
SAT3 = REPO / "tasks" / "sat3"
TERMINAL = REPO / "tasks" / "terminal"
SOLVER = 'python3 "$RSI_CANDIDATE/solver.py"'


def _timed(engine, ts: TaskSet, cand: Path) -> float:
    t0 = time.perf_counter()
    try:
        run_tasks(engine, ts, cand, sorted(ts.tasks), put=lambda data: "")
    finally:
        engine.close()
    return time.perf_counter() - t0


def overhead(n: int, scratch: Path) -> dict[str, float]:
    root = scratch / "sat3"
    root.mkdir()
    for tid in sorted(p.name for p in SAT3.glob("uf75-*"))[:n]:
        shutil.copytree(SAT3 / tid, root / tid)
    ts = TaskSet.load(root)
    local = _timed(
        LocalEngine(LocalEngineConfig(agent=SOLVER, sandbox="bwrap", concurrency=1), scratch / "l"),
        ts,
        SAT3 / "seed",
    )
    harbor = _timed(
        HarborEngine(HarborEngineConfig(agent=SOLVER, concurrency=1), scratch / "h"),
        ts,
        SAT3 / "seed",
    )
    return {
        "tasks": n,
        "local_s": round(local, 2),
        "harbor_s": round(harbor, 2),
        "overhead_per_trial_s": round((harbor - local) / n, 3),
    }


def throughput(scratch: Path) -> dict[str, float]:
    ts = TaskSet.load(TERMINAL)
    cand = scratch / "empty"
    cand.mkdir()
    out = {}
    for n in (1, 4, 8):
        cfg = HarborEngineConfig(harbor_agent="oracle", concurrency=n)
        seconds = _timed(HarborEngine(cfg, scratch / f"t{n}"), ts, cand)
        out[f"n_concurrent_{n}"] = round(len(ts.tasks) / seconds, 2)
    return out


def start_to_exit(runs: int, scratch: Path) -> dict[str, float | str]:
    work = scratch / "sb"
    work.mkdir()
    m = Mount(work, "/app", writable=True)
    out: dict[str, float | str] = {}
    for kind in ("bwrap", "docker"):
        try:
            sb = make_sandbox(kind)
        except RsiError as exc:
            out[kind] = f"unavailable: {exc}"
            continue
        times = []
        for _ in range(runs):
            res = sb.run(["true"], mounts=[m], cwd=m, env={}, timeout=60)
            assert res.ok, res.stderr
            times.append(res.duration_s)
        out[f"{kind}_median_ms"] = round(statistics.median(times) * 1000, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=16, help="sat3 tasks for the overhead")
    ap.add_argument("--runs", type=int, default=20, help="sandbox start-to-exit runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rsiframe-bench-harbor-"))
    try:
        result = {
            "overhead": overhead(args.tasks, scratch),
            "trials_per_s": throughput(scratch),
            "sandbox_start_to_exit": start_to_exit(args.runs, scratch),
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    o = result["overhead"]
    print(
        f"harbor overhead per trial: {o['overhead_per_trial_s']:.3f} s "
        f"(local {o['local_s']} s, harbor {o['harbor_s']} s, {o['tasks']} sat3 tasks, n=1)"
    )
    print(
        "harbor trials/s (oracle, tasks/terminal): "
        + ", ".join(
            f"{k.removeprefix('n_concurrent_')}: {v}" for k, v in result["trials_per_s"].items()
        )
    )
    print(
        "sandbox start-to-exit: "
        + ", ".join(f"{k}: {v}" for k, v in result["sandbox_start_to_exit"].items())
    )


if __name__ == "__main__":
    main()
