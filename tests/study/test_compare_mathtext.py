"""``compare --png/--html`` draws names as they are: a run named ``x[$\\foo$]`` (allowed by
the name rule) used to fail the plot with a matplotlib mathtext error (issue 20, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.study.compare import Comparison, CurvePoint, Method, RunData
from rsiframe.study.compare_html import look, plain, plot_png, render_html, write_pngs
from rsiframe.study.stats import Estimate

NAMES = ["x[$\\foo$]", "a$b$c", "$", "$$", "cost $5 and $6", "\\$x$"]


def _report(name: str) -> Comparison:
    curve = [CurvePoint(1, 0.0, 0.25, 2), CurvePoint(3, 0.5, 0.75, 6)]
    run = RunData(
        path=Path("/runs") / name,
        run_id="r1",
        name=name,
        state="finished",
        random_seed=0,
        method=name,
        taskset_fingerprint="t",
        evaluator_fingerprint="e",
        champion="c0001",
        scores={"train": 0.5, "gate": 0.75, "sealed": 0.5},
        rewards={},
        seed_rewards={},
        evaluations=3,
        tokens=100,
        cost=0.5,
        wall_s=1.0,
        records=3,
        task_runs=6,
        curve=curve,
    )
    est = Estimate(0.5, 0.4, 0.6, 1)
    scores = {"train": est, "gate": est, "sealed": est}
    return Comparison([Method(name, "d", [run], scores, "tasks")], [], [], "method")


def test_a_run_named_with_mathtext_is_plotted_and_written(tmp_path: Path) -> None:
    report = _report("x[$\\foo$]")  # the review's name
    assert [p.name for p in write_pngs(report, tmp_path / "png")] == [
        "best-gate-vs-evaluations.png",
        "best-gate-vs-task-runs.png",
        "best-gate-vs-cost.png",
    ]
    assert "<img" in render_html(report)


@pytest.mark.parametrize("name", NAMES[1:])
def test_other_dollar_signs_are_drawn_as_they_are(name: str) -> None:
    assert plot_png(_report(name), "evaluations").startswith(b"\x89PNG")


def test_plain_escapes_every_dollar_sign() -> None:
    from matplotlib.text import Text

    for name in NAMES:
        escaped = plain(name)
        assert escaped.count("$") == escaped.count("\\$")  # none left for mathtext
        assert not Text(text=escaped)._preprocess_math(escaped)[1]  # not parsed as math


def test_no_two_of_32_methods_are_drawn_alike() -> None:
    """Ten methods (the pyfix grid) drew the 1st and the 9th in the same colour and style."""
    looks = [look(i) for i in range(32)]
    assert len(set(looks)) == 32
