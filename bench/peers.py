"""rsiframe against OpenEvolve and GEPA: loop wall time per candidate, one table, one run.

Every framework gets the same nothing-to-do work, so what is measured is the framework:

- OpenEvolve and GEPA, from their released packages in their own venv (created on first
  use: ``pip install openevolve gepa`` into ``--venv``, default
  ``~/.cache/rsiframe-bench/peers``), ask an instant stub OpenAI-compatible endpoint on
  loopback (``rsiframe.gateway.stub`` in its own process) for every child, and score it with a
  no-op evaluator (OpenEvolve: a constant; GEPA: a counter, so every proposal is accepted
  into its pool, as rsiframe's ``always`` gate admits every child). One worker each.
- rsiframe runs ``bench/overhead.py``'s run: a no-op mutator, the process sandbox, two
  sandboxed evaluations (train, gate), a commit and signed, fsynced events per candidate.

"process ms" = a fresh process's wall time from its start until its run is over, per
candidate; "loop ms" = the framework's own loop only (for rsiframe: ``drive``).

    python bench/peers.py                     # 100 and 1000 candidates
    python bench/peers.py --sizes 100         # quicker

Targets (issue 11) at 1,000: rsiframe/OpenEvolve <= 1.0, rsiframe/GEPA <= 0.5 (process ms).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # bench/overhead.py: rsiframe's side


def answer(i: int) -> str:
    """The stub's i-th answer: a different program each time (OpenEvolve rejects a rewrite
    identical to its parent before evaluating it, so a constant answer would measure
    nothing but rejections)."""
    return f"```python\n# EVOLVE-BLOCK-START\nx = {i}\n# EVOLVE-BLOCK-END\n```\n"


OPENEVOLVE = textwrap.dedent("""\
    import json, sys, time
    t0 = time.time()
    from openevolve.api import run_evolution
    from openevolve.config import load_config
    n, workdir, config = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    cfg = load_config(config)
    t1 = time.time()
    result = run_evolution(
        workdir + "/initial.py", workdir + "/evaluator.py", cfg, iterations=n,
        output_dir=workdir + "/out", cleanup=False,
    )
    t2 = time.time()
    print(json.dumps({"loop_s": t2 - t1, "import_s": t1 - t0, "done_at": t2}))
    """)

OE_CONFIG = """\
max_iterations: {n}
log_level: WARNING
diff_based_evolution: false
llm:
  api_base: {url}/v1
  api_key: stub
  models: [{{name: stub, weight: 1.0}}]
  evaluator_models: [{{name: stub, weight: 1.0}}]
  timeout: 30
  retries: 0
evaluator:
  cascade_evaluation: false
  parallel_evaluations: 1
  timeout: 30
  max_retries: 0
