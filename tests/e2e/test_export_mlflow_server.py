"""``rsiframe export`` against a real ``mlflow server`` started on loopback (its own SQLite
store and artifact folder): the run, its metrics and its report page arrive over HTTP, and
a second export updates the same run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support.cli import cli, status_json
from tests.support.mini import Mini, run_mini

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1",
        ],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):  # the first start creates its tables (tens of seconds on 2 cores)
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not answer in 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_export_to_a_running_mlflow_server(mini: Mini, mlflow_server: str) -> None:
    out = run_mini(mini)
    st = status_json(out)
    res = cli("export", out, "--mlflow", mlflow_server, "--json")
    assert res.exit_code == 0, res.stderr
    first = json.loads(res.stdout)["runs"][0]
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(first["mlflow_run_id"])
    assert run.data.tags["rsiframe.run_id"] == st["run_id"]
    assert run.data.tags["rsiframe.taskset_fingerprint"]
    assert "gate" in run.data.metrics and "budget.max_generations" in run.data.params
    local = client.download_artifacts(run.info.run_id, "report/report.html", str(mini.root))
    assert "Verified: every check" in Path(local).read_text()
    res = cli("export", out, "--mlflow", mlflow_server, "--json")
    assert res.exit_code == 0, res.stderr
    again = json.loads(res.stdout)["runs"][0]
    assert again["mlflow_run_id"] == first["mlflow_run_id"] and again["metrics_logged"] == 0
    assert len(client.search_runs([run.info.experiment_id])) == 1
