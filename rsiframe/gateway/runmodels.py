"""A run's models, seen from the engine: its gateway process, operator scopes, the ledger.

:class:`RunModels` starts the run's gateway (:mod:`rsiframe.gateway.process`) as a process of
its own, with the provider keys in that process's environment only (they leave this
process's ``os.environ`` while the gateway runs, so no sandbox, evaluation or operator
started from here inherits one). Each operator call runs in :meth:`RunModels.scope`:
``llm.use`` with a client bound to a consumer named ``slot:candidate`` and sandbox
endpoints for the same consumer, revoked when the call ends. The client's token may call
only the models the operator's config names (any declared model when it names none), a
sandbox endpoint's only its one model, and
all of them draw on one allowance (``max_tokens_per_mutation``); an operator call during
which the gateway refused a call for that allowance fails with the refusal, so a coding
agent that hit its cap inside its sandbox cannot hand back a child as if it had not.

The gateway's fsynced ledger is the record of what was paid. :meth:`RunModels.drain`
reads the entries it has not seen yet and hands each to ``on_entry`` (the engine turns it
into a ``model_call`` event with its request and response as artifacts): after every
call an in-process client makes, after every operator call, and once when a run is opened
(the engine catches up calls recorded after a driver died, once its hooks fold them), so
the archive ends up equal to the ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from rsiframe import llm
from rsiframe.archive import events as E
from rsiframe.archive.state import RunState
from rsiframe.errors import ModelError
from rsiframe.gateway.app import SandboxEndpoint
from rsiframe.gateway.bounds import merge_usage
from rsiframe.gateway.ledger import Entry, LedgerTail
from rsiframe.recipe.models import named_models
from rsiframe.recipe.schema import Recipe

#: the folder of a run holding the gateway's ledger and evidence
FOLDER = "model-calls"
#: in FOLDER, a replay's source ledger folder (``rsiframe replay``): the gateway answers from it
REPLAY_OF = "replay-of"
#: operator config keys that cap the tokens one operation may spend through the gateway
ALLOWANCE_KEYS = ("max_tokens_per_mutation", "max_tokens_per_call_site")


def event_of(e: Entry, put: Callable[[bytes], str], evidence: Path) -> E.ModelCall:
    """The ``model_call`` event of one ledger entry; its evidence becomes run artifacts."""

    def artifact(digest: str | None) -> str | None:
        if not digest:
            return None
        with contextlib.suppress(OSError):
            return put((evidence / digest).read_bytes())
        return None

    return E.ModelCall(
        seq=e.seq,
        candidate=e.candidate,
        slot=e.slot,
        consumer=e.consumer,
        model=e.model,
        path=e.path,
        status=e.status,
        prompt_tokens=e.prompt_tokens,
        completion_tokens=e.completion_tokens,
        cost_usd=e.cost_usd,
        latency_ms=e.latency_ms,
        cached=e.cached,
        usage_source=e.usage_source,
        digest=e.digest,
        request=artifact(e.request),
        response=artifact(e.response),
        stream=e.stream,
        error=e.error,
        code=e.code,
        reserved_tokens=e.reserved_tokens,
        rewritten=e.rewritten,
        excess_tokens=e.excess_tokens,
        excess_cost_usd=e.excess_cost_usd,
        violation=e.violation,
    )


def budget_refusal(exc: BaseException | None) -> str | None:
    """The gateway's refusal for the run's budget among ``exc``'s causes (None: none)."""
    while exc is not None:
        if isinstance(exc, llm.BudgetExhausted) and exc.code != "allowance":
            return f"the model gateway refused a call: {exc}"
        exc = exc.__cause__
    return None


def spent_elsewhere(st: RunState) -> tuple[int, float]:
    """What the run spent outside the gateway (an evaluation's served model). Not the
    ``evaluate`` slot's total: that also holds the calls evaluations' agents made through
    the gateway, which its ledger counts already (on resume they were counted twice)."""
    return st.served_tokens, st.served_cost


