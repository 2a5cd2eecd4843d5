"""rsiframe.study.report_index and ``rsiframe report``: one run's page, a folder's index
with each run's page and the compare tables, a run that fails verify refused in one line."""

from __future__ import annotations

import json
import shutil

from tests.support.cli import assert_user_error, cli
from tests.support.mini import Mini, run_mini, run_named


def test_report_writes_a_verified_page(mini: Mini) -> None:
    out = run_mini(mini)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    page = mini.root / "share" / "report.html"
    res = cli("report", out, "--html", page, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["pages"][0]["path"] == str(page) and data["pages"][0]["verified"]
    text = page.read_text()
    assert "Verified: every check" in text and data["pages"][0]["bytes"] == page.stat().st_size
    # the report writes nothing into the run folder
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    plain = cli("report", out, "--html", page)
    assert plain.exit_code == 0 and plain.stdout.startswith(f"wrote {page}")


def test_report_refuses_a_run_that_fails_verify(mini: Mini) -> None:
    out = run_mini(mini)
    shutil.rmtree(out / "artifacts")
    page = mini.root / "report.html"
    res = cli("report", out, "--html", page)
    assert_user_error(res, 1, "does not verify (evidence)", "--force")
    assert not page.exists()
    forced = cli("report", out, "--html", page, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert "NOT VERIFIED" in forced.stdout and "NOT VERIFIED" in page.read_text()


def test_report_bad_input_is_one_line(mini: Mini) -> None:
    res = cli("report", mini.root / "nope", "--html", mini.root / "r.html")
    assert_user_error(res, 2, "no such folder")
    empty = mini.root / "empty"
    empty.mkdir()
    assert_user_error(cli("report", empty, "--html", mini.root / "r.html"), 2, "not a run folder")


def test_report_of_a_folder_indexes_its_runs(mini: Mini) -> None:
    a = run_named(mini, "runs/a", "random_seed=1")
    run_named(mini, "runs/b", "random_seed=2")
    shutil.rmtree(a / "artifacts")  # a fails verify: left out, named in the index
    index = mini.root / "share" / "index.html"
    res = cli("report", mini.root / "runs", "--html", index, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert [p["path"] for p in data["pages"]] == [str(index.parent / "b.html")]
    assert (
        data["refused"][0]["run"].endswith("/a")
        and "does not verify" in data["refused"][0]["error"]
    )
    text = index.read_text()
    assert "href='b.html'" in text and "left out" in text
    assert (index.parent / "b.html").is_file()
    # compare's tables of the runs that verified, linked from the index
    assert data["compare"] == str(index.parent / "index-compare.html")
    assert "href='index-compare.html'" in text
    assert "rsiframe compare" in (index.parent / "index-compare.html").read_text()
