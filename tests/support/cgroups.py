"""The cgroup hierarchies a test needs: their root, a skip where this host has none (a
platform limit), and a failure instead in CI (``RSIFRAME_REQUIRE_BWRAP=1``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.sandbox import cgroups


def need_cgroup(controller: str) -> Path:
    """The root of the cgroup v1 ``controller`` hierarchy, or skip (fail in CI)."""
    root = cgroups.root(controller)
    if isinstance(root, str):
        if cgroups.required():  # CI: a missing cgroup must not turn into a skip
            pytest.fail(f"RSIFRAME_REQUIRE_BWRAP is set but there is no {controller} cgroup")
        pytest.skip(f"platform limit: no cgroup v1 {controller} hierarchy here: {root}")
    return root
