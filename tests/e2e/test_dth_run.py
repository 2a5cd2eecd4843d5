"""A D/T/H run through the engine: builds, serving, metering, rejected children and the
token budget (real trl training; e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rsiframe.dth.hostfacts import FACTS
from rsiframe.sandbox.bwrap import make_sandbox
from tests.support.cli import cli_proc, events
from tests.support.dth import recipe, write_seed, write_tasks

#: the runs of this module share one build cache's host key (tests/conftest.py)
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("use_module_keys")]


# -- end to end through the engine ----------------------------------------------------------


def mini_run(tmp: Path, **kw: object) -> Path:
    write_seed(tmp / "seed")
    write_tasks(tmp / "tasks")
    (tmp / "recipe.yaml").write_text(recipe(**kw))  # type: ignore[arg-type]
    return tmp / "recipe.yaml"


def test_a_dth_run_builds_serves_meters_and_records(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path)
    # one child changes only the harness: it must reuse the seed's model
    knobs = {"knobs": [{"file": "harness/config.yaml", "key": "temperature", "choices": [0, 0.7]}]}
    (tmp_path / "seed" / "knobs.yaml").write_text(yaml.safe_dump(knobs))
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    evs = events(out)
    built = [e["data"] for e in evs if e["type"] == "model_built"]
    assert built[0]["id"] == "c0000" and not built[0]["model"]["steps"]["train"]["cached"]
    child = [b for b in built if b["id"] != "c0000"]
    assert child and all(b["model"]["steps"]["train"]["cached"] for b in child)
    assert all(b["model"]["training_seconds"] == 0.0 for b in child)
    usage = [e["data"] for e in evs if e["type"] == "usage"]
    assert usage and all(u["tokens"] > 0 for u in usage)
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["budget"]["used"]["model_tokens"] == sum(u["tokens"] for u in usage)
    # the served model's requests count like any model call: totals = the sum of the slots
    evaluate = status["models_by_slot"]["evaluate"]
    requests = sum(u.get("requests") or 0 for u in usage)
    assert status["model_calls"] == evaluate["model_calls"] == requests
    assert status["model_tokens"] == evaluate["model_tokens"]
    seed = status["candidates"][0]
    assert seed["model"]["weights_digest"] and seed["model"]["dataset_digest"]
    assert seed["scores"]["sealed"] is not None
    # the certified record carries the model identity
    certs = [e for e in evs if e["type"] == "evaluation_certified"]
    import base64

    payload = json.loads(base64.b64decode(certs[0]["data"]["envelope"]["payload"]))
    model = payload["predicate"]["model"]
    assert model["weights_digest"] == seed["model"]["weights_digest"]
    assert model["tokens"]["total_tokens"] > 0
    assert model["isolation"] == make_sandbox("auto").isolation
    assert set(model["host"]) == set(FACTS) and model["host"]["threads"] == 1
    verify = json.loads(cli_proc("verify", out, "--json").stdout)
    assert verify["ok"], verify["problems"]
    # reproduced from the cache, then rebuilt from nothing: the same rewards on this host
    for flags, how in (([], "cache"), (["--rebuild"], "rebuilt")):
        res = cli_proc("verify", out, "--reproduce", *flags, "--json", timeout=900)
        rep = json.loads(res.stdout)
        assert rep["ok"], rep["problems"]
        assert rep["reproduce"]["build"] == how and rep["reproduce"]["max_deviation"] == 0
        assert any(how in n or "rebuilt" in n for n in rep["reproduce"]["notes"])


def test_bad_children_end_rejected_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path, children=4)
    knobs = {
        "knobs": [
            {"file": "data/config.yaml", "key": "mode", "choices": ["ok", "crash", "empty"]},
            {"file": "trainer/config.yaml", "key": "mode", "choices": ["ok", "crash"]},
            {"file": "harness/config.yaml", "key": "mode", "choices": ["ok", "hang", "garbage"]},
        ]
    }
    (tmp_path / "seed" / "knobs.yaml").write_text(yaml.safe_dump(knobs))
    text = r.read_text().replace("agent_timeout_s: 60", "agent_timeout_s: 10")
    r.write_text(text)
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["state"] == "finished"
    children = status["candidates"][1:]
    for c in children:
        desc = c["description"]
        if "mode: ok -> crash" in desc or "mode: ok -> empty" in desc:
            assert c["state"] == "rejected", c
            assert c["reasons"] and c["reasons"][0].split(":")[0] in ("data", "train")
        elif "hang" in desc or "garbage" in desc:  # evaluated: zero, with the reason kept
            assert c["state"] in ("admitted", "declined") and c["scores"]["gate"] == 0.0
            if "hang" in desc:
                assert "agent timed out after 10s" in c["reasons"][0], c
    # with this run seed the four children are exactly the four bad cases
    stages = sorted(c["reasons"][0].split(":")[0] for c in children if c["state"] == "rejected")
    assert stages == ["data", "train"]
    descs = [c["description"] for c in children]
    assert any("garbage" in d for d in descs) and any("hang" in d for d in descs)


def test_the_token_budget_fails_closed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path, budget=", max_model_tokens: 100")
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["state"] == "budget_exhausted"
    assert "model tokens" in status["reason"]
    # each request reserved its worst case first: the run never overdraws its allowance,
    # and a refused request ends the run as budget exhausted
    used = status["budget"]["used"]["model_tokens"]
    assert used <= 100
    # an evaluation whose agent the served model refused for the budget is not certified:
    # its tasks' scores would be the budget's, not the candidate's
    evs = events(out)
    refused = {
        (e["data"]["id"], e["data"]["split"], e["data"]["attempt"])
        for e in evs
        if e["type"] == "usage" and e["data"].get("refused")
    }
    certified = {
        (e["data"]["id"], e["data"]["split"], e["data"]["attempt"])
        for e in evs
        if e["type"] == "evaluation_certified"
    }
    assert refused and not refused & certified
    failed = [e["data"]["error"] for e in evs if e["type"] == "evaluation_failed"]
    assert any("refused this evaluation's agent" in f for f in failed)
