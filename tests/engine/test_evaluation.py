"""rsiframe.engine.evaluation: a staged evaluation's fixed subsets."""

from __future__ import annotations

from rsiframe.engine.evaluation import Stages
from rsiframe.recipe.schema import StageSpec

# -- staged evaluation ------------------------------------------------------------------


def test_stage_subsets_are_fixed_for_every_child_and_default_splits_follow() -> None:
    split = {"train": [f"t{i}" for i in range(10)], "gate": ["g1", "g2"]}
    specs = [StageSpec(split="train", tasks=3, min_score=0.5), StageSpec(split="train")]
    a, b = Stages(specs, split, 7), Stages(specs, split, 7)
    assert a.splits == ["train@1", "train", "gate"]
    assert a.task_ids("train@1") == b.task_ids("train@1")
    assert len(a.task_ids("train@1")) == 3 and set(a.task_ids("train@1")) <= set(split["train"])
    assert a.task_ids("train") == split["train"] and a.task_ids("gate") == ["g1", "g2"]
    assert Stages([], split).splits == []  # no stages: the default train, gate
    # a stage asking for at least the whole split is the split itself
    assert Stages([StageSpec(split="train", tasks=99)], split).splits == ["train", "gate"]
