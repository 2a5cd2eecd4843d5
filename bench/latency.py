"""Throughput at real model latency: rsiframe against OpenEvolve, GEPA and ShinkaEvolve.

``bench/peers.py --latency`` runs this. Every framework asks the same stub endpoint
(``rsiframe.gateway.stub`` in its own process, every answer after ``MODEL_S`` = 1.0 s, a
different program each time) for each child, and each child's evaluation costs
``EVAL_S`` = 0.5 s of sleeping in all; ``INFLIGHT`` = 4 candidates (or workers) at once,
``CANDIDATES`` = 40 children. Reported: candidates per minute of the framework's loop.

- rsiframe: a mutator that asks the declared model through the run's gateway (metered,
  ledgered) and writes the answer into the candidate; the agent sleeps 0.25 s on its train
  task and 0.25 s on its gate task (process sandbox); ``concurrency: {candidates: 4, mode:
  steady}``; the gate admits every child.
- OpenEvolve: ``parallel_evaluations: 4`` (its process-parallel controller runs 4
  iterations, each one model call and one evaluation, at once); the evaluator sleeps 0.5 s.
- GEPA: one candidate at a time (it has no parallel mode); a reflection call per
  iteration, and the sleep is split over the evaluations of the new candidate.
- ShinkaEvolve: its async runner (``ShinkaEvolveRunner``) with 4 evaluation jobs and 4
  proposals in flight (so up to 8 candidates), local jobs, told 16 cores (it caps both by
  ``os.cpu_count()``); the evaluation program sleeps 0.5 s.

Where a peer's design makes the comparison uneven is printed under the table (``UNEVEN``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from rsiframe import llm
from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.engine.loop import Engine
from rsiframe.operators.llmprompt import ModelOperatorConfig

MODEL_S = 1.0
EVAL_S = 0.5
INFLIGHT = 4
CANDIDATES = 40


class AskModel(MutateOperator):
    """Asks the declared model for a program and writes its answer into program.py."""

    name = "ask_model"
    Config = ModelOperatorConfig
    config: ModelOperatorConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        # the candidate id in the prompt: a request the gateway has not seen (no cache hit)
        prompt = f"Improve the program (candidate {ctx.candidate_id})."
        answer = llm.current().chat(self.config.model, [{"role": "user", "content": prompt}])
        (ctx.workdir / "program.py").write_text(answer.text)
        return Mutation(description=f"model answer for {ctx.candidate_id}")


RECIPE = """\
name: latency
seed: seed
tasks:
  path: tasks
  split: {{train: [one], gate: [two], sealed: [three]}}
surface: {{include: [program.py]}}
evaluator:
  engine: local
  config: {{agent: "sleep {half}", sandbox: process, concurrency: 1}}
models:
  stub: {{base_url: "{url}/v1", model: stub, max_concurrency: {k}, timeout_s: 60, retries: 0}}
slots:
  select: {{operator: best}}
  rollout: {{operator: local}}
  mutate: {{operator: "{ops}:AskModel", config: {{model: stub}}}}
  novelty: {{operator: tree_dedup}}
  gate: {{operator: always}}
  record: {{operator: notes}}
budget: {{max_generations: null, max_candidates: {n}}}
children_per_generation: {n}
concurrency: {{candidates: {k}, mode: steady}}
"""


def build(root: Path, url: str, n: int) -> Path:
    for name in ("one", "two", "three"):
        t = root / "tasks" / name
        (t / "tests").mkdir(parents=True)
        (t / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n")
        (t / "instruction.md").write_text("nothing to do\n")
        (t / "tests" / "test.sh").write_text('echo 1 > "${RSI_LOGS:-/logs}/verifier/reward.txt"\n')
    (root / "seed").mkdir()
    (root / "seed" / "program.py").write_text("x = 0\n")
    recipe = root / "recipe.yaml"
    ops = Path(__file__).resolve()
    recipe.write_text(RECIPE.format(ops=ops, url=url, n=n, k=INFLIGHT, half=EVAL_S / 2))
    return recipe


def drive_rsiframe(workdir: Path, url: str, n: int) -> dict[str, Any]:
    """The child process: create and drive one run; the loop's wall time and its counts."""
    recipe = build(workdir, url, n)
    engine = Engine.create(recipe, None, workdir / "run", model_check=False)
    t0 = time.perf_counter()
    state = engine.drive()
    loop_s = time.perf_counter() - t0
    st = engine.state
    children = [c for c in st.candidates.values() if not c.is_seed]
    evaluated = [c for c in children if c.record("gate") is not None]
    engine.close()
    return {
        "state": state,
        "loop_s": loop_s,
        "candidates": len(children),
        "evaluated": len(evaluated),
    }


