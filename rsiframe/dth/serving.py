"""Serve built models behind an OpenAI-compatible HTTP API, one endpoint per evaluation.

One long-lived server process per evaluator (importing torch costs seconds, so it is
paid once) runs inside the sandbox with the model cache read-only. The host drives it
with JSON lines on its stdin (``open`` an endpoint for a model, read its ``usage``,
``close`` it). Each endpoint is a Unix socket in a folder of its own, bound to one model
and one token allowance, so the metering of an evaluation is exact and its harness can
reach no other model. An evaluation's sandbox has no network: it gets that folder
mounted, and :func:`forward` (this file run as a script, standard library only) listens
on ``127.0.0.1`` inside the sandbox, pipes bytes to the socket, and starts the harness
with ``OPENAI_BASE_URL`` pointing at itself.

API: ``POST /v1/completions`` (``prompt`` a string or a list, ``n``, ``max_tokens``,
``temperature`` 0 = greedy, ``top_p``, ``seed``, ``stop``; choices prompt-major),
``POST /v1/chat/completions``, ``GET /v1/models``; errors are OpenAI-shaped JSON.
Backends: ``transformers`` (CPU; batched, left-padded generation) and ``vllm`` (a
``vllm serve`` subprocess per model behind the same endpoints; chosen by ``auto`` when
the ``serve`` extra is importable and a GPU is present). Only a safetensors model folder
of an allowed architecture (GPT-2, Llama) loads: pickles and remote code are refused.

    python rsiframe/dth/serving.py serve --backend transformers      # the server (JSON on stdin)
    python rsiframe/dth/serving.py forward --socket S -- CMD ...     # the in-sandbox forwarder
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import re
import select
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

#: model_type -> transformers class; nothing else loads (and never with remote code)
ALLOWED_ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
MAX_PROMPTS = 4096
MAX_BODY = 16 << 20
#: open connections per endpoint; more are closed at once (each one is a thread)
MAX_CONNECTIONS = 64
#: seconds a connection may sit idle or take to send its request
IO_TIMEOUT_S = 120.0
#: upper bound on the tokens of a prompt the server cannot tokenize itself (vLLM):
#: byte-level tokenizers never make more tokens than bytes, plus special tokens
SPECIAL_TOKEN_SLACK = 8
#: how long closing an endpoint waits for its running and queued requests to stop
CLOSE_WAIT_S = 60.0
#: while a request waits for the model, an interim ``100 Continue`` this often (HTTP/1.1
#: clients skip them), so a client's read timeout measures the server's work, never its queue
QUEUE_HEARTBEAT_S = 1.0


class ModelRefused(Exception):
    """The folder is not a model this server will load (pickles, remote code, wrong arch)."""


class Cancelled(Exception):
    """Generation stopped because its client left or its evaluation ended.

    Carries the tokens produced before it stopped: they are charged."""

    def __init__(self, prompt_tokens: int, completion_tokens: int) -> None:
        super().__init__("cancelled")
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code = status, message, type_, code

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }


def check_model_dir(path: Path) -> dict[str, Any]:
    """Refuse anything but a safetensors model of an allowed architecture; return its config."""
    if not path.is_dir():
        raise ModelRefused(f"{path} is not a folder")
    pickles = sorted(p.name for p in path.rglob("*") if p.name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise ModelRefused(f"pickled weights are refused: {', '.join(pickles[:3])}")
    if not (path / "model.safetensors").is_file():
        raise ModelRefused("model.safetensors is missing")
    if any(p.suffix == ".py" for p in path.rglob("*")):
        raise ModelRefused("code files in a model folder are refused (no remote code)")
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelRefused(f"config.json is missing or not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelRefused("config.json is not an object")
    if config.get("model_type") not in ALLOWED_ARCHITECTURES:
        raise ModelRefused(
            f"architecture {config.get('model_type')!r} is not allowed "
            f"(allowed: {', '.join(sorted(ALLOWED_ARCHITECTURES))})"
        )
    if "auto_map" in config:
        raise ModelRefused("config.json asks for remote code (auto_map)")
    if not (path / "tokenizer.json").is_file():
        raise ModelRefused("tokenizer.json is missing")
    return config


# -- backends -------------------------------------------------------------------------


@dataclass
class Choice:
    text: str
    finish_reason: str
    tokens: int


class TransformersBackend:
    """CPU generation with transformers: batched, left-padded; greedy at temperature 0."""

    name = "transformers"

    def __init__(self, max_batch: int = 64) -> None:
        import torch

        threads = int(os.environ.get("RSI_THREADS", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        self.max_batch = max_batch
        self._models: dict[str, tuple[Any, Any]] = {}
        # one generation at a time, taken in arrival order (a queue, not a lock race)
        self._turns: collections.deque[object] = collections.deque()
        self._busy = False
        self._cond = threading.Condition()

    def load(self, key: str, path: Path) -> None:
        if key in self._models:
            return
        config = check_model_dir(path)
        import transformers
        from transformers import AutoTokenizer

        cls = getattr(transformers, ALLOWED_ARCHITECTURES[config["model_type"]])
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
        model = cls.from_pretrained(str(path), use_safetensors=True)
        model.eval()
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token or tok.unk_token
        if len(self._models) >= 2:  # keep the newest two (parent and child)
            self._models.pop(next(iter(self._models)))
        self._models[key] = (model, tok)

    def context(self, key: str) -> int:
        model, _ = self._models[key]
        cfg = model.config
        n = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
        return int(n or 1024)

    def count(self, key: str, text: str) -> int:
        _, tok = self._models[key]
        return len(tok(text)["input_ids"])

    def chat_prompt(self, key: str, messages: list[dict[str, str]]) -> str:
        _, tok = self._models[key]
        if getattr(tok, "chat_template", None):
            return str(
                tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            )
        lines = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages]
        return "\n".join([*lines, "assistant:"])

    def _decode(self, tok: Any, ids: list[int]) -> str:
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None and backend.decoder is None:
            # a character tokenizer without a decoder: tokens are the text, no separators
            special = set(tok.all_special_ids)
            return "".join(tok.convert_ids_to_tokens([i for i in ids if i not in special]))
        return str(tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def prompt_tokens(self, key: str, prompts: list[str]) -> int:
        """The exact prompt tokens of a request (what it is charged for its prompts)."""
        return sum(self.count(key, p) for p in prompts)

    def _acquire(self, cancelled: Callable[[], bool], waiting: Callable[[float], None]) -> None:
        """Wait for the model in arrival order, telling ``waiting`` the seconds so far (and
        the total when the turn comes); a request cancelled while it waits is dropped, so a
        finished evaluation's queued requests never run (and never delay another's)."""
        me, t0 = object(), time.monotonic()
        with self._cond:
            self._turns.append(me)
        try:
            while True:
                with self._cond:
                    if not self._busy and self._turns[0] is me:
                        self._turns.popleft()
                        self._busy = True
                        break
                    self._cond.wait(0.05)
                if cancelled():
                    raise Cancelled(0, 0)
                waiting(time.monotonic() - t0)  # outside the lock: it may write to a socket
        except BaseException:
            with self._cond:
                self._turns.remove(me)
                self._cond.notify_all()
            raise
        waiting(time.monotonic() - t0)

    def _release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    def generate(
        self,
        key: str,
        prompts: list[str],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        stop: list[str],
        cancelled: Callable[[], bool] = lambda: False,
        waiting: Callable[[float], None] = lambda s: None,
    ) -> tuple[list[Choice], int]:
        """Choices (prompt-major) and prompt tokens; :class:`Cancelled` as soon as
        ``cancelled()`` says so: it is asked before every generated token and while the
        request waits for the model (``waiting``: the seconds it has waited so far)."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class StopWhenCancelled(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), bool(cancelled()), dtype=torch.bool)

        model, tok = self._models[key]
        flat = [p for p in prompts for _ in range(n)]
        prompt_tokens = self.prompt_tokens(key, prompts)
        limit = self.context(key)
        out: list[Choice] = []
        self._acquire(cancelled, waiting)
        try:
            return self._generate_locked(
                model,
                tok,
                flat,
                prompt_tokens,
                limit,
                out,
                StoppingCriteriaList([StopWhenCancelled()]),
                cancelled,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                stop=stop,
            )
        finally:
            self._release()

    def _generate_locked(
        self,
        model: Any,
        tok: Any,
        flat: list[str],
        prompt_tokens: int,
        limit: int,
        out: list[Choice],
        stopping: Any,
        cancelled: Callable[[], bool],
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        stop: list[str],
    ) -> tuple[list[Choice], int]:
        import torch

        eos = tok.eos_token_id
        with torch.no_grad():
            if cancelled():
                raise Cancelled(0, 0)
            if temperature > 0:
                torch.manual_seed(0 if seed is None else seed)
            for i in range(0, len(flat), self.max_batch):
                chunk = flat[i : i + self.max_batch]
                enc = tok(chunk, return_tensors="pt", padding=True)
                width = enc["input_ids"].shape[1]
                new = max(1, min(max_tokens, limit - width))
                if width >= limit:
                    raise ApiError(
                        400,
                        f"prompt is {width} tokens; the context is {limit}",
                        "invalid_request_error",
                        "context_length_exceeded",
                    )
                kwargs: dict[str, Any] = {
                    "max_new_tokens": new,
                    "pad_token_id": tok.pad_token_id,
                    "stopping_criteria": stopping,
                }
                if eos is not None:
                    kwargs["eos_token_id"] = eos
                if temperature > 0:
                    kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
                else:
                    kwargs.update(do_sample=False)
                gen = model.generate(**enc, **kwargs)
                for row in gen[:, width:].tolist():
                    ids: list[int] = []
                    hit_eos = False
                    for t in row:
                        if eos is not None and t == eos:
                            hit_eos = True
                            break
                        if t == tok.pad_token_id and t != eos:
                            break
                        ids.append(t)
                    text = self._decode(tok, ids)
                    reason = "stop" if hit_eos else "length"
                    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
                    if cut >= 0:
                        text, reason = text[:cut], "stop"
                    out.append(Choice(text, reason, len(ids) + (1 if hit_eos else 0)))
                if cancelled():  # stopped early: charge what was generated, answer nothing
                    raise Cancelled(prompt_tokens, sum(c.tokens for c in out))
        return out, prompt_tokens


