"""A request waiting in the model server's queue does not make a harness give up (issue 12
item 6): rewards do not depend on how busy the host and the server are.

The server takes generations one at a time, in arrival order, and sends an interim
``100 Continue`` every second while a request waits behind others, so a client's read
timeout counts connecting and its own generation, not the queue. Each test keeps one real
server busy with real requests (on another endpoint, as other candidates' evaluations do)
and checks that the wait really was longer than the client's timeout.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsiframe.dth.serving import QUEUE_HEARTBEAT_S
from rsiframe.evaluators.local import LocalEngine
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet
from tests.support.dth import BUILD, tiny_model, write_seed, write_tasks
from tests.support.paths import REPO
from tests.support.serving import busy

pytestmark = pytest.mark.e2e


# -- the seed's harness in a real evaluation ----------------------------------------------


def _seed_with_textops_harness(root: Path, **harness: Any) -> Path:
    """The tiny D/T/H seed, answered by the textops seed's own harness (``rev word=``)."""
    seed = write_seed(root)
    shutil.rmtree(seed / "harness")
    shutil.copytree(REPO / "tasks" / "textops" / "seed" / "harness", seed / "harness")
    cfg = yaml.safe_load((seed / "harness" / "config.yaml").read_text())
    cfg["decoding"].update(temperature=0, max_tokens=8)
    cfg.update(harness)
    (seed / "harness" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return seed


def test_a_busy_server_does_not_change_the_reward_and_a_timeout_is_named(
    tmp_path: Path,
) -> None:
    """The seed's harness (request_timeout_s 3 s) scores the same on a quiet server and on
    one whose queue holds its requests longer than that; with a timeout it cannot meet,
    every task's error names the timeout (a loud failure, not a quiet lower score)."""
    model_dir = tiny_model(tmp_path / "model")  # the same build inputs: a cache hit below
    tasks = TaskSet.load(write_tasks(tmp_path / "tasks", n_tasks=3, per_task=6))
    (tmp_path / "work").mkdir()
    config = LocalEngineConfig.model_validate(
        {
            "agent": 'python3 "$RSI_CANDIDATE/harness/run.py"',
            "concurrency": 2,
            "agent_timeout_s": 300,
            "build": BUILD,
        }
    )
    engine = LocalEngine(config, tmp_path / "work", model_dir.parents[2])
    timeout = 3 * QUEUE_HEARTBEAT_S
    seed = _seed_with_textops_harness(tmp_path / "seed", request_timeout_s=timeout)
    hurried = _seed_with_textops_harness(tmp_path / "hurried", request_timeout_s=0.01)
    ts = list(tasks.tasks.values())
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    def run(cand: Path) -> tuple[Any, dict[str, float], dict[str, bytes]]:
        """The evaluation, its rewards and each task's answers.jsonl as the harness wrote it."""
        out = engine.run(cand, ts, put)
        answers = {
            t: blobs[r.trajectory["artifacts"]["app/answers.jsonl"]] for t, r in out.runs.items()
        }
        return out, {t: r.reward for t, r in out.runs.items()}, answers

    try:
        quiet, quiet_rewards, quiet_answers = run(seed)
        assert engine.server is not None
        assert not any(r.error for r in quiet.runs.values()), quiet.runs
        said = [json.loads(x)["answer"] for a in quiet_answers.values() for x in a.splitlines()]
        assert len(said) == 18 and any(said)  # the model answered (compared below byte for byte)
        with busy(engine.server, model_dir, 3 * timeout):
            loaded, loaded_rewards, loaded_answers = run(seed)
        assert not any(r.error for r in loaded.runs.values()), loaded.runs
        assert loaded_rewards == quiet_rewards
        assert loaded_answers == quiet_answers  # every completion, byte for byte
        assert loaded.usage is not None and loaded.usage["queue_max_s"] > timeout  # it waited
        with busy(engine.server, model_dir, 2):  # queued: an answer within 0.01 s is impossible
            late, late_rewards, _ = run(hurried)
    finally:
        engine.close()
    for r in late.runs.values():
        assert r.error and "timed out after 0.01s (request_timeout_s)" in r.error, r.error
        assert r.trajectory["agent"]["exit_code"] == 1
    assert late_rewards == {t: 0.0 for t in quiet_rewards}
