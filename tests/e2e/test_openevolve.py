"""The faithful OpenEvolve recipe end to end on pyfix against the stub model, through the
real gateway (issue 32): parents from OpenEvolve's three branches, a migrant on its
neighbours' islands after a migration generation, the mutation prompt with the parent's
previous attempts and the island's top programs, a model drawn per mutation from the
ensemble, and the cascade stopping a broken child at stage 1 and keeping it.

The stub plays every model. The mutator's answers are scripted edits of prompt.md: notes
that change nothing, one that adds "Clamp with care." (the seed agent then also fixes
``clamp``: a real improvement) and one that drops the task's instruction (the agent then
fails everything: the cascade's first stage stops it)."""

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
RECIPE = """\
extends: {path}
tasks:
  split: {{ratios: null, train: [pyfix-001, pyfix-002, pyfix-003], gate: [pyfix-006],
          sealed: [pyfix-007]}}
models:
  proposer: {{model: stub, retries: 0}}
  proposer_strong: {{model: stub, retries: 0}}
"""
MUTATOR = "You are evolving an agent system"


def edit(new: str, title: str, old: str = "Tools:") -> str:
    return f"{title}\nprompt.md\n```\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```"


def _answers() -> list[Answer]:
    """Notes before the unchanging "Tools:" line apply to every program, so a parent the
    cascade stopped still gets its children."""
    notes = [
        Answer(when=MUTATOR, content=edit(f"Note {i}.\n\nTools:", f"Note {i}."))
        for i in range(1, 5)
    ]
    return [
        Answer(when=MUTATOR, content=edit(f"{MARKER}\n\nTools:", "Clamp.")),
        Answer(when=MUTATOR, content=edit("(none)", "Drop the task.", "{instruction}")),
        *notes,
        Answer(when=MUTATOR, repeat=True, content=edit("Last.\n\nTools:", "Last.")),
        Answer(when="The function `mean`", repeat=True, content=f"```python\n{MEAN}```"),
        Answer(when=MARKER, repeat=True, content=f"```python\n{CLAMP}```"),
    ]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    with serving(
        monkeypatch, Script(answers=_answers(), default=Answer(content="```\npass\n```"))
    ) as s:
        yield s


def _details(out: Path, evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        e["data"]["id"]: json.loads(get_artifact(out, e["data"]["mutation"]))["details"]
        for e in evs
        if e["type"] == "candidate_mutated" and e["data"].get("mutation")
    }


def test_openevolve_runs_each_mechanism_on_pyfix(stub: StubLLM, tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(path=REPO / "recipes" / "pyfix" / "openevolve.yaml"))
    out = tmp_path / "run"
    sets = [
        "slots.select.config.num_islands=2",
        "slots.select.config.migration_rate=0.5",
        "slots.mutate.config.models=[{model: proposer, weight: 0.5},"
        " {model: proposer_strong, weight: 0.5}]",
        "budget.max_generations=3",
        "budget.max_candidates=6",
        "children_per_generation=2",
    ]
    res = cli("run", path, "--out", out, "--quiet", *[a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.stderr
    assert cli("verify", out).exit_code == 0
    evs = events(out)
    proposed = {
        e["data"]["id"]: e["data"]
        for e in evs
        if e["type"] == "candidate_proposed" and e["data"]["parent"]
    }
    assert len(proposed) == 6
    # select: every parent from one of OpenEvolve's branches, on the child's island
    for cid, p in proposed.items():
        assert p["placement"]["branch"] in ("exploration", "exploitation", "random")
        assert p["placement"]["island"] == int(cid[1:]) % 2
    # migration at generation 2: generation 1's best programs are on both islands since
    gen1 = {cid for cid, p in proposed.items() if p["generation"] == 1}
    later = [p for p in proposed.values() if p["generation"] >= 2]
    assert later and all(set(p["placement"]["migrants"]) & gen1 for p in later)
    # mutate: OpenEvolve's prompt, a model drawn per mutation and recorded
    details = _details(out, evs)
    calls = [e["data"] for e in evs if e["type"] == "model_call"]
    for cid, d in details.items():
        assert d["model"] in ("proposer", "proposer_strong")
        assert d["branch"] == proposed[cid]["placement"]["branch"]  # select's, handed on
        assert d["top"] == proposed[cid]["placement"]["top"]
        assert d["model"] in {c["model"] for c in calls if c.get("candidate") == cid}
    prompts = [str(r["messages"][-1]["content"]) for r in stub.requests]
    prompts = [p for p in prompts if MUTATOR in p]
    assert len(prompts) == len(details)
    assert any("# Top programs" in p for p in prompts)
    # the parent's previous attempts with their outcomes; k = 2 inspirations from 2 cells
    assert any("# Previous attempts" in p and "admitted (stopped at train@1)" in p for p in prompts)
    assert any(d["previous"] for d in details.values())
    cells = [p["placement"]["inspiration_cells"] for p in later]
    assert any(len(c) == 2 and c[0] != c[1] for c in cells)
    assert any("# Inspiration programs" in p for p in prompts)
    assert all("Evaluator artifacts of the current program" in p for p in prompts)
    # evaluate: the cascade stopped the child that dropped the task at stage 1, and kept it
    status = {c["id"]: c for c in status_json(out)["candidates"]}
    stopped = [c for c in status.values() if c.get("stopped_at") == "train@1"]
    assert stopped and all(c["state"] == "admitted" for c in stopped)
    improved = [c for c in status.values() if (c["scores"].get("train") or 0) > 1 / 3 + 1e-9]
    assert improved, "the clamp edit was never measured as an improvement"
