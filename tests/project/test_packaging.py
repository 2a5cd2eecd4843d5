"""A built wheel ships every package under rsiframe/, operators/ and viewer/, and nothing else
at the top level (a non-editable install once lacked rsiframe.selftest)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.paths import REPO

FOLDERS = {"rsiframe": "rsiframe", "operators": "rsiframe.operators", "viewer": "rsiframe.viewer"}


def _expected_packages() -> set[str]:
    out = set()
    for folder, name in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            out.add(".".join([name, *rel.parts]))
    return out


def test_wheel_contains_every_package(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(
            REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (wheel,) = (tmp_path / "dist").glob("rsiframe-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        top_level = zf.read(next(n for n in names if n.endswith("top_level.txt"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    shipped = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("__init__.py")}
    expected = _expected_packages()
    assert "rsiframe.selftest" in expected
    assert expected <= shipped, expected - shipped
    # every module, not only the packages
    for folder, name in FOLDERS.items():
        for py in (REPO / folder).rglob("*.py"):
            rel = py.relative_to(REPO / folder)
            assert "/".join([*name.split("."), *rel.parts]) in names, rel
    assert "rsiframe/viewer/app.tcss" in names
    # the report page is one file made from these (rsiframe report)
    assert {"rsiframe/study/assets/runpage.js", "rsiframe/study/assets/runpage.css"} <= names
    assert top_level.split() == ["rsiframe"]  # the only new top-level name
    # every built-in operator's module ships
    eps = configparser.ConfigParser()
    eps.read_string(entry_points)
    for ref in eps["rsiframe.operators"].values():
        module = ref.split(":")[0]
        assert module.replace(".", "/") + ".py" in names, ref
