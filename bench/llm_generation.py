"""Tokens and cost of one ``llm-hill-climb`` generation against the scripted stub, from
the run's own count (its signed ``model_call`` events: the gateway's ledger) next to the
stub's count of what it answered. Issue 13 asks that they match exactly.

The stub answers the first mutation with a block that does not match (``llm_edit`` feeds
it back and the retry is paid too), then a 500 (retried by the gateway, billed by nobody)
and different SEARCH/REPLACE edits of the seed agent's ``prompt.md``; the reflection with
a lesson; anything else (a candidate's agent at evaluation) with a fenced block that
solves nothing. The run is ``recipes/llm-hill-climb.yaml`` with
``budget.max_generations=1``; ``--small`` shrinks the task split to four tasks; ``--set``
passes any other override (``slots.mutate.config.temperature=0.7``: sampled calls, so the
children of one parent differ; at the recipe's temperature 0 they ask the same request,
and all but the first are served from the ledger).

    python bench/llm_generation.py [--small] [--set KEY=VALUE ...] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "llm-hill-climb.yaml"
#: the scripted answers the README's demo uses too (one file, read by both)
SCRIPT = REPO / "recipes" / "stub" / "llm-hill-climb-answers.yaml"
SMALL_SPLIT = "tasks.split={train: [pyfix-001, pyfix-002], gate: [pyfix-003], sealed: [pyfix-004]}"
PRICE = (0.25, 2.0)  # the recipe's proposer: USD per million input, output tokens


def script() -> dict[str, Any]:
    """Answers matched on the request's last message, each used once, in order."""
    from rsiframe.yamlsafe import load

    return dict(load(SCRIPT.read_text()))


def measure(out: Path, *, small: bool, sets: Sequence[str] = ()) -> dict[str, Any]:
    """Run one generation against a fresh stub; the run's and the stub's counts (the
    run's cost summed from its ``model_call`` events, since ``status`` rounds it)."""
    from rsiframe.gateway.stub import Script, ServerThread, StubLLM

    stub = StubLLM(Script.model_validate(script()))
    overrides = ["budget.max_generations=1", *([SMALL_SPLIT] if small else []), *sets]
    with ServerThread(stub.app) as srv:
        env = {**os.environ, "LLM_BASE_URL": srv.url, "LLM_API_KEY": "stub-key"}
        argv = [sys.executable, "-m", "rsiframe.cli.main", "run", str(RECIPE), "--out", str(out)]
        argv += [a for s in overrides for a in ("--set", s)] + ["--quiet", "--json"]
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"the run failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    status = json.loads(res.stdout.split("\n", 1)[1])  # the first line is the run folder
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    calls = [e["data"] for e in events if e["type"] == "model_call"]
    cost = sum(c["cost_usd"] for c in calls)
    s = stub.stats
    stub_tokens = s.prompt_tokens + s.completion_tokens
    stub_cost = (s.prompt_tokens * PRICE[0] + s.completion_tokens * PRICE[1]) / 1e6
    return {
        "run": str(out),
        "overrides": overrides,
        "state": status["state"],
        "candidates": len(status["candidates"]),
        "stub": {
            "requests": s.requests,
            "answered": s.answered,
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens,
            "tokens": stub_tokens,
            "cost_usd": stub_cost,
        },
        "run_count": {
            "model_calls": status["model_calls"],
            "paid_calls": sum(1 for c in calls if c["status"] == 200 and not c["cached"]),
            "cached_calls": sum(1 for c in calls if c["cached"]),
            "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
            "completion_tokens": sum(c["completion_tokens"] for c in calls),
            "tokens": status["model_tokens"],
            "cost_usd": cost,
            "status_cost_usd": status["cost_usd"],
            "by_slot": status["models_by_slot"],
        },
        "tokens_match": status["model_tokens"] == stub_tokens
        and sum(c["prompt_tokens"] for c in calls) == s.prompt_tokens,
        "cost_match": abs(cost - stub_cost) < 1e-12 and status["cost_usd"] == round(stub_cost, 6),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="four tasks instead of forty")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key ('evaluator.config.agent=exit 0': evaluations call no "
        "model; slots.mutate.config.temperature=0.7: the children of a parent differ)",
    )
    ap.add_argument("--keep", type=Path, help="write the run here (default: a temp folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsiframe-llm-gen-") as tmp:
        out = args.keep or Path(tmp) / "run"
        m = measure(out, small=args.small, sets=args.sets)
    ok = m["tokens_match"] and m["cost_match"]
    if args.json:
        print(json.dumps(m, indent=2))
        return 0 if ok else 1
    s, r = m["stub"], m["run_count"]
    print(
        f"llm-hill-climb, one generation against the stub: {m['state']}, {m['candidates']} "
        "candidates"
    )
    print(f"  --set {' --set '.join(m['overrides'])}")
    print(
        f"  stub:  {s['answered']} answered of {s['requests']} requests, "
        f"{s['prompt_tokens']} + {s['completion_tokens']} = {s['tokens']} tokens, "
        f"${s['cost_usd']:.8f} at the recipe's price"
    )
    print(
        f"  run:   {r['model_calls']} model calls ({r['paid_calls']} paid, {r['cached_calls']} "
        f"from the ledger), {r['prompt_tokens']} + {r['completion_tokens']} = {r['tokens']} "
        f"tokens, ${r['cost_usd']:.8f}"
    )
    for slot, row in sorted(r["by_slot"].items()):
        print(
            f"    {slot:8} {row['model_calls']} calls, {row['model_tokens']} tokens, "
            f"${row['cost_usd']:.6f}"
        )
    print(f"  match: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
