"""What a driver that is gone left running, settled before its run is resumed.

Right after a SIGKILL, processes of the killed driver may still be exiting:

- its gateway (it holds ``model-calls/gateway.lock``) finishes the calls it was forwarding
  and records them, as a sent call is paid for: resume waits for it, at most as long as the
  gateway itself may take (the models' ``timeout_s`` times their attempts), with a progress
  line, and ends it only past that;
- anything else of it (a sandbox or an evaluation's process still running, a process still
  holding ``run.lock``) is work the resumed run redoes: resume ends it at once.

Either way resume says which. A live driver (the pid ``run.lock`` names is running) is never
touched: resume refuses, as before, with that pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from rsiframe.archive.runfolder import DRIVER_ENV, RunLock, RunPaths, driver_marker
from rsiframe.errors import RunFolderError
from rsiframe.gateway.process import LOCK as GATEWAY_LOCK
from rsiframe.gateway.process import LOCK_WAIT_S
from rsiframe.gateway.runmodels import FOLDER as MODELS_FOLDER
from rsiframe.recipe.models import ModelSpec
from rsiframe.util import procs

Say = Callable[[str], None]
#: how often a wait says it is still waiting
TICK_S = 10.0


def take_lock(paths: RunPaths, say: Say) -> RunLock:
    """The run's lock, once a driver that is gone has left nothing running; a live driver's
    lock is refused (RunFolderError naming its pid)."""
    lock = RunLock(paths)
    previous = lock.holder()  # the last driver: acquiring writes this process's pid
    try:
        lock.acquire()
    except RunFolderError:
        if procs.alive(previous):
            raise
        say(f"the run's last driver (pid {previous}) is gone, but its lock is still held")
        settle(paths, previous, say)  # what holds it is a leftover, or the driver exiting
        lock.acquire(wait_s=3 * TICK_S)
        return lock
    try:
        settle(paths, previous, say)
    except BaseException:
        lock.release()
        raise
    return lock


def settle(paths: RunPaths, driver: int | None, say: Say) -> None:
    """Wait for the gone ``driver``'s gateway to record its calls; end its other processes."""
    if driver is None:
        return
    marker = driver_marker(paths, driver)
    found = procs.leftovers(DRIVER_ENV, marker, paths.root / MODELS_FOLDER / GATEWAY_LOCK)
    gateways = [p for p in found if p.holds == GATEWAY_LOCK]
    others = [p for p in found if p.holds != GATEWAY_LOCK and p.pid != driver]
    if others:
        procs.end([p.pid for p in others])
        say(
            f"ended {len(others)} process(es) the killed driver left running (their work "
            f"is redone): {', '.join(map(str, others))}"
        )
    for gw in gateways:
        _wait_for_gateway(gw, gateway_grace(paths), say)


def _wait_for_gateway(gw: procs.Leftover, bound: float, say: Say) -> None:
    say(
        f"the run's last driver is gone; waiting up to {bound:.0f} s for its gateway "
        f"(pid {gw.pid}) to record the model calls it was answering"
    )
    t0 = time.monotonic()
    tick = t0 + TICK_S
    while procs.alive(gw.pid) and time.monotonic() - t0 < bound:
        time.sleep(0.05)
        if time.monotonic() >= tick:
            tick += TICK_S
            say(f"still waiting for the gateway (pid {gw.pid}): {time.monotonic() - t0:.0f} s")
    waited = time.monotonic() - t0
    if not procs.alive(gw.pid):
        say(f"its gateway finished and recorded its calls ({waited:.1f} s)")
        return
    procs.end([gw.pid])
    say(
        f"ended its gateway (pid {gw.pid}) after {waited:.0f} s; a call it was still "
        "answering may be paid without a record"
    )


def gateway_grace(paths: RunPaths) -> float:
    """How long the run's gateway may take to finish its calls once its driver is gone (as
    :mod:`rsiframe.gateway.process` bounds it), plus a margin; ``RSIFRAME_LEFTOVER_WAIT_S``
    overrides it."""
    env = os.environ.get("RSIFRAME_LEFTOVER_WAIT_S")
    if env:
        try:
            return max(0.0, float(env))
        except ValueError:
            pass
    try:
        models: dict[str, Any] = paths.read_json(paths.recipe_lock)["resolved"].get("models") or {}
        specs = [ModelSpec.model_validate(m) for m in models.values()]
    except (RunFolderError, KeyError, AttributeError, ValueError):
        specs = []
    grace = max((s.timeout_s * (s.retries + 1) for s in specs), default=1.0)
    return min(grace + 1.0, LOCK_WAIT_S) + 5.0
