"""Trajectories and logs of a candidate, as a tree: evaluation attempt → task → files.

Nothing is read until a task is expanded; choosing a file posts :class:`ArtifactChosen`.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from rsiframe.archive.log import Event
from rsiframe.archive.state import Candidate
from rsiframe.audit.evidence import read_json
from rsiframe.errors import RsiError


class ArtifactChosen(Message):
    def __init__(self, digest: str, title: str, as_json: bool) -> None:
        super().__init__()
        self.digest = digest
        self.title = title
        self.as_json = as_json


def attempt_tasks(c: Candidate, events: list[Event]) -> dict[tuple[str, int], dict[str, tuple]]:
    """(split, attempt) -> task -> (reward, error, trajectory digest); certified records
    first, then the task_finished evidence of attempts that never got one."""
    out: dict[tuple[str, int], dict[str, tuple]] = {}
    for split, attempts in c.attempts.items():
        for a in attempts:
            rows = out.setdefault((split, a.attempt), {})
            if a.record is not None:
                p = a.record.predicate
                for task, digest in p.trajectories.items():
                    rows[task] = (p.rewards.get(task), p.errors.get(task), digest)
    for ev in events:
        if ev.type != "task_finished":
            continue
        d = ev.data
        rows = out.setdefault((d["split"], d["attempt"]), {})
        rows.setdefault(d["task"], (d.get("reward"), d.get("error"), d.get("trajectory")))
    return out


class EvidenceTree(Tree[tuple]):
    def __init__(self, **kw) -> None:
        super().__init__("evidence", **kw)
        self.run: Path | None = None
        self.show_root = False

    def show(self, run: Path, c: Candidate, events: list[Event]) -> None:
        self.run = run
        self.clear()
        groups = attempt_tasks(c, events)
        if not groups:
            self.root.add_leaf(Text("no trajectories", style="dim"))
        for (split, attempt), tasks in sorted(groups.items()):
            a = next((x for x in c.attempts.get(split, []) if x.attempt == attempt), None)
            status = a.status if a else "?"
            heading = f"{split} #{attempt} ({status}, {len(tasks)} tasks)"
            node = self.root.add(heading, expand=len(groups) == 1)
            for task, (reward, error, digest) in sorted(tasks.items()):
                label = Text(f"{task}  ")
                if reward is not None:
                    label.append(f"{reward:g}", style="green" if reward >= 1 else "red")
                if error:
                    label.append(f"  {error[:60]}", style="dim")
                if digest:
                    node.add(label, data=("task", digest), allow_expand=True)
                else:
                    node.add_leaf(label)
        self.root.expand()

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        node: TreeNode = event.node
        if not node.data or node.data[0] != "task" or node.children or self.run is None:
            return
        digest = node.data[1]
        node.add_leaf("trajectory.json", data=("json", digest))
        try:
            traj = read_json(self.run, digest)
        except (RsiError, ValueError) as exc:
            node.add_leaf(Text(str(exc), style="red"))
            return
        for name, ref in sorted((traj.get("artifacts") or {}).items()):
            node.add_leaf(name, data=("file", ref))

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        data = event.node.data
        if data and data[0] in ("json", "file"):
            event.stop()
            title = str(event.node.label)
            if event.node.parent is not None and event.node.parent.data:
                title = f"{Text.from_markup(str(event.node.parent.label)).plain.split()[0]}/{title}"
            self.post_message(ArtifactChosen(data[1], title, data[0] == "json"))
