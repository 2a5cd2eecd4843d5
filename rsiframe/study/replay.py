"""``rsiframe replay RUN --out DIR``: run a finished run's recipe again, every model call
answered from RUN's own archive, and say whether the same candidates came out.

The replay is an ordinary run (its own folder, key, signed events) of RUN's resolved
recipe (``RUN/recipe.yaml``, checked against RUN's recipe digest) whose gateway has no
endpoint: it answers a request whose digest RUN's ledger holds from RUN's evidence, and
refuses any other (HTTP 409, ``not_recorded``: the call fails closed and, as any failed
call, rejects that child with the reason). No key variable is needed. Each answered call
is charged the tokens and cost RUN recorded for it (marked ``cached``: nothing is paid),
so budget decisions, ``max_cost`` included, fall the same way.

The verdict compares the two runs candidate by candidate: the same ids, each with the
same parents, generation, tree (a rejected mutation's kept tree included) and state; and
the same task-set and evaluator fingerprints. Exit 0 when the same, 1 when they differ.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rsiframe.archive.runfolder import RunPaths
from rsiframe.errors import RsiError, RunFolderError

#: a run's gateway folder (ledger.jsonl, evidence/): RunModels' FOLDER
MODEL_CALLS = "model-calls"
#: what the gateway of a replay answers a request RUN never made
NOT_RECORDED = "not_recorded"


class Difference(BaseModel):
    candidate: str | None  # None: the run itself
    field: str
    source: Any
    replay: Any

    def line(self) -> str:
        what = f"{self.candidate} {self.field}" if self.candidate else self.field
        return f"{what}: {_short(self.source)} vs {_short(self.replay)}"


class ReplayReport(BaseModel):
    source: str
    replay: str
    same: bool
    candidates: int  # in the source run
    replay_candidates: int
    differences: list[Difference]
    calls_served: int  # model calls the replay answered from the source's archive
    calls_not_recorded: int  # requests the source never made (refused)
    source_state: str
    replay_state: str

    def verdict(self) -> str:
        calls = f"{self.calls_served} model calls served from the source's archive"
        if self.calls_not_recorded:
            calls += f", {self.calls_not_recorded} not recorded there (refused)"
        if self.same:
            return (
                f"replay: same: {self.candidates} candidates with the same ids, parents, "
                f"trees and states ({self.replay_state}); {calls}"
            )
        first = "; ".join(d.line() for d in self.differences[:3])
        more = len(self.differences) - 3
        return (
            f"replay: differs: {len(self.differences)} difference(s): {first}"
            + (f" (+{more} more)" if more > 0 else "")
            + f"; {calls}"
        )


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 40 or len(text) == 64 else text


# -- the source ------------------------------------------------------------------------


def check_source(run: Path) -> tuple[Any, Path]:
    """RUN read and verified (signatures, chain); its ledger folder. Bad input when RUN is
    not a run that has ended."""
    from rsiframe.archive.loader import load_run

    loaded = load_run(run)
    state = loaded.run_state()
    if state in ("running", "interrupted"):
        raise RunFolderError(
            f"the run has not ended ({state}): resume it first; a replay reproduces a finished run",
            where=str(loaded.paths.root),
        )
    return loaded, loaded.paths.root / MODEL_CALLS


def check_ledger(loaded: Any, folder: Path) -> int:
    """RUN's ledger against its signed ``model_call`` events, entry by entry: a replay
    answers from the ledger and its evidence, so each must be what the run signed."""
    signed = {ev.data["seq"]: ev.data for ev in loaded.events if ev.type == "model_call"}
    path = folder / "ledger.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    for n, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
            ev = signed.get(entry["seq"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RunFolderError(f"{path}: line {n} is not a ledger entry") from exc
        if ev is None:
            raise RunFolderError(f"{path}: entry {entry['seq']} has no model_call event in the run")
        keys = ("digest", "status", "prompt_tokens", "completion_tokens", "cost_usd")
        bad = [k for k in keys if entry.get(k) != ev.get(k)]
        if entry.get("response") and ev.get("response") != f"sha256:{entry['response']}":
            bad.append("response")
        if bad:
            raise RunFolderError(
                f"{path}: entry {entry['seq']} differs from the run's signed model_call event "
                f"({', '.join(bad)})"
            )
    return len(signed)


def check_recipe(loaded: Any) -> Path:
    """RUN's resolved recipe, which must still resolve to the digest RUN locked."""
    from rsiframe.recipe import load as recipe_mod

    paths: RunPaths = loaded.paths
    locked = str(paths.read_json(paths.recipe_lock).get("digest"))
    resolved = recipe_mod.load(paths.recipe)
    if resolved.digest != locked:
        raise RunFolderError(
            f"recipe.yaml no longer resolves to the recipe the run locked ({locked[:12]}, "
            f"now {resolved.digest[:12]}): operator defaults or files it names changed",
            where=str(paths.root),
        )
    return paths.recipe


