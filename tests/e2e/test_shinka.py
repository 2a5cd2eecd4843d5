"""The ShinkaEvolve recipe (recipes/pyfix/shinka.yaml) end to end on pyfix against the stub
model, through the real gateway, in steady mode: median/MAD parent weights, the UCB1
bandit's model per mutation, embedding novelty (a child too similar to the archive is
re-proposed 3 times, then rejected), the meta-scratchpad every 2 generations, read back
from the run's events.

The stub plays every model: ``stub`` (proposer) writes "Clamp with care." and a line of
advice into prompt.md (a real improvement: the agent then also fixes ``clamp``, the gate
task); ``stub-large`` (proposer_large) answers the seed's prompt with one space doubled, a
new tree whose words, and so whose stub embedding, are the seed's (cosine 1.0); asked
again after such a rejection, either model doubles another space."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe.archive.log import get_artifact
from rsiframe.gateway.stub import Answer, Script, StubLLM
from tests.support.cli import cli, events, status_json
from tests.support.gateway import serving
from tests.support.paths import REPO
from tests.support.pyfix import CLAMP, MEAN

pytestmark = pytest.mark.e2e

MARKER = "Clamp with care."
SEED_PROMPT = (REPO / "tasks" / "pyfix" / "seed" / "prompt.md").read_text()
ADVICE = " Check both bounds: values below lo become lo, values above hi become hi.\n"
GOOD = SEED_PROMPT + "\n" + MARKER + ADVICE  # stub cosine to the seed: 0.96


def near_seed(i: int) -> str:
    """The seed's prompt with its ``i``-th space doubled: a new tree, the seed's words."""
    head, *rest = SEED_PROMPT.split(" ")
    return head + "".join(("  " if k == i else " ") + w for k, w in enumerate(rest))


PAD = "SCRATCHPAD: the clamp line in prompt.md helped; whitespace edits were not new"
RECIPE = """\
extends: {recipe}
tasks:
  split: {{ratios: null, train: [pyfix-001, pyfix-003], gate: [pyfix-002], sealed: [pyfix-007]}}
models:
  proposer: {{model: stub, retries: 0}}
  proposer_large: {{model: stub-large, retries: 0}}
  embedder: {{model: stub-embed, retries: 0}}
budget: {{max_generations: 4, max_candidates: 8}}
"""


def _whole(text: str) -> str:
    return f"prompt.md\n```\n{text}```\n"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    mutate = "You are improving an agent system"
    again = "rejected as too similar"
    answers = [
        Answer(when="meta-scratchpad", repeat=True, content=PAD),
        *(Answer(when=again, content=_whole(near_seed(i))) for i in range(20)),
        *(
            Answer(model="stub-large", when=mutate, content=_whole(near_seed(i)))
            for i in range(20, 40)
        ),
        Answer(model="stub", when=mutate, repeat=True, content=_whole(GOOD)),
        # the seed agent's model: mean always; clamp only under the marker line
        Answer(when="The function `mean`", repeat=True, content=f"```python\n{MEAN}```"),
        Answer(when=MARKER, repeat=True, content=f"```python\n{CLAMP}```"),
    ]
    with serving(
        monkeypatch, Script(answers=answers, default=Answer(content="```\npass\n```"))
    ) as s:
        yield s


def _data(evs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in evs if e["type"] == kind]


def test_shinka_runs_every_mechanism_on_pyfix(stub: StubLLM, tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(recipe=REPO / "recipes" / "pyfix" / "shinka.yaml"))
    out = tmp_path / "run"
    res = cli("run", path, "--out", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert cli("verify", out).exit_code == 0
    evs = events(out)
    calls = _data(evs, "model_call")

    # steady mode, as the recipe declares it
    shown = cli("recipe", "show", path, "--json")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["recipe"]["concurrency"]["mode"] == "steady"

    # select: ShinkaEvolve's weights drew every parent
    proposed = [d for d in _data(evs, "candidate_proposed") if d.get("parent")]
    assert len(proposed) == 8
    assert all(d["reason"].startswith("score_child_prop p=") for d in proposed)

    # mutate: the bandit chose a declared model per mutation, recorded with it
    reports = [
        json.loads(get_artifact(out, d["mutation"]))["details"]
        for kind in ("candidate_mutated", "candidate_rejected")
        for d in _data(evs, kind)
        if d.get("mutation")
    ]
    chosen = [r["bandit"]["chosen"] for r in reports]
    assert set(chosen) == {"proposer", "proposer_large"}
    assert all(r["model"] == r["bandit"]["chosen"] for r in reports)
    assert all(r["bandit"]["by"] in ("unpulled", "ucb", "epsilon") for r in reports)
    assert {c["model"] for c in calls if c["slot"] == "mutate"} == {"proposer", "proposer_large"}

    # novelty: proposer_large's near-copy of the seed was re-proposed 3 times, then rejected
    similar = [d for d in _data(evs, "candidate_rejected") if d["stage"] == "novelty"]
    assert similar, "no child was rejected as too similar"
    for d in similar:
        assert len(d["reasons"]) == 4  # the proposal and its 3 re-proposals
        assert all("cosine 1.0000 >= 0.99 to c0000" in r for r in d["reasons"])
        report = json.loads(get_artifact(out, d["mutation"]))["details"]
        assert len(report["novelty_reproposals"]) == 3
    embeds = [c for c in calls if c["path"] == "/v1/embeddings"]
    assert embeds and {c["slot"] for c in embeds} == {"novelty"}
    assert all(c["model"] == "embedder" for c in embeds)
    assert any(c["prompt_tokens"] > 0 and not c["cached"] for c in embeds)  # metered

    # the improvement was found and kept; its bandit arm was rewarded
    status = {c["id"]: c for c in status_json(out)["candidates"]}
    good = [c for c in status.values() if c["parent"] and c["state"] == "admitted"]
    assert good and max(c["scores"]["gate"] for c in good) == 1.0

    # meta-scratchpad: a model call only at even generations; shown to a later mutation
    reflected = {d["generation"]: d for d in _data(evs, "generation_reflected")}
    pads = {g: get_artifact(out, d["lessons"]).decode() for g, d in reflected.items()}
    assert 2 in pads and PAD in pads[2]
    assert all(PAD not in pads[g] for g in pads if g < 2)
    assert len([c for c in calls if c["slot"] == "reflect"]) == len([g for g in pads if g % 2 == 0])
    later = [str(r["messages"][-1]["content"]) for r in stub.requests if "messages" in r]
    assert any(p.startswith("You are improving") and PAD in p for p in later)
