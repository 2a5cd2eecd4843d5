"""The integrity self-test: every scenario passes one trial; the command reports and fails."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from rsiframe.selftest.common import sound
from rsiframe.selftest.experiment import build
from rsiframe.selftest.runner import run_trial
from tests.support.cli import cli
from tests.support.scenarios import FAST_SCENARIOS


#: one of each family runs by default; the rest with -m e2e (tests/e2e/test_selftest.py)
@pytest.mark.parametrize("name", sorted(FAST_SCENARIOS))
def test_scenario_passes_one_trial(name: str) -> None:
    result = run_trial(name, 0, seed=12345)
    assert result.passed, result.problems


def test_at_least_twelve_scenarios_with_descriptions() -> None:
    res = cli("selftest", "integrity", "--list", "--json")
    assert res.exit_code == 0
    listed = json.loads(res.stdout)
    assert len(listed) >= 12
    assert all(s["description"] and not s["description"].startswith(s["name"]) for s in listed)


def test_a_broken_guarantee_fails_the_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    """If verify stopped noticing forged events, the self-test must say so."""
    from rsiframe.audit import verify as verify_mod
    from rsiframe.selftest import scenarios

    real = verify_mod.verify

    def blind(*args: object, **kw: object) -> verify_mod.VerifyReport:
        report = real(*args, **kw)  # type: ignore[arg-type]
        return report.model_copy(update={"ok": True, "problems": [], "checks": []})

    monkeypatch.setattr(scenarios, "verify", blind)
    result = run_trial("forged_event", 0, seed=7)
    assert not result.passed
    assert "verify passed a tampered archive" in result.problems


@pytest.mark.parametrize("name", ["cache_edited_model", "cache_forged_manifest"])
def test_the_cache_scenarios_fail_with_the_manifest_hmac_off(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As before the fix (no HMAC over the cache manifest), an edited entry is reused."""
    from rsiframe.util import faults

    assert run_trial(name, 0, seed=5).passed
    monkeypatch.setattr(faults, "_SPEC", ("off", "cache_mac", 1))
    result = run_trial(name, 0, seed=5)
    assert not result.passed
    assert any("was reused" in p for p in result.problems), result.problems


def test_the_report_names_a_protection_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from rsiframe.selftest.runner import run_selftest
    from rsiframe.util import faults

    monkeypatch.setattr(faults, "_SPEC", ("off", "cache_mac", 1))
    report = run_selftest(1, ["cache_edited_model"], seed=1)
    assert report.protections_off == ["cache_mac"] and not report.ok


def test_the_command_reports_per_scenario_as_json() -> None:
    res = cli("selftest", "integrity", "--scenario", "forged_event", "-n", "1", "--json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["ok"] and report["trials"] == 1
    [s] = report["scenarios"]
    assert (s["name"], s["passed"], s["failed"]) == ("forged_event", 1, 0)


def test_an_unknown_scenario_is_one_line() -> None:
    res = cli("selftest", "integrity", "--scenario", "nope")
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0
    assert "unknown scenario 'nope'" in res.stderr


def test_the_process_fallback_leaks_and_the_self_test_says_so() -> None:
    """Under the plain process runner an agent can read sealed tasks: the scenario fails."""
    result = run_trial("read_sealed", 0, seed=3, sandbox="process")
    assert not result.passed
    assert any("LEAKED" in p and "/tests/need.txt" in p for p in result.problems)


@pytest.mark.parametrize("fault", ["torn:candidate_mutated:1", "kill:after:candidate_proposed:1"])
def test_a_crash_between_the_seeds_two_events_resumes(fault: str, tmp_path: Path) -> None:
    """Found by torn_append: the seed proposed but not yet mutated used to fail the run."""
    exp = build(tmp_path / "exp", seed=1, generations=1, children=1)
    assert exp.run(fault=fault).returncode == -signal.SIGKILL
    res = exp.resume()
    assert res.returncode == 0, res.stderr
    assert sound(exp) == []


def test_a_bad_record_victim_is_never_a_siblings_duplicate() -> None:
    """The trial seed under which the victim c0002 became a duplicate of its sibling c0001
    (both flipped one knob, style plain -> fancy) and never reached record: the scenario
    failed on the mutator's luck (CI, base seed 1175217714). Its mutator now never repeats."""
    result = run_trial("oversized_result", 1, seed=1748950789)
    assert result.passed, result.problems


def test_two_attacking_victims_make_two_trees(tmp_path: Path) -> None:
    """Two victims of one attack write the same agent and level; the child's id keeps their
    trees apart, so both are evaluated (a duplicate would never be)."""
    import os
    import subprocess

    exp = build(
        tmp_path / "exp", seed=1, params={"mode": "read_key", "victims": ["c1", "c2"], "level": 0}
    )
    configs = []
    for cid in ("c1", "c2"):
        work = tmp_path / cid
        work.mkdir()
        env = {**os.environ, "RSI_CANDIDATE_ID": cid, "RSI_SEED": "7"}
        script = exp.seed / "fixed" / "mutate.py"
        subprocess.run(["python3", str(script)], cwd=work, env=env, check=True, capture_output=True)
        configs.append((work / "config.yaml").read_text())
    assert configs[0] != configs[1]
    assert all(c.startswith("level: 0\n") for c in configs)


def test_trials_in_processes_of_their_own_report_as_one_at_a_time() -> None:
    """``--jobs 2``: each trial in a process of its own, reported per scenario in order,
    with the seeds one at a time would give them (two of the quickest scenarios)."""
    from rsiframe.selftest.runner import run_selftest, trial_seed

    names = ["yaml_bomb", "gitmodules"]
    seen: list[tuple[str, int, int, bool]] = []
    report = run_selftest(
        1, names, seed=7, jobs=2, on_trial=lambda n, r: seen.append((n, r.trial, r.seed, r.passed))
    )
    assert sorted(seen) == sorted((n, 0, trial_seed(7, n, 0), True) for n in names)
    assert [(s.name, s.trials, s.passed) for s in report.scenarios] == [
        ("yaml_bomb", 1, 1),
        ("gitmodules", 1, 1),
    ]
    assert report.ok and report.seed == 7


def test_a_protection_switched_off_reaches_the_trials_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault switch travels in the environment, so a trial in its own process sees it."""
    from rsiframe.selftest.runner import run_selftest
    from rsiframe.util import faults

    monkeypatch.setenv(
        "RSIFRAME_FAULT", "off:cache_mac"
    )  # as `RSIFRAME_FAULT=... rsiframe selftest`
    monkeypatch.setattr(faults, "_SPEC", faults._parse())
    report = run_selftest(1, ["cache_edited_model"], seed=1, jobs=2)
    assert report.protections_off == ["cache_mac"]
    [scenario] = report.scenarios
    assert scenario.failed == 1
    assert any("was reused" in p for p in scenario.failures[0].problems)


def test_a_failed_self_test_ends_with_its_problems_and_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI log shows only its tail: the problems come again after the table, with the seed
    that runs the failed trial again (found when CI's tail named a scenario but not why)."""
    from rsiframe.util import faults

    monkeypatch.setattr(faults, "_SPEC", ("off", "cache_mac", 1))
    res = cli("selftest", "integrity", "--scenario", "cache_edited_model", "-n", "1", "--seed", "9")
    assert res.exit_code == 1
    tail = res.stderr.strip().splitlines()
    assert tail[-1] == "rsiframe: self-test failed: cache_edited_model"
    assert tail[-2] == "again: the same options with --seed 9 --scenario NAME"
    heading = tail.index("cache_edited_model #0 failed:")
    assert any("was reused" in line for line in tail[heading + 1 : -2])
