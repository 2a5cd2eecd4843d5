"""The model server: the OpenAI-compatible contract, metering, refusals, the forwarder.

One real server process (inside the sandbox, as the evaluator runs it) serves one really
trained tiny model for the whole module; requests go over its Unix socket, and one test
goes through the in-sandbox forwarder exactly as a harness does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rsiframe.dth.serving import (
    SCRIPT,
    ModelRefused,
    ModelServer,
    OpenEndpoint,
    ServerError,
    check_model_dir,
)
from rsiframe.sandbox.bwrap import Mount, make_sandbox
from tests.support.dth import tiny_model


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=120)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def call(ep: OpenEndpoint, method: str, path: str, body: Any = None) -> tuple[int, dict]:
    conn = UnixConnection(ep.folder / "api.sock")
    data = body if isinstance(body, bytes) else (json.dumps(body).encode() if body else None)
    conn.request(method, path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    conn.close()
    return resp.status, out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("serving")
    model_dir = tiny_model(tmp)
    models_root = model_dir.parents[1]  # <cache>/train/<key>/out
    server = ModelServer(make_sandbox("auto"), models_root, threads=1)
    ep = server.open("main", model_dir, "tiny", None)
    yield server, ep, model_dir
    server.stop()


def complete(ep: OpenEndpoint, **body: Any) -> tuple[int, dict]:
    return call(ep, "POST", "/v1/completions", {"model": "tiny", **body})


def test_models_lists_only_the_model_under_test(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    status, body = call(ep, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["tiny"]


def test_list_prompt_with_n_is_prompt_major_and_greedy_is_deterministic(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    prompts = ["rev abc=", "rev hello=", "rev xy="]
    status, body = complete(ep, prompt=prompts, n=2, max_tokens=6, temperature=0)
    assert status == 200, body
    choices = body["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    # greedy: both samples of a prompt agree, and a single-prompt request gives the same text
    for i, p in enumerate(prompts):
        assert choices[2 * i]["text"] == choices[2 * i + 1]["text"]
        _, one = complete(ep, prompt=p, max_tokens=6, temperature=0)
        assert one["choices"][0]["text"] == choices[2 * i]["text"]  # batching changes nothing
    usage = body["usage"]
    assert usage["prompt_tokens"] == sum(len(p) for p in prompts)  # one token per character
    assert 0 < usage["completion_tokens"] <= 6 * 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_stop_strings_cut_the_text(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    _, free = complete(ep, prompt="rev abcd=", max_tokens=8, temperature=0)
    text = free["choices"][0]["text"]
    assert text, "the model produced nothing to cut"
    _, cut = complete(ep, prompt="rev abcd=", max_tokens=8, temperature=0, stop=[text[1:2]])
    assert cut["choices"][0]["text"] == text[: text.index(text[1:2])] if len(text) > 1 else True
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_sampling_is_seeded(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    body = {"prompt": ["rev abc="] * 4, "max_tokens": 6, "temperature": 1.5, "seed": 7}
    _, a = complete(ep, **body)
    _, b = complete(ep, **body)
    assert [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]]


def test_chat_completions(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    status, body = call(
        ep,
        "POST",
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "ab"}], "max_tokens": 4},
    )
    assert status == 200, body
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "other", "prompt": "x"}, 404, "does not exist"),
        ({"model": "tiny", "prompt": 5}, 400, "prompt must be"),
        ({"model": "tiny", "prompt": "x", "n": 0}, 400, "n must be"),
        ({"model": "tiny", "prompt": "x", "max_tokens": 10**9}, 400, "max_tokens must be"),
        ({"model": "tiny", "prompt": "x", "stop": 3}, 400, "stop must be"),
        (b"{not json", 400, "not JSON"),
    ],
)
def test_errors_are_openai_shaped(served, body: Any, status: int, words: str) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    got, out = call(ep, "POST", "/v1/completions", body)
    assert got == status
    assert words in out["error"]["message"] and out["error"]["type"]


def test_unknown_route(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    status, out = call(ep, "GET", "/v1/nothing")
    assert status == 404 and "error" in out


def test_tokens_are_metered_per_endpoint_and_the_allowance_is_enforced(served) -> None:  # type: ignore[no-untyped-def]
    server, _ep, model_dir = served
    ep = server.open("metered", model_dir, "tiny", 60)
    # each request holds its worst case: 11 prompt tokens + 8 completion tokens
    spent, refused = 0, 0
    try:
        for _ in range(10):
            status, out = complete(ep, prompt="rev abcdef=", max_tokens=8, temperature=0)
            if status == 429:
                refused += 1
                assert out["error"]["type"] == "insufficient_quota"
                assert "may use 19 tokens" in out["error"]["message"]
                break
            assert status == 200
            spent += out["usage"]["total_tokens"]
            assert spent <= 60
    finally:
        usage = server.close_endpoint(ep)
    assert refused == 1 and 60 - spent < 19  # refused only once the worst case did not fit
    assert usage["total_tokens"] == spent and usage["refused"] == 1
    assert not ep.folder.exists()


def test_a_request_over_the_declared_cap_is_refused_before_it_runs(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    # 64 prompts x n 64 x 16 tokens = 65,536 > the default cap of 32,768
    status, out = complete(ep, prompt=["rev ab="] * 64, n=64, max_tokens=16)
    assert status == 400 and out["error"]["code"] == "request_too_large"
    assert "65536" in out["error"]["message"] and "32768" in out["error"]["message"]


def test_parallel_requests_never_overdraw_the_allowance(served) -> None:  # type: ignore[no-untyped-def]
    """8 requests at once against a small allowance: the reservation admits only what
    fits, so the charged total stays within the allowance (the old check-then-charge
    let all 8 through)."""
    server, _ep, model_dir = served
    ep = server.open("parallel", model_dir, "tiny", 200)
    body = {"prompt": ["rev abc=", "rev abd=", "rev xyz="], "max_tokens": 16, "temperature": 0}
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: complete(ep, **body), range(8)))
    finally:
        usage = server.close_endpoint(ep)
    statuses = sorted(status for status, _ in results)
    charged = sum(out["usage"]["total_tokens"] for status, out in results if status == 200)
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1
    assert set(statuses) <= {200, 429}
    assert usage["total_tokens"] == charged <= 200
    assert usage["refused"] == statuses.count(429)


def raw(ep: OpenEndpoint, head: str, body: bytes = b"") -> tuple[int, str]:
    """Send bytes as they are; the status line and body of the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(ep.folder / "api.sock"))
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1].decode()


