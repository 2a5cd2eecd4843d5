"""docs/reference.md names every RSI_* variable the code sets and every task.toml key read."""

from __future__ import annotations

import re

from tests.support.paths import REPO

DOC = (REPO / "docs" / "reference.md").read_text()


def test_every_rsi_variable_is_documented() -> None:
    used: set[str] = set()
    for folder in ("rsiframe", "operators"):
        for py in (REPO / folder).rglob("*.py"):
            used |= set(re.findall(r"\bRSI_[A-Z_]+[A-Z]\b", py.read_text()))
    assert used, "no RSI_ variables found: the scan is wrong"
    missing = sorted(v for v in used if f"`{v}`" not in DOC)
    assert not missing, f"docs/reference.md does not describe {missing}"


def test_task_toml_keys_are_documented() -> None:
    source = (REPO / "rsiframe" / "tasks" / "taskset.py").read_text()
    keys = set(re.findall(r'\.get\("([a-z_]+)"', source)) | set(
        re.findall(r'\["(allow_internet)"\]', source)
    )
    assert {"timeout_sec", "env", "network_mode", "allow_internet"} <= keys
    assert all(k in DOC for k in keys), sorted(k for k in keys if k not in DOC)


def test_the_knob_example_is_a_valid_space() -> None:
    import yaml

    from rsiframe.operators.knobs import KnobSpec

    block = DOC.split("## The knob space", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    knobs = [KnobSpec.model_validate(k) for k in yaml.safe_load(block)["knobs"]]
    assert len(knobs) == 2


def test_operators_describe_knobs_shows_the_space_format() -> None:
    from tests.support.cli import cli

    res = cli("operators", "describe", "knobs")
    assert res.exit_code == 0
    text = " ".join(res.stdout.split())
    assert "{file, key, range: [low, high], step}" in text
    assert "key: restarts.base, range: [10, 400], step: 10}" in text
