"""``rsiframe fidelity``: does running a system through rsiframe change its scores?

The execution-fidelity check of the RSIHub paper. For each repeat, the recipe's seed is
evaluated on the gate tasks three times:

- **direct-A** and **direct-B**: the evaluator's own trial runner (:func:`run_tasks` on a
  fresh evaluator from the recipe, build and model server included for D/T/H targets) on
  a plain copy of the seed folder; no run folder, archive, operators or signing;
- **framework**: a real run of the recipe stopped after generation 0 (the seed's
  certified gate record, read back through the verified loader).

Items are (repeat, gate task). The recipe passes when framework-vs-direct disagreement is
not significantly higher than direct-vs-direct disagreement (exact one-sided McNemar on
the paired disagreement indicators, alpha 0.05); when direct-A and direct-B agree on every
item (a deterministic task set) the framework must agree with direct-A on every item too.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from rsiframe.archive.log import put_artifact
from rsiframe.engine.preflight import Plan, plan
from rsiframe.errors import RunFolderError
from rsiframe.evaluators.registry import make_evaluator, run_tasks
from rsiframe.study.stats import ALPHA, bootstrap_ci, mcnemar
from rsiframe.tasks.taskset import tasks_by_split

#: a task "passes" when its reward is at least this (rewards are in [0, 1])
PASS_REWARD = 0.5


class ItemResult(BaseModel):
    repeat: int
    task: str
    framework: float
    direct_a: float
    direct_b: float


class Verdict(BaseModel):
    items: int
    agree_framework_direct: float
    agree_direct_direct: float
    mean_diff: float  # framework minus direct-A
    mean_diff_ci: list[float]
    #: McNemar on (framework≠direct-A, direct-A≠direct-B) per item: b, c and one-sided p
    disagreement_b: int
    disagreement_c: int
    p_more_disagreement: float
    #: classic McNemar on pass/fail, framework vs direct-A (two-sided)
    pass_b: int
    pass_c: int
    p_pass_two_sided: float
    deterministic: bool
    passed: bool
    reason: str


class FidelityReport(BaseModel):
    recipe: str
    repeats: int
    gate_tasks: int
    runs: list[str]
    seconds: dict[str, float]
    verdict: Verdict
    items: list[ItemResult]


def _equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9


def judge(items: list[ItemResult], alpha: float = ALPHA) -> Verdict:
    """The pass rule over paired items (pure: unit-tested on its own)."""
    if not items:
        raise ValueError("no items to judge")
    n = len(items)
    fd = [not _equal(i.framework, i.direct_a) for i in items]
    dd = [not _equal(i.direct_a, i.direct_b) for i in items]
    dis = mcnemar(fd, dd)
    passes = mcnemar(
        [i.framework >= PASS_REWARD for i in items], [i.direct_a >= PASS_REWARD for i in items]
    )
    diff = bootstrap_ci([i.framework - i.direct_a for i in items])
    deterministic = not any(dd)
    if deterministic:
        passed = not any(fd)
        reason = (
            "direct-A and direct-B agree on every item, and so does the framework"
            if passed
            else f"direct runs agree on every item, but the framework differs on {sum(fd)}"
        )
    else:
        passed = dis.p_greater >= alpha
        reason = (
            f"framework-vs-direct disagreement ({sum(fd)}/{n}) is "
            + ("not " if passed else "")
            + f"significantly higher than direct-vs-direct ({sum(dd)}/{n}); "
            f"McNemar one-sided p = {dis.p_greater:.3g}"
        )
    return Verdict(
        items=n,
        agree_framework_direct=1 - sum(fd) / n,
        agree_direct_direct=1 - sum(dd) / n,
        mean_diff=diff.mean,
        mean_diff_ci=[diff.lo, diff.hi],
        disagreement_b=dis.b,
        disagreement_c=dis.c,
        p_more_disagreement=dis.p_greater,
        pass_b=passes.b,
        pass_c=passes.c,
        p_pass_two_sided=passes.p_two_sided,
        deterministic=deterministic,
        passed=passed,
        reason=reason,
    )


@dataclass
class _Direct:
    """One direct evaluation of the seed: a fresh evaluator, a fresh copy, a scratch store."""

    p: Plan

    def rewards(self, scratch: Path) -> dict[str, float]:
        r = self.p.resolved.recipe
        seed = scratch / "seed"
        shutil.copytree(r.seed, seed, symlinks=True)
        store = scratch / "artifacts"
        store.mkdir()
        config = self.p.resolved.data["evaluator"]["config"]  # resolved, as a run locks it
        evaluator = make_evaluator(r.evaluator.engine, config, scratch / "work")
        try:
            # the same audit a build gets inside a run (D/T/H)
            evaluator.protect(tasks_by_split(self.p.taskset, self.p.split))
            ids = self.p.split["gate"]
            out = run_tasks(evaluator, self.p.taskset, seed, ids, lambda b: put_artifact(store, b))
        finally:
            evaluator.close()
        return {t: out.runs[t].reward for t in ids}


def _framework(recipe: Path, sets: list[str], out: Path) -> dict[str, float]:
    """A real run stopped after generation 0; the seed's verified gate rewards."""
    from rsiframe.archive.loader import load_run
    from rsiframe.engine.loop import Engine, RunFailure

    engine = Engine.create(recipe, [*sets, "budget.max_generations=0"], out)
    try:
        engine.drive()
    except RunFailure:
        pass
    finally:
        engine.close()
    seed = load_run(out).state.seed
    rec = seed.record("gate") if seed is not None else None
    if rec is None:
        raise RunFolderError("the framework run has no certified gate record", where=str(out))
    return dict(rec.predicate.rewards)


