"""The integrity self-test's slower scenarios, one trial each, and the saboteur scenario
failing when the server does not cancel (e2e)."""

from __future__ import annotations

import pytest

from rsiframe.selftest.catalog import SCENARIOS
from rsiframe.selftest.runner import run_trial
from tests.support.scenarios import FAST_SCENARIOS

pytestmark = pytest.mark.e2e

#: the scenarios tests/selftest/test_runner.py leaves out (a few seconds each); in CI `make
#: selftest` runs every scenario with more trials (hence `selftest`: `make test-e2e` leaves
#: them to it)
SLOW = [
    pytest.param(n, marks=pytest.mark.selftest, id=n) for n in SCENARIOS if n not in FAST_SCENARIOS
]


@pytest.mark.parametrize("name", SLOW)
def test_scenario_passes_one_trial(name: str) -> None:
    result = run_trial(name, 0, seed=12345)
    assert result.passed, result.problems


def test_the_saboteur_scenario_fails_when_the_server_does_not_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As before the fix (abandoned requests run on): the scenario fails. Whether the honest
    child also times out behind the flood depends on the host's speed; that the saboteur's
    requests were never cancelled is found either way."""
    from rsiframe.util import faults

    monkeypatch.setattr(faults, "_SPEC", ("off", "serve_cancel", 1))
    result = run_trial("saboteur", 0, seed=5)
    assert not result.passed
    assert any(
        ("scores changed" in p and "timed out" in p) or "was cancelled" in p
        for p in result.problems
    )
