#!/usr/bin/env python3
"""Calibrate the sat3 task set: solved fraction and cost of knob settings of the seed solver.

Default mode simulates the framework's runtime contract for every task: copy
``environment/`` (minus the Dockerfile) to a scratch work dir, run
``python3 $RSI_CANDIDATE/solver.py`` there with a candidate folder holding the
knobs under test, then run ``bash tests/test.sh`` with RSI_TESTS pointing at the
task's tests and read ``$RSI_LOGS/verifier/reward.txt``.

    python3 tasks/sat3/calibrate.py                  # table of named settings
    python3 tasks/sat3/calibrate.py --moves          # every 1- and 2-knob move from the seed
    python3 tasks/sat3/calibrate.py --exhaustive     # whole knob grid, in-process (fast path)

``--in-process`` (implied by ``--exhaustive``) skips the subprocesses: it calls the
solver's classes and the verifier's ``verdict`` directly, so its seconds exclude
interpreter start-up.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SEED = HERE / "seed"
BASE_SAMPLES = (10, 50, 100, 200, 400)  # restarts.base values tried by --moves / --exhaustive

Overrides = dict[str, Any]

# Named settings for the default table, as dotted-key overrides of seed/solver.yaml.
NAMED: dict[str, Overrides] = {
    "seed": {},
    "unit_propagation=false": {"unit_propagation": False},
    "pure_literals=true": {"pure_literals": True},
    "polarity=positive": {"polarity": "positive"},
    "polarity=occurrence": {"polarity": "occurrence"},
    "restarts=luby/100": {"restarts.strategy": "luby"},
    "restarts=luby/10": {"restarts.strategy": "luby", "restarts.base": 10},
    "branching=random": {"branching": "random"},
    "branching=dlis": {"branching": "dlis"},
    "branching=jw": {"branching": "jw"},
    "branching=moms": {"branching": "moms"},
    "dlis+occurrence": {"branching": "dlis", "polarity": "occurrence"},
    "moms+pure": {"branching": "moms", "pure_literals": True},
    "moms+occurrence": {"branching": "moms", "polarity": "occurrence"},
    "jw+occurrence": {"branching": "jw", "polarity": "occurrence"},
    "moms+occurrence+pure": {"branching": "moms", "polarity": "occurrence", "pure_literals": True},
    "jw+occurrence+pure": {"branching": "jw", "polarity": "occurrence", "pure_literals": True},
    "jw+occurrence+pure+luby/10": {
        "branching": "jw",
        "polarity": "occurrence",
        "pure_literals": True,
        "restarts.strategy": "luby",
        "restarts.base": 10,
    },
}


@dataclass(frozen=True)
class Run:
    reward: int
    seconds: float
    decisions: int


def task_dirs(limit: int | None) -> list[Path]:
    tasks = sorted(
        p
        for p in HERE.iterdir()
        if re.fullmatch(r"uf\d+-\d{3}", p.name) and (p / "task.toml").is_file()
    )
    return tasks[:limit] if limit else tasks


def apply(knobs: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    """Return a copy of ``knobs`` with dotted-key ``overrides`` set."""
    result = copy.deepcopy(knobs)
    for dotted, value in overrides.items():
        node = result
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return result


def describe(overrides: Overrides) -> str:
    return (
        ", ".join(
            f"{k}={v}".replace("True", "true").replace("False", "false")
            for k, v in overrides.items()
        )
        or "seed"
    )


def decisions_in(solution: Path) -> int:
    if solution.is_file():
        for line in solution.read_text().splitlines():
            tokens = line.split()
            if len(tokens) >= 3 and tokens[:2] == ["c", "decisions"] and tokens[2].isdigit():
                return int(tokens[2])
    return -1


# -- contract mode ----------------------------------------------------------------------


def make_candidate(root: Path, knobs: dict[str, Any]) -> Path:
    candidate = root / "candidate"
    shutil.copytree(SEED, candidate)
    (candidate / "solver.yaml").write_text(yaml.safe_dump(knobs, sort_keys=False))
    return candidate


def run_contract(task: Path, candidate: Path) -> Run:
    """Run one task exactly as the framework would (agent phase, then verifier phase)."""
    with tempfile.TemporaryDirectory(prefix="sat3-") as scratch:
        app = Path(scratch) / "app"
        shutil.copytree(task / "environment", app, ignore=shutil.ignore_patterns("Dockerfile"))
        logs = Path(scratch) / "logs"
        (logs / "agent").mkdir(parents=True)
        env = dict(
            os.environ,
            RSI_APP=str(app),
            RSI_CANDIDATE=str(candidate),
            RSI_LOGS=str(logs),
            RSI_TASK_ID=task.name,
        )
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, str(candidate / "solver.py")],
            cwd=app,
            env=env,
            stdout=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        seconds = time.perf_counter() - start
        verifier_logs = Path(scratch) / "verifier-logs"
        (verifier_logs / "verifier").mkdir(parents=True)
        env = dict(
            os.environ,
            RSI_APP=str(app),
            RSI_TESTS=str(task / "tests"),
            RSI_LOGS=str(verifier_logs),
            RSI_CANDIDATE=str(candidate),
        )
        subprocess.run(
            ["bash", str(task / "tests" / "test.sh")],
            cwd=app,
            env=env,
            stdout=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        reward_file = verifier_logs / "verifier" / "reward.txt"
        reward = int(float(reward_file.read_text().strip() or 0)) if reward_file.is_file() else 0
        return Run(reward, seconds, decisions_in(app / "solution.txt"))


def evaluate_contract(knobs: dict[str, Any], tasks: Sequence[Path], jobs: int) -> list[Run]:
    with tempfile.TemporaryDirectory(prefix="sat3-cand-") as root:
        candidate = make_candidate(Path(root), knobs)
        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(lambda t: run_contract(t, candidate), tasks))


# -- in-process mode --------------------------------------------------------------------


@functools.cache
def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def run_in_process(job: tuple[Path, dict[str, Any]]) -> Run:
    """Solve one task with the seed's code and the given knobs, then score it with check.py."""
    task, knobs = job
    solver = load_module("sat3_solver", SEED / "solver.py")
    check = load_module(f"sat3_check_{task.name.replace('-', '_')}", task / "tests" / "check.py")
    cnf = (task / "environment" / "instance.cnf").read_text()
    start = time.perf_counter()
    outcome = solver.Dpll(solver.parse_cnf(cnf), solver.parse_config(knobs)).solve()
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="sat3-") as scratch:
        solution = Path(scratch) / "solution.txt"
        solver.write_solution(solution, outcome)
        (Path(scratch) / "solver.yaml").write_text(yaml.safe_dump(knobs, sort_keys=False))
        reward, _ = check.verdict(solution, task / "tests" / "instance.cnf", scratch)
    return Run(reward, seconds, outcome.decisions)


