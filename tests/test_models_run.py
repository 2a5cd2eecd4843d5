"""Models in the loop, through the real CLI: the run's gateway process, metering into events
and status, retries then rejection, budget exhaustion, resume without paying twice, and
the provider key kept out of every sandbox. The upstream is the scripted stub."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli, cli_proc, events, make_mini, status_json

from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.sandbox.bwrap import bwrap_works

KEY = "sk-provider-secret-0123456789"
EDIT = (
    "raise the level\nconfig.yaml\n```\n<<<<<<< SEARCH\nlevel: 1\n=======\nlevel: 5\n"
    ">>>>>>> REPLACE\n```\n"
)
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


@dataclass
class Rig:
    root: Path
    recipe: Path
    stub: StubLLM
    srv: ServerThread

    @property
    def env(self) -> dict[str, str]:
        return {"LLM_BASE_URL": self.srv.url, "LLM_API_KEY": KEY}

    def write(
        self,
        *,
        answers: list[Answer],
        mutate: dict[str, Any] | None = None,
        budget: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None,
        generations: int = 1,
        children: int = 2,
    ) -> None:
        self.stub.script = Script(answers=answers)
        self.stub.remaining = list(answers)
        data = yaml.safe_load(self.recipe.read_text())
        data["slots"]["mutate"] = mutate or {
            "operator": "llm_edit",
            "config": {"model": "proposer", "max_tokens": 200, "retries": 0},
        }
        data["budget"] = {"max_generations": generations, **(budget or {})}
        data["children_per_generation"] = children
        data["models"] = {
            "proposer": {
                "base_url_env": "LLM_BASE_URL",
                "api_key_env": "LLM_API_KEY",
                "model": "stub-model",
                "price": PRICE,
                "retries": 1,
                **(model or {}),
            }
        }
        self.recipe.write_text(yaml.safe_dump(data, sort_keys=False))

    def run(self, name: str = "run", *extra: str) -> Path:
        out = self.root / name
        res = cli_proc("run", self.recipe, "--out", out, "--quiet", *extra, env=self.env)
        assert res.returncode in (0, 1), res.stderr
        return out


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    mini = make_mini(tmp_path / "proj", generations=1, children=2)
    stub = StubLLM(Script())
    srv = ServerThread(stub.app).start()
    monkeypatch.delenv("LLM_API_KEY", raising=False)
    try:
        yield Rig(mini.root, mini.recipe, stub, srv)
    finally:
        srv.stop()


def ledger(run: Path) -> list[dict[str, Any]]:
    path = run / "model-calls" / "ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def model_calls(run: Path) -> list[dict[str, Any]]:
    return [e["data"] for e in events(run) if e["type"] == "model_call"]


def paid(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["status"] == 200 and not e["cached"]]


def test_every_call_is_metered_into_events_status_and_artifacts(rig: Rig) -> None:
    rig.write(answers=[Answer(content=EDIT, repeat=True)], mutate=None)
    run = rig.run()
    calls, entries = model_calls(run), ledger(run)
    assert [c["seq"] for c in calls] == [e["seq"] for e in entries] and calls
    # the gateway's own count equals the provider's (the stub's)
    stats = rig.stub.stats
    assert len(paid(entries)) == stats.requests == stats.answered
    tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    assert tokens == stats.prompt_tokens + stats.completion_tokens
    cost = (stats.prompt_tokens * 1.0 + stats.completion_tokens * 2.0) / 1e6
    st = status_json(run)
    assert st["model_tokens"] == tokens and st["model_calls"] == len(calls)
    assert st["cost_usd"] == pytest.approx(cost, abs=1e-6)
    assert st["models_by_slot"] == {
        "mutate": {"cost_usd": st["cost_usd"], "model_tokens": tokens, "model_calls": len(calls)}
    }
    assert st["budget"]["used"]["model_tokens"] == tokens
    for c in calls:  # linked to candidate and slot, request and response kept as artifacts
        assert c["slot"] == "mutate" and c["candidate"] in {x["id"] for x in st["candidates"]}
        for digest in (c["request"], c["response"]):
            hexd = digest.removeprefix("sha256:")
            body = (run / "artifacts" / "sha256" / hexd[:2] / hexd[2:]).read_bytes()
            assert json.loads(body)
    assert (
        json.loads(
            (
                run / "artifacts" / "sha256" / calls[0]["request"][7:9] / calls[0]["request"][9:]
            ).read_bytes()
        )["model"]
        == "proposer"
    )
    text = cli("status", run)
    assert f"models: ${cost:.4f}, {tokens} tokens" in text.stdout


@pytest.mark.parametrize(
    "bad", [Answer(status=500), Answer(malformed=True)], ids=["http500", "garbage"]
)
def test_a_call_failing_after_its_retries_rejects_the_child_and_the_run_goes_on(
    rig: Rig, bad: Answer
) -> None:
    # retries: 1 -> two attempts each; the first child's call fails twice, the second's works
    rig.write(answers=[bad, bad, Answer(content=EDIT, repeat=True)])
    # one child at a time: the stub answers in the order calls arrive, so with children in
    # flight the two failures could go one to each child (each then retried successfully)
    run = rig.run("run", "--set", "concurrency.candidates=1")
    st = status_json(run)
    assert st["state"] == "finished", st["reason"]
    kids = [c for c in st["candidates"] if c["parent"] is not None]
    first, second = kids[0], kids[1]
    assert first["state"] == "rejected"
    assert any("failed after 2 attempts" in r for r in first["reasons"]), first["reasons"]
    assert second["state"] in ("admitted", "declined")
    calls = model_calls(run)
    assert [c["status"] for c in calls][:1] == [502] and calls[0]["candidate"] == first["id"]
    assert rig.stub.stats.requests == 3


@pytest.mark.parametrize("by", ["tokens", "cost"])
def test_the_budget_fails_closed_from_the_gateways_count(rig: Rig, by: str) -> None:
    # a call is ~250 tokens (~$0.00027) and reserves ~426 (~$0.00063) first: the engine's
    # own estimate lets the second child start, and the gateway refuses its call
    limit = {"max_model_tokens": 600} if by == "tokens" else {"max_cost": 0.0007}
    rig.write(answers=[Answer(content=EDIT, repeat=True)], budget=limit, generations=3)
    run = rig.run()
    st = status_json(run)
    assert st["state"] == "budget_exhausted", st["reason"]
    assert "the model gateway refused a call" in st["reason"]
    refused = [c for c in model_calls(run) if c["status"] == 429]
    assert refused and refused[0]["code"] == ("max_model_tokens" if by == "tokens" else "max_cost")
    used = st["budget"]["used"]
    if by == "tokens":
        assert 0 < used["model_tokens"] <= 600
    else:
        assert 0 < used["cost"] <= 0.0007
    assert rig.stub.stats.requests == len(paid(ledger(run)))  # refused calls never left


def test_a_per_operation_allowance_rejects_that_child_only(rig: Rig) -> None:
    mutate = {
        "operator": "llm_edit",
        "config": {
            "model": "proposer",
            "max_tokens": 200,
            "retries": 0,
            "max_tokens_per_mutation": 100,
        },
    }
    rig.write(answers=[Answer(content=EDIT, repeat=True)], mutate=mutate)
    run = rig.run()
    st = status_json(run)
    assert st["state"] == "finished", st["reason"]  # an allowance is not the run's budget
    kids = [c for c in st["candidates"] if c["parent"] is not None]
    assert kids and all(c["state"] == "rejected" for c in kids)
    assert all("allowance of 100 tokens exhausted" in " ".join(c["reasons"]) for c in kids)
    assert rig.stub.stats.requests == 0


@pytest.mark.e2e
def test_resume_after_sigkill_during_a_model_call_never_pays_twice(rig: Rig) -> None:
    # temperature 0: the resumed run's identical request is served from the ledger
    slow = Answer(content=EDIT, delay_s=4)
    rig.write(answers=[slow, Answer(content=EDIT, repeat=True)], children=2)
    run = rig.root / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "run",
            str(rig.recipe),
            "--out",
            str(run),
            "--quiet",
        ],
        env={**os.environ, **rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while rig.stub.stats.requests == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rig.stub.stats.requests == 1, "the driver never made its model call"
    proc.send_signal(signal.SIGKILL)  # mid-call: the stub answers in 4 s
    proc.wait(10)
    res = cli_proc("resume", run, "--quiet", env=rig.env, timeout=180)
    assert res.returncode == 0, res.stderr
    entries = ledger(run)
    stats = rig.stub.stats
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


SANDBOX_CHECK = r"""
import glob, json, os, sys, urllib.request
key = bytes.fromhex(sys.argv[1])  # never the key itself on a command line
leaks = []
for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
    try:
        if key in open(path, "rb").read():
            leaks.append(path)
    except OSError:
        pass
