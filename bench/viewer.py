"""Viewer benchmark: a synthetic run with 10,000 candidates, then first paint, scrolling
and opening a candidate in the headless Textual app.

    .venv/bin/python bench/viewer.py [--candidates 10000] [--keep DIR]

The run is written through the real archive, signing, artifact and git code
(``Archive``, ``Signer``, ``put_artifact``, ``CandidateRepo``) with a fake clock and
fsync switched off, so it is a valid run folder (``rsiframe verify`` passes) that takes
seconds rather than hours to make. :func:`build_run` is also used by the viewer's
snapshot tests, which need a deterministic run (fixed key, fixed times).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe import __version__
from rsiframe.archive.log import Archive
from rsiframe.archive.runfolder import RunPaths
from rsiframe.certs.records import EvaluationPredicate, aggregate, make_statement
from rsiframe.certs.signing import EVENT_TYPE, Signer
from rsiframe.recipe import load as recipe_mod
from rsiframe.repo.candidates import CANDIDATE_REFS, REJECTED_REFS, CandidateRepo
from rsiframe.repo.gittree import Entry, Snapshot, blob_sha
from rsiframe.tasks.taskset import TaskLock
from rsiframe.util.digest import sha256_json

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
SPLIT = {
    "train": ["t01", "t02", "t03", "t04"],
    "gate": ["t05", "t06", "t07", "t08"],
    "sealed": ["t09", "t10"],
}
AGENT = b'import yaml\ncfg = yaml.safe_load(open("solver.yaml"))\nprint(cfg)\n'


class MemSnapshot(Snapshot):
    """A snapshot whose file contents live in memory."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(root=Path("/nonexistent"))
        self.files = files
        self.entries = {p: Entry("100644", blob_sha(b)) for p, b in files.items()}

    def content(self, path: str) -> bytes:
        return self.files[path]


@dataclass
class Clock:
    now: float = T0
    step: float = 0.25

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@contextlib.contextmanager
def fast_and_fixed(clock: Clock) -> Iterator[None]:
    """Fake time for the archive and the repository; no fsync (a benchmark, not a run)."""
    with mock.patch("time.time", clock), mock.patch.object(os, "fsync", lambda fd: None):
        yield


def _resolved(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "synthetic run for the viewer",
        "seed": "/synthetic/seed",
        "tasks": {"path": "/synthetic/tasks", "split": SPLIT},
        "surface": {"include": ["solver.yaml"], "exclude": [], "ignore": []},
        "evaluator": {"engine": "local", "config": {"agent": "python3 agent.py"}},
        "slots": {
            "select": {"operator": "tournament", "config": {"size": 3}},
            "rollout": {"operator": "local", "config": {}},
            "analyze": {"operator": "failures", "config": {}},
            "mutate": {"operator": "knobs", "config": {"max_changes": 1}},
            "validate": {"operator": "command", "config": {"command": "python3 -c 1"}},
            "novelty": {"operator": "tree_dedup", "config": {}},
            "gate": {"operator": "improves_parent", "config": {"min_delta": 0.0}},
            "record": {"operator": "notes", "config": {}},
            "reflect": {"operator": "lessons", "config": {}},
        },
        "budget": {
            "max_generations": None,
            "max_candidates": None,
            "max_evaluations": None,
            "max_wall_seconds": None,
            "max_model_tokens": None,
            "max_cost": None,
        },
        "children_per_generation": 8,
        "random_seed": 0,
    }


def _solver(level: int, style: str) -> bytes:
    return f"level: {level}\nstyle: {style}\nrestarts: {level % 3 == 0}\n".encode()


