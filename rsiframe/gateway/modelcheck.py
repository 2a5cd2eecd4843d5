"""One tiny, metered call to each declared model, through a gateway of its own.

``doctor RECIPE`` shows the result; ``run`` and ``resume`` make the same check before the
first generation (unless ``--no-model-check``) and stop with one line when a model does not
answer. The check's gateway keeps its own ledger in a temporary folder, so its calls are
metered (tokens and cost, from the gateway's ledger) but never charged to a run's budget.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.errors import ModelError, RecipeError
from rsiframe.gateway.app import Gateway
from rsiframe.gateway.ledger import Entry, Ledger

#: what a check asks: a handful of tokens, whatever the model answers
PING = [{"role": "user", "content": "Reply with the single word: ok"}]
PING_MAX_TOKENS = 8
#: one attempt, and not the recipe's long timeout: a check should answer quickly
PING_TIMEOUT_S = 30.0
#: the gateway's wrapping of an upstream failure (a check asks once: no retries to count)
_RETRIED = re.compile(
    r"^model call failed \(HTTP 502\): model '[^']*' (\([^)]*\) )?failed after \d+ attempts?: "
)

#: the endpoint a provider's refusal names (the check names it once, first)
_REFUSED = re.compile(r"provider refused \([^)]*\): ")


@dataclass(frozen=True)
class ModelPing:
    """One model's check: whether it answered, what it cost, or what is wrong."""

    model: str
    ok: bool
    detail: str
    tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0

    def as_row(self) -> dict[str, Any]:
        """The ``models_checked`` event's row."""
        return {
            "model": self.model,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "latency_ms": round(self.latency_ms, 3),
        }


def ping_models(
    models: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[ModelPing]:
    """One tiny, metered call to each declared model (its variables checked first)."""
    pings: list[ModelPing] = []
    reachable = {}
    for name, spec in models.items():
        try:
            spec.resolve(environ)
        except RecipeError as exc:
            pings.append(ModelPing(name, False, exc.message))
            continue
        timeout = min(spec.timeout_s, PING_TIMEOUT_S)
        reachable[name] = spec.model_copy(update={"retries": 0, "timeout_s": timeout})
    if reachable:
        with tempfile.TemporaryDirectory(prefix="rsiframe-modelcheck-") as tmp:
            gw = Gateway(reachable, Ledger(Path(tmp), fsync=False), environ=environ).start()
            try:
                pings += [_ping(gw, name, spec) for name, spec in reachable.items()]
            finally:
                gw.stop()
    order = list(models)
    return sorted(pings, key=lambda p: order.index(p.model))


def _ping(gw: Gateway, name: str, spec: Any) -> ModelPing:
    where = f"{spec.model} at {gw.resolved[name].base_url}"
    token = gw.consumer(f"check:{name}", models=[name]).token
    t0 = time.perf_counter()
    try:
        _call(gw.url, token, name, "embeddings" if spec.kind == "embeddings" else spec.api)
    except ModelError as exc:
        reason = _RETRIED.sub("", exc.message).removeprefix("model call failed ")
        reason = _REFUSED.sub("provider refused: ", reason)
        return ModelPing(name, False, f"{where}: {reason}")
    ms = (time.perf_counter() - t0) * 1000
    entries = [e for e in _entries(gw) if e.model == name and e.status == 200]
    tokens = sum(e.prompt_tokens + e.completion_tokens for e in entries)
    cost = sum(e.cost_usd for e in entries)
    detail = f"{where} answered in {ms:.0f} ms ({tokens} tokens, ${cost:.6f})"
    return ModelPing(name, True, detail, tokens, cost, ms)


def _entries(gw: Gateway) -> list[Entry]:
    lines = gw.ledger.path.read_text().splitlines() if gw.ledger.path.exists() else []
    return [Entry(**json.loads(line)) for line in lines]


def _call(url: str, token: str, name: str, api: str) -> None:
    """The tiny call (``api``: openai, anthropic, or embeddings: one embedding); ModelError
    when it fails or the answer is not a model's answer."""
    import httpx

    from rsiframe.llm import GatewayClient

    if api == "embeddings":
        client = GatewayClient(url, token, timeout=PING_TIMEOUT_S + 5)
        try:
            client.embed(name, ["ok"])
        finally:
            client.close()
        return
    if api == "openai":
        client = GatewayClient(url, token, timeout=PING_TIMEOUT_S + 5)
        try:
            client.chat(name, PING, max_tokens=PING_MAX_TOKENS)
        finally:
            client.close()
        return
    body = {"model": name, "max_tokens": PING_MAX_TOKENS, "messages": PING}
    try:
        r = httpx.post(
            url + "/messages", json=body, headers={"x-api-key": token}, timeout=PING_TIMEOUT_S + 5
        )
        data = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ModelError(f"the gateway did not answer: {exc}") from exc
    if r.status_code != 200:
        err = data.get("error") if isinstance(data, dict) else None
        msg = err.get("message") if isinstance(err, dict) else str(data)[:200]
        raise ModelError(f"(HTTP {r.status_code}): {msg}")
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ModelError(f"model {name!r} answered without content")
