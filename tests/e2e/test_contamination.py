"""The contamination policy `flag` in a real D/T/H run: the overlap is recorded and the
run goes on (e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.dth import planted_run

pytestmark = pytest.mark.e2e


def test_flag_records_the_overlap_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.cli import cli_proc

    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r, _gate_word, sealed_word = planted_run(tmp_path, "flag")
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    status_text = cli_proc("status", out, "--json").stdout
    seed = json.loads(status_text)["candidates"][0]
    assert seed["state"] == "admitted"
    assert seed["contamination"]["contaminated"] and seed["contamination"]["policy"] == "flag"
    assert sealed_word not in status_text
    table = cli_proc("status", out).stdout
    assert "contaminated" in table