def fidelity(
    recipe: Path,
    sets: list[str] | None = None,
    *,
    repeats: int = 1,
    out: Path | None = None,
    on_step: object = None,
) -> FidelityReport:
    """Run the three evaluations ``repeats`` times and judge them; run folders go to ``out``."""
    sets = list(sets or [])
    p = plan(recipe, sets)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = (
        out if out is not None else Path("archive") / f"fidelity-{p.resolved.recipe.name}-{stamp}"
    )
    if root.exists() and any(root.iterdir()):
        raise RunFolderError("output folder exists and is not empty", where=str(root))
    root.mkdir(parents=True, exist_ok=True)
    seconds = {"framework": 0.0, "direct_a": 0.0, "direct_b": 0.0}
    items: list[ItemResult] = []
    runs = []
    for r in range(repeats):
        got: dict[str, dict[str, float]] = {}
        for which in ("direct_a", "direct_b", "framework"):
            if callable(on_step):
                on_step(r, which)
            t0 = time.monotonic()
            if which == "framework":
                run_dir = root / f"run-{r}"
                got[which] = _framework(Path(recipe), sets, run_dir)
                runs.append(str(run_dir.resolve()))
            else:
                with tempfile.TemporaryDirectory(prefix=f"rsiframe-fidelity-{which}-") as tmp:
                    got[which] = _Direct(p).rewards(Path(tmp))
            seconds[which] += time.monotonic() - t0
        for t in p.split["gate"]:
            items.append(
                ItemResult(
                    repeat=r,
                    task=t,
                    framework=got["framework"].get(t, 0.0),
                    direct_a=got["direct_a"][t],
                    direct_b=got["direct_b"][t],
                )
            )
    return FidelityReport(
        recipe=str(Path(recipe).resolve()),
        repeats=repeats,
        gate_tasks=len(p.split["gate"]),
        runs=runs,
        seconds={k: round(v, 1) for k, v in seconds.items()},
        verdict=judge(items),
        items=items,
    )


def print_fidelity(report: FidelityReport, out: Console) -> None:
    """The verdict as a table, then PASS or FAIL with its reason."""
    v = report.verdict
    table = Table(title=f"fidelity {report.recipe}: {v.items} items", title_justify="left")
    for col in ("measure", "value"):
        table.add_column(col)
    ci = v.mean_diff_ci
    rows = [
        ("agreement framework vs direct-A", f"{v.agree_framework_direct:.3f}"),
        ("agreement direct-A vs direct-B", f"{v.agree_direct_direct:.3f}"),
        ("mean reward framework - direct-A", f"{v.mean_diff:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]"),
        (
            "McNemar: more disagreement (b, c, p)",
            f"{v.disagreement_b}, {v.disagreement_c}, p={v.p_more_disagreement:.3g}",
        ),
        (
            "McNemar: pass/fail framework vs direct-A",
            f"{v.pass_b}, {v.pass_c}, p={v.p_pass_two_sided:.3g}",
        ),
        (
            "seconds (framework, direct-A, direct-B)",
            ", ".join(f"{report.seconds[k]:.0f}" for k in ("framework", "direct_a", "direct_b")),
        ),
    ]
    for row in rows:
        table.add_row(*row)
    out.print(table)
    out.print(f"{'PASS' if v.passed else 'FAIL'}: {v.reason}", highlight=False, markup=False)
    for run_dir in report.runs:
        out.print(f"framework run: {run_dir}", highlight=False, markup=False)
