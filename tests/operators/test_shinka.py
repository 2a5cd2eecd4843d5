"""ShinkaEvolve's operators against the stub through a real gateway: embedding novelty
rejection sampling, the UCB1 bandit over models, the meta-scratchpad's cadence."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe import llm
from rsiframe.api import NoveltyContext, ReflectContext
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators.llm_edit import LlmEdit, LlmEditConfig
from rsiframe.operators.shinka import (
    EmbedReject,
    EmbedRejectConfig,
    MetaScratchpad,
    MetaScratchpadConfig,
    UcbEdit,
    UcbEditConfig,
)
from rsiframe.recipe.models import ModelSpec
from tests.support.llmops import mctx, work_tree
from tests.support.runview import FakeRun, cand


@dataclasses.dataclass
class Rig:
    stub: StubLLM
    gw: Gateway
    folder: Path

    def entries(self) -> list[dict[str, Any]]:
        lines = (self.folder / "ledger.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines]


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    """The stub (embeddings ``hashed`` or ``same``, chat answers) behind a real gateway."""
    mode, answers = request.param
    stub = StubLLM(Script(answers=list(answers), embeddings=mode))
    srv = ServerThread(stub.app).start()
    spec = {"base_url": srv.url, "model": "stub", "retries": 0}
    specs = {n: ModelSpec.model_validate(spec) for n in ("embedder", "proposer")}
    folder = tmp_path / "gw"
    gw = Gateway(specs, Ledger(folder), environ={}).start()
    client = gw.client("novelty:c9", candidate="c9", slot="novelty")
    try:
        with llm.use(client):
            yield Rig(stub, gw, folder)
    finally:
        gw.stop()
        srv.stop()


def stubbed(mode: str, *answers: Answer) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("rig", [(mode, answers)], indirect=True)


# -- embed_reject ----------------------------------------------------------------------

ARCHIVE = [cand("c0"), cand("c1", "c0")]
FILES = {"prompt.md": b"You are a careful Python programmer.\n"}


def nctx(work: Path, attempt: int, run: FakeRun) -> NoveltyContext:
    changes = [{"kind": "modified", "path": "prompt.md"}]
    return NoveltyContext(run, random.Random(0), 1, "c9", ARCHIVE[1], "t9", changes, attempt, work)


@stubbed("same")
def test_identical_embeddings_re_propose_the_child_n_times_then_reject_it(
    rig: Rig, tmp_path: Path
) -> None:
    work = work_tree(tmp_path, {"prompt.md": "Something else entirely, with other words.\n"})
    op = EmbedReject(EmbedRejectConfig(embed_model="embedder", max_attempts=3))
    run = FakeRun(ARCHIVE, {"c0": 0.2, "c1": 0.4}, files=FILES)
    checks = [op.novelty(nctx(work, attempt, run)) for attempt in range(4)]
    assert [(c.ok, c.retry) for c in checks] == [(False, True)] * 3 + [(False, False)]
    assert "cosine 1.0000 >= 0.99" in checks[-1].reason
    # one metered embeddings call (child + 2 archive members), then vectors reused
    calls = [e for e in rig.entries() if e["path"] == "/v1/embeddings"]
    assert len(calls) == 1 and calls[0]["slot"] == "novelty" and calls[0]["prompt_tokens"] > 0
    assert rig.stub.requests[0]["input"][0].startswith("# prompt.md\nSomething else")


@stubbed("hashed")
def test_a_child_whose_code_differs_passes_and_a_copy_does_not(rig: Rig, tmp_path: Path) -> None:
    op = EmbedReject(EmbedRejectConfig(embed_model="embedder"))
    run = FakeRun(ARCHIVE, {"c0": 0.2, "c1": 0.4}, files=FILES)
    other = work_tree(tmp_path, {"prompt.md": "Clamp with care and test every edge case.\n"})
    assert op.novelty(nctx(other, 0, run)).ok
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "prompt.md").write_bytes(FILES["prompt.md"])
    check = op.novelty(nctx(copy, 0, run))
    assert (check.ok, check.retry) == (False, True)


# -- ucb_edit's bandit -----------------------------------------------------------------


class BanditRun(FakeRun):
    """A run whose children carry mutation reports naming their model."""

    def __init__(self) -> None:
        super().__init__([cand("c0")], {"c0": 0.5})
        self.reports: dict[str, bytes] = {}

    def add_child(self, model: str, delta: float) -> None:
        i = len(self._c)
        cid = f"c{i}"
        self.reports[f"m{i}"] = json.dumps({"details": {"model": model}}).encode()
        c = dataclasses.replace(cand(cid, "c0"), mutation=f"m{i}")
        self._c[cid] = c
        self._gate[cid] = 0.5 + delta

    def artifact(self, digest: str) -> bytes:
        return self.reports[digest]


def reference_ucb1(pulls: dict[str, int], rewards: dict[str, float], c: float) -> str:
    """UCB1 over clipped, max-normalised mean rewards, written out independently."""
    t = sum(pulls.values())
    top = max(max(r, 0.0) for r in rewards.values())
    score = {
        m: max(rewards[m], 0.0) / top + c * math.sqrt(2 * math.log(t) / n) for m, n in pulls.items()
    }
    return max(score, key=lambda m: score[m])


def test_bandit_counts_under_a_deterministic_reward_follow_ucb1(tmp_path: Path) -> None:
    delta = {"small": 0.1, "large": 0.3, "bad": -0.2}  # child gate - parent gate, per model
    op = UcbEdit(UcbEditConfig(models=list(delta), epsilon=0.0, exploration=0.5))
    run = BanditRun()
    ctx = dataclasses.replace(mctx(tmp_path), run=run)
    chosen, pulls = [], Counter[str]()
    for step in range(40):
        model, how, _state = op.choose(dataclasses.replace(ctx, rng=random.Random(step)))
        if step < 3:
            assert how == "unpulled"  # every model is tried once first
        else:
            assert (how, model) == ("ucb", reference_ucb1(dict(pulls), delta, 0.5))
        chosen.append(model)
        pulls[model] += 1
        run.add_child(model, delta[model])
    arms = op.arms(run)
    assert {m: a.pulls for m, a in arms.items()} == dict(pulls)
    assert pulls["large"] > pulls["small"] > pulls["bad"] >= 1
    assert arms["bad"].reward == 0.0  # a worse child is clipped to 0, not negative


def test_bandit_epsilon_plays_a_non_maximiser(tmp_path: Path) -> None:
    run = BanditRun()
    for model, d in (("a", 0.3), ("b", 0.0)):
        run.add_child(model, d)
    op = UcbEdit(UcbEditConfig(models=["a", "b"], epsilon=1.0, exploration=0.0))
    ctx = dataclasses.replace(mctx(tmp_path), run=run)
    assert op.choose(ctx)[:2] == ("b", "epsilon")


@stubbed(
    "hashed", Answer(content="prompt.md\n<<<<<<< SEARCH\nhello\n=======\nhi\n>>>>>>> REPLACE\n")
)
def test_ucb_edit_calls_the_chosen_model_and_records_it(rig: Rig, tmp_path: Path) -> None:
    run = BanditRun()
    op = UcbEdit(UcbEditConfig(models=["proposer"], epsilon=0.0))
    work = work_tree(tmp_path, {"prompt.md": "hello\n"})
    ctx = dataclasses.replace(mctx(work), run=run)
    mutation = op.mutate(ctx)
    assert (work / "prompt.md").read_text() == "hi\n"
    assert mutation.details["model"] == "proposer"
    assert mutation.details["bandit"]["chosen"] == "proposer"
    assert rig.entries()[-1]["model"] == "proposer"


# -- meta_scratchpad -------------------------------------------------------------------

PAD = "- prompt lines about clamping helped\n- rewriting agent.py broke the tool loop"


@stubbed("hashed", Answer(content=PAD))
def test_the_scratchpad_is_written_every_k_generations_and_shown_to_mutate(
    rig: Rig, tmp_path: Path
) -> None:
    kids = [
        dataclasses.replace(cand("c1", "c0", description="add a clamp hint"), generation=1),
        dataclasses.replace(
            cand("c2", "c0", state="declined", description="rewrite"), generation=2
        ),
    ]
    run = FakeRun([cand("c0"), *kids], {"c0": 0.2, "c1": 0.6, "c2": 0.1})
    op = MetaScratchpad(MetaScratchpadConfig(model="proposer", interval=2))

    def reflect(g: int, previous: str) -> str:
        return op.reflect(ReflectContext(run, random.Random(g), g, previous)).lessons

    assert reflect(1, "old pad\n") == "old pad\n"  # not due: kept, no model call
    assert rig.stub.requests == []
    pad = reflect(2, "old pad\n")
    assert pad == PAD + "\n"
    (request,) = rig.stub.requests
    prompt = request["messages"][0]["content"]
    assert "c1 [kept] gate 0.600 (+0.400): add a clamp hint" in prompt
    assert "c2 [not kept] gate 0.100 (-0.100): rewrite" in prompt
    assert "old pad" in prompt
    assert reflect(3, pad) == pad and len(rig.stub.requests) == 1

    # the next mutation prompt shows it (context: lessons)
    edit = LlmEdit(LlmEditConfig(model="proposer", context={"lessons": True}, retries=0))
    work = work_tree(tmp_path, {"prompt.md": "hello\n"})
    with pytest.raises(llm.ModelError):  # the stub has no edit to answer: the prompt is the point
        edit.mutate(dataclasses.replace(mctx(work), lessons=pad))
    assert PAD in rig.stub.requests[-1]["messages"][0]["content"]
