"""Model-driven methods through the real CLI, their model calls through the run's gateway
to the scripted stub: each policy operator with llm_edit on the mini project, and the
ahe, aevolve and hyperagents-llm recipes end to end on sat3 with a small budget."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe.archive.log import get_artifact
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from tests.support.cli import cli, events, status_json
from tests.support.mini import make_mini
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

MODELS = """\
models:
  proposer: {base_url_env: LLM_BASE_URL, api_key_env: LLM_API_KEY, model: stub, retries: 0,
             price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}
"""


@pytest.fixture
def stub(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    s = StubLLM(Script(answers=list(request.param)))
    srv = ServerThread(s.app).start()
    monkeypatch.setenv("LLM_BASE_URL", srv.url)
    monkeypatch.setenv("LLM_API_KEY", "stub-key")
    try:
        yield s
    finally:
        srv.stop()


def scripted(answers: list[Answer]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("stub", [answers], indirect=True)


def model_calls(run: Path) -> list[dict]:
    return [e["data"] for e in events(run) if e["type"] == "model_call"]


def whole_config(level: int, style: str) -> Answer:
    return Answer(
        content=f"Set level {level}.\nconfig.yaml\n```\nlevel: {level}\nstyle: {style}\n```"
    )


#: distinct whole-file answers for the mini project's config.yaml (no two trees alike)
MINI_EDITS = [
    whole_config(level, style)
    for level, style in itertools.product([3, 5, 2, 7, 4, 9, 6, 8], ["fancy", "plain"])
]


@scripted(MINI_EDITS)
@pytest.mark.parametrize(
    "sets",
    [
        ["slots.select.operator=score_child_prop", "slots.gate.operator=keep_all"],
        [
            "slots.select.operator=pareto",
            "slots.merge={operator: three_way, rate: 0.5}",
            "slots.validate={operator: minibatch, config: {size: 2}}",
        ],
        ["slots.select.operator=islands", "slots.gate.operator=paired_test"],
        [
            "slots.select.operator=tournament",
            "slots.gate={operator: threshold, config: {min_score: 0.2}}",
        ],
    ],
)
def test_each_policy_operator_runs_with_llm_edit_through_the_gateway(
    stub: StubLLM, tmp_path: Path, sets: list[str]
) -> None:
    mini = make_mini(tmp_path / "proj", generations=2, children=2, extra=MODELS)
    args = [
        "slots.mutate.operator=llm_edit",
        "slots.mutate.config={model: proposer, max_tokens: 256, retries: 0, temperature: 0.7}",
        *sets,
    ]
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", *[a for s in args for a in ("--set", s)])
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 4
    # every model call the stub answered is metered and recorded, to a candidate
    calls = model_calls(out)
    assert len(calls) == status["model_calls"] > 0
    assert len([c for c in calls if not c["cached"]]) == len(stub.requests)
    assert {c["slot"] for c in calls} == {"mutate"}
    assert {c["candidate"] for c in calls} <= {c["id"] for c in children}
    assert status["model_tokens"] == stub.stats.prompt_tokens + stub.stats.completion_tokens
    assert any(c["description"].startswith("Set level") for c in children)
    assert cli("verify", out).exit_code == 0


ANALYSIS = "You diagnose failures"
EDIT = "SEARCH/REPLACE"


SOLVER = (REPO / "tasks" / "sat3" / "seed" / "solver.yaml").read_text().splitlines()


def sat3_edit(old: str, new: str, note: str, also: str = "") -> Answer:
    """An edit of the seed's whole ``old``-prefixed line of solver.yaml to ``new``."""
    line = next(x for x in SOLVER if x.startswith(old))
    old, new = line, line.replace(old, new, 1)
    body = f"{note}\nsolver.yaml\n```\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```"
    return Answer(content=body + also, when=EDIT)