for top in ("/tmp", os.environ.get("HOME", "/tmp"), os.environ["RSI_WORKDIR"], "/run", "/etc"):
    for root, _dirs, files in os.walk(top):
        for f in files:
            try:
                if key in open(os.path.join(root, f), "rb").read():
                    leaks.append(os.path.join(root, f))
            except OSError:
                pass
try:
    urllib.request.urlopen(sys.argv[2] + "/models", timeout=3)
    direct = "reached"
except Exception as exc:
    direct = "refused: " + type(exc).__name__
req = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "proposer", "messages": [{"role": "user", "content": "go"}],
                     "max_tokens": 50, "temperature": 0}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"},
)
answer = json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"]
print("LEAKS", leaks, "DIRECT", direct, "TOKEN", os.environ["OPENAI_API_KEY"][:4])
if not leaks and direct.startswith("refused") and answer == "level: 5":
    cfg = os.path.join(os.environ["RSI_WORKDIR"], "config.yaml")
    open(cfg, "w").write("level: 5\nstyle: plain\n")
"""


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot create a sandbox here")
def test_the_key_never_enters_a_sandbox_and_only_the_gateway_is_reachable(rig: Rig) -> None:
    command = (
        f"python3 -c {shlex.quote(SANDBOX_CHECK)} {KEY.encode().hex()} "
        f"{shlex.quote(rig.srv.url)} {{instruction}}"
    )
    mutate = {
        "operator": "agent_cli",
        "config": {"model": "proposer", "profile": "command", "command": command, "timeout_s": 60},
    }
    rig.write(answers=[Answer(content="level: 5", repeat=True)], mutate=mutate, children=1)
    run = rig.run()
    st = status_json(run)
    (kid,) = [c for c in st["candidates"] if c["parent"] is not None]
    assert kid["state"] in ("admitted", "declined"), kid["reasons"]  # every check held
    (call,) = model_calls(run)
    assert call["slot"] == "mutate" and call["candidate"] == kid["id"] and call["status"] == 200
    assert rig.stub.stats.requests == 1 and rig.stub.auth == [f"Bearer {KEY}"]
    # nor does anything in the run folder (the gateway's ledger and evidence included)
    for path in run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


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


@pytest.mark.e2e
def test_ctrl_c_stops_the_gateway_after_recording_the_call_in_flight(rig: Rig) -> None:
    rig.write(answers=[Answer(content=EDIT, delay_s=3, repeat=True)], children=1)
    run = rig.root / "run"
    argv = [sys.executable, "-m", "rsiframe.cli.main", "run", str(rig.recipe), "--out", str(run)]
    proc = subprocess.Popen(
        [*argv, "--quiet"],
        env={**os.environ, **rig.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while rig.stub.stats.requests == 0 and time.monotonic() < deadline:
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
    assert len(paid(entries)) == rig.stub.stats.answered == 1  # the call was recorded
