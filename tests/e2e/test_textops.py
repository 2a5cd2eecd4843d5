"""The textops seed's calibration builds, trains, serves and scores a setting (e2e)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import TEXTOPS

pytestmark = pytest.mark.e2e


PY = sys.executable


# -- the whole seed, end to end ---------------------------------------------------------


def test_calibrate_builds_trains_serves_and_scores_a_setting(tmp_path: Path) -> None:
    """calibrate.py on a tiny trainer: data, training, loopback server, harness, verifier."""
    res = subprocess.run(
        [
            PY,
            str(TEXTOPS / "calibrate.py"),
            "--splits",
            "gate",
            "--cache",
            str(tmp_path / "cache"),
            "--set",
            "trainer.train.max_steps=40",
            "--set",
            "harness.decoding.temperature=0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    row = next(line for line in res.stdout.splitlines() if line.startswith("| trainer."))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith("%") and 0.0 <= float(cells[1][:-1]) <= 100.0
    assert cells[4] == "40"  # steps
    assert list((tmp_path / "cache").glob("model-*/model.safetensors"))
