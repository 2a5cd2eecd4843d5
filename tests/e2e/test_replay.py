"""``rsiframe replay``: a stub-driven run re-run with the stub stopped and no endpoint or key
configured reproduces the same candidate trees; a request the source never made is
refused (its child rejected, the verdict says it differs); a ledger that does not match
the run's signed events, or a run that has not ended, is refused as bad input. The runs
are e2e (``pytest -m e2e``); the archive-only gateway is tested on its own in the default
suite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from tests.support.cli import cli_proc, events
from tests.support.mini import Mini, make_mini

pytestmark = pytest.mark.e2e


ENV = {"REPLAY_LLM_URL": "", "REPLAY_LLM_KEY": ""}  # unset for the replay: no endpoint


MODELS = """\
models:
  proposer:
    base_url_env: REPLAY_LLM_URL
    api_key_env: REPLAY_LLM_KEY
    model: stub-model
    price: {input_per_mtok: 1.0, output_per_mtok: 2.0}
    retries: 0
"""


def _edit(old: str, new: str) -> str:
    return (
        f"Change it.\nconfig.yaml\n```\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```"
    )


#: answers by the parent's config: two different children of the seed (sampled calls:
#: each child's digest differs), one of the best child, then one that never applies
ANSWERS = [
    Answer(when="level: 1\nstyle: plain", content=_edit("level: 1", "level: 4")),
    Answer(when="level: 1\nstyle: plain", content=_edit("style: plain", "style: fancy")),
    Answer(when="level: 4\nstyle: plain", content=_edit("level: 4", "level: 6")),
    Answer(when="lessons", repeat=True, content="- raising the level helps"),
]


NO_EDIT = Answer(content="I would rather not change anything.")


def _mini(root: Path) -> Mini:
    m = make_mini(root, generations=2, children=2, extra=MODELS)
    text = m.recipe.read_text()
    mutate = text[text.index("  mutate:") : text.index("  novelty:")]
    text = text.replace(
        mutate,
        "  mutate:\n    operator: llm_edit\n    config: {model: proposer, temperature: 0.7,"
        " retries: 1}\n",
    )
    text = text.replace(
        "reflect: {operator: lessons}",
        "reflect: {operator: llm_lessons, config: {model: proposer, max_tokens: 64}}",
    )
    m.recipe.write_text(text)
    return m


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mini, Path, StubLLM]]:
    m = _mini(tmp_path_factory.mktemp("replay") / "proj")
    stub = StubLLM(Script(answers=list(ANSWERS), default=NO_EDIT))
    with ServerThread(stub.app) as srv:
        env = {"REPLAY_LLM_URL": srv.url, "REPLAY_LLM_KEY": "sk-stub"}
        res = cli_proc("run", m.recipe, "--out", m.run_dir("src"), "--quiet", env=env)
    assert res.returncode == 0, res.stderr
    yield m, m.run_dir("src"), stub


def _calls(run: Path) -> list[dict]:
    return [e["data"] for e in events(run) if e["type"] == "model_call"]


# two or three runs of the mini project: ~30 s each here
def test_a_replay_with_the_stub_stopped_reproduces_the_candidate_trees(
    source: tuple[Mini, Path, StubLLM],
) -> None:
    m, src, stub = source
    paid = [c for c in _calls(src) if c["status"] == 200 and not c["cached"]]
    assert stub.stats.answered == len(paid) >= 5  # mutations, a retry, reflections
    before = stub.stats.requests
    res = cli_proc("replay", src, "--out", m.run_dir("copy"), "--json", env=ENV)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["same"] and report["differences"] == []
    assert report["candidates"] == report["replay_candidates"] == 5
    assert report["calls_not_recorded"] == 0
    assert report["calls_served"] == len(paid)
    assert stub.stats.requests == before  # the stub heard nothing: it is stopped anyway
    verdict = res.stderr.strip().splitlines()[-1]
    assert verdict.startswith("replay: same: 5 candidates with the same ids, parents, trees")
    # every call answered from the archive, charged what the source recorded, paid nothing
    copy = _calls(m.run_dir("copy"))
    assert [(c["digest"], c["prompt_tokens"], c["cost_usd"]) for c in copy] == [
        (c["digest"], c["prompt_tokens"], c["cost_usd"]) for c in _calls(src)
    ]
    assert all(c["cached"] for c in copy if c["status"] == 200)
    status = json.loads(cli_proc("status", m.run_dir("copy"), "--json").stdout)
    assert status["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in _calls(src)))


# two or three runs of the mini project: ~30 s each here
def test_a_request_the_source_never_made_is_refused_and_the_replay_differs(
    source: tuple[Mini, Path, StubLLM],
) -> None:
    m, src, _stub = source
    # the seed on disk changed since: different prompts, never recorded
    config = m.seed / "config.yaml"
    config.write_text("level: 2\nstyle: plain\n")
    try:
        res = cli_proc("replay", src, "--out", m.run_dir("changed"), "--json", env=ENV)
    finally:
        config.write_text("level: 1\nstyle: plain\n")
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    assert not report["same"] and report["calls_not_recorded"] >= 1
    fields = {(d["candidate"], d["field"]) for d in report["differences"]}
    assert ("c0000", "tree") in fields
    assert res.stderr.strip().splitlines()[-1].startswith("replay: differs: ")
    status = json.loads(cli_proc("status", m.run_dir("changed"), "--json").stdout)
    rejected = [c for c in status["candidates"] if c["state"] == "rejected"]
    assert rejected and all("not recorded" in " ".join(c["reasons"]) for c in rejected)


# two or three runs of the mini project: ~30 s each here
def test_a_ledger_unlike_the_signed_events_or_an_unended_run_is_bad_input(
    source: tuple[Mini, Path, StubLLM], tmp_path: Path
) -> None:
    import shutil

    _m, src, _stub = source
    forged = tmp_path / "forged"
    shutil.copytree(src, forged)
    ledger = forged / "model-calls" / "ledger.jsonl"
    lines = ledger.read_text().splitlines()
    entry = json.loads(lines[0])
    entry["cost_usd"] = 0.0
    ledger.write_text("\n".join([json.dumps(entry), *lines[1:]]) + "\n")
    res = cli_proc("replay", forged, "--out", tmp_path / "out", env=ENV)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "differs from the run's signed model_call event (cost_usd)" in res.stderr
    assert not (tmp_path / "out").exists()
    res = cli_proc("replay", tmp_path / "nothing", "--out", tmp_path / "out", env=ENV)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    unended = tmp_path / "unended"
    shutil.copytree(src, unended)
    lines = (unended / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "run_finished"
    (unended / "events.jsonl").write_text("".join(lines[:-1]))  # as if killed before the end
    res = cli_proc("replay", unended, "--out", tmp_path / "out", env=ENV)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "the run has not ended (interrupted)" in res.stderr
    assert not (tmp_path / "out").exists()