def run_rsiframe(tmp: Path, url: str, n: int) -> dict[str, Any]:
    work = tmp / f"rsiframe-latency-{n}"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, __file__, str(work), url, str(n)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"rsiframe --latency failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


OE_CONFIG = """\
max_iterations: {n}
log_level: WARNING
diff_based_evolution: false
llm:
  api_base: {url}/v1
  api_key: stub
  models: [{{name: stub, weight: 1.0}}]
  evaluator_models: [{{name: stub, weight: 1.0}}]
  timeout: 60
  retries: 0
evaluator:
  cascade_evaluation: false
  parallel_evaluations: {k}
  timeout: 60
  max_retries: 0
"""

OE_EVALUATOR = f"""\
import time


def evaluate(program_path):
    time.sleep({EVAL_S})
    return {{"combined_score": 0.5}}
"""

GEPA = textwrap.dedent(f"""\
    import json, sys, time
    t0 = time.time()
    import gepa
    from gepa.core.adapter import EvaluationBatch
    from openai import OpenAI
    n, url = int(sys.argv[1]), sys.argv[2]
    client = OpenAI(base_url=url + "/v1", api_key="stub")
    calls = [0]
    paid: dict[str, int] = {{}}

    class Sleeps:
        propose_new_texts = None

        def evaluate(self, batch, candidate, capture_traces=False):
            # a program's first two evaluations (its minibatch, then its valset) cost
            # {EVAL_S / 2} s each, {EVAL_S} s in all; re-evaluations of a parent are free
            key = candidate["program"]
            if paid.get(key, 0) < 2:
                paid[key] = paid.get(key, 0) + 1
                time.sleep({EVAL_S / 2})
            calls[0] += 1  # later evaluations score higher: every proposal is accepted
            return EvaluationBatch(
                outputs=[None] * len(batch), scores=[float(calls[0])] * len(batch),
                trajectories=[{{}}] * len(batch) if capture_traces else None,
            )

        def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
            return {{c: [{{"Inputs": "", "Generated Outputs": "", "Feedback": ""}}]
                    for c in components_to_update}}

    def reflection_lm(prompt):
        r = client.chat.completions.create(
            model="stub", messages=[{{"role": "user", "content": prompt}}])
        return r.choices[0].message.content

    t1 = time.time()
    result = gepa.optimize(
        seed_candidate={{"program": "x = 0"}}, trainset=[{{"i": 0}}], valset=[{{"i": 0}}],
        adapter=Sleeps(), reflection_lm=reflection_lm, perfect_score=1e18,
        stop_callbacks=[lambda state: len(state.program_candidates) > n],
        display_progress_bar=False, raise_on_exception=True,
    )
    t2 = time.time()
    assert len(result.candidates) == n + 1, len(result.candidates)
    print(json.dumps({{"loop_s": t2 - t1, "import_s": t1 - t0, "done_at": t2}}))
    """)


SHINKA = textwrap.dedent(f"""\
    import json, os, sqlite3, sys, time
    t0 = time.time()
    # ShinkaEvolve caps its concurrency by os.cpu_count(): on 2 cores one proposal and
    # one evaluation at a time; told 16 cores it keeps the 4 and 4 asked for
    os.cpu_count = lambda: 16
    from shinka.core import EvolutionConfig, ShinkaEvolveRunner
    from shinka.database import DatabaseConfig
    from shinka.launch import LocalJobConfig
    n, work, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    evo = EvolutionConfig(
        patch_types=["full"], patch_type_probs=[1.0], num_generations=n + 1,
        llm_models=["local/stub@" + url + "/v1"], llm_dynamic_selection=None,
        meta_rec_interval=None, embedding_model=None,
        init_program_path=work + "/initial.py", results_dir=work + "/out",
    )
    runner = ShinkaEvolveRunner(
        evo_config=evo,
        job_config=LocalJobConfig(eval_program_path=work + "/evaluate.py"),
        db_config=DatabaseConfig(db_path=work + "/out/programs.sqlite", num_islands=1),
        max_evaluation_jobs={INFLIGHT}, max_proposal_jobs={INFLIGHT}, verbose=False,
    )
    t1 = time.time()
    runner.run()
    t2 = time.time()
    db = sqlite3.connect(work + "/out/programs.sqlite")
    programs = db.execute("select count(*) from programs").fetchone()[0]
    print(json.dumps({{"loop_s": t2 - t1, "import_s": t1 - t0, "done_at": t2,
                      "candidates": programs - 1}}))
    """)

