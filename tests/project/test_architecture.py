"""ARCHITECTURE.md stays true: its package order holds (no import against it, no loop, lazy
imports inside functions counted), every package is on the map, and the rules a layer
order cannot say (what operators, staged files and plug-ins may import)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.imports import FOLDERS, all_modules, closure, imports_of, order, unit
from tests.support.paths import REPO


def test_the_order_names_every_unit_once() -> None:
    units = order()
    assert len(units) == len(set(units)), "a unit appears twice in the order"
    present = {unit(m) for m in all_modules()} - {None}
    assert present <= set(units), f"not in the order: {sorted(present - set(units))}"
    assert set(units) <= present, f"in the order but not in the tree: {set(units) - present}"


def test_no_import_goes_up_the_order() -> None:
    rank = {u: i for i, u in enumerate(order())}
    upward = []
    for name, path in all_modules().items():
        mine = unit(name)
        for target, line in imports_of(path).items():
            theirs = unit(target)
            if mine and theirs and theirs != mine and rank[theirs] > rank[mine]:
                upward.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not upward, "\n".join(upward)


def test_no_import_loops() -> None:
    graph = {m: set(imports_of(p)) for m, p in all_modules().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    loops: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    assert not loops, loops


def test_every_package_and_public_module_is_on_the_map() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = []
    for name, folder in FOLDERS.items():
        for p in folder.rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            rel = p.parent.relative_to(folder)
            if p.name == "__init__.py" and rel.parts:
                if f"`{'/'.join(rel.parts)}/`" not in text and f"{rel.parts[-1]}/`" not in text:
                    missing.append(f"{folder.name}/{'/'.join(rel.parts)}/")
            elif name == "rsiframe" and p.name != "__init__.py" and f"`{p.name}`" not in text:
                missing.append(str(p.relative_to(REPO)))
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"


def test_operators_use_only_the_public_api() -> None:
    public = {"rsiframe.api", "rsiframe.llm", "rsiframe.errors", "rsiframe.yamlsafe",
              "rsiframe.shell", "rsiframe.surface", "rsiframe.sandbox",
              "rsiframe.sandbox.bwrap", "rsiframe.sandbox.mounts",
              "rsiframe.slots.registry"}  # fmt: skip
    for name, path in all_modules().items():
        if unit(name) != "operators":
            continue
        inner = {m for m in imports_of(path) if unit(m) != "operators"}
        assert inner <= public, f"{path.name} imports {inner - public}"
        reached = closure([path])
        assert not {unit(m) for m in reached} & {"engine", "archive", "evaluators", "gateway"}, (
            f"{path.name} reaches {sorted(reached)}"
        )


def test_staged_files_import_only_what_is_staged_with_them() -> None:
    # an untrusted operator's sandbox gets api.py, surface.py and the runner only
    staged = {"rsiframe.api", "rsiframe.surface"}
    assert closure([REPO / "rsiframe/slots/oprunner.py"]) <= staged
    assert closure([REPO / "rsiframe/api.py"]) <= staged
    # the model server and the in-sandbox forwarder run as a standard-library script: what
    # it imports of rsiframe (the host side starting it) is imported inside functions
    top = ast.parse((REPO / "rsiframe/dth/serving.py").read_text()).body
    assert not [
        n for n in top if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("rsiframe")
    ]
    # the task audit's hacking agent is copied into a candidate and run as its agent
    assert closure([REPO / "rsiframe/evaluators/hackagent.py"]) == set()
    # Harbor's process imports the plug-ins and nothing else of rsiframe: their own package
    # (``from .appcopy import``, staged beside them) and appcopy, standard library only
    plugins = "rsiframe.evaluators.harbor.plugins"
    for p in (REPO / "rsiframe/evaluators/harbor/plugins").glob("*.py"):
        assert closure([p]) <= {plugins}, p.name
    assert closure([REPO / "rsiframe/sandbox/appcopy.py"]) == set()
    # the cgroup keeper runs as a script (python -I -S), nothing of rsiframe on its path
    assert closure([REPO / "rsiframe/sandbox/cgroupwarm.py"]) == set()


def test_the_recipe_schema_imports_only_schema() -> None:
    """Config models import only each other (and the public modules, the task format):
    behaviour imports them, never the reverse."""
    allowed_units = {"recipe", "errors", "yamlsafe", "util", "surface", "api", "tasks", "repo"}
    for name in ("schema", "evaluator", "executor", "models", "overrides"):
        reached = closure([REPO / f"rsiframe/recipe/{name}.py"])
        bad = sorted(m for m in reached if unit(m) not in allowed_units)
        assert not bad, f"recipe/{name}.py reaches {bad}"
    # the schema's only repo import is the ignore list of the seed snapshot
    reached = closure([REPO / "rsiframe/recipe/schema.py"])
    assert {m for m in reached if unit(m) == "repo"} <= {"rsiframe.repo", "rsiframe.repo.gittree"}


def _recipe_check_modules(recipe: Path, env: dict[str, str] | None = None) -> list[str]:
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from rsiframe.cli.main import main\n"
        f"res = CliRunner().invoke(main, ['recipe', 'check', {str(recipe)!r}])\n"
        "mods = sorted(m for m in sys.modules if m.startswith('rsiframe'))\n"
        "print(json.dumps({'exit': res.exit_code, 'out': res.output, 'mods': mods}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["exit"] == 0, data["out"]
    return data["mods"]


RUNTIMES = {
    "rsiframe.dth.serving": "the model server",
    "rsiframe.dth.build": "the D/T/H build",
    "rsiframe.evaluators.local": "the local engine",
    "rsiframe.evaluators.harbor.engine": "the Harbor engine",
    "rsiframe.executors.ray_driver": "the Ray executor",
    "rsiframe.sandbox.docker": "the Docker sandbox",
    "rsiframe.gateway.app": "the model gateway",
    "rsiframe.engine.loop": "the engine",
}


def test_recipe_check_on_a_local_recipe_imports_no_runtime() -> None:
    mods = _recipe_check_modules(REPO / "recipes/sat3-quickstart.yaml")
    loaded = {m: why for m, why in RUNTIMES.items() if m in mods}
    assert not loaded, loaded
    assert not [m for m in mods if "harbor" in m], mods
    assert len(mods) <= 60, (len(mods), mods)  # the count the closing note gives


def test_recipe_check_on_a_harbor_recipe_imports_only_harbors_preflight() -> None:
    # its models need these variables set (recipe check makes no call)
    env = {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "unused"}
    mods = _recipe_check_modules(REPO / "recipes/harbor-hill-climb.yaml", env)
    assert "rsiframe.evaluators.harbor.preflight" in mods
    loaded = {m: why for m, why in RUNTIMES.items() if m in mods}
    assert not loaded, loaded


def _slot_names_in(node: ast.AST, names: set[str]) -> set[str]:
    return {e.value for e in ast.walk(node) if isinstance(e, ast.Constant)} & names


def _names_a_slot(node: ast.AST) -> bool:
    """An operand that holds a slot's name: ``slot``, ``self.slot``, ``spec.slot`` ..."""
    ident = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return "slot" in ident.lower()


