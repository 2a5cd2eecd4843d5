"""Which self-test scenarios run in the default suite: one of each family
(tests/selftest/test_runner.py); the rest run with ``-m e2e`` (tests/e2e/test_selftest.py)."""

FAST_SCENARIOS = frozenset(
    {"kill_after_certificate", "outside_surface", "forged_event", "malformed_result"}
)
