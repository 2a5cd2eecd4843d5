"""Deep verify: named checks with only the run folder and its public key, and --reproduce."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rsiframe.audit.verify import CHECKS
from tests.support.cli import cli
from tests.support.mini import AGENT, Mini, make_mini
from tests.support.verify import tree_digest, verify_json


def finished(mini: Mini, *extra: str) -> Path:
    out = mini.run_dir()
    res = cli(
        "run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1", *extra
    )
    assert res.exit_code == 0, res.stderr
    return out


def checks(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def test_every_check_passes_with_only_the_folder(
    mini: Mini, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = finished(mini)
    # a third party: another place, no private key anywhere, no task set
    elsewhere = tmp_path / "copy"
    shutil.copytree(out, elsewhere)
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tmp_path / "no-keys-here"))
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    shutil.rmtree(mini.tasks)
    before = tree_digest(elsewhere)
    code, report = verify_json(elsewhere, "--key", str(out / "pubkey.pem"))
    assert code == 0, report["problems"]
    # the task set is not on this machine: that check has nothing to look at
    assert checks(report) == {**dict.fromkeys(CHECKS, "ok"), "tasks": "skipped"}
    assert report["records"] > 0 and report["events"] > 0
    assert len(report["keyid"]) == 64
    assert tree_digest(elsewhere) == before
    assert not (tmp_path / "no-keys-here").exists()


def test_a_key_from_elsewhere_is_refused(mini: Mini, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from rsiframe.certs.signing import Signer

    out = finished(mini)
    other = tmp_path / "other.pem"
    other.write_bytes(Signer(Ed25519PrivateKey.generate()).public.pem())
    code, report = verify_json(out, "--key", str(other))
    assert code == 1
    assert checks(report)["pubkey"] == "failed"
    assert "pubkey.pem is not the key given with --key" in report["problems"]
    res = cli("verify", out, "--key", str(tmp_path / "missing.pem"))
    assert res.exit_code == 2 and "--key: cannot read" in res.stderr


def test_a_moved_ref_and_an_edited_lock_are_named(mini: Mini) -> None:
    out = finished(mini)
    refs = out / "repo.git" / "refs" / "rsiframe" / "candidates"
    seed = (refs / "c0000").read_text()
    (refs / "c0001").write_text(seed)
    lock = out / "evaluator.lock.json"
    data = json.loads(lock.read_text())
    data["config"]["concurrency"] = 7
    lock.write_text(json.dumps(data))
    res = cli("verify", out)
    assert res.exit_code == 1
    assert len(res.stderr.strip().splitlines()) == 1
    assert "verification failed (locks, commits)" in res.stderr
    _, report = verify_json(out)
    assert checks(report)["commits"] == "failed"
    assert any("refs/rsiframe/candidates/c0001 does not point at" in p for p in report["problems"])
    assert "evaluator.lock.json differs from the recipe's evaluator" in report["problems"]
    assert checks(report)["signatures"] == "ok"


def test_a_broken_chain_skips_what_cannot_be_checked(mini: Mini) -> None:
    out = finished(mini)
    log = out / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b'"type":', b'"type" :', 1)
    log.write_bytes(b"\n".join(lines))
    code, report = verify_json(out)
    assert code == 1
    got = checks(report)
    assert got["chain"] == "failed"
    assert all(got[n] == "skipped" for n in CHECKS[CHECKS.index("signatures") :])


def test_reproduce_leaves_the_folder_byte_identical(mini: Mini) -> None:
    out = finished(mini)
    before = tree_digest(out)
    code, report = verify_json(out, "--reproduce")
    assert code == 0, report["problems"]
    rep = report["reproduce"]
    status = json.loads(cli("status", out, "--json").stdout)
    assert rep["candidate"] == status["champion"]
    assert rep["splits"] == ["train", "gate", "sealed"]
    assert rep["tasks"] == 10 and rep["max_deviation"] == 0.0
    assert checks(report)["reproduce"] == "ok"
    assert tree_digest(out) == before


def test_reproduce_checks_the_task_set_against_the_lock(mini: Mini, tmp_path: Path) -> None:
    out = finished(mini)
    moved = tmp_path / "moved-tasks"
    shutil.copytree(mini.tasks, moved)
    (mini.tasks / "t9" / "tests" / "need.txt").write_text("0\n")  # a sealed task edited
    code, report = verify_json(out, "--reproduce")
    assert code == 1
    assert checks(report)["reproduce"] == "failed"
    assert any("task set changed since the run began: sealed/t9" in p for p in report["problems"])
    # the intact copy elsewhere is accepted once it matches the lock
    code, report = verify_json(out, "--reproduce", "--tasks", str(moved))
    assert code == 0, report["problems"]


def test_reproduce_reports_deviations_and_honours_a_tolerance(tmp_path: Path) -> None:
    """An agent that reads a host file (process sandbox): change it, and rewards move."""
    knob = tmp_path / "host-level.txt"
    knob.write_text("9\n")
    mini = make_mini(tmp_path / "p", sandbox="process", generations=1, children=1)
    (mini.seed / "agent.py").write_text(
        AGENT.replace(
            'open("answer.txt", "w").write(str(cfg["level"]))',
            f'open("answer.txt", "w").write(open({str(knob)!r}).read().strip())',
        )
    )
    out = finished(mini)
    knob.write_text("0\n")
    code, report = verify_json(out, "--reproduce", "--candidate", "c0000")
    assert code == 1
    rep = report["reproduce"]
    assert rep["max_deviation"] == 1.0 and rep["deviations"]
    d = rep["deviations"][0]
    assert (d["recorded"], d["reproduced"]) == (1.0, 0.0)
    assert any("recorded 1, reproduced 0" in p for p in report["problems"])
    code, report = verify_json(out, "--reproduce", "--candidate", "c0000", "--tolerance", "1")
    assert code == 0, report["problems"]
    assert report["reproduce"]["max_deviation"] == 1.0


def test_reproduce_without_a_champion(mini: Mini) -> None:
    out = finished(mini)
    code, report = verify_json(out, "--reproduce", "--candidate", "c0999")
    assert code == 1
    assert "reproduce: no candidate c0999" in report["problems"]


def test_human_output_names_each_check(mini: Mini) -> None:
    out = finished(mini)
    res = cli("verify", out)
    assert res.exit_code == 0
    for name in CHECKS:
        assert name in res.stdout
    assert "OK:" in res.stdout and res.stderr == ""


def test_a_recorded_head_detects_truncation_and_rewrites() -> None:
    from types import SimpleNamespace

    from rsiframe.audit.verify import _head, parse_head
    from rsiframe.errors import RsiError

    events = [SimpleNamespace(hash=c * 64) for c in "abc"]
    assert _head(events, 3, "c" * 64) == [] and _head(events, 2, "b" * 64) == []
    assert "truncated" in _head(events[:2], 3, "c" * 64)[0]
    assert "rewritten" in _head(events, 3, "d" * 64)[0]
    assert parse_head(f"3:{'c' * 64}") == (3, "c" * 64)
    for bad in ("3", "0:" + "c" * 64, "x:y", "3:" + "C" * 64):
        with pytest.raises(RsiError, match="is not N:HASH"):
            parse_head(bad)
