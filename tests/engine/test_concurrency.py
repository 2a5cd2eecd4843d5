"""Candidates in flight: generational determinism, steady mode, budgets, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini, outcome, run_named


def test_generational_k1_and_k4_give_the_same_candidates(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "proj", generations=3, children=4)
    one = run_named(mini, "k1", "concurrency.candidates=1")
    four = run_named(mini, "k4", "concurrency.candidates=4")
    a, b = outcome(one), outcome(four)
    assert a == b
    assert len(a["rows"]) == 13  # the seed and 3 generations of 4
    assert a["champion"] is not None
    for out in (one, four):
        report = json.loads(cli("verify", out, "--json").stdout)
        assert report["ok"], report["problems"]
    # with K=4 the children of a generation really were in flight together
    assert most_in_flight(events(four)) >= 2
    assert most_in_flight(events(one)) == 1


def most_in_flight(evs: list[dict]) -> int:
    """The most children between their proposal and the end of their gate evaluation."""
    live: set[str] = set()
    most = 0
    for e in evs:
        d = e["data"]
        if e["type"] == "candidate_proposed" and d["id"] != "c0000":
            live.add(d["id"])
        elif e["type"] in ("candidate_rejected", "candidate_abandoned") or (
            e["type"] == "evaluation_certified" and d["split"] == "gate"
        ):
            live.discard(d["id"])
        most = max(most, len(live))
    return most


def test_generational_gates_in_candidate_order_after_the_whole_generation(mini: Mini) -> None:
    out = run_named(mini, "k2", "concurrency.candidates=2", "budget.max_generations=2")
    evs = events(out)
    gated = [e["data"]["id"] for e in evs if e["type"] == "candidate_gated"]
    assert gated == sorted(gated)
    generation = {
        e["data"]["id"]: e["data"]["generation"] for e in evs if e["type"] == "candidate_proposed"
    }
    for i, e in enumerate(evs):  # no child is gated before all of its generation is certified
        if e["type"] == "candidate_gated" and e["data"]["id"] != "c0000":
            gen = generation[e["data"]["id"]]
            members = {c for c, g in generation.items() if g == gen}
            ended = {
                x["data"]["id"]
                for x in evs[:i]
                if x["type"] in ("candidate_rejected", "candidate_abandoned")
                or (x["type"] == "evaluation_certified" and x["data"]["split"] == "gate")
            }
            assert members <= ended


def test_steady_mode_runs_to_the_end_and_verifies(mini: Mini) -> None:
    out = run_named(
        mini,
        "steady",
        "concurrency.candidates=3",
        "concurrency.mode=steady",
        "budget.max_generations=3",
    )
    st = status_json(out)
    assert st["state"] == "finished", st["reason"]
    assert len(st["candidates"]) == 1 + 3 * 2
    report = json.loads(cli("verify", out, "--json").stdout)
    assert report["ok"], report["problems"]


@pytest.mark.parametrize("mode", ["generational", "steady"])
def test_budgets_count_work_in_flight(mini: Mini, mode: str) -> None:
    out = run_named(
        mini,
        f"budget-{mode}",
        "concurrency.candidates=4",
        f"concurrency.mode={mode}",
        "budget.max_generations=9",
        "budget.max_evaluations=10",
        "budget.max_candidates=5",
    )
    st = status_json(out)
    assert st["state"] == "budget_exhausted", st["reason"]
    evals = [e for e in events(out) if e["type"] == "evaluation_started"]
    assert len(evals) <= 10
    assert st["budget"]["used"]["candidates"] <= 5
    champ = st["champion"]
    sealed = [e for e in evals if e["data"]["split"] == "sealed"]
    assert champ is None or any(e["data"]["id"] == champ for e in sealed)


@pytest.mark.parametrize(
    ("value", "key"), [("0", "candidates"), ("65", "candidates"), ("wild", "mode")]
)
def test_bad_concurrency_is_one_line_and_no_run_folder(mini: Mini, value: str, key: str) -> None:
    out = mini.run_dir("bad")
    res = cli("run", mini.recipe, "--out", out, "--set", f"concurrency.{key}={value}")
    assert res.exit_code == 2
    assert f"concurrency.{key}" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()


def test_evaluations_in_flight_share_the_model_token_budget() -> None:
    from types import SimpleNamespace

    from rsiframe.archive import events as E
    from rsiframe.engine.budget import BudgetGuard, TaskCosts
    from rsiframe.engine.evaluation import TaskRunner
    from rsiframe.engine.hooks import Lifecycle, Notice
    from rsiframe.recipe.schema import Budget
    from rsiframe.slots.calls import Timings

    state = SimpleNamespace(tokens=200, eval_tokens_per_task=0.0)
    budget = BudgetGuard(Budget(max_model_tokens=1000), costs=TaskCosts(sealed=3))

    def runner(share: int) -> TaskRunner:
        return TaskRunner(None, None, None, None, None, budget, state, Timings(), share=share)  # type: ignore[arg-type]

    tr = runner(1)
    assert tr.reserve_tokens(1) == 800  # K=1: everything left
    tr.release_tokens(1)
    four = runner(4)
    grants = [four.reserve_tokens(k) for k in range(4)]
    assert sum(grants) <= 800 and grants[0] == 200
    tr._unfolded = 300  # reported by a worker, not folded yet: still counted
    assert tr.reserve_tokens(9) == 500
    usage = E.UsageSpent(id="c0001", slot="evaluate", tokens=300)
    tr.on_tokens_spent(Notice(Lifecycle.MODEL_TOKENS_SPENT, None, usage))  # type: ignore[arg-type]
    tr.release_tokens(9)
    assert tr.reserve_tokens(9) == 800
    tr.release_tokens(9)
    # evaluations spent 50 tokens per task: the 3 sealed tasks' 150 are held for the
    # champion's sealed evaluation, which alone may be granted them
    state.eval_tokens_per_task = 50.0
    assert tr.reserve_tokens(9) == 650
    tr.release_tokens(9)
    assert tr.reserve_tokens(9, anchor=True) == 800


SPY_SELECT = """
from rsiframe.api import SelectOperator, Selection


