"""The saboteur scenario (issue 10, item 3): one candidate floods the shared model server
and leaves; an honest candidate evaluated right after it must score exactly what it
scored before.

The candidates are D/T/H seeds of a few lines: a data step, a train step that saves a tiny
GPT-2 with random weights and a character tokenizer (no training: seconds, and greedy
answers that are the same every time), and a harness that asks the served model to reverse
words. The saboteur's harness sends ``FLOODS`` completion requests of 64 prompts x ``n`` 64
and exits without reading: a minute and more of generation nobody waits for. The server
must drop them when the saboteur's evaluation ends; with ``RSIFRAME_FAULT=off:serve_cancel``
(the behaviour before the fix) the honest candidate's agents wait behind them and time out.
"""

from __future__ import annotations

import json
import os
import random
import string
from pathlib import Path
from typing import TYPE_CHECKING

from rsiframe.evaluators.local import LocalEngine
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet

if TYPE_CHECKING:
    from rsiframe.selftest.common import Trial

FLOODS = 40
#: each honest task's agent timeout: far below what the flood takes to generate
AGENT_TIMEOUT_S = 30

GENERATE = r"""import json, os, random, string
rng = random.Random(0)
with open(os.path.join(os.environ["RSI_DATASET_OUT"], "train.jsonl"), "w") as f:
    for _ in range(20):
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(4))
        f.write(json.dumps({"prompt": "rev %s=" % w, "completion": w[::-1] + "\n"}) + "\n")
"""

TRAIN = r"""import os, torch
torch.manual_seed(0)
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
chars = sorted(set("abcdefghijklmnopqrstuvwxyz =\nrev"))
vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<eos>", *chars])}
core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
core.decoder = decoders.Fuse()
tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                              eos_token="<eos>", clean_up_tokenization_spaces=False)
model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=24, n_embd=32, n_layer=1,
                                   n_head=2, bos_token_id=2, eos_token_id=2, pad_token_id=0))
out = os.environ["RSI_MODEL_OUT"]
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
"""

HARNESS = r"""import json, os, socket, sys, time, urllib.parse, urllib.request
app = os.environ.get("RSI_APP", "/app")
items = [json.loads(l) for l in open(os.path.join(app, "items.jsonl"))]
base, model = os.environ["OPENAI_BASE_URL"], os.environ["RSI_MODEL"]
if os.path.exists(os.path.join(os.environ["RSI_CANDIDATE"], "harness", "SABOTAGE")):
    url = urllib.parse.urlparse(base)
    big = json.dumps({"model": model, "prompt": ["rev abc="] * 64, "n": 64, "max_tokens": 8,
                      "temperature": 0}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    socks = [socket.create_connection((url.hostname, url.port)) for _ in range(FLOODS)]
    for s in socks:
        s.sendall(head % len(big) + big)
    time.sleep(1)
    open("answers.jsonl", "w").write("")
    sys.exit(0)
body = {"model": model, "prompt": ["rev %s=" % it["word"] for it in items], "max_tokens": 8,
        "temperature": 0, "n": 1, "stop": ["\n"]}
req = urllib.request.Request(base + "/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
resp = json.loads(urllib.request.urlopen(req, timeout=600).read())
with open("answers.jsonl", "w") as f:
    for it, ch in zip(items, resp["choices"]):
        f.write(json.dumps({"id": it["id"], "answer": ch["text"].strip()}) + "\n")
"""

#: the verifier: 0.5 for an answer to every item, plus half the share reversed right (near
#: 0 for a random model): an agent that never got its answers scores differently
CHECK = r"""import json, os
tests, app = os.environ.get("RSI_TESTS", "/tests"), os.environ.get("RSI_APP", "/app")
want = {r["id"]: r["answer"] for r in map(json.loads, open(os.path.join(tests, "expected.jsonl")))}
got = {}
try:
    for line in open(os.path.join(app, "answers.jsonl")):
        r = json.loads(line)
        got[r["id"]] = r["answer"]
except Exception:
    pass
right = sum(got.get(k) == v for k, v in want.items()) / len(want)
score = (0.5 if len(got) == len(want) else 0.0) + right / 2
open(os.path.join(os.environ.get("RSI_LOGS", "/logs"), "verifier", "reward.txt"), "w").write(
    str(score))
"""

