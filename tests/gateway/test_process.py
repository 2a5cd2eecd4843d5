"""rsiframe.gateway.process: the gateway as its own process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rsiframe import llm
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from tests.support.gateway import MSG, PROVIDER_KEY
from tests.support.paths import REPO


def test_the_gateway_runs_as_its_own_process(tmp_path: Path) -> None:
    import os
    import subprocess

    stub = StubLLM(Script(answers=[Answer(content="from the process")]))
    srv = ServerThread(stub.app).start()
    recipe = REPO / "recipes" / "llm-hill-climb.yaml"
    env = {**os.environ, "LLM_BASE_URL": srv.url, "LLM_API_KEY": PROVIDER_KEY}
    cmd = [sys.executable, "-m", "rsiframe.gateway.app", "--recipe", str(recipe)]
    proc = subprocess.Popen(
        [*cmd, "--state", str(tmp_path), "--port", "0"], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        info = json.loads(proc.stdout.readline())
        client = llm.GatewayClient(info["url"], info["token"])
        assert client.chat("proposer", MSG).text == "from the process"
        assert stub.auth == [f"Bearer {PROVIDER_KEY}"]
    finally:
        proc.terminate()
        proc.wait(10)
        srv.stop()
    missing = subprocess.run(
        [*cmd, "--state", str(tmp_path)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLM_")},
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
