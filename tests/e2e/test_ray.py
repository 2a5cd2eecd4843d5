"""A D/T/H seed built, served and certified on a Ray worker (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli, events
from tests.support.ray import RAY, certified

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]


ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")


def test_a_dth_seed_builds_serves_and_is_certified_on_a_worker(
    tmp_path: Path, local_ray: Path
) -> None:
    from tests.support.dth import recipe, write_seed, write_tasks

    write_tasks(tmp_path / "tasks")
    write_seed(tmp_path / "seed")
    (tmp_path / "recipe.yaml").write_text(recipe())
    out = tmp_path / "run"
    only_seed = ["--set", "budget.max_generations=0"]
    res = cli("run", tmp_path / "recipe.yaml", "--out", out, "--quiet", *only_seed, *RAY)
    assert res.exit_code == 0, res.stderr
    preds = certified(out)
    assert {p["split"] for p in preds} == {"train", "gate", "sealed"}
    for p in preds:  # the model identity came back from the worker, with its tokens
        assert p["executor"]["kind"] == "ray"
        assert p["model"]["model_digest"] and p["model"]["tokens"]["total_tokens"] > 0
        # the build was a Ray task of its own; the record names its node too
        assert p["executor"]["build"]["node"] and p["executor"]["build"]["pid"]
    assert len({p["model"]["model_digest"] for p in preds}) == 1
    # the evaluation task served the model the build task shipped, checked on arrival
    digest = preds[0]["model"]["model_digest"].removeprefix("sha256:")[:32]
    shipped = local_ray / "cache" / "builds" / "train" / f"shipped-{digest}"
    assert (shipped / "model.safetensors").is_file()
    kinds = [e["type"] for e in events(out)]
    assert kinds.count("model_built") == 3 and "usage" in kinds
    assert cli("verify", out).exit_code == 0
