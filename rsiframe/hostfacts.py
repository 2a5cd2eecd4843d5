"""The host facts that decide a trained model's numerics: one list, read without torch.

CPU training and generation are bit-for-bit repeatable for a fixed config on one host
type, but not across processors, torch builds, BLAS libraries or thread counts. These
facts key the build cache (a model built under other numerics is never reused), go into
every D/T/H build record, and are what ``verify --reproduce`` compares when a reward moves
more than its tolerance. Everything here is read from files (``/proc/cpuinfo``, torch's
``version.py`` and ``ATen/Config.h``), never by importing torch (seconds per process).
"""

from __future__ import annotations

import importlib.util
import platform
import re
from functools import cache
from pathlib import Path
from typing import Any

#: every fact, in the order records show them; :func:`host_facts` returns exactly these
FACTS = ("machine", "cpu_model", "cpu_flags", "torch", "blas", "threads")

#: instruction-set flags whose presence changes which kernels torch and its BLAS pick
NUMERIC_FLAGS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
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
            {m.group(1) for p in libs.iterdir() if (m := pattern.match(p.name))}
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


def host_facts(threads: int) -> dict[str, Any]:
    """The facts of this host (:data:`FACTS`) for a step or server run with ``threads``."""
    return {**_static(), "threads": threads}


def differing(recorded: dict[str, Any] | None, here: dict[str, Any]) -> list[str]:
    """The names of the facts that differ between a record and this host (all of them when
    the record has none)."""
    if not recorded:
        return list(FACTS)
    return [f for f in FACTS if recorded.get(f) != here.get(f)]
