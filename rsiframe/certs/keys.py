"""Where a run's private signing keys live: the one rule that signing (which writes them)
and the sandbox (which masks the folder from every command) both follow; and the folders
no privileged sandbox may ever mount (the key folder, a live run's folder)."""

from __future__ import annotations

import os
from pathlib import Path


def key_dir() -> Path:
    """``$RSIFRAME_KEY_DIR``, else ``$XDG_DATA_HOME/rsiframe/keys``, else
    ``~/.local/share/rsiframe/keys``."""
    explicit = os.environ.get("RSIFRAME_KEY_DIR")
    if explicit:
        return Path(explicit)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "rsiframe" / "keys"


#: live run folders (their scratch ``work/`` aside) no privileged sandbox may mount
_protected: dict[str, str | None] = {}


def protect(folder: Path, scratch: Path | None = None) -> None:
    """Name a folder a ``setup_root`` sandbox must never mount, nor anything inside it but
    ``scratch`` (the run folder and its ``work/``; the key folder is always protected)."""
    _protected[os.path.realpath(folder)] = os.path.realpath(scratch) if scratch else None


def protected_folders() -> dict[str, str | None]:
    r"""``{folder: scratch inside it, or None}``: the key folder and every :func:`protect`\ ed
    folder, as real paths."""
    return {os.path.realpath(key_dir()): None, **_protected}
