"""``rsiframe compare``: methods side by side, from verified, finished runs only.

A *method* is a run's resolved recipe without ``name``, ``description`` and ``random_seed``
(its digest is the method digest), so repeat runs that differ only by seed form one row,
shown under its recipe name (the name most of its runs carry; the others are listed under
the table); a target run ``--method gepa`` is one method with the recipe ``extends:
[target, methods/gepa]``. Each row holds the champion's train, gate and sealed score: the
mean over runs with a 95 % two-level bootstrap CI (seeds and, within them, tasks); each
pair of methods gets the sealed difference, an exact permutation test, Holm's correction
and a verdict (:mod:`rsiframe.study.compare_stats`).

Every run is verified first with verify's read side (:func:`load_run`: the hash chain and
its signature, every certificate's signature and binding; :func:`lock_problems`); scores
come from that fold, which admits only verified, bound records. A run that did not end
(interrupted, failed, still running) or whose seed or champion lacks a score on a split is
left out and named with the reason, unless ``include_unfinished``. Runs with different
task-set or evaluator fingerprints are refused, naming what differs, unless forced.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import load_run
from rsiframe.archive.runfolder import RunPaths
from rsiframe.archive.state import Candidate
from rsiframe.audit.verify import lock_problems
from rsiframe.errors import MixedRuns, RsiError, RunFolderError, RunNotVerified
from rsiframe.study.compare_stats import (
    CI_LINE,
    Pair,
    few_runs_line,
    judge,
    pair,
    pairs_line,
    split_estimate,
    task_count,
)
from rsiframe.study.stats import ALPHA, Estimate, mean
from rsiframe.util.digest import sha256_json

SPLITS = ("train", "gate", "sealed")
#: the end states of a run that finished (failed and interrupted runs did not)
ENDED = ("finished", "budget_exhausted")
#: what a repeat run may change, and prose
METHOD_EXCLUDES = ("name", "description", "random_seed")
#: runs per worker process before reading in parallel pays for starting processes
PER_WORKER = 4


def mutator_of(resolved: dict[str, Any]) -> str:
    """What made a method's children: the mutate operator, a wrapped one, its profile or
    order, and its model (the recipe's name and the upstream model), e.g.
    ``gepa_reflect (proposer: gpt-5-mini)`` or ``knobs (round_robin)``; so a table never puts
    a random knob mutator beside a model-driven one unnoticed."""
    spec = (resolved.get("slots") or {}).get("mutate") or {}
    op, cfg = str(spec.get("operator", "?")), spec.get("config") or {}
    if op == "round_robin":  # GEPA's component selector around another mutator
        op, cfg = f"round_robin {cfg.get('operator', '?')}", cfg.get("config") or {}
    extra = [str(cfg[k]) for k in ("profile", "order") if isinstance(cfg.get(k), str)]
    model = cfg.get("model")
    if isinstance(model, str):
        upstream = ((resolved.get("models") or {}).get(model) or {}).get("model")
        extra.append(f"{model}: {upstream}" if upstream else model)
    return f"{op} ({', '.join(extra)})" if extra else op


def method_digest(resolved: dict[str, Any]) -> str:
    """The digest of a resolved recipe without the keys a repeat run may change."""
    return sha256_json({k: v for k, v in resolved.items() if k not in METHOD_EXCLUDES})


@dataclass
class CurvePoint:
    evaluations: int
    cost: float
    best_gate: float
    task_runs: int = 0

    def x(self, axis: str) -> float:
        """Where the point lies on ``axis``: evaluations, task_runs or cost."""
        return float(getattr(self, axis))


@dataclass
class RunData:
    """What compare needs of one verified run."""

    path: Path
    run_id: str
    name: str
    state: str
    random_seed: int
    method: str
    taskset_fingerprint: str
    evaluator_fingerprint: str
    champion: str | None
    scores: dict[str, float | None]
    rewards: dict[str, dict[str, float]]  # the champion's, per split and task
    seed_rewards: dict[str, dict[str, float]]
    evaluations: int
    tokens: int
    cost: float
    wall_s: float
    records: int
    task_runs: int = 0  # every task executed (budget.max_task_runs' count)
    model_calls: int = 0  # calls through the run's gateway, paid or not
    model_cached: int = 0  # of them, answered from its ledger at no cost
    curve: list[CurvePoint] = field(default_factory=list)
    unfinished: str = ""  # why the run did not finish ("": it did)
    mutator: str = ""  # what made its children (:func:`mutator_of`)


@dataclass
class Method:
    name: str
    digest: str
    runs: list[RunData]
    scores: dict[str, Estimate | None]
    tasks: dict[str, int]  # tasks per split (the CI resamples them)
    names: list[str] = field(default_factory=list)  # its runs' recipe names, the shown first

    def usage(self, attr: str) -> float:
        return mean([float(getattr(r, attr)) for r in self.runs])

    @property
    def mutator(self) -> str:
        """The mutate operator (and its model) of its runs (one method digest: one)."""
        return " | ".join(dict.fromkeys(r.mutator for r in self.runs)) or "?"

    def unfinished(self) -> list[RunData]:
        return [r for r in self.runs if r.unfinished]


@dataclass
class Comparison:
    methods: list[Method]
    pairs: list[Pair]
    refused: list[dict[str, Any]]
    by: str
    unfinished: list[RunData] = field(default_factory=list)  # left out, or taken in
    included_unfinished: bool = False
    alpha: float = ALPHA

    def notes(self) -> list[str]:
        """The lines under the tables (``--json`` carries them too)."""
        return self.method_notes() + self.pair_notes()

    def pair_notes(self) -> list[str]:
        return [pairs_line(self.pairs, self.alpha)] if self.pairs else []

    def method_notes(self) -> list[str]:
        """What the CI is, the few-runs warning, and the methods whose runs carry more
        than one name."""
        lines = [CI_LINE, few_runs_line([(m.name, len(m.runs)) for m in self.methods])]
        for m in self.methods:
            if len(m.names) > 1:
                counts = [(n, sum(recipe_name(r.name) == n for r in m.runs)) for n in m.names]
                named = ", ".join(f"{n} ({k} run{'s' * (k > 1)})" for n, k in counts)
                lines.append(f"{m.name}: one method digest, runs named {named}")
        return [line for line in lines if line]


# -- finding and reading runs -----------------------------------------------------------


def _is_run(path: Path) -> bool:
    return (path / "events.jsonl").is_file() and (path / "recipe.lock.json").is_file()


def find_runs(paths: list[Path]) -> list[Path]:
    """Run folders named by ``paths``: a run itself, or runs up to two levels below."""
    found: list[Path] = []
    for p in paths:
        p = Path(p).resolve()
        if not p.is_dir():
            raise RunFolderError("no such folder", where=str(p))
        if _is_run(p):
            found.append(p)
            continue
        inner = sorted(q for q in p.iterdir() if q.is_dir() and _is_run(q))
        inner += sorted(
            r
            for q in sorted(p.iterdir())
            if q.is_dir() and not _is_run(q)
            for r in q.iterdir()
            if r.is_dir() and _is_run(r)
        )
        if not inner:
            raise RunFolderError("not a run folder, and holds no run folders", where=str(p))
        found += inner
    return list(dict.fromkeys(found))


@dataclass
class _CurveWalk:
    """The counts so far while walking a run's events for :func:`_curve`."""

    candidates: dict[str, Candidate]
    evaluations: int = 0
    cost: float = 0.0
    best: float | None = None
    runs: int = 0
    #: an older archive's attempts: no task count at their start
    uncounted: set[tuple[str, str, int]] = field(default_factory=set)
    points: list[CurvePoint] = field(default_factory=list)

    def evaluation_started(self, d: dict[str, Any]) -> None:
        self.evaluations += 1
        self.runs += d.get("tasks") or 0
        if d.get("tasks") is None:
            self.uncounted.add((d["id"], d["split"], d["attempt"]))

    def task_finished(self, d: dict[str, Any]) -> None:
        self.runs += (d["id"], d["split"], d["attempt"]) in self.uncounted

    def tasks_run(self, d: dict[str, Any]) -> None:
        self.runs += d["tasks"]

    def usage(self, d: dict[str, Any]) -> None:
        if d.get("slot") == "evaluate":
            self.cost += float(d.get("cost", 0.0))

    def model_call(self, d: dict[str, Any]) -> None:
        # the gateway's count (operators' self-reports: none)
        self.cost += float(d.get("cost_usd", 0.0))

    def candidate_gated(self, d: dict[str, Any]) -> None:
        if not d.get("admit"):
            return
        c = self.candidates.get(d.get("id", ""))  # candidate ids are never empty
        score = c.score("gate") if c is not None and c.state == "admitted" else None
        if score is not None and (self.best is None or score > self.best):
            self.best = score
            self.points.append(CurvePoint(self.evaluations, self.cost, self.best, self.runs))


#: what each event type moves in a curve's walk (other events move nothing)
_CURVE_STEPS = {
    "evaluation_started": _CurveWalk.evaluation_started,
    "task_finished": _CurveWalk.task_finished,
    "tasks_run": _CurveWalk.tasks_run,
    "usage": _CurveWalk.usage,
    "model_call": _CurveWalk.model_call,
    "candidate_gated": _CurveWalk.candidate_gated,
}


def _curve(loaded: Any) -> list[CurvePoint]:
    """Best admitted gate score so far, after each gate decision (scores: verified only)."""
    walk = _CurveWalk(loaded.state.candidates)
    for ev in loaded.events:
        step = _CURVE_STEPS.get(ev.type)
        if step is not None:
            step(walk, ev.data)
    if walk.best is not None:
        walk.points.append(CurvePoint(walk.evaluations, walk.cost, walk.best, walk.runs))
    return walk.points


def read_run(path: Path) -> RunData:
    """Verify the run's archive and read it; :class:`RunNotVerified` when a check fails.

    The checks are verify's read side: the hash chain and its newest signature (which
    covers every event before it), every certificate's signature and binding (the fold),
    the state, and the recipe, task and evaluator locks. ``rsiframe verify`` adds the
    commits in repo.git and the evidence files, which hold no scores.
    """
    try:
        loaded = load_run(path)
    except RsiError as exc:
        raise RunNotVerified(f"fails verification: {exc.message}", where=str(path)) from exc
    problems = loaded.state.problems + lock_problems(loaded.paths, loaded.state)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunNotVerified(f"fails verification: {problems[0]}{more}", where=str(path))
    st = loaded.state
    resolved = loaded.paths.read_json(loaded.paths.recipe_lock)["resolved"]
    champ, seed = st.champion(), st.seed

    def rewards(c: Any) -> dict[str, dict[str, float]]:
        out = {}
        for split in SPLITS:
            rec = c.record(split) if c is not None else None
            if rec is not None:
                out[split] = dict(rec.predicate.rewards)
        return out

    return RunData(
        path=loaded.paths.root,
        run_id=st.run_id,
        name=st.name,
        state=loaded.run_state(),
        random_seed=int(resolved.get("random_seed", 0)),
        method=method_digest(resolved),
        taskset_fingerprint=st.taskset_fingerprint,
        evaluator_fingerprint=st.evaluator_fingerprint,
        champion=champ.id if champ else None,
        scores={s: (champ.score(s) if champ else None) for s in SPLITS},
        rewards=rewards(champ),
        seed_rewards=rewards(seed),
        evaluations=st.evaluations,
        tokens=st.tokens,
        cost=st.cost,
        wall_s=st.wall_seconds(),
        records=st.records,
        task_runs=st.task_runs,
        model_calls=st.model_calls,
        model_cached=st.model_cached,
        curve=_curve(loaded),
        unfinished=why_unfinished(
            loaded.run_state(), st.terminal, champ is not None, rewards(seed), rewards(champ)
        ),
        mutator=mutator_of(resolved),
    )


def why_unfinished(
    state: str,
    terminal: dict[str, Any] | None,
    has_champion: bool,
    seed: dict[str, dict[str, float]],
    champion: dict[str, dict[str, float]],
) -> str:
    """Why a run's scores are not a finished run's ("" when they are): it did not end,
    or its seed or champion has no certified score on a split."""
    reason = str((terminal or {}).get("reason") or "")
    if state == "running":
        return "still running (its lock is held)"
    if state == "interrupted":
        if terminal is None:
            return "interrupted: no end event (the process was killed or crashed)"
        return f"interrupted ({reason or 'stopped'})"
    if state not in ENDED:
        return f"{state}" + (f": {reason}" if reason else "")
    if not has_champion:
        return "ended without a champion"
    for who, rewards in (("seed", seed), ("champion", champion)):
        missing = [s for s in SPLITS if s not in rewards]
        if missing:
            return f"{who} not evaluated on {', '.join(missing)}"
    return ""


def _read_or_why(path: Path) -> RunData | str:
    try:
        return read_run(path)
    except RunNotVerified as exc:
        return str(exc)


def read_runs(paths: list[Path]) -> list[RunData]:
    """Read every run (in worker processes when there are many); every run that fails
    verification is named in one error."""
    found = find_runs(paths)
    workers = min(os.cpu_count() or 1, len(found) // PER_WORKER)
    if workers >= 2:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_read_or_why, found))
    else:
        results = [_read_or_why(p) for p in found]
    runs = [r for r in results if isinstance(r, RunData)]
    bad = [r for r in results if isinstance(r, str)]
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        raise RunNotVerified(f"{bad[0]}{more}; compare reads only verified runs")
    return runs


