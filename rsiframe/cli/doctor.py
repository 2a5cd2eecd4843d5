"""``rsiframe doctor [RECIPE]``: what this machine can run, one line per component.

Each check says ``ok`` or what is wrong: bubblewrap (a sandbox starts), Docker (the engine
answers, the base image is there), Harbor's own environment, Ray (importable, version) and
a GPU (``nvidia-smi``, ``torch.cuda`` in a child process so torch never loads here). With a
RECIPE, each declared model gets one tiny call through a gateway of its own (metered like a
run's: tokens and cost from the gateway's ledger), after its key variables are checked.

A check is *needed* when the recipe (or, without one, rsiframe's default path: bubblewrap)
cannot run without it; the command fails (exit 1) only when a needed check is not ok, so a
machine without Docker or a GPU is healthy for recipes that use neither.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel

from rsiframe.cli.common import friendly, print_json
from rsiframe.errors import RecipeError, RsiError


class Check(BaseModel):
    name: str
    ok: bool
    needed: bool
    detail: str
    tokens: int | None = None  # model checks: what the call cost, from the gateway's ledger
    cost_usd: float | None = None


class DoctorReport(BaseModel):
    ok: bool
    recipe: str | None
    checks: list[Check]


# -- the machine -----------------------------------------------------------------------


def check_bwrap() -> tuple[bool, str]:
    from rsiframe.sandbox.bwrap import BwrapSandbox, privilege_check

    binary = shutil.which("bwrap")
    if not binary:
        return False, "not installed (apt-get install bubblewrap)"
    try:
        caps = privilege_check(BwrapSandbox(binary))
    except RsiError as exc:
        return False, exc.message
    return True, f"runs a sandbox ({binary}, user namespace, {caps})"


def check_docker() -> tuple[bool, str]:
    from rsiframe.sandbox.docker import IMAGE

    try:
        import docker
    except ImportError:
        return False, "the docker SDK is not installed (pip install 'rsiframe[docker]')"
    try:
        client = docker.from_env(timeout=5)
        version = client.version().get("Version", "?")
    except Exception as exc:  # the SDK raises several kinds for an engine that is down
        return False, f"the engine does not answer ({type(exc).__name__})"
    try:
        client.images.get(IMAGE)
    except Exception:
        return False, (
            f"engine {version} answers; base image {IMAGE} missing "
            "(scripts/ci-setup.sh docker builds it)"
        )
    return True, f"engine {version} answers; base image {IMAGE} present"


def check_harbor() -> tuple[bool, str]:
    from rsiframe.evaluators.harbor import venv as harborenv

    try:
        py = harborenv.python(create=False)
    except RsiError:
        base = harborenv.find_python312()
        how = "`make harbor` creates it" if base else "needs Python >= 3.12 first"
        where = harborenv.venv_dir()
        return False, f"Harbor {harborenv.HARBOR_VERSION} not set up in {where} ({how})"
    found = harborenv.version_of(py)
    if found != harborenv.HARBOR_VERSION:
        return False, f"{py} imports Harbor {found or 'nothing'}, not {harborenv.HARBOR_VERSION}"
    return True, f"Harbor {found} ({py})"


def check_ray() -> tuple[bool, str]:
    from rsiframe.executors.ray_driver import import_ray

    if importlib.util.find_spec("ray") is None:
        return False, "not installed (pip install 'rsiframe[cluster]')"
    try:
        ray = import_ray()
    except Exception as exc:  # installed, but its import fails (a broken install)
        return False, f"installed but not importable: {type(exc).__name__}: {exc}"
    return True, f"ray {ray.__version__} importable"


_TORCH_CUDA = (
    "import torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
    "print(torch.__version__, n, torch.cuda.get_device_name(0) if n else '')"
)


def check_gpu() -> tuple[bool, str]:
    parts: list[str] = []
    ok = False
    smi = shutil.which("nvidia-smi")
    if smi:
        res = _run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"])
        if res is not None and res.returncode == 0 and res.stdout.strip():
            ok = True
            parts.append("nvidia-smi: " + "; ".join(res.stdout.strip().splitlines()))
        else:
            parts.append("nvidia-smi fails" + (f": {_tail(res)}" if res is not None else ""))
    else:
        parts.append("no nvidia-smi")
    if importlib.util.find_spec("torch") is not None:
        res = _run([sys.executable, "-c", _TORCH_CUDA], timeout=120)
        if res is not None and res.returncode == 0:
            version, n, name = [*res.stdout.strip().split(" ", 2), "", ""][:3]
            ok = ok or n != "0"
            sees = f"{n} CUDA device(s) ({name})" if n != "0" else "no CUDA device"
            parts.append(f"torch {version}: {sees}")
        else:
            parts.append("torch does not import" + (f": {_tail(res)}" if res is not None else ""))
    return ok, "; ".join(parts)


def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _tail(res: subprocess.CompletedProcess[str] | None) -> str:
    lines = ((res.stderr or res.stdout).strip().splitlines() if res else []) or ["no output"]
    return lines[-1][:200]


MACHINE: dict[str, Callable[[], tuple[bool, str]]] = {
    "bubblewrap": check_bwrap,
    "docker": check_docker,
    "harbor": check_harbor,
    "ray": check_ray,
    "gpu": check_gpu,
}


def needs(recipe: Any | None, evaluator_config: Any | None) -> set[str]:
    """The machine checks a recipe cannot run without (bubblewrap without a recipe)."""
    if recipe is None:
        return {"bubblewrap"}
    out: set[str] = set()
    sandbox = getattr(evaluator_config, "sandbox", "auto")
    out.add({"bwrap": "bubblewrap", "docker": "docker"}.get(sandbox, ""))
    if recipe.evaluator.engine == "harbor":
        out.add("harbor")
        environment = getattr(evaluator_config, "environment", "")
        out.add({"docker": "docker", "bwrap": "bubblewrap"}.get(environment, ""))
    if recipe.evaluator.executor.kind == "ray":
        out.add("ray")
    build = getattr(evaluator_config, "build", None)
    if getattr(getattr(build, "serve", None), "backend", "") == "vllm":
        out.add("gpu")
    return out - {""}


# -- models ----------------------------------------------------------------------------


def model_checks(
    models: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> list[Check]:
    """One tiny, metered call to each declared model through a gateway of its own (the
    check ``run`` and ``resume`` make too: :mod:`rsiframe.gateway.modelcheck`)."""
    from rsiframe.gateway.modelcheck import ping_models

    return [
        Check(
            name=f"model {p.model}",
            ok=p.ok,
            needed=True,
            detail=p.detail,
            tokens=p.tokens if p.ok else None,
            cost_usd=p.cost_usd if p.ok else None,
        )
        for p in ping_models(models, environ)
    ]


# -- the command -----------------------------------------------------------------------


def doctor(recipe_path: Path | None, environ: Mapping[str, str] | None = None) -> DoctorReport:
    recipe = evaluator_config = None
    models: dict[str, Any] = {}
    if recipe_path is not None:
        from rsiframe.recipe import load as recipe_mod
        from rsiframe.recipe.models import references

        resolved = recipe_mod.load(recipe_path)
        recipe, evaluator_config = resolved.recipe, resolved.evaluator_config
        models = dict(recipe.models)
        configs = {s: cfg.model_dump() for s, (_cls, cfg) in resolved.operators.items()}
        for loc, name in references(configs).items():
            if name not in models:
                known = ", ".join(sorted(models)) or "none (add a models: section)"
                msg = f"{loc}: unknown model {name!r}; declared: {known}"
                raise RecipeError(msg, where=str(resolved.source))
    needed = needs(recipe, evaluator_config)
    checks = []
    for name, fn in MACHINE.items():
        ok, detail = fn()
        checks.append(Check(name=name, ok=ok, needed=name in needed, detail=detail))
    checks += model_checks(models, environ)
    ok = all(c.ok or not c.needed for c in checks)
    return DoctorReport(ok=ok, recipe=str(recipe_path) if recipe_path else None, checks=checks)


def mark(c: Check) -> str:
    return "ok" if c.ok else ("FAIL" if c.needed else "--")


@click.command("doctor")
@click.argument("recipe", type=click.Path(path_type=Path), required=False)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def doctor_command(recipe: Path | None, as_json: bool) -> None:
    """What this machine can run: bubblewrap, Docker, Harbor's environment, Ray, a GPU;
    with RECIPE, one tiny metered call to each declared model. One line each: ok, or
    what is wrong (FAIL when RECIPE, or the default path without one, needs it; -- when
    not needed). Exit 0 when everything needed is ok, 1 otherwise, 2 for a bad RECIPE."""
    report = doctor(recipe)
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        for c in report.checks:
            click.echo(f"{c.name:<20} {mark(c):<4}  {c.detail}")
    if not report.ok:
        bad = [c.name for c in report.checks if c.needed and not c.ok]
        click.echo(f"rsiframe: doctor: not ok: {', '.join(bad)}", err=True)
        sys.exit(1)
