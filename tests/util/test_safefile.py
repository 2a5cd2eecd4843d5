"""rsiframe.util.safefile: host-side reads of candidate files accept regular files only."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from rsiframe.util.safefile import UnsafeFile, read_regular


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            read_regular(fifo)
        except BaseException as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    assert isinstance(errors[0], UnsafeFile) and "named pipe" in str(errors[0])


def test_links_sockets_folders_and_oversized_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("secret")
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(UnsafeFile, match="symlink"):
        read_regular(tmp_path / "link")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(OSError):  # a socket cannot even be opened
            read_regular(tmp_path / "sock")
    with pytest.raises(UnsafeFile, match="a folder"):
        read_regular(tmp_path)
    with pytest.raises(UnsafeFile, match="over the 3-byte limit"):
        read_regular(tmp_path / "real", cap=3)
    assert read_regular(tmp_path / "real") == b"secret"
