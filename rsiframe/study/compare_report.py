"""``compare --json``: the report as pydantic models (what a script reads; the terminal
table, the notes under it and the HTML page show the same values)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from rsiframe.study.compare import SPLITS, Comparison, Method, RunData
from rsiframe.study.compare_stats import Pair
from rsiframe.study.stats import Estimate


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScoreOut(_Out):
    """Mean over runs with the two-level bootstrap CI (``n`` runs, ``tasks`` tasks)."""

    mean: float | None
    ci: tuple[float | None, float | None]
    n: int
    tasks: int


class DifferenceOut(_Out):
    """A's sealed mean minus B's, with the same two-level bootstrap CI."""

    mean: float
    ci: tuple[float, float]


class PlanOut(_Out):
    """Runs per method to detect the observed difference at 80 % power, alpha 0.05
    (normal approximation); ``runs_per_method`` None when the data cannot say (``line``)."""

    runs_per_method: int | None
    difference: float | None
    sd: float | None
    line: str


class PairOut(_Out):
    a: str
    b: str
    design: str  # paired by seed | runs, unpaired | paired by task | —
    runs: tuple[int, int]  # A's and B's runs with a sealed score
    units: int  # seeds, runs or tasks in the test
    differ: int  # of them, those whose difference is not 0 (paired designs)
    difference: DifferenceOut | None
    p: float | None  # two-sided permutation p-value; None with a "cannot tell" verdict
    p_min: float | None  # the smallest p-value these data could give
    p_holm: float | None
    exact: bool | None
    verdict: str  # a_better | b_better | not_significant | cannot_tell | no_data
    reads: str
    # no difference found: the largest |A - B| inside the 95 % CI of the difference
    equivalence_bound: float | None
    plan: PlanOut


class MethodOut(_Out):
    name: str
    method_digest: str
    runs: list[str]
    names: list[str]  # every run name in the method (its display name first)
    mutator: str  # what made its children: mutate operator (and model), e.g. "knobs"
    unfinished_runs: list[str]  # taken in with --include-unfinished
    train: ScoreOut
    gate: ScoreOut
    sealed: ScoreOut
    evaluations: float
    task_runs: float
    model_tokens: float
    cost_usd: float
    wall_s: float
    model_calls: float = 0.0  # per run, mean: every call through the gateway
    model_calls_cached: float = 0.0  # of them, answered from its ledger at no cost


class RunOut(_Out):
    """An unfinished run: left out, or taken in (``included``) with --include-unfinished."""

    run_id: str
    path: str
    name: str
    random_seed: int
    state: str
    reason: str
    included: bool


class RefusedOut(_Out):
    what: str
    differs: str
    reference: str
    runs: list[str]


class CompareOut(_Out):
    methods: list[MethodOut]
    pairs: list[PairOut]
    unfinished: list[RunOut]
    refused: list[RefusedOut]
    alpha: float
    notes: list[str]  # the lines printed under the tables (CI meaning, test, warnings)


# -- from the comparison -------------------------------------------------------------------


def report_model(report: Comparison) -> CompareOut:
    return CompareOut(
        methods=[_method_out(m) for m in report.methods],
        pairs=[_pair_out(p) for p in report.pairs],
        unfinished=[_run_out(r, report.included_unfinished) for r in report.unfinished],
        refused=[RefusedOut(**r) for r in report.refused],
        alpha=report.alpha,
        notes=report.notes(),
    )


def report_json(report: Comparison) -> dict[str, Any]:
    return report_model(report).model_dump(mode="json")


def _score_out(e: Estimate | None, tasks: int) -> ScoreOut:
    if e is None:
        return ScoreOut(mean=None, ci=(None, None), n=0, tasks=tasks)
    return ScoreOut(mean=e.mean, ci=(e.lo, e.hi), n=e.n, tasks=tasks)


def _method_out(m: Method) -> MethodOut:
    return MethodOut(
        name=m.name,
        method_digest=m.digest,
        runs=[r.run_id for r in m.runs],
        names=m.names,
        mutator=m.mutator,
        unfinished_runs=[r.run_id for r in m.unfinished()],
        **{s: _score_out(m.scores[s], m.tasks[s]) for s in SPLITS},
        evaluations=m.usage("evaluations"),
        task_runs=m.usage("task_runs"),
        model_tokens=m.usage("tokens"),
        cost_usd=m.usage("cost"),
        wall_s=m.usage("wall_s"),
        model_calls=m.usage("model_calls"),
        model_calls_cached=m.usage("model_cached"),
    )


def _pair_out(p: Pair) -> PairOut:
    t, d = p.test, p.diff
    return PairOut(
        a=p.a,
        b=p.b,
        design=p.design,
        runs=p.runs,
        units=t.units if t else 0,
        differ=t.differ if t else 0,
        difference=DifferenceOut(mean=d.mean, ci=(d.lo, d.hi)) if d else None,
        p=t.p if t and p.verdict != "cannot_tell" else None,
        p_min=t.p_min if t else None,
        p_holm=p.p_holm if p.verdict != "cannot_tell" else None,
        exact=t.exact if t else None,
        verdict=p.verdict,
        reads=p.reads(),
        equivalence_bound=p.equivalence,
        plan=PlanOut(
            runs_per_method=p.plan.runs,
            difference=p.plan.difference,
            sd=p.plan.sd,
            line=p.plan.line,
        ),
    )


def _run_out(r: RunData, included: bool) -> RunOut:
    return RunOut(
        run_id=r.run_id,
        path=str(r.path),
        name=r.name,
        random_seed=r.random_seed,
        state=r.state,
        reason=r.unfinished,
        included=included,
    )
