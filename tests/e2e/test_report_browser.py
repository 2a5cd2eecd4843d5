"""``rsiframe report`` opened in a real browser (headless Chromium, Debian's packages): a
run whose model answers and diffs carry HTML and script renders with no console error,
runs none of it, makes no network request, and a click on a node shows its diff and model
calls; a 1,000-candidate run's page is under 20 MB and renders in under 3 s."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer
from tests.support.browser import chromium, console_errors, requested_urls, require_browser
from tests.support.cli import cli, status_json
from tests.support.modelsrig import Rig
from tests.support.viewer import bench_module

pytestmark = pytest.mark.e2e

#: an llm_edit answer whose description and edit are script and markup
HOSTILE = (
    "</script><script>window.__pwned=1</script><b id=injected>bold</b>\nconfig.yaml\n```\n"
    "<<<<<<< SEARCH\nlevel: 1\n=======\nlevel: 5\n"
    '# <img src=x onerror="window.__pwned=2"><script>window.__pwned=3</script>\n'
    ">>>>>>> REPLACE\n```\n"
)


def _open(browser, page: Path) -> float:  # type: ignore[no-untyped-def]
    """Load the page; seconds until its script has drawn everything."""
    t0 = time.perf_counter()
    browser.get(page.as_uri())
    while not browser.execute_script("return document.body.getAttribute('data-ready')"):
        assert time.perf_counter() - t0 < 30, "the page never finished drawing"
        time.sleep(0.02)
    return time.perf_counter() - t0


def test_report_in_chromium_runs_no_candidate_text_and_fetches_nothing(
    models_rig: Rig, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    require_browser()
    models_rig.write(answers=[Answer(content=HOSTILE, repeat=True)])
    run = models_rig.run()
    page = tmp_path / "report.html"
    res = cli("report", run, "--html", page)
    assert res.exit_code == 0, res.stderr
    st = status_json(run)
    child = next(c for c in st["candidates"] if c["parent"] and c["commit"])
    with chromium() as browser:
        _open(browser, page)
        assert console_errors(browser) == []
        nodes = browser.find_elements(By.CSS_SELECTOR, "#lineage .node")
        assert {n.get_attribute("data-id") for n in nodes} == {c["id"] for c in st["candidates"]}
        node = browser.find_element(By.CSS_SELECTOR, f'#lineage .node[data-id="{child["id"]}"]')
        browser.execute_script("arguments[0].scrollIntoView()", node)
        node.click()
        title = browser.find_element(By.ID, "panel-title").text
        assert title.startswith(f"candidate {child['id']}")
        diff = browser.find_element(By.ID, "panel-diff").text
        assert "+level: 5" in diff and '<img src=x onerror="window.__pwned=2">' in diff
        for summary in browser.find_elements(By.CSS_SELECTOR, "#panel details.call summary"):
            summary.click()
        calls = browser.find_elements(By.CSS_SELECTOR, "#panel details.call")
        assert calls and "<script>window.__pwned=1</script>" in calls[0].text  # as text
        # nothing of the run ran or became markup
        assert browser.execute_script("return window.__pwned") is None
        assert browser.find_elements(By.ID, "injected") == []
        assert len(browser.find_elements(By.TAG_NAME, "script")) == 2
        assert browser.find_elements(By.CSS_SELECTOR, "#panel img, #header img") == []
        assert console_errors(browser) == []
        urls = requested_urls(browser)
        assert urls and all(u == page.as_uri() for u in urls), urls


def test_a_thousand_candidate_report_is_small_and_fast(tmp_path: Path) -> None:
    require_browser()
    run = bench_module().build_run(tmp_path / "run", 1000)
    page = tmp_path / "report.html"
    res = cli("report", run, "--html", page)
    assert res.exit_code == 0, res.stderr
    size = page.stat().st_size
    assert size < 20_000_000, size
    with chromium() as browser:
        seconds = _open(browser, page)
        assert console_errors(browser) == []
        assert (
            browser.execute_script("return document.querySelectorAll('#lineage .node').length")
            == 1000
        )
    print(f"1000 candidates: {size / 1e6:.2f} MB, rendered in {seconds:.2f} s")
    assert seconds < 3.0, seconds
