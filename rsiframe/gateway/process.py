"""The run's model gateway as a process of its own (the side that runs in that process).

The engine (:mod:`rsiframe.gateway.runmodels`) starts it with the provider keys in its
environment and keeps its stdin open; nothing else of the run holds a key. Protocol:

1. the engine writes one JSON line: ``{"models": {...}, "limits": {...}, "elsewhere":
   [tokens, cost], "held": tokens}`` (the recipe's ``models:``, the budget keys, what the
   run spent outside the gateway, e.g. an evaluation's served model, and the tokens held
   for the champion's sealed evaluation);
2. this process takes ``STATE/gateway.lock`` (a gateway of the same run that is still
   finishing its calls is waited for, so a resumed run sees every call it paid for),
   opens the ledger, starts the gateway on 127.0.0.1 and an admin socket in a folder only
   this user can enter, and prints one JSON line ``{"url", "admin", "admin_token"}``;
3. it serves until stdin closes (the engine stopped, or died: SIGKILL included). Then
   calls in flight still finish and are recorded (a sent call is paid for), and it exits.

The admin socket mints and revokes consumer tokens and sandbox endpoints for the engine
(``POST /consumer``, ``/sandbox``, ``/revoke``, ``/elsewhere``, ``/hold``); sandboxes never
see it. A consumer is minted bound to ``models`` (a sandbox endpoint to its one ``model``),
may ``share`` the allowance of an earlier token, and only an ``anchor`` one may spend the
tokens held (``/hold``); ``/revoke`` answers what each revoked token
called (``{"usage": {token: {"models": ..., "refusals": ...}}}``).

    python -m rsiframe.gateway.process --state RUN/model-calls < config-line
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rsiframe.errors import RsiError
from rsiframe.gateway.app import Consumer, Gateway, Limits
from rsiframe.gateway.ledger import Ledger
from rsiframe.recipe.models import ModelSpec

ADMIN_SOCKET = "admin.sock"
#: in the run's model-calls folder: held (flock) by the run's gateway while it lives
LOCK = "gateway.lock"
#: the longest a gateway waits for an earlier one of the same run to finish its calls
LOCK_WAIT_S = 600.0


def take_lock(folder: Path, wait_s: float = LOCK_WAIT_S) -> int:
    """An exclusive lock on the run's ledger, held for this process's life; the lock file
    names this process (``pid``), so a resumed run can say what it waits for."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        except BlockingIOError as exc:
            if time.monotonic() > deadline:
                os.close(fd)
                msg = f"{folder}: another gateway of this run is still running"
                raise RsiError(msg) from exc
            time.sleep(0.05)


def _draws(body: dict[str, Any]) -> tuple[str, str] | None:
    """A minted consumer's ``draws``: the [candidate, consumer name] it repeats, or None."""
    draws = body.get("draws")
    return (str(draws[0]), str(draws[1])) if isinstance(draws, list) and len(draws) == 2 else None


def admin_app(gw: Gateway, token: str) -> Starlette:
    """The engine's control routes: consumers and sandbox endpoints, minted and revoked."""
    minted: dict[str, Consumer] = {}

    async def guarded(request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        if request.headers.get("authorization") != f"Bearer {token}":
            return None, JSONResponse({"error": "unknown admin token"}, 401)
        body = await request.json()
        return (body, None) if isinstance(body, dict) else (None, JSONResponse({}, 400))

    async def consumer(request: Request) -> Response:
        body, refused = await guarded(request)
        if body is None:
            return refused or JSONResponse({}, 400)
        c = gw.consumer(
            body["name"],
            candidate=body.get("candidate"),
            slot=body.get("slot"),
            models=body.get("models"),
            allowance=body.get("allowance"),
            share=body.get("share"),
            draws=_draws(body),
            anchor=bool(body.get("anchor")),
        )
        minted[c.token] = c
        return JSONResponse({"token": c.token})

    async def sandbox(request: Request) -> Response:
        body, refused = await guarded(request)
        if body is None:
            return refused or JSONResponse({}, 400)
        # it starts a server on the gateway's own loop: not from this coroutine (that loop)
        ep = await asyncio.to_thread(
            gw.sandbox_endpoint,
            body["name"],
            model=body["model"],
            candidate=body.get("candidate"),
            slot=body.get("slot"),
            allowance=body.get("allowance"),
            share=body.get("share"),
            draws=_draws(body),
            anchor=bool(body.get("anchor")),
        )
        minted[ep.token] = gw.consumers[ep.token]
        return JSONResponse({"name": ep.name, "folder": str(ep.folder), "token": ep.token})

    async def revoke(request: Request) -> Response:
        body, refused = await guarded(request)
        if body is None:
            return refused or JSONResponse({}, 400)
        usage = {}
        for t in body.get("tokens", []):
            c = minted.pop(t, None)
            if c is not None:
                usage[t] = gw.revoke(c)
        return JSONResponse({"usage": usage})

    async def elsewhere(request: Request) -> Response:
        body, refused = await guarded(request)
        if body is None:
            return refused or JSONResponse({}, 400)
        gw.elsewhere = (int(body["tokens"]), float(body["cost"]))
        return JSONResponse({})

    async def hold(request: Request) -> Response:
        body, refused = await guarded(request)
        if body is None:
            return refused or JSONResponse({}, 400)
        gw.held = max(0, int(body["tokens"]))
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/consumer", consumer, methods=["POST"]),
            Route("/sandbox", sandbox, methods=["POST"]),
            Route("/revoke", revoke, methods=["POST"]),
            Route("/elsewhere", elsewhere, methods=["POST"]),
            Route("/hold", hold, methods=["POST"]),
        ]
    )


def serve(state: Path, config: dict[str, Any]) -> tuple[Gateway, str, str]:
    """Start the gateway and its admin socket; (gateway, admin socket path, admin token)."""
    models = {n: ModelSpec.model_validate(m) for n, m in config["models"].items()}
    limits = Limits(**config.get("limits", {}))
    archive = Ledger(Path(config["archive"])) if config.get("archive") else None  # a replay
    gw = Gateway(models, Ledger(state), limits=limits, archive=archive).start()
    tokens, cost = config.get("elsewhere", [0, 0.0])
    gw.elsewhere = (int(tokens), float(cost))
    gw.held = int(config.get("held", 0))
    admin_dir = gw.socket_root / ("admin-" + secrets.token_hex(8))
    admin_dir.mkdir(mode=0o700)
    path = admin_dir / ADMIN_SOCKET
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    token = secrets.token_urlsafe(24)
    gw._serve_socket(sock, admin_app(gw, token))
    return gw, str(path), token


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="rsiframe.gateway.process", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--state", type=Path, required=True, help="the run's model-calls folder")
    args = ap.parse_args(argv)
    try:
        config = json.loads(sys.stdin.readline())
        args.state.mkdir(parents=True, exist_ok=True)
        take_lock(args.state)
        gw, admin, token = serve(args.state, config)
    except (RsiError, ValueError, KeyError, TypeError) as exc:
        print(f"rsiframe gateway: {exc}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps({"url": gw.url, "admin": admin, "admin_token": token}), flush=True)
    closed = threading.Event()

    def watch() -> None:
        while sys.stdin.read(65536):
            pass
        closed.set()

    threading.Thread(target=watch, daemon=True).start()
    closed.wait()
    # the engine is gone: calls in flight finish and are recorded before this process ends
    grace = max((s.timeout_s * (s.retries + 1) for s in gw.specs.values()), default=1.0)
    gw.stop(grace_s=min(grace + 1.0, LOCK_WAIT_S))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
