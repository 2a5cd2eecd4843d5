"""The host facts that decide numerics: one list, read without torch, compared by name."""

from __future__ import annotations

import sys

from rsiframe.hostfacts import FACTS, differing, host_facts


def test_the_facts_are_exactly_the_list_and_need_no_torch_import() -> None:
    had_torch = "torch" in sys.modules
    facts = host_facts(3)
    assert tuple(facts) == FACTS and facts["threads"] == 3
    assert facts["cpu_model"] and facts["machine"]
    if facts["torch"] is not None:  # read from torch's files: version, git commit, BLAS
        assert facts["torch"]["version"] and facts["blas"]
    assert ("torch" in sys.modules) == had_torch


def test_differing_names_the_facts_that_moved() -> None:
    here = host_facts(1)
    assert differing(here, here) == []
    other = {**here, "cpu_model": "Some Other CPU", "threads": 4}
    assert differing(other, here) == ["cpu_model", "threads"]
    assert differing(None, here) == list(FACTS)  # a record without facts: nothing is known
