"""rsiframe.evaluators.base: Harbor's reward files read safely (reward.txt, reward.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.evaluators.base import parse_reward

# -- parse_reward --------------------------------------------------------------------------


def test_parse_reward_txt(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text(" 0.75\n")
    assert parse_reward(tmp_path) == (0.75, None)


def test_parse_reward_txt_wins_over_json(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("1")
    (tmp_path / "reward.json").write_text('{"reward": 0}')
    assert parse_reward(tmp_path) == (1.0, None)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"reward": 0.5}', 0.5),
        ('{"a": 1, "b": 0}', 0.5),
        ('{"a": 1, "b": 0, "note": "text"}', 0.5),
        ('{"reward": 0.25, "a": 1}', 0.25),
        ("0.9", 0.9),
        ("3", 3.0),
    ],
)
def test_parse_reward_json(tmp_path: Path, body: str, expected: float) -> None:
    (tmp_path / "reward.json").write_text(body)
    assert parse_reward(tmp_path) == (expected, None)


def test_parse_reward_json_without_numbers(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"note": "nothing"}')
    assert parse_reward(tmp_path) == (0.0, "reward.json holds no numeric reward")
    (tmp_path / "reward.json").write_text('["x"]')
    assert parse_reward(tmp_path) == (0.0, "reward.json holds no numeric reward")


def test_parse_reward_unreadable(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("one")
    reward, error = parse_reward(tmp_path)
    assert reward == 0.0
    assert error is not None and error.startswith("unreadable reward")
    (tmp_path / "reward.txt").unlink()
    (tmp_path / "reward.json").write_text("{broken")
    reward, error = parse_reward(tmp_path)
    assert reward == 0.0 and error is not None and error.startswith("unreadable reward")


def test_parse_reward_missing(tmp_path: Path) -> None:
    assert parse_reward(tmp_path) == (0.0, "verifier wrote no reward")