class VllmBackend:
    """``vllm serve`` per model (GPU), proxied; the same endpoints and metering.

    Untested on this project's CPU machines: the contract is small on purpose.
    """

    name = "vllm"

    def __init__(self, max_batch: int = 64) -> None:
        self._procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}

    def load(self, key: str, path: Path) -> None:
        if key in self._procs:
            return
        check_model_dir(path)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [
            "vllm",
            "serve",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            key,
        ]
        proc = subprocess.Popen(argv, stdout=sys.stderr, stderr=sys.stderr)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ModelRefused(f"vllm serve exited with {proc.returncode}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                self._procs[key] = (proc, port)
                return
            time.sleep(1)
        proc.kill()
        raise ModelRefused("vllm serve did not become healthy in 600 s")

    @staticmethod
    def prompt_tokens(key: str, prompts: list[str]) -> int:
        """An upper bound (vLLM tokenizes): no byte-level token is shorter than a byte."""
        return sum(len(p.encode()) + SPECIAL_TOKEN_SLACK for p in prompts)

    def proxy(
        self, key: str, path: str, body: dict[str, Any], cancelled: Callable[[], bool]
    ) -> dict[str, Any]:
        """Forward a validated request; closing the connection on cancel makes vLLM abort it."""
        import http.client

        _, port = self._procs[key]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            conn.request(
                "POST",
                path,
                json.dumps({**body, "model": key}).encode(),
                {"Content-Type": "application/json"},
            )
            while not select.select([conn.sock], [], [], 0.1)[0]:
                if cancelled():
                    raise Cancelled(0, 0)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise ApiError(resp.status, data.decode(errors="replace")[:500], "upstream_error")
            return dict(json.loads(data))
        finally:
            conn.close()


def vllm_usable() -> bool:
    """True when the ``serve`` extra is importable and an NVIDIA GPU is visible."""
    return importlib.util.find_spec("vllm") is not None and (
        Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None
    )


# -- endpoints ------------------------------------------------------------------------


@dataclass
class Endpoint:
    """One evaluation's endpoint: its model, its token allowance and what it used.

    A request first *reserves* its worst case (prompt tokens + prompts * n * max_tokens)
    and is refused (429) when that does not fit beside what is spent and what the requests
    in flight hold; it then *settles* to what it really used. So the tokens charged never
    pass ``token_limit``, however many requests run at once."""

    name: str
    model: str  # the name the harness uses
    key: str  # the backend's model key
    token_limit: int | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    refused: int = 0
    cancelled: int = 0
    reserved: int = 0
    active: int = 0
    queue_s: float = 0.0  # seconds requests waited for the model (the others' generation)
    queue_max_s: float = 0.0
    closed: threading.Event = field(default_factory=threading.Event)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "requests": self.requests,
            "refused": self.refused,
            "cancelled": self.cancelled,
            "queue_s": round(self.queue_s, 3),
            "queue_max_s": round(self.queue_max_s, 3),
        }

    def reserve(self, tokens: int) -> None:
        """Hold ``tokens`` of the allowance for one request, or refuse it."""
        with self.cond:
            if self.closed.is_set():
                raise ApiError(503, "this evaluation has ended", "server_error", "evaluation_ended")
            spent = self.prompt_tokens + self.completion_tokens
            if self.token_limit is not None and spent + self.reserved + tokens > self.token_limit:
                self.refused += 1
                left = max(0, self.token_limit - spent - self.reserved)
                raise ApiError(
                    429,
                    f"the run's model-token budget cannot cover this request: it may use "
                    f"{tokens} tokens and {left} are left",
                    "insufficient_quota",
                    "insufficient_quota",
                )
            self.reserved += tokens
            self.active += 1

    def settle(
        self, held: int, prompt: int, completion: int, cancelled: bool = False, queued: float = 0.0
    ) -> None:
        """Release a reservation and charge what the request used (never more than held);
        ``queued``: the seconds it waited for the model."""
        prompt = min(prompt, held)
        completion = min(completion, held - prompt)
        with self.cond:
            self.reserved -= held
            self.active -= 1
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            if prompt or completion or not cancelled:
                self.requests += 1
            self.cancelled += int(cancelled)
            self.queue_s += queued
            self.queue_max_s = max(self.queue_max_s, queued)
            self.cond.notify_all()

    def close(self, timeout: float) -> None:
        """End the evaluation: its requests stop at their next token; wait for them."""
        self.closed.set()
        with self.cond:
            self.cond.wait_for(lambda: self.active == 0, timeout)


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ApiError(400, f"{key} must be a number in [{lo:g}, {hi:g}]", "invalid_request_error")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """What one request may ask for: ``max_tokens`` each, and prompts * n * max_tokens."""

    max_tokens: int = 512
    request_tokens: int = 32768
    #: stop a request whose client left or whose evaluation ended (off only for the
    #: integrity self-test's proof, ``--no-cancel``: the behaviour before the fix)
    cancel: bool = True


