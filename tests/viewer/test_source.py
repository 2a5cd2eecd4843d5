"""rsiframe.viewer.source: a run read as it grows lists the candidates in flight."""

from __future__ import annotations

from tests.support.mini import Mini, run_named


def test_the_viewer_lists_candidates_in_flight(mini: Mini) -> None:
    from rsiframe.archive.loader import load_run
    from rsiframe.archive.state import fold
    from rsiframe.viewer.source import in_flight

    out = run_named(mini, "done", "concurrency.candidates=2", "budget.max_generations=1")
    loaded = load_run(out)
    evs = loaded.events
    cut = next(
        i for i, e in enumerate(evs) if e.type == "task_finished" and e.data["id"] != "c0000"
    )
    stages = dict(in_flight(fold(evs[:cut], loaded.verifier)))
    assert any(s.startswith("evaluating") for s in stages.values()), stages
    assert in_flight(loaded.state) == []