@pytest.mark.parametrize(
    ("headers", "status", "words"),
    [
        ("Content-Length: -1\n", 400, "one non-negative integer"),
        ("Content-Length: +5\n", 400, "one non-negative integer"),
        ("Content-Length: 5\nContent-Length: 6\n", 400, "one non-negative integer"),
        ("", 411, "Content-Length is required"),
        ("Transfer-Encoding: chunked\n", 411, "Transfer-Encoding is not accepted"),
        (f"Content-Length: {(16 << 20) + 1}\n", 413, "request body over"),
        ("Content-Length: 99999999999999\n", 400, "one non-negative integer"),
    ],
)
def test_the_body_reader_is_strict(served, headers: str, status: int, words: str) -> None:  # type: ignore[no-untyped-def]
    """Bad framing is answered at once, without reading (or buffering) a byte of body."""
    _server, ep, _ = served
    head = f"POST /v1/completions HTTP/1.1\nHost: x\n{headers}Connection: keep-alive\n\n"
    got, text = raw(ep, head, b"x" * 1000)  # the server closes without waiting for more
    assert got == status and words in json.loads(text)["error"]["message"]
    assert complete(ep, prompt="rev ab=", max_tokens=2)[0] == 200  # still serving


def test_a_short_body_is_refused(served) -> None:  # type: ignore[no-untyped-def]
    _server, ep, _ = served
    head = "POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: 50\n\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(ep.folder / "api.sock"))
        s.sendall(head.replace("\n", "\r\n").encode() + b'{"model":')
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert b" 400 " in data.split(b"\r\n", 1)[0] and b"ended before" in data


BIG = {"prompt": ["rev abc="] * 64, "n": 64, "max_tokens": 8, "temperature": 0}  # 32,768


