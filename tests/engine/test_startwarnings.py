"""Run-start warnings (issue 27): a validate minibatch not smaller than its split, and seeds
that cannot differ (no operator and no framework step draws from the run's random
generator), one line each on stderr, kept in ``run_started`` and shown by ``status``."""

from __future__ import annotations

from pathlib import Path

from rsiframe.api import RunStart
from rsiframe.engine.startwarnings import framework_draws, start_warnings
from rsiframe.operators.knobs import Knobs, KnobsConfig
from rsiframe.operators.minibatch import Minibatch, MinibatchConfig
from rsiframe.operators.select import Best, BestConfig, EpsilonGreedy, EpsilonGreedyConfig
from rsiframe.recipe import load as recipe_mod
from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini

STYLE = "[{file: config.yaml, key: style, choices: [plain, fancy]}]"
#: round-robin over one two-valued knob: every move is forced
FORCED = [
    "slots.mutate.config.order=round_robin",
    f"slots.mutate.config.knobs={STYLE}",
]


def start(train: int = 4, files: dict[str, bytes] | None = None, surface: tuple = ()) -> RunStart:
    return RunStart(
        splits={"train": train, "gate": 4, "sealed": 2},
        seed_file=lambda p: (files or {}).get(p),
        may_change=lambda p: p in surface or p == "config.yaml",
    )


def test_the_minibatch_warns_when_it_is_not_smaller_than_the_train_split() -> None:
    for size, train, warned in ((8, 6, True), (6, 6, True), (3, 6, False)):
        op = Minibatch(MinibatchConfig(size=size))
        lines = op.start_warnings(start(train))
        assert bool(lines) == warned, (size, train)
        assert op.draws(start(train)) == (not warned)  # the whole split is no draw
    (line,) = Minibatch(MinibatchConfig(size=8)).start_warnings(start(6))
    assert line.startswith("the minibatch of 8 is not smaller than the train split (6 tasks)")


def test_knobs_draw_unless_every_move_is_forced() -> None:
    seed = {"config.yaml": b"level: 1\nstyle: plain\n"}
    two_valued = {"file": "config.yaml", "key": "style", "choices": ["plain", "fancy"]}
    level = {"file": "config.yaml", "key": "level", "range": [0, 9], "step": 1}

    def draws(knobs: list, **cfg: object) -> bool:
        return Knobs(KnobsConfig(knobs=knobs, **cfg)).draws(start(files=seed))

    assert not draws([two_valued], order="round_robin")
    assert not draws([two_valued])  # one knob, one other value: nothing to draw
    assert draws([two_valued, {**two_valued, "key": "level"}])  # which knob: drawn
    assert draws([level], order="round_robin")  # a range moves by a drawn step
    assert draws([{**two_valued, "choices": ["plain", "fancy", "bold"]}], order="round_robin")
    # the seed's value outside the choices: its first move is a draw of two
    assert Knobs(KnobsConfig(knobs=[two_valued], order="round_robin")).draws(
        start(files={"config.yaml": b"style: odd\n"})
    )
    # a space file read from the seed; one the run may change cannot be told
    space = {
        "knobs.yaml": b"knobs:\n  - {file: config.yaml, key: style, choices: [plain, fancy]}\n"
    }
    rr = Knobs(KnobsConfig(space="knobs.yaml", order="round_robin"))
    assert not rr.draws(start(files={**seed, **space}))
    assert rr.draws(start(files={**seed, **space}, surface=("knobs.yaml",)))
    assert rr.draws(start(files=seed))  # no space file in the seed: unknown


def test_select_operators_draw_only_when_their_config_can() -> None:
    assert not Best(BestConfig()).draws(start())
    assert Best(BestConfig(top_k=2)).draws(start())
    assert not EpsilonGreedy(EpsilonGreedyConfig(epsilon=0)).draws(start())
    assert EpsilonGreedy(EpsilonGreedyConfig()).draws(start())


