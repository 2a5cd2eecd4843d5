"""Information flow: what each slot may read, enforced by the view, violations on record."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.api import INFORMATION, InformationFlowError
from rsiframe.archive.loader import load_run
from rsiframe.engine.loop import Engine
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini


def _driven(mini: Mini, *sets: str) -> Engine:
    engine = Engine.create(
        mini.recipe,
        ["budget.max_generations=1", "children_per_generation=1", *sets],
        mini.run_dir(),
    )
    engine.drive()
    return engine


def test_the_view_refuses_and_records(mini: Mini) -> None:
    engine = _driven(mini)
    try:
        seed = engine.state.candidates["c0000"]
        gate_traj = next(iter(seed.record("gate").predicate.trajectories.values()))
        train_traj = next(iter(seed.record("train").predicate.trajectories.values()))
        with engine.view.calling("mutate", "knobs", "c0009") as view:
            assert view.score("c0000", "gate") == 0.0
            assert view.rewards("c0000", "train") is not None
            assert view.trajectories("c0000")
            assert view.artifact(train_traj)
            for read in (
                lambda: view.score("c0000", "sealed"),
                lambda: view.rewards("c0000", "gate"),
                lambda: view.rewards("c0000", "sealed"),
                lambda: view.trajectories("c0000", "gate"),
                lambda: view.artifact(gate_traj),
            ):
                with pytest.raises(InformationFlowError, match="the mutate operator may not read"):
                    read()
        assert engine.view.slot is None  # the binding ends with the call
    finally:
        engine.close()
    recorded = [e for e in events(mini.run_dir()) if e["type"] == "information_flow_violation"]
    assert [e["data"]["asked"] for e in recorded] == [
        "scores:sealed",
        "rewards:gate",
        "rewards:sealed",
        "trajectories:gate",
        "artifact",
    ]
    assert all(
        e["data"]["slot"] == "mutate"
        and e["data"]["operator"] == "knobs"
        and e["data"]["candidate"] == "c0009"
        for e in recorded
    )
    assert "information.gate_detail" in recorded[1]["data"]["detail"]
    # signed and chained like every event; shown by status
    loaded = load_run(mini.run_dir(), every_signature=True)
    assert loaded.state.problems == []
    assert len(loaded.state.violations) == 5
    st = status_json(mini.run_dir())
    assert [v["asked"] for v in st["violations"]] == [e["data"]["asked"] for e in recorded]
    text = cli("status", mini.run_dir()).stdout
    assert "information-flow violation: mutate operator knobs (c0009) asked for sealed" in text


def test_gate_detail_opens_per_task_gate_rewards_only(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    engine = _driven(mini, "information.gate_detail=true")
    try:
        with engine.view.calling("select", "best", "c0009") as view:
            assert view.rewards("c0000", "gate") == {"t2": 0.0, "t4": 0.0, "t6": 0.0, "t8": 0.0}
            with pytest.raises(InformationFlowError):
                view.score("c0000", "sealed")
            with pytest.raises(InformationFlowError):
                view.trajectories("c0000", "gate")
    finally:
        engine.close()
    assert engine.resolved.data["information"] == {"gate_detail": True}


PEEKER = """
from rsiframe.api import InformationFlowError, MutateOperator, Mutation

class Peek(MutateOperator):
    def mutate(self, ctx):
        try:
            ctx.run.score(ctx.parent.id, "sealed")
        except InformationFlowError:
            pass  # swallowed: the attempt is on record all the same
        text = (ctx.workdir / "config.yaml").read_text().replace("level: 1", "level: 2")
        (ctx.workdir / "config.yaml").write_text(text)
        return Mutation(description="peeked")
