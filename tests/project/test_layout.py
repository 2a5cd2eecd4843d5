"""The tests mirror the packages (README, "Testing"): every module with behaviour has its test
module at ``tests/<package>/test_<module>.py`` (``tests/test_<module>.py`` for the public
modules at the top of ``rsiframe/``) or a reason in :data:`WITHOUT_TEST_MODULE`; no test
imports ``conftest`` or another test file; every e2e test lives in ``tests/e2e/``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from tests.support.imports import all_modules
from tests.support.paths import REPO

TESTS = REPO / "tests"

#: modules with behaviour and no test module of their own, each with the reason; the test
#: below fails when one of them gets a test module (take it off) or loses its behaviour
_APP = (
    "drawn headless through the whole app: tests/viewer/test_app.py (every screen, nothing "
    "written) and the snapshots in tests/viewer/test_snapshots.py"
)
_SCENARIO = (
    "a self-test scenario family, itself a test of the framework: one per family runs in "
    "tests/selftest/test_runner.py, all of them in tests/e2e/test_selftest.py and make selftest"
)
_COMPARE = (
    "compare's output (terminal tables, --json, PNG and HTML), checked on real runs in "
    "tests/study/test_compare.py and tests/study/test_compare_stats.py"
)
_HARBOR = "runs inside Harbor's own process and venv (make harbor): "
WITHOUT_TEST_MODULE: dict[str, str] = {
    "rsiframe.cli.study": (
        "the compare, ablate, fidelity and replay commands, driven through the CLI by "
        "tests/study/test_*.py and tests/e2e/test_replay.py"
    ),
    "rsiframe.evaluators.harbor.plugins.agent": _HARBOR + "tests/e2e/test_harbor.py",
    "rsiframe.evaluators.harbor.plugins.environment": (
        _HARBOR + "tests/e2e/test_harbor_grading.py; its record is read in "
        "tests/evaluators/harbor/test_grading.py"
    ),
    "rsiframe.evaluators.harbor.venv": (
        "makes Harbor's own Python 3.12 venv (minutes, pip): every test in "
        "tests/e2e/test_harbor*.py uses it; its version pin, tests/evaluators/harbor/test_engine.py"
    ),
    "rsiframe.sandbox.cgroupwarm": (
        "the cgroup keeper, a script run as its own process: tests/sandbox/test_cgroups.py "
        "starts it for real (alone in its cgroup, writing, ended on a pause, on close and "
        "with a SIGKILLed parent)"
    ),
    "rsiframe.selftest.build_scenarios": _SCENARIO,
    "rsiframe.selftest.experiment": (
        "the self-test's tiny experiment, built by every scenario and by "
        "tests/selftest/test_runner.py"
    ),
    "rsiframe.selftest.gateway_hacks": _SCENARIO,
    "rsiframe.selftest.hostile": _SCENARIO,
    "rsiframe.selftest.saboteur": _SCENARIO,
    "rsiframe.selftest.scenarios": _SCENARIO,
    "rsiframe.selftest.task_hacks": _SCENARIO,
    "rsiframe.slots.oprunner": (
        "the sandbox side of an untrusted operator, a script run inside the sandbox: "
        "tests/slots/test_untrusted.py runs it for real"
    ),
    "rsiframe.study.compare_html": _COMPARE,
    "rsiframe.study.compare_report": _COMPARE,
    "rsiframe.study.compare_text": _COMPARE,
    "rsiframe.viewer.messages": "Textual messages (declarations) the screens post; " + _APP,
    "rsiframe.viewer.screens.candidate": _APP,
    "rsiframe.viewer.screens.help": _APP,
    "rsiframe.viewer.screens.lineage": _APP,
    "rsiframe.viewer.screens.recipe_diff": _APP,
    "rsiframe.viewer.screens.run": _APP,
    "rsiframe.viewer.widgets.diff_view": _APP,
    "rsiframe.viewer.widgets.filter_bar": _APP,
    "rsiframe.viewer.widgets.notes_view": _APP,
    "rsiframe.viewer.widgets.paged_text": _APP,
    "rsiframe.viewer.widgets.rewards_table": _APP,
    "rsiframe.viewer.widgets.run_header": _APP,
}


def _trivial(body: list[ast.stmt]) -> bool:
    """A body that does nothing: a docstring, ``...``, ``pass`` or a bare ``raise``."""
    rest = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(isinstance(s, ast.Pass | ast.Raise) for s in rest)


def has_behaviour(path: Path) -> bool:
    """Whether ``path`` defines a function or method that does something (a module of
    declarations only, dataclasses, pydantic fields or a Protocol, has none)."""
    tree = ast.parse(path.read_text())
    return any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and not _trivial(n.body)
        for n in ast.walk(tree)
    )


def mirror_of(module: str) -> Path:
    """Where ``rsiframe.a.b`` is tested: ``tests/a/test_b.py`` (``rsiframe.operators.x``
    and ``rsiframe.viewer.x`` live in operators/ and viewer/, and are tested likewise)."""
    *package, name = module.split(".")[1:]
    return TESTS.joinpath(*package, f"test_{name}.py")


def modules_with_behaviour() -> list[str]:
    return sorted(
        name
        for name, path in all_modules().items()
        if path.name != "__init__.py" and has_behaviour(path)
    )


def test_every_module_with_behaviour_has_a_test_module_or_a_reason() -> None:
    modules = modules_with_behaviour()
    missing = [m for m in modules if not mirror_of(m).is_file() and m not in WITHOUT_TEST_MODULE]
    assert not missing, "no test module (or a reason in WITHOUT_TEST_MODULE): " + ", ".join(
        f"{m} -> {mirror_of(m).relative_to(REPO)}" for m in missing
    )
    stale = [m for m in WITHOUT_TEST_MODULE if m not in modules or mirror_of(m).is_file()]
    assert not stale, f"WITHOUT_TEST_MODULE names modules that no longer need it: {stale}"
    assert all(reason.strip() for reason in WITHOUT_TEST_MODULE.values())


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "corpus" not in p.relative_to(TESTS).parts)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_no_test_imports_conftest_or_another_test_module() -> None:
    """Shared helpers are fixtures (conftest.py) or live in tests/support/, never in a test
    module another one imports (pytest would see two copies of its fixtures)."""
    bad = []
    for path in _python_files():
        for name in _imported(_tree(path)):
            parts = name.split(".")
            if "conftest" in parts or any(p.startswith("test_") for p in parts):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


def _marks_e2e(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "e2e" and "mark" in ast.unparse(n)
        for n in ast.walk(node)
    )


def test_e2e_tests_live_in_tests_e2e_and_nowhere_else() -> None:
    for path in _python_files():
        tree = _tree(path)
        where = path.relative_to(REPO)
        module_mark = [
            n
            for n in tree.body
            if isinstance(n, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
        ]
        if path.parent == TESTS / "e2e" and path.name.startswith("test_"):
            assert module_mark and _marks_e2e(module_mark[0]), f"{where}: no pytestmark e2e"
        elif path.parent != TESTS / "e2e":
            assert not _marks_e2e(tree), f"{where} marks a test e2e outside tests/e2e/"


def test_every_test_folder_is_a_package_and_support_holds_no_tests() -> None:
    """Packages: modules of one name in several folders (test_registry.py) stay apart."""
    folders = {p.parent for p in _python_files()}
    assert not [f for f in folders if not (f / "__init__.py").is_file()]
    support = [p for p in (TESTS / "support").rglob("*.py")]
    tests_in_support = [
        f"{p.name}:{n.name}"
        for p in support
        for n in ast.parse(p.read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]
    assert not tests_in_support and all(not p.name.startswith("test_") for p in support)


def _collected(env: dict[str, str], *files: str) -> set[str]:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *files],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:]
    return {line.split("::")[1].split("[")[0] for line in res.stdout.splitlines() if "::" in line}


def test_k4_runs_the_tests_that_make_a_mini_project_where_in_flight_matters() -> None:
    """make test-k4 follows each test, its helpers and its fixtures (local imports too) to
    make_mini, in the folders where candidates in flight matter (conftest.CONCURRENT); a
    test that makes none, or only reads a finished run elsewhere, runs as in make test."""
    files = ("tests/engine/test_scheduler.py", "tests/engine/test_concurrency.py",
             "tests/engine/test_staged_merge.py", "tests/study/test_compare.py")  # fmt: skip
    every = _collected({"RSIFRAME_TEST_CANDIDATES": ""}, *files)
    k4 = _collected({"RSIFRAME_TEST_CANDIDATES": "4"}, *files)
    assert k4 < every
    # a test that calls make_mini, one through the mini fixture, one through a module
    # fixture built by a local import; not one on hand-written events, not compare's
    assert "test_generational_k1_and_k4_give_the_same_candidates" in k4
    assert "test_steady_mode_runs_to_the_end_and_verifies" in k4
    assert "test_merges_are_git_merge_commits_with_two_parents_in_events_and_status" in k4
    assert "test_the_candidate_budget_closes_the_generation_then_ends_the_run_finished" not in k4
    assert "test_compare_groups_repeats_into_methods_with_cis_over_runs" in every - k4
