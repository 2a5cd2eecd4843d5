"""The Darwin Gödel Machine as published (issue 31; the audit's T-D1 and T-D3): a child a
staged evaluation stops is archived with its stage score and drawn with DGM's weight,
children are counted from the archive, and the entry a model diagnoses is one the parent
failed (or one of DGM's special entries), shown with its full log and the verifier's
output. T-D2 (the parent's own agent improving itself) is in
``test_faithful_methods_e2e.py``."""

from __future__ import annotations

import functools
import json
import math
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, events, make_mini, status_json

from rsiframe import llm
from rsiframe.api import AnalyzeContext, CandidateView, ProposalSkipped, Rollout, SelectContext
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators.dgm import ScoreChildProp, ScoreChildPropConfig, children_counts
from rsiframe.operators.dgm_entry import DgmEntry, DgmEntryConfig, choose_entry
from rsiframe.recipe.models import ModelSpec


def cand(cid: str, parent: str | None = None, state: str = "admitted", stop: str | None = None):
    return CandidateView(cid, parent, 1, state, "c" * 40, cid, stopped_at=stop)


class View:
    lessons = ""

    def __init__(self, cands: list[CandidateView], scores: dict[tuple[str, str], float]) -> None:
        self._c, self._s = {c.id: c for c in cands}, scores

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        return self._s.get((cid, split))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_a_child_stopped_at_stage_one_is_drawn_with_its_stage_score() -> None:
    # T-D1: c2 was archived at train@1 with 0.1 (no train score); c3 is in flight and c4 was
    # rejected: DGM counts only archived children
    cands = [
        cand("c0"),
        cand("c1", "c0"),
        cand("c2", "c0", stop="train@1"),
        cand("c3", "c1", state="evaluating"),
        cand("c4", "c1", state="rejected"),
    ]
    scores = {("c0", "train"): 0.5, ("c1", "train"): 0.7, ("c2", "train@1"): 0.1}
    run = View(cands, scores)
    assert children_counts(run, archived=True) == Counter({"c0": 2})  # type: ignore[arg-type]
    raw = {
        "c0": sigmoid(10 * (0.5 - 0.5)) / 3,
        "c1": sigmoid(10 * (0.7 - 0.5)) / 1,
        "c2": sigmoid(10 * (0.1 - 0.5)) / 1,
    }
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    op = ScoreChildProp(ScoreChildPropConfig(split="train", children="archived"))
    n = 8000
    picks = Counter(
        op.select(SelectContext(run, random.Random(s), 1)).parent  # type: ignore[arg-type]
        for s in range(n)
    )
    for cid, p in want.items():
        assert abs(picks[cid] / n - p) < 0.02, (cid, picks[cid] / n, p)