@dataclass
class Request:
    """A validated completions request."""

    prompts: list[str]
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    messages: list[dict[str, str]] | None = None  # chat

    @property
    def asked(self) -> int:
        """The most completion tokens it can produce."""
        return len(self.prompts) * self.n * self.max_tokens


def _parse(body: dict[str, Any], chat: bool, limits: Limits) -> Request:
    n = int(_number(body, "n", 1, 1, 64))
    max_tokens = int(_number(body, "max_tokens", 16, 1, limits.max_tokens))
    temperature = _number(body, "temperature", 1.0, 0.0, 5.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0) or 1.0
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "seed must be an integer", "invalid_request_error")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", "invalid_request_error")
    messages = None
    prompts: Any
    if chat:
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)
        ):
            raise ApiError(
                400, "messages must be a non-empty list of {role, content}", "invalid_request_error"
            )
        prompts = [""]  # rendered by the backend's chat template
    else:
        prompt = body.get("prompt")
        prompts = [prompt] if isinstance(prompt, str) else prompt  # checked below
        if (
            not isinstance(prompts, list)
            or not prompts
            or not all(isinstance(p, str) for p in prompts)
        ):
            raise ApiError(
                400,
                "prompt must be a string or a non-empty list of strings",
                "invalid_request_error",
            )
    req = Request(prompts, n, max_tokens, temperature, top_p, seed, stop, messages)
    if len(prompts) * n > MAX_PROMPTS:
        raise ApiError(
            400, f"at most {MAX_PROMPTS} completions per request", "invalid_request_error"
        )
    if req.asked > limits.request_tokens:
        raise ApiError(
            400,
            f"this request may generate {req.asked} tokens (prompts * n * max_tokens); "
            f"the cap is {limits.request_tokens}",
            "invalid_request_error",
            "request_too_large",
        )
    return req


