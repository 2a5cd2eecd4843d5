"""Models in the loop, through the real CLI: the run's gateway process, metering into events
and status, retries then rejection, budget exhaustion, resume without paying twice, and
the provider key kept out of every sandbox. The upstream is the scripted stub."""

from __future__ import annotations

import json
import shlex

import pytest

from rsiframe.gateway.stub import Answer
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.cli import cli, events, status_json
from tests.support.modelsrig import EDIT, PROVIDER_KEY, Rig, checks, ledger, model_calls, paid


def test_every_call_is_metered_into_events_status_and_artifacts(models_rig: Rig) -> None:
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)], mutate=None)
    run = models_rig.run()
    calls, entries = model_calls(run), ledger(run)
    assert [c["seq"] for c in calls] == [e["seq"] for e in entries] and calls
    # the gateway's own count equals the provider's (the stub's)
    stats = models_rig.stub.stats
    assert len(paid(entries)) == stats.requests == stats.answered  # the check is apart
    assert checks(models_rig.stub) == 1
    tokens = sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    st = status_json(run)
    assert tokens == stats.prompt_tokens + stats.completion_tokens
    assert st["model_check"]["tokens"] == stats.check_tokens  # metered apart, to the token
    cost = (stats.prompt_tokens * 1.0 + stats.completion_tokens * 2.0) / 1e6
    assert st["model_tokens"] == tokens and st["model_calls"] == len(calls)
    assert st["cost_usd"] == pytest.approx(cost, abs=1e-6)
    assert st["models_by_slot"] == {
        "mutate": {
            "cost_usd": st["cost_usd"],
            "model_tokens": tokens,
            "model_calls": len(calls),
            "cached_calls": 0,
        }
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
def test_a_call_failing_after_its_retries_abandons_the_child_as_an_outage_and_the_run_goes_on(
    models_rig: Rig, bad: Answer
) -> None:
    # retries: 1 -> two attempts each; the first child's call fails twice, the second's works
    models_rig.write(answers=[bad, bad, Answer(content=EDIT, repeat=True)])
    # one child at a time: the stub answers in the order calls arrive, so with children in
    # flight the two failures could go one to each child (each then retried successfully)
    run = models_rig.run("run", "--set", "concurrency.candidates=1")
    st = status_json(run)
    assert st["state"] == "finished", st["reason"]
    kids = [c for c in st["candidates"] if c["parent"] is not None]
    first, second = kids[0], kids[1]
    # the provider's failure, not the method's: no rejection, and the generation gets
    # another child in its place (one failure is no outage of the run)
    assert first["state"] == "abandoned"
    (gone,) = [e["data"] for e in events(run) if e["type"] == "candidate_abandoned"]
    assert gone["id"] == first["id"] and gone["cause"] == "model_outage"
    assert "failed after 2 attempts" in gone["reason"], gone["reason"]
    assert second["state"] in ("admitted", "declined") and len(kids) == 3
    calls = model_calls(run)
    assert [c["status"] for c in calls][:1] == [502] and calls[0]["candidate"] == first["id"]
    paid_calls = len(paid(ledger(run)))
    assert models_rig.stub.stats.requests == 2 + paid_calls


@pytest.mark.parametrize("by", ["tokens", "cost"])
def test_the_budget_fails_closed_from_the_gateways_count(models_rig: Rig, by: str) -> None:
    # a call is ~415 tokens (~$0.00044; the prompt shows the mutation context) and reserves
    # ~590 (~$0.0008) first: the engine's own estimate (what a call has cost) lets the second
    # child start, and the gateway refuses its call (its reservation does not fit)
    limit = {"max_model_tokens": 900} if by == "tokens" else {"max_cost": 0.001}
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)], budget=limit, generations=3)
    run = models_rig.run()
    st = status_json(run)
    assert st["state"] == "budget_exhausted", st["reason"]
    assert "the model gateway refused a call" in st["reason"]
    refused = [c for c in model_calls(run) if c["status"] == 429]
    assert refused and refused[0]["code"] == ("max_model_tokens" if by == "tokens" else "max_cost")
    used = st["budget"]["used"]
    if by == "tokens":
        assert 0 < used["model_tokens"] <= 900
    else:
        assert 0 < used["cost"] <= 0.001
    assert models_rig.stub.stats.requests == len(paid(ledger(run)))  # refused calls never left


def test_a_per_operation_allowance_rejects_that_child_only(models_rig: Rig) -> None:
    mutate = {
        "operator": "llm_edit",
        "config": {
            "model": "proposer",
            "max_tokens": 200,
            "retries": 0,
            "max_tokens_per_mutation": 100,
        },
    }
    models_rig.write(answers=[Answer(content=EDIT, repeat=True)], mutate=mutate)
    run = models_rig.run()
    st = status_json(run)
    assert st["state"] == "finished", st["reason"]  # an allowance is not the run's budget
    kids = [c for c in st["candidates"] if c["parent"] is not None]
    assert kids and all(c["state"] == "rejected" for c in kids)
    assert all("allowance of 100 tokens exhausted" in " ".join(c["reasons"]) for c in kids)
    assert models_rig.stub.stats.requests == 0


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
def test_the_key_never_enters_a_sandbox_and_only_the_gateway_is_reachable(models_rig: Rig) -> None:
    command = (
        f"python3 -c {shlex.quote(SANDBOX_CHECK)} {PROVIDER_KEY.encode().hex()} "
        f"{shlex.quote(models_rig.srv.url)} {{instruction}}"
    )
    mutate = {
        "operator": "agent_cli",
        "config": {"model": "proposer", "profile": "command", "command": command, "timeout_s": 60},
    }
    models_rig.write(answers=[Answer(content="level: 5", repeat=True)], mutate=mutate, children=1)
    run = models_rig.run()
    st = status_json(run)
    (kid,) = [c for c in st["candidates"] if c["parent"] is not None]
    assert kid["state"] in ("admitted", "declined"), kid["reasons"]  # every check held
    (call,) = model_calls(run)
    assert call["slot"] == "mutate" and call["candidate"] == kid["id"] and call["status"] == 200
    assert models_rig.stub.stats.requests == 1 and models_rig.stub.auth == [
        f"Bearer {PROVIDER_KEY}"
    ]
    # nor does anything in the run folder (the gateway's ledger and evidence included)
    for path in run.rglob("*"):
        if path.is_file():
            assert PROVIDER_KEY.encode() not in path.read_bytes(), path