def test_children_stopped_at_a_stage_are_archived_in_a_real_run(tmp_path: Path) -> None:
    # every child must solve both fixed stage-1 tasks; the ones that do not are archived
    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    out = mini.run_dir()
    sets = [
        "slots.select={operator: score_child_prop, config: {split: train, children: archived}}",
        "slots.gate={operator: keep_all}",
        "evaluator.stages=[{split: train, tasks: 2, min_score: 1.0, on_fail: archive}]",
    ]
    res = cli("run", mini.recipe, "--out", out, "--quiet", *[a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    children = [c for c in status["candidates"] if c["parent"]]
    stopped = [c for c in children if c["stopped_at"]]
    assert stopped, [c["scores"] for c in children]
    for c in stopped:  # admitted with the stage's score, no train or gate record
        assert c["state"] == "admitted" and c["stopped_at"] == "train@1"
        assert c["scores"]["train"] is None and c["scores"]["gate"] is None
    gated = {e["data"]["id"]: e["data"] for e in events(out) if e["type"] == "candidate_gated"}
    assert all(gated[c["id"]]["stopped"]["score"] < 1.0 for c in stopped)
    assert cli("verify", out).exit_code == 0
    # a stopped child may be a parent (a stepping stone): the second generation could draw it
    assert status["state"] == "finished"


# -- T-D3: DGM's entry and its diagnosis ---------------------------------------------------


ROWS = [
    {"task": "t1", "reward": 1.0, "app_changed": ["a.py"]},
    {"task": "t2", "reward": 0.0, "app_changed": ["a.py"]},
    {"task": "t3", "reward": 0.0, "app_changed": ["b.py"]},
    {"task": "t4", "reward": 0.0, "app_changed": []},  # an empty patch
]


def test_the_entry_is_a_failed_task_or_one_of_dgms_special_entries() -> None:
    cfg = DgmEntryConfig(model="m")
    seen: Counter[str] = Counter()
    for s in range(4000):
        e = choose_entry(ROWS, random.Random(s), cfg, {})
        seen[e if isinstance(e, str) else e["task"]] += 1
    # a quarter empty patches (25 % of the tasks left no change), then a quarter of the
    # rest stochasticity; never a solved task; context length never (no such error logged)
    assert set(seen) == {"solve_empty_patches", "solve_stochasticity", "t2", "t3"}
    assert abs(seen["solve_empty_patches"] / 4000 - 0.25) < 0.03
    assert abs(seen["solve_stochasticity"] / 4000 - 0.75 * 0.25) < 0.03
    assert choose_entry([r for r in ROWS if r["reward"] == 1.0], random.Random(1), cfg, {}) in (
        None,
        "solve_stochasticity",
    )
    logs = {"t2": "Error: input too long for the model's context length"}
    drawn = [choose_entry(ROWS[:3], random.Random(s), cfg, logs) for s in range(200)]
    assert "solve_contextlength" in drawn


class EvidenceView:
    """Artifacts of one certified trajectory: its full agent log and verifier output."""

    def __init__(self, blobs: dict[str, bytes], files: dict[str, str]) -> None:
        self.blobs, self.files = blobs, files

    def artifact(self, digest: str) -> bytes:
        return self.blobs[digest]

    def read_file(self, cid: str, path: str) -> bytes:
        return self.files[path].encode()


DIAGNOSIS = {
    "log_summarization": "it wrote nothing useful",
    "potential_improvements": ["check the file after writing"],
    "improvement_proposal": "verify writes",
    "implementation_suggestion": "After write_file, read the file back in agent.py.",
    "problem_description": "The agent never checks what it wrote.",
}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[StubLLM]:
    stub = StubLLM(Script(answers=[Answer(content="```json\n" + json.dumps(DIAGNOSIS) + "\n```")]))
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate({"base_url": srv.url, "model": "stub", "retries": 0})
    gw = Gateway({"proposer": spec}, Ledger(tmp_path / "gw"), environ={}).start()
    client = gw.client("analyze:c1", candidate="c1", slot="analyze")
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c1", slot="analyze")
    try:
        with llm.use(client, endpoints):
            yield stub
    finally:
        gw.stop()
        srv.stop()


def _ctx(run: Any, rows: list[dict[str, Any]], seed: int) -> AnalyzeContext:
    parent = CandidateView("c0", None, 0, "admitted", "abc", "def")
    return AnalyzeContext(run, random.Random(seed), 1, parent, Rollout(trajectories=rows))


def test_the_diagnosis_holds_the_failed_tasks_full_log_and_verifier_output(
    gateway: StubLLM,
) -> None:
    log = "step 0: read /app/gcd.py\n" + "thinking...\n" * 2000 + "step 5: gave up\n"
    traj = {"artifacts": {"agent.stdout": "a1", "verifier.stdout": "v1", "app/gcd.py": "p1"}}
    blobs = {
        "t2traj": json.dumps(traj).encode(),
        "a1": log.encode(),
        "v1": b"case 2 of 5 failed: got 4",
        "p1": b"def gcd(a, b):\n    return a\n",
    }
    run = EvidenceView(blobs, {"agent.py": "# the agent's own code\n"})
    rows = [
        {"task": "t1", "reward": 1.0, "trajectory": "none", "app_changed": ["x"]},
        {
            "task": "t2",
            "reward": 0.0,
            "trajectory": "t2traj",
            "instruction": "Fix gcd.",
            "stdout_tail": "step 5: gave up",
            "app_changed": ["gcd.py"],
        },
    ]
    # a seed whose draws skip the special entries: the failed task is the entry
    seed = next(
        s
        for s in range(100)
        if not isinstance(
            choose_entry(rows, random.Random(s), DgmEntryConfig(model="proposer"), {}), str
        )
    )
    op = DgmEntry(DgmEntryConfig(model="proposer", code=["agent.py"]))
    a = op.analyze(_ctx(run, rows, seed))
    prompt = gateway.requests[0]["messages"][-1]["content"]
    assert a.details["entry"] == "t2" and not a.details["special"]
    assert log.strip() in prompt  # the full log, not a tail
    assert "case 2 of 5 failed: got 4" in prompt and "Fix gcd." in prompt
    assert "return a" in prompt and "# the agent's own code" in prompt
    assert a.details["problem_statement"] == a.summary
    assert a.summary.startswith("# To implement\n\nAfter write_file, read the file back")
    assert "never checks what it wrote" in a.summary


def test_a_parent_that_failed_nothing_has_no_entry(gateway: StubLLM) -> None:
    rows = [{"task": "t1", "reward": 1.0, "app_changed": ["x"]}]
    seed = next(
        s
        for s in range(100)
        if choose_entry(rows, random.Random(s), DgmEntryConfig(model="m"), {}) is None
    )
    with pytest.raises(ProposalSkipped, match="failed no train task"):
        DgmEntry(DgmEntryConfig(model="proposer")).analyze(_ctx(EvidenceView({}, {}), rows, seed))
    assert gateway.requests == []
