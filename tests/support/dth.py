"""A tiny D/T/H seed and task set for the build, serving and contamination tests.

The model learns to reverse 3-5 letter words: a real trl training run of a few dozen
steps (seconds), served for real. Knobs in each part's config.yaml make the steps
crash, hang, or write bad output, so the tests can check how a run treats them.
"""

from __future__ import annotations

import json
import random
import string
import textwrap
from pathlib import Path

GENERATE = """\
import json, os, random, string, sys, yaml
cfg = yaml.safe_load(open("config.yaml"))
mode = cfg.get("mode", "ok")
if mode == "crash":
    sys.exit("generator: deliberate crash")
if mode == "hang":
    import time; time.sleep(3600)
out = os.path.join(os.environ["RSI_DATASET_OUT"], "train.jsonl")
rng = random.Random(cfg["seed"])
with open(out, "w") as f:
    if mode == "malformed":
        f.write("this is not json\\n")
    for _ in range(0 if mode in ("empty", "malformed") else cfg["count"]):
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 5)))
        f.write(json.dumps({"prompt": f"rev {w}=", "completion": w[::-1] + "\\n"}) + "\\n")
    if mode == "probe":  # what this step can see and reach
        import socket
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=2); net = "up"
        except OSError:
            net = "down"
        seen = sorted(os.listdir(".."))
        f.write(json.dumps({"prompt": json.dumps(seen), "completion": net}) + "\\n")
    for w in cfg.get("plant", []):
        f.write(json.dumps({"prompt": f"rev {w}=", "completion": w[::-1] + "\\n"}) + "\\n")
    for w in cfg.get("plant_meta", []):  # hidden items with their answers, under a side key
        row = {"prompt": "rev ab=", "completion": "ba\\n", "meta": {"x": [{"q": w, "a": w[::-1]}]}}
        f.write(json.dumps(row) + "\\n")
for w in cfg.get("plant_file", []):  # ... or in a side file of the dataset
    with open(os.path.join(os.environ["RSI_DATASET_OUT"], "side.json"), "w") as side:
        escaped = json.dumps({"items": [w]}).replace(w[0], "\\\\u%04x" % ord(w[0]))
        side.write(escaped)
"""

TRAIN = """\
import json, os, sys, tempfile, time, yaml
cfg = yaml.safe_load(open("config.yaml"))
if cfg.get("mode") == "crash":
    sys.exit("trainer: deliberate crash")
import torch
torch.set_num_threads(int(os.environ.get("RSI_THREADS", "1")))
torch.manual_seed(0)
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, set_seed
from trl import SFTConfig, SFTTrainer
set_seed(0)
rows = [json.loads(l) for l in open(os.path.join(os.environ["RSI_DATASET"], "train.jsonl"))]
chars = sorted(set("abcdefghijklmnopqrstuvwxyz =\\nrev"))
vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<eos>", *chars])}
core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\\s\\S]"), behavior="isolated")
core.decoder = decoders.Fuse()
tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                              eos_token="<eos>", clean_up_tokenization_spaces=False)
model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=24, n_embd=cfg["d_model"],
                                   n_layer=1, n_head=2, bos_token_id=2, eos_token_id=2,
                                   pad_token_id=0))
args = SFTConfig(output_dir=tempfile.mkdtemp(), max_steps=cfg["steps"], learning_rate=cfg["lr"],
                 per_device_train_batch_size=32, bf16=False, fp16=False,
                 gradient_checkpointing=False, report_to=[], save_strategy="no",
                 logging_steps=5, disable_tqdm=True, max_length=24, use_cpu=True,
                 dataloader_num_workers=0, completion_only_loss=True)
t0 = time.perf_counter()
trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                     processing_class=tok)
result = trainer.train()
out = os.environ["RSI_MODEL_OUT"]
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
json.dump({"steps": result.global_step, "first_loss": losses[0], "final_loss": losses[-1],
           "seconds": time.perf_counter() - t0}, open(os.path.join(out, "train_metrics.json"), "w"))
if cfg.get("mode") == "pickle":
    open(os.path.join(out, "pytorch_model.bin"), "wb").write(b"not really a pickle")
"""

