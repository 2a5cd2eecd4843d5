"""The uncached base-image path of scripts/ci-setup.sh (e2e, under its own network
namespace)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.aptsources import DEB822, MIRROR
from tests.support.paths import CI_SETUP, REPO

pytestmark = pytest.mark.e2e


def test_the_uncached_base_image_builds_with_only_a_deb822_source(tmp_path: Path) -> None:
    """The path a fresh CI machine takes: no cached image, apt configured by a deb822 file
    only. Built under its own name (the shared base image is not touched) and removed."""
    engine = (
        shutil.which("docker")
        and not subprocess.run(["docker", "info"], capture_output=True).returncode
    )
    if not engine:
        if os.environ.get("RSIFRAME_REQUIRE_DOCKER"):
            raise AssertionError("RSIFRAME_REQUIRE_DOCKER is set but no Docker engine answers")
        pytest.skip("platform limit: no Docker engine here (scripts/ci-setup.sh docker starts one)")
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    real = subprocess.run(["bash", str(CI_SETUP), "mirror"], capture_output=True, text=True)
    assert real.returncode == 0, real.stderr
    (etc / "sources.list.d" / "debian.sources").write_text(
        DEB822.replace(MIRROR, real.stdout.strip())
    )
    image = "rsiframe-base:check"
    subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
    before = _task_images()
    env = {**os.environ, "RSIFRAME_APT_ETC": str(etc), "RSIFRAME_DOCKER_IMAGE": image}
    try:
        res = subprocess.run(
            ["bash", str(CI_SETUP), "docker"], capture_output=True, text=True, env=env,
            cwd=REPO, timeout=1200,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        assert "is cached" not in res.stderr
        out = subprocess.run(
            ["docker", "run", "--rm", image, "cat", "/etc/debian_version"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0 and out.stdout.startswith("12."), out.stderr
    finally:
        # the task images built FROM the check image, then the image itself
        for tag in _task_images() - before:
            subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)
        subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)


def _task_images() -> set[str]:
    out = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "rsiframe-task"],
        capture_output=True, text=True,
    )  # fmt: skip
    return set(out.stdout.split())
