"""The mutation transaction: one child, from its parent to a commit or a rejection.

::

    select -> rollout -> [analyze] -> mutate -> GUARDRAIL -> DUPLICATE -> [validate]
      -> [novelty] -> commit
                        `-- retry: mutate again (at most MAX_REPROPOSALS times)

:meth:`Transaction.select` picks the parent (the engine then records
``candidate_proposed``); :meth:`Transaction.run` does the rest in a work folder of
its own and returns an :data:`Outcome`, the ``candidate_mutated`` or
``candidate_rejected`` event the engine records. Evidence on the way
(``rollout_done``, ``analysis_done``, ``usage``) goes through ``emit``, the run's
one writer. The guardrail and the duplicate rule (:mod:`~rsiframe.engine.duplicates`)
belong to the framework; operators only return results.

A proposal a kill cut after its model calls were paid is retaken: the next proposal takes
its parent and its draws (RNG and model requests, ``draws``), so the gateway serves the
answers it paid for from its ledger. An operator whose last model call failed for
infrastructure reasons (by the gateway's record, not the operator's word) abandons its
child (``model_outage``) instead of having it rejected as the method's failure.

A novelty check that answers ``retry`` (ShinkaEvolve's novelty rejection sampling) sends
the child back to mutate, from a fresh copy of its parent, with the reasons so far
(``MutateContext.rejected_as_similar``) and an RNG of its own per attempt; the mutate
call's model spend counts against the run's budgets like any call. The committed child's
mutation report lists its re-proposals (``details.novelty_reproposals``); a child still
rejected is rejected at ``novelty`` with every attempt's reason.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.api import (
    MAX_REPROPOSALS,
    Analysis,
    AnalyzeContext,
    CandidateView,
    Check,
    MergeContext,
    MergePlan,
    MutateContext,
    Mutation,
    NoveltyContext,
    ProposalSkipped,
    Rollout,
    RolloutContext,
    SearchConverged,
    SelectContext,
    ValidateContext,
)
from rsiframe.archive import events as E
from rsiframe.archive.state import Candidate, RunState
from rsiframe.engine.duplicates import TreeClaims
from rsiframe.engine.evaluation import BudgetRefused, TaskRunner
from rsiframe.engine.taskruns import TaskRunMeter
from rsiframe.errors import RsiError
from rsiframe.repo.candidates import CANDIDATE_REFS, REJECTED_REFS, CandidateRepo
from rsiframe.repo.exportdir import copy_into
from rsiframe.repo.gittree import FlatTree, Snapshot, snapshot
from rsiframe.repo.guardrail import check as guardrail_check
from rsiframe.repo.merge import merge_base, three_way
from rsiframe.slots.calls import OperatorCalls, OperatorFailed
from rsiframe.slots.runview import as_view
from rsiframe.surface import Surface
from rsiframe.tasks.taskset import TaskLock
from rsiframe.util.digest import canonical_json

#: a validate step's commands changed the tree it checked
VALIDATE_CHANGED = "the validate step changed the tree"
#: what a transaction ends with: the event the engine records for the candidate
Outcome = E.CandidateMutated | E.CandidateRejected | E.CandidateAbandoned
Emit = Callable[[E.EventData], Any]


@dataclass(frozen=True)
class Repropose:
    """Novelty sent the child back to mutate (``Check.retry``), with its reason."""

    reason: str
    description: str


class RunFailure(Exception):
    """The run cannot go on (e.g. select chose a non-admitted parent)."""


class RunConverged(Exception):
    """Select declared the search converged (:class:`~rsiframe.api.SearchConverged`)."""


def failure_reason(exc: Exception) -> str:
    """A failed run's reason: the message of a known failure, the repr of anything else (a bug)."""
    if isinstance(exc, RunFailure | RsiError):
        return str(exc)
    return f"internal error: {exc!r}"


