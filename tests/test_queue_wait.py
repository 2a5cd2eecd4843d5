"""A request waiting in the model server's queue does not make a harness give up (issue 12
item 6): rewards do not depend on how busy the host and the server are.

The server takes generations one at a time, in arrival order, and sends an interim
``100 Continue`` every second while a request waits behind others, so a client's read
timeout counts connecting and its own generation, not the queue. Each test keeps one real
server busy with real requests (on another endpoint, as other candidates' evaluations do)
and checks that the wait really was longer than the client's timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import math
import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from dth import BUILD, tiny_model, write_seed, write_tasks

from rsiframe.dth.serving import QUEUE_HEARTBEAT_S, ModelServer, OpenEndpoint
from rsiframe.evaluators.local import LocalEngine
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.sandbox.bwrap import make_sandbox
from rsiframe.tasks.taskset import TaskSet

REPO = Path(__file__).resolve().parents[1]
BIG = {"model": "tiny", "prompt": ["rev abc="] * 64, "n": 64, "max_tokens": 8, "temperature": 0}
SMALL = {"model": "tiny", "prompt": ["rev abc=", "rev hello="], "max_tokens": 6, "temperature": 0}


class UnixConnection(http.client.HTTPConnection):
    """http.client (what urllib and requests use) over the endpoint's socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def post(ep: OpenEndpoint, body: dict[str, Any], timeout: float = 600) -> tuple[int, dict]:
    conn = UnixConnection(ep.folder / "api.sock", timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body).encode())
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@contextlib.contextmanager
def busy(server: ModelServer, model_dir: Path, seconds: float) -> Iterator[None]:
    """Keep the model generating for at least ``seconds`` with requests queued on an
    endpoint of its own; scaled to this machine by timing one request first."""
    ep = server.open(f"flood-{time.monotonic_ns()}", model_dir, "tiny", None)
    t0 = time.perf_counter()
    assert post(ep, BIG)[0] == 200
    one = time.perf_counter() - t0
    n = min(math.ceil(seconds / one) + 1, 48)  # within the server's connections and backlog
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(post, ep, BIG) for _ in range(n)]
        time.sleep(min(1.0, one / 2))  # they are in the queue before anything else arrives
        try:
            yield
        finally:
            assert all(f.result()[0] == 200 for f in futures)
            server.close_endpoint(ep)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("queue")
    model_dir = tiny_model(tmp)
    server = ModelServer(make_sandbox("auto"), model_dir.parents[1], threads=1)
    server.open("warm", model_dir, "tiny", None)  # torch imported, the model loaded
    yield server, model_dir
    server.stop()


def test_a_request_queued_past_its_read_timeout_still_gets_its_answer(served) -> None:  # type: ignore[no-untyped-def]
    server, model_dir = served
    timeout = 3 * QUEUE_HEARTBEAT_S
    ep = server.open("patient", model_dir, "tiny", None)
    with busy(server, model_dir, 3 * timeout):
        status, out = post(ep, SMALL, timeout=timeout)
    usage = server.close_endpoint(ep)
    assert status == 200 and len(out["choices"]) == 2
    assert usage["queue_max_s"] > timeout  # it really waited longer than its read timeout
    assert usage["queue_s"] >= usage["queue_max_s"] and usage["cancelled"] == 0


def test_without_the_interim_responses_the_same_wait_times_the_client_out(served) -> None:  # type: ignore[no-untyped-def]
    """The control: an HTTP/1.0 client gets no interim responses (it could not parse them),
    so the same queue makes its read timeout fire; the server then drops the request."""
    server, model_dir = served
    timeout = 3 * QUEUE_HEARTBEAT_S
    ep = server.open("http10", model_dir, "tiny", None)
    body = json.dumps(SMALL).encode()
    head = f"POST /v1/completions HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with busy(server, model_dir, 3 * timeout), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(ep.folder / "api.sock"))
        s.sendall(head + body)
        with pytest.raises(TimeoutError):
            s.recv(1)
    usage = server.close_endpoint(ep)
    assert usage["cancelled"] == 1 and usage["completion_tokens"] == 0


# -- the seed's harness in a real evaluation ----------------------------------------------


def _seed_with_textops_harness(root: Path, **harness: Any) -> Path:
    """The tiny D/T/H seed, answered by the textops seed's own harness (``rev word=``)."""
    seed = write_seed(root)
    shutil.rmtree(seed / "harness")
    shutil.copytree(REPO / "tasks" / "textops" / "seed" / "harness", seed / "harness")
    cfg = yaml.safe_load((seed / "harness" / "config.yaml").read_text())
    cfg["decoding"].update(temperature=0, max_tokens=8)
    cfg.update(harness)
    (seed / "harness" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return seed


@pytest.mark.e2e
def test_a_busy_server_does_not_change_the_reward_and_a_timeout_is_named(
    tmp_path: Path,
) -> None:
    """The seed's harness (request_timeout_s 3 s) scores the same on a quiet server and on
    one whose queue holds its requests longer than that; with a timeout it cannot meet,
    every task's error names the timeout (a loud failure, not a quiet lower score)."""
    model_dir = tiny_model(tmp_path / "model")  # the same build inputs: a cache hit below
    tasks = TaskSet.load(write_tasks(tmp_path / "tasks", n_tasks=3, per_task=6))
    (tmp_path / "work").mkdir()
    config = LocalEngineConfig.model_validate(
        {
            "agent": 'python3 "$RSI_CANDIDATE/harness/run.py"',
            "concurrency": 2,
            "agent_timeout_s": 300,
            "build": BUILD,
        }
    )
    engine = LocalEngine(config, tmp_path / "work", model_dir.parents[2])
    timeout = 3 * QUEUE_HEARTBEAT_S
    seed = _seed_with_textops_harness(tmp_path / "seed", request_timeout_s=timeout)
    hurried = _seed_with_textops_harness(tmp_path / "hurried", request_timeout_s=0.01)
    ts = list(tasks.tasks.values())
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    def run(cand: Path) -> tuple[Any, dict[str, float], dict[str, bytes]]:
        """The evaluation, its rewards and each task's answers.jsonl as the harness wrote it."""
        out = engine.run(cand, ts, put)
        answers = {
            t: blobs[r.trajectory["artifacts"]["app/answers.jsonl"]] for t, r in out.runs.items()
        }
        return out, {t: r.reward for t, r in out.runs.items()}, answers

    try:
        quiet, quiet_rewards, quiet_answers = run(seed)
        assert engine.server is not None
        assert not any(r.error for r in quiet.runs.values()), quiet.runs
        said = [json.loads(x)["answer"] for a in quiet_answers.values() for x in a.splitlines()]
        assert len(said) == 18 and any(said)  # the model answered (compared below byte for byte)
        with busy(engine.server, model_dir, 3 * timeout):
            loaded, loaded_rewards, loaded_answers = run(seed)
        assert not any(r.error for r in loaded.runs.values()), loaded.runs
        assert loaded_rewards == quiet_rewards
        assert loaded_answers == quiet_answers  # every completion, byte for byte
        assert loaded.usage is not None and loaded.usage["queue_max_s"] > timeout  # it waited
        with busy(engine.server, model_dir, 2):  # queued: an answer within 0.01 s is impossible
            late, late_rewards, _ = run(hurried)
    finally:
        engine.close()
    for r in late.runs.values():
        assert r.error and "timed out after 0.01s (request_timeout_s)" in r.error, r.error
        assert r.trajectory["agent"]["exit_code"] == 1
    assert late_rewards == {t: 0.0 for t in quiet_rewards}
