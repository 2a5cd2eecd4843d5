"""rsiframe.executors.local: certificates record where an evaluation ran."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.support.cli import cli, events
from tests.support.mini import Mini


def _statements(run_dir: Path) -> list[dict]:
    return [
        json.loads(base64.b64decode(e["data"]["envelope"]["payload"]))["predicate"]
        for e in events(run_dir)
        if e["type"] == "evaluation_certified"
    ]


def test_local_certificates_record_the_executor(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    preds = _statements(out)
    assert preds and all(p["executor"]["kind"] == "local" for p in preds)
    assert all(p["executor"]["node"] for p in preds)
    assert cli("verify", out).exit_code == 0
