"""The `rsiframe view` Textual app: screens, live polling, and reading runs in the background.

Reading happens in worker threads (:meth:`ViewerApp.ensure_loading`): the first screen
paints at once and fills in as chunks of events are folded. While a run is shown, its
``events.jsonl`` is polled (one ``stat`` per second) and only new lines are folded.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding

from rsiframe.audit.evidence import Repo
from rsiframe.errors import RsiError
from rsiframe.viewer.discover import find_runs
from rsiframe.viewer.messages import CandidateChosen, RunChosen, RunUpdated
from rsiframe.viewer.screens.candidate import CandidateScreen
from rsiframe.viewer.screens.help import HelpScreen
from rsiframe.viewer.screens.run import RunScreen
from rsiframe.viewer.screens.runs import RunsScreen
from rsiframe.viewer.source import RUN, RunSource


class ViewerApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "rsiframe view"
    ENABLE_COMMAND_PALETTE = False  # every action has a key; `?` lists them
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, path: Path, *, poll_seconds: float = 1.0) -> None:
        super().__init__()
        self.path = Path(path).resolve()
        self.poll_seconds = poll_seconds
        self.runs = find_runs(self.path)  # raises RunFolderError on a bad PATH
        self.sources: dict[Path, RunSource] = {}
        self.skipped: list[str] = []
        for root in self.runs:
            try:
                self.sources[root] = RunSource(root)
            except RsiError as exc:
                self.skipped.append(f"{root.name}: {exc}")
        if not self.sources:
            raise self._first_error()
        self.repos: dict[Path, Repo] = {}
        self._busy: set[Path] = set()

    def _first_error(self) -> RsiError:
        from rsiframe.errors import RunFolderError

        return RunFolderError(self.skipped[0] if self.skipped else "no readable runs")

    def on_mount(self) -> None:
        sources = list(self.sources.values())
        if len(self.runs) == 1:
            self.push_screen(RunScreen(sources[0]))
        else:
            self.push_screen(RunsScreen(str(self.path), sources, self.skipped))
        self.set_interval(self.poll_seconds, self.poll)

    def on_unmount(self) -> None:
        for repo in self.repos.values():
            repo.close()

    # -- reading -------------------------------------------------------------------

    def busy(self, source: RunSource) -> bool:
        return source.root in self._busy

    def ensure_loading(self, source: RunSource) -> None:
        """Fold whatever is new in ``source`` (unless a reader is already at it)."""
        if source.root in self._busy:
            return
        self._busy.add(source.root)
        self._read(source)

    @work(thread=True, group="read")
    def _read(self, source: RunSource) -> None:
        try:
            while True:
                up = source.read_more()
                if up.changed or up.done:
                    self.post_message(RunUpdated(source, up.changed, up.done))
                # what was folded stays: keep the cyclic GC from rescanning it (a full
                # collection over a large run's events pauses the screen for ~1 s)
                gc.freeze()
                if up.done:
                    break
                time.sleep(0.002)  # let the screen breathe between chunks
        finally:
            self.call_from_thread(self._done_reading, source.root)

    def _done_reading(self, root: Path) -> None:
        self._busy.discard(root)

    def on_run_updated(self, msg: RunUpdated) -> None:
        for screen in self.screen_stack:
            handler = getattr(screen, "run_updated", None)
            if handler is not None:
                handler(msg)

    def shown_sources(self) -> list[RunSource]:
        out = []
        for screen in self.screen_stack:
            s = getattr(screen, "source", None)
            if s is not None and s not in out:
                out.append(s)
            out += [x for x in getattr(screen, "sources", []) if x not in out]
        return out

    def poll(self) -> None:
        """Follow live runs: fold new lines, notice a run that stopped or started."""
        for source in self.shown_sources():
            if not source.loaded or self.busy(source) or source.error:
                continue
            was = source.live
            source.poll_live()
            if source.changed():
                self.ensure_loading(source)
            elif was != source.live or source.live:  # a live run's wall clock ticks
                self.post_message(RunUpdated(source, {RUN}, True))

    # -- navigation ----------------------------------------------------------------

    def on_run_chosen(self, msg: RunChosen) -> None:
        self.push_screen(RunScreen(msg.source))

    def on_candidate_chosen(self, msg: CandidateChosen) -> None:
        repo = self.repos.get(msg.source.root)
        if repo is None:
            repo = self.repos[msg.source.root] = Repo(msg.source.paths.repo)
        self.push_screen(CandidateScreen(msg.source, msg.cid, repo))

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen())

    def screen_loaded(self) -> bool:
        ready = getattr(self.screen, "is_ready", None)
        return bool(ready()) if ready is not None else True