SHINKA_EVALUATE = f"""\
import argparse, json, os, time

ap = argparse.ArgumentParser()
ap.add_argument("--program_path")
ap.add_argument("--results_dir")
args = ap.parse_args()
time.sleep({EVAL_S})
os.makedirs(args.results_dir, exist_ok=True)
with open(os.path.join(args.results_dir, "correct.json"), "w") as f:
    json.dump({{"correct": True, "error": None}}, f)
with open(os.path.join(args.results_dir, "metrics.json"), "w") as f:
    json.dump({{"combined_score": 0.5, "public": {{}}, "private": {{}}}}, f)
"""

#: the frameworks ``--latency`` runs, in order
FRAMEWORKS = ("rsiframe", "openevolve", "gepa", "shinka")
LABELS = {
    "rsiframe": "rsiframe",
    "openevolve": "OpenEvolve",
    "gepa": "GEPA",
    "shinka": "ShinkaEvolve",
}

#: where a peer's design makes the comparison uneven, and how (printed under the table)
UNEVEN = {
    "rsiframe": "each child: 2 sandboxed evaluations (agent + verifier processes each), a "
    "git commit, signed and fsynced events, every model call through the metering gateway",
    "openevolve": "4 worker processes, each one model call then one in-process evaluation; "
    "no sandbox, no commit, nothing durable per child but its database checkpoints",
    "gepa": "one candidate at a time by design (no parallel proposals): bound at "
    "1 / (1.0 s + 0.5 s) = 40 per minute; it also re-evaluates the parent each iteration "
    "(free here: only a program's first two evaluations sleep)",
    "shinka": "4 proposals and 4 evaluations at once, so up to 8 candidates in flight; told "
    "16 cores (on this 2-core machine it would cap itself at 1 proposal and 1 evaluation); "
    "each evaluation a fresh python process; no embeddings, no meta summaries, full "
    "rewrites only",
}


def shinka_files(work: Path) -> None:
    (work / "out").mkdir()
    (work / "initial.py").write_text("# EVOLVE-BLOCK-START\nx = 0\n# EVOLVE-BLOCK-END\n")
    (work / "evaluate.py").write_text(SHINKA_EVALUATE)
    (work / "driver.py").write_text(SHINKA)


def ensure_shinka(venv: Path) -> Path:
    """ShinkaEvolve in its own venv (``pip install shinka-evolve``), made on first use."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "shinka-evolve"], check=True)
    return py


def version(py: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def report(rows: list[tuple[str, dict[str, Any]]], versions: dict[str, str]) -> None:
    """The table, the ratio to the best peer and where the comparison is uneven."""
    label = {k: f"{v} {versions[k]}" if k in versions else v for k, v in LABELS.items()}
    print(
        f"{'framework':<19} {'candidates':>10} {'loop s':>7} {'per minute':>11} {'model calls':>11}"
    )
    for name, r in rows:
        print(
            f"{label[name]:<19} {r['candidates']:>10} {r['loop_s']:>7.1f}"
            f" {r['per_min']:>11.1f} {r['llm_calls']:>11}"
        )
    ours = next((r for name, r in rows if name == "rsiframe"), None)
    peers = [(name, r) for name, r in rows if name != "rsiframe"]
    if ours is not None and peers:
        name, best = max(peers, key=lambda x: x[1]["per_min"])
        ratio = ours["per_min"] / best["per_min"]
        print(f"rsiframe / best peer ({label[name]}): {ratio:.2f} (target >= 0.9)")
    print(
        f"each answer after {MODEL_S} s, {EVAL_S} s of evaluation per candidate, "
        f"{INFLIGHT} in flight; uneven:"
    )
    for name, _ in rows:
        print(f"- {LABELS[name]}: {UNEVEN[name]}")


if __name__ == "__main__":
    print(json.dumps(drive_rsiframe(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))))
