"""`compare`'s verdicts on real runs whose sealed scores are known in advance (issue 25).

The task set: t<i> is solved when the candidate's `level` knob reaches the task's need.
Twelve sealed tasks need 1-6, 9-14, so level 9 scores 7/12 = 0.583, level 10 8/12 = 0.667
and level 14 12/12. Three methods:

- `flat9`: the seed at level 9, no generation: 0.583 in every seed;
- `flat14`: the seed at level 14, no generation: 1.0 in every seed;
- `climb`: the level-9 seed with one generation of two children that move one knob by
  one step; a child at level 10 beats its parent on gate (a gate task needs 10), so in
  seeds 0 and 1 the champion scores 0.667 and in seed 3 it stays at 0.583.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_proc, status_json
from tests.support.mini import AGENT, recipe_text, write_tasks

NEEDS = {
    "train": [1, 3, 5, 7],
    "gate": [2, 4, 6, 8, 10],
    "sealed": [1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14],
}
FLAT_SEEDS = range(8)
CLIMB_SEEDS = (0, 1, 3)


@dataclass
class Runs:
    root: Path
    recipes: dict[str, Path]

    def of(self, method: str, seeds: object) -> list[Path]:
        return [self.root / f"{method}-{s}" for s in seeds]  # type: ignore[attr-defined]


def _project(root: Path) -> dict[str, list[str]]:
    write_tasks(root / "tasks", sum(len(v) for v in NEEDS.values()))
    split: dict[str, list[str]] = {}
    i = 0
    for name, needs in NEEDS.items():
        for need in needs:
            i += 1
            task = root / "tasks" / f"t{i}"
            (task / "tests" / "need.txt").write_text(f"{need}\n")
            (task / "instruction.md").write_text(f"Task t{i}: write your level to answer.txt.\n")
            split.setdefault(name, []).append(f"t{i}")
    for level in (9, 14):
        seed = root / f"seed{level}"
        seed.mkdir()
        (seed / "agent.py").write_text(AGENT)
        (seed / "config.yaml").write_text(f"level: {level}\nstyle: plain\n")
    return split


def _recipe(root: Path, split: dict[str, list[str]], name: str, level: int, gens: int) -> Path:
    text = recipe_text(generations=gens, children=2)
    for old, new in (
        ("name: mini", f"name: {name}"),
        ("seed: seed", f"seed: seed{level}"),
        ("train: [t1, t3, t5, t7]", f"train: [{', '.join(split['train'])}]"),
        ("gate: [t2, t4, t6, t8]", f"gate: [{', '.join(split['gate'])}]"),
        ("sealed: [t9, t10]", f"sealed: [{', '.join(split['sealed'])}]"),
        ("max_changes: 1", "max_changes: 1\n      max_steps: 1"),
        ("range: [0, 9]", "range: [0, 14]"),
    ):
        assert old in text
        text = text.replace(old, new)
    path = root / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("verdicts")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(root / "keys"))
        split = _project(root)
        recipes = {
            "flat9": _recipe(root, split, "flat9", 9, 0),
            "flat14": _recipe(root, split, "flat14", 14, 0),
            "climb": _recipe(root, split, "climb", 9, 1),
        }
        plan = [("flat9", s) for s in FLAT_SEEDS] + [("flat14", s) for s in FLAT_SEEDS]
        plan += [("climb", s) for s in CLIMB_SEEDS]
        for method, s in plan:
            out = root / f"{method}-{s}"
            res = cli("run", recipes[method], "--out", out, "--quiet", "--set", f"random_seed={s}")
            assert res.exit_code == 0, res.stderr
        return Runs(root, recipes)


def sealed(run: Path) -> float:
    st = status_json(run)
    champ = next(c for c in st["candidates"] if c["id"] == st["champion"])
    return champ["scores"]["sealed"]


def compare_json(*args: object) -> dict:
    res = cli("compare", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_three_seeds_one_task_apart_in_two_cannot_tell(runs: Runs) -> None:
    climb, flat = runs.of("climb", CLIMB_SEEDS), runs.of("flat9", CLIMB_SEEDS)
    # the numbers: 0.583/0.667/0.667 against 0.583 x 3 (seeds 0, 1, 3 here)
    assert [round(sealed(r), 3) for r in climb] == [0.667, 0.667, 0.583]
    assert [round(sealed(r), 3) for r in flat] == [0.583] * 3
    report = compare_json(*climb, *flat)
    (pair,) = report["pairs"]
    assert {pair["a"], pair["b"]} == {"climb", "flat9"}
    assert pair["design"] == "paired by seed" and (pair["units"], pair["differ"]) == (3, 2)
    assert pair["verdict"] == "cannot_tell"
    assert pair["reads"] == "cannot tell with 3 runs (2 differ)"
    assert pair["p"] is None and pair["p_holm"] is None  # no number that looks like evidence
    assert pair["p_min"] == 0.5  # two pairs that differ: 2 / 2^2
    # the deterministic method still gets a CI over its tasks, not [0.583, 0.583]
    flat9 = next(m for m in report["methods"] if m["name"] == "flat9")
    lo, hi = flat9["sealed"]["ci"]
    assert lo < 0.5 and hi > 0.7 and flat9["sealed"]["tasks"] == 12
    text = cli("compare", *climb, *flat).stdout
    assert "cannot tell with 3 runs" in text
    assert "warning: fewer than 5 runs: climb (3), flat9 (3)" in " ".join(text.split())
    assert "P(A > B)" not in text


def test_a_clear_gap_over_eight_seeds_is_significant(runs: Runs) -> None:
    high, low = runs.of("flat14", FLAT_SEEDS), runs.of("flat9", FLAT_SEEDS)
    report = compare_json(*high, *low)
    (pair,) = report["pairs"]
    a_high = pair["a"] == "flat14"
    assert pair["verdict"] == ("a_better" if a_high else "b_better")
    assert pair["reads"] == "flat14 > flat9"
    assert pair["exact"] and pair["p"] == pytest.approx(2 / 2**8)
    assert pair["p_holm"] == pair["p"]  # one pair
    diff = pair["difference"]
    sign = 1 if a_high else -1
    assert diff["mean"] == pytest.approx(sign * 5 / 12)
    lo, hi = sorted(sign * x for x in diff["ci"])
    assert 0 < lo <= 5 / 12 <= hi  # the CI over tasks excludes 0
    assert not any(n.startswith("warning") for n in report["notes"])
    plan = pair["plan"]  # every seed differs by the same amount: the data cannot say
    assert plan["runs_per_method"] is None and "variance 0" in plan["line"]


def test_plan_prints_one_line_per_pair(runs: Runs) -> None:
    res = cli("compare", *runs.of("climb", CLIMB_SEEDS), *runs.of("flat9", CLIMB_SEEDS), "--plan")
    assert res.exit_code == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("plan:")]
    assert len(lines) == 1
    # diffs (1/12, 1/12, 0): mean 1/18, variance 1/432; (1.95996 + 0.84162)^2 / 432 * 324
    # = 5.89 -> 6, which is also the exact test's floor
    report = compare_json(*runs.of("climb", CLIMB_SEEDS), *runs.of("flat9", CLIMB_SEEDS))
    plan = report["pairs"][0]["plan"]
    assert plan["runs_per_method"] == 6
    assert abs(plan["difference"]) == pytest.approx(1 / 18)


def _kill_a_flat9_run(runs: Runs) -> Path:
    """A run of flat9 (its own name, seed 8) SIGKILLed after its first certificate."""
    out = runs.root / "flat9-killed"
    killed = cli_proc(
        "run",
        runs.recipes["flat9"],
        *("--out", out, "--quiet", "--set", "random_seed=8", "--set", "name=cut"),
        env={"RSIFRAME_FAULT": "kill:after:evaluation_certified:1"},
        timeout=180,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return out


def test_a_sigkilled_run_is_left_out_with_its_reason(runs: Runs) -> None:
    killed = _kill_a_flat9_run(runs)
    finished = runs.of("flat14", FLAT_SEEDS) + runs.of("flat9", FLAT_SEEDS)
    report = compare_json(*finished, killed)
    (left,) = report["unfinished"]
    assert left["path"] == str(killed.resolve()) and not left["included"]
    assert left["reason"] == "interrupted: no end event (the process was killed or crashed)"
    flat9 = next(m for m in report["methods"] if m["name"] == "flat9")
    assert flat9["name"] == "flat9" and flat9["names"] == ["flat9"]
    assert len(flat9["runs"]) == 8 and flat9["unfinished_runs"] == []
    text = cli("compare", *finished, killed)
    assert text.exit_code == 0
    flat_text = " ".join(text.stdout.split())
    assert "1 unfinished left out" in flat_text
    assert f"left out: {killed.resolve()} (cut, random_seed 8): interrupted" in flat_text
    # --include-unfinished: taken in, marked, and the second name listed under the table
    taken = compare_json(*finished, killed, "--include-unfinished")
    flat9 = next(m for m in taken["methods"] if "cut" in m["names"])
    assert flat9["name"] == "flat9" and flat9["names"] == ["flat9", "cut"]
    assert len(flat9["runs"]) == 9 and len(flat9["unfinished_runs"]) == 1
    # killed before its seed was gated: no champion, so no score on any split
    assert flat9["train"]["n"] == flat9["sealed"]["n"] == 8
    assert taken["unfinished"][0]["included"]
    assert "flat9: one method digest, runs named flat9 (8 runs), cut (1 run)" in taken["notes"]
    marked = cli("compare", *finished, killed, "--include-unfinished").stdout
    assert "flat9 (! 1 unfinished)" in marked and "taken in, marked !" in marked
    # only unfinished runs: one line, exit 2
    alone = cli("compare", killed)
    assert alone.exit_code == 2 and "no finished run to compare" in alone.stderr
    assert "\n" not in alone.stderr.strip()


def test_a_methods_name_is_its_recipe_name_without_the_seed() -> None:
    from rsiframe.study.compare import recipe_name

    assert recipe_name("climb[random_seed=3]") == "climb"
    assert recipe_name("sat3[select=best,random_seed=2]") == "sat3[select=best]"
    assert recipe_name("hill_climb.select-best") == "hill_climb.select-best"
    assert recipe_name("cut") == "cut"


# -- the verdicts from scores alone (compare_stats on plain runs) ----------------------------


@dataclass
class Scored:
    random_seed: int
    rewards: dict[str, dict[str, float]]


def scored(seed: int, solved: int, tasks: int = 12) -> Scored:
    """A run whose champion solves the first ``solved`` of ``tasks`` sealed tasks."""
    return Scored(seed, {"sealed": {f"s{i:02d}": float(i < solved) for i in range(tasks)}})


def test_one_task_in_every_seed_is_significant_only_on_these_tasks() -> None:
    from rsiframe.study.compare_stats import judge, pair

    a = [scored(s, 8) for s in range(8)]
    b = [scored(s, 7) for s in range(8)]
    p = pair("a", a, "b", b)
    judge([p])
    assert p.verdict == "a_better" and p.test is not None and p.test.p == 2 / 256
    # the same single task in every seed: a draw of 12 tasks misses it a third of the time
    assert p.diff is not None and p.diff.lo == 0
    assert p.reads() == "a > b on these tasks (the CI over tasks includes 0)"


def test_holm_turns_a_lone_small_p_into_no_significant_difference() -> None:
    from rsiframe.study.compare_stats import judge, pair

    base = [scored(s, 6) for s in range(6)]
    up = [scored(s, 8) for s in range(6)]  # +2/12 in every seed: p = 2/64 = 0.031
    noisy = [scored(s, n) for s, n in enumerate((5, 7, 6, 6, 8, 4))]
    pairs = [pair("up", up, "base", base), pair("noisy", noisy, "base", base)]
    pairs.append(pair("up", up, "noisy", noisy))
    judge(pairs)
    first = pairs[0]
    assert first.test is not None and first.test.p == pytest.approx(2 / 64)
    # three pairs tested: Holm multiplies the smallest p by 3, above 0.05
    assert first.p_holm == pytest.approx(3 * 2 / 64)
    assert first.verdict == "not_significant" and first.reads() == "no significant difference"


def test_unpaired_runs_and_a_single_run() -> None:
    from rsiframe.study.compare_stats import UNPAIRED, judge, pair

    a = [scored(s, 8) for s in (0, 1)]
    b = [scored(s, 6) for s in (5, 6, 7)]
    p = pair("a", a, "b", b)
    judge([p])
    assert p.design == UNPAIRED and p.verdict == "cannot_tell"  # 2 / C(5, 2) = 0.2
    assert p.reads() == "cannot tell with 2 + 3 runs"
    assert p.plan.runs is None and "variance 0" in p.plan.line
    one = pair("a", a[:1], "b", b)  # a method with one run: pairs by task
    judge([one])
    assert one.design == "paired by task" and one.test is not None
    assert (one.test.units, one.test.differ) == (12, 2)
    assert one.reads() == "cannot tell with one run (12 tasks, 2 differ)"
    assert "has one run" in one.plan.line


def test_a_null_result_carries_the_largest_difference_its_ci_allows() -> None:
    from rsiframe.study.compare_report import _pair_out
    from rsiframe.study.compare_stats import judge, pair
    from rsiframe.study.compare_text import pair_cells

    a = [scored(s, n) for s, n in enumerate((8, 6, 7))]
    b = [scored(s, n) for s, n in enumerate((7, 7, 6))]
    p = pair("a", a, "b", b)
    judge([p])
    assert p.verdict == "cannot_tell" and p.diff is not None
    bound = max(-p.diff.lo, p.diff.hi)
    assert p.diff.lo < 0 < p.diff.hi and p.equivalence == bound > 0
    assert f"within ±{bound:.3f}" in pair_cells(p)
    assert _pair_out(p).equivalence_bound == bound
    # a difference that was found has no equivalence bound
    clear = pair("up", [scored(s, 9) for s in range(8)], "base", [scored(s, 6) for s in range(8)])
    judge([clear])
    assert clear.verdict == "a_better" and clear.equivalence is None
    assert pair_cells(clear)[6] == "—" and _pair_out(clear).equivalence_bound is None


def test_the_equivalence_bound_is_the_far_end_of_a_one_sided_ci() -> None:
    from rsiframe.study.compare_stats import judge, pair

    a = [scored(s, 6) for s in range(3)]
    b = [scored(s, 8) for s in range(3)]  # b ahead by 2/12 in every seed
    p = pair("a", a, "b", b)
    judge([p])
    assert p.verdict == "cannot_tell" and p.diff is not None and p.diff.hi <= 0
    assert p.equivalence == -p.diff.lo >= 2 / 12


def test_a_ci_of_no_width_gives_no_equivalence_bound() -> None:
    from rsiframe.study.compare_stats import judge, pair
    from rsiframe.study.compare_text import pair_cells

    # one run each, tied on every task: the bootstrap CI is [0, 0], which is no evidence
    # that the methods are equal, so no bound is claimed
    p = pair("a", [scored(0, 3, tasks=4)], "b", [scored(0, 3, tasks=4)])
    judge([p])
    assert p.verdict == "cannot_tell" and p.diff is not None and p.diff.lo == p.diff.hi == 0
    assert p.equivalence is None and pair_cells(p)[6] == "none (CI width 0)"
