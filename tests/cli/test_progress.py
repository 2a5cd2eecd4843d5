"""rsiframe.cli.progress: the live view of `run` shows every candidate in flight and its
stage."""

from __future__ import annotations

import io


def test_progress_shows_every_candidate_in_flight_and_its_stage() -> None:
    from rich.console import Console

    from rsiframe.cli.progress import RichProgress

    p = RichProgress(Console(file=io.StringIO()), 3, None)
    p.stage("c0001", "mutate")
    p.tasks("c0002", "train", 2, 4)
    text = p.bar.tasks[0].description
    assert "c0001 mutate" in text and "c0002 train 2/4" in text
