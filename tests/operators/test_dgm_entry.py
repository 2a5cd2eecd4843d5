"""DGM's entry and its diagnosis (issue 31, the audit's T-D3): the entry a model diagnoses is
one train task the parent failed, or one of DGM's special entries with its probability,
shown to the model through the real gateway with the failed task's full log and the
verifier's output; a parent that failed nothing has no entry (the proposal is skipped)."""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe import llm
from rsiframe.api import AnalyzeContext, CandidateView, ProposalSkipped, Rollout
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators.dgm_entry import DgmEntry, DgmEntryConfig, choose_entry
from rsiframe.recipe.models import ModelSpec

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
