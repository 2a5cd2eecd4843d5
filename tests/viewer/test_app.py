"""`rsiframe view`: the headless app driven through every screen on a real (tiny) run."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable, TabbedContent

from rsiframe.archive.loader import load_run
from rsiframe.audit.report import status_of
from rsiframe.viewer.app import ViewerApp
from rsiframe.viewer.screens.candidate import CandidateScreen
from rsiframe.viewer.screens.help import HelpScreen
from rsiframe.viewer.screens.lineage import LineageScreen
from rsiframe.viewer.screens.recipe_diff import RecipeDiffScreen
from rsiframe.viewer.screens.run import RunScreen
from rsiframe.viewer.screens.runs import RunsScreen
from rsiframe.viewer.source import RunSource
from rsiframe.viewer.widgets.candidates_table import CandidatesTable
from rsiframe.viewer.widgets.certificates import CertificatesView
from rsiframe.viewer.widgets.diff_view import DiffView
from rsiframe.viewer.widgets.evidence_tree import EvidenceTree
from rsiframe.viewer.widgets.lineage_tree import LineageTree
from rsiframe.viewer.widgets.notes_view import NotesView
from rsiframe.viewer.widgets.paged_text import PagedText
from rsiframe.viewer.widgets.run_header import RunHeader
from tests.support.cli import cli
from tests.support.mini import make_mini
from tests.support.viewer import plain, settle


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real mini run (seed + 4 children), shared by this module's tests."""
    root = tmp_path_factory.mktemp("viewer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(root / "keys"))
        mini = make_mini(root / "proj", generations=2, children=2)
        res = cli("run", mini.recipe, "--out", root / "run", "--quiet")
        assert res.exit_code == 0, res.stderr
    return root / "run"


def fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (
                st.st_size,
                st.st_mtime_ns,
                hashlib.sha256(p.read_bytes()).hexdigest(),
            )
        elif p.is_dir():
            out[str(p.relative_to(root)) + "/"] = (0, p.stat().st_mtime_ns, "")
    return out


def test_source_folds_like_load_run(run_dir: Path) -> None:
    src = RunSource(run_dir)
    n = 0
    while not src.read_more(max_bytes=3000).done:  # many small chunks
        n += 1
    assert n > 3
    report = status_of(load_run(run_dir))
    rows = {r.id: r for r in src.rows()}
    assert set(rows) == {c.id for c in report.candidates}
    for c in report.candidates:
        r = rows[c.id]
        assert (r.state, r.train, r.gate, r.sealed) == (
            c.state,
            c.scores.train,
            c.scores.gate,
            c.scores.sealed,
        )
        assert r.badge == ("·" if c.state == "rejected" else "✓")  # never evaluated
    assert src.champion() is not None and src.champion().id == report.champion
    assert src.run_state() == "finished"


def test_every_screen_and_nothing_written(run_dir: Path) -> None:
    before = fingerprint(run_dir)
    report = status_of(load_run(run_dir))
    champion = report.champion
    assert champion is not None

    async def drive() -> None:
        app = ViewerApp(run_dir, poll_seconds=0.1)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            assert isinstance(app.screen, RunScreen)
            table = app.screen.query_one(CandidatesTable)
            assert table.row_count == len(report.candidates)
            header = plain(app.screen.query_one(RunHeader))
            assert "finished" in header and champion in header

            # filter with `/`, then clear it with escape
            await pilot.press("slash", *"state:admitted", "enter")
            await pilot.pause()
            admitted = [c.id for c in report.candidates if c.state == "admitted"]
            assert table.row_count == len(admitted)
            await pilot.press("slash", "escape")
            await pilot.pause()
            assert table.row_count == len(report.candidates)

            # sort by gate, best first: the champion comes first
            await pilot.press("s")
            await pilot.pause()
            assert table.sort_column == "gate"
            assert table.ids()[0] == champion

            # the candidate screen, every tab
            assert table.move_to(champion)
            await pilot.press("enter")
            await settle(app, pilot)
            screen = app.screen
            assert isinstance(screen, CandidateScreen) and screen.cid == champion
            diff = screen.query_one(DiffView)
            shown = " ".join(plain(s) for s in diff.query("Static"))
            assert "config.yaml" in shown
            await pilot.press("2")
            await pilot.pause()
            assert screen.query_one(TabbedContent).active == "certificates"
            certs = screen.query_one(CertificatesView)
            assert "signature verifies" in plain(certs)
            await pilot.press("3")
            await pilot.pause()
            rewards = screen.query_one("#rewards-table", DataTable)
            assert rewards.row_count == 4 + 4 + 2  # train, gate and (champion) sealed tasks
            await pilot.press("4")
            await pilot.pause()
            tree = screen.query_one(EvidenceTree)
            task = next(n for n in _walk(tree.root) if n.data and n.data[0] == "task")
            assert task.parent is not None
            task.parent.expand()
            task.expand()
            await pilot.pause()
            files = [n for n in task.children if n.data and n.data[0] == "file"]
            assert {"agent.stdout", "verifier.stdout"} <= {str(n.label) for n in files}
            tree.post_message(
                EvidenceTree.NodeSelected(
                    next(n for n in files if str(n.label) == "verifier.stdout")
                )
            )
            await settle(app, pilot)
            paged = screen.query_one(PagedText)
            assert paged.pager is not None
            await asyncio.sleep(0.2)
            await pilot.pause()
            assert "reward" in paged.pager.page(0)
            assert paged.verdict == "hash ✓"
            await pilot.press("5")
            await settle(app, pilot)
            notes = plain(screen.query_one(NotesView))
            assert "operator notes" in notes and "gate" in notes

            # the parent, then back
            await pilot.press("p")
            await settle(app, pilot)
            assert isinstance(app.screen, CandidateScreen) and app.screen.cid != champion
            await pilot.press("escape", "escape")
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)

            # lineage: the seed→champion path is expanded, enter opens a candidate
            await pilot.press("l")
            await settle(app, pilot)
            assert isinstance(app.screen, LineageScreen)
            lineage = app.screen.query_one(LineageTree)
            assert champion in lineage.path and "c0000" in lineage.path
            assert lineage.cursor_node is not None and lineage.cursor_node.data == champion
            await pilot.press("enter")
            await settle(app, pilot)
            assert isinstance(app.screen, CandidateScreen) and app.screen.cid == champion
            await pilot.press("escape", "escape")

            # recipe diff (no sibling runs here) and help
            await pilot.press("d")
            await settle(app, pilot)
            assert isinstance(app.screen, RecipeDiffScreen)
            await pilot.press("escape", "question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)
            await pilot.press("q")
        assert app.return_code in (0, None)

    asyncio.run(drive())
    assert fingerprint(run_dir) == before, "the viewer changed something in the run folder"


def test_runs_screen_and_recipe_diff(run_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(run_dir, tmp_path / "a")
    shutil.copytree(run_dir, tmp_path / "b")
    lock = tmp_path / "b" / "recipe.lock.json"  # an ablation: one changed key
    lock.write_text(lock.read_text().replace('"top_k":1', '"top_k":2'))

    async def drive() -> None:
        app = ViewerApp(tmp_path)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            assert isinstance(app.screen, RunsScreen)
            runs = app.screen.query_one(DataTable)
            assert runs.row_count == 2
            assert "finished" in str(runs.get_row_at(0))
            await pilot.press("enter")
            await settle(app, pilot)
            assert isinstance(app.screen, RunScreen) and app.screen.source.root.name == "a"
            await pilot.press("d")
            await settle(app, pilot)
            await pilot.press("down")
            await pilot.pause()
            body = plain(app.screen.query_one("#recipe-diff"))
            assert "-      top_k: 2" in body and "+      top_k: 1" in body
            await pilot.press("escape", "escape")
            await pilot.pause()
            assert isinstance(app.screen, RunsScreen)

    asyncio.run(drive())


def test_live_run_updates_within_seconds(run_dir: Path, tmp_path: Path) -> None:
    """A run being written: new lines appear on screen after a poll, and only they are read."""
    live = tmp_path / "live"
    shutil.copytree(run_dir, live)
    lines = (live / "events.jsonl").read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"c0002"' in line)
    (live / "events.jsonl").write_bytes(b"".join(lines[:cut]) + lines[cut][:40])  # torn tail

    async def drive() -> None:
        app = ViewerApp(live, poll_seconds=0.1)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            table = app.screen.query_one(CandidatesTable)
            assert table.row_count == 2
            source = app.screen.source
            assert source.torn == 40 and "incomplete" in " ".join(source.notes())
            offset = source._offset
            with (live / "events.jsonl").open("ab") as f:
                f.write(lines[cut][40:])
                f.writelines(lines[cut + 1 :])
            for _ in range(100):
                await asyncio.sleep(0.05)
                if table.row_count == 5 and source.run_state() == "finished":
                    break
            assert table.row_count == 5
            assert source.run_state() == "finished" and source.torn == 0
            assert source._offset > offset

    asyncio.run(drive())


def test_tampered_archive_is_shown_not_trusted(run_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    events = bad / "events.jsonl"
    events.write_bytes(events.read_bytes().replace(b'"reward":1.0', b'"reward":0.0', 1))

    async def drive() -> None:
        app = ViewerApp(bad)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            header = plain(app.screen.query_one(RunHeader))
            assert "unreadable" in header and "hash chain broken" in header

    asyncio.run(drive())


def test_cli_view_bad_path_is_one_line(tmp_path: Path) -> None:
    res = cli("view", tmp_path / "missing")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "no such folder" in res.stderr
    (tmp_path / "empty").mkdir()
    res = cli("view", tmp_path / "empty")
    assert res.exit_code == 2 and "holds no run folders" in res.stderr


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def test_liveness_is_read_from_the_kernel_without_locking(run_dir: Path, tmp_path: Path) -> None:
    """A run held by a driver shows as running; the probe itself takes no lock (so a
    `resume` starting at that moment is never refused because of the viewer)."""
    from rsiframe.archive.runfolder import RunLock, RunPaths
    from rsiframe.viewer.source import is_driven

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    paths = RunPaths(run)
    assert not is_driven(paths)
    lock = RunLock(paths).acquire()
    try:
        assert is_driven(paths)
        src = RunSource(run)
        src.read_all()
        assert src.live
        empty = tmp_path / "locks"
        empty.write_text("")
        assert not is_driven(paths, proc_locks=empty)  # only the kernel's table is read
        assert is_driven(paths, proc_locks=tmp_path / "missing")  # elsewhere: flock probe
    finally:
        lock.release()
    assert not is_driven(paths)


def test_large_artifacts_are_paged_and_hash_checked(tmp_path: Path) -> None:
    from rsiframe.archive.log import artifact_path, put_artifact
    from rsiframe.audit.evidence import PAGE_BYTES, Pager

    data = b"".join(b"line %06d\n" % i for i in range(30_000))  # 330 kB
    digest = put_artifact(tmp_path, data)
    pager = Pager(tmp_path, digest)
    assert pager.pages == -(-len(data) // PAGE_BYTES) > 4
    assert pager.page(0).startswith("line 000000")
    assert pager.page(1) == data[PAGE_BYTES : 2 * PAGE_BYTES].decode()
    assert pager.check()
    path = artifact_path(tmp_path, digest)
    path.write_bytes(data.replace(b"line 012345", b"line 999999"))
    assert not Pager(tmp_path, digest).check()


def test_the_header_shows_model_calls_paid_and_cached_apart() -> None:
    from rsiframe.viewer.widgets.run_header import model_cost

    by_slot = {"mutate": {"cost_usd": 0.0123}}
    text = model_cost(6, 34567, 0.0123, by_slot, cached=3).plain
    assert text.startswith("$0.0123 · 6 calls, 3 from cache · 34,567 tokens")
    assert "from cache" not in model_cost(2, 10, 0.0, {}).plain
