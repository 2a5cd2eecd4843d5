"""Models in the loop through the real CLI (e2e): resume at once after SIGKILL during a
model call waits for the killed driver's gateway, never pays twice and uses the paid answer;
status shows the ledger's unrecorded tail meanwhile; Ctrl-C stops the gateway after
recording the call in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer
from tests.support.cli import cli_proc, events, status_json
from tests.support.modelsrig import EDIT, Rig, checks, ledger, model_calls, paid

pytestmark = pytest.mark.e2e


def status_text(run: Path) -> str:
    """``status`` as one line of words (the console wraps long lines)."""
    return " ".join(cli_proc("status", run).stdout.split())


RUN = [sys.executable, "-m", "rsiframe.cli.main", "run"]


def test_resume_at_once_after_sigkill_during_a_model_call_waits_and_uses_the_paid_answer(
    models_rig: Rig,
) -> None:
    # sampled (llm_edit's default temperature): only the retake's same draws can match
    # answered in 30 s: the resume below starts well before the killed driver's gateway ends
    slow = Answer(content=EDIT, delay_s=30)
    models_rig.write(answers=[slow, Answer(content=EDIT, repeat=True)], children=1)
    run = models_rig.root / "run"
    proc = subprocess.Popen(
        [*RUN, str(models_rig.recipe), "--out", str(run), "--quiet"],
        env={**os.environ, **models_rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not models_rig.stub.requests and time.monotonic() < deadline:
        time.sleep(0.05)  # the proposal's call (the models' check is answered apart)
    assert len(models_rig.stub.requests) == 1, "the driver never made its model call"
    proc.send_signal(signal.SIGKILL)  # mid-call
    proc.wait(10)
    assert gateways_of(run), "the killed driver's gateway is still answering"
    t0 = time.monotonic()
    res = cli_proc("resume", run, "--quiet", env=models_rig.env, timeout=180)  # at once
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 > 10, gateways_of(run)
    assert "waiting up to" in res.stderr and "finished and recorded its calls" in res.stderr
    assert "already being driven" not in res.stderr
    entries = ledger(run)
    stats = models_rig.stub.stats
    assert stats.requests == 1  # the paid call was not paid again
    assert len(paid(entries)) == stats.answered == 1
    assert checks(models_rig.stub) == 2  # run, resume
    # the killed driver's call was recorded by its gateway, and is an event of the run
    assert entries[0]["candidate"] == "c0001" and entries[0]["status"] == 200
    # the retake (same parent, c0001's draws) asked the same: served from the ledger
    assert [e["cached"] for e in entries] == [False, True]
    assert entries[1]["digest"] == entries[0]["digest"]
    evs = events(run)
    proposed = {e["data"]["id"]: e["data"] for e in evs if e["type"] == "candidate_proposed"}
    retake = entries[1]["candidate"]
    assert proposed[retake]["draws"] == "c0001"
    assert retake in {e["data"]["id"] for e in evs if e["type"] == "candidate_mutated"}
    assert [c["seq"] for c in model_calls(run)] == [e["seq"] for e in entries]
    st = status_json(run)
    assert st["state"] == "finished" and st["model_calls"] == len(entries)
    assert st["model_calls_cached"] == 1
    assert st["model_check"]["tokens"] == stats.check_tokens
    tokens = stats.prompt_tokens + stats.completion_tokens
    assert sum(e["prompt_tokens"] + e["completion_tokens"] for e in entries) == tokens


def test_status_shows_the_ledgers_unrecorded_tail_between_a_kill_and_the_resume(
    models_rig: Rig,
) -> None:
    slow = Answer(content=EDIT, delay_s=2)
    models_rig.write(answers=[slow, Answer(content=EDIT, repeat=True)], children=1)
    run = models_rig.root / "run"
    proc = subprocess.Popen(
        [*RUN, str(models_rig.recipe), "--out", str(run), "--quiet"],
        env={**os.environ, **models_rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not models_rig.stub.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 30
    while gateways_of(run) and time.monotonic() < deadline:
        time.sleep(0.1)  # the gateway records the call it was answering, then exits
    assert len(paid(ledger(run))) == 1
    st = status_json(run)
    assert st["model_calls"] == 0  # no event holds it yet
    assert st["unrecorded"]["paid"] == 1 and st["unrecorded"]["tokens"] > 0
    assert "1 paid call not yet recorded" in status_text(run)
    res = cli_proc("resume", run, "--quiet", env=models_rig.env, timeout=180)
    assert res.returncode == 0, res.stderr
    st = status_json(run)
    assert st["unrecorded"] == {} and st["model_calls"] >= 1


def gateways_of(run: Path) -> list[int]:
    """Processes of a gateway serving ``run`` (its ledger folder on the command line)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rsiframe.gateway.process" in argv and str(run / "model-calls").encode() in argv:
            pids.append(int(cmdline.parent.name))
    return pids


def test_ctrl_c_stops_the_gateway_after_recording_the_call_in_flight(models_rig: Rig) -> None:
    models_rig.write(answers=[Answer(content=EDIT, delay_s=3, repeat=True)], children=1)
    run = models_rig.root / "run"
    argv = [
        sys.executable,
        "-m",
        "rsiframe.cli.main",
        "run",
        str(models_rig.recipe),
        "--out",
        str(run),
    ]
    proc = subprocess.Popen(
        [*argv, "--quiet"],
        env={**os.environ, **models_rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not models_rig.stub.requests and time.monotonic() < deadline:
        time.sleep(0.05)  # the models' check, then the proposal's call
    assert gateways_of(run), "the run's gateway is not running"
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    deadline = time.monotonic() + 15
    while gateways_of(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not gateways_of(run)  # stopped with the run
    assert status_json(run)["state"] == "interrupted"
    entries = ledger(run)
    assert len(paid(entries)) == models_rig.stub.stats.answered == 1  # the call was recorded
