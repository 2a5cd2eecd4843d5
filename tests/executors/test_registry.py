"""rsiframe.executors.registry: bad executor keys, an address that does not answer, the
ray extra missing, and which engines an executor runs; all before a run folder exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rsiframe.recipe.executor import ExecutorSpec
from tests.support.cli import cli
from tests.support.mini import Mini, make_mini


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("evaluator.executor.kind", "slurm", "evaluator.executor.kind"),
        ("evaluator.executor.address", "not an address", "evaluator.executor.address"),
        ("evaluator.executor.resources.build.num_gpus", "-1", "resources.build.num_gpus"),
        ("evaluator.executor.workers", "3", "evaluator.executor.workers: unknown key"),
    ],
)
def test_bad_executor_keys_are_one_line_naming_the_key(
    mini: Mini, key: str, value: str, message: str
) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--set", f"{key}={value}")
    assert res.exit_code == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_an_address_that_does_not_answer_is_bad_input_and_leaves_no_folder(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--ray-address", "127.0.0.1:1")
    assert res.exit_code == 2
    assert res.stderr.startswith("rsiframe: error: --ray-address: no Ray cluster answers at")
    assert not out.exists()
    res = cli(
        "run", mini.recipe, "--out", out, "--set", "evaluator.executor.kind=ray",
        "--set", "evaluator.executor.address=ray://127.0.0.1:1",
    )  # fmt: skip
    assert res.exit_code == 2 and "evaluator.executor.address: no Ray cluster" in res.stderr
    assert not out.exists()
    assert cli("run", mini.recipe, "--out", out, "--ray-address", "nowhere").exit_code == 2
    assert not out.exists()


def test_ray_without_the_extra_is_bad_input(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    out = mini.run_dir()
    # the cluster extra missing, as Python sees it: `import ray` fails
    code = "import sys; sys.modules['ray'] = None; from rsiframe.cli.main import main; main()"
    for flags in (["--ray-address", "auto"], ["--set", "evaluator.executor.kind=ray"]):
        res = subprocess.run(
            [sys.executable, "-c", code, "run", str(mini.recipe), "--out", str(out), *flags],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2, res.stderr
        line = res.stderr.strip()
        assert "rsiframe[cluster]" in line and "Traceback" not in line
        assert line.split(":")[2].strip() in ("--ray-address", "evaluator.executor.kind")
        assert not out.exists()


def test_resume_with_an_address_that_does_not_answer_changes_nothing(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    before = (out / "events.jsonl").read_bytes()
    res = cli("resume", out, "--retry-failed", "--ray-address", "127.0.0.1:1")
    assert res.exit_code == 2
    assert res.stderr.startswith("rsiframe: error: --ray-address: no Ray cluster answers")
    assert (out / "events.jsonl").read_bytes() == before


def test_the_ray_executor_runs_only_the_local_engine() -> None:
    from rsiframe.errors import ClusterError
    from rsiframe.executors.registry import check

    with pytest.raises(ClusterError, match="runs the local engine, not 'harbor'"):
        check(ExecutorSpec(kind="ray"), "evaluator.executor", "harbor")
    check(ExecutorSpec(), "evaluator.executor", "harbor")  # local: any engine
