"""The contamination audit, with planted overlaps: n-grams, short items, policies, secrecy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.dth.build import Builder, BuildRejected
from rsiframe.dth.contamination import Item, audit, protected_items, training_texts
from rsiframe.recipe.evaluator import BuildConfig, ContaminationConfig
from rsiframe.sandbox.bwrap import make_sandbox
from rsiframe.tasks.taskset import TaskSet
from tests.support.dth import BUILD, planted_run, task_words, write_seed, write_tasks

LONG = "thequickbrownfoxjumps"  # 21 characters: audited by 13-grams


SHORT = "qzxwv"  # shorter than n: counts when it occurs whole


def items() -> list[Item]:
    return [
        Item("gate", "g1", "a", LONG),
        Item("gate", "g1", "b", SHORT),
        Item("sealed", "s1", "c", "sealedsecretitemtext"),
        Item("sealed", "s1", "d", "zzyyx"),
    ]


def test_clean_data_has_no_overlap() -> None:
    rows = ["rev hello=olleh", "12+34=46", "sort cab=abc"]
    res = audit(rows, items(), ContaminationConfig())
    assert not res.contaminated
    assert res.items == {"gate": 2, "sealed": 2}
    assert res.summary()["overlapping"] == {"gate": 0, "sealed": 0}


def test_a_planted_thirteen_gram_is_found_with_its_item() -> None:
    # 13 characters of the long gate item inside an otherwise unrelated row
    rows = ["rev abc=cba", "noise " + LONG[4:17] + " noise"]
    res = audit(rows, items(), ContaminationConfig())
    assert [it.id for it in res.hits["gate"]] == ["a"]
    assert res.matches[("g1", "a")] == LONG[4:17]
    # twelve characters are not enough
    assert not audit(["noise " + LONG[4:16]], items(), ContaminationConfig()).contaminated
    # n is configurable
    assert audit(["noise " + LONG[4:16]], items(), ContaminationConfig(n=12)).contaminated


def test_short_items_count_only_when_whole() -> None:
    cfg = ContaminationConfig()
    assert audit([f"rev {SHORT}={SHORT[::-1]}"], items(), cfg).hits["gate"][0].id == "b"
    # inside a longer word it is a different problem, not the item
    assert not audit([f"rev a{SHORT}=x", f"rev {SHORT}b=y"], items(), cfg).contaminated


def test_whitespace_is_normalised() -> None:
    spaced = LONG[:7] + "   " + LONG[7:]
    res = audit(
        [spaced], [Item("gate", "g", "x", LONG[:7] + " " + LONG[7:])], ContaminationConfig()
    )
    assert res.contaminated


@pytest.mark.parametrize(
    "row",
    [
        "sort q_z_x_w_v -> v_w_x_z_q",  # the review's encoding: `_` between characters
        "sort Q-Z-X-W-V",
        "sort q z x w v",
        "sort q.z.x.w.v=done",
        "SORT QZXWV",
    ],
)
def test_a_short_item_spelt_out_is_found(row: str) -> None:
    res = audit([row], items(), ContaminationConfig())
    assert [it.id for it in res.hits["gate"]] == ["b"], row


def test_a_long_item_with_separators_case_or_spaces_is_found() -> None:
    for row in ("_".join(LONG), " ".join(LONG.upper()), "the-quick-brown-fox-jumps"):
        res = audit([row], items(), ContaminationConfig())
        assert [it.id for it in res.hits["gate"]] == ["a"], row


def test_folding_does_not_join_what_is_apart() -> None:
    rows = [f"rev a{SHORT}=x", "q z x w    v", "q1z2x3w4v", "qz\nxwv", "sort abcde"]
    assert not audit(rows, items(), ContaminationConfig()).contaminated


def test_sealed_items_are_counted_never_shown() -> None:
    rows = ["sealedsecretitemtext", "zzyyx", LONG]
    res = audit(rows, items(), ContaminationConfig(policy="flag"))
    summary = res.summary()
    assert summary["overlapping"] == {"gate": 1, "sealed": 2}
    text = json.dumps(summary) + res.reason()
    assert "sealedsecret" not in text and "zzyyx" not in text and "s1" not in text
    assert "g1" in text  # gate items are named, with the matching text
    assert summary["gate_examples"][0]["match"] == LONG[:13]


def test_items_come_from_items_jsonl(tmp_path: Path) -> None:
    write_tasks(tmp_path / "tasks", n_tasks=2, per_task=3)
    ts = TaskSet.load(tmp_path / "tasks")
    found = protected_items({"gate": [ts.tasks["t1"]], "sealed": [ts.tasks["t2"]]})
    assert [(i.split, i.text) for i in found] == [
        *(("gate", w) for w in task_words(tmp_path / "tasks", "t1")),
        *(("sealed", w) for w in task_words(tmp_path / "tasks", "t2")),
    ]
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"prompt": "rev x=", "completion": "x"}) + "\nnot json\n")
    # every string, keys included: a key can hide text as well as a value
    assert list(training_texts(train)) == ["prompt rev x= completion x", "not json"]


@pytest.mark.parametrize("policy", ["reject", "flag"])
def test_the_policy_decides_in_the_build(tmp_path: Path, policy: str) -> None:
    """A dataset with a planted gate item: reject ends the build before any training."""
    write_tasks(tmp_path / "tasks", n_tasks=2, per_task=3)
    planted = task_words(tmp_path / "tasks", "t1")[0]
    seed = write_seed(tmp_path / "seed", data={"plant": [planted]}, trainer={"mode": "crash"})
    ts = TaskSet.load(tmp_path / "tasks")
    protected = protected_items({"gate": [ts.tasks["t1"]], "sealed": [ts.tasks["t2"]]})
    cfg = BuildConfig.model_validate(BUILD | {"contamination": {"policy": policy}})
    (tmp_path / "work").mkdir()
    builder = Builder(cfg, make_sandbox("auto"), tmp_path / "work", tmp_path / "cache")

    def check(texts):  # type: ignore[no-untyped-def]
        return audit(texts, protected, cfg.contamination)

    with pytest.raises(BuildRejected) as info:
        builder.build(seed, lambda data: "", check)
    if policy == "reject":
        assert info.value.stage == "contamination"
        assert "1 gate item(s)" in info.value.reason and "t1#1-0" in info.value.reason
        assert info.value.details["audit"]["overlapping"] == {"gate": 1, "sealed": 0}
    else:  # flagged: the build went on to the trainer (which crashes on purpose here)
        assert info.value.stage == "train"


@pytest.mark.parametrize(
    ("part", "plant"),
    [
        ("data", {"plant_meta": "WORD"}),  # hidden items with answers under a `meta` key
        ("data", {"plant_file": "WORD"}),  # a side file of the dataset, JSON-escaped
        ("trainer", {"notes": "WORD"}),  # a file of the train step's own inputs
    ],
)
def test_everything_the_train_step_could_read_is_audited(
    tmp_path: Path, part: str, plant: dict[str, str]
) -> None:
    """The data step rebuilds a gate item where the old audit did not look (`meta`, a side
    file with the item JSON-escaped, trainer/): it is caught before any training."""
    write_tasks(tmp_path / "tasks", n_tasks=2, per_task=3)
    word = task_words(tmp_path / "tasks", "t1")[0]
    cfg_part = {k: [word] for k in plant}
    seed = write_seed(tmp_path / "seed", **{part: cfg_part})  # type: ignore[arg-type]
    ts = TaskSet.load(tmp_path / "tasks")
    protected = protected_items({"gate": [ts.tasks["t1"]], "sealed": [ts.tasks["t2"]]})
    cfg = BuildConfig.model_validate(BUILD)
    (tmp_path / "work").mkdir()
    builder = Builder(cfg, make_sandbox("auto"), tmp_path / "work", tmp_path / "cache")
    with pytest.raises(BuildRejected) as info:
        builder.build(seed, lambda data: "", lambda t: audit(t, protected, cfg.contamination))
    assert info.value.stage == "contamination" and "t1#1-0" in info.value.reason


def test_the_train_step_gets_only_canonical_rows(tmp_path: Path) -> None:
    """Extra keys and side files of the dataset never reach the train step."""
    seed = write_seed(tmp_path / "seed", data={"plant_meta": ["zzzz"], "plant_file": ["yyyy"]})
    show = (
        "python3 -c \"import os,sys; d=os.environ['RSI_DATASET']; "
        "sys.exit(repr(sorted(os.listdir(d))) + open(d + '/train.jsonl').read()[-400:])\""
    )
    cfg = BuildConfig.model_validate(BUILD | {"train": show})
    (tmp_path / "work").mkdir()
    builder = Builder(cfg, make_sandbox("auto"), tmp_path / "work", tmp_path / "cache")
    with pytest.raises(BuildRejected) as info:
        builder.build(seed, lambda data: "")
    seen = info.value.details["stderr_tail"]
    assert "['train.jsonl']" in seen and '"prompt": "rev ab="' in seen
    assert "meta" not in seen and "zzzz" not in seen
    assert not list((tmp_path / "work").glob("dataset-*"))  # the canonical copy is gone


def test_strings_at_any_depth_are_read(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    row = {"prompt": "p", "completion": "c", "meta": {"deep": [{"k": LONG}]}}
    train.write_text(json.dumps(row) + "\n")
    result = audit(training_texts(train), items(), ContaminationConfig())
    assert [it.id for it in result.hits["gate"]] == ["a"]


def test_reject_ends_the_candidate_naming_gate_items_and_counting_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.cli import cli_proc

    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r, _gate_word, sealed_word = planted_run(tmp_path, "reject")
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=600)
    assert res.returncode == 1  # the seed itself is contaminated: nothing to evolve
    status_text = cli_proc("status", out, "--json").stdout
    status = json.loads(status_text)
    seed = status["candidates"][0]
    assert seed["state"] == "rejected"
    assert seed["reasons"][0].startswith("contamination: training data overlaps 1 gate item(s)")
    assert seed["contamination"]["overlapping"] == {"gate": 1, "sealed": 1}
    assert "t2#" in seed["reasons"][0]
    assert sealed_word not in status_text and "t3" not in status_text
    assert not any((tmp_path / "cache" / "builds" / "train").iterdir())  # no training spent
