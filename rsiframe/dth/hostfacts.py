"""The host facts that decide a trained model's numerics: one list, read without torch.

CPU training and generation are bit-for-bit repeatable for a fixed config on one host
type, but not across processors, torch builds, BLAS libraries, kernel paths or thread
counts. The kernel path is torch's CPU capability (``ATEN_CPU_CAPABILITY``: ``default``,
``avx2``, ``avx512``; by default the best the CPU has) and the ISA its BLAS and oneDNN
use: :data:`KERNEL_ENV` names the variables that choose them, which the build steps and
the model server get from the host (so one host can emulate an older processor). These
facts key the build cache (a model built under other numerics is never reused), go into
every D/T/H build record, and are what ``verify --reproduce`` compares when a reward moves
more than its tolerance. Everything here is read from files (``/proc/cpuinfo``, torch's
``version.py`` and ``ATen/Config.h``), never by importing torch (seconds per process).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
from functools import cache
from pathlib import Path
from typing import Any

#: every fact, in the order records show them; :func:`host_facts` returns exactly these
FACTS = (
    "machine",
    "cpu_model",
    "cpu_flags",
    "cpu_capability",
    "kernel_env",
    "torch",
    "blas",
    "threads",
)

#: host variables that choose CPU kernel paths: passed into the build steps and the model
#: server when the host sets them, and recorded (``kernel_env``)
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
)

#: instruction-set flags whose presence changes which kernels torch and its BLAS pick
NUMERIC_FLAGS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
)


def _cpu() -> tuple[str, list[str]]:
    model, flags = "", set()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features"):
            flags |= set(value.split())
    return model or platform.processor() or "unknown", [f for f in NUMERIC_FLAGS if f in flags]


def _torch() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """torch's version and build, and its BLAS/OpenMP configuration, from its files."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    root = Path(next(iter(spec.submodule_search_locations)))
    build: dict[str, Any] = {}
    try:
        for m in re.finditer(
            r"^(\w+)\s*(?::[^=]*)?=\s*(.+)$", (root / "version.py").read_text(), re.M
        ):
            if m.group(1) in ("__version__", "git_version", "cuda", "hip", "debug"):
                build[m.group(1).strip("_")] = m.group(2).strip().strip("'\"")
    except OSError:
        pass
    blas: dict[str, Any] = {}
    try:
        config = (root / "include" / "ATen" / "Config.h").read_text()
        for m in re.finditer(r"#define AT_(\w+)\(\) (\d+)", config):
            blas[m.group(1).lower()] = int(m.group(2))
    except OSError:
        pass
    libs = root / "lib"
    if libs.is_dir():
        pattern = re.compile(r"lib(gomp|iomp5|omp|mkl\w*|openblas\w*|blis\w*)\.so")
        blas["bundled"] = sorted(
            {hit.group(1) for p in libs.iterdir() if (hit := pattern.match(p.name))}
        )
    return build or None, blas or None


@cache
def _static() -> dict[str, Any]:
    model, flags = _cpu()
    torch, blas = _torch()
    return {
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_flags": flags,
        "torch": torch,
        "blas": blas,
    }


def kernel_env() -> dict[str, str]:
    """The :data:`KERNEL_ENV` variables this host sets (read now, not cached)."""
    return {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}


def cpu_capability(machine: str, flags: list[str], requested: str | None) -> str | None:
    """The kernel path torch's CPU dispatch takes (its ``get_cpu_capability()``, lower
    case), worked out as torch does: a valid ``ATEN_CPU_CAPABILITY`` wins, else the best
    the CPU has. None where torch has other capabilities (not x86)."""
    if machine not in ("x86_64", "AMD64", "i686"):
        return requested or None
    if requested in ("default", "avx2", "avx512"):
        return requested
    have = set(flags)
    if {"avx512vl", "avx512bw", "avx512dq", "fma"} <= have:
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= have else "default"


def host_facts(threads: int) -> dict[str, Any]:
    """The facts of this host (:data:`FACTS`) for a step or server run with ``threads``
    under this process's :func:`kernel_env`."""
    static, env = _static(), kernel_env()
    capability = cpu_capability(
        static["machine"], static["cpu_flags"], env.get("ATEN_CPU_CAPABILITY")
    )
    facts = {**static, "cpu_capability": capability, "kernel_env": env, "threads": threads}
    return {f: facts[f] for f in FACTS}


def describe(name: str, recorded: Any, here: Any) -> str:
    """One fact's difference in a few words: both values, or the keys or flags that differ."""
    if isinstance(recorded, dict) and isinstance(here, dict):
        keys = sorted(k for k in {*recorded, *here} if recorded.get(k) != here.get(k))
        parts = [f"{k}={recorded.get(k, '-')}/{here.get(k, '-')}" for k in keys]
        return f"{name} (record/here: {', '.join(parts)})"
    if isinstance(recorded, list) and isinstance(here, list):
        only_rec = [f for f in recorded if f not in here]
        only_here = [f for f in here if f not in recorded]
        return f"{name} (only in the record: {only_rec or '-'}; only here: {only_here or '-'})"
    return f"{name} (record {recorded!r}, here {here!r})"


def differing(recorded: dict[str, Any] | None, here: dict[str, Any]) -> list[str]:
    """The names of the facts that differ between a record and this host (all of them when
    the record has none)."""
    if not recorded:
        return list(FACTS)
    return [f for f in FACTS if recorded.get(f) != here.get(f)]