class Builder:
    """Writes one synthetic run; candidates climb a knob ``level`` (0..40)."""

    def __init__(self, root: Path, name: str, seed: int, key_seed: bytes) -> None:
        self.paths = RunPaths(root)
        self.rng = random.Random(seed)
        self.signer = Signer(Ed25519PrivateKey.from_private_bytes(key_seed))
        self.name = name
        self.run_id = f"{name}-20260101T000000Z-{seed:06x}"
        self.levels: dict[str, tuple[int, str]] = {}
        self.commits: dict[str, str] = {}
        self.trees: dict[str, str] = {}
        self.gate: dict[str, float] = {}
        self.admitted: list[str] = []
        self.parent_commit: dict[str, str | None] = {}

    def start(self) -> None:
        root = self.paths.root
        root.mkdir(parents=True, exist_ok=True)
        resolved = _resolved(self.name)
        digest = sha256_json(resolved)  # as recipe.from_data computes it
        self.recipe_digest = digest
        self.paths.recipe.write_text(recipe_mod.dump(resolved))
        self.paths.write_json(
            self.paths.recipe_lock,
            {"digest": digest, "source": "/synthetic/recipes/synthetic.yaml", "resolved": resolved},
        )
        files = {t: {"instruction.md": "f:" + "0" * 64} for s in SPLIT.values() for t in s}
        lock = TaskLock(root="/synthetic/tasks", split=SPLIT, files=files)
        self.fingerprint = lock.fingerprint
        self.paths.write_json(self.paths.tasks_lock, lock.to_json())
        self.evaluator = "e" * 64
        self.paths.write_json(  # the parts LocalEngine.lock_parts names (the fingerprint is fake)
            self.paths.evaluator_lock,
            {
                "fingerprint": self.evaluator,
                "engine": "local",
                "config": resolved["evaluator"]["config"],
                "isolation": "bwrap",
                "framework": __version__,
            },
        )
        self.paths.pubkey.write_bytes(self.signer.public.pem())
        self.repo = CandidateRepo.create(self.paths.repo)

        def sign(payload: bytes) -> str:
            return self.signer.sign_bytes(EVENT_TYPE, payload)

        self.archive = Archive(root, None, sign=sign)
        files_seed = {"agent.py": AGENT, "solver.yaml": _solver(1, "plain")}
        snap = MemSnapshot(files_seed)
        tree = self.repo.store(snap)
        commit = self.repo.commit(tree, None, "c0000: seed", f"{CANDIDATE_REFS}/c0000")
        self.levels["c0000"] = (1, "plain")
        self.commits["c0000"], self.trees["c0000"] = commit, tree
        self.archive.append(
            "run_started",
            {
                "run_id": self.run_id,
                "name": self.name,
                "recipe_digest": digest,
                "taskset_fingerprint": self.fingerprint,
                "evaluator_fingerprint": self.evaluator,
                "isolation": "bwrap",
                "keyid": self.signer.keyid,
                "framework_version": __version__,
                "seed_commit": commit,
                "seed_tree": tree,
            },
        )
        self.archive.append("session_started", {"resumed": False})
        self.archive.append(
            "candidate_proposed", {"id": "c0000", "parent": None, "generation": 0, "reason": "seed"}
        )
        self.archive.append(
            "candidate_mutated",
            {
                "id": "c0000",
                "commit": commit,
                "tree": tree,
                "parent_commit": None,
                "description": "seed",
                "changes": [],
            },
        )
        for split in ("train", "gate", "sealed"):
            self.evaluate("c0000", split)
        self.gated("c0000", True, "seed (anchor)")

    def quality(self, cid: str) -> float:
        level, style = self.levels[cid]
        return min(0.95, 0.1 + level * 0.03 + (0.05 if style == "fancy" else 0.0))

    def evaluate(self, cid: str, split: str, fail: bool = False) -> None:
        self.archive.append("evaluation_started", {"id": cid, "split": split, "attempt": 1})
        if fail:
            trace = self.archive.put(b"Traceback (most recent call last):\n  OSError: disk full\n")
            self.archive.append(
                "evaluation_failed",
                {
                    "id": cid,
                    "split": split,
                    "attempt": 1,
                    "error": "OSError: disk full",
                    "traceback": trace,
                },
            )
            return
        q = self.quality(cid)
        rewards: dict[str, float] = {}
        trajectories: dict[str, str] = {}
        for task in SPLIT[split]:
            r = 1.0 if self.rng.random() < q else 0.0
            out = f"level {self.levels[cid][0]} task {task}\n".encode() * 3
            arts = {
                "agent.stdout": self.archive.put(out),
                "agent.stderr": self.archive.put(b""),
                "verifier.stdout": self.archive.put(f"reward {r:g}\n".encode()),
                "verifier.stderr": self.archive.put(b""),
            }
            phase = {"exit_code": 0, "timed_out": False, "seconds": 0.01, "truncated": False}
            traj = {
                "task": task,
                "reward": r,
                "error": None,
                "agent": {**phase, "stdout_tail": out.decode()[-200:], "stderr_tail": ""},
                "verifier": {**phase, "stdout_tail": f"reward {r:g}\n", "stderr_tail": ""},
                "artifacts": arts,
            }
            digest = self.archive.put_json(traj)
            rewards[task], trajectories[task] = r, digest
            self.archive.append(
                "task_finished",
                {
                    "id": cid,
                    "split": split,
                    "attempt": 1,
                    "task": task,
                    "reward": r,
                    "error": None,
                    "trajectory": digest,
                },
            )
        parent_commit = self.parent_commit.get(cid)
        started = time.time()
        predicate = EvaluationPredicate(
            run_id=self.run_id,
            candidate=cid,
            parent_commit=parent_commit,
            recipe_digest=self.recipe_digest,
            evaluator_fingerprint=self.evaluator,
            taskset_fingerprint=self.fingerprint,
            split=split,
            attempt=1,
            rewards=rewards,
            trajectories=trajectories,
            score=aggregate(rewards),
            isolation="bwrap",
            framework_version=__version__,
            started_at=started,
            finished_at=time.time(),
        )
        envelope = self.signer.sign(make_statement(self.commits[cid], self.trees[cid], predicate))
        self.archive.append(
            "evaluation_certified", {"id": cid, "split": split, "attempt": 1, "envelope": envelope}
        )
        if split == "gate":
            self.gate[cid] = predicate.score

    def gated(self, cid: str, admit: bool, reason: str) -> None:
        self.archive.append("candidate_gated", {"id": cid, "admit": admit, "reason": reason})
        if admit:
            self.admitted.append(cid)
        notes = {"decision": reason, "description": "seed" if cid == "c0000" else "knob change"}
        self.archive.append("candidate_recorded", {"id": cid, "notes": notes})

    def child(self, i: int, generation: int) -> None:
        cid = f"c{i:04d}"
        pool = self.admitted[-6:]
        parent = max(self.rng.sample(pool, min(3, len(pool))), key=lambda c: self.gate[c])
        self.archive.append(
            "candidate_proposed",
            {"id": cid, "parent": parent, "generation": generation, "reason": "tournament (3)"},
        )
        level, style = self.levels[parent]
        roll = self.rng.random()
        if roll < 0.7:
            level = max(0, min(40, level + self.rng.choice((-1, 1, 1, 2))))
            desc = f"level: {self.levels[parent][0]} -> {level}"
        else:
            style = "fancy" if style == "plain" else "plain"
            desc = f"style: {self.levels[parent][1]} -> {style}"
        self.levels[cid] = (level, style)
        files = {"agent.py": AGENT, "solver.yaml": _solver(level, style)}
        fate = self.rng.random()
        if fate < 0.03:  # guardrail: touched a file outside the surface
            files["agent.py"] = AGENT + b"# cheat\n"
            snap = MemSnapshot(files)
            tree = self.repo.store(snap)
            evidence = self.repo.commit(
                tree, self.commits[parent], f"{cid} (rejected): {desc}", f"{REJECTED_REFS}/{cid}"
            )
            self.archive.append(
                "candidate_rejected",
                {
                    "id": cid,
                    "stage": "guardrail",
                    "reasons": ["outside the surface: agent.py"],
                    "violations": [{"path": "agent.py", "reason": "outside the surface"}],
                    "commit": evidence,
                    "description": desc,
                    "output": "",
                },
            )
            return
        if fate < 0.06:
            self.archive.append(
                "candidate_rejected",
                {
                    "id": cid,
                    "stage": "validate",
                    "reasons": ["command exited 1"],
                    "violations": [],
                    "commit": None,
                    "description": desc,
                    "output": "Traceback (most recent call last):\nSyntaxError: bad input\n",
                },
            )
            return
        snap = MemSnapshot(files)
        tree = self.repo.store(snap)
        commit = self.repo.commit(
            tree, self.commits[parent], f"{cid}: {desc}", f"{CANDIDATE_REFS}/{cid}"
        )
        self.commits[cid], self.trees[cid] = commit, tree
        self.parent_commit[cid] = self.commits[parent]
        self.archive.append(
            "candidate_mutated",
            {
                "id": cid,
                "commit": commit,
                "tree": tree,
                "parent_commit": self.commits[parent],
                "description": desc,
                "changes": [{"kind": "modified", "path": "solver.yaml"}],
            },
        )
        self.evaluate(cid, "train")
        if fate < 0.08:
            self.evaluate(cid, "gate", fail=True)
            return
        self.evaluate(cid, "gate")
        delta = self.gate[cid] - self.gate[parent]
        admit = delta > 0 or (delta == 0 and self.rng.random() < 0.3)
        self.gated(cid, admit, f"gate {self.gate[cid]:.3f} vs parent {self.gate[parent]:.3f}")

    def finish(self, state: str | None) -> None:
        if state is not None:
            champ = max(self.admitted, key=lambda c: self.gate[c])
            if champ != "c0000":
                self.evaluate(champ, "sealed")
            self.archive.append("run_finished", {"state": state, "reason": "synthetic run ended"})
        self.archive.close()
        self.repo.close()


