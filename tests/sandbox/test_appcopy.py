"""rsiframe.sandbox.appcopy: the verifier's copy of /app keeps what stays inside and drops
links out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsiframe.sandbox.appcopy import AppTooLarge, freeze, resolves_inside


def test_links_out_of_app_are_dropped_and_named(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    links = {
        "answers.jsonl": "../tests/expected.jsonl",
        "abs": "/tests/x",
        "absin": "/app/a.txt",
        "relin": "sub/../a.txt",
        "vlogs": "/logs/verifier",
        "self": ".",
        "chain": "self/../..",
        "sub/up": "..",
        "sub/viaup": "up/a.txt",
        "sub/out2": "up/..",
    }
    for rel, target in links.items():
        os.symlink(target, src / rel)
    os.mkfifo(src / "fifo")
    os.link(src / "a.txt", src / "hard")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o4755)
    (src / "private").write_text("k")
    (src / "private").chmod(0o600)
    removed = {r.path: r.reason for r in freeze(src, tmp_path / "dst", max_bytes=1 << 20)}
    assert set(removed) == {"answers.jsonl", "abs", "vlogs", "chain", "sub/out2", "fifo"}
    assert removed["answers.jsonl"] == "symlink leaves /app (-> ../tests/expected.jsonl)"
    dst = tmp_path / "dst"
    assert sorted(os.listdir(dst)) == [
        *("a.txt", "absin", "hard", "private", "relin", "run.sh", "self", "sub")
    ]
    assert (dst / "sub" / "viaup").read_text() == "a"
    # the hard link is a copy now; the set-uid bit is gone, the executable bit kept
    assert (dst / "hard").stat().st_nlink == 1 and (dst / "hard").read_text() == "a"
    assert oct((dst / "run.sh").stat().st_mode & 0o7777) == "0o755"
    # other permission bits are the agent's answer (tasks/terminal/private-file asks for 600)
    assert oct((dst / "private").stat().st_mode & 0o7777) == "0o600"


def test_resolution_follows_the_tree_as_the_kernel_would() -> None:
    links = {"d": "x/y", "x/y": "../..", "ok": "d/../x"}
    assert not resolves_inside("d", links)
    assert resolves_inside("x/y", {"x/y": ".."})
    loop = {"a": "b", "b": "a"}
    assert not resolves_inside("a", loop)


def test_an_app_past_its_limit_stops_the_copy(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(b"x" * 5000)
    with pytest.raises(AppTooLarge, match="/app grew past"):
        freeze(src, tmp_path / "dst", max_bytes=4096)


def test_appcopy_imports_only_the_standard_library() -> None:
    """It is staged beside Harbor's plug-ins, where nothing of rsiframe can be imported."""
    import ast
    import sys

    import rsiframe.sandbox.appcopy as appcopy

    tree = ast.parse(Path(appcopy.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {x.split(".")[0] for x in names} <= set(sys.stdlib_module_names) | {"__future__"}


def test_a_file_swapped_for_a_link_or_a_fifo_is_never_opened(tmp_path: Path) -> None:
    from rsiframe.sandbox.appcopy import _open_regular, _Swapped

    os.symlink("/etc/hostname", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")  # O_NONBLOCK: the open cannot hang on it
    (tmp_path / "file").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("link", "fifo"):
            with pytest.raises(_Swapped):
                _open_regular(name, fd)
        os.close(_open_regular("file", fd))
    finally:
        os.close(fd)
