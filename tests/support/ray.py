"""The Ray executor's tests: the recipe override and what the certificates say."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tests.support.cli import events

RAY = ["--set", "evaluator.executor.kind=ray"]


def certified(run_dir: Path) -> list[dict]:
    return [
        json.loads(base64.b64decode(e["data"]["envelope"]["payload"]))["predicate"]
        for e in events(run_dir)
        if e["type"] == "evaluation_certified"
    ]
