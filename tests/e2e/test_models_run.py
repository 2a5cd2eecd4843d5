"""Models in the loop through the real CLI (e2e): resume after SIGKILL during a model call
never pays twice; Ctrl-C stops the gateway after recording the call in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer
from tests.support.cli import cli_proc, status_json
from tests.support.modelsrig import EDIT, Rig, ledger, model_calls, paid

pytestmark = pytest.mark.e2e


def test_resume_after_sigkill_during_a_model_call_never_pays_twice(models_rig: Rig) -> None:
    # temperature 0: the resumed run's identical request is served from the ledger
    slow = Answer(content=EDIT, delay_s=4)
    models_rig.write(answers=[slow, Answer(content=EDIT, repeat=True)], children=2)
    run = models_rig.root / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "run",
            str(models_rig.recipe),
            "--out",
            str(run),
            "--quiet",
        ],
        env={**os.environ, **models_rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while models_rig.stub.stats.requests == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert models_rig.stub.stats.requests == 1, "the driver never made its model call"
    proc.send_signal(signal.SIGKILL)  # mid-call: the stub answers in 4 s
    proc.wait(10)
    res = cli_proc("resume", run, "--quiet", env=models_rig.env, timeout=180)
    assert res.returncode == 0, res.stderr
    entries = ledger(run)
    stats = models_rig.stub.stats
    assert stats.requests == 1  # the call paid before the kill was not paid again
    assert len(paid(entries)) == stats.answered == 1
    # the killed driver's call was recorded by its gateway, and is an event of the run
    assert entries[0]["candidate"] == "c0001" and entries[0]["status"] == 200
    # the next child asked the same (temperature 0, same parent): served from the ledger
    assert [e["cached"] for e in entries] == [False, True]
    assert [c["seq"] for c in model_calls(run)] == [e["seq"] for e in entries]
    st = status_json(run)
    assert st["state"] == "finished" and st["model_calls"] == len(entries)
    tokens = stats.prompt_tokens + stats.completion_tokens
    assert sum(e["prompt_tokens"] + e["completion_tokens"] for e in entries) == tokens


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
    while models_rig.stub.stats.requests == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
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
