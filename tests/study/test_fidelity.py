"""`fidelity`: the seed run directly and through the framework, and the rule that
judges their agreement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.study.fidelity import ItemResult, judge
from tests.support.cli import cli
from tests.support.mini import make_mini

# -- fidelity --------------------------------------------------------------------------


def test_fidelity_passes_on_the_deterministic_mini_set(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    res = cli("fidelity", mini.recipe, "--out", tmp_path / "fid", "--json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    v = report["verdict"]
    assert v["passed"] and v["deterministic"]
    assert v["items"] == 4 and v["agree_framework_direct"] == 1.0
    assert v["mean_diff"] == 0.0
    # the seed (level 1) solves none of the gate tasks t2, t4, t6, t8
    assert {i["task"]: i["framework"] for i in report["items"]} == dict.fromkeys(
        ["t2", "t4", "t6", "t8"], 0.0
    )
    # the framework's run is a real, verifiable run stopped after the seed
    (run,) = report["runs"]
    assert cli("verify", run).exit_code == 0


def _items(triples: list[tuple[float, float, float]]) -> list[ItemResult]:
    return [
        ItemResult(repeat=0, task=f"t{i}", framework=f, direct_a=a, direct_b=b)
        for i, (f, a, b) in enumerate(triples)
    ]


def test_fidelity_rule_on_a_deterministic_set_needs_exact_agreement() -> None:
    v = judge(_items([(1, 1, 1), (0, 0, 0), (1, 0, 0)]))
    assert v.deterministic and not v.passed
    assert "framework differs on 1" in v.reason


def test_fidelity_rule_on_a_noisy_set_uses_mcnemar() -> None:
    # as noisy inside the framework as outside: passes
    same = [(1, 0, 1), (0, 1, 0), (1, 1, 1), (0, 0, 0)] * 5
    assert judge(_items(same)).passed
    # framework differs from direct on 10 items where the direct runs agree, and the
    # direct runs differ on only 1 other: b = 10, c = 1, p = 12/2048 < 0.05
    noisy = [(1, 0, 0)] * 10 + [(0, 0, 1)] + [(1, 1, 1)] * 9
    v = judge(_items(noisy))
    assert not v.deterministic and not v.passed
    assert (v.disagreement_b, v.disagreement_c) == (10, 1)
    assert v.p_more_disagreement == pytest.approx(12 / 2048)
    assert v.mean_diff == pytest.approx(0.5)
