"""rsiframe.recipe.schema: bad stages and merge settings are one line and exit 2."""

from __future__ import annotations

import pytest

from tests.support.cli import cli
from tests.support.mini import Mini

# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("evaluator.stages=[{split: trian}]", "evaluator.stages.0.split"),
        ("evaluator.stages=[{split: sealed, tasks: 2}]", "evaluator.stages.0.split"),
        ("slots.merg={operator: three_way}", "slots.merg: unknown key"),
        ("slots.mutate.rate=0.3", "slots.mutate.rate: unknown key"),
        ("slots.merge={operator: knobs}", "'knobs' is a mutate operator"),
        ("slots.validate={operator: three_way}", "'three_way' is a merge operator"),
        ("slots.merge={operator: three_way, rate: 1.5}", "slots.merge.rate"),
    ],
)
def test_bad_stages_and_merge_settings_are_one_line_exit_2(
    mini: Mini, setting: str, message: str
) -> None:
    res = cli("recipe", "check", mini.recipe, "--set", setting)
    assert res.exit_code == 2
    assert message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
