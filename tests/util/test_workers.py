"""Reused worker threads (rsiframe.util.workers)."""

from __future__ import annotations

import threading

import pytest

from rsiframe.util import workers


def _run(job_names: list[str], barrier: threading.Barrier | None = None) -> list[int]:
    """Submit one job per name; the thread id each ran on."""
    seen: list[int] = []
    done = threading.Semaphore(0)

    def job() -> None:
        if barrier is not None:
            barrier.wait(timeout=10)
        seen.append(threading.get_ident())
        done.release()

    for name in job_names:
        workers.submit(job, name=name)
    for _ in job_names:
        assert done.acquire(timeout=10)
    return seen


def test_a_job_after_another_runs_on_the_same_thread() -> None:
    first = _run(["a"])
    # the worker puts itself back on the idle list just after its job returns
    for _ in range(100):
        with workers._lock:
            if workers._idle:
                break
        threading.Event().wait(0.01)
    second = _run(["b"])
    assert first == second


def test_jobs_at_the_same_time_each_get_a_thread() -> None:
    # three jobs that can only finish together: none may wait behind another
    seen = _run(["a", "b", "c"], threading.Barrier(3))
    assert len(set(seen)) == 3


def test_a_job_runs_under_its_name_and_an_exception_does_not_end_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reported: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: reported.append(args.exc_value))
    names: list[str] = []
    ran = threading.Event()

    def bad() -> None:
        names.append(threading.current_thread().name)
        raise ValueError("boom")

    workers.submit(bad, name="rsi-c0001")
    for _ in range(200):
        if reported:
            break
        threading.Event().wait(0.01)
    assert names == ["rsi-c0001"]
    assert isinstance(reported[0], ValueError)
    workers.submit(ran.set)
    assert ran.wait(10)


def test_an_idle_worker_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "IDLE_S", 0.05)
    threads: list[threading.Thread] = []
    done = threading.Event()

    def job() -> None:
        threads.append(threading.current_thread())
        done.set()

    # a barrier of 2 forces a fresh worker, made while IDLE_S is short
    gate = threading.Barrier(2)
    workers.submit(lambda: gate.wait(10))
    workers.submit(lambda: (gate.wait(10), job()))
    assert done.wait(10)
    threads[0].join(timeout=10)
    assert not threads[0].is_alive()
