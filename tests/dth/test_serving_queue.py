"""A request waiting in the model server's queue does not make a harness give up: the
server's interim responses keep the client waiting."""

from __future__ import annotations

import json
import socket

import pytest

from rsiframe.dth.serving import QUEUE_HEARTBEAT_S, ModelServer
from rsiframe.sandbox.bwrap import make_sandbox
from tests.support.dth import tiny_model
from tests.support.serving import busy, post

SMALL = {"model": "tiny", "prompt": ["rev abc=", "rev hello="], "max_tokens": 6, "temperature": 0}


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