# -- mixing task sets and evaluators ------------------------------------------------------


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _what_differs(a: Path, b: Path, lock: str) -> str:
    fa, fb = (_flat(RunPaths(p).read_json(RunPaths(p).root / lock)) for p in (a, b))
    keys = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    keys = [k for k in keys if k != "fingerprint"] or keys
    shown = ", ".join(keys[:4]) + (f" (+{len(keys) - 4} more)" if len(keys) > 4 else "")
    return shown or "the fingerprint"


def check_mixed(runs: list[RunData], force: bool) -> list[dict[str, Any]]:
    """Runs whose task set or evaluator differs from the first run's; raises unless forced."""
    refused = []
    ref = runs[0]
    for what, attr, lock in (
        ("task-set fingerprint", "taskset_fingerprint", "tasks.lock.json"),
        ("evaluator fingerprint", "evaluator_fingerprint", "evaluator.lock.json"),
    ):
        odd = [r for r in runs if getattr(r, attr) != getattr(ref, attr)]
        if not odd:
            continue
        differs = _what_differs(ref.path, odd[0].path, lock)
        message = (
            f"{odd[0].path.name} has a different {what} than {ref.path.name} "
            f"({lock} differs in {differs})"
        )
        if not force:
            others = f" and {len(odd) - 1} more run(s)" if len(odd) > 1 else ""
            raise MixedRuns(f"{message}{others}; use --force to compare them anyway")
        refused.append(
            {
                "what": what,
                "differs": differs,
                "reference": ref.run_id,
                "runs": [r.run_id for r in odd],
            }
        )
    return refused


