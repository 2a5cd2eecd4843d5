#!/usr/bin/env python3
"""Calibrate the textops seed: build, train and evaluate knob settings directly.

For each setting (dotted overrides of the seed's ``data/``, ``trainer/`` and
``harness/`` config files) this runs what the framework runs, without the framework:
``data/generate.py`` (cwd a copy of ``data/``) into a temp dataset, ``trainer/train.py``
(cwd a copy of ``trainer/``) into a temp model folder, a loopback OpenAI-compatible
server for that model, then per task ``harness/run.py`` as a subprocess in a scratch
copy of the task's ``environment/`` and the task's verifier on the result. It prints
the mean reward per split (train / gate / sealed, the recipe's 0.4/0.4/0.2 split) and
the seconds spent building, training and evaluating.

    python3 tasks/textops/calibrate.py                       # the named settings
    python3 tasks/textops/calibrate.py --only seed lr=0.003  # some of them
    python3 tasks/textops/calibrate.py --set trainer.train.epochs=8 --set harness.validate=true

The loopback server (``/v1/completions`` with list prompts and ``n``, prompt-major
choices) generates with the runtime's ``rsiframe.dth.serving.TransformersBackend`` when that
module is importable, otherwise with the small batched transformers generator below. Models are
cached under ``--cache`` by the digest of the data and trainer folders, so settings that
only touch the harness reuse a trained model (as the framework's build cache does).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
SEED = HERE / "seed"
PARTS = ("data", "trainer", "harness")
SPLIT_RATIOS = {"train": 0.4, "gate": 0.4, "sealed": 0.2}

Overrides = dict[str, Any]

# Named settings: "<part>.<dotted key in part/config.yaml>" -> value.
NAMED: dict[str, Overrides] = {
    "seed": {},
    # harness only (reuse the seed's model)
    "greedy": {"harness.decoding.temperature": 0.0},
    "temperature=0.3": {"harness.decoding.temperature": 0.3},
    "vote5": {"harness.decoding.samples": 5},
    "validate+retries2": {"harness.validate": True, "harness.retries": 2},
    "greedy+validate+retries2": {
        "harness.decoding.temperature": 0.0,
        "harness.validate": True,
        "harness.retries": 2,
    },
    # trainer
    "lr=0.002": {"trainer.train.lr": 0.002},
    "lr=0.0005": {"trainer.train.lr": 0.0005},
    "epochs=8": {"trainer.train.epochs": 8},
    "arch=gpt2": {"trainer.model.arch": "gpt2"},
    "completion_only=false": {"trainer.train.completion_only_loss": False},
    # data
    "add=reversed": {"data.format.add": "reversed"},
    "mix.add=0": {"data.mix.add": 0},
    "mix.add=3+add=reversed": {"data.mix.add": 3, "data.format.add": "reversed"},
    "letters=spaced": {"data.format.letters": "spaced"},
    "count=5000": {"data.count": 5000},
    # two knobs
    "epochs=8+greedy": {"trainer.train.epochs": 8, "harness.decoding.temperature": 0.0},
    "mix.add=0+greedy": {"data.mix.add": 0, "harness.decoding.temperature": 0.0},
    "lr=0.002+epochs=8": {"trainer.train.lr": 0.002, "trainer.train.epochs": 8},
}


@dataclass
class Result:
    name: str
    scores: dict[str, float]
    data_s: float
    train_s: float
    eval_s: float
    train_metrics: dict[str, Any]
    cached: bool


# -- settings ---------------------------------------------------------------------------


def parse_value(text: str) -> Any:
    return yaml.safe_load(text)


def apply(overrides: Overrides) -> dict[str, dict]:
    """The three config files of the seed with ``overrides`` set."""
    configs = {p: yaml.safe_load((SEED / p / "config.yaml").read_text()) for p in PARTS}
    for dotted, value in overrides.items():
        part, *keys = dotted.split(".")
        if part not in configs or not keys:
            raise SystemExit(f"bad override {dotted!r}: start with data., trainer. or harness.")
        node = configs[part]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if keys[-1] not in node:
            raise SystemExit(f"bad override {dotted!r}: {part}/config.yaml has no such key")
        node[keys[-1]] = value
    return configs


def make_candidate(root: Path, configs: dict[str, dict]) -> Path:
    cand = root / "candidate"
    shutil.copytree(SEED, cand, ignore=shutil.ignore_patterns("__pycache__"))
    for part, cfg in configs.items():
        (cand / part / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cand


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(f"{f.relative_to(path)}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# -- build ------------------------------------------------------------------------------


def run_step(script: Path, cwd: Path, env: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(
            [sys.executable, script.name], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if proc.returncode:
        raise SystemExit(
            f"{script} failed ({proc.returncode}); see {log}\n{log.read_text()[-2000:]}"
        )
    return time.perf_counter() - start


def build(cand: Path, scratch: Path, cache: Path, threads: int) -> tuple[Path, float, float, bool]:
    """Dataset then model, cached by the digest of data/ (+ trainer/)."""
    data_key = tree_digest(cand / "data")
    model_key = hashlib.sha256(f"{data_key}{tree_digest(cand / 'trainer')}{threads}".encode())
    model_dir = cache / f"model-{model_key.hexdigest()[:16]}"
    if (model_dir / "model.safetensors").is_file():
        return model_dir, 0.0, 0.0, True
    env = dict(os.environ, HOME=str(scratch), RSI_THREADS=str(threads), HF_HUB_OFFLINE="1")
    dataset = scratch / "dataset"
    env["RSI_DATASET_OUT"] = str(dataset)
    data_s = run_step(cand / "data" / "generate.py", cand / "data", env, scratch / "data.log")
    env["RSI_DATASET"] = str(dataset)
    tmp_model = scratch / "model"
    env["RSI_MODEL_OUT"] = str(tmp_model)
    train_s = run_step(cand / "trainer" / "train.py", cand / "trainer", env, scratch / "train.log")
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tmp_model, model_dir, dirs_exist_ok=True)
    return model_dir, data_s, train_s, False


# -- a loopback server with the runtime's API -------------------------------------------


class Generator:
    """Batched, left-padded transformers generation (greedy or sampling) on CPU."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.lock = threading.Lock()

    def complete(self, body: dict) -> dict:
        torch = self.torch
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        n = int(body.get("n") or 1)
        temperature = float(body.get("temperature") or 0.0)
        stops = [s for s in (body.get("stop") or []) if s]
        batch = self.tok(prompts, return_tensors="pt", padding=True)
        limit = (
            getattr(self.model.config, "n_positions", None)
            or self.model.config.max_position_embeddings
        )
        room = limit - batch["input_ids"].shape[1]
        max_new = max(1, min(int(body.get("max_tokens") or 16), room))
        kwargs: dict[str, Any] = {"max_new_tokens": max_new, "num_return_sequences": n}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False)
        with self.lock, torch.no_grad():
            torch.manual_seed(int(body.get("seed") or 0))
            out = self.model.generate(
                **batch,
                pad_token_id=self.tok.pad_token_id,
                eos_token_id=self.tok.eos_token_id,
                **kwargs,
            )
        new = out[:, batch["input_ids"].shape[1] :]
        choices, completion_tokens = [], 0
        for i, row in enumerate(new):
            ids = [t for t in row.tolist() if t != self.tok.pad_token_id]
            finish = "length"
            if self.tok.eos_token_id in ids:
                ids, finish = ids[: ids.index(self.tok.eos_token_id)], "stop"
            text = self.tok.decode(ids, skip_special_tokens=True)
            for s in stops:
                if s in text:
                    text, finish = text[: text.index(s)], "stop"
            completion_tokens += len(ids)
            choices.append({"index": i, "text": text, "finish_reason": finish})
        prompt_tokens = int(batch["attention_mask"].sum())
        return {
            "object": "text_completion",
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class RuntimeGenerator:
    """The runtime's own generation code (``rsiframe.dth.serving.TransformersBackend``)."""

    def __init__(self, model_dir: Path) -> None:
        from rsiframe.dth.serving import TransformersBackend

        self.backend = TransformersBackend()
        self.backend.load("m", model_dir)

    def complete(self, body: dict) -> dict:
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices, prompt_tokens = self.backend.generate(
            "m",
            prompts,
            n=int(body.get("n") or 1),
            max_tokens=int(body.get("max_tokens") or 16),
            temperature=float(body.get("temperature") or 0.0),
            top_p=1.0,
            seed=body.get("seed"),
            stop=list(body.get("stop") or []),
        )
        completion_tokens = sum(c.tokens for c in choices)
        return {
            "object": "text_completion",
            "choices": [
                {"index": i, "text": c.text, "finish_reason": c.finish_reason}
                for i, c in enumerate(choices)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def runtime_serving_available() -> bool:
    try:
        from rsiframe.dth.serving import TransformersBackend  # noqa: F401
    except ImportError:
        return False
    return True


def serve(model_dir: Path, generator: str) -> tuple[ThreadingHTTPServer, str]:
    gen = RuntimeGenerator(model_dir) if generator == "rsiframe" else Generator(model_dir)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, doc: dict) -> None:
            data = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._send(200, {"object": "list", "data": [{"id": "textops", "object": "model"}]})

        def do_POST(self) -> None:
            if not self.path.endswith("/completions"):
                self._send(404, {"error": {"message": "only /v1/completions here"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self._send(200, gen.complete(body))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


# -- evaluation -------------------------------------------------------------------------


def task_split() -> dict[str, list[str]]:
    from rsiframe.tasks.taskset import TaskSet, make_split

    ids = sorted(TaskSet.load(HERE).tasks)
    return make_split(ids, ratios=SPLIT_RATIOS, seed=0)


def run_task(task: Path, cand: Path, url: str, scratch: Path) -> float:
    work = Path(tempfile.mkdtemp(prefix=f"{task.name}-", dir=scratch))
    app = work / "app"
    shutil.copytree(task / "environment", app, ignore=shutil.ignore_patterns("Dockerfile"))
    env = dict(
        os.environ,
        RSI_APP=str(app),
        RSI_CANDIDATE=str(cand),
        RSI_TASK_ID=task.name,
        OPENAI_BASE_URL=url,
        RSI_MODEL="textops",
    )
    subprocess.run(
        [sys.executable, str(cand / "harness" / "run.py")],
        cwd=app,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )
    logs = work / "logs"
    env = dict(os.environ, RSI_APP=str(app), RSI_TESTS=str(task / "tests"), RSI_LOGS=str(logs))
    subprocess.run(
        ["bash", str(task / "tests" / "test.sh")],
        cwd=app,
        env=env,
        stdout=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    reward = logs / "verifier" / "reward.txt"
    return float(reward.read_text().strip() or 0) if reward.is_file() else 0.0


def evaluate(
    name: str, overrides: Overrides, split: dict[str, list[str]], args: argparse.Namespace
) -> Result:
    with tempfile.TemporaryDirectory(prefix="textops-cal-") as tmp:
        scratch = Path(tmp)
        cand = make_candidate(scratch, apply(overrides))
        model_dir, data_s, train_s, cached = build(cand, scratch, args.cache, args.threads)
        start = time.perf_counter()
        server, url = serve(model_dir, args.server)
        try:
            scores = {}
            for s in args.splits:
                rewards = [run_task(HERE / t, cand, url, scratch) for t in split[s]]
                scores[s] = sum(rewards) / len(rewards)
        finally:
            server.shutdown()
            server.server_close()
        eval_s = time.perf_counter() - start
        metrics = json.loads((model_dir / "train_metrics.json").read_text())
    return Result(name, scores, data_s, train_s, eval_s, metrics, cached)


def describe(overrides: Overrides) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in overrides.items()) or "seed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="named settings to run (default: all)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PART.KEY=VALUE",
        help="run one custom setting with these overrides instead of the named ones",
    )
    parser.add_argument("--splits", nargs="*", default=["train", "gate", "sealed"])
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RSI_THREADS", "1")))
    parser.add_argument(
        "--server",
        choices=["auto", "rsiframe", "builtin"],
        default="auto",
        help="generation code behind the loopback endpoint: the runtime's "
        "rsiframe.dth.serving.TransformersBackend (auto: when importable) or the builtin one",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "textops-calibrate-cache",
        help="model cache (by data/ + trainer/ digest); --no-cache to always train",
    )
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args(argv)
    os.environ["RSI_THREADS"] = str(args.threads)
    if args.server == "auto":
        args.server = "rsiframe" if runtime_serving_available() else "builtin"
    if args.no_cache:
        args.cache = Path(tempfile.mkdtemp(prefix="textops-nocache-"))
    import torch

    torch.set_num_threads(args.threads)

    if args.set:
        overrides = {}
        for item in args.set:
            key, _, value = item.partition("=")
            overrides[key] = parse_value(value)
        named = {describe(overrides): overrides}
    else:
        named = {k: v for k, v in NAMED.items() if not args.only or k in args.only}
    split = task_split()
    print(
        f"{len(named)} settings; {sum(len(v) for v in split.values())} tasks "
        f"({', '.join(f'{s} {len(split[s])}' for s in split)}); threads {args.threads}; "
        f"server {args.server}\n"
    )
    try:
        run_all(named, split, args)
    finally:
        if args.no_cache:
            shutil.rmtree(args.cache, ignore_errors=True)
    return 0


def run_all(
    named: dict[str, Overrides], split: dict[str, list[str]], args: argparse.Namespace
) -> None:
    print("| setting | " + " | ".join(args.splits) + " | data s | train s | steps | eval s |")
    print("|---" * (len(args.splits) + 5) + "|")
    for name, overrides in named.items():
        r = evaluate(name, copy.deepcopy(overrides), split, args)
        cells = " | ".join(f"{r.scores[s]:.1%}" for s in args.splits)
        train = "cached" if r.cached else f"{r.train_s:.1f}"
        print(
            f"| {name} | {cells} | {r.data_s:.1f} | {train} | {r.train_metrics['steps']} "
            f"| {r.eval_s:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
