"""rsiframe.engine.inflight: worker threads hand results and errors back to the writer."""

from __future__ import annotations

import pytest

from rsiframe.engine.inflight import Inflight


def test_inflight_hands_results_and_errors_back_to_the_writer() -> None:
    fl = Inflight(2)
    seen: list[str] = []
    fl.start("c1", "mutate", lambda: lambda: seen.append("c1"))
    assert fl.free() == 1
    while fl.jobs:
        fl.drain(timeout=1)
    assert seen == ["c1"] and fl.free() == 2

    def boom() -> None:
        raise ValueError("worker bug")

    fl.start("c2", "mutate", boom)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker bug"):
        while True:
            fl.drain(timeout=1)
    assert not fl.jobs
