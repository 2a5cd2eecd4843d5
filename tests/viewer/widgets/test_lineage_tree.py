"""The lineage draws merges under both parents, and the diff takes either parent."""

from __future__ import annotations

from tests.support.cli import status_json
from tests.support.mini import Mini


def test_the_lineage_draws_merges_and_the_diff_takes_either_parent(merge_run: Mini) -> None:
    import asyncio

    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.screens.candidate import CandidateScreen
    from rsiframe.viewer.widgets.diff_view import DiffView
    from rsiframe.viewer.widgets.lineage_tree import LineageTree
    from tests.support.viewer import plain, settle

    status = {c["id"]: c for c in status_json(merge_run.run_dir())["candidates"]}
    mid, (a, b) = next((c["id"], c["parents"]) for c in status.values() if len(c["parents"]) > 1)

    def diff_title(screen: CandidateScreen) -> str:
        return plain(screen.query_one(DiffView).query(".diff-title").first())

    async def drive() -> None:
        app = ViewerApp(merge_run.run_dir())
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("l")
            await settle(app, pilot)
            tree = app.screen.query_one(LineageTree)
            tree.move_cursor(tree.nodes["c0000"])
            tree.action_expand_subtree()
            await pilot.pause()
            assert f"merge of {a} + {b}" in str(tree.nodes[mid].label)
            links = [n for n in tree.nodes[b].children if n.data == mid]
            assert links and "merge" in str(links[0].label)  # drawn under both parents
            tree.move_cursor(tree.nodes[mid])
            await pilot.press("enter")
            await settle(app, pilot)
            screen = app.screen
            assert isinstance(screen, CandidateScreen) and screen.cid == mid
            await asyncio.sleep(0.3)
            await settle(app, pilot)
            assert diff_title(screen).startswith(f"{a} ")
            await pilot.press("b")
            await asyncio.sleep(0.3)
            await settle(app, pilot)
            assert diff_title(screen).startswith(f"{b} ")
            await pilot.press("q")

    asyncio.run(drive())
