"""pyfix seed agent: a minimal tool-using loop over an OpenAI-compatible endpoint.

Run by the evaluator as ``python3 "$RSI_CANDIDATE/agent.py"`` in the task's work dir.
It reads the task from ``$RSI_INSTRUCTION``, talks to ``$OPENAI_BASE_URL`` (the
framework's endpoint; ``$OPENAI_API_KEY`` is a per-sandbox token, never a provider key)
with the ``openai`` SDK, and either calls tools (read_file, write_file, run, finish) or
answers with a fenced python block, which is written to the file the task names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from openai import OpenAI

HERE = Path(__file__).resolve().parent
APP = Path(os.environ.get("RSI_APP", "/app"))
FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.S)
TARGET = re.compile(r"`/app/([A-Za-z0-9_]+\.py)`")

TOOLS = [
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
        ("read_file", "read a file under /app", ["path"]),
        ("write_file", "replace a file under /app", ["path", "content"]),
        ("run", "run a shell command in /app", ["command"]),
        ("finish", "stop: the task is done", []),
    )
]


def _inside(path: str) -> Path:
    p = (APP / path.removeprefix("/app/").lstrip("/")).resolve()
    if APP.resolve() not in (p, *p.parents):
        raise ValueError(f"{path} is outside /app")
    return p


def call_tool(name: str, args: dict, timeout: float) -> str:
    try:
        if name == "read_file":
            return _inside(args["path"]).read_text()[:20000]
        if name == "write_file":
            _inside(args["path"]).write_text(args["content"])
            return "written"
        if name == "run":
            out = subprocess.run(
                args["command"],
                shell=True,
                cwd=APP,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            return (out.stdout + out.stderr)[-4000:] + f"\n(exit {out.returncode})"
        return "done"
    except Exception as exc:  # tool errors go back to the model
        return f"error: {type(exc).__name__}: {exc}"


def main() -> int:
    config = yaml.safe_load((HERE / "config.yaml").read_text()) or {}
    instruction = Path(os.environ.get("RSI_INSTRUCTION", "/task/instruction.md")).read_text()
    target = TARGET.search(instruction)
    prompt = (HERE / "prompt.md").read_text().replace("{instruction}", instruction)
    model = config.get("model") or os.environ.get("RSI_MODEL", "default")
    client = OpenAI(max_retries=1)
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for step in range(int(config.get("max_steps", 6))):
        reply = (
            client.chat.completions.create(
                model=model,
                messages=messages,
                tools=TOOLS,
                temperature=float(config.get("temperature", 0.0)),
                max_tokens=int(config.get("max_tokens", 1024)),
            )
            .choices[0]
            .message
        )
        calls = reply.tool_calls or []
        print(f"step {step}: {len(calls)} tool call(s), {len(reply.content or '')} chars")
        if not calls:
            block = FENCE.search(reply.content or "")
            if block and target:
                (APP / target.group(1)).write_text(block.group(1))
                print(f"wrote {target.group(1)} from a fenced block")
            return 0
        messages.append(reply.model_dump(exclude_none=True))
        for call in calls:
            if call.function.name == "finish":
                return 0
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError:
                args = {}
            result = call_tool(call.function.name, args, float(config.get("command_timeout_s", 10)))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
