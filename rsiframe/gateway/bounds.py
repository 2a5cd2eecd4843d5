"""What one call through the model gateway may cost, and what each consumer called.

The gateway reserves a call's worst case before it forwards it, so what it forwards must
not be able to produce more than that. :func:`output_bound` reads every request field that
multiplies or extends the output, per API:

- chat completions: ``max_tokens`` and ``max_completion_tokens`` (the larger one counts,
  since a provider honours either), times ``n`` (and ``best_of`` where a server takes it);
- completions: ``max_tokens`` times ``max(n, best_of)`` times the number of prompts;
- Responses: ``max_output_tokens``;
- Anthropic Messages: ``max_tokens`` (required there, as Anthropic requires it);
- embeddings: no output at all (the call is its input's tokens).

A limit that is present must be a positive integer (``null`` counts as absent), or the call
is refused with 400 ``invalid_limit`` and never forwarded. A call without an output limit
(except Messages) is forwarded with one added, ``DEFAULT_MAX_TOKENS`` (``max_tokens``, or
``max_output_tokens`` on the Responses API), and the gateway says so: the response carries
``X-Rsiframe-Limits`` and the ledger entry ``rewritten``. Nothing else of the body changes.

The charge of a call is its prompt as the provider counts it plus at most the output it
reserved; output the provider reports past the limits it was sent is recorded on the call as
``excess_tokens``/``excess_cost_usd`` with a ``provider_excess`` violation, never charged.

:class:`ModelUsage` is what one consumer (token) called, per model: the evaluation's
certificate records it (``models_called``), and a refusal for its allowance fails the
operator call it was made in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsiframe.archive.events import UPSTREAM, infrastructure_failure
from rsiframe.gateway.ledger import Entry

#: the output limit a call without one is forwarded with (and reserved for)
DEFAULT_MAX_TOKENS = 4096
#: per path: the request keys that cap one choice's output
LIMIT_KEYS = {
    "/v1/chat/completions": ("max_tokens", "max_completion_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}
#: the key a missing limit is added under (Messages: none, the call is refused)
ADDED_KEY = {
    "/v1/chat/completions": "max_tokens",
    "/v1/completions": "max_tokens",
    "/v1/responses": "max_output_tokens",
}
#: keys that multiply the output: choices answered or generated and billed
MULTIPLIERS = ("n", "best_of")


class LimitRefused(ValueError):
    """A request whose output cannot be bounded as sent (answered 400 ``invalid_limit``)."""


@dataclass(frozen=True)
class OutputBound:
    """The most output a request may produce, and the body that holds it to that."""

    per_choice: int  # output tokens one choice may produce
    choices: int  # choices generated (n or best_of, times the prompts of a completion)
    body: dict[str, Any]  # the body to forward
    rewritten: str | None = None  # what the gateway added (said in a header and the ledger)

    @property
    def tokens(self) -> int:
        return self.per_choice * self.choices


def _positive(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LimitRefused(f"{key} must be a positive integer, got {value!r}")
    return value


def _prompts(path: str, body: Mapping[str, Any]) -> int:
    """How many prompts a completions request holds (each gets ``n`` choices)."""
    prompt = body.get("prompt")
    if path != "/v1/completions" or not isinstance(prompt, list) or not prompt:
        return 1
    if all(isinstance(p, int) for p in prompt):  # one prompt as token ids
        return 1
    return len(prompt)


def output_bound(path: str, body: Mapping[str, Any]) -> OutputBound:
    """The output bound of one request to ``path``; :class:`LimitRefused` when a limit is
    malformed or a required one is missing."""
    if path == "/v1/embeddings":
        return OutputBound(0, 1, dict(body))
    limits = [v for k in LIMIT_KEYS[path] if (v := _positive(body, k)) is not None]
    factor = max([1, *(v for k in MULTIPLIERS if (v := _positive(body, k)) is not None)])
    choices = factor * _prompts(path, body)
    if limits:
        return OutputBound(max(limits), choices, dict(body))
    key = ADDED_KEY.get(path)
    if key is None:
        raise LimitRefused(f"max_tokens is required on {path}")
    forwarded = {**body, key: DEFAULT_MAX_TOKENS}
    return OutputBound(DEFAULT_MAX_TOKENS, choices, forwarded, f"{key}={DEFAULT_MAX_TOKENS}")


@dataclass(frozen=True)
class Charge:
    """A metered call's charge: the prompt as counted, the output up to what was reserved."""

    prompt_tokens: int
    completion_tokens: int
    excess_tokens: int = 0  # output past the reservation: the provider's violation

    @property
    def violation(self) -> str | None:
        if not self.excess_tokens:
            return None
        return (
            f"provider_excess: {self.completion_tokens + self.excess_tokens} output tokens "
            f"reported, {self.completion_tokens} reserved; the excess is not charged"
        )


def charge(prompt_tokens: int, completion_tokens: int, reserved_output: int) -> Charge:
    """The output is charged at most ``reserved_output``; the rest is excess."""
    charged = min(completion_tokens, reserved_output)
    return Charge(prompt_tokens, charged, completion_tokens - charged)


# -- what a consumer called ------------------------------------------------------------


@dataclass
class ModelUsage:
    """One consumer's calls, per model: answered, tokens charged, answered from the
    ledger, refused (by code), the last refusal's message per code, and whether its last
    call failed for infrastructure reasons (``outage``: that failure's message)."""

    models: dict[str, dict[str, int]] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)  # code -> last message
    outage: str | None = None

    def add(self, e: Entry) -> None:
        failed = infrastructure_failure(e.status, e.code)
        self.outage = (e.error or f"HTTP {e.status}") if failed else None
        row = self.models.setdefault(
            e.model,
            {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached": 0, "refused": 0},
        )
        if e.status == 200:
            row["calls"] += 1
            row["cached"] += int(e.cached)
            row["prompt_tokens"] += e.prompt_tokens
            row["completion_tokens"] += e.completion_tokens
        elif e.code is not None and e.code != UPSTREAM:
            row["refused"] += 1
            self.refusals[e.code] = e.error or e.code

    def as_json(self) -> dict[str, Any]:
        return {"models": self.models, "refusals": self.refusals, "outage": self.outage}


def merge_usage(reports: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Several consumers' ``ModelUsage.as_json()`` models, summed per model."""
    out: dict[str, dict[str, int]] = {}
    for report in reports:
        for model, row in (report.get("models") or {}).items():
            into = out.setdefault(model, dict.fromkeys(row, 0))
            for k, v in row.items():
                into[k] = into.get(k, 0) + int(v)
    return out
