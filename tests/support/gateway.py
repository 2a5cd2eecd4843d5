"""The provider's secrets and a first message, for tests of the run's model gateway, and
the stub model served for a test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from rsiframe.gateway.stub import Script, ServerThread, StubLLM

PROVIDER_SECRET = "sk-provider-secret-0123456789"


PROVIDER_KEY = "sk-provider-SECRET-0123456789"


MSG = [{"role": "user", "content": "please fix the function"}]


@contextlib.contextmanager
def serving(
    monkeypatch: pytest.MonkeyPatch, script: Script, key: str = "stub-key"
) -> Iterator[StubLLM]:
    """The stub model on a local port for ``script``, named by LLM_BASE_URL and LLM_API_KEY
    (``key``; what the method recipes read), stopped afterwards."""
    stub = StubLLM(script)
    srv = ServerThread(stub.app).start()
    monkeypatch.setenv("LLM_BASE_URL", srv.url)
    monkeypatch.setenv("LLM_API_KEY", key)
    try:
        yield stub
    finally:
        srv.stop()