# -- methods and pairs --------------------------------------------------------------------


def recipe_name(run_name: str) -> str:
    """The name a run gives its method: the run's name without the ``random_seed`` piece
    of its override label (``climb[random_seed=3]`` is ``climb``), as the seed is not part
    of the method."""
    label = re.fullmatch(r"(.*)\[(.*)\]", run_name)
    if label is None:
        return run_name
    pieces = [p for p in label.group(2).split(",") if not p.startswith("random_seed=")]
    return f"{label.group(1)}[{','.join(pieces)}]" if pieces else label.group(1)


def _names(runs: list[RunData]) -> list[str]:
    """Every recipe name in a method, the one most runs carry first (ties: the earlier)."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[recipe_name(r.name)] = counts.get(recipe_name(r.name), 0) + 1
    return sorted(counts, key=lambda n: -counts[n])


def group(runs: list[RunData], by: str) -> list[Method]:
    groups: dict[str, list[RunData]] = {}
    for r in runs:
        key = r.run_id if by == "run" else r.method
        groups.setdefault(key, []).append(r)
    methods = []
    for key, members in groups.items():
        members.sort(key=lambda r: (r.random_seed, r.path.name))
        names = _names(members)
        run = members[0]
        name = f"{run.path.parent.name}/{run.path.name}" if by == "run" else names[0]
        methods.append(
            Method(
                name,
                run.method if by == "recipe" else key,
                members,
                {s: split_estimate(members, s) for s in SPLITS},
                {s: task_count(members, s) for s in SPLITS},
                names,
            )
        )
    names = [m.name for m in methods]
    for m in methods:  # two methods may share a name (a --set that kept it): tell them apart
        if names.count(m.name) > 1:
            m.name = f"{m.name}#{m.digest[:8]}"
    return methods


def _refuse_copies(runs: list[RunData]) -> None:
    """A copied run folder is the same evidence twice: counted twice it would shrink every
    CI and p-value, so it is refused."""
    seen: dict[str, RunData] = {}
    for r in runs:
        first = seen.setdefault(r.run_id, r)
        if first is not r:
            raise RunFolderError(
                f"{r.path} is a copy of {first.path} (run id {r.run_id}); a run counts once, "
                "so compare each run folder once"
            )


def compare(
    paths: list[Path],
    *,
    by: str = "recipe",
    force: bool = False,
    include_unfinished: bool = False,
) -> Comparison:
    """Read, verify and group the runs under ``paths``; unfinished runs are left out (and
    listed) unless ``include_unfinished``."""
    runs = read_runs(paths)
    _refuse_copies(runs)
    unfinished = [r for r in runs if r.unfinished]
    if not include_unfinished:
        runs = [r for r in runs if not r.unfinished]
    if not runs:
        first = unfinished[0]
        raise RunFolderError(
            f"no finished run to compare: {len(unfinished)} left out ({first.path}: "
            f"{first.unfinished}); --include-unfinished takes them in"
        )
    refused = check_mixed(runs, force)
    methods = group(runs, by)
    pairs = [
        pair(a.name, a.runs, b.name, b.runs)
        for i, a in enumerate(methods)
        for b in methods[i + 1 :]
    ]
    judge(pairs)
    return Comparison(methods, pairs, refused, by, unfinished, include_unfinished)
