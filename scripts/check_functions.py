#!/usr/bin/env python3
"""Function-level rules for rsiframe's packages (run by ``make lint`` and a test):

- complexity at most 10 (ruff C901), at most 12 branches (PLR0912), at most 50
  statements (PLR0915);
- at most 80 lines from ``def`` to the function's last line (decorators not counted).

Exceptions live in one allow-list, ``[tool.rsiframe.function-allowlist]`` in
pyproject.toml (``"path::Qualified.name" = "reason"``), of at most 15 entries, each with a
reason; an entry that no longer breaks a rule must be removed (the list only shrinks).
Prints one line per problem; exit 1 when there is any.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("rsiframe", "operators", "viewer")
MAX_LINES = 80
MAX_ALLOWED = 15
RUFF_RULES = "C901,PLR0912,PLR0915"
RUFF_LIMITS = [
    "--config", "lint.mccabe.max-complexity=10",
    "--config", "lint.pylint.max-branches=12",
    "--config", "lint.pylint.max-statements=50",
]  # fmt: skip


def functions(path: Path) -> dict[int, tuple[str, int]]:
    """``{def line: (qualified name, lines from def to end)}`` of every function in a file."""
    out: dict[int, tuple[str, int]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                end = child.end_lineno or child.lineno
                out[child.lineno] = (prefix + child.name, end - child.lineno + 1)
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(path.read_text()), "")
    return out


def ruff_findings() -> list[tuple[str, int, str]]:
    """``(path, def line, rule and message)`` for each complexity rule a function breaks."""
    ruff = Path(sys.executable).parent / "ruff"
    argv = [str(ruff), "check", *FOLDERS, "--select", RUFF_RULES, *RUFF_LIMITS]
    res = subprocess.run(
        [*argv, "--output-format", "json", "--no-cache"], capture_output=True, text=True, cwd=REPO
    )
    if res.returncode not in (0, 1):
        raise SystemExit(f"check_functions: ruff failed: {res.stderr.strip()[-300:]}")
    rows = json.loads(res.stdout or "[]")
    return [
        (str(Path(r["filename"]).resolve().relative_to(REPO)), r["location"]["row"],
         f"{r['code']} {r['message']}")
        for r in rows
    ]  # fmt: skip


def violations() -> dict[str, list[str]]:
    """``{"path::qualname": [what it breaks, ...]}`` over the packages."""
    found: dict[str, list[str]] = {}
    defs: dict[str, dict[int, tuple[str, int]]] = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            defs[rel] = functions(path)
            for name, lines in defs[rel].values():
                if lines > MAX_LINES:
                    found.setdefault(f"{rel}::{name}", []).append(f"{lines} lines > {MAX_LINES}")
    for rel, line, what in ruff_findings():
        name = defs.get(rel, {}).get(line, (f"<line {line}>", 0))[0]
        found.setdefault(f"{rel}::{name}", []).append(what)
    return found


def allowlist() -> dict[str, str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    table: dict[str, str] = data.get("tool", {}).get("rsiframe", {}).get("function-allowlist", {})
    return table


def problems() -> list[str]:
    allowed = allowlist()
    found = violations()
    out = [f"{where}: {'; '.join(what)}" for where, what in sorted(found.items())
           if where not in allowed]  # fmt: skip
    out += [f"{where}: on the allow-list but breaks no rule: remove it" for where in allowed
            if where not in found]  # fmt: skip
    out += [f"{where}: on the allow-list without a reason" for where, why in allowed.items()
            if not why.strip()]  # fmt: skip
    if len(allowed) > MAX_ALLOWED:
        out.append(f"the allow-list has {len(allowed)} entries; at most {MAX_ALLOWED}")
    return out


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    if not found:
        print(f"check_functions: ok ({len(allowlist())} allowed)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
