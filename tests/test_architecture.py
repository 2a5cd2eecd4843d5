"""ARCHITECTURE.md stays true: every module is listed, and the dependency rules hold."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rsiframe", "operators")


def modules() -> list[Path]:
    return sorted(
        p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if p.name != "__init__.py"
    )


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def module_file(name: str) -> Path | None:
    """The file of an rsiframe module name (``rsiframe.operators.x`` is ``operators/x.py``)."""
    parts = name.split(".")
    if parts[0] != "rsiframe" or len(parts) < 2:
        return None
    if parts[1] in ("operators", "viewer"):
        base = REPO / parts[1] / Path(*parts[2:]) if len(parts) > 2 else REPO / parts[1]
    else:
        base = REPO / "rsiframe" / Path(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def rsiframe_imports(path: Path) -> set[str]:
    """Modules of rsiframe that ``path`` imports (``from rsiframe import x`` names ``x``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n for n in names if module_file(n) is not None and n != "rsiframe")
    return out


def closure(paths: list[Path]) -> set[str]:
    """Every rsiframe module reachable from ``paths`` through imports (transitively)."""
    seen: set[str] = set()
    todo = [m for p in paths for m in rsiframe_imports(p)]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        f = module_file(m)
        if f is not None:
            todo.extend(rsiframe_imports(f) - seen)
    return seen


def test_every_module_is_in_the_map() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = [
        str(p.relative_to(REPO)) for p in modules() if f"`{p.relative_to(REPO)}`" not in text
    ]
    assert not missing, f"ARCHITECTURE.md does not list: {missing}"


def test_nothing_imports_the_cli() -> None:
    offenders = [
        p.name for p in modules() if p.name != "cli.py" and "rsiframe.cli.main" in imports_of(p)
    ]
    assert not offenders


def test_leaves_stay_leaves() -> None:
    leaves = {
        "surface.py",
        "gittree.py",
        "digest.py",
        "errors.py",
        "faults.py",
        "archive.py",
        "signing.py",
        "sandbox.py",
        "tasks.py",
        "keys.py",
        "mounts.py",
        "safefile.py",
        "appcopy.py",
        "yamlsafe.py",
        "cgroups.py",
    }
    allowed = {
        "rsiframe",
        "rsiframe.surface",
        "rsiframe.util",
        "rsiframe.util.digest",
        "rsiframe.errors",
        "rsiframe.util.faults",
        "rsiframe.certs.keys",
        "rsiframe.util.safefile",
        "rsiframe.sandbox.cgroups",
    }
    for p in modules():
        if p.name in leaves and p.parent.name == "rsiframe":
            inner = closure([p])
            assert inner <= allowed, f"{p.name} reaches {inner - allowed}"


def test_the_bottom_layer_reaches_only_leaves() -> None:
    """events, schema and api are read by everything, so they pull in nothing heavy."""
    allowed = {
        "rsiframe.api",
        "rsiframe.surface",
        "rsiframe.repo.gittree",
        "rsiframe.util",
        "rsiframe.util.safefile",
        "rsiframe.util.digest",
        "rsiframe.errors",
        "rsiframe.recipe.executor",  # pydantic only: the `evaluator.executor` key
        "rsiframe.recipe.models",  # the recipe's models: (reaches only errors)
    }
    for name in ("events.py", "api.py", "schema.py"):
        inner = closure([REPO / "rsiframe" / name])
        assert inner <= allowed, f"{name} reaches {inner - allowed}"


def test_oprunner_reaches_only_the_staged_files() -> None:
    # inside the sandbox only api.py, surface.py and the runner are staged
    assert closure([REPO / "rsiframe" / "oprunner.py"]) <= {"rsiframe.api", "rsiframe.surface"}


