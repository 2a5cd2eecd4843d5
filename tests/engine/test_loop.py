"""The engine's loop on the mini task set, whole runs (real git, keys, sandbox): history,
budgets, rejections, retries, and scores only from verified records."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rsiframe.api import InformationFlowError
from rsiframe.engine.loop import Engine
from rsiframe.errors import SandboxError
from rsiframe.repo.candidates import CandidateRepo
from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini, run_mini

TERMINAL = {"admitted", "declined", "rejected", "abandoned"}


def test_run_climbs_and_history_is_consistent(mini: Mini) -> None:
    out = run_mini(mini, "--set", "budget.max_generations=4")
    st = status_json(out)
    assert st["state"] == "finished"
    by_id = {c["id"]: c for c in st["candidates"]}
    seed, champ = by_id[st["seed"]], by_id[st["champion"]]
    assert seed["scores"]["gate"] == 0.0
    assert champ["scores"]["gate"] > seed["scores"]["gate"]
    # the anchor: sealed results for seed and champion only
    assert seed["scores"]["sealed"] is not None and champ["scores"]["sealed"] is not None
    others = [c for c in st["candidates"] if c["id"] not in (st["seed"], st["champion"])]
    assert all(c["scores"]["sealed"] is None for c in others)
    assert all(c["state"] in TERMINAL for c in st["candidates"])
    assert len(st["candidates"]) == 1 + 4 * 2

    # git: one commit per committed candidate, git parent = parent candidate
    repo = CandidateRepo(out / "repo.git")
    for c in st["candidates"]:
        if c["commit"] is None:
            continue
        ref = subprocess.run(
            [
                "git",
                "-C",
                str(out / "repo.git"),
                "rev-parse",
                f"refs/rsiframe/candidates/{c['id']}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert ref == c["commit"]
        parents = repo.parents_of(c["commit"])
        assert parents == ([by_id[c["parent"]]["commit"]] if c["parent"] else [])
    fsck = subprocess.run(
        ["git", "-C", str(out / "repo.git"), "fsck", "--strict"], capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stderr

    res = cli("verify", out, "--json")
    report = json.loads(res.stdout)
    assert res.exit_code == 0 and report["ok"], report
    assert report["records"] == sum(1 for e in events(out) if e["type"] == "evaluation_certified")


def test_candidate_budget_fails_closed(mini: Mini) -> None:
    out = run_mini(mini, "--set", "budget.max_candidates=3", "--set", "budget.max_generations=9")
    st = status_json(out)
    # the run made the children it planned: finished, not a resource running out
    assert st["state"] == "finished", st["reason"]
    assert st["budget"]["used"]["candidates"] == 3
    assert "candidates reached 3" in st["reason"]


def test_evaluation_budget_is_never_exceeded(mini: Mini) -> None:
    out = run_mini(mini, "--set", "budget.max_evaluations=8", "--set", "budget.max_generations=9")
    st = status_json(out)
    assert st["state"] == "budget_exhausted"
    started = [e for e in events(out) if e["type"] == "evaluation_started"]
    assert len(started) <= 8
    # the champion still got its sealed anchor out of the reserved evaluation
    champ = next(c for c in st["candidates"] if c["id"] == st["champion"])
    assert champ["scores"]["sealed"] is not None


def test_wall_budget_stops_before_costly_work(mini: Mini) -> None:
    out = run_mini(mini, "--set", "budget.max_wall_seconds=0.000001")
    st = status_json(out)
    assert st["state"] == "budget_exhausted"
    assert st["budget"]["used"]["evaluations"] == 0


def test_guardrail_rejects_and_keeps_evidence(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    text = mini.recipe.read_text().replace(
        """    operator: knobs
    config:
      max_changes: 1
      knobs:
        - {file: config.yaml, key: level, range: [0, 9], step: 1}
        - {file: config.yaml, key: style, choices: [plain, fancy]}""",
        """    operator: script
    config:
      command: "echo sneaky; echo 'print(1)' > agent.py; echo 'level: 9' > config.yaml\"""",
    )
    mini.recipe.write_text(text)
    out = run_mini(mini)
    st = status_json(out)
    child = st["candidates"][1]
    assert child["state"] == "rejected"
    assert any("agent.py" in r and "outside the surface" in r for r in child["reasons"])
    rejected = next(e for e in events(out) if e["type"] == "candidate_rejected")
    assert rejected["data"]["violations"][0]["path"] == "agent.py"
    evidence = rejected["data"]["commit"]
    repo = CandidateRepo(out / "repo.git")
    assert repo.read(evidence, "agent.py") == b"print(1)\n"
    ref = subprocess.run(
        ["git", "-C", str(out / "repo.git"), "rev-parse", "refs/rsiframe/rejected/c0001"],
        capture_output=True,
        text=True,
    )
    assert ref.stdout.strip() == evidence
    # a rejected candidate is never evaluated
    assert not any(
        e["data"].get("id") == "c0001" for e in events(out) if e["type"] == "evaluation_started"
    )


