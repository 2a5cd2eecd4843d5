"""The candidate DAG: children under their (first) parent, the seed→champion path
highlighted, candidates that did not make it dimmed; a merge also shows under its second
parent as a ⑂ link. Children are added when a node is first opened."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from rsiframe.viewer import fmt
from rsiframe.viewer.messages import CandidateChosen
from rsiframe.viewer.source import Row, RunSource


class LineageTree(Tree[str]):
    BINDINGS = [
        Binding("x", "expand_subtree", "Expand all below"),
        Binding("c", "goto_champion", "Champion"),
    ]

    def __init__(self, source: RunSource, **kw) -> None:
        super().__init__("lineage", **kw)
        self.source = source
        self.show_root = False
        self.nodes: dict[str, TreeNode[str]] = {}
        self.rows: dict[str, Row] = {}
        self.kids: dict[str, list[str]] = {}
        self.merges: dict[str, list[str]] = {}  # second parent -> merges it went into
        self.path: set[str] = set()
        self.filled: set[str] = set()
        self.links: dict[str, set[str]] = {}  # merge links drawn under a second parent
        self.guide_depth = 2

    def label_of(self, row: Row) -> Text:
        on_path = row.id in self.path
        style = "dim" if row.state in fmt.DIMMED else ""
        if on_path:
            style = "bold yellow"
        t = Text(("★ " if on_path else "") + row.id, style=style)
        t.append(f"  g{row.generation}", style="dim")
        t.append(f"  gate {fmt.score(row.gate)}", style=style or "")
        t.append("  ")
        t.append(row.state, style=fmt.STATE_STYLES.get(row.state, "") if not on_path else style)
        kids = len(self.kids.get(row.id, []))
        if kids:
            t.append(f"  ({kids} children)", style="dim")
        if row.merged:
            t.append(f"  ⑂ merge of {row.parent} + {row.merged}", style="magenta")
        if row.description:
            t.append(f"  {row.description[:50]}", style="dim")
        return t

    def rebuild(self) -> None:
        """Read the whole tree again (on mount and after new candidates)."""
        self.rows = {r.id: r for r in self.source.rows()}
        self.kids = self.source.children()
        self.merges = self.source.merged_into()
        self.path = set(self.source.champion_path())
        seed = next((r for r in self.rows.values() if not r.parent), None)
        if seed is None:
            return
        if seed.id not in self.nodes:
            self.clear()
            self.nodes, self.filled, self.links = {}, set(), {}
            self.nodes[seed.id] = self.root.add(self.label_of(seed), data=seed.id, expand=True)
        for cid, node in list(self.nodes.items()):
            if cid in self.rows:
                node.set_label(self.label_of(self.rows[cid]))
                node.allow_expand = self._expands(cid)
            if cid in self.filled:
                self._fill(cid, again=True)
        for cid in sorted(self.path, key=lambda i: self.rows[i].index):
            self._fill(cid)
            self.nodes[cid].expand()
        self.root.expand()

    def _fill(self, cid: str, again: bool = False) -> None:
        if cid in self.filled and not again:
            return
        self.filled.add(cid)
        node = self.nodes[cid]
        for kid in self.kids.get(cid, []):
            if kid in self.nodes:
                continue
            row = self.rows[kid]
            self.nodes[kid] = node.add(
                self.label_of(row), data=kid, allow_expand=self._expands(kid)
            )
        linked = self.links.setdefault(cid, set())
        for kid in self.merges.get(cid, []):
            if kid in linked:
                continue
            linked.add(kid)
            row = self.rows[kid]
            label = Text(f"⑂ {kid}", style="magenta")
            label.append(f"  merge, drawn under {row.parent}  {row.state}", style="dim")
            node.add_leaf(label, data=kid)

    def _expands(self, cid: str) -> bool:
        return bool(self.kids.get(cid) or self.merges.get(cid))

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        if event.node.data:
            self._fill(event.node.data)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        event.stop()
        if event.node.data:
            self.post_message(CandidateChosen(self.source, event.node.data))

    def action_expand_subtree(self) -> None:
        node = self.cursor_node
        if node is None or not node.data:
            return
        todo = [node.data]
        while todo:
            cid = todo.pop()
            self._fill(cid)
            self.nodes[cid].expand()
            todo += self.kids.get(cid, [])

    def action_goto_champion(self) -> None:
        champ = max(self.path, key=lambda i: self.rows[i].index, default=None)
        if champ and champ in self.nodes:
            self.move_cursor(self.nodes[champ])
