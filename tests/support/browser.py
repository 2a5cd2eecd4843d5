"""Headless Chromium for the report page's browser test: Debian's ``chromium`` and
``chromium-driver`` (``make browser`` / ``scripts/ci-setup.sh browser`` install them),
driven by Selenium; no browser is downloaded. CI sets ``RSIFRAME_REQUIRE_BROWSER`` so the
test cannot skip there."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def _first(paths: tuple[str, ...], name: str) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None) or shutil.which(name)


def require_browser() -> tuple[str, str]:
    """Chromium and its driver, or a skip (a failure where CI requires them)."""
    chromium, driver = _first(CHROMIUM, "chromium"), _first(DRIVER, "chromedriver")
    selenium = True
    try:
        import selenium
    except ImportError:
        selenium = False
    if chromium and driver and selenium:
        return chromium, driver
    why = "platform limit: no chromium, chromium-driver or selenium here (make browser)"
    if os.environ.get("RSIFRAME_REQUIRE_BROWSER"):
        pytest.fail(f"RSIFRAME_REQUIRE_BROWSER is set: {why}")
    pytest.skip(why)


@contextmanager
def chromium(width: int = 1400, height: int = 1100) -> Iterator[Any]:
    """A headless Chromium (flags root needs), logging the console and the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = require_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container: Chromium's own sandbox cannot start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--no-first-run",
        "--disable-background-networking",  # the browser's own traffic is not the page's
        "--disable-component-update",
        "--disable-sync",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    browser = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield browser
    finally:
        browser.quit()


def console_errors(browser: Any) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def requested_urls(browser: Any) -> list[str]:
    """Every URL the page asked for (the performance log's Network.requestWillBeSent)."""
    urls = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls
