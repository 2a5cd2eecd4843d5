"""The Docker sandbox keeps the bubblewrap sandbox's guarantees (needs dockerd and the base
image from ``scripts/ci-setup.sh docker``; CI sets RSIFRAME_REQUIRE_DOCKER so these run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsiframe.certs.keys import key_dir
from rsiframe.errors import EngineUnavailable
from rsiframe.sandbox.bwrap import Mount, make_sandbox


def _docker():
    try:
        return make_sandbox("docker")
    except EngineUnavailable as exc:
        if os.environ.get("RSIFRAME_REQUIRE_DOCKER"):
            raise
        pytest.skip(f"platform limit: no Docker engine with the base image here: {exc}")


@pytest.fixture(scope="module")
def docker_sb():
    return _docker()


def _run(sb, script: str, tmp_path: Path, **kw):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    cand = tmp_path / "cand"
    cand.mkdir(exist_ok=True)
    (cand / "agent.txt").write_text("candidate\n")
    m_work = Mount(work, "/app", writable=True)
    mounts = [m_work, Mount(cand, "/candidate")]
    return sb.run(
        ["sh", "-c", script], mounts=mounts, cwd=m_work, env={}, timeout=kw.pop("timeout", 30), **kw
    )


def test_runs_a_command_in_the_work_folder(docker_sb, tmp_path: Path) -> None:
    res = _run(docker_sb, "pwd; echo out > result.txt; cat /candidate/agent.txt", tmp_path)
    assert res.ok, res.stderr
    assert res.stdout.decode().split() == ["/app", "candidate"]
    assert (tmp_path / "work" / "result.txt").read_text() == "out\n"
    assert docker_sb.isolation == "docker"
    assert docker_sb.record()["image_digest"].startswith("sha256:")


def test_the_candidate_and_the_system_are_read_only(docker_sb, tmp_path: Path) -> None:
    res = _run(
        docker_sb,
        "echo x > /candidate/agent.txt || echo cand-ro; echo x > /etc/x || echo sys-ro",
        tmp_path,
    )
    assert res.stdout.decode().split() == ["cand-ro", "sys-ro"]
    assert (tmp_path / "cand" / "agent.txt").read_text() == "candidate\n"


def test_no_network_unless_granted(docker_sb, tmp_path: Path) -> None:
    res = _run(docker_sb, "ls /sys/class/net", tmp_path)
    assert res.stdout.decode().split() == ["lo"]


def test_the_key_folder_is_never_visible(docker_sb, tmp_path: Path, monkeypatch) -> None:
    keys = tmp_path / "work" / "keys"
    keys.mkdir(parents=True)
    (keys / "run.pem").write_text("PRIVATE")
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(keys))
    assert key_dir() == keys
    res = _run(docker_sb, "cat /app/keys/run.pem || echo hidden", tmp_path)
    assert "PRIVATE" not in res.stdout.decode() and "hidden" in res.stdout.decode()


def test_time_limit_kills_everything(docker_sb, tmp_path: Path) -> None:
    res = _run(docker_sb, "(setsid sleep 100 &); sleep 100", tmp_path, timeout=2)
    assert res.timed_out and res.exit_code is None and res.duration_s < 20
    # this test's containers (its folders mounted): other tests may run containers meanwhile.
    # One listing call with the mounts in it: the SDK's containers.list inspects each listed
    # container after, and one another test removed in between raised 404 (CI, 453871b)
    left = docker_sb.client.api.containers(all=True, filters={"ancestor": docker_sb.image_id})
    assert not [c for c in left if any(str(tmp_path) in m.get("Source", "") for m in c["Mounts"])]


def test_memory_and_output_limits(docker_sb, tmp_path: Path) -> None:
    hog = "python3 -c 'x = bytearray(400 << 20); print(len(x))'"
    res = _run(docker_sb, hog, tmp_path, memory_mb=128)
    assert not res.ok
    assert res.limit == "it passed its memory limit of 128 MiB"  # named, as under bwrap
    assert _run(docker_sb, "true", tmp_path, memory_mb=128).limit is None
    res = _run(docker_sb, "yes | head -c 5000000", tmp_path, output_limit=1000)
    assert len(res.stdout) == 1000 and res.truncated
    res = _run(docker_sb, "yes", tmp_path, output_cap=100_000, timeout=60)
    assert res.output_exceeded


def test_a_runs_limits_hold_in_a_container_and_a_breach_is_named(docker_sb, tmp_path: Path) -> None:
    from rsiframe.sandbox.bwrap import Limits

    # the task's pid limit, not a fixed one; reaching it ends the run and says so
    forks = "for i in $(seq 40); do sleep 20 & done; wait"
    res = _run(docker_sb, forks, tmp_path, limits=Limits(pids=16), timeout=60)
    assert res.limit == "it reached its limit of 16 processes"
    assert res.duration_s < 30  # ended by the breach, not by the time limit
    assert _run(docker_sb, "sleep 1 & sleep 1 & wait", tmp_path, limits=Limits(pids=16)).ok
    # /tmp's size and one file's size
    res = _run(docker_sb, "df -m /tmp | tail -1", tmp_path, limits=Limits(tmp_mb=64))
    assert res.stdout.split()[1] == b"64"
    res = _run(
        docker_sb,
        "head -c 3000000 /dev/zero > /app/big; ls -l /app/big",
        tmp_path,
        limits=Limits(file_mb=1),
    )
    assert (tmp_path / "work" / "big").stat().st_size == 1 << 20
    # a watched writable folder past its size ends the run, named
    grow = "i=0; while true; do i=$((i+1)); head -c 1000000 /dev/zero > /app/f$i; done"
    res = _run(
        docker_sb, grow, tmp_path, limits=Limits(watch=((tmp_path / "work", 8 << 20),)), timeout=60
    )
    assert res.limit == "work grew past 8 MiB" and not res.timed_out


def test_a_docker_engine_that_is_down_is_bad_input(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailable, match="Docker engine is not running"):
        make_sandbox("docker")


def test_a_recipe_on_docker_with_the_engine_down_stops_at_preflight(
    tmp_path: Path, monkeypatch
) -> None:
    from tests.support.cli import cli
    from tests.support.paths import REPO

    recipe = (REPO / "recipes" / "sat3-quickstart.yaml").read_text()
    (tmp_path / "r.yaml").write_text(
        recipe.replace("sandbox: auto", "sandbox: docker").replace("../", f"{REPO}/")
    )
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    res = cli("run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "rsiframe: error: the Docker engine is not running (DockerException)"
    ]
    assert not (tmp_path / "run").exists()
