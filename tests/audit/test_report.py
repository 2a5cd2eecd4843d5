"""rsiframe.audit.report (`status`): the JSON contract, a broken lock named, the summary's
sparklines."""

from __future__ import annotations

import json
from types import SimpleNamespace

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

    assert sparkline([0.0, 0.5, 1.0, None]) == "▁▅█·"
    assert sparkline([1.0] * 150, width=10) == "█" * 10


def test_model_lines_show_paid_and_cached_apart_the_check_and_the_unrecorded_tail() -> None:
    from rsiframe.audit.report import StatusReport, calls_text, model_lines

    assert calls_text(6, 3) == "6 calls, 3 from cache"
    assert calls_text(1, 0) == "1 call"
    fields = {"run_id": "r", "name": "n", "state": "failed", "reason": None, "seed": None}
    base = StatusReport.model_construct(**fields, champion=None, budget={}, candidates=[])
    report = base.model_copy(
        update={
            "model_calls": 6,
            "model_calls_cached": 3,
            "model_tokens": 90,
            "cost_usd": 0.01,
            "models_by_slot": {
                "mutate": {
                    "cost_usd": 0.01,
                    "model_tokens": 90,
                    "model_calls": 6,
                    "cached_calls": 3,
                }
            },
            "model_check": {"calls": 1, "tokens": 7, "cost_usd": 0.000014},
            "unrecorded": {"calls": 1, "paid": 1, "tokens": 30, "cost_usd": 0.0001},
        }
    )
    lines = model_lines(report)
    assert lines[0] == (
        "models: $0.0100, 90 tokens, 6 calls, 3 from cache "
        "(mutate $0.0100/90 tok/6 calls, 3 from cache)"
    )
    assert lines[1].startswith("model check: 1 call, 7 tokens, $0.000014")
    assert lines[2].startswith("1 paid call not yet recorded")
    assert model_lines(base.model_copy(update={"model_calls": 0})) == []


def test_a_candidate_without_a_gate_score_is_marked_and_explained() -> None:
    from rsiframe.audit.report import NO_SCORE, score_lines

    gates = [0.1, None, 0.5]
    report = SimpleNamespace(
        candidates=[
            SimpleNamespace(scores=SimpleNamespace(gate=g), state=s)
            for g, s in zip(gates, ("admitted", "rejected", "admitted"), strict=True)
        ]
    )
    lines = score_lines(report)  # type: ignore[arg-type]  # only candidates is read
    spark = [line.split("|")[1] for line in lines[:2]]
    assert spark[0][1] == NO_SCORE and len(spark[0]) == len(spark[1]) == 3
    assert NO_SCORE in lines[2] and "no score" in lines[2]


def test_status_prints_the_header_first_and_ends_with_what_to_do_next(mini: Mini) -> None:
    out = run_mini(mini)
    lines = cli("status", out).stdout.splitlines()
    assert lines[0].startswith("mini: finished"), lines[:3]  # the header, then the candidates
    assert any(line.lstrip("│ ").startswith("c0000") for line in lines[5:])
    last = lines[-1]
    head = status_json(out)["head"]
    assert last == f"next: rsiframe view {out}   rsiframe verify {out} --head {head}", last
    assert "rsiframe status" not in last  # never the command just run


def test_run_suggests_status_view_and_verify(mini: Mini) -> None:
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet")
    last = res.stdout.splitlines()[-1]
    assert last.startswith("next: rsiframe view "), last
    assert " rsiframe status " in last and " --head " in last


def test_an_unfinished_run_suggests_resume(mini: Mini) -> None:
    from rsiframe.audit.report import next_steps

    report = SimpleNamespace(state="interrupted", path=str(mini.root / "r un"), head="3:ab")
    line = next_steps(report, "status")  # type: ignore[arg-type]  # the fields it reads
    assert line.startswith(f"next: rsiframe resume '{mini.root}/r un'"), line