def test_operator_crash_rejects_the_candidate_and_the_run_goes_on(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=2)
    (mini.root / "boom.py").write_text(
        "from rsiframe.api import MutateOperator\n"
        "class Boom(MutateOperator):\n"
        "    name = 'boom'\n"
        "    def mutate(self, ctx):\n"
        "        raise ValueError('kaboom')\n"
    )
    out = run_mini(mini, "--set", f"slots.mutate.operator={mini.root}/boom.py:Boom")
    st = status_json(out)
    assert st["state"] == "finished"
    children = st["candidates"][1:]
    assert len(children) == 2
    assert all(c["state"] == "rejected" for c in children)
    assert "mutate operator failed: ValueError: kaboom" in children[0]["reasons"][0]


def test_failed_evaluation_waits_for_retry(mini: Mini, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine.create(mini.recipe, ["budget.max_generations=1"], mini.run_dir())
    real_run = engine.evaluator.run

    def flaky(candidate_dir, tasks, put, on_done=None):  # type: ignore[no-untyped-def]
        if candidate_dir.name == "c0001":
            raise SandboxError("sandbox fell over")
        return real_run(candidate_dir, tasks, put, on_done)

    monkeypatch.setattr(engine.evaluator, "run", flaky)
    assert engine.drive() == "finished"
    engine.close()
    st = status_json(mini.run_dir())
    failed = next(c for c in st["candidates"] if c["id"] == "c0001")
    assert failed["state"] == "failed"
    assert "sandbox fell over" in failed["reasons"][0]

    # a plain resume leaves it waiting; --retry-failed runs a new attempt
    res = cli("resume", mini.run_dir(), "--quiet")
    assert res.exit_code == 0
    assert status_json(mini.run_dir())["candidates"][1]["state"] == "failed"
    res = cli("resume", mini.run_dir(), "--retry-failed", "--quiet")
    assert res.exit_code == 0, res.stderr
    again = next(c for c in status_json(mini.run_dir())["candidates"] if c["id"] == "c0001")
    assert again["state"] in ("admitted", "declined")
    attempts = [
        (e["data"]["split"], e["data"]["attempt"])
        for e in events(mini.run_dir())
        if e["type"] == "evaluation_started" and e["data"]["id"] == "c0001"
    ]
    assert attempts == [("train", 1), ("train", 2), ("gate", 1)]


def test_operators_cannot_read_sealed_results(mini: Mini) -> None:
    engine = Engine.create(mini.recipe, ["budget.max_generations=1"], mini.run_dir())
    try:
        engine.drive()
        with pytest.raises(InformationFlowError):
            engine.view.score("c0000", "sealed")
        with pytest.raises(InformationFlowError):
            engine.view.rewards("c0000", "gate")
        assert engine.view.score("c0000", "gate") == 0.0
        assert engine.view.rewards("c0000", "train") is not None
    finally:
        engine.close()


def test_notes_cannot_overwrite_certified_scores(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    (mini.root / "liar.py").write_text(
        "from rsiframe.api import RecordOperator, Notes\n"
        "class Liar(RecordOperator):\n"
        "    name = 'liar'\n"
        "    def record(self, ctx):\n"
        "        return Notes(notes={'score': 1.0, 'scores': {'gate': 1.0}, 'state': 'admitted'})\n"
    )
    out = run_mini(mini, "--set", f"slots.record.operator={mini.root}/liar.py:Liar")
    st = status_json(out)
    assert st["candidates"][0]["scores"]["gate"] == 0.0


def _rechain(run_dir: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Rewrite events.jsonl with ``edit`` applied and a freshly computed hash chain."""
    from rsiframe.util.digest import canonical_json, sha256_bytes

    lines = (run_dir / "events.jsonl").read_text().splitlines()
    prev = "0" * 64
    out = []
    for line in lines:
        ev = json.loads(line)
        edit(ev)
        ev["prev"] = prev
        raw = canonical_json(ev)
        prev = sha256_bytes(raw)
        out.append(raw.decode())
    (run_dir / "events.jsonl").write_text("\n".join(out) + "\n")


def test_forged_score_is_detected_and_never_read(mini: Mini) -> None:
    import base64

    out = run_mini(mini)

    def forge(ev: dict) -> None:
        if (
            ev["type"] == "evaluation_certified"
            and ev["data"]["id"] == "c0000"
            and ev["data"]["split"] == "gate"
        ):
            env = ev["data"]["envelope"]
            st = json.loads(base64.b64decode(env["payload"]))
            st["predicate"]["score"] = 1.0
            env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()

    _rechain(out, forge)
    report = json.loads(cli("verify", out, "--json").stdout)
    assert not report["ok"]
    assert any("signature does not verify" in p for p in report["problems"])
    # the rewritten chain is no longer signed by the run's key, from the edit onwards
    forged_from = next(i for i, p in enumerate(report["problems"]) if "not signed" in p)
    assert forged_from >= 0
    assert not any(p.startswith("event 0 ") for p in report["problems"])
    # nothing reads the forged archive as if it were sound
    for cmd in ("status", "resume"):
        res = cli(cmd, out)
        assert res.exit_code == 1 and "not signed by the run's key" in res.stderr

    # even with the signatures ignored, the score is never taken from a bad record
    from rsiframe.archive.loader import load_run

    loaded = load_run(out, strict=False)
    assert loaded.state.candidates["c0000"].score("gate") is None


def test_replayed_certificate_is_rejected(mini: Mini) -> None:
    out = run_mini(mini)
    envelopes = {}

    def grab(ev: dict) -> None:
        if ev["type"] == "evaluation_certified":
            envelopes.setdefault((ev["data"]["id"], ev["data"]["split"]), ev["data"]["envelope"])

    _rechain(out, grab)
    target = next(k for k in envelopes if k[0] != "c0000" and k[1] == "gate")

    def replay(ev: dict) -> None:
        if (
            ev["type"] == "evaluation_certified"
            and (ev["data"]["id"], ev["data"]["split"]) == target
        ):
            ev["data"]["envelope"] = envelopes[("c0000", "gate")]

    _rechain(out, replay)
    problems = json.loads(cli("verify", out, "--json").stdout)["problems"]
    assert any("bound to candidate c0000" in p for p in problems)
    assert any("not signed by the run's key" in p for p in problems)


def test_a_select_that_breaks_the_rules_fails_the_run_resumably(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    (mini.root / "bad.py").write_text(
        "from rsiframe.api import SelectOperator, Selection\n"
        "class Bad(SelectOperator):\n"
        "    name = 'bad'\n"
        "    def select(self, ctx):\n"
        "        return Selection(parent='c9999')\n"
    )
    out = mini.run_dir()
    res = cli(
        "run",
        mini.recipe,
        "--out",
        out,
        "--quiet",
        "--set",
        f"slots.select.operator={mini.root}/bad.py:Bad",
    )
    assert res.exit_code == 1
    assert "run failed: select operator chose 'c9999'" in res.stderr
    st = status_json(out)
    assert st["state"] == "failed"
    assert st["candidates"][0]["state"] == "admitted"  # the seed's work is kept


def test_a_select_that_declares_convergence_ends_the_run_finished_with_its_reason(
    tmp_path: Path,
) -> None:
    """A-Evolve's convergence stop: select's SearchConverged ends the run ``finished``, no
    child proposed after it, the anchor evaluated, and the history verifies."""
    mini = make_mini(tmp_path / "p", generations=6, children=1)
    out = run_mini(
        mini,
        "--set",
        "slots.select.operator=rollback",
        "--set",
        "slots.select.config.converge.window=2",
        "--set",
        "slots.select.config.converge.epsilon=1.0",
    )
    st = status_json(out)
    assert st["state"] == "finished"
    assert st["reason"].startswith("converged: the best gate score rose"), st["reason"]
    assert "in the last 2 generations (epsilon 1.0)" in st["reason"]
    assert len(st["candidates"]) == 3  # the seed and two generations: the window, then the stop
    assert cli("verify", out).exit_code == 0


def test_a_converged_steady_run_reviews_what_was_in_flight_before_it_finishes(
    tmp_path: Path,
) -> None:
    """Steady mode: when select declares convergence, children already in flight are
    evaluated and gated before the run ends ``finished`` (they were killed and left
    ``evaluating`` or ``certified`` in a run that no resume moves again)."""
    mini = make_mini(tmp_path / "p", generations=8, children=2)
    out = run_mini(
        mini,
        "--set",
        "slots.select.operator=rollback",
        "--set",
        "slots.select.config.converge.window=2",
        "--set",
        "slots.select.config.converge.epsilon=1.0",
        "--set",
        "concurrency.mode=steady",
        "--set",
        "concurrency.candidates=3",
    )
    st = status_json(out)
    assert st["state"] == "finished"
    assert st["reason"].startswith("converged: the best gate score rose"), st["reason"]
    left = [(c["id"], c["state"]) for c in st["candidates"]]
    assert all(s in ("admitted", "declined", "rejected") for _, s in left), left
    assert cli("verify", out).exit_code == 0
