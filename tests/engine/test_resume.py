"""Kill a run with SIGKILL at every stage boundary (and Ctrl-C), then resume it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.archive.runfolder import RunLock, RunPaths
from tests.support.cli import cli, events, run_proc, status_json
from tests.support.mini import Mini

TERMINAL = {"admitted", "declined", "rejected", "abandoned"}

# (fault spec, what must be true of the archive after resuming)
BOUNDARIES = [
    ("kill:stage:select:2", None),
    ("kill:after:candidate_proposed:1", None),  # the seed: proposed, not yet committed
    ("kill:after:candidate_proposed:2", "abandoned"),
    ("kill:stage:rollout:1", "abandoned"),
    ("kill:after:rollout_done:1", "abandoned"),
    ("kill:stage:analyze:1", "abandoned"),
    ("kill:stage:mutate:1", "abandoned"),
    ("kill:stage:novelty:1", "abandoned"),
    ("kill:after:candidate_mutated:2", None),
    ("kill:after:evaluation_started:4", "retried"),
    ("kill:stage:task:7", "retried"),
    ("kill:after:task_finished:13", "retried"),
    ("kill:after:evaluation_certified:5", None),
    ("kill:stage:gate:1", None),
    ("kill:after:candidate_gated:2", None),
    ("kill:stage:record:2", None),
    ("kill:after:candidate_recorded:2", None),
    ("kill:stage:reflect:1", None),
    ("kill:after:generation_reflected:1", None),
    ("kill:after:generation_started:2", None),
    ("torn:evaluation_certified:3", "torn"),
    ("torn:candidate_gated:2", "torn"),
    ("torn:candidate_proposed:2", "torn"),
    ("torn:candidate_mutated:1", "torn"),  # the seed's commit event torn
]


@pytest.mark.parametrize(("fault", "expect"), BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_sigkill_then_resume(mini: Mini, fault: str, expect: str | None) -> None:
    out = mini.run_dir()
    killed = run_proc(
        ["run", str(mini.recipe), "--out", str(out), "--quiet"], {"RSIFRAME_FAULT": fault}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert killed.stdout.splitlines()[0] == str(out.resolve())
    before = (out / "events.jsonl").read_bytes()

    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    after = (out / "events.jsonl").read_bytes()
    if expect == "torn":
        assert "dropped a torn last event" in res.stderr
        kept = before[before.rfind(b"\n") + 1 :]
        assert (out / "events.torn-1").read_bytes() == kept
        assert after.startswith(before[: len(before) - len(kept)])
    else:
        assert after.startswith(before)  # nothing already written is lost

    st = status_json(out)
    assert st["state"] == "finished", st["reason"]
    assert all(c["state"] in TERMINAL for c in st["candidates"]), st["candidates"]
    report = json.loads(cli("verify", out, "--json").stdout)
    assert report["ok"], report["problems"]
    evs = events(out)
    if expect == "abandoned":
        assert any(e["type"] == "candidate_abandoned" for e in evs)
    if expect == "retried":
        interrupted = [e["data"] for e in evs if e["type"] == "evaluation_interrupted"]
        # one open attempt, or one per candidate in flight (RSIFRAME_TEST_CANDIDATES)
        assert 1 <= len(interrupted) <= int(os.environ.get("RSIFRAME_TEST_CANDIDATES", "1"))
        for d in interrupted:  # each open attempt re-runs as a new attempt
            starts = [
                e["data"]["attempt"]
                for e in evs
                if e["type"] == "evaluation_started"
                and e["data"]["id"] == d["id"]
                and e["data"]["split"] == d["split"]
            ]
            assert starts == [d["attempt"], d["attempt"] + 1]
    sessions = [e for e in evs if e["type"] == "session_started"]
    assert [s["data"]["resumed"] for s in sessions] == [False, True]


def killed_midway(mini: Mini) -> Path:
    """A run SIGKILLed right after its first gate decision."""
    out = mini.run_dir()
    killed = run_proc(
        ["run", str(mini.recipe), "--out", str(out), "--quiet"],
        {"RSIFRAME_FAULT": "kill:after:candidate_gated:1"},
    )
    assert killed.returncode == -signal.SIGKILL
    return out


def finished_run(mini: Mini) -> Path:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    return out


def start_run(mini: Mini, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    out = mini.run_dir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "run",
            str(mini.recipe),
            "--out",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out


def wait_for(out: Path, marker: bytes, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    log = out / "events.jsonl"
    while time.monotonic() < deadline:
        if log.exists() and marker in log.read_bytes():
            return
        time.sleep(0.02)
    raise AssertionError(f"{marker!r} never appeared in {log}")


def test_ctrl_c_interrupts_cleanly_and_resumes(mini: Mini) -> None:
    proc, out = start_run(mini, "--set", "budget.max_generations=4")
    wait_for(out, b"candidate_gated")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "rsiframe resume" in stderr
    assert "Traceback" not in stderr
    evs = events(out)
    assert evs[-1]["type"] == "run_interrupted"
    assert status_json(out)["state"] == "interrupted"
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert status_json(out)["state"] == "finished"


def test_a_burst_of_interrupts_never_breaks_the_archive(mini: Mini) -> None:
    proc, out = start_run(mini, "--set", "budget.max_generations=6")
    wait_for(out, b"candidate_gated")
    for _ in range(40):  # keep interrupting: the run's cleanup is interrupted too
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)
    proc.communicate(timeout=60)
    # 130 from rsiframe, or -SIGINT when a late signal lands while Python is shutting down
    assert proc.returncode in (130, -signal.SIGINT)
    assert status_json(out)["state"] == "interrupted"
    report = json.loads(cli("verify", out, "--json").stdout)
    assert report["ok"], report["problems"]
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert status_json(out)["state"] == "finished"


def test_sigterm_is_an_interrupt(mini: Mini) -> None:
    proc, out = start_run(mini, "--quiet")
    wait_for(out, b"evaluation_started")
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert events(out)[-1]["type"] == "run_interrupted"


def test_resume_refuses_an_edited_recipe(mini: Mini) -> None:
    out = finished_run(mini)
    before = (out / "events.jsonl").read_bytes()
    frozen = out / "recipe.yaml"
    frozen.write_text(frozen.read_text().replace("max_generations: 1", "max_generations: 5"))
    res = cli("resume", out)
    assert res.exit_code == 2
    assert "recipe changed since the run began: budget.max_generations" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert (out / "events.jsonl").read_bytes() == before


def test_resume_refuses_an_edited_task(mini: Mini) -> None:
    out = killed_midway(mini)
    before = (out / "events.jsonl").read_bytes()
    (mini.tasks / "t4" / "tests" / "need.txt").write_text("0\n")
    res = cli("resume", out)
    assert res.exit_code == 2
    assert "task set changed since the run began: gate/t4/tests/need.txt" in res.stderr
    assert (out / "events.jsonl").read_bytes() == before


def test_resume_refuses_a_changed_evaluator(mini: Mini, monkeypatch: pytest.MonkeyPatch) -> None:
    from rsiframe.sandbox import bwrap as sandbox

    out = killed_midway(mini)
    monkeypatch.setattr(sandbox, "bwrap_works", lambda: False)
    res = cli("resume", out)
    assert res.exit_code == 2
    assert "evaluator changed since the run began: isolation" in res.stderr
    assert "caps=none -> process" in res.stderr


def test_resuming_an_ended_run_changes_nothing(mini: Mini) -> None:
    out = finished_run(mini)
    before = (out / "events.jsonl").read_bytes()
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0
    assert "nothing to resume" in res.stderr
    assert (out / "events.jsonl").read_bytes() == before


def test_resume_refuses_a_live_run(mini: Mini) -> None:
    out = finished_run(mini)
    lock = RunLock(RunPaths(out.resolve())).acquire()
    try:
        res = cli("resume", out)
        assert res.exit_code == 2
        assert "already being driven" in res.stderr
        assert status_json(out)["state"] == "finished"
    finally:
        lock.release()


def test_resume_without_the_signing_key(mini: Mini) -> None:
    out = killed_midway(mini)
    for key in Path(os.environ["RSIFRAME_KEY_DIR"]).iterdir():
        assert key.stat().st_mode & 0o777 == 0o600
        key.unlink()
    res = cli("resume", out)
    assert res.exit_code == 2
    assert "signing key is not on this machine" in res.stderr
    # the run folder alone still verifies (public key only)
    assert json.loads(cli("verify", out, "--json").stdout)["ok"]


# K=4 candidates in flight, in both modes: a SIGKILL leaves several mutations and
# evaluations open at once; every open attempt re-runs as a new one, every unfinished
# mutation is abandoned, and nothing already written is lost.
K4_BOUNDARIES = [
    ("kill:stage:mutate:3", "abandoned"),
    ("kill:after:candidate_mutated:3", None),
    ("kill:after:evaluation_started:6", "retried"),
    ("kill:stage:task:9", "retried"),
    ("kill:after:evaluation_certified:6", None),
    ("kill:after:candidate_gated:2", None),
    ("torn:evaluation_certified:5", "torn"),
]
K4_SETS = ["--set", "concurrency.candidates=4", "--set", "children_per_generation=4"]


@pytest.mark.parametrize("mode", ["generational", "steady"])
@pytest.mark.parametrize(("fault", "expect"), K4_BOUNDARIES, ids=[b[0] for b in K4_BOUNDARIES])
def test_sigkill_with_four_in_flight_then_resume(
    mini: Mini, fault: str, expect: str | None, mode: str
) -> None:
    out = mini.run_dir()
    sets = [*K4_SETS, "--set", f"concurrency.mode={mode}"]
    killed = run_proc(
        ["run", str(mini.recipe), "--out", str(out), "--quiet", *sets], {"RSIFRAME_FAULT": fault}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = (out / "events.jsonl").read_bytes()
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    after = (out / "events.jsonl").read_bytes()
    if expect == "torn":
        kept = before[before.rfind(b"\n") + 1 :]
        assert after.startswith(before[: len(before) - len(kept)])
    else:
        assert after.startswith(before)
    st = status_json(out)
    assert st["state"] == "finished", st["reason"]
    assert all(c["state"] in TERMINAL for c in st["candidates"]), st["candidates"]
    report = json.loads(cli("verify", out, "--json").stdout)
    assert report["ok"], report["problems"]
    evs = events(out)
    if expect == "abandoned":
        assert any(e["type"] == "candidate_abandoned" for e in evs)
    if expect == "retried":
        interrupted = [e["data"] for e in evs if e["type"] == "evaluation_interrupted"]
        assert interrupted
        for d in interrupted:  # each open attempt re-ran as the next attempt
            starts = [
                e["data"]["attempt"]
                for e in evs
                if e["type"] == "evaluation_started"
                and (e["data"]["id"], e["data"]["split"]) == (d["id"], d["split"])
            ]
            assert starts == [d["attempt"], d["attempt"] + 1]


def test_ctrl_c_with_four_in_flight_interrupts_and_resumes(mini: Mini) -> None:
    proc, out = start_run(mini, *K4_SETS, "--set", "budget.max_generations=3")
    wait_for(out, b"candidate_gated")
    wait_for(out, b'"evaluation_started"', 60)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert events(out)[-1]["type"] == "run_interrupted"
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    st = status_json(out)
    assert st["state"] == "finished"
    assert all(c["state"] in TERMINAL for c in st["candidates"]), st["candidates"]
    assert json.loads(cli("verify", out, "--json").stdout)["ok"]
