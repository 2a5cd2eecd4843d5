"""Driving the viewer headless: the text a widget shows, waiting for a screen to load, and
bench/viewer.py's deterministic synthetic run."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import sys

from rsiframe.viewer.app import ViewerApp
from tests.support.paths import REPO


def plain(widget) -> str:
    """The text a Static shows, as the terminal would print it."""
    content = getattr(widget, "content", None)
    return text_of(content if content is not None else widget.render())


async def settle(app: ViewerApp, pilot, timeout: float = 10.0) -> None:
    """Wait until the current screen has read what it needs."""
    await pilot.pause()
    for _ in range(int(timeout / 0.02)):
        if app.screen_loaded() and not app._busy:
            break
        await asyncio.sleep(0.02)
    await pilot.pause()


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_viewer", REPO / "bench" / "viewer.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_viewer"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


async def ready(pilot) -> None:
    app = pilot.app
    for _ in range(500):
        await pilot.pause()
        if app.screen_loaded() and not app._busy:
            break
        await asyncio.sleep(0.02)
    await pilot.pause()


def text_of(renderable: object, width: int = 200) -> str:
    """A Rich renderable as the terminal would print it (no styles)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()
