"""Fault injection for crash tests: SIGKILL this process at a named point.

Set ``RSIFRAME_FAULT`` to ``kill:<point>[:<n>]`` (die the n-th time the point is
reached, default 1) or ``torn:<event type>[:<n>]`` (write half of that event's
line, then die), or ``off:<protection>`` (the integrity self-test's proof that a scenario
catches what it claims: that one protection behaves as before its fix; see :func:`off`).
Points are ``after:<event type>`` (right after an event is
durable) and ``stage:<name>`` (on entering a stage: select, rollout, analyze,
mutate, validate, novelty, evaluate, task, gate, record, reflect). Unset, every
call here is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def _parse() -> tuple[str, str, int] | None:
    spec = os.environ.get("RSIFRAME_FAULT", "")
    if not spec:
        return None
    mode, _, rest = spec.partition(":")
    point, _, n = rest.rpartition(":") if rest.rsplit(":", 1)[-1].isdigit() else (rest, "", "1")
    return mode, point, int(n)


_SPEC = _parse()


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def reached(point: str) -> None:
    """Called at every named point; kills the process if the fault spec says so."""
    if _SPEC is None or _SPEC[0] != "kill" or _SPEC[1] != point:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] == _SPEC[2]:
        die()


def tear(event_type: str) -> bool:
    """True when this append of ``event_type`` must be torn (half written, then death)."""
    if _SPEC is None or _SPEC[0] != "torn" or _SPEC[1] != event_type:
        return False
    key = "torn:" + event_type
    _counts[key] = _counts.get(key, 0) + 1
    return _counts[key] == _SPEC[2]


#: the protections ``off:<name>`` can switch off, each as it was before its fix
PROTECTIONS = {
    "cache_mac": "a build-cache entry is not checked against its manifest's HMAC",
    "serve_cancel": "the model server does not cancel a request whose client left",
}


def off(protection: str) -> bool:
    """True when ``RSIFRAME_FAULT=off:<protection>`` switches that protection off (only
    for the self-test: it shows the scenario fails without it). Never set in a real run:
    the sandbox refuses every ``RSIFRAME_`` variable, so a candidate cannot set it."""
    return _SPEC is not None and _SPEC[0] == "off" and _SPEC[1] == protection