def test_operators_use_only_the_public_api() -> None:
    allowed = {
        "rsiframe.api",
        "rsiframe.sandbox.bwrap",
        "rsiframe.shell",
        "rsiframe.sandbox.mounts",
        "rsiframe.yamlsafe",
        "rsiframe",  # from rsiframe import llm
        "rsiframe.llm",  # the gateway client: how operators call models
        "rsiframe.operators.edits",
        "rsiframe.operators.llmprompt",
        "rsiframe.operators.roundrobin",  # knobs: GEPA's round-robin turn
        "rsiframe.slots.registry",  # round_robin: the operator it wraps, by name
    }
    for p in (REPO / "operators").glob("*.py"):
        inner = {m for m in imports_of(p) if m.startswith("rsiframe")}
        assert inner <= allowed, f"{p.name} imports {inner - allowed}"
        # and, through them, nothing of the engine, state or archive
        reached = closure([p])
        assert not reached & {
            "rsiframe.engine.loop",
            "rsiframe.archive.state",
            "rsiframe.archive.log",
            "rsiframe.evaluators.local",
        }, f"{p.name} reaches {sorted(reached)}"


def test_the_slot_table_is_the_single_source() -> None:
    """No module spells out its own copy of a column of ``api.SLOT_TABLE`` (every slot, the
    required or optional ones, those a candidate's code may fill); each reads the table."""
    from rsiframe.api import SLOT_TABLE

    names = set(SLOT_TABLE)
    columns = [
        names,
        {n for n, s in SLOT_TABLE.items() if s.required},
        {n for n, s in SLOT_TABLE.items() if not s.required},
        {n for n, s in SLOT_TABLE.items() if s.candidate_code},
    ]
    for p in modules() + sorted((REPO / "viewer").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                elts = node.elts
            elif isinstance(node, ast.Dict):  # slot -> class tables (a recipe's slots: is data)
                elts = [
                    k
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(v, ast.Name)
                ]
            else:
                continue
            found = {e.value for e in elts if isinstance(e, ast.Constant)} & names
            where = f"{p.relative_to(REPO)}:{node.lineno}"
            assert found not in columns, f"{where} keeps its own copy of slots {found}"


def budgets() -> dict[str, int]:
    """``path -> budget`` from the module tables of ARCHITECTURE.md."""
    rows = re.findall(
        r"^\| `((?:rsiframe|operators|viewer)/[^`]+)` \| (\d+) \|",
        (REPO / "ARCHITECTURE.md").read_text(),
        re.MULTILINE,
    )
    return {path: int(n) for path, n in rows}


def test_every_module_has_a_line_budget_and_keeps_it() -> None:
    table = budgets()
    listed = [str(p.relative_to(REPO)) for p in modules()]
    listed += [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "viewer").rglob("*"))
        if p.suffix in (".py", ".tcss") and p.name != "__init__.py"
    ]
    missing = [m for m in listed if m not in table]
    assert not missing, f"no line budget in ARCHITECTURE.md for {missing}"
    over = {
        m: (n, table[m])
        for m in listed
        if (n := len((REPO / m).read_text().splitlines())) > table[m]
    }
    assert not over, f"over budget (lines, budget): {over}"


def test_the_engines_steps_stay_small() -> None:
    """The engine and its steps each stay well under 400 lines (issue 11)."""
    table = budgets()
    steps = ("engine", "transaction", "evaluation", "certify", "review", "runstart", "opcall")
    big = {s: table[f"rsiframe/{s}.py"] for s in steps if table[f"rsiframe/{s}.py"] >= 400}
    assert not big, big


def test_only_the_ray_executor_imports_ray_and_only_lazily() -> None:
    for p in modules():
        uses = {m for m in imports_of(p) if m == "ray" or m.startswith("ray.")}
        if p.name != "rayexec.py":
            assert not uses, f"{p.name} imports {uses}"
            continue
        top = {
            a.name
            for node in ast.parse(p.read_text()).body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for a in node.names
        }
        assert "ray" not in top, "rayexec.py must import ray inside functions (an extra)"


def test_no_mechanism_module_shadows_the_standard_library() -> None:
    """serving.py runs as a script from rsiframe/, which puts that folder first on sys.path:
    a module named like a standard-library one (``opcode``) would replace it there."""
    clash = sorted(
        p.stem for p in (REPO / "rsiframe").glob("*.py") if p.stem in sys.stdlib_module_names
    )
    assert not clash, clash