def evaluate_in_process(
    settings: Sequence[dict[str, Any]], tasks: Sequence[Path], jobs: int
) -> list[list[Run]]:
    jobs_list = [(task, knobs) for knobs in settings for task in tasks]
    with ProcessPoolExecutor(jobs) as pool:
        runs = list(pool.map(run_in_process, jobs_list, chunksize=len(tasks)))
    return [runs[i : i + len(tasks)] for i in range(0, len(runs), len(tasks))]


# -- knob moves -------------------------------------------------------------------------


def knob_values(spec: dict[str, Any]) -> list[Any]:
    if "choices" in spec:
        return list(spec["choices"])
    lo, hi = spec["range"]
    return [v for v in BASE_SAMPLES if lo <= v <= hi]


def get(knobs: dict[str, Any], dotted: str) -> Any:
    node: Any = knobs
    for key in dotted.split("."):
        node = node[key]
    return node


def is_noop(knobs: dict[str, Any]) -> bool:
    """restarts.base changes nothing while restarts.strategy is none."""
    return get(knobs, "restarts.strategy") == "none"


def moves(
    seed: dict[str, Any], space: list[dict[str, Any]], max_changed: int
) -> Iterable[Overrides]:
    """Every setting that differs from the seed in 1..max_changed knobs (skipping no-ops)."""
    options = {s["key"]: [v for v in knob_values(s) if v != get(seed, s["key"])] for s in space}
    for count in range(1, max_changed + 1):
        for keys in itertools.combinations(options, count):
            for values in itertools.product(*(options[k] for k in keys)):
                overrides = dict(zip(keys, values, strict=True))
                if "restarts.base" in overrides and is_noop(apply(seed, overrides)):
                    continue
                yield overrides


