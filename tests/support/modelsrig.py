"""Runs whose models go through the run's gateway to the scripted stub (the
``models_rig`` fixture): the recipe it writes, and what the run's ledger and events say."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from tests.support.cli import cli_proc, events

PROVIDER_KEY = "sk-provider-secret-0123456789"


EDIT = (
    "raise the level\nconfig.yaml\n```\n<<<<<<< SEARCH\nlevel: 1\n=======\nlevel: 5\n"
    ">>>>>>> REPLACE\n```\n"
)


PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}


@dataclass
class Rig:
    root: Path
    recipe: Path
    stub: StubLLM
    srv: ServerThread

    @property
    def env(self) -> dict[str, str]:
        return {"LLM_BASE_URL": self.srv.url, "LLM_API_KEY": PROVIDER_KEY}

    def write(
        self,
        *,
        answers: list[Answer],
        mutate: dict[str, Any] | None = None,
        budget: dict[str, Any] | None = None,
        model: dict[str, Any] | None = None,
        generations: int = 1,
        children: int = 2,
    ) -> None:
        self.stub.script = Script(answers=answers)
        self.stub.remaining = list(answers)
        data = yaml.safe_load(self.recipe.read_text())
        data["slots"]["mutate"] = mutate or {
            "operator": "llm_edit",
            "config": {"model": "proposer", "max_tokens": 200, "retries": 0},
        }
        data["budget"] = {"max_generations": generations, **(budget or {})}
        data["children_per_generation"] = children
        data["models"] = {
            "proposer": {
                "base_url_env": "LLM_BASE_URL",
                "api_key_env": "LLM_API_KEY",
                "model": "stub-model",
                "price": PRICE,
                "retries": 1,
                **(model or {}),
            }
        }
        self.recipe.write_text(yaml.safe_dump(data, sort_keys=False))

    def run(self, name: str = "run", *extra: str) -> Path:
        out = self.root / name
        res = cli_proc("run", self.recipe, "--out", out, "--quiet", *extra, env=self.env)
        assert res.returncode in (0, 1), res.stderr
        return out


def ledger(run: Path) -> list[dict[str, Any]]:
    path = run / "model-calls" / "ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def model_calls(run: Path) -> list[dict[str, Any]]:
    return [e["data"] for e in events(run) if e["type"] == "model_call"]


def checks(stub: StubLLM) -> int:
    """The models' checks the stub answered (apart from the run's calls: its module)."""
    return stub.stats.checks


def paid(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["status"] == 200 and not e["cached"]]
