#!/usr/bin/env python3
"""Generate the pyfix task set: fix or write one small Python function per task.

``python3 tasks/pyfix/generate.py`` rewrites every task folder byte-identically from
``specs.py`` (no randomness); ``--check`` also runs each task's verifier against its
starting code (must score 0) and its reference solution (must score 1), in rsiframe's
bubblewrap sandbox (so ``--check`` needs rsiframe installed and bubblewrap).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from specs import SPECS, Spec  # noqa: E402

VERIFIER = HERE / "verifier"

TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "rsiframe"
difficulty = "easy"
category = "python"
tags = ["python", "{kind}"]

[verifier]
timeout_sec = 30.0

[agent]
timeout_sec = 120.0

[environment]
workdir = "/app"
"""

INSTRUCTION = {
    "fix": """\
# {task_id}

The function `{name}` in `/app/{name}.py` has a bug. Fix it so that it does what its
docstring says: {doc}

Edit only `/app/{name}.py`; keep the function's name and signature. Hidden tests call
`{name}` with several inputs and compare the results exactly.
""",
    "write": """\
# {task_id}

Implement the function `{name}` in `/app/{name}.py` (it currently raises
`NotImplementedError`) so that it does what its docstring says: {doc}

Edit only `/app/{name}.py`; keep the function's name and signature. Hidden tests call
`{name}` with several inputs and compare the results exactly.
""",
}

DOCKERFILE = """\
FROM python:3.11-slim
WORKDIR /app
COPY {name}.py /app/{name}.py
"""

SOLVE_SH = """\
#!/usr/bin/env bash
# Reference solution: write the correct module into the work dir.
cat > "${{RSI_APP:-/app}}/{name}.py" <<'PYFIX_EOF'
{solution}PYFIX_EOF
"""


def task_id(i: int) -> str:
    return f"pyfix-{i:03d}"


def write_task(root: Path, i: int, spec: Spec) -> None:
    tid = task_id(i)
    d = root / tid
    if d.exists():
        shutil.rmtree(d)
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(TASK_TOML.format(kind=spec.kind))
    (d / "instruction.md").write_text(
        INSTRUCTION[spec.kind].format(task_id=tid, name=spec.name, doc=spec.doc)
    )
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE.format(name=spec.name))
    (d / "environment" / f"{spec.name}.py").write_text(spec.start)
    cases = {"module": spec.name, "function": spec.name, "cases": _jsonable(spec.cases)}
    (d / "tests" / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    for name in ("test.sh", "check.py"):
        shutil.copyfile(VERIFIER / name, d / "tests" / name)
    (d / "tests" / "test.sh").chmod(0o755)
    solve = d / "solution" / "solve.sh"
    solve.write_text(SOLVE_SH.format(name=spec.name, solution=spec.solution))
    solve.chmod(0o755)


def _jsonable(value: object) -> object:
    return json.loads(json.dumps(value))


def score(task: Path, module_text: str) -> str:
    """Run the task's verifier on ``module_text`` as the agent's module; return the reward.

    In rsiframe's bubblewrap sandbox, laid out as the local engine lays out a verifier
    (``/app``, ``/tests`` read-only, ``/logs/verifier``): the verifier runs no agent code
    anywhere else (see ``verifier/check.py``), so this needs rsiframe and bubblewrap.
    """
    from rsiframe.sandbox.bwrap import BwrapSandbox, Mount

    with tempfile.TemporaryDirectory() as tmp:
        app, logs, tests = Path(tmp, "app"), Path(tmp, "logs"), Path(tmp, "tests")
        (logs / "verifier").mkdir(parents=True)
        app.mkdir()
        shutil.copytree(task / "tests", tests)
        spec = json.loads((tests / "cases.json").read_text())
        (app / f"{spec['module']}.py").write_text(module_text)
        mounts = [
            Mount(app, "/app", writable=True),
            Mount(tests, "/tests"),
            Mount(logs / "verifier", "/logs/verifier", writable=True),
        ]
        env = {"RSI_APP": "/app", "RSI_TESTS": "/tests", "RSI_LOGS": "/logs"}
        res = BwrapSandbox().run(
            ["bash", "/tests/test.sh"], mounts=mounts, cwd=mounts[0], env=env, timeout=120
        )
        if not res.ok:
            raise RuntimeError(f"{task.name}: test.sh failed: {res.stderr[-300:]!r}")
        return (logs / "verifier" / "reward.txt").read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--check", action="store_true", help="verify start=0 and solution=1")
    args = ap.parse_args()
    names = [s.name for s in SPECS]
    assert len(set(names)) == len(names), "duplicate function names"
    for i, spec in enumerate(SPECS, start=1):
        write_task(args.out, i, spec)
    bad = []
    if args.check:
        for i, spec in enumerate(SPECS, start=1):
            task = args.out / task_id(i)
            start, good = score(task, spec.start), score(task, spec.solution)
            if (start, good) != ("0", "1"):
                bad.append(f"{task_id(i)} ({spec.name}): start={start} solution={good}")
    print(f"wrote {len(SPECS)} tasks to {args.out}")
    for line in bad:
        print("BAD", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
