"""The function-level rules (scripts/check_functions.py): complexity 10, 12 branches, 50
statements, 80 lines, with one allow-list of at most 15 entries in pyproject.toml that
only shrinks. The checker itself is tested on planted functions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "check_functions.py"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_functions", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_packages_keep_the_function_rules() -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert res.returncode == 0, res.stdout
    assert "check_functions: ok" in res.stderr


def test_a_long_function_is_measured_from_def_to_its_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(85))
    path = tmp_path / "m.py"
    path.write_text(f"class C:\n    def f(self):\n{body}\n\n\ndef g():\n    return 1\n")
    found = _checker().functions(path)
    assert found[2] == ("C.f", 86) and found[90] == ("g", 2)


@pytest.mark.parametrize(
    ("allowed", "found", "expected"),
    [
        ({}, {"a.py::f": ["81 lines > 80"]}, "a.py::f: 81 lines > 80"),
        ({"a.py::f": "why"}, {}, "a.py::f: on the allow-list but breaks no rule: remove it"),
        ({"a.py::f": " "}, {"a.py::f": ["x"]}, "a.py::f: on the allow-list without a reason"),
        (
            {f"a.py::f{i}": "why" for i in range(16)},
            {f"a.py::f{i}": ["x"] for i in range(16)},
            "the allow-list has 16 entries; at most 15",
        ),
    ],
)
def test_the_allow_list_only_excuses_what_it_names_with_a_reason(
    allowed: dict[str, str],
    found: dict[str, list[str]],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checker = _checker()
    monkeypatch.setattr(checker, "allowlist", lambda: allowed)
    monkeypatch.setattr(checker, "violations", lambda: found)
    assert checker.problems() == [expected]