HARNESS = """\
import json, os, sys, time, urllib.request, yaml
here = os.path.dirname(os.path.abspath(__file__))
cfg = yaml.safe_load(open(os.path.join(here, "config.yaml")))
app = os.environ.get("RSI_APP", "/app")
items = [json.loads(l) for l in open(os.path.join(app, "items.jsonl"))]
if cfg.get("mode") == "hang":
    time.sleep(3600)
if cfg.get("mode") == "sabotage":  # flood the shared server, then leave without reading
    import socket, urllib.parse
    url = urllib.parse.urlparse(os.environ["OPENAI_BASE_URL"])
    big = json.dumps({"model": os.environ["RSI_MODEL"], "prompt": ["rev abc="] * 64, "n": 64,
                      "max_tokens": 8, "temperature": 0}).encode()
    head = b"POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: %d\\r\\n\\r\\n"
    socks = [socket.create_connection((url.hostname, url.port)) for _ in range(cfg["floods"])]
    for s in socks:
        s.sendall(head % len(big) + big)
    time.sleep(1)
    open("answers.jsonl", "w").write("")
    sys.exit(0)
if cfg.get("mode") == "garbage":
    open("answers.jsonl", "w").write("\\x00\\x01 not json at all")
    sys.exit(0)
body = {"model": os.environ["RSI_MODEL"], "prompt": [f"rev {it['prompt_text']}=" for it in items],
        "max_tokens": 8, "temperature": cfg["temperature"], "n": 1, "stop": ["\\n"], "seed": 0}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions",
                             data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
resp = json.loads(urllib.request.urlopen(req, timeout=120).read())
print("usage", json.dumps(resp["usage"]))
with open("answers.jsonl", "w") as f:
    for it, ch in zip(items, resp["choices"]):
        f.write(json.dumps({"id": it["id"], "answer": ch["text"].strip()}) + "\\n")
"""

CHECK = """\
import json, os, sys
tests = os.environ.get("RSI_TESTS", "/tests")
app = os.environ.get("RSI_APP", "/app")
want = {r["id"]: r["answer"] for r in map(json.loads, open(os.path.join(tests, "expected.jsonl")))}
got = {}
try:
    for line in open(os.path.join(app, "answers.jsonl")):
        r = json.loads(line)
        got[r["id"]] = r["answer"]
except Exception as exc:
    print("unreadable answers:", exc)
score = sum(got.get(k) == v for k, v in want.items()) / len(want)
print("score", score)
logs = os.environ.get("RSI_LOGS", "/logs")
open(os.path.join(logs, "verifier", "reward.txt"), "w").write(str(score))
"""

TEST_SH = """#!/bin/bash
python3 "${RSI_TESTS:-/tests}/check.py"
"""


def write_seed(
    root: Path,
    *,
    data: dict | None = None,
    trainer: dict | None = None,
    harness: dict | None = None,
) -> Path:
    import yaml

    parts = {
        "data": ({"seed": 0, "count": 400, "mode": "ok"} | (data or {}), "generate.py", GENERATE),
        "trainer": (
            {"steps": 40, "d_model": 32, "lr": 0.005, "mode": "ok"} | (trainer or {}),
            "train.py",
            TRAIN,
        ),
        "harness": ({"temperature": 0, "mode": "ok"} | (harness or {}), "run.py", HARNESS),
    }
    for name, (cfg, script, text) in parts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.yaml").write_text(yaml.safe_dump(cfg))
        (root / name / script).write_text(text)
    knobs = {
        "knobs": [
            {"file": "data/config.yaml", "key": "count", "range": [100, 800], "step": 100},
            {"file": "trainer/config.yaml", "key": "steps", "range": [20, 80], "step": 20},
            {"file": "harness/config.yaml", "key": "temperature", "choices": [0, 0.7]},
        ]
    }
    (root / "knobs.yaml").write_text(yaml.safe_dump(knobs))
    return root


