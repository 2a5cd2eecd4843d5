"""rsiframe.audit.report (`status`): the JSON contract, a broken lock named, the summary's
sparklines."""

from __future__ import annotations

import json

from tests.support.cli import cli, status_json
from tests.support.mini import Mini, run_mini


def test_status_json_contract(mini: Mini) -> None:
    out = run_mini(mini)
    st = status_json(out)
    assert {"run_id", "state", "seed", "champion", "budget", "candidates"} <= set(st)
    assert st["state"] in ("running", "finished", "interrupted", "budget_exhausted", "failed")
    assert set(st["budget"]) == {"used", "limits"}
    assert st["budget"]["limits"]["generations"] == 2
    for c in st["candidates"]:
        assert {"id", "parent", "generation", "state", "scores"} <= set(c)
        assert set(c["scores"]) == {"train", "gate", "sealed"}


def test_status_names_a_broken_lock(mini: Mini) -> None:
    out = run_mini(mini)
    assert not [n for n in status_json(out)["notes"] if n.startswith("lock:")]
    lock = out / "evaluator.lock.json"
    data = json.loads(lock.read_text())
    data["isolation"] = "process" if data["isolation"] != "process" else "bwrap"
    lock.write_text(json.dumps(data))
    notes = [n for n in status_json(out)["notes"] if n.startswith("lock:")]
    assert notes == ["lock: evaluator.lock.json isolation differs from the run's"]
    res = cli("status", out)
    assert res.exit_code == 0
    assert "note: lock: evaluator.lock.json isolation differs" in res.stdout


def test_summary_sparklines() -> None:
    from rsiframe.audit.report import sparkline

    assert sparkline([0.0, 0.5, 1.0, None]) == "▁▅█ "
    assert sparkline([1.0] * 150, width=10) == "█" * 10
