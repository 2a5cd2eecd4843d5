"""The host facts that decide numerics: one list, read without torch, compared by name."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest

from rsiframe.dth.hostfacts import (
    FACTS,
    KERNEL_ENV,
    cpu_capability,
    describe,
    differing,
    host_facts,
)


def test_the_facts_are_exactly_the_list_and_need_no_torch_import() -> None:
    had_torch = "torch" in sys.modules
    facts = host_facts(3)
    assert tuple(facts) == FACTS and facts["threads"] == 3
    assert facts["cpu_model"] and facts["machine"]
    if facts["torch"] is not None:  # read from torch's files: version, git commit, BLAS
        assert facts["torch"]["version"] and facts["blas"]
    assert ("torch" in sys.modules) == had_torch


def test_differing_names_the_facts_that_moved() -> None:
    here = host_facts(1)
    assert differing(here, here) == []
    other = {**here, "cpu_model": "Some Other CPU", "threads": 4}
    assert differing(other, here) == ["cpu_model", "threads"]
    assert differing(None, here) == list(FACTS)  # a record without facts: nothing is known


def test_the_kernel_path_in_effect_is_worked_out_as_torch_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    avx512 = ["avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl"]
    assert cpu_capability("x86_64", avx512, None) == "avx512"
    assert cpu_capability("x86_64", ["avx2", "fma"], None) == "avx2"
    assert cpu_capability("x86_64", ["sse4_2"], None) == "default"
    assert cpu_capability("x86_64", avx512, "avx2") == "avx2"  # a valid request wins
    assert cpu_capability("x86_64", avx512, "bogus") == "avx512"  # torch ignores it
    for k in KERNEL_ENV:
        monkeypatch.delenv(k, raising=False)
    native = host_facts(1)
    assert native["kernel_env"] == {}
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "SSE4_2")
    emulated = host_facts(1)  # read now, not cached
    assert emulated["cpu_capability"] == ("default" if native["cpu_capability"] else None)
    assert emulated["kernel_env"] == {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    }
    assert "kernel_env" in differing(native, emulated)


@pytest.mark.skipif(
    platform.machine() != "x86_64" or importlib.util.find_spec("torch") is None,
    reason="torch's CPU capabilities are x86 ones; needs torch",
)
def test_the_capability_we_work_out_is_the_one_torch_reports() -> None:
    for requested in (None, "default", "avx2"):
        env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV}
        if requested:
            env["ATEN_CPU_CAPABILITY"] = requested
        code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
        got = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        facts = subprocess.run(
            [
                sys.executable,
                "-c",
                "import json, rsiframe.dth.hostfacts as h; print(json.dumps(h.host_facts(1)))",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(facts)["cpu_capability"] == got.lower(), (requested, got)


def test_a_difference_is_described_with_both_values() -> None:
    assert describe("threads", 1, 2) == "threads (record 1, here 2)"
    text = describe("kernel_env", {"ATEN_CPU_CAPABILITY": "default"}, {})
    assert text == "kernel_env (record/here: ATEN_CPU_CAPABILITY=default/-)"
    assert "only in the record: ['avx512f']" in describe("cpu_flags", ["avx2", "avx512f"], ["avx2"])
