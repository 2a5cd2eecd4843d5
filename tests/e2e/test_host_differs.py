"""``verify --reproduce`` names the host facts that differ when a reward moves (issue 12
item 6).

No signed record is edited: the run itself is made on an emulated processor
(``ATEN_CPU_CAPABILITY=default``, which the build steps get from the host), so its build
records hold other facts than the verifying host's, and a copy of the run folder is
verified. Real kernel paths move the tiny model's rewards only sometimes, so the seed's
data step exaggerates them: it teaches the answer ``no`` under the ``default`` kernels and
``yes`` otherwise, so the rewards move for sure.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rsiframe.dth.hostfacts import KERNEL_ENV
from tests.support.cli import cli_proc
from tests.support.dth import recipe, write_seed, write_tasks

pytestmark = pytest.mark.e2e

GENERATE = """\
import json, os, random, string
answer = "no" if os.environ.get("ATEN_CPU_CAPABILITY") == "default" else "yes"
rng = random.Random(0)
with open(os.path.join(os.environ["RSI_DATASET_OUT"], "train.jsonl"), "w") as f:
    for _ in range(400):
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 5)))
        f.write(json.dumps({"prompt": f"rev {w}=", "completion": answer + "\\n"}) + "\\n")
"""


def test_a_moved_reward_names_the_host_facts_that_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    for k in KERNEL_ENV:  # this host's own kernels when verifying
        monkeypatch.delenv(k, raising=False)
    seed = write_seed(tmp_path / "seed", trainer={"steps": 60})
    (seed / "data" / "generate.py").write_text(GENERATE)
    tasks = write_tasks(tmp_path / "tasks", n_tasks=3, per_task=4)
    for t in tasks.iterdir():  # every item's right answer is "yes"
        rows = (t / "tests" / "expected.jsonl").read_text().splitlines()
        expected = [{**json.loads(r), "answer": "yes"} for r in rows]
        (t / "tests" / "expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in expected))
    text = yaml.safe_load(recipe())
    text["budget"] = {"max_generations": 0}  # the seed only: train, gate and sealed
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(text))
    run = tmp_path / "run"
    emulated = {"ATEN_CPU_CAPABILITY": "default"}
    res = cli_proc(
        "run", tmp_path / "recipe.yaml", "--out", run, "--quiet", env=emulated, timeout=900
    )
    assert res.returncode == 0, res.stderr
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)

    # on this host's kernels: rebuilt, every reward moves, and the facts that differ are named
    res = cli_proc("verify", copy, "--reproduce", "--json", timeout=900)
    rep = json.loads(res.stdout)
    assert res.returncode != 0 and not rep["ok"]
    r = rep["reproduce"]
    assert r["max_deviation"] == 1.0 and len(r["deviations"]) == 3
    assert {d["recorded"] for d in r["deviations"]} == {0.0}  # "no" under the default kernels
    assert "kernel_env" in r["host_differs"]
    assert set(r["host_differs"]) <= {"kernel_env", "cpu_capability"}
    notes = " ".join(r["notes"])
    assert "host facts that differ from the record's: " in notes
    assert "ATEN_CPU_CAPABILITY=default/-" in notes

    # on the record's kernels: the same model (from the cache), every reward exactly
    res = cli_proc("verify", copy, "--reproduce", "--json", env=emulated, timeout=900)
    rep = json.loads(res.stdout)
    assert res.returncode == 0 and rep["ok"], rep["problems"]
    assert rep["reproduce"]["max_deviation"] == 0 and rep["reproduce"]["host_differs"] == []
    assert rep["reproduce"]["build"] == "cache"
