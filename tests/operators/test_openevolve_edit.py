"""OpenEvolve's mutation prompt and model ensemble (issue 32), against the scripted stub
through the real gateway: the prompt holds the parent with its metrics and artifacts, the
top programs, inspirations from distinct cells and the parent's previous attempts with
their outcomes; a model is drawn per mutation by weight and recorded; nothing of the gate
or sealed splits reaches the prompt."""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe import llm
from rsiframe.api import CandidateView, InformationFlowError, MutateContext, Rollout
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators.openevolve_edit import OpenEvolveEdit, OpenEvolveEditConfig, draw_model
from rsiframe.recipe.models import ModelSpec, named_models, references
from tests.support.llmops import work_tree

SEED_PROMPT = "Solve the task.\n"
EDIT = (
    "Ask for care with bounds.\nprompt.md\n```\n<<<<<<< SEARCH\nSolve the task.\n=======\n"
    "Solve the task. Clamp with care.\n>>>>>>> REPLACE\n```"
)
GATE_SCORE = 0.777777  # every gate score in the view: it must never reach the prompt
PARENT = "c0002"


def cand(cid: str, parent: str | None, state: str = "admitted", desc: str = "") -> CandidateView:
    return CandidateView(cid, parent, 1, state, "c" * 40, cid, desc)


class PromptRun:
    """A run view of a small OpenEvolve run; records every split it is asked about."""

    lessons = "SECRET LESSON"

    def __init__(self, current_placement: dict[str, Any]) -> None:
        views = [
            cand("c0000", None, desc="seed"),
            cand("c0001", "c0000", desc="top one: numbered steps"),
            cand(PARENT, "c0000", desc="parent"),
            cand("c0003", "c0000", desc="cell A inspiration"),
            cand("c0004", "c0000", desc="cell B inspiration"),
            cand("c0005", PARENT, desc="earlier child: shorter prompt"),
            cand("c0006", PARENT, "rejected", desc="earlier child: broke the loop"),
            CandidateView("c0009", PARENT, 2, "proposed", None, None, "", current_placement),
        ]
        self._c = {c.id: c for c in views}
        self.train = {"c0000": 0.1, "c0001": 0.9, PARENT: 0.5, "c0003": 0.3, "c0004": 0.6}
        self.train["c0005"] = 0.25
        self.asked: list[str] = []

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def candidate(self, cid: str) -> CandidateView:
        return self._c[cid]

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        self.asked.append(f"score:{split}")
        if split == "sealed":
            raise InformationFlowError("sealed")
        return GATE_SCORE if split == "gate" else self.train.get(cid)

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        self.asked.append(f"trajectories:{split}")
        if split != "train":
            raise InformationFlowError(split)
        return [
            {"task": "pyfix-001", "reward": 1.0, "verifier_tail": "ok"},
            {"task": "pyfix-002", "reward": 0.0, "verifier_tail": f"FAIL clamp in {cid}"},
        ]

    def read_file(self, cid: str, path: str) -> bytes:
        if path != "prompt.md":
            raise KeyError(path)
        return SEED_PROMPT.encode() if cid in ("c0000", PARENT) else f"PROMPT OF {cid}\n".encode()


PLACEMENT = {
    "island": 1,
    "branch": "exploitation",
    "cell": [5],
    "top": ["c0001", "c0004"],
    "inspirations": ["c0003", "c0004"],
    "inspiration_cells": [[3], [6]],
}
ROLLOUT = Rollout(
    trajectories=[
        {"task": "pyfix-002", "reward": 0.0, "verifier_tail": "FAIL clamp(5, 0, 3) == 5"},
        {"task": "pyfix-001", "reward": 1.0, "verifier_tail": "ok"},
    ]
)


def mctx(work: Path, run: PromptRun, seed: int = 0) -> MutateContext:
    return MutateContext(
        run=run,  # type: ignore[arg-type]
        rng=random.Random(seed),
        generation=2,
        candidate_id="c0009",
        parent=run.candidate(PARENT),
        workdir=work,
        rollout=ROLLOUT,
        analysis=None,
        lessons="SECRET LESSON",
        surface_include=("prompt.md",),
        surface_exclude=(),
        placement=run.candidate("c0009").placement,
    )


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[StubLLM]:
    """A gateway with two declared models on one stub, answering per upstream model."""
    answers = [
        Answer(model="stub-fast", repeat=True, content=EDIT),
        Answer(model="stub-strong", repeat=True, content=EDIT),
    ]
    stub = StubLLM(Script(answers=answers))
    srv = ServerThread(stub.app).start()
    specs = {
        name: ModelSpec.model_validate({"base_url": srv.url, "model": upstream, "retries": 0})
        for name, upstream in (("fast", "stub-fast"), ("strong", "stub-strong"))
    }
    gw = Gateway(specs, Ledger(tmp_path / "gw"), environ={}).start()
    client = gw.client("mutate:c0009", candidate="c0009", slot="mutate")
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c0009", slot="mutate")
    try:
        with llm.use(client, endpoints):
            yield stub
    finally:
        gw.stop()
        srv.stop()


def config(**kw: Any) -> OpenEvolveEditConfig:
    kw.setdefault("models", [{"model": "fast", "weight": 0.8}, {"model": "strong", "weight": 0.2}])
    return OpenEvolveEditConfig.model_validate(kw)