def words(seed: int, n: int, lo: int = 3, hi: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(lo, hi)))
        for _ in range(n)
    ]


def write_tasks(root: Path, n_tasks: int = 3, per_task: int = 6, seed: int = 99) -> Path:
    """Tasks t1..tn: reverse ``per_task`` words each (items.jsonl; answers in tests/)."""
    pool = iter(words(seed, n_tasks * per_task, 6, 8))
    for i in range(1, n_tasks + 1):
        t = root / f"t{i}"
        (t / "environment").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "task.toml").write_text(
            'version = "1.0"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n'
        )
        (t / "instruction.md").write_text("Reverse each word in items.jsonl.\n")
        items, expected = [], []
        for j in range(per_task):
            w = next(pool)
            items.append({"id": f"{i}-{j}", "kind": "reverse", "prompt_text": w})
            expected.append({"id": f"{i}-{j}", "answer": w[::-1]})
        (t / "environment" / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
        (t / "tests" / "expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in expected))
        (t / "tests" / "check.py").write_text(CHECK)
        (t / "tests" / "test.sh").write_text(TEST_SH)
    return root


def task_words(root: Path, task: str) -> list[str]:
    path = root / task / "environment" / "items.jsonl"
    return [json.loads(line)["prompt_text"] for line in path.read_text().splitlines()]


BUILD = {
    "data": "python3 generate.py",
    "train": "python3 train.py",
    "threads": 1,
    "train_timeout_s": 300,
}


def recipe(
    *, build: dict | None = None, budget: str = "", children: int = 2, extra: str = ""
) -> str:
    b = json.dumps(BUILD | (build or {}))
    return (
        textwrap.dedent(f"""\
        name: dth-mini
        seed: seed
        tasks:
          path: tasks
          split: {{train: [t1], gate: [t2], sealed: [t3]}}
        surface: {{include: ["data/**", "trainer/**", "harness/**"]}}
        evaluator:
          engine: local
          config:
            agent: python3 "$RSI_CANDIDATE/harness/run.py"
            concurrency: 2
            agent_timeout_s: 60
            build: {b}
        slots:
          select: {{operator: best}}
          rollout: {{operator: local}}
          mutate: {{operator: knobs, config: {{space: knobs.yaml, max_changes: 1}}}}
          gate: {{operator: always}}
          record: {{operator: notes}}
        budget: {{max_generations: 1{budget}}}
        children_per_generation: {children}
        """)
        + extra
    )


_MODEL: dict[str, Path] = {}


def tiny_model(tmp_root: Path) -> Path:
    """A really trained tiny model folder, built once per test process (the seed's build)."""
    if "dir" not in _MODEL:
        from rsiframe.dth.build import Builder
        from rsiframe.recipe.evaluator import BuildConfig
        from rsiframe.sandbox.bwrap import make_sandbox

        (tmp_root / "work").mkdir(parents=True, exist_ok=True)
        seed = write_seed(tmp_root / "seed")
        builder = Builder(
            BuildConfig.model_validate(BUILD),
            make_sandbox("auto"),
            tmp_root / "work",
            tmp_root / "cache",
        )
        built = builder.build(seed, lambda data: "")
        _MODEL["dir"] = built.model.dir
    return _MODEL["dir"]


def planted_run(tmp_path: Path, policy: str) -> tuple[Path, str, str]:
    from tests.support.dth import recipe

    write_tasks(tmp_path / "tasks")
    gate_word = task_words(tmp_path / "tasks", "t2")[1]
    sealed_word = task_words(tmp_path / "tasks", "t3")[2]
    write_seed(tmp_path / "seed", data={"plant": [gate_word, sealed_word]})
    text = recipe(build={"contamination": {"policy": policy}})
    (tmp_path / "recipe.yaml").write_text(text)
    return tmp_path / "recipe.yaml", gate_word, sealed_word
