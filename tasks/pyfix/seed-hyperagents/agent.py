"""pyfix seed agent: a minimal tool-using coding agent over an OpenAI-compatible endpoint.

Two modes, one tool loop (read_file, write_file, run, finish) over one folder:

- solving a task (how the evaluator runs it, ``python3 "$RSI_CANDIDATE/agent.py"``, in the
  task's work dir): it reads the task from ``$RSI_INSTRUCTION``, works in ``/app``
  (``$RSI_APP``) with ``prompt.md``, and a model that cannot call tools may answer with a
  fenced python block, written to the file the task names;
  Its workspace (``workspace/skills.md``, ``workspace/memory.md``), when present, is
  appended to the prompt (A-Evolve evolves those files);
- improving itself (``agent.py --self-improve --problem TEXT``, run in a copy of its own
  folder, e.g. by ``agent_cli`` with ``profile: command``, the Darwin Gödel Machine's
  self-modification): it works on its own files with ``self_improve.md`` as the prompt.

It talks to ``$OPENAI_BASE_URL`` (the framework's endpoint; ``$OPENAI_API_KEY`` is a
per-sandbox token, never a provider key) over plain HTTP with the standard library
(importing an SDK cost each task run a second); the model is
``config.yaml``'s ``model``, else ``$RSI_MODEL``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.S)
TARGET = re.compile(r"`/app/([A-Za-z0-9_]+\.py)`")


def tools(where: str) -> list[dict]:
    """The tool schemas, each working in ``where``."""
    return [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": d,
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": "string"} for k in ps},
                    "required": ps,
                },
            },
        }
        for n, d, ps in (
            ("read_file", f"read a file under {where}", ["path"]),
            ("write_file", f"replace a file under {where}", ["path", "content"]),
            ("run", f"run a shell command in {where}", ["command"]),
            ("finish", "stop: the task is done", []),
        )
    ]


def _inside(root: Path, path: str) -> Path:
    p = (root / path.removeprefix(str(root) + "/").removeprefix("/app/").lstrip("/")).resolve()
    if root.resolve() not in (p, *p.parents):
        raise ValueError(f"{path} is outside {root}")
    return p


def call_tool(root: Path, name: str, args: dict, timeout: float) -> str:
    try:
        if name == "read_file":
            return _inside(root, args["path"]).read_text()[:20000]
        if name == "write_file":
            _inside(root, args["path"]).write_text(args["content"])
            return "written"
        if name == "run":
            out = subprocess.run(
                args["command"],
                shell=True,
                cwd=root,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            return (out.stdout + out.stderr)[-4000:] + f"\n(exit {out.returncode})"
        return "done"
    except Exception as exc:  # tool errors go back to the model
        return f"error: {type(exc).__name__}: {exc}"


def chat(body: dict, attempts: int = 2) -> dict:
    """The first choice's message of one chat completion at ``$OPENAI_BASE_URL``; a refused
    connection or a 408/409/429/5xx answer is tried once more after a second."""
    base = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1").rstrip("/")
    request = urllib.request.Request(
        base + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", ""),
        },
    )
    for attempt in range(attempts):
        last = attempt + 1 == attempts
        try:
            with urllib.request.urlopen(request, timeout=600) as resp:
                return json.load(resp)["choices"][0]["message"]
        except urllib.error.HTTPError as exc:
            if last or not (exc.code in (408, 409, 429) or exc.code >= 500):
                raise RuntimeError(f"model call failed: {exc.code} {exc.read()[:500]!r}") from None
        except urllib.error.URLError:
            if last:
                raise
        time.sleep(1.0)
    raise AssertionError("unreachable")


def loop(config: dict, root: Path, prompt: str, target: re.Match | None) -> int:
    """Ask, run the tool calls, answer with their results, until finish or max_steps."""
    model = config.get("model") or os.environ.get("RSI_MODEL", "default")
    messages: list[dict] = [{"role": "user", "content": prompt}]
    timeout = float(config.get("command_timeout_s", 10))
    for step in range(int(config.get("max_steps", 6))):
        reply = chat(
            {
                "model": model,
                "messages": messages,
                "tools": tools(str(root)),
                "temperature": float(config.get("temperature", 0.0)),
                "max_tokens": int(config.get("max_tokens", 1024)),
            }
        )
        calls = reply.get("tool_calls") or []
        content = reply.get("content") or ""
        print(f"step {step}: {len(calls)} tool call(s), {len(content)} chars")
        if not calls:
            block = FENCE.search(content)
            if block and target:
                (root / target.group(1)).write_text(block.group(1))
                print(f"wrote {target.group(1)} from a fenced block")
            return 0
        messages.append({k: v for k, v in reply.items() if v is not None})
        for call in calls:
            name = call["function"]["name"]
            if name == "finish":
                return 0
            try:
                args = json.loads(call["function"].get("arguments") or "{}")
            except ValueError:
                args = {}
            print(f"  {name} {args.get('path') or args.get('command') or ''}")
            result = call_tool(root, name, args, timeout)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return 0


def workspace_notes() -> str:
    """The agent's evolved skills and memory (``workspace/skills.md``, ``memory.md``), when
    its folder has them: A-Evolve's workspace, read at solve time."""
    notes = ""
    for name in ("skills.md", "memory.md"):
        path = HERE / "workspace" / name
        if path.is_file():
            notes += f"\n\n## {name} (your workspace)\n\n" + path.read_text()[:8000]
    return notes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-improve", action="store_true", help="improve this agent's own code")
    parser.add_argument("--problem", default="", help="what to improve (with --self-improve)")
    args = parser.parse_args(argv)
    config = yaml.safe_load((HERE / "config.yaml").read_text()) or {}
    if args.self_improve:
        prompt = (HERE / "self_improve.md").read_text().replace("{problem}", args.problem)
        return loop(config, HERE, prompt, None)
    instruction = Path(os.environ.get("RSI_INSTRUCTION", "/task/instruction.md")).read_text()
    prompt = (HERE / "prompt.md").read_text().replace("{instruction}", instruction)
    prompt += workspace_notes()
    app = Path(os.environ.get("RSI_APP", "/app"))
    return loop(config, app, prompt, TARGET.search(instruction))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
