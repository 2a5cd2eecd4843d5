"""One candidate: its diff, certificates, per-task rewards, evidence, notes and (in a run
with models) its model calls.

Each tab reads what it needs the first time it is shown (git objects, artifacts), in a
worker thread, so opening a candidate of a large run costs only its own evidence.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from rsiframe.audit.evidence import Repo, diff_base
from rsiframe.errors import RsiError
from rsiframe.viewer.messages import CandidateChosen, RunUpdated
from rsiframe.viewer.source import RunSource
from rsiframe.viewer.widgets.candidate_header import CandidateHeader
from rsiframe.viewer.widgets.certificates import CertificatesView
from rsiframe.viewer.widgets.diff_view import DiffView
from rsiframe.viewer.widgets.evidence_tree import ArtifactChosen, EvidenceTree
from rsiframe.viewer.widgets.model_calls import ModelCallsView
from rsiframe.viewer.widgets.notes_view import NotesView, notes_group
from rsiframe.viewer.widgets.paged_text import PagedText
from rsiframe.viewer.widgets.rewards_table import RewardsTable

TABS = ("diff", "certificates", "rewards", "evidence", "notes")


class CandidateScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("p", "parent", "Parent"),
        Binding("b", "diff_base", "Diff vs other parent", show=False),  # a merge (help)
        # the footer names the tab keys: 1 Diff 2 Certificates 3 Rewards 4 Evidence 5 Notes
        *(Binding(str(i + 1), f"tab('{t}')", t.capitalize()) for i, t in enumerate(TABS)),
        Binding("6", "tab('calls')", "Model calls", show=False),  # runs with models: (help)
    ]

    def __init__(self, source: RunSource, cid: str, repo: Repo) -> None:
        super().__init__()
        self.source = source
        self.cid = cid
        self.repo = repo
        self.loaded: set[str] = set()
        self._diff_done = False
        self.base = 0  # which parent the diff is taken against (1: a merge's second)

    def compose(self) -> ComposeResult:
        yield CandidateHeader(id="candidate-header")
        with TabbedContent(id="tabs"):
            with TabPane("Diff", id="diff"):
                yield DiffView(id="diff-view")
            with TabPane("Certificates", id="certificates"), VerticalScroll():
                yield CertificatesView(id="certificates-view")
            with TabPane("Rewards", id="rewards"):
                yield RewardsTable(id="rewards-table")
            with TabPane("Evidence", id="evidence"), Horizontal():
                yield EvidenceTree(id="evidence-tree")
                yield PagedText(id="paged")
            with TabPane("Notes", id="notes"), VerticalScroll():
                yield NotesView(id="notes-view")
            with TabPane("Model calls", id="calls"):
                yield ModelCallsView(id="model-calls")
        yield Footer()

    def on_mount(self) -> None:
        if not self.source.recipe.get("models"):  # a run without models: no such tab
            self.query_one(TabbedContent).hide_tab("calls")
        c = self.source.candidate(self.cid)
        if c is not None and c.state in ("rejected", "failed", "abandoned"):
            # why it did not make it comes first; the diff (if any) is one key away
            self.query_one(TabbedContent).active = "notes"
            self._diff_done = True
        self.show_candidate()

    def show_candidate(self) -> None:
        c = self.source.candidate(self.cid)
        if c is None:
            self.query_one(CandidateHeader).update(f"{self.cid}: no such candidate")
            return
        champ = self.source.champion()
        with self.source.lock:
            self.query_one(CandidateHeader).show(c, champ is not None and champ.id == c.id)
        self.loaded.clear()
        self._load_tab(self.query_one(TabbedContent).active or "diff")

    def is_ready(self) -> bool:
        return self._diff_done

    def run_updated(self, msg: RunUpdated) -> None:
        if msg.source is self.source and self.cid in msg.changed:
            self.show_candidate()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        name = event.pane.id or ""
        self._load_tab(name)
        focus = {
            "diff": "#diff-view",
            "rewards": "#rewards-table",
            "evidence": "#evidence-tree",
            "calls": "#model-calls-table",
        }
        if name in focus:
            self.query_one(focus[name]).focus()
        else:
            self.query_one(f"#{name} VerticalScroll").focus()

    def action_tab(self, name: str) -> None:
        if name == "calls" and not self.source.recipe.get("models"):
            return
        self.query_one(TabbedContent).active = name

    def action_parent(self) -> None:
        c = self.source.candidate(self.cid)
        if c is not None and c.parent:
            self.post_message(CandidateChosen(self.source, c.parent))

    def action_diff_base(self) -> None:
        """A merge: take the diff against the other parent."""
        c = self.source.candidate(self.cid)
        if c is None or len(c.parents) < 2:
            return
        self.base = 1 - self.base
        self._diff_done = False
        self._load_diff()

    # -- lazy tabs -----------------------------------------------------------------

    def _load_tab(self, name: str) -> None:
        if name in self.loaded:
            return
        self.loaded.add(name)
        c = self.source.candidate(self.cid)
        if c is None:
            return
        with self.source.lock:
            if name == "diff":
                self._load_diff()
            elif name == "certificates":
                self.query_one(CertificatesView).show(c, self.source.verifier.keyid)
            elif name == "rewards":
                self.query_one(RewardsTable).show(c)
            elif name == "evidence":
                tree = self.query_one(EvidenceTree)
                tree.show(self.source.root, c, self.source.events_for(c.id))
            elif name == "notes":
                self._load_notes()
            elif name == "calls":
                calls = self.query_one(ModelCallsView)
                calls.show(self.source.root, self.source.events_for(c.id))

    @work(thread=True, exclusive=True, group="diff")
    def _load_diff(self) -> None:
        view = self.query_one(DiffView)
        c = self.source.candidate(self.cid)
        if c is None:
            return
        against = c.parents[self.base] if self.base < len(c.parents) else c.parent
        parent = self.source.candidate(against) if against else None
        old, new = diff_base(c, parent)
        if self.base and parent is not None:
            old = parent.commit  # a merge's second parent
        if new is None:
            self.app.call_from_thread(view.message, "no commit: the mutation produced no tree")
        else:
            try:
                diffs = self.repo.diff(old, new)
                title = f"{against or 'empty tree'} ({(old or '')[:12]}) → {c.id} ({new[:12]})"
                if len(c.parents) > 1:
                    title += "   (b: diff against the other parent)"
                self.app.call_from_thread(view.show, diffs, title)
            except (RsiError, ValueError, KeyError, OSError) as exc:
                self.app.call_from_thread(view.message, f"cannot read the diff: {exc}", "red")
            except Exception as exc:  # GitPython raises its own errors for missing objects
                self.app.call_from_thread(view.message, f"cannot read the diff: {exc!r}", "red")
        self._diff_done = True

    @work(thread=True, exclusive=True, group="notes")
    def _load_notes(self) -> None:
        c = self.source.candidate(self.cid)
        if c is None:
            return
        with self.source.lock:
            events = self.source.events_for(c.id)
            lessons = dict(self.source.state.reflected)
            violations = list(self.source.state.violations)
        group = notes_group(self.source.root, c, events, lessons, violations)
        self.app.call_from_thread(self.query_one(NotesView).show, group)

    def on_artifact_chosen(self, event: ArtifactChosen) -> None:
        paged = self.query_one(PagedText)
        paged.load(self.source.root, event.digest, event.title, event.as_json)
        paged.focus()
