"""rsiframe.recipe.evaluator: each engine's config and the one table of engines; a task's
own limits override the recipe's key by key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rsiframe.recipe.evaluator import (
    ENGINES,
    HarborEngineConfig,
    LocalEngineConfig,
    TaskLimits,
)
from rsiframe.tasks.taskset import Task


def test_the_engine_table_names_each_engine_once_with_its_config() -> None:
    assert set(ENGINES) == {"local", "harbor"}
    assert ENGINES["local"].config is LocalEngineConfig and ENGINES["local"].install is None
    assert ENGINES["harbor"].install and "harbor" in ENGINES["harbor"].install
    assert isinstance(ENGINES["local"].config.model_validate({"agent": "true"}), LocalEngineConfig)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"agent": "x", "sandbox": "chroot"}, "sandbox"),
        ({"agent": "x", "concurrency": 0}, "concurrency"),
        ({"agent": "x", "agnet_timeout_s": 5}, "agnet_timeout_s"),
        ({"agent": "x", "limits": {"pids": -1}}, "limits.pids"),
        ({"agent": "x", "model": "m", "build": {}}, "a D/T/H build serves"),
    ],
)
def test_bad_local_configs_are_refused(config: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        LocalEngineConfig.model_validate(config)
    assert field.split(".")[-1] in str(info.value)


def test_a_harbor_config_has_exactly_one_agent() -> None:
    assert HarborEngineConfig(agent="python3 agent.py").agent == "python3 agent.py"
    with pytest.raises(ValidationError, match="exactly one"):
        HarborEngineConfig(agent="x", harbor_agent="oracle")


def test_a_tasks_own_limits_override_the_recipes_key_by_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = Task("t1", tmp_path, "", 10.0, 10.0, False, False, limits={"pids": 64})
    limits = TaskLimits(memory_mb=1024).of(task)
    assert (limits.memory_mb, limits.pids, limits.tmp_mb) == (1024, 64, 512)