TEST_SH = '#!/bin/bash\npython3 "${RSI_TESTS:-/tests}/check.py"\n'


def _seed(root: Path, saboteur: bool) -> Path:
    for part, name, text in (
        ("data", "generate.py", GENERATE),
        ("trainer", "train.py", TRAIN),
        ("harness", "run.py", HARNESS.replace("range(FLOODS)", f"range({FLOODS})")),
    ):
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / name).write_text(text)
    if saboteur:
        (root / "harness" / "SABOTAGE").write_text("flood the shared server, then leave\n")
    return root


def _tasks(root: Path, rng: random.Random, n_tasks: int = 2, per_task: int = 6) -> Path:
    for i in range(1, n_tasks + 1):
        t = root / f"t{i}"
        (t / "environment").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "task.toml").write_text(
            'version = "1.0"\n[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n'
        )
        (t / "instruction.md").write_text("Reverse each word in items.jsonl.\n")
        words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(4)) for _ in range(6)]
        items = [{"id": f"{i}-{j}", "word": w} for j, w in enumerate(words)]
        expected = [{"id": f"{i}-{j}", "answer": w[::-1]} for j, w in enumerate(words)]
        (t / "environment" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        (t / "tests" / "expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in expected))
        (t / "tests" / "check.py").write_text(CHECK)
        (t / "tests" / "test.sh").write_text(TEST_SH)
    return root


def saboteur(t: Trial) -> list[str]:
    """A saboteur's child floods the shared model server and leaves; the honest child
    evaluated next scores exactly what it scored before."""
    honest = _seed(t.root / "honest", saboteur=False)
    bad = _seed(t.root / "saboteur", saboteur=True)
    tasks = TaskSet.load(_tasks(t.root / "tasks", t.rng))
    todo = [tasks.tasks[i] for i in sorted(tasks.tasks)]
    (t.root / "work").mkdir()
    config = LocalEngineConfig.model_validate(
        {
            "agent": 'python3 "$RSI_CANDIDATE/harness/run.py"',
            "sandbox": t.sandbox,
            "agent_timeout_s": AGENT_TIMEOUT_S,
            "concurrency": 2,
            "build": {
                "data": "python3 generate.py",
                "train": "python3 train.py",
                "threads": 1,
                "train_timeout_s": 300,
            },
        }
    )
    previous = os.environ.get("RSIFRAME_CACHE_DIR")
    os.environ["RSIFRAME_CACHE_DIR"] = str(t.root / "cache")
    engine = LocalEngine(config, t.root / "work")
    try:

        def scores(candidate: Path) -> dict[str, tuple[float, str | None]]:
            out = engine.run(candidate, todo, lambda data: "")
            return {task: (r.reward, r.error) for task, r in out.runs.items()}

        before = scores(honest)
        problems = (
            [f"the honest child failed on its own: {before}"]
            if any(error for _, error in before.values())
            else []
        )
        sabotaged = engine.run(bad, todo, lambda data: "")
        usage = sabotaged.usage or {}
        if not usage.get("cancelled"):
            problems.append(f"none of the saboteur's requests was cancelled: {usage}")
        after = scores(honest)
    finally:
        engine.close()
        if previous is None:
            os.environ.pop("RSIFRAME_CACHE_DIR", None)
        else:
            os.environ["RSIFRAME_CACHE_DIR"] = previous
    if after != before:
        problems.append(f"the honest child's scores changed: {before} -> {after}")
    return problems


SABOTEUR_SCENARIOS = {"saboteur": saboteur}
