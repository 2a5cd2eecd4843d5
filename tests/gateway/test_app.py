"""The model gateway against the scripted stub: forwarding, metering, retries, budgets,
the digest cache, streaming, pass-through, and the sandbox's view (token, never the key)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from rsiframe import llm
from rsiframe.gateway.app import Gateway, Ledger, Limits
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM, count_tokens
from rsiframe.recipe.models import ModelSpec
from rsiframe.sandbox.bwrap import Mount, bwrap_works, make_sandbox
from tests.support.gateway import MSG, PROVIDER_KEY

PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}  # big, so costs are visible


needs_bwrap = pytest.mark.skipif(
    not bwrap_works(),
    reason="platform limit: bubblewrap is not installed or cannot make namespaces",
)


def scripted(answers: list[Answer], limits: Limits, spec_kw: dict) -> pytest.MarkDecorator:
    """The rig for one test: the stub's script, the budget, and ModelSpec overrides."""
    return pytest.mark.parametrize("rig", [(answers, limits, spec_kw)], indirect=True)


@dataclass
class Rig:
    stub: StubLLM
    srv: ServerThread
    gw: Gateway
    folder: Path

    def client(self, **kw) -> openai.OpenAI:
        token = self.gw.consumer("test", candidate="c1", slot="mutate").token
        return openai.OpenAI(base_url=self.gw.url, api_key=token, max_retries=0, **kw)

    def entries(self) -> list[dict]:
        lines = (self.folder / "ledger.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]


def _spec(url: str, **kw) -> ModelSpec:
    data = {"base_url": url, "api_key_env": "STUB_KEY", "model": "upstream-name", "price": PRICE}
    return ModelSpec.model_validate({**data, "timeout_s": 2, "retries": 2, **kw})


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    answers, limits, spec_kw = request.param  # (script answers, budget limits, ModelSpec keys)
    stub = StubLLM(Script(answers=answers))
    srv = ServerThread(stub.app).start()
    folder = tmp_path / "gw"
    gw = Gateway(
        {"p": _spec(srv.url, **spec_kw)},
        Ledger(folder),
        limits=limits,
        environ={"STUB_KEY": PROVIDER_KEY},
        retry_backoff_s=0.01,
    ).start()
    try:
        yield Rig(stub, srv, gw, folder)
    finally:
        gw.stop()
        srv.stop()


@scripted([Answer(content="the answer")], Limits(), {})
def test_forwards_meters_and_records_with_the_providers_key_only(rig: Rig) -> None:
    c = rig.client()
    r = c.chat.completions.create(model="p", messages=MSG, temperature=0)
    assert r.choices[0].message.content == "the answer"
    assert rig.stub.requests[0]["model"] == "upstream-name"  # declared name substituted
    assert rig.stub.auth == [f"Bearer {PROVIDER_KEY}"]  # the key goes upstream, the token does not
    (e,) = rig.entries()
    assert (e["status"], e["model"], e["consumer"], e["candidate"], e["slot"]) == (
        200,
        "p",
        "test",
        "c1",
        "mutate",
    )
    assert e["prompt_tokens"] == rig.stub.stats.prompt_tokens == count_tokens(MSG[0]["content"])
    assert e["completion_tokens"] == rig.stub.stats.completion_tokens
    assert e["cost_usd"] == pytest.approx(
        (e["prompt_tokens"] * 1000 + e["completion_tokens"] * 2000) / 1e6
    )
    evidence = rig.folder / "evidence"
    assert json.loads((evidence / e["request"]).read_text())["messages"] == MSG
    assert "the answer" in (evidence / e["response"]).read_text()
    assert PROVIDER_KEY not in (rig.folder / "ledger.jsonl").read_text()


@scripted([Answer(status=500)] * 3, Limits(), {})
def test_retries_then_an_error_recorded_at_no_cost(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    with pytest.raises(llm.ModelError, match="failed after 3 attempts: HTTP 500"):
        client.chat("p", MSG)
    assert rig.stub.stats.requests == 3
    (e,) = rig.entries()
    assert (e["status"], e["cost_usd"], e["prompt_tokens"]) == (502, 0.0, 0)


@scripted([Answer(status=429), Answer(malformed=True), Answer(content="third time")], Limits(), {})
def test_rate_limit_and_garbage_are_retried(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    assert client.chat("p", MSG).text == "third time"
    assert rig.stub.stats.requests == 3
    assert [e["status"] for e in rig.entries()] == [200]


@scripted([Answer(content="slow", delay_s=5)] * 2, Limits(), {"retries": 1})
def test_a_timeout_is_retried_then_reported(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    with pytest.raises(llm.ModelError, match="timed out after 2s"):
        client.chat("p", MSG)


@scripted([Answer(content="x" * 40, repeat=True)], Limits(max_model_tokens=150), {})
def test_budget_exhausted_by_tokens_fails_closed_before_the_provider(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    first = client.chat("p", MSG, max_tokens=100)  # reserves prompt + 100 <= 150
    spent = first.prompt_tokens + first.completion_tokens
    with pytest.raises(llm.BudgetExhausted, match="model token budget exhausted"):
        client.chat("p", [*MSG, {"role": "user", "content": "again"}], max_tokens=140)
    assert rig.stub.stats.requests == 1  # the refused call never reached the provider
    assert rig.gw.ledger.totals.tokens == spent
    assert [e["status"] for e in rig.entries()] == [200, 429]


@scripted([Answer(content="x" * 40, repeat=True)], Limits(max_model_tokens=300), {})
def test_tokens_held_for_the_anchor_are_spent_by_the_anchor_alone(rig: Rig) -> None:
    """The engine holds part of the budget for the champion's sealed evaluation: any other
    consumer is refused a call that would reach into it, before the provider; an anchor
    consumer's call is not."""
    rig.gw.held = 150
    other = llm.GatewayClient(rig.gw.url, rig.gw.consumer("mutate:c0001").token)
    with pytest.raises(llm.BudgetExhausted, match="150 held for the champion's sealed"):
        other.chat("p", MSG, max_tokens=200)  # fits 300, not the 150 outside the hold
    assert rig.stub.stats.requests == 0
    anchor = rig.gw.consumer("evaluate:sealed:c0001", anchor=True)
    got = llm.GatewayClient(rig.gw.url, anchor.token).chat("p", MSG, max_tokens=200)
    assert got.text and rig.stub.stats.requests == 1
    assert [e["status"] for e in rig.entries()] == [429, 200]
    assert rig.entries()[0]["code"] == "max_model_tokens"


@scripted([Answer(content="slow", delay_s=2)], Limits(), {"timeout_s": 10})
def test_a_call_whose_client_left_is_completed_recorded_and_never_paid_again(rig: Rig) -> None:
    import time

    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token, timeout=0.5)
    with pytest.raises(llm.ModelError, match="unreachable"):
        client.chat("p", MSG)  # the client gives up; the provider was already asked
    deadline = time.monotonic() + 6
    path = rig.folder / "ledger.jsonl"
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the gateway records the call when the provider answers
    (e,) = rig.entries()
    assert e["status"] == 200 and e["cost_usd"] > 0 and e["response"]  # paid, and kept
    assert rig.gw._reserved.tokens == 0
    again = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op2").token).chat("p", MSG)
    assert again.text == "slow" and rig.stub.stats.requests == 1  # served from the ledger
    assert [x["cached"] for x in rig.entries()] == [False, True]


@scripted([Answer(content="z" * 40, repeat=True)], Limits(), {})
def test_a_per_operation_allowance_fails_closed_for_that_consumer_only(rig: Rig) -> None:
    op = llm.GatewayClient(rig.gw.url, rig.gw.consumer("mutate:c1", allowance=150).token)
    op.chat("p", MSG, max_tokens=100, temperature=1)
    with pytest.raises(llm.BudgetExhausted, match="allowance of 150 tokens exhausted"):
        op.chat("p", MSG, max_tokens=140, temperature=1)
    other = llm.GatewayClient(rig.gw.url, rig.gw.consumer("mutate:c2").token)
    other.chat("p", MSG, max_tokens=140, temperature=1)
    assert rig.stub.stats.requests == 2


@scripted([Answer(content="y" * 40, repeat=True)], Limits(max_cost=0.2), {})
def test_budget_exhausted_by_cost(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    client.chat("p", MSG, max_tokens=20)  # at most 7*1e-3 + 20*2e-3 = $0.047
    client.chat("p", MSG + MSG, max_tokens=20)
    with pytest.raises(llm.BudgetExhausted, match="cost budget exhausted"):
        client.chat("p", MSG * 3, max_tokens=80)  # reservation > what is left
    assert rig.stub.stats.requests == 2
    assert rig.gw.ledger.totals.cost_usd <= 0.2


@scripted([Answer(content="A"), Answer(content="B"), Answer(content="C")], Limits(), {})
def test_a_recorded_request_is_served_from_evidence_at_zero_cost(rig: Rig) -> None:
    tok = rig.gw.consumer("op", candidate="c7", slot="mutate").token
    client = llm.GatewayClient(rig.gw.url, tok)
    assert client.chat("p", MSG, temperature=0).text == "A"
    assert client.chat("p", MSG, temperature=0).text == "A"  # greedy: same digest, cached
    assert [client.chat("p", MSG, temperature=1).text for _ in range(2)] == ["B", "C"]
    assert rig.stub.stats.requests == 3
    cached = [e for e in rig.entries() if e["cached"]]
    assert len(cached) == 1 and cached[0]["cost_usd"] == 0 and cached[0]["prompt_tokens"] == 0

    # a restarted gateway on the same ledger (resume): every recorded call is free
    rig.gw.stop()
    gw2 = Gateway(rig.gw.specs, Ledger(rig.folder), environ={"STUB_KEY": PROVIDER_KEY}).start()
    try:
        again = llm.GatewayClient(gw2.url, gw2.consumer("op", candidate="c7", slot="mutate").token)
        assert again.chat("p", MSG, temperature=0).text == "A"
        assert [again.chat("p", MSG, temperature=1).text for _ in range(2)] == ["B", "C"]
        assert rig.stub.stats.requests == 3  # nothing paid twice
        other = llm.GatewayClient(gw2.url, gw2.consumer("op", candidate="c8", slot="mutate").token)
        with pytest.raises(llm.ModelError):  # another candidate's sample is a new call
            other.chat("p", MSG, temperature=1)
    finally:
        gw2.stop()


@scripted([Answer(content="streamed answer, in pieces", chunk_delay_s=0.01)], Limits(), {})
def test_streaming_is_relayed_and_metered_from_the_usage_chunk(rig: Rig) -> None:
    c = rig.client()
    chunks = list(c.chat.completions.create(model="p", messages=MSG, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "streamed answer, in pieces"
    assert rig.stub.requests[0]["stream_options"] == {"include_usage": True}
    (e,) = rig.entries()
    assert e["usage_source"] == "provider" and e["stream"]
    assert e["completion_tokens"] == rig.stub.stats.completion_tokens


@scripted([Answer(content="resp"), Answer(content="msg")], Limits(), {})
def test_responses_pass_through_and_tokens_and_models_are_checked(rig: Rig) -> None:
    tok = rig.gw.consumer("cli").token
    h = {"Authorization": f"Bearer {tok}"}
    r = httpx.post(rig.gw.url + "/responses", json={"model": "p", "input": "hi"}, headers=h)
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "resp"
    assert rig.entries()[0]["prompt_tokens"] == 1
    m = httpx.post(rig.gw.url + "/messages", json={"model": "p", "messages": MSG}, headers=h)
    assert m.status_code == 400 and "does not speak /v1/messages" in m.text
    bad = httpx.post(rig.gw.url + "/chat/completions", json={"model": "p"}, headers={})
    assert bad.status_code == 401
    unknown = httpx.post(rig.gw.url + "/chat/completions", json={"model": "q"}, headers=h)
    assert unknown.status_code == 404
    assert httpx.get(rig.gw.url + "/models", headers=h).json()["data"][0]["id"] == "p"
    assert rig.stub.stats.requests == 1


SANDBOXED = textwrap.dedent(
    """
    import os, socket, sys
    from pathlib import Path
    import openai
    key, stub_port, gw_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    environ = Path("/proc/self/environ").read_bytes()
    assert key.encode() not in environ, "provider key in the environment"
    for root in ("/rsi", "/tmp", os.environ.get("HOME", "/tmp")):
        for p in Path(root).rglob("*"):
            if p.is_file() and not p.is_socket():
                assert key.encode() not in p.read_bytes(), f"provider key in {p}"
    for port in (stub_port, gw_port):
        s = socket.socket()
        s.settimeout(1)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            pass
        else:
            raise AssertionError(f"reached port {port} outside the gateway socket")
    c = openai.OpenAI(max_retries=0)
    out = c.chat.completions.create(model=os.environ["RSI_MODEL"], messages=[
        {"role": "user", "content": "from the sandbox"}], temperature=0)
    print("ANSWER", out.choices[0].message.content)
    """
)


@needs_bwrap
@scripted([Answer(content="hello sandbox")], Limits(), {})
def test_a_sandboxed_client_sees_a_token_never_the_key_and_only_the_gateway(
    rig: Rig, tmp_path: Path
) -> None:
    sb = make_sandbox("bwrap")
    ep = rig.gw.sandbox_endpoint("agent", model="p", candidate="c3", slot="mutate")
    work = tmp_path / "work"
    work.mkdir()
    (work / "probe.py").write_text(SANDBOXED)
    m_work = Mount(work, "/rsi/work", writable=True)
    argv = [sys.executable, "/rsi/work/probe.py", PROVIDER_KEY, str(rig.srv.port), str(rig.gw.port)]
    wrapped, mounts, env = ep.harness(sb, argv)
    assert env["OPENAI_API_KEY"] == ep.token != PROVIDER_KEY
    res = sb.run(wrapped, mounts=[m_work, *mounts], cwd=m_work, env=env, timeout=60)
    assert res.exit_code == 0, res.stderr.decode()[-2000:]
    assert b"ANSWER hello sandbox" in res.stdout
    (e,) = rig.entries()
    assert (e["consumer"], e["candidate"], e["status"]) == ("agent", "c3", 200)


@scripted([Answer(content="streamed once")], Limits(), {})
def test_a_recorded_stream_is_replayed_as_a_stream(rig: Rig) -> None:
    c = rig.client()
    texts = []
    for _ in range(2):
        chunks = c.chat.completions.create(model="p", messages=MSG, stream=True, temperature=0)
        texts.append("".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices))
    assert texts == ["streamed once", "streamed once"]
    assert rig.stub.stats.requests == 1
    assert [e["cached"] for e in rig.entries()] == [False, True]


def test_anthropic_messages_pass_through_with_the_key_as_x_api_key(tmp_path: Path) -> None:
    stub = StubLLM(Script(answers=[Answer(content="claude says hi")]))
    srv = ServerThread(stub.app).start()
    spec = _spec(srv.url, api="anthropic")
    gw = Gateway({"c": spec}, Ledger(tmp_path), environ={"STUB_KEY": PROVIDER_KEY}).start()
    try:
        tok = gw.consumer("claude-cli").token
        r = httpx.post(
            gw.url + "/messages",
            json={"model": "c", "max_tokens": 50, "messages": MSG},
            headers={"x-api-key": tok, "anthropic-version": "2023-06-01"},
        )
        assert r.status_code == 200 and r.json()["content"][0]["text"] == "claude says hi"
        assert stub.auth == [PROVIDER_KEY]  # sent upstream as x-api-key, never the consumer's token
        e = json.loads((tmp_path / "ledger.jsonl").read_text())
        assert e["completion_tokens"] == count_tokens("claude says hi") and e["cost_usd"] > 0
    finally:
        gw.stop()
        srv.stop()


@scripted([], Limits(), {})
def test_embeddings_are_metered_recorded_and_a_repeat_is_free(rig: Rig) -> None:
    client = llm.GatewayClient(
        rig.gw.url, rig.gw.consumer("op", candidate="c1", slot="novelty").token
    )
    texts = ["def mean(xs): return sum(xs) / len(xs)", "def clamp(x, lo, hi): ..."]
    got = client.embed("p", texts)
    assert len(got.vectors) == 2 and got.vectors[0] != got.vectors[1]
    assert rig.stub.auth == [f"Bearer {PROVIDER_KEY}"]  # the key goes upstream only
    (e,) = rig.entries()
    assert (e["status"], e["path"], e["slot"], e["completion_tokens"]) == (
        200,
        "/v1/embeddings",
        "novelty",
        0,
    )
    assert e["prompt_tokens"] == rig.stub.stats.prompt_tokens == sum(map(count_tokens, texts))
    assert e["cost_usd"] == pytest.approx(e["prompt_tokens"] * 1000 / 1e6)
    assert e["violation"] is None
    assert client.embed("p", texts).vectors == got.vectors  # the same request: from the ledger
    assert rig.stub.stats.requests == 1
    assert PROVIDER_KEY not in (rig.folder / "ledger.jsonl").read_text()


@scripted([], Limits(max_model_tokens=60), {})
def test_embeddings_past_the_token_budget_are_refused_before_the_provider(rig: Rig) -> None:
    client = llm.GatewayClient(rig.gw.url, rig.gw.consumer("op").token)
    client.embed("p", ["x" * 100])  # 25 tokens
    with pytest.raises(llm.BudgetExhausted, match="model token budget exhausted"):
        client.embed("p", ["y" * 40] * 4)  # 4 inputs of 10 tokens each: 40 > 35 left
    assert rig.stub.stats.requests == 1  # never reached the provider
    assert rig.gw.ledger.totals.tokens == 25
    assert [e["status"] for e in rig.entries()] == [200, 429]


@scripted([], Limits(max_cost=0.03), {})
def test_embeddings_past_the_cost_budget_and_unmeterable_inputs_are_refused(rig: Rig) -> None:
    tok = rig.gw.consumer("op").token
    client = llm.GatewayClient(rig.gw.url, tok)
    client.embed("p", ["z" * 80])  # 20 tokens at $1000/Mtok: $0.02
    with pytest.raises(llm.BudgetExhausted, match="cost budget exhausted"):
        client.embed("p", ["w" * 80])
    # token ids (cost unknown before sending) and streaming are refused, never forwarded
    for body in (
        {"model": "p", "input": [[1, 2, 3] * 1000]},
        {"model": "p", "input": "text", "stream": True},
        {"model": "p", "input": []},
    ):
        r = httpx.post(
            rig.gw.url + "/embeddings", json=body, headers={"Authorization": f"Bearer {tok}"}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    assert rig.stub.stats.requests == 1
