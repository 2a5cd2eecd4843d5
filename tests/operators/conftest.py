"""TODO"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe import llm
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Script, ServerThread, StubLLM
from rsiframe.recipe.models import ModelSpec
from tests.support.llmops import Models


@pytest.fixture
def models(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Models]:
    stub = StubLLM(Script(answers=list(request.param)))
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate({"base_url": srv.url, "model": "stub", "retries": 0})
    gw = Gateway({"proposer": spec}, Ledger(tmp_path / "gw"), environ={}).start()
    client = gw.client("mutate:c1", candidate="c1", slot="mutate")
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c1", slot="mutate")
    try:
        with llm.use(client, endpoints):
            yield Models(stub, gw)
    finally:
        gw.stop()
        srv.stop()
