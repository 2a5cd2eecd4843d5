"""rsiframe.gateway.modelcheck: one tiny, metered call per declared model through a gateway
of its own (doctor's table is in tests/cli/test_doctor.py; run and resume refusing in
tests/e2e/test_model_loop.py). The upstream is the scripted stub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rsiframe.gateway.modelcheck import PING, ping_models
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.recipe.models import ModelSpec


@pytest.fixture
def stub() -> Iterator[tuple[StubLLM, ServerThread]]:
    llm = StubLLM(Script(default=Answer(content="ok")), checks_apart=False)  # scripted
    srv = ServerThread(llm.app).start()
    try:
        yield llm, srv
    finally:
        srv.stop()


def _spec(url: str, **more: object) -> ModelSpec:
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    return ModelSpec.model_validate({"base_url": url, "model": "m", "price": price, **more})


def test_a_model_that_answers_is_metered_and_one_that_does_not_is_named_with_its_endpoint(
    stub: tuple[StubLLM, ServerThread],
) -> None:
    llm, srv = stub
    llm.remaining = [Answer(status=401, model="refused-model")]
    pings = ping_models(
        {
            "good": _spec(srv.url),
            "down": _spec("http://127.0.0.1:9/v1", retries=3),
            "refused": _spec(srv.url, model="refused-model"),
        }
    )
    assert [p.model for p in pings] == ["good", "down", "refused"]  # the recipe's order
    good, down, refused = pings
    assert good.ok and good.tokens > 0 and good.cost_usd > 0
    assert llm.stats.answered == 1 and llm.requests[0]["messages"] == PING
    assert good.as_row()["tokens"] == good.tokens
    assert not down.ok and "m at http://127.0.0.1:9/v1" in down.detail
    assert "failed after" not in down.detail  # one attempt, whatever the recipe's retries
    assert not refused.ok and refused.detail.count(srv.url) == 1  # the endpoint named once
    assert "provider refused: HTTP 401" in refused.detail


def test_an_embeddings_model_is_checked_with_one_embedding_not_a_chat_call(
    stub: tuple[StubLLM, ServerThread],
) -> None:
    llm, srv = stub
    (ping,) = ping_models({"emb": _spec(srv.url, kind="embeddings")})
    assert ping.ok and ping.tokens == 1
    assert llm.stats.by_path == {"/v1/embeddings": 1} and llm.requests[0]["input"] == ["ok"]
