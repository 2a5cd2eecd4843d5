"""A replay's archive-only gateway answers recorded requests and refuses the rest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM


def test_an_archive_only_gateway_answers_recorded_requests_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    """The gateway of a replay, on its own: no endpoint, no key variable."""
    from rsiframe.errors import ModelError
    from rsiframe.gateway.app import Gateway, Ledger
    from rsiframe.recipe.models import ModelSpec

    spec = ModelSpec.model_validate(
        {
            "base_url_env": "ARCH_URL",
            "api_key_env": "ARCH_KEY",
            "model": "m",
            "retries": 0,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        }
    )
    msg = [{"role": "user", "content": "fix it"}]
    stub = StubLLM(Script(default=Answer(content="fixed")))
    with ServerThread(stub.app) as srv:
        env = {"ARCH_URL": srv.url, "ARCH_KEY": "k"}
        with Gateway({"p": spec}, Ledger(tmp_path / "src"), environ=env).start() as gw:
            client = gw.client("mutate:c1", candidate="c1", slot="mutate")
            first = client.chat("p", msg, temperature=0.7)  # sampled: the nonce counts
            second = client.chat("p", msg, temperature=0.7)
    source = Ledger(tmp_path / "src")
    with Gateway({"p": spec}, Ledger(tmp_path / "copy"), environ={}, archive=source).start() as gw:
        client = gw.client("mutate:c1", candidate="c1", slot="mutate")
        again = client.chat("p", msg, temperature=0.7)
        assert again.raw == first.raw  # the recorded bytes, as they were
        assert client.chat("p", msg, temperature=0.7).raw == second.raw
        with pytest.raises(ModelError, match=r"HTTP 409.*not recorded"):
            client.chat("p", msg, temperature=0.7)  # the source made two, not three
        other = gw.client("mutate:c2", candidate="c2", slot="mutate")
        with pytest.raises(ModelError, match="not recorded"):
            other.chat("p", msg, temperature=0.7)  # another candidate's nonce
    copy = [json.loads(x) for x in (tmp_path / "copy" / "ledger.jsonl").read_text().splitlines()]
    assert [(e["status"], e["cached"], e["code"]) for e in copy] == [
        (200, True, None),
        (200, True, None),
        (409, False, "not_recorded"),
        (409, False, "not_recorded"),
    ]
    assert Ledger(tmp_path / "copy").totals.cost_usd == pytest.approx(source.totals.cost_usd)
    assert stub.stats.answered == 2
