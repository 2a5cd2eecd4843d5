"""Harbor's own Python environment: ``harbor==HARBOR_VERSION`` in a 3.12 venv under the cache.

Harbor needs Python >= 3.12 while rsiframe supports 3.11, so Harbor runs out of process
from its own venv (``$RSIFRAME_CACHE_DIR/harbor/harbor-<version>``), created on first
use (about 1.5 minutes, 426 MB) or by ``make harbor``. When rsiframe itself runs on >= 3.12
with that Harbor installed, its own interpreter is used. The plug-ins Harbor loads by import
path (:mod:`rsiframe.evaluators.harbor.plugins`) are staged into a folder of their own and
put on ``PYTHONPATH``, so Harbor's process imports them and nothing else of rsiframe (but the
standard-library leaf staged with them, ``STAGED_LEAVES``).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rsiframe.errors import EngineUnavailable
from rsiframe.sandbox import appcopy
from rsiframe.util.digest import sha256_bytes

HARBOR_VERSION = "0.25.0"
PLUGIN_PACKAGE = "rsiframe_inharbor"
PLUGIN_FILES = ("environment.py", "agent.py")
#: leaves of rsiframe staged beside them (standard library only): the verifier phase's copy
#: of the work folder, the same code the local engine runs (found by import, wherever it is)
STAGED_LEAVES = (appcopy,)
_READY = ".rsiframe-ready"


def cache_dir() -> Path:
    configured = os.environ.get("RSIFRAME_CACHE_DIR")
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "rsiframe"
    return root / "harbor"


def venv_dir() -> Path:
    return cache_dir() / f"harbor-{HARBOR_VERSION}"


def _own_interpreter() -> bool:
    if sys.version_info < (3, 12):
        return False
    try:
        return importlib.metadata.version("harbor") == HARBOR_VERSION
    except importlib.metadata.PackageNotFoundError:
        return False


def find_python312() -> str | None:
    """A Python >= 3.12 to build the venv from: ``$RSIFRAME_HARBOR_PYTHON``, pyenv, PATH."""
    configured = os.environ.get("RSIFRAME_HARBOR_PYTHON")
    if configured:
        return configured
    roots = [os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")]
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "versions", "3.1[2-9]*", "bin", "python")))
        if found:
            return found[0]
    for name in ("python3.12", "python3.13"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def python(create: bool = True, say: Callable[[str], None] | None = None) -> str:
    """The interpreter that runs Harbor; creates its venv on first use when ``create``."""
    if _own_interpreter():
        return sys.executable
    venv = venv_dir()
    py = venv / "bin" / "python"
    if (venv / _READY).is_file():
        return str(py)
    if not create:
        raise EngineUnavailable(
            f"Harbor {HARBOR_VERSION} is not installed; create its environment with "
            "`make harbor` or run once with network access"
        )
    return str(_create(venv, say or (lambda m: print(m, file=sys.stderr))))


def _create(venv: Path, say: Callable[[str], None]) -> Path:
    base = find_python312()
    if base is None:
        raise EngineUnavailable(
            "the harbor engine needs Python >= 3.12 for Harbor's own environment "
            "(set RSIFRAME_HARBOR_PYTHON or install one with pyenv)"
        )
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one creator; the others wait and reuse it
        if (venv / _READY).is_file():
            return venv / "bin" / "python"
        shutil.rmtree(venv, ignore_errors=True)
        say(f"rsiframe: creating Harbor {HARBOR_VERSION}'s environment in {venv} (~1.5 min)")
        steps = [
            [base, "-m", "venv", str(venv)],
            [
                str(venv / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"harbor=={HARBOR_VERSION}",
            ],
        ]
        for argv in steps:
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode != 0:
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
                raise EngineUnavailable(f"cannot create Harbor's environment: {tail[0]}")
        (venv / _READY).write_text(HARBOR_VERSION + "\n")
        say("rsiframe: Harbor's environment is ready")
    return venv / "bin" / "python"


def plugin_sources() -> dict[str, bytes]:
    here = Path(__file__).parent
    plugins = {name: (here / "plugins" / name).read_bytes() for name in PLUGIN_FILES}
    leaves = [Path(str(m.__file__)) for m in STAGED_LEAVES]
    return plugins | {f.name: f.read_bytes() for f in leaves}


def plugin_digest() -> str:
    return sha256_bytes(b"\0".join(plugin_sources().values()))


def stage_plugins(dest: Path) -> Path:
    """Copy the in-Harbor plug-ins to ``dest/rsiframe_inharbor``; returns ``dest``."""
    pkg = dest / PLUGIN_PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for name, data in plugin_sources().items():
        (pkg / name).write_bytes(data)
    return dest


def harbor_env(plugins: Path) -> dict[str, str]:
    """The environment Harbor's process starts with: no telemetry, the plug-ins importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSIFRAME_", "PYTHON"))}
    env.update({"HARBOR_TELEMETRY": "0", "PYTHONPATH": str(plugins), "PYTHONNOUSERSITE": "1"})
    return env


def version_of(py: str) -> str:
    """The Harbor version ``py`` imports (checked at preflight)."""
    with contextlib.suppress(OSError):
        res = subprocess.run(
            [py, "-c", "import importlib.metadata as m; print(m.version('harbor'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if res.returncode == 0:
            return res.stdout.strip()
    return ""
