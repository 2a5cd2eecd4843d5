"""The model server: the OpenAI-compatible contract, metering, refusals, the forwarder.

One real server process (inside the sandbox, as the evaluator runs it) serves one really
trained tiny model for the whole module; requests go over its Unix socket, and one test
goes through the in-sandbox forwarder exactly as a harness does.
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from dth import tiny_model

from rsiframe.evaluator import serving_file
from rsiframe.sandbox import Mount, make_sandbox
from rsiframe.serving import ModelRefused, ModelServer, OpenEndpoint, check_model_dir


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
    ep = server.open("metered", model_dir, "tiny", 30)
    try:
        status, first = complete(ep, prompt=["rev abc=", "rev abd="], max_tokens=8, temperature=0)
        assert status == 200
        spent = first["usage"]["total_tokens"]
        while spent < 30:  # keep asking until the allowance is used up
            status, more = complete(ep, prompt="rev abcdef=", max_tokens=8, temperature=0)
            assert status == 200
            spent += more["usage"]["total_tokens"]
        status, refused = complete(ep, prompt="rev abc=", max_tokens=8, temperature=0)
        assert status == 429 and refused["error"]["type"] == "insufficient_quota"
    finally:
        usage = server.close_endpoint(ep)
    assert usage["total_tokens"] == spent and usage["refused"] == 1
    assert not ep.folder.exists()


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
    m_fwd = Mount(Path(serving_file()), "/rsi/serving.py")
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
