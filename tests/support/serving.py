"""Talking to the model server over its Unix socket, and keeping it busy."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rsiframe.dth.serving import ModelServer, OpenEndpoint

BIG = {"model": "tiny", "prompt": ["rev abc="] * 64, "n": 64, "max_tokens": 8, "temperature": 0}


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
