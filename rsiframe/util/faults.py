"""Fault injection for crash tests: SIGKILL this process at a named point.

Set ``RSIFRAME_FAULT`` to ``kill:<point>[:<n>]`` (die the n-th time the point is
reached, default 1) or ``torn:<event type>[:<n>]`` (write half of that event's
line, then die), or ``off:<protection>`` (the integrity self-test's proof that a scenario
catches what it claims: that one protection behaves as before its fix; see :func:`off`).
Points are ``after:<event type>`` (right after an event is
durable) and ``stage:<name>`` (on entering a stage: select, rollout, analyze,
mutate, validate, novelty, evaluate, task, gate, record, reflect). A process that
exits with its fault unfired says so on stderr (:data:`UNFIRED`, with how often
it reached the point), so a crash test can tell a point its run reached too few
times (duplicate children are never evaluated) from one that never fires. Unset,
every call here is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import sys

#: how often the spec's point was reached (one spec per process, so one count)
_hits = 0


def _parse() -> tuple[str, str, int] | None:
    spec = os.environ.get("RSIFRAME_FAULT", "")
    if not spec:
        return None
    mode, _, rest = spec.partition(":")
    point, _, n = rest.rpartition(":") if rest.rsplit(":", 1)[-1].isdigit() else (rest, "", "1")
    return mode, point, int(n)


_SPEC = _parse()

#: the line a process whose kill or torn fault never fired writes on stderr as it exits
UNFIRED = "rsiframe fault: {spec} never fired; the point was reached {n} time(s)"
_UNFIRED = re.compile(r"rsiframe fault: \S+ never fired; the point was reached (\d+) time")


def _say_unfired() -> None:
    if _SPEC is not None and _SPEC[0] in ("kill", "torn") and _hits < _SPEC[2]:
        spec = os.environ.get("RSIFRAME_FAULT", "")
        print(UNFIRED.format(spec=spec, n=_hits), file=sys.stderr, flush=True)


atexit.register(_say_unfired)


def times_reached(stderr: str) -> int | None:
    """How often a process's unfired fault point was reached, from its stderr (None: no line)."""
    m = _UNFIRED.search(stderr)
    return int(m.group(1)) if m else None


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _hit(mode: str, point: str) -> bool:
    """Count a reach of ``point`` in ``mode`` if the spec names it; True on its n-th."""
    global _hits
    if _SPEC is None or _SPEC[0] != mode or _SPEC[1] != point:
        return False
    _hits += 1
    return _hits == _SPEC[2]


def reached(point: str) -> None:
    """Called at every named point; kills the process if the fault spec says so."""
    if _hit("kill", point):
        die()


def tear(event_type: str) -> bool:
    """True when this append of ``event_type`` must be torn (half written, then death)."""
    return _hit("torn", event_type)


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