def test_the_slot_table_is_the_single_source() -> None:
    """Slot properties live only in ``api.SLOT_TABLE``: no module keeps a collection of slot
    names (a column, or part of one: which slots run in a transaction, run tasks, may run a
    candidate's code ...), and no module decides by comparing a slot's name with a literal;
    each reads the table's columns. Calling one slot by name (``calls.op("gate")``) is the
    lifecycle, not a property, and stays."""
    from rsiframe.api import SLOT_TABLE

    names = set(SLOT_TABLE)
    found = []
    for path in all_modules().values():
        if path == REPO / "rsiframe" / "api.py" or "selftest" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                if len(_slot_names_in(node, names)) >= 2:
                    found.append(f"{where} keeps its own list of slots")
            elif isinstance(node, ast.Dict):
                keys = [k for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
                if len(keys) >= 2 and all(isinstance(v, ast.Name) for v in node.values):
                    found.append(f"{where} keeps its own slot -> class table")
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                literal = any(_slot_names_in(o, names) for o in operands)
                if literal and any(_names_a_slot(o) for o in operands):
                    found.append(f"{where} decides by a slot's name")
    assert not found, "\n".join(found)


def test_only_the_ray_executor_imports_ray_and_only_lazily() -> None:
    ray_modules = {"rsiframe.executors.ray_driver", "rsiframe.executors.ray_worker"}
    for name, p in all_modules().items():
        tree = ast.parse(p.read_text())
        uses = {
            a.name if isinstance(node, ast.Import) else (node.module or "")
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for a in node.names
        }
        uses = {m for m in uses if m == "ray" or m.startswith("ray.")}
        if name not in ray_modules:
            assert not uses, f"{p.name} imports {uses}"
            continue
        top = {
            a.name
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for a in node.names
        }
        assert "ray" not in top, f"{p.name} must import ray inside functions (an extra)"


def test_no_module_beside_a_script_shadows_the_standard_library() -> None:
    """serving.py runs as a script, which puts its folder first on sys.path: a module there
    named like a standard-library one (``opcode``) would replace it."""
    folder = REPO / "rsiframe" / "dth"
    clash = sorted(p.stem for p in folder.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not clash, clash


def test_the_engine_wires_collaborators_through_constructors() -> None:
    """No ``attach(engine)`` patching: nothing takes the engine as ``Any`` to poke into it,
    and the engine's modules never assign into another object's attributes (collaborators
    get what they need when they are built; notifications go through ``engine.hooks``)."""
    found = []
    for name, path in all_modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name == "attach":
                    found.append(f"{where} defines attach()")
                for arg in node.args.args + node.args.kwonlyargs:
                    if arg.arg == "engine" and ast.unparse(arg.annotation or ast.Name("")) == "Any":
                        found.append(f"{where} takes the engine as Any")
            if unit(name) != "engine" or not isinstance(node, ast.Assign | ast.AugAssign):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) != "self":
                    found.append(f"{where} assigns into {ast.unparse(t)}")
    assert not found, "\n".join(found)