def _run_sat3(recipe: str, out: Path, *sets: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", REPO / "recipes" / "sat3" / recipe, "--out", out, "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished", status
    return status


def proposals(out: Path) -> list[dict]:
    return [
        e["data"] for e in events(out) if e["type"] == "candidate_proposed" and e["data"]["parent"]
    ]


#: a manifest that predicts every sat3 train task fixed: one knob change cannot hold to it
ALL_TRAIN = [f"uf75-{i:03d}" for i in range(1, 61)]
MANIFEST = Answer(
    content=json.dumps(
        {
            "summary": "branching is naive",
            "causes": ["first-variable branching wastes decisions"],
            "edits": [{"change": "smarter branching", "fixes": ALL_TRAIN}],
            "at_risk": [],
        }
    ),
    when=ANALYSIS,
    repeat=True,
)


def declared(change: str, fixes: list[str], risks: list[str], decision: str = "") -> str:
    """A CHANGE MANIFEST block (llm_edit ``declare: true``) after an edit."""
    body = {"changes": [{"change": change, "files": ["solver.yaml"], "predicted_fixes": fixes,
                         "risk_tasks": risks, "decision": decision}]}  # fmt: skip
    return f"\nCHANGE MANIFEST:\n```json\n{json.dumps(body)}\n```\n"


@scripted(
    [
        MANIFEST,
        sat3_edit(
            "branching: first ",
            "branching: moms ",
            "MOMS branching.",
            declared("moms branching", ALL_TRAIN, ALL_TRAIN[:5]),
        ),
        sat3_edit(
            "pure_literals: false",
            "pure_literals: true",
            "Pure literals.",
            declared("pure literals", ALL_TRAIN[:3], [], "keep moms branching"),
        ),
        sat3_edit(
            "polarity: negative ",
            "polarity: positive ",
            "Positive polarity.",
            declared("positive polarity", ALL_TRAIN[:3], []),
        ),
    ]
)
def test_ahe_editor_declares_its_changes_and_gets_their_attribution_next(
    stub: StubLLM, tmp_path: Path
) -> None:
    out = tmp_path / "ahe"
    status = _run_sat3("ahe.yaml", out, "budget.max_generations=3")
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 3
    # AHE's loop is linear: the next parent is the newest judged child, the editor decides
    props = proposals(out)
    assert props[1]["parent"] == props[0]["id"]
    assert props[1]["reason"].startswith(f"newest judged {props[0]['id']} (")
    assert props[1]["reason"].endswith("the editor decides per change")
    # the declared manifest travels with the edit, in the mutation's result
    mutated = {e["data"]["id"]: e["data"] for e in events(out) if e["type"] == "candidate_mutated"}
    first = json.loads(get_artifact(out, mutated[props[0]["id"]]["mutation"]))
    assert first["details"]["manifest"]["changes"][0]["change"] == "moms branching"
    # the analysis' evidence reached the first edit; its attribution report the second
    edits = [
        r["messages"][-1]["content"] for r in stub.requests if EDIT in r["messages"][-1]["content"]
    ]
    assert "Change manifest" in edits[0] and "Change attribution" not in edits[0]
    assert f"Change attribution for {props[0]['id']}" in edits[1]
    assert "- change 1: " in edits[1] and "'moms branching' fixed " in edits[1]
    assert "solver.yaml before it (restore this to roll back)" in edits[1]
    digests = [e["data"]["lessons"] for e in events(out) if e["type"] == "generation_reflected"]
    assert "moms branching" in get_artifact(out, digests[-1]).decode()
    calls = model_calls(out)
    assert {c["slot"] for c in calls} == {"analyze", "mutate"}
    assert cli("verify", out).exit_code == 0


RULE = "Keep what the lessons say worked. You may also improve these instructions."

#: each edit touches its own knob, so it applies to any state the search is in
INDEPENDENT = [
    sat3_edit("polarity: negative ", "polarity: positive ", "Positive polarity."),
    sat3_edit("pure_literals: false", "pure_literals: true", "Pure literals."),
    sat3_edit("  strategy: none ", "  strategy: luby ", "Luby restarts."),
]


@scripted(
    [
        sat3_edit(
            "branching: first ",
            "branching: moms ",
            "MOMS, noted.",
            "\nworkspace/memory.md\n```\n<<<<<<< SEARCH\nnewest last. The\n=======\n"
            "newest last. Tried: moms branching. The\n>>>>>>> REPLACE\n```",
        ),
        *INDEPENDENT,
    ]
)
def test_aevolve_evolves_its_workspace_end_to_end(stub: StubLLM, tmp_path: Path) -> None:
    out = tmp_path / "aevolve"
    # (the convergence stop is off here: this test counts four children)
    _run_sat3("aevolve.yaml", out, "budget.max_generations=4", "slots.select.config.converge=null")
    changed = [
        {c["path"] for c in e["data"]["changes"]}
        for e in events(out)
        if e["type"] == "candidate_mutated" and e["data"]["changes"]
    ]
    assert len(changed) == 4 and {"solver.yaml", "workspace/memory.md"} in changed
    reasons = [p["reason"] for p in proposals(out)]
    # the rollback rule itself is tested on synthetic views (tests/operators/test_aevolve.py)
    forms = ("newest state is the best", "continue from", "rollback to")
    assert all(r.startswith(forms) for r in reasons), reasons
    assert cli("verify", out).exit_code == 0


@scripted(
    [
        sat3_edit(
            "branching: first ",
            "branching: moms ",
            "MOMS, and a rule for next time.",
            f"\nmeta/instructions.md\n```\n<<<<<<< SEARCH\n{RULE}\n=======\n"
            f"{RULE} Try polarity next.\n>>>>>>> REPLACE\n```",
        ),
        *INDEPENDENT,
    ]
)
def test_hyperagents_llm_evolves_its_own_instructions(stub: StubLLM, tmp_path: Path) -> None:
    out = tmp_path / "hyperagents"
    status = _run_sat3(
        "hyperagents-llm.yaml", out, "budget.max_generations=2", "children_per_generation=2"
    )
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 4
    mutated = [e["data"] for e in events(out) if e["type"] == "candidate_mutated"]
    assert len(mutated) == 5  # the seed and every child: each edit applied
    assert any(
        {"path": "meta/instructions.md", "kind": "modified"} in m["changes"] for m in mutated
    )
    prompts = [r["messages"][0]["content"] for r in stub.requests]
    assert all("Your own instructions, from meta/instructions.md" in p for p in prompts)
    # a child made from the first child's tree was shown its rewritten instructions
    first = proposals(out)[0]["id"]
    made_from_first = [p for p in proposals(out) if p["parent"] == first]
    if made_from_first:
        assert any("Try polarity next." in p for p in prompts)
    assert cli("verify", out).exit_code == 0
