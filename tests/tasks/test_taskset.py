"""rsiframe.tasks.taskset: Harbor task loading, content digests, splits, the task lock."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from rsiframe.errors import TaskSetChanged, TaskSetError
from rsiframe.tasks.taskset import (
    SPLITS,
    TaskLock,
    TaskSet,
    file_rows,
    load_task,
    make_split,
    merkle_root,
    task_digest,
)

TOML = """version = "1.0"
[agent]
timeout_sec = 30
[verifier]
timeout_sec = 12.5
"""


def _task(
    root: Path, name: str, *, toml: str = TOML, instruction: bool = True, test_sh: bool = True
) -> Path:
    t = root / name
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "task.toml").write_text(toml)
    if instruction:
        (t / "instruction.md").write_text(f"Solve {name}.\n")
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (t / "environment" / "input.txt").write_text(f"input of {name}\n")
    if test_sh:
        (t / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
        (t / "tests" / "test.sh").chmod(0o755)
    return t


def _taskset(root: Path, n: int) -> TaskSet:
    for i in range(n):
        _task(root, f"t{i:02d}")
    return TaskSet.load(root)


# -- loading -------------------------------------------------------------------------------


def test_load_parses_a_task(tmp_path: Path) -> None:
    t = _task(tmp_path, "alpha")
    task = load_task(t)
    assert task.id == "alpha"
    assert task.path == t
    assert task.instruction == "Solve alpha.\n"
    assert task.agent_timeout == 30.0
    assert task.verifier_timeout == 12.5
    assert task.agent_network is False
    assert task.verifier_network is False
    assert task.agent_env == {} and task.verifier_env == {}


def test_default_timeouts_and_env(tmp_path: Path) -> None:
    t = _task(
        tmp_path,
        "a",
        toml='[agent.env]\nFOO = "bar"\nN = 3\n[verifier.env]\nX = "y"\n',
    )
    task = load_task(t)
    assert task.agent_timeout == 600.0
    assert task.verifier_timeout == 600.0
    assert task.agent_env == {"FOO": "bar", "N": "3"}
    assert task.verifier_env == {"X": "y"}


@pytest.mark.parametrize(
    ("toml", "agent", "verifier"),
    [
        ('[environment]\nnetwork_mode = "public"\n', True, True),
        ('[environment]\nnetwork_mode = "no-network"\n', False, False),
        ('[environment]\nnetwork_mode = "allowlist"\n', False, False),
        ('[agent]\nnetwork_mode = "public"\n', True, False),
        (
            '[verifier]\nnetwork_mode = "public"\n[environment]\nnetwork_mode = "no-network"\n',
            False,
            True,
        ),
        ("[environment]\nallow_internet = true\n", True, True),
        ("[environment]\nallow_internet = false\n", False, False),
        (
            '[agent]\nnetwork_mode = "no-network"\n[environment]\nallow_internet = true\n',
            False,
            True,
        ),
        ("", False, False),
    ],
)
def test_network_mode(tmp_path: Path, toml: str, agent: bool, verifier: bool) -> None:
    task = load_task(_task(tmp_path, "n", toml=toml))
    assert (task.agent_network, task.verifier_network) == (agent, verifier)


def test_load_taskset(tmp_path: Path) -> None:
    ts = _taskset(tmp_path / "set", 3)
    assert sorted(ts.tasks) == ["t00", "t01", "t02"]
    assert ts.root == tmp_path / "set"
    # folders without task.toml and plain files are not tasks
    (tmp_path / "set" / "notes").mkdir()
    (tmp_path / "set" / "README.md").write_text("x")
    assert sorted(TaskSet.load(tmp_path / "set").tasks) == ["t00", "t01", "t02"]


def _assert_error(root: Path, where: Path, fragment: str) -> None:
    with pytest.raises(TaskSetError) as info:
        TaskSet.load(root)
    assert str(where) in str(info.value)
    assert fragment in str(info.value)


def test_missing_folder(tmp_path: Path) -> None:
    _assert_error(tmp_path / "nope", tmp_path / "nope", "not found")


def test_no_tasks(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    _assert_error(tmp_path / "empty", tmp_path / "empty", "no tasks")


def test_task_without_verifier(tmp_path: Path) -> None:
    _task(tmp_path, "good")
    bad = _task(tmp_path, "bad", test_sh=False)
    _assert_error(tmp_path, bad, "no verifier")


def test_task_without_instruction(tmp_path: Path) -> None:
    bad = _task(tmp_path, "bad", instruction=False)
    _assert_error(tmp_path, bad, "instruction.md")


def test_task_with_invalid_toml(tmp_path: Path) -> None:
    bad = _task(tmp_path, "bad", toml="[agent\ntimeout_sec = = 3\n")
    _assert_error(tmp_path, bad, "not valid TOML")


@pytest.mark.parametrize("value", ["0", "-5", "-0.5", '"ten"'])
def test_non_positive_or_non_numeric_timeout(tmp_path: Path, value: str) -> None:
    bad = _task(tmp_path, "bad", toml=f"[agent]\ntimeout_sec = {value}\n")
    _assert_error(tmp_path, bad, "[agent] timeout_sec must be a positive number")
    bad2 = _task(tmp_path / "v", "bad2", toml=f"[verifier]\ntimeout_sec = {value}\n")
    _assert_error(tmp_path / "v", bad2, "[verifier] timeout_sec")


def test_boolean_timeout_is_not_a_number(tmp_path: Path) -> None:
    # TOML `true` is not a number of seconds (Python's bool is an int subclass)
    bad = _task(tmp_path, "bad", toml="[agent]\ntimeout_sec = true\n")
    _assert_error(tmp_path, bad, "timeout_sec must be a positive number")


# -- digests -------------------------------------------------------------------------------


def test_limits_come_from_the_rsiframe_table(tmp_path: Path) -> None:
    t = _task(tmp_path, "a", toml="[rsiframe]\npids = 64\napp_mb = 32\n")
    assert load_task(t).limits == {"pids": 64, "app_mb": 32}
    assert load_task(_task(tmp_path, "b")).limits == {}


@pytest.mark.parametrize(
    "table, message",
    [
        ("pids = 0", "pids must be a positive integer"),
        ("tmp_mb = true", "tmp_mb must be a positive integer"),
        ("disk = 3", "disk is not a limit"),
    ],
)
def test_bad_limits_are_named(tmp_path: Path, table: str, message: str) -> None:
    t = _task(tmp_path, "a", toml=f"[rsiframe]\n{table}\n")
    with pytest.raises(TaskSetError, match=message):
        load_task(t)


def test_file_rows_kinds(tmp_path: Path) -> None:
    t = _task(tmp_path, "a")
    (t / "environment" / "link").symlink_to("input.txt")
    (t / "environment" / "dirlink").symlink_to("../tests")
    (t / "environment" / "empty_dir").mkdir()
    rows = file_rows(t)
    assert sorted(rows) == [
        "environment/Dockerfile",
        "environment/dirlink",
        "environment/input.txt",
        "environment/link",
        "instruction.md",
        "task.toml",
        "tests/test.sh",
    ]
    assert rows["tests/test.sh"].startswith("x:")
    assert rows["task.toml"].startswith("f:")
    assert rows["environment/link"].startswith("l:")
    assert rows["environment/dirlink"].startswith("l:")  # not followed
    assert rows["environment/link"] != rows["environment/dirlink"]


def _digest(path: Path) -> str:
    return task_digest(file_rows(path))


def test_digest_changes_with_a_byte(tmp_path: Path) -> None:
    t = _task(tmp_path, "a")
    before = _digest(t)
    assert _digest(t) == before  # deterministic
    (t / "environment" / "input.txt").write_text("input of b\n")  # same length, one byte
    assert _digest(t) != before
    (t / "environment" / "input.txt").write_text("input of a\n")
    assert _digest(t) == before


def test_digest_changes_when_a_file_is_added_or_renamed(tmp_path: Path) -> None:
    t = _task(tmp_path, "a")
    before = _digest(t)
    (t / "tests" / "extra.py").write_text("")
    added = _digest(t)
    assert added != before
    (t / "tests" / "extra.py").rename(t / "tests" / "other.py")
    assert _digest(t) not in (before, added)
    (t / "tests" / "other.py").unlink()
    assert _digest(t) == before


def test_digest_changes_with_the_executable_bit(tmp_path: Path) -> None:
    t = _task(tmp_path, "a")
    before = _digest(t)
    (t / "environment" / "input.txt").chmod(0o755)
    assert _digest(t) != before
    (t / "environment" / "input.txt").chmod(0o644)
    assert _digest(t) == before


def test_digest_ignores_mtime(tmp_path: Path) -> None:
    t = _task(tmp_path, "a")
    before = _digest(t)
    for f in t.rglob("*"):
        os.utime(f, (1_000_000, 1_000_000), follow_symlinks=False)
    assert _digest(t) == before


def test_digest_does_not_depend_on_the_folder_location(tmp_path: Path) -> None:
    t = _task(tmp_path / "x", "a")
    copy = tmp_path / "y" / "b"
    shutil.copytree(t, copy, symlinks=True)
    assert _digest(t) == _digest(copy)


def test_task_digest_covers_paths_and_rows() -> None:
    base = task_digest({"a": "f:1", "b": "f:2"})
    assert task_digest({"b": "f:2", "a": "f:1"}) == base  # insertion order is irrelevant
    assert task_digest({"a": "f:1", "c": "f:2"}) != base
    assert task_digest({"a": "x:1", "b": "f:2"}) != base
    assert task_digest({"a": "f:1"}) != base
    assert task_digest({}) != task_digest({"a": "f:1"})


# -- splits --------------------------------------------------------------------------------

IDS = [f"t{i:02d}" for i in range(20)]


def _check_partition(split: dict[str, list[str]], ids: list[str]) -> None:
    assert set(split) == set(SPLITS)
    members = [t for s in SPLITS for t in split[s]]
    assert len(members) == len(set(members))  # disjoint
    assert set(members) <= set(ids)
    assert all(split[s] for s in SPLITS)
    assert all(split[s] == sorted(split[s]) for s in SPLITS)


def test_ratio_split_is_deterministic_per_seed() -> None:
    a = make_split(IDS, seed=1)
    b = make_split(list(reversed(IDS)), seed=1)  # input order does not matter
    _check_partition(a, IDS)
    assert a == b
    assert [len(a[s]) for s in SPLITS] == [10, 6, 4]
    others = [make_split(IDS, seed=s) for s in range(2, 6)]
    assert any(o != a for o in others)
    assert make_split(IDS, seed=2) != a


def test_ratio_split_with_custom_ratios() -> None:
    split = make_split(IDS, ratios={"train": 0.25, "gate": 0.25, "sealed": 0.5}, seed=3)
    _check_partition(split, IDS)
    assert [len(split[s]) for s in SPLITS] == [5, 5, 10]
    # sealed never takes more than what is left
    split = make_split(IDS, ratios={"train": 0.5, "gate": 0.4, "sealed": 0.5}, seed=3)
    _check_partition(split, IDS)
    assert [len(split[s]) for s in SPLITS] == [10, 8, 2]


def test_explicit_lists() -> None:
    split = make_split(IDS, lists={"train": ["t01", "t00"], "gate": ["t05"], "sealed": ["t09"]})
    assert split == {"train": ["t01", "t00"], "gate": ["t05"], "sealed": ["t09"]}


def test_explicit_list_with_unknown_id() -> None:
    with pytest.raises(TaskSetError, match="unknown task 'zz'"):
        make_split(IDS, lists={"train": ["t00", "zz"], "gate": ["t01"], "sealed": ["t02"]})


def test_explicit_list_with_id_in_two_splits() -> None:
    with pytest.raises(TaskSetError, match="'t01' is in both train and sealed"):
        make_split(IDS, lists={"train": ["t01"], "gate": ["t02"], "sealed": ["t01"]})


def test_empty_split_raises() -> None:
    with pytest.raises(TaskSetError, match="split gate is empty"):
        make_split(IDS, lists={"train": ["t00"], "sealed": ["t01"]})
    with pytest.raises(TaskSetError, match="split sealed is empty"):
        make_split(IDS, ratios={"train": 0.5, "gate": 0.5, "sealed": 0.0})
    with pytest.raises(TaskSetError, match="is empty"):
        make_split(["a", "b"], seed=0)


# -- lock and fingerprint ------------------------------------------------------------------


def _lock(tmp_path: Path, n: int = 6) -> tuple[TaskSet, TaskLock]:
    ts = _taskset(tmp_path / "set", n)
    split = {"train": ["t00", "t01", "t02"], "gate": ["t03", "t04"], "sealed": ["t05"]}
    return ts, TaskLock.freeze(ts, split)


def test_lock_round_trip(tmp_path: Path) -> None:
    _ts, lock = _lock(tmp_path)
    data = lock.to_json()
    assert data["fingerprint"] == lock.fingerprint
    assert data["tasks"]["t03"]["digest"] == lock.digest("t03")
    again = TaskLock.from_json(data)
    assert again.fingerprint == lock.fingerprint
    assert again.split == lock.split
    assert again.files == lock.files
    assert again.root == lock.root
    assert lock.split_of("t04") == "gate"
    assert lock.split_of("t05") == "sealed"
    with pytest.raises(KeyError):
        lock.split_of("nope")
    again.check()  # nothing changed on disk


def test_from_json_rejects_edited_lock(tmp_path: Path) -> None:
    _ts, lock = _lock(tmp_path)
    data = lock.to_json()
    data["tasks"]["t00"]["files"]["task.toml"] = "f:" + "0" * 64
    with pytest.raises(TaskSetChanged, match="fingerprint"):
        TaskLock.from_json(data)
    data = lock.to_json()
    data["split"]["gate"], data["split"]["sealed"] = ["t03"], ["t04", "t05"]
    with pytest.raises(TaskSetChanged):
        TaskLock.from_json(data)


def test_from_json_without_a_fingerprint_is_malformed(tmp_path: Path) -> None:
    _ts, lock = _lock(tmp_path)
    data = lock.to_json()
    del data["fingerprint"]
    with pytest.raises(TaskSetChanged, match=r"tasks\.lock\.json is malformed"):
        TaskLock.from_json(data)


def test_lock_only_covers_split_tasks(tmp_path: Path) -> None:
    ts = _taskset(tmp_path / "set", 5)
    lock = TaskLock.freeze(ts, {"train": ["t00"], "gate": ["t01"], "sealed": ["t02"]})
    assert sorted(lock.files) == ["t00", "t01", "t02"]
    (ts.root / "t04" / "task.toml").write_text("changed")  # not in the split
    lock.check()


def test_check_names_an_edited_file(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    (ts.root / "t03" / "tests" / "test.sh").write_text("#!/bin/bash\necho 1\n")
    with pytest.raises(TaskSetChanged, match=re.escape("gate/t03/tests/test.sh")):
        lock.check()
    # only the splits asked for are checked
    lock.check(splits=("train", "sealed"))


def test_check_names_an_added_file(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    (ts.root / "t00" / "environment" / "cheat.txt").write_text("answer")
    with pytest.raises(TaskSetChanged, match=re.escape("train/t00/environment/cheat.txt")):
        lock.check()


def test_check_names_a_deleted_file(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    (ts.root / "t05" / "instruction.md").unlink()
    with pytest.raises(TaskSetChanged, match=re.escape("sealed/t05/instruction.md")):
        lock.check()


def test_check_notices_a_mode_change_and_a_deleted_task(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    (ts.root / "t01" / "tests" / "test.sh").chmod(0o644)
    with pytest.raises(TaskSetChanged, match=re.escape("train/t01/tests/test.sh")):
        lock.check()
    (ts.root / "t01" / "tests" / "test.sh").chmod(0o755)
    lock.check()
    shutil.rmtree(ts.root / "t02")
    with pytest.raises(TaskSetChanged, match=re.escape("train/t02/")):
        lock.check()


def test_check_survives_the_lock_json_round_trip(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    again = TaskLock.from_json(lock.to_json())
    (ts.root / "t04" / "task.toml").write_text(TOML + "# edited\n")
    with pytest.raises(TaskSetChanged, match=re.escape("gate/t04/task.toml")):
        again.check()


def test_fingerprint_changes_when_a_task_moves_between_splits(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    moved = TaskLock.freeze(
        ts, {"train": ["t00", "t01"], "gate": ["t02", "t03", "t04"], "sealed": ["t05"]}
    )
    assert moved.files == lock.files  # same tasks, same files
    assert moved.fingerprint != lock.fingerprint
    same = TaskLock.freeze(
        ts, {"train": ["t02", "t01", "t00"], "gate": ["t04", "t03"], "sealed": ["t05"]}
    )
    assert same.fingerprint == lock.fingerprint  # order inside a split does not matter


def test_fingerprint_changes_when_a_task_file_changes(tmp_path: Path) -> None:
    ts, lock = _lock(tmp_path)
    (ts.root / "t05" / "environment" / "input.txt").write_text("different")
    relocked = TaskLock.freeze(ts, lock.split)
    assert relocked.fingerprint != lock.fingerprint


LEAVES = [
    ("train", "a", "d1"),
    ("train", "b", "d2"),
    ("gate", "c", "d3"),
    ("sealed", "d", "d4"),
    ("sealed", "e", "d5"),
]


def test_merkle_root_is_order_independent() -> None:
    root = merkle_root(LEAVES)
    assert len(root) == 64
    assert merkle_root(list(reversed(LEAVES))) == root
    assert merkle_root(LEAVES[2:] + LEAVES[:2]) == root


@pytest.mark.parametrize("field", [0, 1, 2])
@pytest.mark.parametrize("index", range(len(LEAVES)))
def test_merkle_root_is_sensitive_to_each_field(field: int, index: int) -> None:
    changed = [list(leaf) for leaf in LEAVES]
    changed[index][field] += "x"
    assert merkle_root([tuple(leaf) for leaf in changed]) != merkle_root(LEAVES)  # type: ignore[misc]


def test_merkle_root_sensitive_to_membership() -> None:
    root = merkle_root(LEAVES)
    roots = {root}
    for i in range(len(LEAVES)):
        roots.add(merkle_root(LEAVES[:i] + LEAVES[i + 1 :]))
    roots.add(merkle_root([*LEAVES, LEAVES[0]]))  # a duplicate leaf
    roots.add(merkle_root([]))
    roots.add(merkle_root(LEAVES[:1]))
    assert len(roots) == len(LEAVES) + 4
    # fields are separated: moving a character across a boundary changes the root
    assert merkle_root([("train", "ab", "c")]) != merkle_root([("train", "a", "bc")])