class Api:
    """The OpenAI-compatible request handling of one endpoint."""

    def __init__(self, backend: Any, ep: Endpoint, limits: Limits) -> None:
        self.backend, self.ep, self.limits = backend, ep, limits

    def handle(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        cancelled: Callable[[], bool] = lambda: False,
        waiting: Callable[[float], None] = lambda s: None,
    ) -> dict[str, Any]:
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path == "/v1/models":
            return {
                "object": "list",
                "data": [
                    {"id": self.ep.model, "object": "model", "created": 0, "owned_by": "rsiframe"}
                ],
            }
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            if not isinstance(body, dict):
                raise ApiError(400, "the body must be a JSON object", "invalid_request_error")
            if body.get("model") != self.ep.model:
                raise ApiError(
                    404,
                    f"model {body.get('model')!r} does not exist here; use {self.ep.model!r}",
                    "invalid_request_error",
                    "model_not_found",
                )
            chat = path.endswith("chat/completions")
            req = _parse(body, chat, self.limits)
            if isinstance(self.backend, VllmBackend):
                return self._proxy(req, chat, cancelled)
            return self._complete(req, chat, cancelled, waiting)
        raise ApiError(404, f"no route {method} {path}", "invalid_request_error", "not_found")

    def _stopped(self) -> ApiError:
        return ApiError(503, "the request was cancelled", "server_error", "cancelled")

    def _proxy(self, req: Request, chat: bool, cancelled: Callable[[], bool]) -> dict[str, Any]:
        texts = [json.dumps(req.messages)] if chat else req.prompts
        held = self.backend.prompt_tokens(self.ep.key, texts) + req.asked
        self.ep.reserve(held)
        body: dict[str, Any] = {
            "n": req.n,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "stop": req.stop,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        body.update({"messages": req.messages} if chat else {"prompt": req.prompts})
        path = "/v1/chat/completions" if chat else "/v1/completions"
        try:
            resp = self.backend.proxy(self.ep.key, path, body, cancelled)
        except Cancelled:  # vLLM does not say how far it got: the reservation is charged
            self.ep.settle(held, 0, held, cancelled=True)
            raise self._stopped() from None
        except BaseException:
            self.ep.settle(held, 0, 0)
            raise
        usage = resp.get("usage") or {}
        self.ep.settle(
            held, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        )
        resp["model"] = self.ep.model
        return resp

    def _complete(
        self,
        req: Request,
        chat: bool,
        cancelled: Callable[[], bool],
        waiting: Callable[[float], None],
    ) -> dict[str, Any]:
        if req.messages is not None:
            req.prompts = [self.backend.chat_prompt(self.ep.key, req.messages)]
        held = self.backend.prompt_tokens(self.ep.key, req.prompts) + req.asked
        self.ep.reserve(held)
        waited = [0.0]

        def queued(seconds: float) -> None:
            waited[0] = seconds
            waiting(seconds)

        try:
            choices, prompt_tokens = self.backend.generate(
                self.ep.key,
                req.prompts,
                n=req.n,
                max_tokens=req.max_tokens,
                temperature=req.temperature,
                top_p=req.top_p,
                seed=req.seed,
                stop=req.stop,
                cancelled=cancelled,
                waiting=queued,
            )
        except Cancelled as exc:
            self.ep.settle(
                held, exc.prompt_tokens, exc.completion_tokens, cancelled=True, queued=waited[0]
            )
            raise self._stopped() from None
        except BaseException:
            self.ep.settle(held, 0, 0, queued=waited[0])
            raise
        completion_tokens = sum(c.tokens for c in choices)
        self.ep.settle(held, prompt_tokens, completion_tokens, queued=waited[0])
        created = int(time.time())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if chat:
            return {
                "id": f"chatcmpl-{self.ep.requests}",
                "object": "chat.completion",
                "created": created,
                "model": self.ep.model,
                "usage": usage,
                "choices": [
                    {
                        "index": i,
                        "finish_reason": c.finish_reason,
                        "message": {"role": "assistant", "content": c.text},
                    }
                    for i, c in enumerate(choices)
                ],
            }
        return {
            "id": f"cmpl-{self.ep.requests}",
            "object": "text_completion",
            "created": created,
            "model": self.ep.model,
            "usage": usage,
            "choices": [
                {"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
                for i, c in enumerate(choices)
            ],
        }


_CONTENT_LENGTH = re.compile(r"[0-9]{1,12}")


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per connection, at most ``MAX_CONNECTIONS``; more are closed at once."""

    daemon_threads = True
    block_on_close = False
    # the listen backlog: a harness's burst of connections waits for the accept loop on a
    # busy host (with socketserver's 5, a client's connect failed with EAGAIN)
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler]) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(path, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def read_body(headers: Any, rfile: Any) -> bytes:
    """The request body, read strictly: exactly one plain ``Content-Length`` no larger
    than ``MAX_BODY``, no ``Transfer-Encoding``; nothing is read before that is checked."""
    if headers.get("Transfer-Encoding") is not None:
        raise ApiError(
            411,
            "Transfer-Encoding is not accepted; send the body with a Content-Length",
            "invalid_request_error",
        )
    values = headers.get_all("Content-Length") or []
    if not values:
        raise ApiError(411, "Content-Length is required", "invalid_request_error")
    if len(values) != 1 or not _CONTENT_LENGTH.fullmatch(values[0].strip()):
        raise ApiError(
            400, "Content-Length must be one non-negative integer", "invalid_request_error"
        )
    length = int(values[0])
    if length > MAX_BODY:
        raise ApiError(413, f"request body over {MAX_BODY} bytes", "invalid_request_error")
    data = bytes(rfile.read(length))
    if len(data) != length:
        raise ApiError(400, "the body ended before Content-Length bytes", "invalid_request_error")
    return data


def _handler(api: Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = IO_TIMEOUT_S  # an idle or slow connection does not hold its thread forever
        _beats = 1  # interim responses sent (or due) for the request in hand

        def address_string(self) -> str:
            return "sandbox"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client is gone
                self.close_connection = True

        def _client_gone(self) -> bool:
            """True once the client closed its side (asked before every generated token)."""
            sock = self.connection
            try:
                if not select.select([sock], [], [], 0)[0]:
                    return False
                return sock.recv(1, socket.MSG_PEEK) == b""
            except (OSError, ValueError):
                return True

        def _cancelled(self) -> bool:
            if not api.limits.cancel:
                return False
            return api.ep.closed.is_set() or self._client_gone()

        def _waiting(self, seconds: float) -> None:
            """The request is queued behind others: an interim ``100 Continue`` every
            ``QUEUE_HEARTBEAT_S``, so a client's read timeout counts connecting and its own
            generation, not the wait for other requests (HTTP/1.0 clients get none)."""
            if self.request_version != "HTTP/1.1" or seconds < self._beats * QUEUE_HEARTBEAT_S:
                return
            self._beats = int(seconds // QUEUE_HEARTBEAT_S) + 1
            try:
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
            except OSError:  # the client is gone: _cancelled sees it
                self.close_connection = True

        def _serve(self, method: str) -> None:
            try:
                body = None
                if method == "POST":
                    try:
                        raw = read_body(self.headers, self.rfile)
                    except ApiError:
                        self.close_connection = True  # unread body bytes must not be parsed
                        raise
                    try:
                        body = json.loads(raw or b"null")
                    except ValueError as exc:
                        raise ApiError(
                            400, f"body is not JSON: {exc}", "invalid_request_error"
                        ) from exc
                self._beats = 1
                self._send(200, api.handle(method, self.path, body, self._cancelled, self._waiting))
            except ApiError as exc:
                self._send(exc.status, exc.body())
            except Exception as exc:  # a server bug must still answer in OpenAI's shape
                self._send(
                    500, ApiError(500, f"{type(exc).__name__}: {exc}", "server_error").body()
                )

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


class Server:
    """The server process: endpoints keyed by name, driven by JSON lines on stdin."""

    def __init__(self, backend: Any, limits: Limits) -> None:
        self.backend = backend
        self.limits = limits
        self.endpoints: dict[str, tuple[Endpoint, _UnixHTTPServer]] = {}

    def command(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "backend": self.backend.name}
        if op == "open":
            key, sock = str(req["key"]), Path(req["socket"])
            try:
                self.backend.load(key, Path(req["model_dir"]))
            except ModelRefused as exc:
                return {"ok": False, "refused": True, "error": str(exc)}
            except Exception as exc:  # a model that does not load is the candidate's fault
                return {"ok": False, "refused": True, "error": f"{type(exc).__name__}: {exc}"}
            ep = Endpoint(str(req["name"]), str(req["model"]), key, req.get("token_limit"))
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            httpd = _UnixHTTPServer(str(sock), _handler(Api(self.backend, ep, self.limits)))
            os.chmod(sock, 0o777)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            self.endpoints[ep.name] = (ep, httpd)
            return {"ok": True}
        name = str(req.get("name"))
        if name not in self.endpoints:
            return {"ok": False, "error": f"no endpoint {name!r}"}
        ep, httpd = self.endpoints[name]
        if op == "usage":
            return {"ok": True, "usage": ep.usage()}
        if op == "close":
            # the evaluation is over: its requests, running or queued, stop now
            ep.closed.set()
            httpd.shutdown()
            httpd.server_close()
            # nothing to wait for when requests are not stopped (the self-test's proof only)
            ep.close(timeout=CLOSE_WAIT_S if self.limits.cancel else 0)
            del self.endpoints[name]
            return {"ok": True, "usage": ep.usage()}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def loop(self, inp: Any, out: Any) -> None:
        for line in inp:
            try:
                reply = self.command(json.loads(line))
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()


# -- the in-sandbox forwarder ---------------------------------------------------------


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def forward(sock_path: str, argv: list[str]) -> int:
    """Expose the Unix socket at http://127.0.0.1:PORT/v1 and run ``argv`` against it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(sock_path)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    env = {
        **os.environ,
        "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "rsiframe-local"),
    }
    return subprocess.call(argv, env=env)


# -- the host side --------------------------------------------------------------------


class ServerError(RuntimeError):
    """The model server failed (an infrastructure problem, not the candidate's)."""


#: this file, mounted read-only into both the server's and each harness's sandbox
SCRIPT = Path(__file__).resolve()
#: the endpoint's Unix socket, inside its folder
SOCKET = "api.sock"


@dataclass
class OpenEndpoint:
    name: str
    model: str
    folder: Path  # host folder holding SOCKET: mount it into the evaluation sandbox

    def harness(self, sb: Any, argv: list[str]) -> tuple[list[str], list[Any], dict[str, str]]:
        """``argv`` wrapped in the in-sandbox forwarder, the mounts it needs (the
        endpoint's folder only, and this script) and the model name for the harness."""
        from rsiframe.sandbox.bwrap import Mount

        m_ep = Mount(self.folder, "/rsi/endpoint")
        m_fwd = Mount(SCRIPT, "/rsi/serving.py")
        wrapped = [
            sys.executable,
            sb.view(m_fwd),
            "forward",
            "--socket",
            f"{sb.view(m_ep)}/{SOCKET}",
            "--",
            *argv,
        ]
        return wrapped, [m_ep, m_fwd], {"RSI_MODEL": self.model}


class ModelServer:
    """Host handle on the long-lived server process, run inside ``sandbox``.

    ``models_root`` is mounted read-only; endpoints live in a short private folder
    (Unix socket paths are limited to ~100 bytes). Started on first use, so importing
    torch overlaps with the build; restarted once if it dies.
    """

    def __init__(
        self,
        sandbox: Any,
        models_root: Path,
        *,
        backend: str = "auto",
        threads: int = 1,
        max_batch: int = 64,
        max_tokens: int = 512,
        max_request_tokens: int = 32768,
        memory_mb: int | None = None,
        start_timeout_s: float = 300.0,
        cancel: bool = True,
    ) -> None:
        self.sandbox = sandbox
        #: False only for the self-test's proof (``faults.off("serve_cancel")``)
        self.cancel = cancel
        self.models_root = models_root
        self.backend = backend
        self.threads = threads
        self.max_batch = max_batch
        self.max_tokens = max_tokens
        self.max_request_tokens = max_request_tokens
        self.memory_mb = memory_mb
        self.start_timeout_s = start_timeout_s
        self.dir: Path | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._lines: Any = None
        self._lock = threading.Lock()
        #: one start at a time: two evaluations starting the server side by side (the
        #: seed's splits) would each spawn one, in folders of their own
        self._starting = threading.Lock()
        self._ready = False
        self.backend_used: str | None = None

    def _mounts(self) -> tuple[Any, Any, Any]:
        from rsiframe.sandbox.bwrap import Mount

        assert self.dir is not None
        return (
            Mount(self.models_root, "/models"),
            Mount(self.dir, "/serve", writable=True),
            Mount(SCRIPT, "/rsi/serving.py"),
        )

    def start(self) -> None:
        """Start the process (without waiting for it to be ready), unless it runs."""
        with self._starting:
            if self._proc is None or self._proc.poll() is not None:
                self._start()

    def _start(self) -> None:
        import queue
        import tempfile

        if self.backend == "auto":  # decided here: GPU devices are not visible in bwrap
            self.backend = "vllm" if vllm_usable() else "transformers"
        if self.backend == "vllm" and self.sandbox.kind == "bwrap":
            from rsiframe.sandbox.bwrap import ProcessSandbox

            # bubblewrap's fresh /dev hides the GPU: vLLM runs as a plain process group
            self.sandbox = ProcessSandbox()
        self.models_root.mkdir(parents=True, exist_ok=True)
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="rsi-srv-"))
        from rsiframe.dth.hostfacts import kernel_env

        m_models, m_serve, m_script = self._mounts()
        view = self.sandbox.view
        env = {
            **kernel_env(),  # the kernel paths the build used (host facts)
            "HOME": "/tmp",
            "RSI_THREADS": str(self.threads),
            "OMP_NUM_THREADS": str(self.threads),
            "MKL_NUM_THREADS": str(self.threads),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HOME": "/tmp/hf",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        }
        argv = [
            sys.executable,
            view(m_script),
            "serve",
            "--backend",
            self.backend,
            "--max-batch",
            str(self.max_batch),
            "--max-tokens",
            str(self.max_tokens),
            "--max-request-tokens",
            str(self.max_request_tokens),
            *([] if self.cancel else ["--no-cancel"]),
        ]
        # CUDA maps far more address space than it uses: the limit binds the CPU backend only
        memory = self.memory_mb if self.backend == "transformers" else None
        cmd, cwd, host_env = self.sandbox.launch(
            argv, mounts=[m_models, m_serve, m_script], cwd=m_serve, env=env, memory_mb=memory
        )
        log = (self.dir / "server.log").open("ab")
        lines: queue.Queue[str | None] = queue.Queue()
        spawned: queue.Queue[subprocess.Popen[str] | BaseException] = queue.Queue()

        def pump() -> None:
            # started on this thread, which lives as long as the server's output: bubblewrap's
            # --die-with-parent follows the thread that started it, not the process, so a
            # server started on an evaluation's worker thread died when that thread ended
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=cwd,
                    env=host_env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    start_new_session=True,
                )
            except BaseException as exc:
                spawned.put(exc)
                return
            finally:
                log.close()
            spawned.put(proc)
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name="rsiframe-model-server").start()
        got = spawned.get()
        if isinstance(got, BaseException):
            raise got
        self._proc = got
        self._lines = lines
        self._ready = False

    def _read(self, timeout: float) -> dict[str, Any]:
        import queue

        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise ServerError(f"the model server did not answer within {timeout:g} s") from None
        if line is None:
            raise ServerError(f"the model server exited: {self.log_tail()}")
        return dict(json.loads(line))

    def log_tail(self, limit: int = 2000) -> str:
        try:
            assert self.dir is not None
            return (self.dir / "server.log").read_text(errors="replace")[-limit:].strip()
        except (OSError, AssertionError):
            return ""

    def call(self, req: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        with self._lock:
            for attempt in (1, 2):
                if self._proc is None or self._proc.poll() is not None:
                    self.start()
                assert self._proc is not None and self._proc.stdin is not None
                try:
                    if not self._ready:
                        hello = self._read(self.start_timeout_s)
                        self.backend_used = hello.get("backend")
                        self._ready = True
                    self._proc.stdin.write(json.dumps(req) + "\n")
                    self._proc.stdin.flush()
                    return self._read(timeout)
                except (ServerError, OSError) as exc:
                    self._kill()
                    if attempt == 2:
                        raise ServerError(str(exc)) from exc
            raise AssertionError("unreachable")

    def open(self, name: str, model_dir: Path, model: str, token_limit: int | None) -> OpenEndpoint:
        """An endpoint serving ``model_dir`` (under models_root) as ``model``.

        Raises :class:`ModelRefused` when the model does not load (the candidate's fault).
        """
        if self._proc is None:
            self.start()
        assert self.dir is not None
        folder = self.dir / f"ep-{name}"
        folder.mkdir()
        m_models, m_serve, _ = self._mounts()
        rel = model_dir.resolve().relative_to(self.models_root.resolve()).as_posix()
        reply = self.call(
            {
                "op": "open",
                "name": name,
                "model": model,
                "key": rel,
                "model_dir": f"{self.sandbox.view(m_models)}/{rel}",
                "socket": f"{self.sandbox.view(m_serve)}/ep-{name}/{SOCKET}",
                "token_limit": token_limit,
            }
        )
        if not reply.get("ok"):
            shutil.rmtree(folder, ignore_errors=True)
            if reply.get("refused"):
                raise ModelRefused(str(reply.get("error")))
            raise ServerError(str(reply.get("error")))
        return OpenEndpoint(name, model, folder)

    def close_endpoint(self, ep: OpenEndpoint) -> dict[str, int]:
        """Close the endpoint; its final token usage."""
        try:
            # the server waits up to 60 s for the endpoint's requests to stop (a batch being
            # generated ends first): a shorter wait here killed the shared server, and with it
            # every other evaluation's endpoint, when a loaded host made that slow
            reply = self.call({"op": "close", "name": ep.name}, timeout=CLOSE_WAIT_S + 240)
        finally:
            shutil.rmtree(ep.folder, ignore_errors=True)
        if not reply.get("ok"):
            raise ServerError(str(reply.get("error")))
        return dict(reply["usage"])

    def _kill(self) -> None:
        from rsiframe.sandbox.bwrap import kill_group

        if self._proc is not None:
            kill_group(self._proc)
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=10)
        self._proc = None
        self._ready = False

    def stop(self) -> None:
        self._kill()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serving.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    srv = sub.add_parser("serve", help="the model server (JSON lines on stdin)")
    srv.add_argument("--backend", choices=["auto", "transformers", "vllm"], default="auto")
    srv.add_argument("--max-batch", type=int, default=64)
    srv.add_argument("--max-tokens", type=int, default=512, help="cap on max_tokens")
    srv.add_argument(
        "--max-request-tokens", type=int, default=32768, help="cap on prompts * n * max_tokens"
    )
    srv.add_argument("--no-cancel", action="store_true", help=argparse.SUPPRESS)
    fwd = sub.add_parser("forward", help="in-sandbox forwarder: run a command against a socket")
    fwd.add_argument("--socket", required=True)
    fwd.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.cmd == "forward":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        return forward(args.socket, cmd)
    kind = args.backend
    if kind == "auto":
        kind = "vllm" if vllm_usable() else "transformers"
    backend = (VllmBackend if kind == "vllm" else TransformersBackend)(args.max_batch)
    print(json.dumps({"ok": True, "ready": True, "backend": kind}), flush=True)
    limits = Limits(args.max_tokens, args.max_request_tokens, cancel=not args.no_cancel)
    Server(backend, limits).loop(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
