"""The gateway's bounds (issue 20, items 3-5), against the stub as a provider that honours
``n``, ``best_of`` and the output limits it is sent: every token is bound to its models;
a reservation covers everything that multiplies or extends the output, so neither the
run's budget nor an operation's allowance can be overdrawn through one call; malformed
limits are refused; a missing limit is added and said; provider excess is not charged."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from rsiframe.gateway.app import LIMITS_HEADER, Gateway, Ledger, Limits
from rsiframe.gateway.bounds import DEFAULT_MAX_TOKENS, LimitRefused, output_bound
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.recipe.models import ModelSpec, named_models

MSG = [{"role": "user", "content": "please fix the function"}]
#: $40 per million tokens: the review's 25,601 tokens cost about $1.02
PRICE = {"input_per_mtok": 40.0, "output_per_mtok": 40.0}
BUDGET = Limits(max_model_tokens=5000, max_cost=0.01)


@dataclass
class Rig:
    stub: StubLLM
    gw: Gateway
    folder: Path

    def post(self, path: str, body: dict, token: str | None = None) -> httpx.Response:
        token = token or self.gw.consumer("harness", candidate="c1", slot="evaluate").token
        h = {"Authorization": f"Bearer {token}"}
        return httpx.post(self.gw.url + path, json=body, headers=h, timeout=60)

    def entries(self) -> list[dict]:
        path = self.folder / "ledger.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def within_budget(self) -> None:
        """The provider's own count (what would be billed) never passes the budget."""
        billed = self.stub.stats.prompt_tokens + self.stub.stats.completion_tokens
        tokens, cost = self.gw.limits.max_model_tokens, self.gw.limits.max_cost
        assert tokens is None or billed <= tokens, billed
        assert cost is None or billed * 40 / 1e6 <= cost + 1e-9
        assert tokens is None or self.gw.ledger.totals.tokens <= tokens
        assert cost is None or self.gw.ledger.totals.cost_usd <= cost + 1e-9


def _spec(url: str, model: str = "up", **kw) -> ModelSpec:
    return ModelSpec.model_validate(
        {"base_url": url, "model": model, "price": PRICE, "retries": 0, **kw}
    )


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    answers, limits = getattr(request, "param", ([Answer(fill=True, repeat=True)], BUDGET))
    stub = StubLLM(Script(answers=answers))
    srv = ServerThread(stub.app).start()
    specs = {"weak": _spec(srv.url, "weak-up"), "strong": _spec(srv.url, "strong-up")}
    gw = Gateway(specs, Ledger(tmp_path / "gw"), limits=limits, retry_backoff_s=0.01).start()
    try:
        yield Rig(stub, gw, tmp_path / "gw")
    finally:
        gw.stop()
        srv.stop()


def rigged(answers: list[Answer], limits: Limits = BUDGET) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("rig", [(answers, limits)], indirect=True)


def chat(**kw: object) -> dict:
    return {"model": "weak", "messages": MSG, "temperature": 1, **kw}


# -- item 4: the reservation bounds what is forwarded -----------------------------------


@rigged([Answer(content="x" * 800, repeat=True)])
def test_n_128_is_reserved_as_128_choices_and_refused_before_the_provider(rig: Rig) -> None:
    r = rig.post("/chat/completions", chat(n=128, max_tokens=200))  # the review: 25,601 billed
    assert r.status_code == 429 and r.json()["error"]["code"] in ("max_model_tokens", "max_cost")
    assert rig.stub.stats.requests == 0
    (e,) = rig.entries()
    assert e["status"] == 429 and e["completion_tokens"] == 0
    ok = rig.post("/chat/completions", chat(n=2, max_tokens=30))  # 2 x 30 fits
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 2
    assert rig.entries()[-1]["completion_tokens"] == rig.stub.stats.completion_tokens == 60
    rig.within_budget()


def test_max_completion_tokens_without_max_tokens_is_what_is_reserved(rig: Rig) -> None:
    r = rig.post("/chat/completions", chat(max_completion_tokens=100_000))
    assert r.status_code == 429 and rig.stub.stats.requests == 0
    r = rig.post("/chat/completions", chat(max_completion_tokens=50))
    assert r.status_code == 200 and LIMITS_HEADER not in r.headers  # forwarded as sent
    assert rig.stub.requests[-1].get("max_tokens") is None
    assert rig.entries()[-1]["reserved_tokens"] >= 50
    assert rig.stub.stats.completion_tokens == 50
    rig.within_budget()


