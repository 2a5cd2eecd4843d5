"""A real two-node Ray cluster on this machine: the SAT quickstart through it, and its loss.

``ray start --head`` (no CPUs, so every evaluation runs on the other node) plus a second
``ray start --address`` with its own temp folder; loopback addresses only (127.0.0.2/3:
Ray would turn 127.0.0.1 into the host's public address), no dashboard, a small object
store, token auth off for this private cluster. Both nodes are always stopped afterwards,
by their process groups (never ``ray stop``, which would stop every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cli_proc, events, status_json
from tests.support.paths import REPO
from tests.support.ray import certified

pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
pytestmark = pytest.mark.e2e

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
SAT = REPO / "recipes" / "sat3-quickstart.yaml"
SMALL = [
    "--set",
    "budget.max_generations=1",
    "--set",
    "children_per_generation=3",
    "--set",
    "random_seed=1",
]
#: the ray CLI beside this Python (tests/support/ray.RAY is the recipe override, not this)
RAY_BIN = str(Path(sys.executable).with_name("ray"))
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass
class Cluster:
    address: str
    procs: list[subprocess.Popen]

    def kill(self) -> None:
        """Stop both nodes: SIGTERM to each process group, then SIGKILL what is left."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                time.sleep(0.2)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["nice", "-n", "10", RAY_BIN, "start", "--block", "--disable-usage-stats", *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: killed as one
        env={**os.environ, **ENV},
    )


def _wait_started(proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"ray start failed:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    temp = Path(tempfile.mkdtemp(prefix="rsc-"))  # short: Ray's socket paths are limited
    port = _free_port(HEAD_IP)
    small = ["--object-store-memory", str(80 << 20)]
    c = Cluster(f"{HEAD_IP}:{port}", [])
    try:
        head_log = temp / "head.log"
        c.procs.append(
            _start(
                ["--head", "--node-ip-address", HEAD_IP, "--port", str(port), "--num-cpus", "0",
                 "--include-dashboard", "false", "--temp-dir", str(temp / "h"), *small],
                head_log,
            )
        )  # fmt: skip
        _wait_started(c.procs[0], head_log)
        worker_log = temp / "worker.log"
        c.procs.append(
            _start(
                ["--address", c.address, "--node-ip-address", WORKER_IP, "--num-cpus", "2",
                 "--temp-dir", str(temp / "w"), *small],
                worker_log,
            )
        )  # fmt: skip
        _wait_started(c.procs[1], worker_log)
        yield c
    finally:
        c.kill()
        shutil.rmtree(temp, ignore_errors=True)


def _any_certified(run_dir: Path) -> bool:
    """Whether the live run has certified anything yet (its last line may be half written)."""
    path = run_dir / "events.jsonl"
    return path.exists() and '"type":"evaluation_certified"' in path.read_text(errors="replace")


def _run(*args: object, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return cli_proc(*map(str, args), env=ENV, timeout=timeout)


def test_sat_quickstart_on_a_two_node_cluster_gets_the_local_champion(
    cluster: Cluster, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local", tmp_path / "ray"
    res = _run("run", SAT, "--out", remote, "--quiet", "--ray-address", cluster.address, *SMALL)
    assert res.returncode == 0, res.stderr
    res = _run("run", SAT, "--out", local, "--quiet", *SMALL)
    assert res.returncode == 0, res.stderr
    a, b = status_json(local), status_json(remote)
    assert b["champion"] == a["champion"] != "c0000"  # a child beat the seed, on both
    scores = {(p["candidate"], p["split"]): p["rewards"] for p in certified(local)}
    assert {(p["candidate"], p["split"]): p["rewards"] for p in certified(remote)} == scores
    # the head has no CPUs: every evaluation ran on the second node, and says so
    nodes = {p["executor"]["node"] for p in certified(remote)}
    assert len(nodes) == 1 and all(p["executor"]["kind"] == "ray" for p in certified(remote))
    assert _run("verify", remote).returncode == 0


def test_a_lost_cluster_ends_the_run_failed_and_it_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rsiframe.cli.main", "run", str(SAT), "--out", str(out), "--quiet",
         "--ray-address", cluster.address, "--set", "budget.max_generations=1",
         "--set", "children_per_generation=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if _any_certified(out):
                break  # one evaluation came back from the cluster; the next one is running
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        cluster.kill()
        _, err = proc.communicate(timeout=120)  # ends, never hangs
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "the Ray cluster at" in err and "stopped answering" in err
    last = events(out)[-1]
    assert last["type"] == "run_finished" and last["data"]["state"] == "failed"
    before = len(certified(out))

    # resumable: here without the cluster (the recipe's executor is local); the open attempt
    # is interrupted and runs again, nothing is certified twice
    res = _run("resume", out, "--quiet")
    assert res.returncode == 0, res.stderr
    assert status_json(out)["state"] == "finished"
    preds = certified(out)
    assert len(preds) > before
    keys = [(p["candidate"], p["split"]) for p in preds]
    assert len(keys) == len(set(keys))
    assert any(e["type"] == "evaluation_interrupted" for e in events(out))
    assert _run("verify", out).returncode == 0