def test_the_framework_draws_with_a_merge_rate_or_a_stage_subset(mini: Mini) -> None:
    split = {"train": ["t1", "t3", "t5", "t7"], "gate": ["t2"], "sealed": ["t9"]}

    def draws(*sets: str) -> bool:
        return framework_draws(recipe_mod.load(mini.recipe, list(sets)).recipe, split)

    assert not draws()
    assert draws("slots.merge={operator: three_way, rate: 0.2}")
    assert not draws("slots.merge={operator: three_way, rate: 1.0}")  # always a merge
    assert draws("evaluator.stages=[{split: train, tasks: 2}]")
    assert not draws("evaluator.stages=[{split: train, tasks: 4}]")  # the whole split


def test_every_shipped_sat3_method_can_differ_by_seed() -> None:
    from tests.support.paths import REPO

    sat3 = REPO / "recipes" / "sat3"
    for name in ("hill_climb", "gepa-policy", "dgm-policy", "islands-policy"):
        r = recipe_mod.load(sat3 / f"{name}.yaml")
        ops = {slot: cls(cfg) for slot, (cls, cfg) in r.operators.items()}
        split = {"train": [f"t{i}" for i in range(24)], "gate": ["g"], "sealed": ["s"]}
        assert start_warnings(ops, r.recipe, split) == [], name


def _run(mini: Mini, name: str, *sets: str) -> tuple[Path, str]:
    out = mini.run_dir(name)
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", mini.recipe, "--out", out, "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    return out, res.stderr


def _choices(out: Path) -> list[tuple]:
    """What the run decided: each child's parent and change, and each gate decision, child
    by child (with candidates in flight the archive interleaves children in any order)."""
    keep = ("candidate_proposed", "candidate_mutated", "candidate_gated", "candidate_rejected")
    return sorted(
        (e["data"].get("id"), keep.index(e["type"]), e["data"].get("parent"),
         e["data"].get("tree"), e["data"].get("admit"))
        for e in events(out)
        if e["type"] in keep
    )  # fmt: skip


def test_seeds_that_cannot_differ_are_warned_and_do_not_differ(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=2)
    runs = [_run(mini, f"seed{s}", *FORCED, f"random_seed={s}") for s in (1, 2)]
    for out, stderr in runs:
        warned = [line for line in stderr.splitlines() if "warning:" in line]
        assert len(warned) == 1, stderr
        assert "random_seed reaches no choice" in warned[0]
        assert "mutate=knobs" in warned[0]
        assert status_json(out)["warnings"] == [warned[0].split("rsiframe: warning: ", 1)[1]]
        assert "warning: random_seed reaches no choice" in " ".join(
            cli("status", out).stdout.split()
        )
    # what the warning claims: the two seeds made the same choices, child by child
    assert _choices(runs[0][0]) == _choices(runs[1][0])


MINE = """from rsiframe.api import GateDecision, GateOperator


class Mine(GateOperator):
    \"\"\"Says nothing of its draws.\"\"\"

    def gate(self, ctx):
        return GateDecision(admit=True, reason="mine")
"""


def test_a_drawn_choice_anywhere_stops_the_seed_warning(mini: Mini) -> None:
    split = {"train": ["t1", "t3", "t5", "t7"], "gate": ["t2"], "sealed": ["t9"]}
    (mini.root / "mine.py").write_text(MINE)

    def warned(*extra: str) -> list[str]:
        r = recipe_mod.load(mini.recipe, [*FORCED, *extra])
        ops = {slot: cls(cfg) for slot, (cls, cfg) in r.operators.items()}
        return start_warnings(ops, r.recipe, split)

    assert len(warned()) == 1
    assert not warned("slots.select.config.top_k=2")
    assert not warned("slots.merge={operator: three_way, rate: 0.5}")
    assert not warned("slots.validate={operator: minibatch, config: {size: 2}}")
    assert not warned(f"slots.gate.operator={mini.root}/mine.py:Mine")  # unknown: may draw
    # a minibatch of the whole split draws nothing, and says so itself
    both = warned("slots.validate={operator: minibatch, config: {size: 4}}")
    heads = [w.split(":", 1)[0] for w in both]
    assert heads == ["slots.validate (minibatch)", "random_seed reaches no choice"]
    # steady mode's timing is not the seed: the seed still reaches no choice
    assert len(warned("concurrency.mode=steady")) == 1