@rigged([Answer(content="slow", delay_s=1.0), Answer(fill=True, repeat=True)])
def test_a_negative_limit_is_refused_and_reserves_nothing_for_a_concurrent_call(
    rig: Rig,
) -> None:
    first: list[httpx.Response] = []
    t = threading.Thread(
        target=lambda: first.append(rig.post("/chat/completions", chat(max_tokens=-1_000_000)))
    )
    t.start()
    time.sleep(0.3)  # the negative call would be in flight now
    big = rig.post("/chat/completions", chat(max_tokens=1_000_000))
    t.join()
    assert first[0].status_code == 400 and first[0].json()["error"]["code"] == "invalid_limit"
    assert big.status_code == 429
    assert rig.stub.stats.requests == 0
    codes = sorted(e["code"] for e in rig.entries())
    assert codes == ["invalid_limit", "max_model_tokens"]
    rig.within_budget()


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": 0},
        {"max_tokens": 1.5},
        {"max_tokens": "100"},
        {"max_tokens": True},
        {"n": 0},
        {"n": -3},
        {"max_completion_tokens": -1},
        {"best_of": 2.0},
    ],
)
def test_malformed_limits_are_refused_with_400_and_recorded(rig: Rig, bad: dict) -> None:
    r = rig.post("/chat/completions", chat(**bad))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_limit"
    assert rig.stub.stats.requests == 0
    (e,) = rig.entries()
    assert (e["status"], e["code"]) == (400, "invalid_limit") and e["request"]


@rigged([Answer(fill=True, repeat=True)], Limits(max_model_tokens=10_000))
def test_a_missing_limit_is_added_to_the_forwarded_body_and_said(rig: Rig) -> None:
    r = rig.post("/chat/completions", chat())
    assert r.status_code == 200
    assert r.headers[LIMITS_HEADER] == f"max_tokens={DEFAULT_MAX_TOKENS}"
    assert rig.stub.requests[-1]["max_tokens"] == DEFAULT_MAX_TOKENS
    assert rig.stub.stats.completion_tokens == DEFAULT_MAX_TOKENS  # not the provider's 100,000
    assert rig.entries()[-1]["rewritten"] == f"max_tokens={DEFAULT_MAX_TOKENS}"
    rig.within_budget()


@rigged([Answer(fill=True, repeat=True)], Limits(max_model_tokens=20_000))
def test_completions_count_prompts_n_and_best_of(rig: Rig) -> None:
    body = {"model": "weak", "prompt": ["a", "b", "c"], "n": 2, "max_tokens": 4000}
    assert rig.post("/completions", body).status_code == 429  # 3 prompts x 2 x 4000
    body = {"model": "weak", "prompt": "a", "best_of": 8, "max_tokens": 3000}
    assert rig.post("/completions", body).status_code == 429  # 8 generated x 3000
    ok = rig.post("/completions", {"model": "weak", "prompt": "a", "best_of": 3, "max_tokens": 10})
    assert ok.status_code == 200 and rig.stub.stats.completion_tokens == 30
    assert rig.stub.stats.requests == 1


@rigged([Answer(fill=True, repeat=True)], Limits(max_model_tokens=10_000))
def test_responses_and_messages_limits(rig: Rig, tmp_path: Path) -> None:
    big = {"model": "weak", "input": "hi", "max_output_tokens": 100_000}
    assert rig.post("/responses", big).status_code == 429
    r = rig.post("/responses", {"model": "weak", "input": "hi"})
    assert r.status_code == 200 and r.headers[LIMITS_HEADER] == "max_output_tokens=4096"
    assert rig.stub.requests[-1]["max_output_tokens"] == DEFAULT_MAX_TOKENS
    srv = ServerThread(rig.stub.app).start()
    gw = Gateway(
        {"c": _spec(srv.url, api="anthropic")}, Ledger(tmp_path / "a"), limits=rig.gw.limits
    ).start()
    try:
        h = {"x-api-key": gw.consumer("claude").token}
        no_limit = httpx.post(gw.url + "/messages", json={"model": "c", "messages": MSG}, headers=h)
        assert no_limit.status_code == 400 and "max_tokens is required" in no_limit.text
        over = {"model": "c", "messages": MSG, "max_tokens": 100_000}
        assert httpx.post(gw.url + "/messages", json=over, headers=h).status_code == 429
    finally:
        gw.stop()
        srv.stop()
    assert rig.stub.stats.requests == 1