"""

GEPA = textwrap.dedent("""\
    import json, sys, time
    t0 = time.time()
    import gepa
    from gepa.core.adapter import EvaluationBatch
    from openai import OpenAI
    n, url = int(sys.argv[1]), sys.argv[2]
    client = OpenAI(base_url=url + "/v1", api_key="stub")
    calls = [0]

    class NoOp:
        propose_new_texts = None

        def evaluate(self, batch, candidate, capture_traces=False):
            calls[0] += 1  # later evaluations score higher: every proposal is accepted
            return EvaluationBatch(
                outputs=[None] * len(batch), scores=[float(calls[0])] * len(batch),
                trajectories=[{}] * len(batch) if capture_traces else None,
            )

        def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
            return {c: [{"Inputs": "", "Generated Outputs": "", "Feedback": ""}]
                    for c in components_to_update}

    def reflection_lm(prompt):
        r = client.chat.completions.create(
            model="stub", messages=[{"role": "user", "content": prompt}])
        return r.choices[0].message.content

    t1 = time.time()
    result = gepa.optimize(
        seed_candidate={"program": "x = 0"}, trainset=[{"i": 0}], valset=[{"i": 0}],
        adapter=NoOp(), reflection_lm=reflection_lm, perfect_score=1e18,
        stop_callbacks=[lambda state: len(state.program_candidates) > n],
        display_progress_bar=False, raise_on_exception=True,
    )
    t2 = time.time()
    assert len(result.candidates) == n + 1, len(result.candidates)
    print(json.dumps({"loop_s": t2 - t1, "import_s": t1 - t0, "done_at": t2}))
    """)


def ensure_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "openevolve", "gepa"], check=True)
    return py


def versions(py: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({p: m.version(p) for p in ('openevolve', 'gepa')}))"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_stub(tmp: Path, calls: int) -> tuple[subprocess.Popen[bytes], str]:
    script = tmp / "answers.json"
    answers = [{"content": answer(i)} for i in range(1, calls + 1)]
    script.write_text(json.dumps({"answers": answers, "default": {"status": 500}}))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsiframe.gateway.stub",
            "--script",
            str(script),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the stub endpoint did not start")


def run_peer(name: str, py: Path, n: int, url: str, tmp: Path) -> dict[str, float]:
    work = tmp / f"{name}-{n}"
    work.mkdir()
    if name == "openevolve":
        (work / "initial.py").write_text("# EVOLVE-BLOCK-START\nx = 0\n# EVOLVE-BLOCK-END\n")
        (work / "evaluator.py").write_text(
            "def evaluate(program_path):\n    return {'combined_score': 0.5}\n"
        )
        (work / "config.yaml").write_text(OE_CONFIG.format(n=n, url=url))
        (work / "driver.py").write_text(OPENEVOLVE)
        args = [str(n), str(work), str(work / "config.yaml")]
    else:
        (work / "driver.py").write_text(GEPA)
        args = [str(n), url]
    env = {**os.environ, "OPENAI_API_KEY": "stub", "PYTHONDONTWRITEBYTECODE": "1"}
    before = stub_requests(url)
    t0 = time.time()
    proc = subprocess.run(
        [str(py), str(work / "driver.py"), *args], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name} at {n} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "process_ms": (out["done_at"] - t0) / n * 1000,
        "loop_ms": out["loop_s"] / n * 1000,
        "llm_calls": stub_requests(url) - before,
    }


def stub_requests(url: str) -> int:
    with urllib.request.urlopen(url + "/stub/stats", timeout=10) as r:
        return int(json.loads(r.read())["requests"])


def run_rsiframe(n: int, tmp: Path) -> dict[str, float]:
    row = overhead.measure(n, "process", tmp, resume_cli=False)
    return {"process_ms": row["process_ms"], "loop_ms": row["drive_s"] / n * 1000, "llm_calls": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--venv", type=Path, default=Path.home() / ".cache/rsiframe-bench/peers")
    args = ap.parse_args()
    py = ensure_venv(args.venv)
    ver = versions(py)
    rows: list[tuple[str, int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="rsiframe-peers-") as t:
        tmp = Path(t)
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(tmp / "keys"))
        stub, url = start_stub(tmp, 2 * sum(args.sizes) + 100)
        try:
            for n in args.sizes:  # side by side: each size for all three before the next
                for name in ("rsiframe", "openevolve", "gepa"):
                    r = (
                        run_rsiframe(n, tmp)
                        if name == "rsiframe"
                        else run_peer(name, py, n, url, tmp)
                    )
                    rows.append((name, n, r))
                    print(json.dumps({"framework": name, "n": n, **r}), file=sys.stderr, flush=True)
        finally:
            stub.terminate()
            stub.wait()
    ours = {n: r for name, n, r in rows if name == "rsiframe"}
    label = {
        "rsiframe": "rsiframe",
        "openevolve": f"OpenEvolve {ver['openevolve']}",
        "gepa": f"GEPA {ver['gepa']}",
    }
    print(
        f"{'framework':<18} {'candidates':>10} {'process ms':>11} {'loop ms':>8}"
        f" {'model calls':>11} {'rsiframe/peer':>14}"
    )
    for name, n, r in rows:
        ratio = "" if name == "rsiframe" else f"{ours[n]['process_ms'] / r['process_ms']:.2f}"
        print(
            f"{label[name]:<18} {n:>10} {r['process_ms']:>11.1f} {r['loop_ms']:>8.1f}"
            f" {r['llm_calls']:>11} {ratio:>14}"
        )


if __name__ == "__main__":
    main()
