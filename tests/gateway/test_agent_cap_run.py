"""agent_cli's ``max_tokens_per_mutation`` through the real CLI (issue 20, item 5): the
gateway refuses the coding agent's call that would pass the cap (``n: 64`` of 100 tokens
under a cap of 500), and the child whose agent was refused is rejected with that reason,
even though the agent edited the work folder and exited 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.cli import cli_proc, status_json
from tests.support.mini import make_mini

pytestmark = pytest.mark.skipif(
    not bwrap_works(), reason="platform limit: bubblewrap does not work here"
)

#: the coding agent: 64 answers of 100 tokens, then it edits the child whatever it got
GREEDY = """import json, os, urllib.error, urllib.request
body = {"model": os.environ["RSI_MODEL"], "messages": [{"role": "user", "content": "go"}],
        "n": 64, "max_tokens": 100}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    json.dumps(body).encode(), {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                "Content-Type": "application/json"})
try:
    urllib.request.urlopen(req).read()
except urllib.error.HTTPError as exc:
    print("refused", exc.code)
open("config.yaml", "w").write("level: 9\\nstyle: plain\\n")
"""


def test_a_mutation_refused_for_its_cap_is_rejected(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "proj", generations=1, children=1)
    (mini.seed / "greedy.py").write_text(GREEDY)
    stub = StubLLM(Script(answers=[Answer(content="x" * 400, repeat=True)]))
    srv = ServerThread(stub.app).start()
    data = yaml.safe_load(mini.recipe.read_text())
    data["models"] = {"coder": {"base_url": srv.url, "model": "up", "retries": 0}}
    data["surface"] = {"include": ["config.yaml"]}
    cfg = {"model": "coder", "profile": "command", "command": "python3 greedy.py"}
    data["slots"]["mutate"] = {
        "operator": "agent_cli",
        "config": {**cfg, "max_tokens_per_mutation": 500},
    }
    mini.recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        res = cli_proc("run", mini.recipe, "--out", tmp_path / "run", "--quiet", timeout=300)
    finally:
        srv.stop()
    assert res.returncode == 0, res.stderr
    assert stub.stats.requests == 0  # the 6,400-token call never reached the provider
    st = status_json(tmp_path / "run")
    (kid,) = [c for c in st["candidates"] if c["parent"] is not None]
    assert kid["state"] == "rejected"
    assert "allowance of 500 tokens exhausted" in " ".join(kid["reasons"])
    ledger = tmp_path / "run" / "model-calls" / "ledger.jsonl"
    (entry,) = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert (entry["status"], entry["code"], entry["slot"]) == (429, "allowance", "mutate")