@rigged([Answer(fill=True, repeat=True)], Limits(max_model_tokens=10_000))
def test_streaming_calls_follow_the_same_rules(rig: Rig) -> None:
    assert (
        rig.post("/chat/completions", chat(stream=True, n=128, max_tokens=300)).status_code == 429
    )
    big = chat(stream=True, max_completion_tokens=100_000)
    assert rig.post("/chat/completions", big).status_code == 429
    assert rig.post("/chat/completions", chat(stream=True, max_tokens=-5)).status_code == 400
    r = rig.post("/chat/completions", chat(stream=True))
    assert r.status_code == 200 and r.headers[LIMITS_HEADER] == "max_tokens=4096"
    assert rig.stub.requests[-1]["max_tokens"] == DEFAULT_MAX_TOKENS
    assert rig.entries()[-1]["completion_tokens"] == DEFAULT_MAX_TOKENS
    assert rig.stub.stats.requests == 1
    rig.within_budget()


@rigged([Answer(tokens=3000, repeat=True)], Limits(max_model_tokens=100_000))
@pytest.mark.parametrize("stream", [False, True])
def test_provider_excess_is_recorded_as_a_violation_and_not_charged(rig: Rig, stream: bool) -> None:
    r = rig.post("/chat/completions", chat(max_tokens=100, stream=stream))
    assert r.status_code == 200
    (e,) = rig.entries()
    assert e["completion_tokens"] == 100 and e["excess_tokens"] == 2900
    assert e["violation"].startswith("provider_excess")
    assert e["cost_usd"] == pytest.approx((e["prompt_tokens"] + 100) * 40 / 1e6)
    assert e["excess_cost_usd"] == pytest.approx(2900 * 40 / 1e6)
    assert rig.gw.ledger.totals.tokens == e["prompt_tokens"] + 100


