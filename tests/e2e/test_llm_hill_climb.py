"""recipes/llm-hill-climb.yaml against the project's own served tiny model.

The D/T/H path trains a tiny character-level model (tests/dth.py, with a context long
enough for a short prompt) and serves it with rsiframe/dth/serving.py; the run reaches it over
TCP through serving.py's forwarder, as the declared model's upstream behind the run's
gateway. The model cannot write an edit: the run must still finish, every call must be
metered and recorded (the gateway's count equal to the server's own), and each child
whose edit could not be applied must be rejected with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rsiframe.dth.serving import SCRIPT, ModelServer
from rsiframe.sandbox.bwrap import make_sandbox
from tests.support.cli import events, status_json
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

EDIT_TEMPLATE = "fix {{ single_file or 'agent.py' }}\n"
LESSONS_TEMPLATE = "lessons for generation {{ generation }}\n"
RECIPE = """\
extends: {base}
name: llm-hill-climb-tiny
models:
  proposer: {{model: tiny}}
tasks:
  split: {{ratios: null, train: [pyfix-001, pyfix-002], gate: [pyfix-003],
          sealed: [pyfix-004]}}
evaluator:
  config: {{agent_timeout_s: 60}}
slots:
  mutate: {{config: {{max_tokens: 24, retries: 1, template: {edit}}}}}
  reflect: {{config: {{max_tokens: 24, template: {lessons}}}}}
budget: {{max_generations: 1}}
children_per_generation: 2
"""


def test_llm_hill_climb_runs_against_the_projects_own_served_tiny_model(tmp_path: Path) -> None:
    from rsiframe.dth.build import Builder
    from rsiframe.recipe.evaluator import BuildConfig
    from tests.support.dth import BUILD, write_seed

    seed = write_seed(tmp_path / "dth-seed")
    train = seed / "trainer" / "train.py"
    text = train.read_text()
    assert "n_positions=24" in text and "max_length=24" in text
    train.write_text(text.replace("n_positions=24", "n_positions=2048"))  # the agent's prompt
    (tmp_path / "work").mkdir()
    builder = Builder(
        BuildConfig.model_validate(BUILD), make_sandbox("auto"), tmp_path / "work", tmp_path / "c"
    )
    built = builder.build(seed, lambda data: "")
    # the seed agent asks for up to 1024 answer tokens (its config.yaml)
    server = ModelServer(
        make_sandbox("auto"), built.model.dir.parents[1], threads=1, max_tokens=1024
    )
    ep = server.open("tiny-ep", built.model.dir, "tiny", None)
    (tmp_path / "edit.j2").write_text(EDIT_TEMPLATE)
    (tmp_path / "lessons.j2").write_text(LESSONS_TEMPLATE)
    out = tmp_path / "run"
    recipe = tmp_path / "tiny.yaml"  # the shipped recipe, made small and pointed at "tiny"
    recipe.write_text(
        RECIPE.format(
            base=REPO / "recipes" / "llm-hill-climb.yaml",
            edit=tmp_path / "edit.j2",
            lessons=tmp_path / "lessons.j2",
        )
    )
    run = [
        sys.executable,
        "-m",
        "rsiframe.cli.main",
        "run",
        str(recipe),
        "--out",
        str(out),
        "--quiet",
    ]
    # serving.py's forwarder on this host: 127.0.0.1 -> the server's socket
    bridge = 'LLM_BASE_URL="$OPENAI_BASE_URL" exec "$@"'
    argv = [sys.executable, str(SCRIPT), "forward", "--socket", str(ep.folder / "api.sock")]
    argv += ["--", "sh", "-c", bridge, "sh", *run]
    try:
        res = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "LLM_API_KEY": "local-key"},
        )
    finally:
        usage = server.close_endpoint(ep)
        server.stop()
    assert res.returncode == 0, res.stderr[-3000:]
    status = status_json(out)
    assert status["state"] == "finished"
    # each child's edit could not be applied: rejected at mutate, with that reason
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 2
    rejected = [e["data"] for e in events(out) if e["type"] == "candidate_rejected"]
    assert len(rejected) == 2
    for r in rejected:
        assert r["stage"] == "mutate", r
        assert "no applicable edit after 2 answers" in " ".join(r["reasons"]), r
    # every call is metered and recorded: model_call events, the ledger, and the server
    calls = [e["data"] for e in events(out) if e["type"] == "model_call"]
    ledger = [
        json.loads(x) for x in (out / "model-calls" / "ledger.jsonl").read_text().splitlines()
    ]
    assert len(calls) == len(ledger) == status["model_calls"]
    slots = {c["slot"] for c in calls}
    assert {"mutate", "evaluate"} <= slots, slots  # the editor and the seed agent
    mutate = [c for c in calls if c["slot"] == "mutate"]
    assert len(mutate) == 4  # two answers per child, none applicable
    served = [e for e in ledger if e["status"] == 200 and not e["cached"]]
    tokens = sum(e["prompt_tokens"] + e["completion_tokens"] for e in served)
    # and the models' check before the first generation, metered apart from the run
    (checked,) = [e["data"]["checks"] for e in events(out) if e["type"] == "models_checked"]
    check_tokens = sum(c["tokens"] for c in checked)
    assert check_tokens > 0
    assert tokens + check_tokens == usage["total_tokens"], (tokens, check_tokens, usage)
    assert status["cost_usd"] > 0
