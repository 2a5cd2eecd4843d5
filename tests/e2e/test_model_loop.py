"""The model loop without silent waste or silent failure (issue 26), through the real CLI,
the run's gateway process and the scripted stub: a dead endpoint stops `run` and `resume`
in one line before anything is touched; a child with an existing candidate's tree is never
evaluated; an outage mid-run ends the run `failed` and it resumes once the stub is back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer, ServerThread
from tests.support.cli import cli_proc, events, status_json
from tests.support.modelsrig import EDIT, Rig, checks, ledger, paid

pytestmark = pytest.mark.e2e


def status_text(run: Path) -> str:
    """``status`` as one line of words (the console wraps long lines)."""
    return " ".join(cli_proc("status", run).stdout.split())


RUN = [sys.executable, "-m", "rsiframe.cli.main", "run"]

DEAD = "http://127.0.0.1:9/v1"  # nothing listens on the discard port


def test_a_dead_endpoint_stops_run_in_one_line_before_any_run_folder(models_rig: Rig) -> None:
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)])
    out = models_rig.root / "run"
    res = cli_proc(
        "run", models_rig.recipe, "--out", out, env={**models_rig.env, "LLM_BASE_URL": DEAD}
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "model proposer" in lines[0] and "stub-model at http://127.0.0.1:9/v1" in lines[0]
    assert "--no-model-check" in lines[0]
    assert not out.exists() and res.stdout == ""


def test_the_models_check_is_metered_apart_from_the_runs_budget(models_rig: Rig) -> None:
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)], children=1)
    run = models_rig.run()
    st = status_json(run)
    assert checks(models_rig.stub) == 1 and st["model_check"]["calls"] == 1
    assert st["model_check"]["tokens"] == models_rig.stub.stats.check_tokens > 0
    assert st["model_check"]["cost_usd"] > 0
    entries = ledger(run)  # the run's ledger holds the run's calls only
    assert st["model_calls"] == len(entries) == 1
    assert st["budget"]["used"]["model_tokens"] == sum(
        e["prompt_tokens"] + e["completion_tokens"] for e in entries
    )
    text = status_text(run)
    assert "model check: 1 call," in text and "not charged to the budget" in text


@pytest.mark.parametrize("k", [1, 2])
def test_a_child_with_an_existing_tree_is_rejected_as_a_duplicate_never_evaluated(
    models_rig: Rig, k: int
) -> None:
    # temperature 0: both siblings make the same request; the second is served from cache
    mutate = {
        "operator": "llm_edit",
        "config": {"model": "proposer", "max_tokens": 200, "retries": 0, "temperature": 0},
    }
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)], mutate=mutate, children=2)
    check = cli_proc("recipe", "check", models_rig.recipe, env=models_rig.env)
    assert check.returncode == 0 and "temperature: 0 makes every child" in check.stderr
    run = models_rig.run("run", "--set", f"concurrency.candidates={k}")
    evs = events(run)
    rejected = {e["data"]["id"]: e["data"] for e in evs if e["type"] == "candidate_rejected"}
    mutated = [e["data"]["id"] for e in evs if e["type"] == "candidate_mutated"][1:]  # the seed
    assert mutated == ["c0001"]  # the earlier proposal keeps the tree, whatever finished first
    assert rejected["c0002"]["stage"] == "duplicate"
    assert rejected["c0002"]["reasons"] == ["duplicate of c0001"]
    evaluated = {e["data"]["id"] for e in evs if e["type"] == "evaluation_started"}
    assert "c0002" not in evaluated and "c0001" in evaluated
    st = status_json(run)
    # with K=2 the two same requests may be in flight together: both are then paid (the
    # gateway serves from its ledger what it has recorded); one after the other, cached
    cached = st["model_calls_cached"]
    assert st["model_calls"] == 2 and cached == 2 - models_rig.stub.stats.answered
    assert st["models_by_slot"]["mutate"]["cached_calls"] == cached
    if k == 1:
        assert cached == 1 and "2 calls, 1 from cache" in status_text(run)


def test_a_mid_run_outage_ends_the_run_failed_and_it_resumes_when_the_stub_is_back(
    models_rig: Rig,
) -> None:
    slow = Answer(content=EDIT, delay_s=2)
    models_rig.write(answers=[slow, Answer(content=EDIT, repeat=True)], children=1, generations=3)
    run = models_rig.root / "run"
    port = models_rig.srv.port
    proc = subprocess.Popen(
        [*RUN, str(models_rig.recipe), "--out", str(run), "--quiet"],
        env={**os.environ, **models_rig.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not models_rig.stub.requests and time.monotonic() < deadline:
        time.sleep(0.05)  # the first proposal's call (answered in 2 s)
    models_rig.srv.stop()  # the provider goes away once it has answered that call
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    st = status_json(run)
    assert st["state"] == "failed"
    reason = st["reason"] if "reason" in st else str(st)
    assert "model 'proposer' failed 3 calls in a row" in reason
    assert f"stub-model at http://127.0.0.1:{port}/v1" in reason
    evs = events(run)
    abandoned = [e["data"] for e in evs if e["type"] == "candidate_abandoned"]
    assert abandoned and all(a["cause"] == "model_outage" for a in abandoned)
    assert not [e for e in evs if e["type"] == "candidate_rejected"]  # not the method's fault
    # resumed while the endpoint is still down: one line, the archive untouched
    before = (run / "events.jsonl").read_bytes()
    res = cli_proc("resume", run, "--quiet", env=models_rig.env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert (run / "events.jsonl").read_bytes() == before
    models_rig.srv = ServerThread(models_rig.stub.app, port=port).start()
    res = cli_proc("resume", run, "--quiet", env=models_rig.env, timeout=300)
    assert res.returncode == 0, res.stderr
    st = status_json(run)
    assert st["state"] == "finished" and st["model_check"]["calls"] == 2
    assert len(paid(ledger(run))) == models_rig.stub.stats.answered
