"""Messages that cross widgets and screens (widget-local ones live with their widget)."""

from __future__ import annotations

from textual.message import Message

from rsiframe.viewer.source import RunSource


class RunUpdated(Message):
    """New events of ``source`` were folded; ``changed`` names the candidates they touched."""

    def __init__(self, source: RunSource, changed: set[str], done: bool) -> None:
        super().__init__()
        self.source = source
        self.changed = changed
        self.done = done


class CandidateChosen(Message):
    """Open candidate ``cid`` of ``source``."""

    def __init__(self, source: RunSource, cid: str) -> None:
        super().__init__()
        self.source = source
        self.cid = cid


class RunChosen(Message):
    """Open the run folder ``source``."""

    def __init__(self, source: RunSource) -> None:
        super().__init__()
        self.source = source
