"""A task's environment/Dockerfile built offline FROM the base image when it only adds packages.

The parsing tests need nothing; the build tests need dockerd and the base image from
``scripts/ci-setup.sh docker`` (CI sets RSIFRAME_REQUIRE_DOCKER so they cannot skip there)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rsiframe.errors import EngineUnavailable, TaskSetError
from rsiframe.sandbox.bwrap import Mount, make_sandbox
from rsiframe.sandbox.taskimage import TaskImages, packages
from tests.support.paths import TERMINAL

BASE = "rsiframe-base:bookworm"


def dockerfile(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "Dockerfile"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("FROM debian:bookworm-slim\nWORKDIR /app\nCOPY . /app\n", ()),
        (
            "FROM debian:bookworm-slim\n# tools\nRUN apt-get update && apt-get install -y "
            "--no-install-recommends jq bc \\\n    && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n",
            ("bc", "jq"),
        ),
        ("FROM debian:bookworm\nRUN DEBIAN_FRONTEND=noninteractive apt install -y zip\n", ("zip",)),
        (f"FROM {BASE}\nRUN apt-get install -y python3-yaml=6.0-3\n", ("python3-yaml=6.0-3",)),
    ],
)
def test_a_dockerfile_that_only_adds_packages_names_them(
    tmp_path: Path, text: str, want: tuple[str, ...]
) -> None:
    assert packages(dockerfile(tmp_path, text), BASE) == want


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("FROM python:3.12-slim\nWORKDIR /app\n", 1),
        ("FROM debian:bookworm-slim\nRUN curl -sSL https://x.example/install.sh | sh\n", 2),
        ("FROM debian:bookworm-slim\nRUN apt-get install -y jq && make install\n", 2),
        ("FROM debian:bookworm-slim\nENV PATH=/opt/bin:$PATH\n", 2),
        ("FROM debian:bookworm-slim\nCOPY setup.sh /etc/profile.d/\n", 2),
        ("FROM debian:bookworm-slim\nRUN apt-get install -y --allow-unauthenticated jq\n", 2),
        ("FROM debian:bookworm-slim\nRUN apt-get install -y 'jq; rm -rf /'\n", 2),
        ("FROM debian:bookworm-slim\nFROM debian:bookworm-slim\n", 2),
    ],
)
def test_a_dockerfile_that_does_more_is_one_clear_line(
    tmp_path: Path, text: str, line: int
) -> None:
    with pytest.raises(TaskSetError) as err:
        packages(dockerfile(tmp_path, text), BASE)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'Dockerfile'}: line {line}: ")
    assert "does more than add packages" in msg


def test_the_shipped_terminal_tasks_only_add_packages() -> None:
    found = {
        t.name: packages(t / "environment" / "Dockerfile", BASE)
        for t in sorted(TERMINAL.iterdir())
        if (t / "environment" / "Dockerfile").is_file()
    }
    assert len(found) == 20
    assert {k: v for k, v in found.items() if v} == {"json-extract": ("jq",), "csv-sum": ("bc",)}


def test_the_self_test_tasks_run_in_docker_as_written(tmp_path: Path) -> None:
    # `selftest integrity --sandbox docker` preflights these Dockerfiles like any task set
    from rsiframe.selftest.experiment import build

    exp = build(tmp_path / "exp", seed=1)
    files = sorted(exp.tasks.glob("*/environment/Dockerfile"))
    assert files
    assert all(packages(f, BASE) == () for f in files)


# -- with the real Docker engine ------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_sb():
    try:
        return make_sandbox("docker")
    except EngineUnavailable as exc:
        if os.environ.get("RSIFRAME_REQUIRE_DOCKER"):
            raise
        pytest.skip(f"platform limit: no Docker engine with the base image here: {exc}")


def _which(sb, tool: str, tmp_path: Path) -> str:
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    m = Mount(work, "/app", writable=True)
    res = sb.run(
        ["sh", "-c", f"command -v {tool} || echo none"], mounts=[m], cwd=m, env={}, timeout=60
    )
    return res.stdout.decode().strip()


def test_a_task_image_adds_its_packages_and_is_reused(docker_sb, tmp_path: Path) -> None:
    images = TaskImages(docker_sb)
    sb = images.for_task("json-extract", TERMINAL / "json-extract")
    assert sb is not docker_sb and sb.isolation == "docker"
    built = images.built["json-extract"]
    assert built.packages == ("jq",) and built.image_id.startswith("sha256:")
    assert sb.record()["image_digest"] == built.image_id
    assert _which(sb, "jq", tmp_path) == "/usr/bin/jq"
    assert _which(docker_sb, "jq", tmp_path) == "none"  # the base image has no jq
    # a task that adds nothing runs in the base image; a second evaluator reuses the tag
    assert images.for_task("hello-file", TERMINAL / "hello-file") is docker_sb
    again = TaskImages(docker_sb)
    again.for_task("json-extract", TERMINAL / "json-extract")
    assert again.built["json-extract"].image_id == built.image_id
    assert images.record() == {"json-extract": built.record()}


def test_an_evaluation_in_docker_runs_the_oracle_in_the_task_image(
    docker_sb, tmp_path: Path
) -> None:
    from rsiframe.evaluators.local import LocalEngine
    from rsiframe.recipe.evaluator import LocalEngineConfig
    from rsiframe.tasks.taskset import TaskSet

    root = tmp_path / "set"
    for name in ("json-extract", "csv-sum", "hello-file"):
        shutil.copytree(TERMINAL / name, root / name)
    tasks = TaskSet.load(root)
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "run.sh").write_text('#!/bin/bash\nexec bash "$RSI_TASK_SOLUTION"\n')
    config = LocalEngineConfig.model_validate(
        {"agent": "bash /candidate/oracle.sh", "sandbox": "docker", "concurrency": 2}
    )
    cand = tmp_path / "cand"
    cand.mkdir()
    # the oracle as a candidate: each task's own solve.sh, found by the task id
    lines = ["#!/bin/bash", 'case "$RSI_TASK_ID" in']
    for name in ("json-extract", "csv-sum", "hello-file"):
        body = (root / name / "solution" / "solve.sh").read_text().replace("'", "'\\''")
        lines.append(f"  {name}) bash -c '{body}' ;;")
    lines.append("esac")
    (cand / "oracle.sh").write_text("\n".join(lines) + "\n")
    (tmp_path / "work").mkdir()
    engine = LocalEngine(config, tmp_path / "work")
    try:
        out = engine.run(cand, [tasks.tasks[t] for t in sorted(tasks.tasks)], lambda b: "")
    finally:
        engine.close()
    assert {t: r.reward for t, r in out.runs.items()} == {
        "csv-sum": 1.0,
        "hello-file": 1.0,
        "json-extract": 1.0,
    }, {t: r.error for t, r in out.runs.items()}
    image = out.runs["json-extract"].trajectory["image"]
    assert image["isolation"] == "docker" and image["packages"] == ["jq"]
    assert "image" not in out.runs["hello-file"].trajectory
    part = engine.record_part()
    assert part is not None and part["isolation"] == "docker"
    assert part["task_images"]["json-extract"]["image_digest"] == image["image_digest"]
    assert set(part["task_images"]) == {"csv-sum", "json-extract"}


def test_a_docker_recipe_whose_task_does_more_stops_at_preflight(docker_sb, tmp_path: Path) -> None:
    import yaml

    from tests.support.cli import cli
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "proj", sandbox="docker")
    root = mini.root / "set"
    for name in ("hello-file", "json-extract", "csv-sum"):
        shutil.copytree(TERMINAL / name, root / name)
    bad = root / "csv-sum" / "environment" / "Dockerfile"
    bad.write_text("FROM debian:bookworm-slim\nRUN pip install numpy\n")
    data = yaml.safe_load(mini.recipe.read_text())
    data["tasks"] = {
        "path": "set",
        "split": {"train": ["hello-file"], "gate": ["json-extract"], "sealed": ["csv-sum"]},
    }
    mini.recipe.write_text(yaml.safe_dump(data))
    res = cli("run", str(mini.recipe), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "csv-sum/environment/Dockerfile: line 2: 'RUN pip install numpy' does more" in lines[0]
    assert not (tmp_path / "run").exists()