# -- comparing two runs ----------------------------------------------------------------


def fingerprint(c: Any, repo: Any) -> dict[str, Any]:
    """What must be the same of a candidate in a replay (commit ids carry times: trees)."""
    tree = c.tree
    kept = (c.rejected or {}).get("commit")
    if tree is None and kept:
        with contextlib.suppress(Exception):
            tree = repo.tree_of(kept)
    return {"parents": c.parents, "generation": c.generation, "tree": tree, "state": c.state}


def compare(source: Any, replay: Any) -> list[Difference]:
    """Differences between two loaded runs (``loader.LoadedRun``), run level first."""
    from rsiframe.repo.candidates import CandidateRepo

    out = []
    a, b = source.state, replay.state
    for key in ("taskset_fingerprint", "evaluator_fingerprint", "recipe_digest"):
        if getattr(a, key) != getattr(b, key):
            out.append(
                Difference(
                    candidate=None, field=key, source=getattr(a, key), replay=getattr(b, key)
                )
            )
    if source.run_state() != replay.run_state():
        out.append(
            Difference(
                candidate=None, field="state", source=source.run_state(), replay=replay.run_state()
            )
        )
    repo_a, repo_b = CandidateRepo(source.paths.repo), CandidateRepo(replay.paths.repo)
    try:
        for cid in sorted(set(a.candidates) | set(b.candidates)):
            ca, cb = a.candidates.get(cid), b.candidates.get(cid)
            if ca is None or cb is None:
                where = "only in the source" if cb is None else "only in the replay"
                out.append(Difference(candidate=cid, field="presence", source=where, replay=where))
                continue
            fa, fb = fingerprint(ca, repo_a), fingerprint(cb, repo_b)
            out += [
                Difference(candidate=cid, field=k, source=fa[k], replay=fb[k])
                for k in fa
                if fa[k] != fb[k]
            ]
    finally:
        repo_a.close()
        repo_b.close()
    return out


def model_calls(loaded: Any) -> tuple[int, int]:
    """(calls answered from the archive, calls refused as never recorded) in a replay."""
    served = refused = 0
    for ev in loaded.events:
        if ev.type == "model_call":
            served += bool(ev.data.get("cached")) and ev.data.get("status") == 200
            refused += ev.data.get("code") == NOT_RECORDED
    return served, refused


# -- the command -----------------------------------------------------------------------


def replay(run: Path, out: Path, say: Callable[[str], None] = lambda m: None) -> ReplayReport:
    """Replay RUN into OUT (a new run folder) and compare the two."""
    from rsiframe.archive.loader import load_run
    from rsiframe.engine.loop import Engine, RunFailure

    source, ledger = check_source(run)
    check_ledger(source, ledger)
    recipe = check_recipe(source)
    engine = Engine.create(recipe, out=out, replay_of=ledger)
    say(f"replaying {source.paths.root} into {engine.paths.root}")
    try:
        engine.drive()
    except (RunFailure, RsiError) as exc:  # recorded as the run's end: compared like any
        say(f"the replay ended failed: {exc}")
    finally:
        engine.close()
    copy = load_run(engine.paths.root)
    differences = compare(source, copy)
    served, refused = model_calls(copy)
    return ReplayReport(
        source=str(source.paths.root),
        replay=str(copy.paths.root),
        same=not differences,
        candidates=len(source.state.candidates),
        replay_candidates=len(copy.state.candidates),
        differences=differences,
        calls_served=served,
        calls_not_recorded=refused,
        source_state=source.run_state(),
        replay_state=copy.run_state(),
    )
