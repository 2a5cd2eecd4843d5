"""Integrity scenarios of the third security review (issue 20, items 3-7a): the model
gateway's token binding and reservations, the coding agent's token cap, a YAML alias bomb
in Harbor's ``agent_config``, and gate items hidden from the contamination audit by a
reversible encoding.

The upstream is the scripted stub (:mod:`rsiframe.gateway.stub`), served from the trial's own
process, acting as a provider that honours ``n``, ``best_of`` and the output limits it is
sent, so its own count is what a provider would bill. This module adds its scenarios to
:data:`rsiframe.selftest.scenarios.SCENARIOS`, judged the same way: a list of problems,
empty when the trial passed.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from rsiframe.archive.loader import load_run
from rsiframe.audit.verify import verify
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.selftest.common import Trial, check_exit, sound
from rsiframe.selftest.experiment import Experiment

#: USD per million tokens: the weak model, and one a hundred times dearer
PRICES = {"weak": 0.4, "strong": 40.0, "coder": 40.0, "liar": 40.0, "claude": 40.0}

#: a candidate's harness: asks a model through the gateway, writes the answer it gets
HARNESS = r"""import json, os, sys, urllib.error, urllib.request
MODEL = None
def ask(model, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "level?"}],
            "temperature": 0, "max_tokens": 8, **extra}
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps(body).encode(), {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                    "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)["choices"][0]["message"]["content"].strip()
    except urllib.error.HTTPError as exc:
        print("REFUSED", model, exc.code, exc.read()[:300].decode(errors="replace"))
        return None
"""
EVAL_AGENT = (
    HARNESS
    + r"""
answer = ask(MODEL or os.environ["RSI_MODEL"])
if answer is not None:
    open("answer.txt", "w").write(answer)
"""
)
#: the mutate script of ``model_swap`` (evaluate): the child's harness asks the strong model
SWAP_MUTATE = r"""src = open("agent.py").read().replace("MODEL = None", "MODEL = 'strong'")
open("agent.py", "w").write(src)
print("the harness now asks the strong model")
"""
#: ``agent_cli``'s command in ``model_swap`` (mutate): it was given weak, it asks strong
SWAP_CODER = (
    HARNESS
    + r"""
answer = ask("strong") or ask(os.environ["RSI_MODEL"]) or "1"
open("config.yaml", "w").write("level: %d\nstyle: plain\n" % min(6, int(answer) + 1))
"""
)
#: ``agent_cli``'s command in ``agent_cap``: spends past its cap, edits the child anyway
GREEDY_CODER = (
    HARNESS
    + r"""
how = json.loads(sys.argv[1])
for extra in how:
    ask(os.environ["RSI_MODEL"], **extra)
open("config.yaml", "w").write("level: 6\nstyle: plain\n")
print("edited anyway")
"""
)


@contextmanager
def provider(answers: list[Answer]) -> Iterator[tuple[StubLLM, str]]:
    """The scripted stub as the trial's provider (and its URL), served until the block ends."""
    stub = StubLLM(Script(answers=answers))
    srv = ServerThread(stub.app).start()
    try:
        yield stub, srv.url
    finally:
        srv.stop()


def declared(url: str, *names: str, **extra: Any) -> dict[str, Any]:
    """A recipe's ``models:`` for ``names``, each served by the stub as ``NAME-up``."""
    return {
        n: {
            "base_url": url,
            "model": f"{n}-up",
            "price": {"input_per_mtok": PRICES[n], "output_per_mtok": PRICES[n]},
            "retries": 0,
            "timeout_s": 60,
            **extra.get(n, {}),
        }
        for n in names
    }


def model_calls(exp: Experiment) -> list[dict[str, Any]]:
    lines = (exp.run_dir / "events.jsonl").read_text().splitlines()
    return [ev["data"] for x in lines if (ev := json.loads(x))["type"] == "model_call"]


def billed(stub: StubLLM) -> int:
    return stub.stats.prompt_tokens + stub.stats.completion_tokens


# -- item 3: a token calls only the model(s) its consumer was given --------------------------


def _swap_setup(exp: Experiment, url: str, variant: str) -> None:
    exp.data["models"] = declared(url, "weak", "strong")
    if variant == "evaluate":
        (exp.seed / "agent.py").write_text(EVAL_AGENT)
        (exp.seed / "fixed" / "swap.py").write_text(SWAP_MUTATE)
        exp.data["evaluator"]["config"]["model"] = "weak"
        mutate = {"operator": "script", "config": {"command": ["python3", "fixed/swap.py"]}}
    else:
        (exp.seed / "fixed" / "coder.py").write_text(SWAP_CODER)
        cfg = {"model": "weak", "profile": "command", "command": "python3 fixed/coder.py"}
        mutate = {"operator": "agent_cli", "config": {**cfg, "timeout_s": 120}}
    exp.data["slots"]["mutate"] = mutate
    exp.write_recipe()


def _certified_swaps(exp: Experiment) -> list[str]:
    """Each child's certificates: nothing earned with strong, which is named as refused."""
    problems = []
    loaded = load_run(exp.run_dir)
    kids = 0
    for c in loaded.state.candidates.values():
        for split in ("train", "gate", "sealed"):
            rec = c.record(split)
            if rec is None:
                continue
            called = getattr(rec.predicate, "models_called", None)
            if called is None:
                problems.append(f"{c.id}/{split}: the certificate does not say which models")
                continue
            if c.id == "c0000":
                if called.get("weak", {}).get("calls", 0) < 1:
                    problems.append(f"c0000/{split}: the seed's weak calls are not recorded")
                continue
            kids += split == "train"
            if rec.predicate.score > 0:
                problems.append(f"{c.id}/{split}: certified {rec.predicate.score:.3f} via strong")
            if called.get("strong", {}).get("calls", 0) or not called.get("strong", {}).get(
                "refused"
            ):
                problems.append(f"{c.id}/{split}: strong not recorded as refused: {called}")
    return problems + ([] if kids else ["no child was evaluated"])


def model_swap(t: Trial) -> list[str]:
    """Given the weak model, a candidate's harness (or the agent_cli coding agent) calls the
    strong one: refused (403), recorded, and the certificate names what was called."""
    variant = t.rng.choice(["evaluate", "mutate"])
    answers = [
        Answer(content="1", model="weak-up", repeat=True),
        Answer(content="6", model="strong-up", repeat=True),
    ]
    with provider(answers) as (stub, url):
        exp = t.experiment(generations=1, children=1)
        _swap_setup(exp, url, variant)
        problems, ok = check_exit(exp.run(), "run")
        if not ok:
            return problems
        asked = sum(r.get("model") == "strong-up" for r in stub.requests)
    if asked:
        problems.append(f"{variant}: the provider answered {asked} call(s) for strong")
    slot = "evaluate" if variant == "evaluate" else "mutate"
    refused = [
        c
        for c in model_calls(exp)
        if (c["status"], c["code"], c["model"], c["slot"])
        == (403, "model_not_allowed", "strong", slot)
    ]
    if not refused:
        problems.append(f"{variant}: no 403 model_not_allowed for strong in the events")
    if variant == "evaluate":
        problems += _certified_swaps(exp)
        return problems + [f"verify: {p}" for p in verify(exp.run_dir).problems]
    return problems + sound(exp)


# -- item 4: a reservation bounds what is forwarded --------------------------------------


class GatewayProcess:
    """The run's gateway as its own process (``rsiframe.gateway.process``) with one consumer."""

    def __init__(self, folder: Path, models: dict[str, Any], limits: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        with (folder / "gateway.log").open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rsiframe.gateway.process", "--state", str(folder)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"models": models, "limits": limits}) + "\n")
        self.proc.stdin.flush()
        info = json.loads(self.proc.stdout.readline())
        self.url = info["url"]
        admin = httpx.Client(
            transport=httpx.HTTPTransport(uds=info["admin"]),
            base_url="http://gateway",
            headers={"Authorization": f"Bearer {info['admin_token']}"},
        )
        who = {"name": "evaluate:train:c0001", "candidate": "c0001", "slot": "evaluate"}
        self.token = admin.post("/consumer", json={**who, "models": list(models)}).json()["token"]
        admin.close()

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        h = {"Authorization": f"Bearer {self.token}", "x-api-key": self.token}
        return httpx.post(f"{self.url}{path}", json=body, headers=h, timeout=120)

    def close(self) -> list[dict[str, Any]]:
        """Stop it (calls in flight are recorded first); the ledger's entries."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        lines = (self.folder / "ledger.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]


def _attacks(t: Trial) -> list[tuple[str, str, dict[str, Any], tuple[int, ...], str | None]]:
    """(name, path, body, statuses allowed, expected code) of each call of a trial: every
    attack is refused; the two honest calls may pass (within the budget) or not."""
    rng = t.rng
    msg = [{"role": "user", "content": "hi"}]
    chat = {"model": "weak", "messages": msg, "temperature": 1}
    big = rng.randint(20_000, 100_000)
    stream = {**chat, "stream": True}
    bad = "invalid_limit"
    return [
        (
            "n",
            "/chat/completions",
            {**chat, "n": rng.randint(64, 128), "max_tokens": 200},
            (429,),
            None,
        ),
        (
            "best_of",
            "/completions",
            {"model": "weak", "prompt": "hi", "best_of": 16, "max_tokens": 1500},
            (429,),
            None,
        ),
        (
            "prompts x n",
            "/completions",
            {"model": "weak", "prompt": ["a"] * 8, "n": 4, "max_tokens": 400},
            (429,),
            None,
        ),
        (
            "max_completion_tokens",
            "/chat/completions",
            {**chat, "max_completion_tokens": big},
            (429,),
            None,
        ),
        (
            "max_output_tokens",
            "/responses",
            {"model": "weak", "input": "hi", "max_output_tokens": big},
            (429,),
            None,
        ),
        (
            "messages max_tokens",
            "/messages",
            {"model": "claude", "messages": msg, "max_tokens": big},
            (429,),
            None,
        ),
        (
            "messages without max_tokens",
            "/messages",
            {"model": "claude", "messages": msg},
            (400,),
            bad,
        ),
        ("stream n", "/chat/completions", {**stream, "n": 128, "max_tokens": 200}, (429,), None),
        (
            "stream max_completion_tokens",
            "/chat/completions",
            {**stream, "max_completion_tokens": big},
            (429,),
            None,
        ),
        ("zero n", "/chat/completions", {**chat, "n": 0}, (400,), bad),
        ("float max_tokens", "/chat/completions", {**chat, "max_tokens": 1.5}, (400,), bad),
        ("no limit (a provider's own is 100,000)", "/chat/completions", chat, (200, 429), None),
        ("honest n", "/chat/completions", {**chat, "n": 2, "max_tokens": 100}, (200, 429), None),
    ]


def _negative_with_a_concurrent_call(gw: GatewayProcess) -> list[str]:
    """A negative max_tokens held in flight while a 1,000,000-token call asks."""
    msg = [{"role": "user", "content": "slow"}]
    neg: list[httpx.Response] = []
    body = {"model": "weak", "messages": msg, "max_tokens": -1_000_000}
    th = threading.Thread(target=lambda: neg.append(gw.post("/chat/completions", body)))
    th.start()
    time.sleep(0.3)
    big = gw.post("/chat/completions", {**body, "max_tokens": 1_000_000})
    th.join()
    problems = []
    if neg[0].status_code != 400:
        problems.append(f"a negative max_tokens was answered {neg[0].status_code}")
    if big.status_code != 429:
        problems.append(f"a 1,000,000-token call beside it was answered {big.status_code}")
    return problems


def _excess(gw: GatewayProcess) -> list[str]:
    """A provider that ignores the forwarded limit: the excess is not charged, it is named."""
    r = gw.post(
        "/chat/completions",
        {"model": "liar", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5},
    )
    return [] if r.status_code == 200 else [f"the liar's call was answered {r.status_code}"]


def budget_overdraw(t: Trial) -> list[str]:
    """Calls that multiply or extend the output (n, best_of, prompts, max_completion_tokens,
    max_output_tokens, Messages' max_tokens, streams, negative limits beside a 1M call)
    never make the provider bill past max_model_tokens or max_cost."""
    tokens = t.rng.randint(3000, 8000)
    cost = round(tokens * 40e-6 * t.rng.uniform(0.5, 1.5), 6)
    answers = [
        Answer(content="slow", delay_s=1.0, model="weak-up", when="slow"),
        Answer(tokens=t.rng.randint(500, 2000), model="liar-up", repeat=True),
        Answer(fill=True, repeat=True),
    ]
    problems = []
    with provider(answers) as (stub, url):
        dear = {"price": {"input_per_mtok": 40.0, "output_per_mtok": 40.0}}  # all at $40/M
        models = declared(url, "weak", "liar", "claude", weak=dear, claude={"api": "anthropic"})
        gw = GatewayProcess(t.root / "gw", models, {"max_model_tokens": tokens, "max_cost": cost})
        try:
            problems += _excess(gw)  # first, while the budget has room for its 6 tokens
            lied = billed(stub)
            for name, path, body, allowed, code in t.rng.sample(_attacks(t), k=len(_attacks(t))):
                r = gw.post(path, body)
                got = r.json().get("error", {}).get("code") if r.status_code != 200 else None
                if r.status_code not in allowed or (code is not None and got != code):
                    problems.append(f"{name}: answered {r.status_code} {got}, not {allowed} {code}")
            problems += _negative_with_a_concurrent_call(gw)
            honest = billed(stub) - lied
        finally:
            entries = gw.close()
    if honest > tokens or honest * 40e-6 > cost + 1e-9:
        problems.append(
            f"the provider billed {honest} tokens (${honest * 40e-6:.4f}) past "
            f"max_model_tokens {tokens} / max_cost ${cost}"
        )
    charged = sum(e["prompt_tokens"] + e["completion_tokens"] for e in entries)
    if charged > tokens:
        problems.append(f"the ledger charged {charged} tokens, limit {tokens}")
    liar = [e for e in entries if e["model"] == "liar"]
    if not liar or liar[-1].get("completion_tokens") != 5 or not liar[-1].get("violation"):
        problems.append(f"the provider's excess was not capped and named: {liar[-1:]}")
    refused = {e.get("code") for e in entries if e["status"] == 400}
    if refused != {"invalid_limit"}:
        problems.append(f"malformed limits were not recorded as invalid_limit: {refused}")
    return problems


def _billed_run(exp: Experiment, stub: StubLLM, limit: int, what: str) -> tuple[list[str], bool]:
    """Run ``exp``; its problems (the provider billing past ``limit`` among them, said as
    ``what``) and whether it ran to its end."""
    problems, ok = check_exit(exp.run(), "run")
    spent = billed(stub)
    if ok and spent > limit:
        problems.append(f"the provider billed {spent} tokens {what} {limit}")
    return problems, ok


# -- item 5: the coding agent's token cap ------------------------------------------------


def _greedy_calls(t: Trial, cap: int) -> list[dict[str, Any]]:
    kind = t.rng.choice(["n", "stream", "several"])
    if kind == "n":  # the review's: 64 answers of 100 tokens under a cap of 500
        return [{"n": 64, "max_tokens": 100}]
    if kind == "stream":
        return [{"n": 32, "max_tokens": 100, "stream": True}]
    return [{"max_tokens": cap // 2, "temperature": 1}] * 4  # each within the cap, not two


def agent_cap(t: Trial) -> list[str]:
    """agent_cli with max_tokens_per_mutation: the gateway refuses the call that would pass
    the cap (n, streams, several calls), and the child is rejected with that reason."""
    cap = t.rng.randint(300, 800)
    with provider([Answer(content="x" * 4000, repeat=True)]) as (stub, url):  # cut to the limit
        exp = t.experiment(generations=1, children=1)
        exp.data["models"] = declared(url, "coder")
        (exp.seed / "fixed" / "coder.py").write_text(GREEDY_CODER)
        how = json.dumps(_greedy_calls(t, cap))
        cfg = {"model": "coder", "profile": "command", "max_tokens_per_mutation": cap}
        command = f"python3 fixed/coder.py '{how}'"
        exp.data["slots"]["mutate"] = {
            "operator": "agent_cli",
            "config": {**cfg, "command": command},
        }
        exp.write_recipe()
        problems, ok = _billed_run(exp, stub, cap, "for a child capped at")
    if not ok:
        return problems
    loaded = load_run(exp.run_dir)
    kids = [c for c in loaded.state.candidates.values() if c.id != "c0000"]
    for c in kids:
        why = " ".join((c.rejected or {}).get("reasons", []))
        if (c.rejected or {}).get("stage") != "mutate" or f"allowance of {cap} tokens" not in why:
            problems.append(f"{c.id}: not rejected for its cap: {c.state}, {why[:200]!r}")
    return problems + ([] if kids else ["no child was proposed"]) + sound(exp)


# -- the tokens held for the champion's sealed evaluation -----------------------------------

#: ``anchor_hold``'s mutate script: the first child's agent asks once and answers its level
#: (6); every later child's agent asks as long as the gateway answers, then answers the same
HOLD_MUTATE = r"""import os, shutil
cid = os.environ.get("RSI_CANDIDATE_ID", "")
open("config.yaml", "w").write("level: 6\nstyle: plain\nchild: %s\n" % cid)
here = os.path.dirname(os.path.abspath(__file__))
shutil.copy(os.path.join(here, "honest.py" if cid == "c0001" else "greedy.py"), "agent.py")
"""
HONEST_SIX = HARNESS + 'ask(os.environ["RSI_MODEL"])\nopen("answer.txt", "w").write("6")\n'
GREEDY_SIX = (
    HARNESS
    + r"""
for _ in range(500):
    if ask(os.environ["RSI_MODEL"], max_tokens=MAX, temperature=1) is None:  # paid, each
        break
open("answer.txt", "w").write("6")
"""
)


def _hold_setup(t: Trial, url: str) -> tuple[Experiment, int]:
    """Two generations of one child: an honest champion-to-be, then a greedy agent; a
    budget that lets the greedy one start (the seed, the champion, its own tasks and the
    anchor's at what the seed's calls reserved) with a little room to drain."""
    exp = t.experiment(generations=2, children=1)
    exp.data["models"] = declared(url, "weak")
    exp.data["evaluator"]["config"]["model"] = "weak"
    (exp.seed / "agent.py").write_text(EVAL_AGENT)
    (exp.seed / "fixed" / "hold.py").write_text(HOLD_MUTATE)
    (exp.seed / "fixed" / "honest.py").write_text(HONEST_SIX)
    greedy = GREEDY_SIX.replace("MAX", str(t.rng.randint(20, 60)))
    (exp.seed / "fixed" / "greedy.py").write_text(greedy)
    exp.data["slots"]["mutate"] = {
        "operator": "script",
        "config": {"command": ["python3", "fixed/hold.py"]},
    }
    # a call spends ~4 tokens and reserves ~11: the seed and the champion (10 calls spent),
    # the greedy child's 4 tasks and the anchor's 2 (reserved) fit in 140
    limit = 150 + t.rng.randint(0, 60)
    exp.data["budget"] = {"max_generations": 2, "max_model_tokens": limit}
    exp.write_recipe()
    return exp, limit


def anchor_hold(t: Trial) -> list[str]:
    """A candidate's agent that spends all it can during its evaluation cannot reach the
    tokens held for the champion's sealed evaluation: its calls past what is left are
    refused (429), its evaluation is not certified, and the champion gets its sealed score
    from the hold; nothing is billed past max_model_tokens."""
    with provider([Answer(content="1", model="weak-up", repeat=True)]) as (stub, url):
        exp, limit = _hold_setup(t, url)
        problems, ok = _billed_run(exp, stub, limit, "past max_model_tokens")
    if not ok:
        return problems
    calls = model_calls(exp)
    greedy = [c for c in calls if c["candidate"] == "c0002"]
    if not any(c["status"] == 429 and c["code"] == "max_model_tokens" for c in greedy):
        problems.append(f"the greedy agent was never refused: {len(greedy)} call(s)")
    loaded = load_run(exp.run_dir)
    kid = loaded.state.candidates.get("c0002")
    if kid is None or any(kid.record(s) for s in ("train", "gate")):
        problems.append("the greedy child was certified (or never proposed)")
    champ = loaded.state.champion()
    if champ is None or champ.id != "c0001" or champ.record("sealed") is None:
        got = (champ.id, champ.record("sealed")) if champ else None
        problems.append(f"the honest champion c0001 has no sealed score from the hold: {got}")
    if loaded.run_state() not in ("finished", "budget_exhausted"):
        problems.append(f"the run is {loaded.run_state()}, not finished or budget_exhausted")
    # reproduce would need the model: the certificates and the chain are checked
    return problems + [f"verify: {p}" for p in verify(exp.run_dir).problems]


# -- item 6: a YAML alias bomb in Harbor's agent_config ---------------------------------------

#: run in a child with an address-space limit: the driver's steps before Harbor starts
JOB_CONFIG = r"""import json, sys
from pathlib import Path
from rsiframe.evaluators.harbor.engine import HarborEngine, HarborEngineConfig
root = Path(sys.argv[1])
engine = HarborEngine(HarborEngineConfig(harbor_agent="nop", agent_config="agent.yaml"), root / "w")
try:
    config = engine.job_config(root / "candidate", [], root / "jobs")
except RuntimeError as exc:
    print("REFUSED", exc)
    raise SystemExit(0)
print("JSON", len(json.dumps(config)))
"""


def _alias_bomb(levels: int) -> str:
    rows = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(rows) + f"\nprompt: *a{levels - 1}\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def yaml_alias_agent_config(t: Trial) -> list[str]:
    """A candidate's Harbor agent.yaml (alias bomb of ~450 bytes, 100k-deep nesting, or
    5 MiB) is refused in one line before anything expands it, in bounded memory and time."""
    kind = t.rng.choice(["aliases", "aliases", "deep", "huge"])
    text = {
        "aliases": lambda: _alias_bomb(t.rng.randint(7, 9)),
        "deep": lambda: "prompt: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "huge": lambda: "prompt: |\n" + "  x\n" * (5 << 18),
    }[kind]()
    (t.root / "candidate").mkdir(parents=True)
    (t.root / "candidate" / "agent.yaml").write_text(text)
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            [sys.executable, "-c", JOB_CONFIG, str(t.root)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return [f"{kind}: the driver was still expanding agent_config after 60 s"]
    out = res.stdout.strip().splitlines()
    if res.returncode != 0 or not out or not out[-1].startswith("REFUSED agent_config"):
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        return [f"{kind}: not refused (exit {res.returncode}, {out[-1:]}, {tail[:200]})"]
    if len(out) != 1 or time.monotonic() - t0 > 30:
        return [f"{kind}: refused, but not in one line and at once: {out}"]
    return []


# -- item 7a: gate items hidden by a reversible encoding -----------------------------------


def encoded_contamination(t: Trial) -> list[str]:
    """The data step writes gate items spelt out (``k_u_g``, ``K-U-G``, ``k u g``, dots) in
    the training rows: the audit still rejects the build, naming them; plain rows pass."""
    from rsiframe.dth.build import BuildRejected
    from rsiframe.dth.contamination import ContaminationConfig, Item, audit
    from rsiframe.selftest.build_scenarios import _builder, _candidate, _word

    rng = t.rng
    words = [_word(rng, rng.randint(5, 6)) for _ in range(3)] + [_word(rng, 16)]
    sep = rng.choice(["_", "-", ".", " ", "_-_"])
    upper = rng.random() < 0.5
    encoded = [sep.join(w.upper() if upper else w) for w in words]
    gate = [Item("gate", "g", str(i), w) for i, w in enumerate(words)]
    cand = _candidate(t.root, rng, {})
    rows = json.loads((cand / "data" / "rows.json").read_text())
    (cand / "data" / "rows.json").write_text(json.dumps(rows + [f"sort {e}" for e in encoded]))
    cfg = ContaminationConfig()
    try:
        _builder(t.root, t.sandbox).build(cand, lambda data: "", lambda x: audit(x, gate, cfg))
    except BuildRejected as exc:
        if exc.stage != "contamination":
            return [
                f"{sep!r} (upper: {upper}): the encoded gate items passed the audit, "
                f"the build went on to {exc.stage}"
            ]
        if f"{len(words)} gate item(s)" not in exc.reason:
            return [f"{sep!r}: the audit found only part of them: {exc.reason}"]
        clean = audit([f"sort {r}" for r in rows], gate, cfg)
        return [f"the plain rows were flagged: {clean.reason()}"] if clean.contaminated else []
    return [f"{sep!r} (upper: {upper}): the encoded gate items passed the audit"]


GATEWAY_SCENARIOS: dict[str, Callable[[Trial], list[str]]] = {
    "model_swap": model_swap,
    "budget_overdraw": budget_overdraw,
    "anchor_hold": anchor_hold,
    "agent_cap": agent_cap,
    "yaml_alias_agent_config": yaml_alias_agent_config,
    "encoded_contamination": encoded_contamination,
}
