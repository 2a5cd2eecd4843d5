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
    python bench/peers.py --latency           # throughput at model latency (bench/latency.py)

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import latency  # bench/latency.py: --latency
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


def start_stub(tmp: Path, calls: int, delay_s: float = 0.0) -> tuple[subprocess.Popen[bytes], str]:
    """The stub endpoint in its own process; each answer after ``delay_s`` (its sleep is
    asynchronous: concurrent requests wait side by side, as at a provider)."""
    script = tmp / "answers.json"
    answers = [{"content": answer(i), "delay_s": delay_s} for i in range(1, calls + 1)]
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
    return {
        "process_ms": row["process_ms"],
        "loop_ms": row["drive_s"] / n * 1000,
        "llm_calls": 0,
        # printed with the row (stderr): where a whole-process difference comes from
        "create_s": row["create_s"],
        "close_s": row["close_s"],
        "resume_s": row["resume_s"],
    }


#: each peer's package on PyPI
PACKAGES = {"openevolve": "openevolve", "gepa": "gepa", "shinka": "shinka-evolve"}


def run_latency_peer(name: str, py: Path, url: str, tmp: Path) -> dict[str, Any]:
    """One peer at model latency: its loop's wall time for latency.CANDIDATES children."""
    n, work = latency.CANDIDATES, tmp / f"{name}-latency"
    work.mkdir()
    if name == "openevolve":
        (work / "initial.py").write_text("# EVOLVE-BLOCK-START\nx = 0\n# EVOLVE-BLOCK-END\n")
        (work / "evaluator.py").write_text(latency.OE_EVALUATOR)
        (work / "config.yaml").write_text(
            latency.OE_CONFIG.format(n=n, url=url, k=latency.INFLIGHT)
        )
        (work / "driver.py").write_text(OPENEVOLVE)
        args = [str(n), str(work), str(work / "config.yaml")]
    elif name == "gepa":
        (work / "driver.py").write_text(latency.GEPA)
        args = [str(n), url]
    else:
        latency.shinka_files(work)
        args = [str(n), str(work), url]
    env = {**os.environ, "OPENAI_API_KEY": "stub", "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.time()
    proc = subprocess.run(
        [str(py), str(work / "driver.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name} --latency failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "candidates": int(out.get("candidates", n)),
        "loop_s": float(out["loop_s"]),
        "process_s": out["done_at"] - t0,
    }


def run_latency(venv: Path, shinka_venv: Path, only: list[str]) -> None:
    """``--latency``: candidates per minute at 1 s per model answer (bench/latency.py)."""
    pys = {"openevolve": venv, "gepa": venv, "shinka": shinka_venv}
    rows: list[tuple[str, dict[str, Any]]] = []
    ver: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rsiframe-latency-") as t:
        tmp = Path(t)
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(tmp / "keys"))
        stub, url = start_stub(tmp, 20 * latency.CANDIDATES, delay_s=latency.MODEL_S)
        try:
            for name in only:
                before = stub_requests(url)
                if name == "rsiframe":
                    r = latency.run_rsiframe(tmp, url, latency.CANDIDATES)
                else:
                    make = latency.ensure_shinka if name == "shinka" else ensure_venv
                    py = make(pys[name])
                    ver[name] = latency.version(py, PACKAGES[name])
                    r = run_latency_peer(name, py, url, tmp)
                r["llm_calls"] = stub_requests(url) - before
                r["per_min"] = r["candidates"] / r["loop_s"] * 60
                rows.append((name, r))
                print(json.dumps({"framework": name, **r}), file=sys.stderr, flush=True)
        finally:
            stub.terminate()
            stub.wait()
    latency.report(rows, ver)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--venv", type=Path, default=Path.home() / ".cache/rsiframe-bench/peers")
    ap.add_argument(
        "--latency",
        action="store_true",
        help="throughput at model latency instead: the stub answers after 1 s, 0.5 s of "
        "evaluation per candidate, 4 in flight, 40 candidates (bench/latency.py)",
    )
    ap.add_argument(
        "--shinka-venv", type=Path, default=Path.home() / ".cache/rsiframe-bench/shinka"
    )
    ap.add_argument(
        "--only",
        nargs="+",
        choices=latency.FRAMEWORKS,
        help="run these frameworks only (e.g. rsiframe while developing)",
    )
    args = ap.parse_args()
    if args.latency:
        run_latency(args.venv, args.shinka_venv, args.only or list(latency.FRAMEWORKS))
        return
    only = [n for n in ("rsiframe", "openevolve", "gepa") if n in (args.only or [n])]
    py = ensure_venv(args.venv)
    ver = versions(py)
    rows: list[tuple[str, int, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="rsiframe-peers-") as t:
        tmp = Path(t)
        os.environ.setdefault("RSIFRAME_KEY_DIR", str(tmp / "keys"))
        stub, url = start_stub(tmp, 2 * sum(args.sizes) + 100)
        try:
            for n in args.sizes:  # side by side: each size for all three before the next
                for name in only:
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
        ratio = (
            f"{ours[n]['process_ms'] / r['process_ms']:.2f}"
            if name != "rsiframe" and n in ours
            else ""
        )
        print(
            f"{label[name]:<18} {n:>10} {r['process_ms']:>11.1f} {r['loop_ms']:>8.1f}"
            f" {r['llm_calls']:>11} {ratio:>14}"
        )
    if len(ours) > 1:  # issue 29: no growth with run size (target <= 1.2)
        small, large = min(ours), max(ours)
        growth = ours[large]["process_ms"] / ours[small]["process_ms"]
        print(f"rsiframe process ms at {large} / at {small}: {growth:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
