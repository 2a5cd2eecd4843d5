"""Broken setups are loud: a wrong agent path or a verifier without a reward stops the run
with the reason, counts by reason reach status and the summary; the agent's /app output is
kept as evidence."""

from __future__ import annotations

import json
from pathlib import Path

from rsiframe.archive.log import get_artifact, get_json
from rsiframe.archive.runfolder import RunPaths
from rsiframe.evaluators import health
from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini


def _run(mini: Mini, *sets: str) -> tuple[Path, object]:
    out = mini.run_dir()
    args: list[str | Path] = ["run", mini.recipe, "--out", out, "--quiet"]
    for item in sets:
        args += ["--set", item]
    return out, cli(*args)


def test_wrong_agent_path_stops_the_run_with_the_reason(mini: Mini) -> None:
    out, res = _run(mini, 'evaluator.config.agent=python3 "$RSI_CANDIDATE/agnt.py"')
    assert res.exit_code == 1, res.stderr
    st = status_json(out)
    assert st["state"] == "failed"
    reason = st["reason"]
    assert reason.startswith(f"every seed train task failed: {health.EXITED_EARLY}")
    assert "agnt.py" in reason and "check evaluator.config.agent" in reason
    assert "rsiframe: run failed: every seed train task failed" in res.stderr
    # nothing was evolved from the dead seed
    assert [c["id"] for c in st["candidates"]] == ["c0000"]
    # every split the seed started errored on each of its tasks: train alone at K=1, with
    # K > 1 its gate and sealed too (they ran beside its train)
    started = [e["data"] for e in events(out) if e["type"] == "evaluation_started"]
    assert started[0]["split"] == "train" and started[0]["tasks"] == 4
    expected = {d["split"]: {health.EXITED_EARLY: d["tasks"]} for d in started}
    assert st["candidates"][0]["errors"] == expected
    assert any(line.startswith("seed train: 4/4 tasks errored") for line in st["health"])
    assert "infrastructure errors: seed train: 4/4 tasks errored" in res.stdout


def test_a_dead_seed_ends_the_run_only_once_its_splits_in_flight_end(mini: Mini) -> None:
    """With 4 in flight the seed's splits run side by side: the run ends failed only once
    every one of them has ended (none left running, no sandbox outliving the run)."""
    agent = 'evaluator.config.agent=python3 "$RSI_CANDIDATE/agnt.py"'
    out, res = _run(mini, agent, "concurrency.candidates=4")
    assert res.exit_code == 1, res.stderr
    evs = events(out)
    key = ("id", "split", "attempt")
    started = {tuple(e["data"][k] for k in key) for e in evs if e["type"] == "evaluation_started"}
    ends = ("evaluation_certified", "evaluation_failed", "evaluation_interrupted")
    ended = {tuple(e["data"][k] for k in key) for e in evs if e["type"] in ends}
    assert len(started) == 3 and started == ended  # the seed's three, side by side
    assert evs[-1]["type"] == "run_finished"
    assert status_json(out)["reason"].startswith("every seed train task failed")


def test_a_command_that_cannot_start(mini: Mini) -> None:
    out, res = _run(mini, "evaluator.config.agent=no-such-agent-binary")
    assert res.exit_code == 1
    assert status_json(out)["reason"].startswith(
        f"every seed train task failed: {health.COULD_NOT_START}"
    )


def test_verifier_without_a_reward_is_counted_not_a_quiet_zero(mini: Mini) -> None:
    for t in sorted(mini.tasks.iterdir()):
        test_sh = t / "tests" / "test.sh"
        text = test_sh.read_text().replace(
            'echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"',
            'echo "not a number" > "${RSI_LOGS:-/logs}/verifier/reward.txt"',
        )
        test_sh.write_text(text)
    out, res = _run(mini)
    assert res.exit_code == 1
    st = status_json(out)
    assert st["reason"].startswith(f"every seed train task failed: {health.NO_REWARD}")
    assert "tests/test.sh" in st["reason"]


def test_some_errors_are_counted_and_the_run_goes_on(mini: Mini) -> None:
    # t1 and t3 of train have a verifier that writes nothing: counted, but not a dead seed
    for tid in ("t1", "t3"):
        test_sh = mini.tasks / tid / "tests" / "test.sh"
        test_sh.write_text(test_sh.read_text().rsplit("\n", 2)[0] + "\n")
    out, res = _run(mini, "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    st = status_json(out)
    assert st["state"] == "finished"
    seed = st["candidates"][0]
    assert seed["errors"] == {"train": {health.NO_REWARD: 2}}
    assert (
        "seed train: 2/4 tasks errored: verifier wrote no parseable reward (2)" in (st["health"][0])
    )
    assert "e.g. t1: verifier wrote no reward" in st["health"][0]


def test_reason_of() -> None:
    assert health.reason_of("agent exited with status 127: sh: 1: x: not found") == (
        health.COULD_NOT_START
    )
    assert health.reason_of("agent exited with status 2 before changing /app: python3: x") == (
        health.EXITED_EARLY
    )
    assert health.reason_of("agent exited with status 1: Traceback") is None  # it did work
    assert health.reason_of("unreadable reward: could not convert") == health.NO_REWARD
    assert health.reason_of("agent timed out after 5s; verifier wrote no reward") is None
    assert health.reason_of(None) is None


def test_the_agents_app_output_is_kept_as_evidence(mini: Mini) -> None:
    out, res = _run(mini, "budget.max_generations=0")
    assert res.exit_code == 0, res.stderr
    paths = RunPaths(out)
    finished = [e["data"] for e in events(out) if e["type"] == "task_finished"]
    traj = get_json(paths.root, finished[0]["trajectory"])
    assert traj["app"]["changed"] == ["answer.txt"]
    assert traj["app"]["kept"] == ["app/answer.txt"]
    digest = traj["artifacts"]["app/answer.txt"]
    assert (paths.root / "artifacts").exists()

    assert get_artifact(paths.root, digest) == b"1"


def test_summary_does_not_count_the_seed(mini: Mini) -> None:
    out, res = _run(mini, "budget.max_generations=1")
    assert res.exit_code == 0
    n = len(status_json(out)["candidates"]) - 1
    assert f"seed + {n} candidates (the seed is not counted in max_candidates;" in " ".join(
        res.stdout.split()
    )
    assert json.loads(cli("status", out, "--json").stdout)["candidates"][0]["errors"] == {}


def test_failures_analysis_quotes_the_verifier(mini: Mini) -> None:
    out, res = _run(mini, "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    done = [e["data"] for e in events(out) if e["type"] == "analysis_done"]
    assert done
    analysis = get_json(out, done[0]["analysis"])
    examples = analysis["details"]["examples"]
    assert examples
    # the mini verifier says `need <i> got <level> reward 0`
    assert all(e["verifier"].startswith("need ") and " got " in e["verifier"] for e in examples)


def test_the_progress_output_says_so(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--set",
              'evaluator.config.agent=python3 "$RSI_CANDIDATE/agnt.py"')  # fmt: skip
    assert res.exit_code == 1
    said = " ".join(res.stderr.split())
    assert f"c0000 train: 4/4 tasks errored: {health.EXITED_EARLY} (4)" in said