def build_run(
    root: Path,
    n: int = 10_000,
    *,
    name: str = "synthetic",
    seed: int = 0,
    per_generation: int = 8,
    finished: bool = True,
) -> Path:
    """Write a valid run folder with ``n`` candidates (the seed included) under ``root``."""
    clock = Clock()
    with fast_and_fixed(clock):
        b = Builder(root, name, seed, bytes([seed % 256]) * 32)
        b.start()
        for i in range(1, n):
            generation = (i - 1) // per_generation + 1
            if (i - 1) % per_generation == 0:
                b.archive.append("generation_started", {"generation": generation})
            b.child(i, generation)
        b.finish("finished" if finished else None)
    return root


# -- measurements ------------------------------------------------------------------------


async def _measure(run: Path) -> dict[str, float]:
    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.widgets.candidates_table import CandidatesTable

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    app = ViewerApp(run)
    async with app.run_test(size=(200, 50)) as pilot:
        # the screen is composed and mounted (header, recipe, empty table): first frame
        out["first_paint_s"] = time.perf_counter() - t0
        table = app.screen.query_one(CandidatesTable)
        while table.row_count == 0:  # the first chunk of events is in the table
            await asyncio.sleep(0.005)
        out["first_rows_s"] = time.perf_counter() - t0
        out["rows_at_first_rows"] = float(table.row_count)
        table.focus()
        lags = []  # how late a 20 ms timer fires on the UI loop while the run loads
        while not app.screen_loaded():
            t1 = time.perf_counter()
            await asyncio.sleep(0.02)
            lags.append((time.perf_counter() - t1 - 0.02) * 1000)
        out["fully_loaded_s"] = time.perf_counter() - t0
        lags.sort()
        out["ui_lag_while_loading_p50_ms"] = lags[len(lags) // 2] if lags else 0.0
        out["ui_lag_while_loading_max_ms"] = lags[-1] if lags else 0.0
        out["rows"] = float(table.row_count)
        await pilot.pause()
        t1 = time.perf_counter()
        for _ in range(20):
            await pilot.press("pagedown")
        out["pagedown_ms"] = (time.perf_counter() - t1) / 20 * 1000
        t1 = time.perf_counter()
        await pilot.press("end")
        out["end_ms"] = (time.perf_counter() - t1) * 1000
        t1 = time.perf_counter()
        await pilot.press("s")
        out["sort_by_gate_ms"] = (time.perf_counter() - t1) * 1000
        t1 = time.perf_counter()
        await pilot.press("enter")
        while not app.screen_loaded():
            await asyncio.sleep(0.005)
        await pilot.pause()
        out["open_candidate_ms"] = (time.perf_counter() - t1) * 1000
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("slash", *"declined", "enter")
        t1 = time.perf_counter()
        await pilot.pause()
        out["filter_ms"] = (time.perf_counter() - t1) * 1000
        out["filtered_rows"] = float(table.row_count)
        t1 = time.perf_counter()
        await pilot.press("l")
        await pilot.pause()
        out["open_lineage_ms"] = (time.perf_counter() - t1) * 1000
        await pilot.press("q")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidates", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, help="write the run here and keep it")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rsiframe-viewer-bench-"))
    run = args.keep or tmp / "run"
    try:
        if not (run / "events.jsonl").exists():
            t0 = time.perf_counter()
            build_run(run, args.candidates)
            print(f"built {args.candidates} candidates in {time.perf_counter() - t0:.1f} s: {run}")
        size = (run / "events.jsonl").stat().st_size
        print(f"events.jsonl: {size / 1e6:.1f} MB")
        numbers = asyncio.run(_measure(run))
        for k, v in numbers.items():
            print(f"{k:28s} {v:10.3f}" if k.endswith(("_s", "_ms")) else f"{k:28s} {v:10.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
