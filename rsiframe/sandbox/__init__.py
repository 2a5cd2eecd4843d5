"""Where candidate and operator code runs: bubblewrap and the plain-process fallback behind
one :class:`Sandbox` interface (bwrap.py), Docker containers (docker.py), per-command
cgroups, the verifier's sanitised copy of /app, mount points, and per-task Docker images.

``rsiframe.sandbox`` is also a public import path for operators: the names below.
"""

from rsiframe.sandbox.bwrap import (
    Limits,
    Mount,
    ProcResult,
    Sandbox,
    SandboxOptions,
    make_sandbox,
)

__all__ = ["Limits", "Mount", "ProcResult", "Sandbox", "SandboxOptions", "make_sandbox"]