def test_output_bound_unit() -> None:
    b = output_bound("/v1/chat/completions", {"max_tokens": 10, "max_completion_tokens": 30})
    assert (b.per_choice, b.choices, b.rewritten) == (30, 1, None)
    b = output_bound("/v1/completions", {"prompt": [[1, 2], [3]], "n": 2, "max_tokens": 5})
    assert b.tokens == 20
    assert output_bound("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 5}).tokens == 5
    assert output_bound("/v1/chat/completions", {"max_tokens": None}).rewritten
    with pytest.raises(LimitRefused):
        output_bound("/v1/messages", {})


# -- item 3: a token calls only the models its consumer was given ------------------------


@rigged(
    [
        Answer(content="weak says 1", model="weak-up", repeat=True),
        Answer(content="strong says 6", model="strong-up", repeat=True),
    ],
    Limits(),
)
def test_a_sandbox_token_calls_only_its_model(rig: Rig) -> None:
    ep = rig.gw.sandbox_endpoint("evaluate:train:c1", model="weak", candidate="c1", slot="evaluate")
    ok = rig.post("/chat/completions", chat(max_tokens=10), token=ep.token)
    assert ok.json()["choices"][0]["message"]["content"] == "weak says 1"
    swap = rig.post("/chat/completions", {**chat(max_tokens=10), "model": "strong"}, token=ep.token)
    assert swap.status_code == 403 and swap.json()["error"]["code"] == "model_not_allowed"
    models = httpx.get(
        rig.gw.url + "/models", headers={"Authorization": f"Bearer {ep.token}"}
    ).json()
    assert [m["id"] for m in models["data"]] == ["weak"]
    assert [r["model"] for r in rig.stub.requests] == ["weak-up"]  # strong never asked
    refused = rig.entries()[-1]
    assert (refused["status"], refused["code"], refused["model"]) == (
        403,
        "model_not_allowed",
        "strong",
    )
    assert refused["candidate"] == "c1" and refused["slot"] == "evaluate"
    report = rig.gw.revoke_endpoints(ep)
    assert (
        report["models"]["weak"]["calls"] == 1 and report["models"]["weak"]["completion_tokens"] > 0
    )
    assert report["models"]["strong"] == {
        "calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached": 0,
        "refused": 1,
    }


@rigged([Answer(content="ok", repeat=True)], Limits())
def test_an_operator_token_calls_only_the_models_its_config_names(rig: Rig) -> None:
    c = rig.gw.consumer("mutate:c2", candidate="c2", slot="mutate", models=["weak"])
    assert rig.post("/chat/completions", chat(max_tokens=5), token=c.token).status_code == 200
    swap = {**chat(max_tokens=5), "model": "strong"}
    assert rig.post("/chat/completions", swap, token=c.token).status_code == 403
    none = rig.gw.consumer("gate:c2", slot="gate", models=[])
    assert rig.post("/chat/completions", chat(max_tokens=5), token=none.token).status_code == 403
    assert rig.post("/chat/completions", {"model": "nope"}, token=c.token).status_code == 404


def test_named_models_reads_nested_configs() -> None:
    cfg = {
        "model": "a",
        "judge_model": "b",
        "config": {"model": "c"},
        "models": ["d", 1],
        "critic_models": ["e"],
        "other": "f",
    }
    assert named_models(cfg) == {"a", "b", "c", "d", "e"}


# -- item 5: one operation's tokens share one allowance ---------------------------------


@rigged([Answer(content="y" * 40, repeat=True)], Limits())
def test_an_allowance_holds_across_n_and_the_operations_tokens(rig: Rig) -> None:
    op = rig.gw.consumer("mutate:c3", candidate="c3", slot="mutate", models=["weak"], allowance=500)
    ep = rig.gw.sandbox_endpoint("mutate:c3:agent", model="weak", share=op.token)
    r = rig.post("/chat/completions", chat(n=64, max_tokens=100), token=ep.token)
    assert r.status_code == 429 and r.json()["error"]["code"] == "allowance"
    assert rig.post("/chat/completions", chat(max_tokens=300), token=ep.token).status_code == 200
    again = rig.post("/chat/completions", chat(max_tokens=480), token=op.token)  # same pool
    assert again.status_code == 429 and "allowance of 500 tokens" in again.text
    assert rig.stub.stats.prompt_tokens + rig.stub.stats.completion_tokens <= 500
    report = rig.gw.revoke_endpoints(ep)
    assert "allowance" in report["refusals"]


# -- item 3: the certificate names the models the evaluation called ------------------------

AGENT = """
import json, os, urllib.error, urllib.request
def ask(model):
    body = {"model": model, "messages": [{"role": "user", "content": "six times seven?"}],
            "max_tokens": 8, "temperature": 0}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps(body).encode(), {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                    "Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
    except urllib.error.HTTPError:
        return None
answers = [ask("strong"), ask(os.environ["RSI_MODEL"])]
open(os.path.join(os.environ["RSI_APP"], "answer.txt"), "w").write(answers[0] or answers[1])
"""
TEST_SH = """#!/bin/bash
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null)
if [ "$got" = 42 ]; then r=1; else r=0; fi
echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"
"""


@rigged(
    [
        Answer(content="41", model="weak-up", repeat=True),
        Answer(content="42", model="strong-up", repeat=True),
    ],
    Limits(),
)
def test_the_certificate_names_the_models_the_evaluation_called(rig: Rig, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rsiframe.certs.records import parse_statement
    from rsiframe.certs.signing import Signer
    from rsiframe.engine.certify import Binding, FinishedEvaluation, certify
    from rsiframe.engine.evaluation import TaskRunner
    from rsiframe.evaluators.local import LocalEngine
    from rsiframe.recipe.evaluator import LocalEngineConfig
    from rsiframe.slots.calls import Timings
    from rsiframe.tasks.taskset import TaskSet

    t = tmp_path / "tasks" / "t1"
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n')
    (t / "instruction.md").write_text("Six times seven?\n")
    (t / "tests" / "test.sh").write_text(TEST_SH)
    cand = tmp_path / "candidate"
    cand.mkdir()
    (cand / "agent.py").write_text(AGENT)
    cfg = LocalEngineConfig(
        agent='python3 "$RSI_CANDIDATE/agent.py"', sandbox="process", model="weak"
    )  # type: ignore[arg-type]
    engine = LocalEngine(cfg, tmp_path / "work")
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        blobs[f"sha256:{len(blobs)}"] = data
        return f"sha256:{len(blobs) - 1}"

    ts = TaskSet.load(tmp_path / "tasks")
    runner = TaskRunner(engine, ts, put, print, None, None, None, Timings(), gateway=rig.gw)  # type: ignore[arg-type]
    try:
        out = runner.run("c7", "train", cand, ["t1"])
    finally:
        engine.close()
    assert out.runs["t1"].reward == 0.0  # strong's 42 never came: weak's 41 was written
    assert [r["model"] for r in rig.stub.requests] == ["weak-up"]
    assert out.models_called is not None
    assert out.models_called["strong"]["refused"] == 1 and out.models_called["strong"]["calls"] == 0
    assert out.models_called["weak"]["calls"] == 1
    assert out.models_called["weak"]["completion_tokens"] == rig.stub.stats.completion_tokens
    done = FinishedEvaluation(
        "c7",
        "a" * 40,
        "b" * 40,
        None,
        "train",
        0,
        {"t1": 0.0},
        {},
        {},
        None,
        0.0,
        1.0,
        models_called=out.models_called,
    )
    signer = Signer(Ed25519PrivateKey.generate())
    ev = certify(done, Binding("run", "r", "e", "t", "process"), signer)
    record = parse_statement(signer.public.open(ev.envelope))
    assert record.predicate.models_called == out.models_called