class Transaction:
    """The steps of one child's mutation, sharing the run's operators and repository."""

    def __init__(
        self,
        calls: OperatorCalls,
        repo: CandidateRepo,
        tasks: TaskRunner,
        task_lock: TaskLock,
        surface: Surface,
        ignore: list[str],
        put: Callable[[bytes], str],
        emit: Emit,
        meter: TaskRunMeter,
        claims: TreeClaims,
        *,
        splits: list[str] | None = None,
        merge_rate: float = 0.0,
        outage_of: Callable[[str, str], str | None] = lambda cid, slot: None,
    ) -> None:
        """``meter``: charges a rollout's and a minibatch's uncertified task runs;
        ``claims``: the trees candidates hold (the duplicate rule); ``outage_of``: the
        infrastructure failure an operator call's last model call ended on, if any."""
        self.calls = calls
        self.repo = repo
        self.tasks = tasks
        self.meter = meter
        self.task_lock = task_lock
        self.surface = surface
        self.ignore = ignore
        self.put = put  # artifacts are content-addressed: any thread may store them
        self.emit = emit
        self.splits = list(splits or [])  # a child's evaluation stages (staged evaluation)
        self.merge_rate = merge_rate
        self.claims = claims
        self.outage_of = outage_of
        #: merges proposed by select, run by :meth:`run`: (plan, second parent, base)
        self._merges: dict[str, tuple[MergePlan, Candidate, Candidate]] = {}
        self._placements: dict[str, dict[str, Any]] = {}  # select's, for the child's mutate

    def put_json(self, value: Any) -> str:
        return self.put(canonical_json(value))

    def export(self, c: Candidate) -> Path:
        assert c.commit is not None and c.tree is not None
        return self.repo.verified_export(c.id, c.commit, c.tree)

    # -- select ---------------------------------------------------------------------

    def select(self, state: RunState, cid: str, generation: int) -> E.CandidateProposed:
        """The parent of the next child, as the event that proposes it (a cut proposal's
        retake, or select's choice)."""
        proposed = self._retake(state, cid, generation) or self._selected(state, cid, generation)
        self._placements[cid] = dict(proposed.placement)
        self.claims.opened(cid, len(state.candidates))
        return proposed

    def _retake(self, state: RunState, cid: str, generation: int) -> E.CandidateProposed | None:
        """The next proposal retakes the earliest one a kill cut after its model calls were
        paid: same parent, same draws (select already chose that parent for it)."""
        if not state.retakes:
            return None
        draws, parent = next(iter(state.retakes.items()))
        cut = state.candidates[draws]
        return E.CandidateProposed(
            id=cid,
            parent=parent,
            generation=generation,
            reason=f"retakes {draws} (cut by a kill after its model calls were paid)",
            placement=cut.placement,
            draws=draws,
        )

    def _selected(self, state: RunState, cid: str, generation: int) -> E.CandidateProposed:
        ctx = SelectContext(
            self.calls.view, self.calls.rng(cid, "select"), generation, candidate_id=cid
        )
        op = self.calls.op("select")
        try:
            sel = self.calls.call(cid, "select", lambda: op.select(ctx))
        except OperatorFailed as exc:
            if isinstance(exc.__cause__, SearchConverged):
                raise RunConverged(str(exc.__cause__)) from exc
            raise RunFailure(str(exc)) from exc
        parent = state.candidates.get(sel.parent)
        if parent is None or parent.state != "admitted":
            raise RunFailure(
                f"select operator chose {sel.parent!r}, which is not an admitted candidate"
            )
        proposed = E.CandidateProposed(
            id=cid,
            parent=parent.id,
            generation=generation,
            reason=sel.reason,
            placement=sel.placement,
        )
        return self._maybe_merge(state, proposed, parent, generation)

    def _maybe_merge(
        self, state: RunState, proposed: E.CandidateProposed, parent: Candidate, generation: int
    ) -> E.CandidateProposed:
        """With probability ``merge.rate``, the proposal becomes a merge the operator plans."""
        cid, op = proposed.id, self.calls.op("merge")
        if op is None or self.calls.rng(cid, "merge-rate").random() >= self.merge_rate:
            return proposed
        ctx = MergeContext(
            self.calls.view, self.calls.rng(cid, "merge"), generation, cid, as_view(parent)
        )
        try:
            plan: MergePlan = self.calls.call(cid, "merge", lambda: op.merge(ctx))
        except OperatorFailed as exc:
            raise RunFailure(str(exc)) from exc
        if plan.partner is None:  # no partner worth merging: a mutation after all
            return proposed
        second = state.candidates.get(plan.partner)
        if second is None or second.state != "admitted" or second.id == parent.id:
            raise RunFailure(
                f"merge operator chose {plan.partner!r}, which is not a second admitted candidate"
            )
        base = self._merge_base(state, plan, parent, second)
        self._merges[cid] = (plan, second, base)
        reason = f"merge of {parent.id} and {second.id} (base {base.id}): {plan.reason}"
        return proposed.model_copy(update={"parents": [parent.id, second.id], "reason": reason})

    @staticmethod
    def _merge_base(
        state: RunState, plan: MergePlan, parent: Candidate, second: Candidate
    ) -> Candidate:
        """The plan's common ancestor (checked to be one), else the nearest."""
        dag = {c.id: c.parents for c in state.candidates.values()}
        if plan.base is None:
            return state.candidates[merge_base(dag, parent.id, second.id) or ""]
        common = _ancestors(dag, parent.id) & _ancestors(dag, second.id)
        if plan.base not in common or state.candidates[plan.base].commit is None:
            raise RunFailure(
                f"merge operator chose base {plan.base!r}, which is not a common ancestor "
                f"of {parent.id} and {second.id}"
            )
        return state.candidates[plan.base]

    # -- the rest -------------------------------------------------------------------

    def run(self, cid: str, parent: Candidate, generation: int, workdir: Path) -> Outcome:
        """Rollout to commit in ``workdir`` (or a merge); an operator's failure rejects it
        (abandons it, when the gateway saw its model fail for infrastructure reasons)."""
        try:
            merge = self._merges.pop(cid, None)
            if merge is not None:
                outcome = self._merge(cid, parent, generation, workdir, *merge)
            else:
                outcome = self._steps(cid, parent, generation, workdir)
        except OperatorFailed as exc:
            outcome = self._failed(cid, exc)
        finally:
            self.claims.closed(cid)
            self._placements.pop(cid, None)
        if (why := self.meter.refused.pop(cid, None)) is not None:  # max_task_runs: the run
            return E.CandidateRejected(id=cid, stage="budget", reasons=[why])  # ends exhausted
        return outcome

    def _failed(self, cid: str, exc: OperatorFailed) -> Outcome:
        """An operator's failure rejects the child with its traceback; a skipped proposal
        (the operator's method declined it) with its reason only, as does a rollout or
        minibatch whose agent the run's budget refused a model call (stage ``budget``); one
        whose last model call failed for infrastructure reasons (by the gateway's record)
        abandons it."""
        outage = self.outage_of(cid, exc.slot)
        if outage is not None:  # the model's fault, by the gateway's record: not the method's
            reason = f"model outage in {exc.slot}: {outage}"
            return E.CandidateAbandoned(id=cid, reason=reason, cause="model_outage")
        if isinstance(exc.__cause__, BudgetRefused):  # the run's budget, not the child's fault
            return E.CandidateRejected(id=cid, stage="budget", reasons=[str(exc.__cause__)])
        if isinstance(exc.__cause__, ProposalSkipped):
            why = f"{exc.slot} skipped the proposal: {exc.__cause__}"
            return E.CandidateRejected(id=cid, stage=exc.slot, reasons=[why])
        digest = self.put(exc.trace.encode())
        return E.CandidateRejected(id=cid, stage=exc.slot, reasons=[str(exc)], traceback=digest)

    def _steps(self, cid: str, parent: Candidate, generation: int, workdir: Path) -> Outcome:
        calls, view = self.calls, self.calls.view
        pview = as_view(parent)
        rollout = self._rollout(cid, parent, generation)
        analysis = None
        if (aop := calls.op("analyze")) is not None:
            actx = AnalyzeContext(view, calls.rng(cid, "analyze"), generation, pview, rollout)
            analysis = calls.call(cid, "analyze", lambda: aop.analyze(actx))
            digest = self.put_json(analysis.model_dump(mode="json"))
            self.emit(E.AnalysisDone(id=cid, analysis=digest))

        tried: list[Repropose] = []
        while True:
            mutation = self._mutate(cid, parent, generation, workdir, rollout, analysis, tried)
            outcome = self._commit(
                cid, parent, generation, workdir, mutation, rollout=rollout, tried=tried
            )
            if not isinstance(outcome, Repropose):
                return outcome
            tried.append(outcome)

    def _mutate(
        self,
        cid: str,
        parent: Candidate,
        generation: int,
        workdir: Path,
        rollout: Rollout,
        analysis: Analysis | None,
        tried: list[Repropose],
    ) -> Mutation:
        """One mutate call in a fresh copy of the parent; a re-proposal (``tried``) gets an
        RNG of its own and the reasons its earlier proposals were sent back."""
        calls, view = self.calls, self.calls.view
        assert parent.commit is not None
        self._copy_parent(parent, workdir)
        key = "mutate" if not tried else f"mutate#{len(tried)}"
        mctx = MutateContext(
            view,
            calls.rng(cid, key),
            generation,
            cid,
            as_view(parent),
            workdir,
            rollout,
            analysis,
            view.lessons,
            self.surface.include,
            self.surface.exclude,
            self._placements.get(cid, {}),
            tuple(t.reason for t in tried),
        )
        mop = calls.op("mutate")
        # mutation.usage (the operator's own report) stays in the mutation artifact only:
        # the gateway meters every model call (model_call events)
        mutation: Mutation = calls.call(cid, "mutate", lambda: mop.mutate(mctx))
        if not tried:
            return mutation
        earlier = [{"reason": t.reason, "description": t.description} for t in tried]
        details = {**mutation.details, "novelty_reproposals": earlier}
        return mutation.model_copy(update={"details": details})

    def _copy_parent(self, parent: Candidate, workdir: Path) -> None:
        """``workdir`` a copy of the parent's verified export (same bytes and modes as its
        commit), written over what an earlier mutation left there (``exportdir``)."""
        export = self.export(parent)
        try:
            copy_into(export, workdir)
        except OSError:  # what was there could not be made right: a new copy
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.copytree(export, workdir, symlinks=True)

    def _merge(
        self,
        cid: str,
        parent: Candidate,
        generation: int,
        workdir: Path,
        plan: MergePlan,
        second: Candidate,
        base: Candidate,
    ) -> Outcome:
        """The framework's 3-way merge of two admitted candidates, then the usual checks."""
        assert parent.commit and second.commit and base.commit
        self.calls.progress.stage(cid, "merge")
        self._copy_parent(parent, workdir)
        out = three_way(
            self.repo, base.commit, parent.commit, second.commit, self.surface, plan, workdir
        )
        mutation = Mutation(
            description=f"merge {parent.id} + {second.id}",
            details={"base": base.id, "plan": plan.model_dump(mode="json"), **out.as_dict()},
        )
        outcome = self._commit(cid, parent, generation, workdir, mutation, second)
        assert not isinstance(outcome, Repropose)  # a merge is never sent back (tried=None)
        return outcome

    def _commit(
        self,
        cid: str,
        parent: Candidate,
        generation: int,
        workdir: Path,
        mutation: Mutation,
        second: Candidate | None = None,
        rollout: Rollout | None = None,
        tried: list[Repropose] | None = None,
    ) -> Outcome | Repropose:
        """Guardrail, the duplicate rule, validate, novelty and the commit (a merge commit
        with ``second``); :class:`Repropose` when novelty sends a mutation (``tried`` not
        None: its earlier re-proposals) back."""
        calls, view, pview = self.calls, self.calls.view, as_view(parent)
        assert parent.commit is not None
        # guardrail: the actual tree diff against the surface (framework-owned)
        calls.progress.stage(cid, "guardrail")
        snap = snapshot(workdir, self.ignore)
        parent_tree = self.repo.flat_tree(parent.commit)
        report = guardrail_check(parent_tree, snap, self.surface)
        changes = [_change_dict(ch) for ch in report.changes]
        told = self.put_json(mutation.model_dump(mode="json"))  # the operator's report
        reject = _Rejector(self.repo, cid, parent, mutation, report=told)
        if not report.ok:
            reasons = [f"{v.reason}: {v.path}" for v in report.violations]
            violations = [v.as_dict() for v in report.violations]
            return reject("guardrail", reasons, snap, violations=violations)
        if not report.changes:
            step = "mutate" if second is None else "merge"
            return reject(step, [f"the {step} changed nothing"], None)
        tree = self.repo.store(snap)
        # the duplicate rule (framework-owned): no validate, commit or evaluation for a tree
        # some candidate already holds
        if (twin := self.claims.claim(cid, tree)) is not None:
            return reject("duplicate", [f"duplicate of {twin}"], None)
        reject = _Rejector(self.repo, cid, parent, mutation, tree, told)  # holds the tree
        validated: Check | None = None
        if (vop := calls.op("validate")) is not None:
            vctx = self._validate_context(cid, generation, pview, workdir, changes, rollout, second)
            check = validated = calls.call(cid, "validate", lambda: vop.validate(vctx))
            if not check.ok:
                return reject(
                    "validate", [check.reason], snap, output=check.output, validated=check
                )
            if (changed := self._changed_by_validate(workdir, tree, parent_tree)) is not None:
                return reject("validate", [VALIDATE_CHANGED], changed[0], violations=changed[1])
        if (nop := calls.op("novelty")) is not None:
            n = len(tried or [])
            nctx = NoveltyContext(
                view, calls.rng(cid, "novelty"), generation, cid, pview, tree, changes, n, workdir
            )
            check = calls.call(cid, "novelty", lambda: nop.novelty(nctx))
            if not check.ok:
                if check.retry and tried is not None and n < MAX_REPROPOSALS:
                    self.claims.release(cid, tree)  # as a resumed run would see it
                    return Repropose(check.reason, mutation.description)
                earlier = [f"proposal {i + 1}: {t.reason}" for i, t in enumerate(tried or [])]
                last = f"proposal {n + 1}: {check.reason}" if earlier else check.reason
                return reject("novelty", [*earlier, last], snap)
        commit = self.repo.commit(
            tree,
            parent.commit,
            f"{cid}: {mutation.description}",
            f"{CANDIDATE_REFS}/{cid}",
            entries=snap.entries,
            merged=second.commit if second is not None else None,
        )
        return E.CandidateMutated(
            id=cid,
            commit=commit,
            tree=tree,
            parent_commit=parent.commit,
            description=mutation.description,
            changes=changes,
            mutation=told,
            sandbox=_sandboxes(mutation, validated),
            merged_commit=second.commit if second is not None else None,
            splits=self.splits,
        )

    def _changed_by_validate(
        self, workdir: Path, tree: str, parent_tree: FlatTree
    ) -> tuple[Snapshot, list[dict[str, Any]]] | None:
        """The work tree after validate when it is no longer ``tree``, and what it changed
        outside the surface (validate commands must not change the tree: the claimed,
        checked tree is what is committed)."""
        again = snapshot(workdir, self.ignore)
        if self.repo.store(again) == tree:
            return None
        moved = guardrail_check(parent_tree, again, self.surface).violations
        return again, [v.as_dict() for v in moved]

    def _validate_context(
        self,
        cid: str,
        generation: int,
        pview: CandidateView,
        workdir: Path,
        changes: list[dict[str, Any]],
        rollout: Rollout | None,
        second: Candidate | None,
    ) -> ValidateContext:
        """What validate sees: the child's changes, a runner for its work tree, and (GEPA)
        the rollout its mutation was made from or a merge's second parent."""
        return ValidateContext(
            self.calls.view,
            self.calls.rng(cid, "validate"),
            generation,
            cid,
            pview,
            workdir,
            changes,
            self._work_runner(cid, workdir),
            list(self.task_lock.split["train"]),
            rollout,
            as_view(second) if second is not None else None,
        )

    def _work_runner(self, cid: str, workdir: Path) -> Callable[[list[str]], list[dict[str, Any]]]:
        """Validate's ``run_train``: the work tree, sandboxed and uncertified, on train ids."""
        train = self.task_lock.split["train"]

        def run_train(task_ids: list[str]) -> list[dict[str, Any]]:
            ids = [t for t in task_ids if t in train]
            self.task_lock.check(("train",))
            copy = workdir.with_name(workdir.name + "-minibatch")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(workdir, copy, symlinks=True)  # the work tree stays untouched
            try:
                return self.meter.run(cid, "minibatch", copy, ids)
            finally:
                shutil.rmtree(copy, ignore_errors=True)

        return run_train

    def _rollout(self, cid: str, parent: Candidate, generation: int) -> Rollout:
        train = self.task_lock.split["train"]

        def run_train(task_ids: list[str] | None = None) -> list[dict[str, Any]]:
            ids = [t for t in (task_ids or train) if t in train]
            self.task_lock.check(("train",))
            return self.meter.run(cid, "rollout", self.export(parent), ids)

        ctx = RolloutContext(
            self.calls.view,
            self.calls.rng(cid, "rollout"),
            generation,
            as_view(parent),
            run_train,
            list(train),
            self.tasks.instructions(train),
        )
        op = self.calls.op("rollout")
        rollout: Rollout = self.calls.call(cid, "rollout", lambda: op.rollout(ctx))
        digest = self.put_json(rollout.model_dump(mode="json"))
        self.emit(E.RolloutDone(id=cid, rollout=digest, reused=rollout.reused))
        return rollout