class Spy(SelectOperator):
    name = "spy"

    def select(self, ctx):
        busy = ("proposed", "mutated", "evaluating")
        open_ = [c for c in ctx.run.candidates() if c.state in busy]
        best = max(ctx.run.admitted(), key=lambda c: ctx.run.score(c.id, "gate") or 0.0)
        return Selection(parent=best.id, reason=f"in flight {len(open_)}")
"""


@pytest.mark.parametrize(("mode", "sees"), [("steady", True), ("generational", False)])
def test_select_sees_children_in_flight_only_in_steady_mode(
    mini: Mini, mode: str, sees: bool
) -> None:
    (mini.root / "spy.py").write_text(SPY_SELECT)
    out = run_named(
        mini,
        f"spy-{mode}",
        f"slots.select.operator={mini.root}/spy.py:Spy",
        "concurrency.candidates=3",
        f"concurrency.mode={mode}",
        "budget.max_generations=2",
    )
    seen = [
        int(e["data"]["reason"].split()[-1])
        for e in events(out)
        if e["type"] == "candidate_proposed" and e["data"]["parent"]
    ]
    assert (max(seen) > 0) == sees, seen


PRICED_MUTATE = """
from rsiframe import llm
from rsiframe.api import MutateOperator, Mutation, Usage


class Priced(MutateOperator):
    name = "priced"

    def mutate(self, ctx):
        msg = [{"role": "user", "content": "x" * 400}]  # 100 prompt tokens, 50 answer tokens
        llm.current().chat("proposer", msg, max_tokens=50, temperature=1.0)
        (ctx.workdir / "config.yaml").write_text(f"level: 2\\nstyle: {ctx.candidate_id}\\n")
        # a self-report decides nothing: the gateway's count does
        return Mutation(description="priced", usage=Usage(tokens=10**9, cost=1e9))
"""


@pytest.mark.parametrize("mode", ["generational", "steady"])
def test_mutations_in_flight_never_overrun_cost_or_tokens(mini: Mini, mode: str) -> None:
    from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM

    stub = StubLLM(Script(answers=[Answer(content="y" * 200, repeat=True)]))
    srv = ServerThread(stub.app).start()
    (mini.root / "priced.py").write_text(PRICED_MUTATE)
    price = "{input_per_mtok: 1000, output_per_mtok: 2000}"  # $0.2 a call
    mini.recipe.write_text(
        mini.recipe.read_text()
        + f"models:\n  proposer: {{base_url: '{srv.url}', model: stub, price: {price}}}\n"
    )
    try:
        out = run_named(
            mini,
            f"priced-{mode}",
            f"slots.mutate.operator={mini.root}/priced.py:Priced",
            "concurrency.candidates=4",
            f"concurrency.mode={mode}",
            "children_per_generation=4",
            "budget.max_generations=5",
            "budget.max_cost=0.7",
            "budget.max_model_tokens=500",
        )
    finally:
        srv.stop()
    st = status_json(out)
    assert st["state"] == "budget_exhausted", st["reason"]
    used = st["budget"]["used"]
    assert used["cost"] <= 0.7 and used["model_tokens"] <= 500, used
    assert used["model_tokens"] == 450 and used["cost"] == pytest.approx(0.6)  # three fit
    assert stub.stats.requests == st["models_by_slot"]["mutate"]["model_calls"] - sum(
        1 for e in events(out) if e["type"] == "model_call" and e["data"]["status"] != 200
    )


def seed_overlap(evs: list[dict]) -> int:
    """The most of the seed's evaluations running at once (started, not yet ended)."""
    live: set[str] = set()
    most = 0
    for e in evs:
        d = e["data"]
        if d.get("id") != "c0000" or "split" not in d:
            continue
        if e["type"] == "evaluation_started":
            live.add(d["split"])
        elif e["type"] in ("evaluation_certified", "evaluation_failed"):
            live.discard(d["split"])
        most = max(most, len(live))
    return most


@pytest.mark.parametrize(("k", "overlap"), [(1, 1), (2, 2), (4, 3)])
def test_the_seeds_splits_run_side_by_side_in_free_slots(mini: Mini, k: int, overlap: int) -> None:
    """The seed's train, gate and sealed evaluations do not depend on each other: free
    slots run them together (never more than K), and no child starts before the seed is
    admitted (issue 29, throughput at model latency)."""
    out = run_named(mini, f"k{k}", f"concurrency.candidates={k}", "budget.max_generations=1")
    evs = events(out)
    assert seed_overlap(evs) == overlap
    types = [(e["type"], e["data"].get("id")) for e in evs]
    admitted = types.index(("candidate_gated", "c0000"))
    first_child = next(
        i for i, t in enumerate(types) if t[0] == "candidate_proposed" and t[1] != "c0000"
    )
    assert admitted < first_child
    report = json.loads(cli("verify", out, "--json").stdout)
    assert report["ok"], report["problems"]
