"""The operator lock's code files: the local modules an operator's file imports, read
statically (relative, absolute within its package, in-function)."""

from __future__ import annotations

from pathlib import Path


def test_codefiles_follow_relative_and_absolute_imports_within_the_package(tmp_path: Path) -> None:
    from rsiframe.slots import codefiles

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "import os\nfrom . import b\nfrom .sub import c\nimport pkg.d as d\n",
        "b.py": "import json\n",
        "d.py": "",
        "unused.py": "",
        "sub/__init__.py": "",
        "sub/c.py": "from ..b import x\nfrom pkg import *\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    roots = [codefiles.Root(("pkg",), pkg)]
    found = codefiles.local_modules(pkg / "a.py", ("pkg", "a"), roots)
    assert {p.relative_to(pkg).as_posix() for p in found} == set(files) - {"unused.py"}
    # a file operator: bare names of its folder, and the package that folder belongs to
    (tmp_path / "helper.py").write_text("")
    (tmp_path / "op.py").write_text("import helper\nfrom pkg.sub import c\n")
    found = codefiles.local_modules(
        tmp_path / "op.py", ("op",), codefiles.file_roots(tmp_path / "op.py")
    )
    assert {p.relative_to(tmp_path).as_posix() for p in found} == {
        "op.py",
        "helper.py",  # a bare name of its folder
        "pkg/__init__.py",  # pkg.sub.c: a package within its folder, and what it imports
        "pkg/sub/__init__.py",
        "pkg/sub/c.py",
        "pkg/b.py",
    }
    # a file operator inside a package: its imports of the package run the package's files
    # (relative ones cannot: the file is loaded on its own)
    c = pkg / "sub" / "c.py"
    found = codefiles.local_modules(c, ("c",), codefiles.file_roots(c))
    assert {p.relative_to(pkg).as_posix() for p in found} == {"__init__.py", "sub/c.py"}