def grid(seed: dict[str, Any], space: list[dict[str, Any]]) -> Iterable[Overrides]:
    """The whole knob grid (range knobs sampled), skipping no-op restarts.base variants."""
    keys = [s["key"] for s in space]
    for values in itertools.product(*(knob_values(s) for s in space)):
        overrides = dict(zip(keys, values, strict=True))
        knobs = apply(seed, overrides)
        if is_noop(knobs) and overrides.get("restarts.base") != BASE_SAMPLES[0]:
            continue
        if is_noop(knobs):
            overrides.pop("restarts.base", None)
        yield {k: v for k, v in overrides.items() if v != get(seed, k)}


# -- reporting --------------------------------------------------------------------------


def row(name: str, runs: Sequence[Run]) -> str:
    solved = sum(r.reward for r in runs)
    mean = sum(r.seconds for r in runs) / len(runs)
    worst = max(r.seconds for r in runs)
    decisions = sum(r.decisions for r in runs) / len(runs)
    fraction = solved / len(runs)
    return (
        f"| {name} | {solved}/{len(runs)} | {fraction:.0%} | {decisions:.0f} "
        f"| {mean:.3f} | {worst:.3f} |"
    )


HEADER = (
    "| setting | solved | fraction | mean decisions | mean s/inst | max s/inst |\n"
    "|---|---|---|---|---|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--moves", action="store_true", help="all 1- and 2-knob moves from the seed")
    mode.add_argument("--exhaustive", action="store_true", help="whole knob grid (in-process)")
    parser.add_argument("--in-process", action="store_true", help="skip the subprocess contract")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tasks", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--top", type=int, default=15, help="rows to print for --exhaustive")
    args = parser.parse_args(argv)

    tasks = task_dirs(args.tasks)
    if not tasks:
        print("no tasks found; run generate.py first")
        return 1
    seed = yaml.safe_load((SEED / "solver.yaml").read_text())
    space = yaml.safe_load((SEED / "knobs.yaml").read_text())["knobs"]
    if args.exhaustive:
        named = {describe(o): o for o in grid(seed, space)}
    elif args.moves:
        named = {"seed": {}} | {describe(o): o for o in moves(seed, space, 2)}
    else:
        named = NAMED
    in_process = args.in_process or args.exhaustive
    label = "in-process" if in_process else "contract (subprocess solver + test.sh)"
    print(f"{len(tasks)} tasks, {len(named)} settings, {label}, {args.jobs} jobs\n")
    settings = [apply(seed, o) for o in named.values()]
    if in_process:
        results = evaluate_in_process(settings, tasks, args.jobs)
    else:
        results = []
        for name, knobs in zip(named, settings, strict=True):
            results.append(evaluate_contract(knobs, tasks, args.jobs))
            print(f"  {name}: {sum(r.reward for r in results[-1])}/{len(tasks)}", file=sys.stderr)
    rows = list(zip(named, results, strict=True))
    slow_name, slow_runs = max(rows, key=lambda item: max(r.seconds for r in item[1]))
    slowest = max(slow_runs, key=lambda r: r.seconds)
    print(f"slowest solver run: {slowest.seconds:.3f} s ({slow_name})\n")
    if args.exhaustive or args.moves:
        baseline = sum(r.reward for r in results[0]) if args.moves else None
        rows.sort(key=lambda item: -sum(r.reward for r in item[1]))
        if args.moves and baseline is not None:
            better = sum(1 for _, runs in rows if sum(r.reward for r in runs) > baseline)
            print(f"{better} of {len(rows) - 1} moves beat the seed ({baseline}/{len(tasks)})\n")
        if args.exhaustive:
            rows = rows[: args.top]
    print(HEADER)
    for name, runs in rows:
        print(row(name, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
