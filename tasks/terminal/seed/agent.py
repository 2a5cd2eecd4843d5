"""terminal seed agent: a terminus-style loop over an OpenAI-compatible endpoint.

Run as ``python3 /candidate/agent.py`` in the task's work folder (the harbor engine's
candidate agent, or the local engine). Each turn the model sees the task and the output
of its last commands, and answers with one JSON object, as Harbor's terminus agents do:

    {"analysis": "...", "plan": "...", "commands": [{"keystrokes": "ls -la\\n"}],
     "task_complete": false}

Each command runs in a fresh ``bash -c`` in the work folder; the loop ends when the model
says ``task_complete`` or after ``max_turns``. Its prompt is ``prompt.md`` and its
settings ``agent.yaml`` (both on the surface: the mutator may change them). The model is
``$RSI_MODEL`` at ``$OPENAI_BASE_URL``, the run's gateway (``$OPENAI_API_KEY`` is this
evaluation's token, never a provider key). Each turn is logged to
``$RSI_LOGS/agent/transcript.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import yaml
from openai import OpenAI

HERE = Path(__file__).resolve().parent
JSON_OBJECT = re.compile(r"\{.*\}", re.S)
OUTPUT_CHARS = 4000


def parse(text: str) -> dict:
    """The first JSON object in the answer; an empty turn when there is none."""
    match = JSON_OBJECT.search(text or "")
    try:
        data = json.loads(match.group(0)) if match else {}
    except ValueError:
        data = {}
    return data if isinstance(data, dict) else {}


def run(command: str, cwd: str, timeout: float) -> str:
    try:
        res = subprocess.run(
            ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
        out = res.stdout + res.stderr + f"[exit {res.returncode}]"
    except subprocess.TimeoutExpired:
        out = f"[timed out after {timeout:g}s]"
    return out[-OUTPUT_CHARS:]


def main() -> int:
    cfg = yaml.safe_load((HERE / "agent.yaml").read_text()) or {}
    system = (HERE / "prompt.md").read_text()
    task = Path(os.environ.get("RSI_INSTRUCTION", "/task/instruction.md")).read_text()
    app = os.environ.get("RSI_APP", "/app")
    log = Path(os.environ.get("RSI_LOGS", "/logs"), "agent", "transcript.jsonl")
    client = OpenAI(max_retries=0)
    model = os.environ.get("RSI_MODEL") or "default"
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Task:\n{task}\nWorking folder: {app}"},
    ]
    for turn in range(int(cfg.get("max_turns", 30))):
        answer = client.chat.completions.create(
            model=model,
            messages=messages,
            temperature=float(cfg.get("temperature", 0.0)),
            max_tokens=int(cfg.get("max_tokens", 1024)),
        )
        text = answer.choices[0].message.content or ""
        step = parse(text)
        commands = [c for c in step.get("commands") or [] if isinstance(c, dict)]
        outputs = [
            run(str(c.get("keystrokes", "")), app, float(cfg.get("command_timeout_s", 30)))
            for c in commands
        ]
        with log.open("a") as f:
            f.write(json.dumps({"turn": turn, "answer": text, "outputs": outputs}) + "\n")
        if step.get("task_complete") or not commands:
            return 0
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Output:\n" + "\n".join(outputs)},
        ]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
