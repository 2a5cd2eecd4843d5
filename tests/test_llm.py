"""rsiframe.llm: the client operators reach models with, and the per-call context that says
which client (and which sandbox endpoints) a call uses. Against the project's scripted
OpenAI-compatible stub, over real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rsiframe import llm
from rsiframe.errors import ModelError
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM

MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture
def stub() -> Iterator[tuple[StubLLM, ServerThread]]:
    model = StubLLM(Script())
    srv = ServerThread(model.app).start()
    try:
        yield model, srv
    finally:
        srv.stop()


def _script(stub: StubLLM, *answers: Answer) -> None:
    stub.script = Script(answers=list(answers))
    stub.remaining = list(answers)


def test_a_chat_returns_the_text_and_usage_and_runs_after_every_call(
    stub: tuple[StubLLM, ServerThread],
) -> None:
    model, srv = stub
    _script(model, Answer(content="hi there"), Answer(status=500))
    calls: list[int] = []
    client = llm.GatewayClient(srv.url, "tok", after=lambda: calls.append(1))
    done = client.chat("m", MSG, max_tokens=20, top_p=0.5)
    assert done.text == "hi there" and done.prompt_tokens > 0 and done.completion_tokens > 0
    assert model.requests[0]["max_tokens"] == 20 and model.requests[0]["top_p"] == 0.5
    assert model.auth == ["Bearer tok"]
    with pytest.raises(ModelError, match=r"model call failed \(HTTP 500\): scripted 500"):
        client.chat("m", MSG)
    assert calls == [1, 1]
    client.close()


def test_garbage_or_no_gateway_is_a_model_error(stub: tuple[StubLLM, ServerThread]) -> None:
    model, srv = stub
    _script(model, Answer(malformed=True))
    with pytest.raises(ModelError, match="without JSON"):
        llm.GatewayClient(srv.url, "tok").chat("m", MSG)
    after: list[int] = []
    gone = llm.GatewayClient(
        "http://127.0.0.1:9/v1", "tok", timeout=2, after=lambda: after.append(1)
    )
    with pytest.raises(ModelError, match="the model gateway is unreachable"):
        gone.chat("m", MSG)
    assert after == [1]  # the engine records even a call that never arrived


def test_a_call_uses_the_client_it_was_given_and_nothing_outside_it() -> None:
    with pytest.raises(ModelError, match="model operators need a run with a models: section"):
        llm.current()
    outer, inner = llm.GatewayClient("http://x", "a"), llm.GatewayClient("http://x", "b")
    endpoints = object()
    with llm.use(outer, endpoints) as got:  # type: ignore[arg-type]
        assert got is outer and llm.current() is outer and llm.sandbox_endpoints() is endpoints
        with llm.use(inner):
            assert llm.current() is inner
            with pytest.raises(ModelError, match="no model gateway for sandboxed agents"):
                llm.sandbox_endpoints()
        assert llm.current() is outer
        # another thread's call does not inherit this one's client
        seen: list[str] = []

        def other() -> None:
            try:
                llm.current()
            except ModelError as exc:
                seen.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(seen) == 1
    with pytest.raises(ModelError):
        llm.current()


def test_a_malformed_usage_counts_nothing_and_raises_nothing() -> None:
    """The provider's usage is the operator's report only (the gateway meters each call):
    a usage that is not a dict of counts reads as 0, never an AttributeError or a negative."""
    assert llm._tokens({"usage": {"prompt_tokens": 7}}, "prompt_tokens") == 7
    for usage in ("12", [1], None, {"prompt_tokens": -3}, {"prompt_tokens": True}):
        assert llm._tokens({"usage": usage}, "prompt_tokens") == 0