def test_the_prompt_holds_top_programs_inspirations_previous_attempts_and_artifacts(
    ensemble: StubLLM, tmp_path: Path
) -> None:
    work = work_tree(tmp_path, {"prompt.md": SEED_PROMPT})
    run = PromptRun(PLACEMENT)
    m = OpenEvolveEdit(config()).mutate(mctx(work, run))
    assert (work / "prompt.md").read_text() == "Solve the task. Clamp with care.\n"
    assert m.description == "Ask for care with bounds."
    prompt = ensemble.requests[0]["messages"][-1]["content"]
    # the parent, its train metrics and its artifacts (the verifier's output)
    assert "Current program (c0002)" in prompt and "train score 0.5" in prompt
    assert "FAIL clamp(5, 0, 3) == 5" in prompt
    # the top program with its code and score
    top = prompt.split("# Top programs", 1)[1].split("# Inspiration", 1)[0]
    assert "Program c0001 (train score 0.9)" in top and "PROMPT OF c0001" in top
    # k = 2 inspirations from two distinct cells, each with its code
    insp = prompt.split("# Inspiration programs", 1)[1]
    assert "Inspiration c0003 (cell [3]" in insp and "Inspiration c0004 (cell [6]" in insp
    assert "PROMPT OF c0003" in insp and "PROMPT OF c0004" in insp
    # previous attempts: both earlier children with their outcomes and artifacts
    prev = prompt.split("# Previous attempts", 1)[1].split("# Top programs", 1)[0]
    assert "Attempt c0005: admitted, train score 0.25" in prev and "shorter prompt" in prev
    assert "FAIL clamp in c0005" in prev
    assert "Attempt c0006: rejected" in prev and "broke the loop" in prev
    assert "SEARCH" in prompt and "SECRET LESSON" not in prompt  # OpenEvolve has no lessons
    assert m.details["top"] == ["c0001", "c0004"] and m.details["previous"] == ["c0005", "c0006"]
    assert m.details["inspirations"] == ["c0003", "c0004"]
    assert m.details["branch"] == "exploitation"


def test_full_rewrite_is_a_config_value(ensemble: StubLLM, tmp_path: Path) -> None:
    ensemble.remaining[:0] = [
        Answer(model=m, content="Whole.\nprompt.md\n```\nRewritten.\n```")
        for m in ("stub-fast", "stub-strong")
    ]
    work = work_tree(tmp_path, {"prompt.md": SEED_PROMPT})
    m = OpenEvolveEdit(config(diff_based=False)).mutate(mctx(work, PromptRun(PLACEMENT)))
    prompt = ensemble.requests[0]["messages"][-1]["content"]
    assert "whole new file" in prompt and "<<<<<<< SEARCH" not in prompt
    assert (work / "prompt.md").read_text() == "Rewritten.\n" and m.details["diff_based"] is False


def test_nothing_of_the_gate_or_sealed_splits_reaches_the_prompt(
    ensemble: StubLLM, tmp_path: Path
) -> None:
    """A reward hacker's view: the prompt is the mutator's only window on the run. Even a
    template that dumps every name it is given shows train results only."""
    dump = tmp_path / "dump.j2"
    dump.write_text(
        "{{ scores }} {{ train }} {{ top_programs }} {{ inspirations }} {{ previous }}"
        " {{ placement }} {{ failures }} {{ passing }} {{ files }} {{ lessons }}\n"
        "prompt.md\n```\n<<<<<<< SEARCH\nSolve the task.\n=======\nx\n>>>>>>> REPLACE\n```"
    )
    for template in (None, dump):
        (folder := tmp_path / str(template is None)).mkdir()
        work = work_tree(folder, {"prompt.md": SEED_PROMPT})
        run = PromptRun(PLACEMENT)
        OpenEvolveEdit(config(template=template)).mutate(mctx(work, run))
        prompt = ensemble.requests[-1]["messages"][-1]["content"]
        assert str(GATE_SCORE)[:5] not in prompt and "gate" not in prompt.lower()
        assert "sealed" not in prompt.lower() and "SECRET LESSON" not in prompt
        assert not any(a.endswith((":gate", ":sealed")) for a in run.asked if "trajector" in a)
        assert "score:sealed" not in run.asked


def test_the_ensemble_draw_follows_the_weights_and_is_recorded(
    ensemble: StubLLM, tmp_path: Path
) -> None:
    cfg = config()
    rng = random.Random(11)
    draws = Counter(draw_model(cfg, rng) for _ in range(10_000))
    assert draws["fast"] / 10_000 == pytest.approx(0.8, abs=0.02)
    assert draws["strong"] / 10_000 == pytest.approx(0.2, abs=0.02)
    assert cfg.model == "fast"  # the first member is the operator's model
    seen = []
    for seed in range(12):
        (folder := tmp_path / str(seed)).mkdir()
        work = work_tree(folder, {"prompt.md": SEED_PROMPT})
        m = OpenEvolveEdit(cfg).mutate(mctx(work, PromptRun(PLACEMENT), seed))
        upstream = ensemble.requests[-1]["model"]
        assert upstream == {"fast": "stub-fast", "strong": "stub-strong"}[m.details["model"]]
        seen.append(m.details["model"])
    assert set(seen) == {"fast", "strong"}  # both members drawn across seeds


def test_ensemble_members_are_model_references_of_the_recipe() -> None:
    cfg = {"models": [{"model": "fast", "weight": 0.8}, {"model": "strong", "weight": 0.2}]}
    assert named_models(cfg) == {"fast", "strong"}
    assert references({"mutate": cfg})["slots.mutate.config.models[1].model"] == "strong"
