"""pyfix HyperAgents seed: the meta agent, a tool-using coding agent that improves this
whole folder: the task agent (agent.py, prompt.md, config.yaml) and its own code (meta/).

Run by the framework in a copy of the parent's folder (``agent_cli``, ``profile:
command``): ``python3 meta/meta_agent.py --model NAME --instruction TEXT``. Its model is
reached at ``$OPENAI_BASE_URL`` (the run's gateway, metered; the key is a per-sandbox
token). The archive of earlier agents, their files and train results, is readable at
``$RSI_ARCHIVE`` (``archive.json``, ``<id>/<path>``). What this file does is what makes
the next children of any candidate that carries it: a child that changes it changes how
its own children are made.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from openai import OpenAI

META = Path(__file__).resolve().parent
ROOT = META.parent
MAX_STEPS = 8


def tools() -> list[dict]:
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
            (
                "read_file",
                "read a file of this folder, or of the archive ($RSI_ARCHIVE/...)",
                ["path"],
            ),
            ("write_file", "replace (or create) a file of this folder", ["path", "content"]),
            ("run", "run a shell command in this folder", ["command"]),
            ("finish", "stop: the change is made", []),
        )
    ]


def _path(path: str, writable: bool) -> Path:
    archive = os.environ.get("RSI_ARCHIVE", "")
    if not writable and archive and path.startswith(archive):
        p, root = Path(path).resolve(), Path(archive).resolve()
    else:
        p, root = (ROOT / path.lstrip("/")).resolve(), ROOT
    if root not in (p, *p.parents):
        raise ValueError(f"{path} is outside {root}")
    return p


def call_tool(name: str, args: dict) -> str:
    try:
        if name == "read_file":
            return _path(args["path"], False).read_text()[:20000]
        if name == "write_file":
            p = _path(args["path"], True)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(args["content"])
            return "written"
        if name == "run":
            out = subprocess.run(
                args["command"], shell=True, cwd=ROOT, capture_output=True, text=True, timeout=20
            )
            return (out.stdout + out.stderr)[-4000:] + f"\n(exit {out.returncode})"
        return "done"
    except Exception as exc:  # tool errors go back to the model
        return f"error: {type(exc).__name__}: {exc}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("RSI_MODEL", "default"))
    parser.add_argument("--instruction", default="")
    args = parser.parse_args(argv)
    prompt = (META / "prompt.md").read_text().replace("{instruction}", args.instruction)
    client = OpenAI(max_retries=1)
    messages: list[dict] = [{"role": "user", "content": prompt}]
    for step in range(MAX_STEPS):
        reply = (
            client.chat.completions.create(
                model=args.model, messages=messages, tools=tools(), temperature=0.7, max_tokens=2048
            )
            .choices[0]
            .message
        )
        calls = reply.tool_calls or []
        print(f"meta step {step}: {len(calls)} tool call(s)")
        if not calls:
            return 0
        messages.append(reply.model_dump(exclude_none=True))
        for call in calls:
            if call.function.name == "finish":
                return 0
            try:
                targs = json.loads(call.function.arguments or "{}")
            except ValueError:
                targs = {}
            result = call_tool(call.function.name, targs)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
