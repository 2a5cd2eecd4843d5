"""The command validate operator."""

from __future__ import annotations

import random
from pathlib import Path

from rsiframe.api import (
    ValidateContext,
)
from rsiframe.operators.validate import Command, CommandConfig
from tests.support.runview import FakeRun, cand


def test_validate_command(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("")
    vctx = ValidateContext(
        FakeRun([cand("c0")], {}), random.Random(0), 1, "c9", cand("c0"), tmp_path, []
    )
    assert Command(CommandConfig(command="test -f ok")).validate(vctx).ok
    bad = Command(CommandConfig(command=["sh", "-c", "echo broken >&2; exit 1"])).validate(vctx)
    assert not bad.ok and "exited with 1" in bad.reason and "broken" in bad.output