class _Rejector:
    """Builds a child's ``candidate_rejected``, keeping what it produced as evidence."""

    def __init__(
        self,
        repo: CandidateRepo,
        cid: str,
        parent: Candidate,
        m: Mutation,
        tree: str | None = None,
        report: str | None = None,
    ) -> None:
        """``tree``: the tree the child holds, once past the duplicate rule; ``report``:
        the digest of the mutation's report."""
        self.repo, self.cid, self.parent, self.mutation, self.tree = repo, cid, parent, m, tree
        self.report = report

    def __call__(
        self,
        stage: str,
        reasons: list[str],
        snap: Snapshot | None,
        *,
        violations: list[dict[str, Any]] | None = None,
        output: str = "",
        validated: Check | None = None,
    ) -> E.CandidateRejected:
        evidence = None
        if snap is not None and not snap.problems:
            # keep what the mutation produced, under a ref of its own
            evidence = self.repo.commit(
                self.repo.store(snap),
                self.parent.commit,
                f"{self.cid} (rejected): {self.mutation.description}",
                f"{REJECTED_REFS}/{self.cid}",
            )
        return E.CandidateRejected(
            id=self.cid,
            stage=stage,
            reasons=reasons,
            violations=violations or [],
            commit=evidence,
            description=self.mutation.description,
            output=output[-4000:],
            sandbox=_sandboxes(self.mutation, validated),
            tree=self.tree,
            mutation=self.report,
        )


def _sandboxes(mutation: Mutation, check: Check | None) -> dict[str, Any]:
    """How the mutate (and validate) operators were confined, for the candidate's event."""
    used = {"mutate": mutation.sandbox, "validate": check.sandbox if check else None}
    return {slot: u.model_dump(mode="json") for slot, u in used.items() if u is not None}


def _ancestors(dag: dict[str, list[str]], cid: str) -> set[str]:
    """``cid`` and every ancestor of it in the candidate DAG."""
    seen, todo = set(), [cid]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo.extend(dag.get(c, ()))
    return seen


def _change_dict(ch: Any) -> dict[str, Any]:
    d = {"kind": ch.kind, "path": ch.path}
    if ch.old_path:
        d["old_path"] = ch.old_path
    return d