def _send_and_leave(ep: OpenEndpoint, wait_s: float) -> None:
    """A saboteur: send a huge request, wait a moment, then go away without reading."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(ep.folder / "api.sock"))
    body = json.dumps({"model": "tiny", **BIG}).encode()
    head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    s.sendall(head.encode() + body)
    time.sleep(wait_s)
    s.close()


def test_generation_stops_when_the_client_leaves(served) -> None:  # type: ignore[no-untyped-def]
    """The abandoned request is cancelled at its next token: a request on another
    endpoint queued behind it then completes, and the saboteur is charged only what it
    generated before it left."""
    server, _ep, model_dir = served
    # the saboteur must leave while its request is generating; the whole generation can beat
    # a fixed pause on a fast or a loaded machine, so shorter pauses are tried until one does
    for i, pause in enumerate((1.0, 0.3, 0.1, 0.03)):
        bad = server.open(f"saboteur{i}", model_dir, "tiny", None)
        good = server.open(f"honest{i}", model_dir, "tiny", None)
        try:
            _send_and_leave(bad, pause)
            status, out = complete(
                good, prompt=["rev abc=", "rev xyz="], max_tokens=6, temperature=0
            )
            assert status == 200 and len(out["choices"]) == 2
            # the honest request waited for the model lock, so the saboteur's generation is
            # over; its handler settles the usage a moment after releasing the lock
            for _ in range(30):
                usage = server.call({"op": "usage", "name": f"saboteur{i}"})["usage"]
                if usage["cancelled"]:
                    break
                time.sleep(0.1)
        finally:
            server.close_endpoint(bad)
            server.close_endpoint(good)
        if usage["cancelled"]:
            break
    assert usage["cancelled"] == 1
    assert usage["completion_tokens"] < 64 * 64 * 8


def test_closing_an_endpoint_cancels_its_requests(served) -> None:  # type: ignore[no-untyped-def]
    """The evaluation ends while its request runs: the request stops and is charged for
    what it generated; the close does not wait for the whole generation."""
    server, _ep, model_dir = served
    # the close must land while the request is generating; on a fast or a loaded machine the
    # whole generation can beat a fixed pause, so shorter pauses are tried until one does
    for i, pause in enumerate((1.0, 0.3, 0.1, 0.03)):
        ep = server.open(f"ending{i}", model_dir, "tiny", None)
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(complete, ep, **BIG)
            time.sleep(pause)
            usage = server.close_endpoint(ep)
            status, out = None, None
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, out = fut.result()
        if usage["cancelled"]:
            break
        assert status == 200  # not cancelled: it had finished before the close
    assert usage["cancelled"] == 1 and usage["completion_tokens"] < 64 * 64 * 8
    if status is not None:
        assert status == 503 and out is not None and out["error"]["code"] == "cancelled"


def test_the_server_runs_under_its_memory_limit(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """memory_mb binds the server process: far too little and it cannot even start."""
    _server, _ep, model_dir = served
    small = ModelServer(
        make_sandbox("auto"), model_dir.parents[1], memory_mb=64, start_timeout_s=60
    )
    try:
        with pytest.raises(ServerError):
            small.open("x", model_dir, "tiny", None)
    finally:
        small.stop()


def test_a_pickled_model_is_refused(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, _ep, model_dir = served
    bad = model_dir.parents[1] / "pickled" / "out"
    shutil.copytree(model_dir, bad)
    (bad / "pytorch_model.bin").write_bytes(b"\x80\x04 a pickle")
    try:
        with pytest.raises(ModelRefused, match="pickled weights are refused"):
            server.open("pickled", bad, "tiny", None)
    finally:
        shutil.rmtree(bad.parent)


def test_model_folder_checks(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"")
    (d / "tokenizer.json").write_text("{}")
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert check_model_dir(d)["model_type"] == "gpt2"
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "auto_map": {"x": "y"}}))
    with pytest.raises(ModelRefused, match="remote code"):
        check_model_dir(d)
    (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelRefused, match="not allowed"):
        check_model_dir(d)
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (d / "modeling_evil.py").write_text("import os")
    with pytest.raises(ModelRefused, match="code files"):
        check_model_dir(d)


@pytest.mark.parametrize("kind", ["auto", "process"])
def test_a_sandboxed_harness_reaches_the_endpoint_through_the_forwarder(
    served, tmp_path: Path, kind: str
) -> None:  # type: ignore[no-untyped-def]
    """No network in the sandbox: the forwarder on 127.0.0.1 is the only way out (the
    process fallback has the host's loopback, and works the same way)."""
    server, _ep, model_dir = served
    ep = server.open(f"fwd-{kind}", model_dir, "tiny", None)
    sb = make_sandbox(kind)
    work = tmp_path / "app"
    work.mkdir()
    harness = (
        "import json, os, urllib.request\n"
        "base = os.environ['OPENAI_BASE_URL']\n"
        "body = json.dumps({'model': 'tiny', 'prompt': ['rev ab=', 'rev cd='], 'max_tokens': 3,"
        " 'temperature': 0}).encode()\n"
        "req = urllib.request.Request(base + '/completions', data=body,"
        " headers={'Content-Type': 'application/json'})\n"
        "out = json.loads(urllib.request.urlopen(req, timeout=60).read())\n"
        "models = json.loads(urllib.request.urlopen(base + '/models', timeout=60).read())\n"
        "print(json.dumps({'n': len(out['choices']), 'base': base,"
        " 'models': [m['id'] for m in models['data']]}))\n"
    )
    (work / "h.py").write_text(harness)
    m_app = Mount(work, "/app", writable=True)
    m_ep = Mount(ep.folder, "/rsi/endpoint")
    m_fwd = Mount(SCRIPT, "/rsi/serving.py")
    argv = ["python3", sb.view(m_fwd), "forward", "--socket", sb.view(m_ep) + "/api.sock", "--"]
    res = sb.run(
        [*argv, "python3", "h.py"],
        mounts=[m_app, m_ep, m_fwd],
        cwd=m_app,
        env={},
        timeout=120,
    )
    usage = server.close_endpoint(ep)
    assert res.exit_code == 0, res.stderr.decode()
    out = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert out["n"] == 2 and out["models"] == ["tiny"]
    assert out["base"].startswith("http://127.0.0.1:") and out["base"].endswith("/v1")
    assert usage["requests"] == 1 and usage["total_tokens"] > 0


def test_a_llama_model_is_served_too(served) -> None:  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    server, _ep, model_dir = served
    llama_dir = model_dir.parents[1] / "llama" / "out"
    llama_dir.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (model_dir / name).is_file():
            shutil.copy(model_dir / name, llama_dir / name)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
        eos_token_id=2,
        pad_token_id=0,
    )
    LlamaForCausalLM(cfg).save_pretrained(llama_dir, safe_serialization=True)
    try:
        ep = server.open("llama", llama_dir, "tiny", None)
        status, body = complete(ep, prompt=["rev ab=", "rev abc="], max_tokens=3, temperature=0)
        server.close_endpoint(ep)
        assert status == 200 and len(body["choices"]) == 2
    finally:
        shutil.rmtree(llama_dir.parent)


