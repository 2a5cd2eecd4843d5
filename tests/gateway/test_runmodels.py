"""Models in the loop, through the real CLI: the run's gateway process, metering into events
and status, retries then rejection, budget exhaustion, resume without paying twice, and
the provider key kept out of every sandbox. The upstream is the scripted stub."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

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


#: a mutator whose every child raises the level from the seed's 1
RAISE_LEVEL = {
    "operator": "knobs",
    "config": {"knobs": [{"file": "config.yaml", "key": "level", "range": [2, 9], "step": 1}]},
}

#: a candidate's agent that asks the evaluation's model once per task (through the run's
#: gateway, as ``evaluator.config.model`` gives it), then answers with its level knob
ASKING_AGENT = """import os, yaml
from openai import OpenAI
OpenAI(max_retries=0).chat.completions.create(
    model=os.environ["RSI_MODEL"], max_tokens=8,
    messages=[{"role": "user", "content": "which level?"}])
here = os.path.dirname(os.path.abspath(__file__))
open("answer.txt", "w").write(str(yaml.safe_load(open(here + "/config.yaml"))["level"]))
"""


def test_a_token_bound_run_whose_agents_call_the_model_ends_with_its_sealed_score(
    models_rig: Rig,
) -> None:
    """The budget holds, for the champion's sealed evaluation, its tasks at the run's own
    tokens per task: the run stops proposing before its evaluations could spend them, and
    the anchor is evaluated (before the hold, such a run ran dry and lost its sealed score)."""
    (models_rig.root / "seed" / "agent.py").write_text(ASKING_AGENT)
    # every child raises the level from the seed's 1, so the first one beats the seed
    models_rig.write(answers=[Answer(content="five", repeat=True)], mutate=RAISE_LEVEL)
    data = yaml.safe_load(models_rig.recipe.read_text())
    data["evaluator"]["config"]["model"] = "proposer"
    data["evaluator"]["config"]["sandbox"] = "process"
    data["budget"] = {"max_generations": 20}
    models_rig.recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    probe = model_calls(models_rig.run("probe", "--set", "budget.max_generations=0"))
    # the seed's ten tasks, one call each: a spent, r reserved (what the gateway admits on)
    assert len(probe) == 10 and len({c["reserved_tokens"] for c in probe}) == 1
    a = probe[0]["prompt_tokens"] + probe[0]["completion_tokens"]
    r = probe[0]["reserved_tokens"]
    assert r > a
    # a new child may start while its 8 tasks and the anchor's 2 fit at r each: after the
    # seed (10 a) and 3 children (24 a), not a fourth
    limit = 26 * a + 10 * r + a // 2
    data["budget"]["max_model_tokens"] = limit
    models_rig.recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    run = models_rig.run()
    st = status_json(run)
    assert st["state"] == "budget_exhausted", st["reason"]
    assert "the champion's sealed evaluation" in st["reason"]
    assert [c["id"] for c in st["candidates"]] == ["c0000", "c0001", "c0002", "c0003"]
    champ = next(c for c in st["candidates"] if c["id"] == st["champion"])
    assert champ["id"] != "c0000" and "sealed" in champ["scores"], champ
    calls = model_calls(run)
    assert [c for c in calls if c["status"] != 200] == []  # no call was refused
    sealed = [c for c in calls if c["consumer"] == f"evaluate:sealed:{champ['id']}"]
    assert len(sealed) == 2  # the anchor's two tasks, paid from the hold
    assert st["budget"]["used"]["model_tokens"] == 36 * a <= limit


#: the seed's agent (level 1) asks for 8 output tokens a call; any child's, for 400
GREEDY_AGENT = ASKING_AGENT.replace(
    "import os, yaml",
    "import os, yaml\nlevel = yaml.safe_load(open(os.path.dirname(__file__) + '/config.yaml'))"
    "['level']",
).replace("max_tokens=8", "max_tokens=8 if level == 1 else 400")


def test_an_evaluation_whose_agent_the_budget_refused_is_not_certified(models_rig: Rig) -> None:
    """A task that failed because the gateway refused its agent a call for the run's budget
    says nothing about the candidate: that attempt fails (its evidence kept) and no
    certificate carries the budget's score; the run ends budget_exhausted. Here the
    budget lets a child start on the seed's tokens per task, and the child's agent asks
    for far more."""
    (models_rig.root / "seed" / "agent.py").write_text(GREEDY_AGENT)
    # a seed call ~4 tokens (11 reserved): the seed 40, a child's 8 tasks and the anchor's 2
    # at 11 each fit in 230; a child's call reserves ~400 and does not
    models_rig.write(
        answers=[Answer(content="five", repeat=True)],
        mutate=RAISE_LEVEL,
        budget={"max_model_tokens": 230},
        children=1,
        generations=3,
    )
    data = yaml.safe_load(models_rig.recipe.read_text())
    data["evaluator"]["config"]["model"] = "proposer"
    data["evaluator"]["config"]["sandbox"] = "process"
    models_rig.recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    run = models_rig.run()
    calls = model_calls(run)
    assert [c["status"] for c in calls if c["candidate"] == "c0000"] == [200] * 10
    kid = [c for c in calls if c["candidate"] == "c0001"]
    assert kid and {(c["status"], c["code"]) for c in kid} == {(429, "max_model_tokens")}
    evs = events(run)
    certified = {
        (e["data"]["id"], e["data"]["split"]) for e in evs if e["type"] == "evaluation_certified"
    }
    assert certified == {("c0000", s) for s in ("train", "gate", "sealed")}
    (failed,) = [e["data"] for e in evs if e["type"] == "evaluation_failed"]
    assert failed["id"] == "c0001" and failed["split"] == "train"
    assert "refused this evaluation's agent a call for the run's budget" in failed["error"]
    st = status_json(run)
    assert st["state"] == "budget_exhausted", st["reason"]  # the refusal ends the run
    assert "the model gateway refused a call" in st["reason"]
    kid_row = next(c for c in st["candidates"] if c["id"] == "c0001")
    assert kid_row["state"] == "failed"
    assert set(kid_row["scores"].values()) == {None}
