#!/usr/bin/env python3
"""textops harness: answer every item of a task with the model behind an OpenAI endpoint.

Run as ``python3 "$RSI_CANDIDATE/harness/run.py"`` with cwd = the task's work dir.
Reads ``items.jsonl`` (``$RSI_APP``, default the cwd), sends ONE batched
``POST $OPENAI_BASE_URL/completions`` (model ``$RSI_MODEL``) with every item's prompt,
parses and votes the completions, optionally retries invalid answers in one more
batched request per round, and writes ``answers.jsonl`` (``{"id", "answer"}`` per
line). Stdlib and PyYAML only. A request that fails or times out ends the run with
status 1 after writing whatever answers it has (empty for the rest), and says why on
stderr (the task's error in the record). ``request_timeout_s`` is a read timeout: it
counts connecting and the server's silence while it generates, not the wait behind other
requests (the server sends an interim ``100 Continue`` every second while a request waits
in its queue), so a busy host does not make it fire.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


class RequestFailed(RuntimeError):
    """The model server did not give a usable answer."""


def candidate_root() -> Path:
    return Path(os.environ.get("RSI_CANDIDATE") or HERE.parent)


def load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_format(cfg: dict) -> dict:
    """The formats to prompt in: the harness's own, or the training data's (``from_data``)."""
    data = load_yaml(candidate_root() / "data" / "config.yaml")
    data_fmt = data.get("format") or {}
    prompt = cfg.get("prompt") or {}
    add = prompt.get("add", "from_data")
    letters = prompt.get("letters", "from_data")
    return {
        "add": data_fmt.get("add", "plain") if add == "from_data" else add,
        "letters": data_fmt.get("letters", "plain") if letters == "from_data" else letters,
        "width": int((data.get("digits") or {}).get("max", 4)),
    }


# -- prompts and answers (kept in step with data/generate.py) ---------------------------


def render(kind: str, problem: str, fmt: dict) -> str:
    if kind == "add":
        a, _, b = problem.partition("+")
        if fmt["add"] == "plain":
            return f"{int(a)}+{int(b)}="
        w = max(fmt["width"], len(a), len(b))
        return f"{int(a):0{w}d}+{int(b):0{w}d}="
    word = " ".join(problem) if fmt["letters"] == "spaced" else problem
    return f"{'rev' if kind == 'reverse' else 'sort'} {word}="


def parse(kind: str, text: str) -> str:
    """The answer in a completion: first line; ``~`` marks reversed digits; no padding."""
    line = text.split("\n", 1)[0].strip()
    if kind == "add":
        if line.startswith("~"):
            line = line[1:].strip()[::-1]
        digits = line.replace(" ", "")
        return digits.lstrip("0") or ("0" if digits else "")
    return line.replace(" ", "")


def valid(kind: str, problem: str, answer: str) -> bool:
    """Could ``answer`` be right? (Never looks at the expected answer.)"""
    if kind == "add":
        return answer.isdigit()
    if sorted(answer) != sorted(problem):
        return False
    return kind != "sort" or list(answer) == sorted(answer)


def vote(answers: list[str]) -> str:
    if not answers:
        return ""
    counts = Counter(answers)
    best = max(counts.values())
    return next(a for a in answers if counts[a] == best)  # ties: the earliest sample


# -- the endpoint -----------------------------------------------------------------------


def complete(prompts: list[str], *, n: int, temperature: float, cfg: dict) -> list[list[str]]:
    """One batched completions request; returns n texts per prompt (prompt-major)."""
    base = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1").rstrip("/")
    dec = cfg.get("decoding") or {}
    body = {
        "model": os.environ.get("RSI_MODEL", "textops"),
        "prompt": prompts,
        "max_tokens": int(dec.get("max_tokens", 24)),
        "temperature": float(temperature),
        "n": n,
        "stop": ["\n"],
        "seed": int(dec.get("seed", 0)),
    }
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    req = urllib.request.Request(
        base + "/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    timeout = float(cfg.get("request_timeout_s", 60))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            reply = json.loads(r.read())
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        if isinstance(exc, TimeoutError | socket.timeout) or isinstance(
            getattr(exc, "reason", None), TimeoutError | socket.timeout
        ):
            raise RequestFailed(
                f"completions request failed: timed out after {timeout:g}s (request_timeout_s)"
            ) from exc
        raise RequestFailed(f"completions request failed: {exc}") from exc
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != len(prompts) * n:
        raise RequestFailed(f"expected {len(prompts) * n} choices, got {str(reply)[:200]}")
    texts: list[list[str]] = [[] for _ in prompts]
    for pos, choice in enumerate(choices):
        index = choice.get("index", pos) if isinstance(choice, dict) else pos
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(index, int) or not 0 <= index < len(choices):
            index = pos
        texts[index // n].append(text if isinstance(text, str) else "")
    return texts


# -- main -------------------------------------------------------------------------------


def read_items(app: Path) -> list[dict]:
    items = []
    for line in (app / "items.jsonl").read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            items.append(item)
    return items


def solve(items: list[dict], cfg: dict, answers: dict[str, str]) -> None:
    """Fill ``answers`` in place (so a failure part-way keeps what was found)."""
    fmt = resolve_format(cfg)
    dec = cfg.get("decoding") or {}
    temperature = float(dec.get("temperature", 0.0))
    samples = max(1, int(dec.get("samples", 1)))
    check = bool(cfg.get("validate", False))
    pending = list(items)
    rounds = 1 + max(0, int(cfg.get("retries", 0)))
    for round_no in range(rounds):
        if not pending:
            break
        temp = temperature if round_no == 0 else max(temperature, 0.5)
        prompts = [render(it["kind"], it["prompt_text"], fmt) for it in pending]
        texts = complete(prompts, n=samples, temperature=temp, cfg=cfg)
        retry = []
        for item, outs in zip(pending, texts, strict=True):
            parsed = [parse(item["kind"], t) for t in outs]
            good = [a for a in parsed if valid(item["kind"], item["prompt_text"], a)]
            if good or not check:
                answers[item["id"]] = vote(good if check else parsed)
            else:
                answers.setdefault(item["id"], vote(parsed))
                retry.append(item)
        pending = retry if check else []


def main() -> int:
    app = Path(os.environ.get("RSI_APP") or os.getcwd())
    cfg = load_yaml(HERE / "config.yaml")
    items = read_items(app)
    answers: dict[str, str] = {}
    status = 0
    try:
        solve(items, cfg, answers)
    except RequestFailed as exc:
        print(f"harness: {exc}", file=sys.stderr)
        status = 1
    with open(app / "answers.jsonl", "w") as f:
        for item in items:
            f.write(json.dumps({"id": item["id"], "answer": answers.get(item["id"], "")}) + "\n")
    print(f"answered {sum(1 for a in answers.values() if a)}/{len(items)} items")
    return status


if __name__ == "__main__":
    sys.exit(main())
