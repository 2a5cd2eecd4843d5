"""One thread ticking every registered check (rsiframe.util.ticker)."""

from __future__ import annotations

import threading
import time

import pytest

from rsiframe.util import ticker


def test_a_check_is_called_until_it_says_it_is_done() -> None:
    calls: list[float] = []
    done = threading.Event()

    def check() -> bool:
        calls.append(time.monotonic())
        if len(calls) == 3:
            done.set()
            return True
        return False

    ticker.every(0.01, check)
    assert done.wait(10)
    time.sleep(0.05)
    assert len(calls) == 3  # not called again once done


def test_cancel_waits_for_a_call_in_progress_and_stops_the_next() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        entered.set()
        release.wait(10)
        return False

    t = ticker.every(0.01, check)
    assert entered.wait(10)
    cancelled = threading.Event()
    threading.Thread(target=lambda: (t.cancel(), cancelled.set()), daemon=True).start()
    assert not cancelled.wait(0.1)  # the call is still running: cancel waits
    release.set()
    assert cancelled.wait(10)
    n = len(calls)
    time.sleep(0.05)
    assert len(calls) == n


def test_a_check_that_raises_is_dropped_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))
    good = threading.Event()
    count = {"n": 0}

    def bad() -> bool:
        raise RuntimeError("broken check")

    def fine() -> bool:
        count["n"] += 1
        if count["n"] == 5:
            good.set()
            return True
        return False

    ticker.every(0.01, bad)
    ticker.every(0.01, fine)
    assert good.wait(10)
    assert isinstance(reported[0], RuntimeError)