class RunModels:
    """The run's gateway process and the engine's way to it."""

    @classmethod
    def start(
        cls,
        root: Path,
        recipe: Recipe,
        state: RunState,
        emit: Callable[[E.EventData], object],
        put: Callable[[bytes], str],
        held: int = 0,
    ) -> RunModels | None:
        """Start the gateway of the run in ``root`` (None without ``models:``): its ledger
        entries become ``model_call`` events (``emit``, from any thread; evidence stored
        with ``put``); the caller drains it once (:meth:`drain`) to catch up the calls
        recorded after an earlier driver died (once its hooks fold them). Operator calls run in
        :meth:`scope`; :meth:`on_tokens_spent` is the hook that brings an evaluation's
        spend to the gateway's limits; ``held``: the tokens held for the anchor (:meth:`hold`)."""
        if not recipe.models:
            return None
        evidence = root / FOLDER / "evidence"

        def on_entry(e: Entry) -> None:
            emit(event_of(e, put, evidence))

        models = cls(
            root / FOLDER,
            recipe,
            on_entry,
            state,
            elsewhere=spent_elsewhere(state),
            seen=state.model_seen,
            held=held,
        )
        return models

    def __init__(
        self,
        folder: Path,
        recipe: Recipe,
        on_entry: Callable[[Entry], None],
        state: RunState | None = None,
        *,
        elsewhere: tuple[int, float] = (0, 0.0),
        seen: Callable[[int], bool] = lambda seq: False,
        held: int = 0,
    ) -> None:
        """``state``: the run's folded state, which :meth:`on_tokens_spent` reads."""
        self.folder = folder
        self.recipe = recipe
        self.on_entry = on_entry
        self.state = state
        self.seen = seen  # entries the run's events already hold (resume)
        self.tail = LedgerTail(folder / "ledger.jsonl")
        #: operator calls whose last model call failed for infrastructure reasons, by the
        #: gateway's own record: (candidate, slot) -> the failure
        self._outages: dict[tuple[str, str], str] = {}
        self._keys: dict[str, str] = {}
        self._proc = self._spawn(elsewhere, held)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            err = (self.folder / "gateway.log").read_text(errors="replace")
            self._restore_keys()
            msg = err.strip().splitlines()[-1] if err.strip() else "it exited at once"
            raise ModelError(f"the model gateway did not start: {msg}")
        info = json.loads(line)
        self.url: str = info["url"]
        self._admin = httpx.Client(
            transport=httpx.HTTPTransport(uds=info["admin"]),
            base_url="http://gateway",
            headers={"Authorization": f"Bearer {info['admin_token']}"},
            timeout=30,
        )
        self._elsewhere = elsewhere
        self._held = held

    def _spawn(self, elsewhere: tuple[int, float], held: int) -> subprocess.Popen[str]:
        b = self.recipe.budget
        config = {
            "models": {n: m.model_dump(mode="json") for n, m in self.recipe.models.items()},
            "limits": {"max_model_tokens": b.max_model_tokens, "max_cost": b.max_cost},
            "elsewhere": list(elsewhere),
            "held": held,
        }
        if (self.folder / REPLAY_OF).is_file():  # a replay: no endpoint, only the archive
            config["archive"] = (self.folder / REPLAY_OF).read_text().strip()
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "gateway.log").open("a")
        proc = subprocess.Popen(
            [sys.executable, "-m", "rsiframe.gateway.process", "--state", str(self.folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=dict(os.environ),  # the keys go to the gateway ...
            start_new_session=True,  # Ctrl-C reaches the engine, which then stops it
        )
        log.close()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(config) + "\n")
        proc.stdin.flush()
        # ... and leave this process: nothing started from here inherits them
        for spec in self.recipe.models.values():
            if spec.api_key_env and spec.api_key_env in os.environ:
                self._keys[spec.api_key_env] = os.environ.pop(spec.api_key_env)
        return proc

    def _restore_keys(self) -> None:
        os.environ.update(self._keys)
        self._keys = {}

    # -- the engine's side ----------------------------------------------------------

    def drain(self) -> int:
        """Hand every ledger entry not seen yet to ``on_entry``, in ledger order."""
        with self.tail.lock:
            entries = [e for e in self.tail.read() if not self.seen(e.seq)]
            for e in entries:
                self.on_entry(e)
        return len(entries)

    def on_tokens_spent(self, notice: object) -> None:
        """A hook (the engine's ``MODEL_TOKENS_SPENT``, after the state folded the usage):
        what evaluations' served models spent counts against the gateway's limits too."""
        if self.state is not None:
            self.spent_elsewhere(*spent_elsewhere(self.state))

    def spent_elsewhere(self, tokens: int, cost: float) -> None:
        """What the run spent outside the gateway, counted against its limits too."""
        if (tokens, cost) != self._elsewhere:
            self._elsewhere = (tokens, cost)
            self._post("/elsewhere", {"tokens": tokens, "cost": cost})

    def hold(self, tokens: int) -> None:
        """Hold ``tokens`` of ``max_model_tokens`` for anchor consumers (the champion's
        sealed evaluation): no other call may spend them."""
        if tokens != self._held:
            self._held = tokens
            self._post("/hold", {"tokens": tokens})

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self._admin.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ModelError(f"the model gateway is unreachable: {exc}") from exc
        if r.status_code != 200:
            raise ModelError(f"the model gateway refused {path}: HTTP {r.status_code}")
        out: dict[str, Any] = r.json()
        return out

    def sandbox_endpoint(
        self,
        name: str,
        *,
        model: str,
        candidate: str | None = None,
        slot: str | None = None,
        allowance: int | None = None,
        share: str | None = None,
        draws: tuple[str, str] | None = None,
        anchor: bool = False,
    ) -> SandboxEndpoint:
        """A socket and token of the gateway for one sandbox (e.g. an evaluation's agent),
        bound to ``model`` (``anchor``: it may spend the tokens held, see :meth:`hold`);
        revoke it with :meth:`revoke_endpoints` when that sandbox is done."""
        who: dict[str, Any] = {
            "candidate": candidate,
            "slot": slot,
            "allowance": allowance,
            "share": share,
            "anchor": anchor,
        }
        if draws is not None:
            who["draws"] = list(draws)
        ep = self._post("/sandbox", {"name": name, "model": model, **who})
        return SandboxEndpoint(ep["name"], Path(ep["folder"]), ep["token"], model)

    def revoke(self, tokens: list[str]) -> dict[str, Any]:
        """Revoke ``tokens``; what they called, per model (``models``), the gateway's
        refusals among their calls by code (``refusals``), and the infrastructure failure
        one of them ended on (``outage``, or None); the calls become events now."""
        usage: dict[str, Any] = {}
        with contextlib.suppress(ModelError):
            usage = self._post("/revoke", {"tokens": tokens}).get("usage", {})
        self.drain()
        reports = list(usage.values())
        refusals = {k: v for r in reports for k, v in (r.get("refusals") or {}).items()}
        outage = next((r["outage"] for r in reports if r.get("outage")), None)
        return {"models": merge_usage(reports), "refusals": refusals, "outage": outage}

    def revoke_endpoints(self, *endpoints: SandboxEndpoint) -> dict[str, Any]:
        """Their tokens and sockets stop working; what they called (see :meth:`revoke`)."""
        return self.revoke([ep.token for ep in endpoints])

    @contextlib.contextmanager
    def scope(
        self, cid: str, slot: str, config: Any = None, draws: str | None = None
    ) -> Iterator[llm.ModelClient]:
        """One operator call's models: its client and sandbox endpoints, then revoked.
        ``draws``: the cut proposal this call repeats (its sampled requests get that
        proposal's digests, so the answers it paid for come from the ledger)."""
        consumer = f"{slot}:{cid}"
        twin = f"{slot}:{draws}" if draws is not None and draws != cid else None
        allowance = next(
            (v for k in ALLOWANCE_KEYS if isinstance(v := getattr(config, k, None), int)), None
        )
        # a config naming none (a researcher's operator choosing in code): every model
        models = sorted(named_models(config) & set(self.recipe.models)) or None
        minted: dict[str, Any] = {"name": consumer, "candidate": cid, "slot": slot}
        minted["models"] = models
        if twin is not None:
            minted["draws"] = [str(draws), twin]
        token = self._post("/consumer", {**minted, "allowance": allowance})["token"]
        tokens = [token]

        def endpoints(name: str, *, model: str) -> SandboxEndpoint:
            ep = self.sandbox_endpoint(
                f"{consumer}:{name}",
                model=model,
                candidate=cid,
                slot=slot,
                share=token,
                draws=(str(draws), f"{twin}:{name}") if twin is not None else None,
            )
            tokens.append(ep.token)
            return ep

        client = llm.GatewayClient(self.url, token, after=self.drain)
        try:
            with llm.use(client, endpoints):
                yield client
        except BaseException:
            client.close()
            self._note_outage(cid, slot, self.revoke(tokens))
            raise
        client.close()
        capped = self._note_outage(cid, slot, self.revoke(tokens))["refusals"].get("allowance")
        if capped is not None:  # e.g. a coding agent refused inside its sandbox, then done
            raise llm.BudgetExhausted(f"the model gateway refused a call: {capped}", "allowance")

    def _note_outage(self, cid: str, slot: str, revoked: dict[str, Any]) -> dict[str, Any]:
        if revoked.get("outage"):
            self._outages[(cid, slot)] = str(revoked["outage"])
        return revoked

    def outage_of(self, cid: str, slot: str) -> str | None:
        """The infrastructure failure the last operator call of ``slot`` for ``cid`` ended
        on, by the gateway's record (None: it did not): an operator cannot claim one."""
        return self._outages.pop((cid, slot), None)

    def stop(self, then: Callable[..., Any] | None = None) -> None:
        """Close the gateway's stdin: it finishes the calls in flight, records them, exits;
        the last entries are handed over, then ``then`` runs (the writer takes them)."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._admin.close()
        self._restore_keys()
        self.drain()
        if then is not None:
            then()
