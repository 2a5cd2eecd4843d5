"""``rsiframe doctor``: one line per component, one tiny metered call per declared model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rsiframe.cli.doctor import MACHINE, needs
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM, count_tokens
from rsiframe.recipe.load import load
from tests.support.cli import cli
from tests.support.paths import REPO

PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 2000.0}


def _recipe(tmp_path: Path, models: dict, **slots_config: str) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "sat3-quickstart.yaml").read_text())
    data["seed"] = str(REPO / "tasks" / "sat3" / "seed")
    data["tasks"]["path"] = str(REPO / "tasks" / "sat3")
    data["models"] = models
    if slots_config:
        data["slots"]["reflect"] = {"operator": "llm_lessons", "config": slots_config}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def stubs() -> Iterator[tuple[StubLLM, ServerThread, ServerThread]]:
    # the checks scripted like any call (the stub answers them apart by default)
    good = StubLLM(Script(default=Answer(content="ok")), checks_apart=False)
    garbage = StubLLM(Script(default=Answer(malformed=True)), checks_apart=False)
    with ServerThread(good.app) as a, ServerThread(garbage.app) as b:
        yield good, a, b


def test_machine_checks_are_one_line_each_and_only_needed_ones_fail() -> None:
    res = cli("doctor", "--json")
    report = json.loads(res.stdout)
    names = [c["name"] for c in report["checks"]]
    assert names == list(MACHINE)
    for c in report["checks"]:
        assert c["detail"] and "\n" not in c["detail"]
    # without a recipe only bubblewrap (the default sandbox) is needed
    assert [c["name"] for c in report["checks"] if c["needed"]] == ["bubblewrap"]
    bwrap = report["checks"][0]
    assert report["ok"] is bwrap["ok"]
    assert res.exit_code == (0 if bwrap["ok"] else 1)


def test_what_a_recipe_needs() -> None:
    sat3 = load(REPO / "recipes" / "sat3-quickstart.yaml")
    assert needs(sat3.recipe, sat3.evaluator_config) == set()  # sandbox: auto
    harbor = load(REPO / "recipes" / "harbor-hill-climb.yaml")
    assert {"harbor"} <= needs(harbor.recipe, harbor.evaluator_config)
    docker = load(REPO / "recipes" / "sat3-quickstart.yaml", ["evaluator.config.sandbox=docker"])
    assert needs(docker.recipe, docker.evaluator_config) == {"docker"}
    assert needs(None, None) == {"bubblewrap"}


def test_each_model_gets_one_metered_call_and_each_problem_one_line(
    stubs: tuple[StubLLM, ServerThread, ServerThread],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good, good_srv, garbage_srv = stubs
    monkeypatch.setattr("rsiframe.cli.doctor.MACHINE", {})  # the machine: the first test
    monkeypatch.setenv("DOC_GOOD_KEY", "sk-good")
    monkeypatch.delenv("DOC_MISSING_KEY", raising=False)
    models = {
        "good": {
            "base_url": good_srv.url,
            "api_key_env": "DOC_GOOD_KEY",
            "model": "m",
            "price": PRICE,
        },
        "nokey": {"base_url": good_srv.url, "api_key_env": "DOC_MISSING_KEY", "model": "m"},
        "down": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "garbage": {"base_url": garbage_srv.url, "model": "m", "retries": 3},
        "claude": {"base_url": good_srv.url, "model": "m", "api": "anthropic"},  # /v1/messages
    }
    recipe = _recipe(tmp_path, models, model="good")
    res = cli("doctor", recipe, "--json")
    assert res.exit_code == 1, res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    ok = checks["model good"]
    assert ok["ok"] and ok["needed"]
    # the gateway's count equals the stub's own; the price is the recipe's
    assert checks["model claude"]["ok"] and good.stats.by_path["/v1/messages"] == 1
    assert good.stats.by_path["/v1/chat/completions"] == 1
    assert "Bearer sk-good" in good.auth
    # each call's tokens as the stub counted them; the price is the recipe's
    prompt = count_tokens("Reply with the single word: ok")
    assert ok["tokens"] == prompt + count_tokens("ok") == checks["model claude"]["tokens"]
    assert good.stats.prompt_tokens + good.stats.completion_tokens == 2 * ok["tokens"]
    assert ok["cost_usd"] == pytest.approx((prompt * 1000.0 + count_tokens("ok") * 2000.0) / 1e6)
    assert "DOC_MISSING_KEY" in checks["model nokey"]["detail"]
    assert "unreachable" in checks["model down"]["detail"]
    assert "127.0.0.1:9" in checks["model down"]["detail"]
    assert "not JSON" in checks["model garbage"]["detail"]
    assert all(not checks[f"model {n}"]["ok"] for n in ("nokey", "down", "garbage"))
    text = cli("doctor", recipe)
    lines = [x for x in text.stdout.splitlines() if x.startswith("model ")]
    # in the recipe's order (yaml.safe_dump sorted the keys)
    assert [x.split()[1] for x in lines] == ["claude", "down", "garbage", "good", "nokey"]
    assert [x.split()[2] for x in lines] == ["ok", "FAIL", "FAIL", "ok", "FAIL"]
    assert text.stderr.strip() == (
        "rsiframe: doctor: not ok: model down, model garbage, model nokey"
    )


def test_a_bad_recipe_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rsiframe.cli.doctor.MACHINE", {})
    res = cli("doctor", tmp_path / "missing.yaml")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and not res.stdout
    recipe = _recipe(tmp_path, {"p": {"base_url": "http://x/v1", "model": "m"}}, model="q")
    res = cli("doctor", recipe)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "slots.reflect.config.model: unknown model 'q'; declared: p" in res.stderr