def test_the_server_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    # bubblewrap's --die-with-parent follows the starting thread: a server an evaluation's
    # worker thread started died when that thread ended, and every open endpoint with it
    other = ModelServer(make_sandbox("auto"), tmp_path / "models", threads=1)
    try:
        starter = threading.Thread(target=other.start)
        starter.start()
        starter.join()
        time.sleep(1.5)
        assert other._proc is not None and other._proc.poll() is None
        assert other.call({"op": "ping"})["ok"]
    finally:
        other.stop()


def test_two_evaluations_starting_the_server_side_by_side_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's splits run side by side, and each starts the server: unsynchronised,
    each spawned a process of its own and one's endpoint folder was made in the other's
    serve folder (CI: "ServerError: FileNotFoundError" for the seed at K=2)."""
    import subprocess

    from rsiframe.dth import serving

    spawned: list[object] = []
    real = subprocess.Popen

    def slow_popen(*a: Any, **kw: Any) -> Any:  # widens the window between check and spawn
        spawned.append(a)
        time.sleep(0.3)
        return real(*a, **kw)

    monkeypatch.setattr(serving.subprocess, "Popen", slow_popen)
    srv = ModelServer(make_sandbox("auto"), tmp_path / "models", threads=1)
    try:
        starters = [threading.Thread(target=srv.start) for _ in range(2)]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        assert len(spawned) == 1
        assert srv.call({"op": "ping"})["ok"]
    finally:
        srv.stop()
