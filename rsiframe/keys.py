"""Where a run's private signing keys live: the one rule that signing (which writes them)
and the sandbox (which masks the folder from every command) both follow."""

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