"""


def _set_mutator(mini: Mini, ref: str) -> None:
    text = mini.recipe.read_text()
    start = text.index("  mutate:\n")
    end = text.index("  novelty:")
    mini.recipe.write_text(text[:start] + f'  mutate: {{operator: "{ref}"}}\n' + text[end:])


def test_a_swallowed_violation_is_still_recorded(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    (mini.root / "peek.py").write_text(PEEKER)
    _set_mutator(mini, "peek.py:Peek")
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet")
    assert res.exit_code == 0, res.stderr
    st = status_json(mini.run_dir())
    assert st["candidates"][1]["description"] == "peeked"
    (v,) = st["violations"]
    assert v["slot"] == "mutate" and v["candidate"] == "c0001" and v["asked"] == "scores:sealed"
    assert v["operator"].endswith("peek.py:Peek")


@pytest.mark.skipif(not bwrap_works(), reason="platform limit: bubblewrap does not work here")
def test_the_same_rules_hold_for_untrusted_operators(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    (mini.seed / "ops").mkdir()
    (mini.seed / "ops" / "peek.py").write_text(PEEKER)
    _set_mutator(mini, "candidate:ops/peek.py:Peek")
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet")
    assert res.exit_code == 0, res.stderr
    st = status_json(mini.run_dir())
    assert st["candidates"][1]["description"] == "peeked"
    (v,) = st["violations"]
    assert v["slot"] == "mutate" and v["candidate"] == "c0001" and v["asked"] == "scores:sealed"
    assert v["operator"] == "candidate:ops/peek.py:Peek"
    assert "reported by the sandboxed operator" in v["detail"]


def test_operators_describe_shows_what_a_slot_may_read() -> None:
    import json

    res = cli("operators", "describe", "mutate.script", "--json")
    assert res.exit_code == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["reads"] == sorted(INFORMATION["mutate"])
    assert not any(r.endswith(":sealed") for r in info["reads"])
    assert info["reads_with_gate_detail"] == ["rewards:gate"]
    assert {f["name"]: f["default"] for f in info["fields"]}["network"] == {"allow": []}
    text = cli("operators", "describe", "gate.threshold").stdout
    assert "sealed results never" in text


def test_a_gate_grant_opens_gate_rewards_for_that_gate_only(mini: Mini) -> None:
    engine = _driven(mini, "slots.gate.operator=paired_test")
    try:
        grants = frozenset({"rewards:gate"})
        with engine.view.calling("gate", "paired_test", "c0001", grants) as view:
            assert view.rewards("c0000", "gate") is not None
            with pytest.raises(InformationFlowError):
                view.rewards("c0000", "sealed")
        with (
            engine.view.calling("select", "best", "c0002", grants) as view,
            pytest.raises(InformationFlowError),
        ):
            view.rewards("c0000", "gate")
        assert engine.view.grants == frozenset()
        child = engine.state.candidates["c0001"]
        assert child.decision is not None and "p=" in child.decision["reason"]
    finally:
        engine.close()


class _CountedScans(dict):  # type: ignore[type-arg]
    """The state's candidates, counting full scans (``values()``)."""

    scans = 0

    def values(self):  # type: ignore[no-untyped-def]
        _CountedScans.scans += 1
        return super().values()


def test_artifact_reads_between_events_do_not_rescan_the_run(tmp_path: Path) -> None:
    """The artifacts an operator may read are worked out once per change of the run (a
    record, a candidate, lessons, a rollout or an analysis), not by a scan of every
    candidate per read (#29); a new rollout is visible at the next read."""
    from rsiframe.archive import events as E
    from rsiframe.slots.runview import StateView
    from tests.support.runlog import SignedRun

    run = SignedRun(tmp_path / "run")
    run.seed()
    for i in range(1, 21):
        run.child(f"c{i:04d}")
    run.propose("c0021", "c0001", 1)
    run.emit(E.RolloutDone(id="c0001", rollout="a" * 64))
    st = run.state
    st.candidates = _CountedScans(st.candidates)
    view = StateView(st, None, tmp_path / "run")  # type: ignore[arg-type]
    with view.calling("mutate", "unit", "c0021"):
        first = view._visible_artifacts()
        scans = _CountedScans.scans
        for _ in range(5):
            assert view._visible_artifacts() == first
        assert _CountedScans.scans == scans  # five reads, no scan
        assert "a" * 64 in first
        run.emit(E.RolloutDone(id="c0002", rollout="b" * 64))
        assert "b" * 64 in view._visible_artifacts()
        assert _CountedScans.scans == scans + 1
