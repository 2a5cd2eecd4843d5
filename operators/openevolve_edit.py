"""mutate ``openevolve_edit``: OpenEvolve's mutation prompt and its model ensemble.

OpenEvolve (``prompt/sampler.py``, ``llm/ensemble.py``, ``config.py``): the model sees the
parent's code and metrics, the island's top programs (``num_top_programs``), diverse
inspirations from other MAP-Elites cells, the parent's previous attempts with their
outcomes, and the evaluator's artifacts; it answers with SEARCH/REPLACE diffs
(``diff_based_evolution``, the default) or rewrites files whole. Each mutation draws its
model from a weighted ensemble (``models: [{model, weight}]``, each a model the recipe
declares), and the draw is recorded in the mutation's details.

The top programs and inspirations are the ones the ``openevolve`` select named in the
proposal's placement (another select: the run's best by train score, no inspirations).
Only train-split results reach the prompt: train scores, certified train trajectories
(the verifier's output as artifacts); never a gate or sealed score or task.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsiframe.api import CandidateView, InformationFlowError, MutateContext, Mutation, RunView
from rsiframe.operators.edits import EditError, apply_edits, parse_edits
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from rsiframe.operators.llmprompt import Unparsed, ask_until_parsed, mutation_context


class EnsembleMember(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="a model declared in the recipe's models: section")
    weight: float = Field(1.0, gt=0, description="relative chance this model is drawn")


class OpenEvolveEditConfig(LlmEditConfig):
    models: list[EnsembleMember] = Field(
        default_factory=list,
        description="weighted ensemble, one model drawn per mutation (empty: model alone)",
    )
    diff_based: bool = Field(True, description="SEARCH/REPLACE diffs; false: whole files")
    num_previous: int = Field(3, ge=0, description="the parent's earlier children shown")
    artifact_chars: int = Field(600, ge=0, description="verifier output shown per program")
    program_files: int = Field(2, ge=0, description="changed files shown per other program")

    @model_validator(mode="before")
    @classmethod
    def _first_is_model(cls, data: Any) -> Any:
        """Without ``model``, the ensemble's first member is the operator's model."""
        if isinstance(data, dict) and "model" not in data and data.get("models"):
            first = data["models"][0]
            data = {**data, "model": first.get("model") if isinstance(first, dict) else first}
        return data


def draw_model(cfg: OpenEvolveEditConfig, rng: random.Random) -> str:
    """One model of the ensemble, in proportion to the weights (``model`` alone without)."""
    if not cfg.models:
        return cfg.model
    return rng.choices([m.model for m in cfg.models], [m.weight for m in cfg.models])[0]


def _train(run: RunView, c: CandidateView) -> float | None:
    try:
        score = run.score(c.id, "train")
        if score is None and c.stopped_at and c.stopped_at.startswith("train"):
            score = run.score(c.id, c.stopped_at)
    except (InformationFlowError, KeyError):
        return None
    return score


def _artifacts(run: RunView, cid: str, chars: int) -> str:
    """The verifier's output on the program's failed train tasks (its certified ones)."""
    try:
        rows = run.trajectories(cid, "train")
    except (InformationFlowError, KeyError, FileNotFoundError):
        return ""
    tails = [
        f"{r.get('task')}: {str(r.get('verifier_tail') or r.get('error') or '').strip()}"
        for r in rows
        if (r.get("reward") or 0.0) < 1.0
    ]
    text = "\n".join(tails)
    return text[-chars:] if chars else ""


class OpenEvolveEdit(LlmEdit):
    """OpenEvolve's prompt (top programs, inspirations, previous attempts, artifacts) and
    weighted model ensemble; SEARCH/REPLACE or whole-file answers."""

    name = "openevolve_edit"
    Config = OpenEvolveEditConfig
    config: OpenEvolveEditConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        cfg = self.config
        model = draw_model(cfg, ctx.rng)
        context = mutation_context(ctx, cfg)
        context["scores"] = {"train": context["scores"].get("train")}  # never the gate's
        placement = self._placement(ctx)
        programs = self._programs(ctx, context["files"], placement)
        prompt = cfg.render(
            "openevolve.md.j2", diff_based=cfg.diff_based, placement=placement,
            **programs, **context,
        )  # fmt: skip
        default_path = context["single_file"]

        def apply(text: str) -> tuple[list[str], str]:
            edits = parse_edits(text, default_path=default_path)
            big = [e.path for e in edits if e.whole and cfg.diff_based and self._big(ctx, e.path)]
            if big:
                raise EditError(f"{', '.join(big)}: too large to replace whole; use SEARCH/REPLACE")
            first = text.strip().splitlines()[0] if text.strip() else ""
            return apply_edits(edits, ctx.workdir), first

        try:
            changed, first = ask_until_parsed(
                cfg.model_copy(update={"model": model}), prompt, apply, retries=cfg.retries,
                again="Try again.", errors=(EditError,),
            )  # fmt: skip
        except Unparsed as exc:
            raise EditRejected(f"no applicable edit from {model!r}: {exc}") from exc
        return Mutation(
            description=first[:200] if first and "<<<<<<<" not in first else "openevolve_edit",
            details={
                "model": model,
                "ensemble": [m.model_dump() for m in cfg.models],
                "changed": changed,
                "diff_based": cfg.diff_based,
                "branch": placement.get("branch"),
                "top": [p["id"] for p in programs["top_programs"]],
                "inspirations": [p["id"] for p in programs["inspirations"]],
                "previous": [p["id"] for p in programs["previous"]],
            },
        )

    @staticmethod
    def _placement(ctx: MutateContext) -> dict[str, Any]:
        """What select named for this child (a candidate-carried copy gets none)."""
        return dict(getattr(ctx, "placement", None) or {})

    def _programs(
        self, ctx: MutateContext, files: list[dict], placement: dict[str, Any]
    ) -> dict[str, list[dict[str, Any]]]:
        """The other programs the prompt shows: top, inspirations, previous attempts."""
        run = ctx.run
        views = {c.id: c for c in run.candidates()}
        top_ids = placement.get("top")
        if top_ids is None:  # another select: the run's best by train score
            ranked = [(s, c.id) for c in run.admitted() if (s := _train(run, c)) is not None]
            top_ids = [cid for _, cid in sorted(ranked, key=lambda sc: -sc[0])][:3]
        cells = placement.get("inspiration_cells") or []
        inspirations = [
            {**self._program(run, views[cid], files), "cell": cells[i] if i < len(cells) else None}
            for i, cid in enumerate(placement.get("inspirations") or [])
            if cid in views
        ]
        earlier = [
            c
            for c in views.values()
            if c.parent == ctx.parent.id and c.id != ctx.candidate_id and c.state != "proposed"
        ]
        previous = [self._attempt(run, c) for c in earlier[-self.config.num_previous :]]
        if not self.config.num_previous:
            previous = []
        return {
            "top_programs": [
                self._program(run, views[cid], files) for cid in top_ids if cid in views
            ],
            "inspirations": inspirations,
            "previous": previous,
        }

    def _program(self, run: RunView, c: CandidateView, files: list[dict]) -> dict[str, Any]:
        """Another program: its train score, description, and files that differ from the
        parent's (the first ``program_files`` of them)."""
        changed: list[dict[str, str]] = []
        for f in files:
            if len(changed) >= self.config.program_files:
                break
            try:
                data = run.read_file(c.id, f["path"])
            except (KeyError, FileNotFoundError, InformationFlowError):
                continue
            text = data[: self.config.max_file_bytes].decode(errors="replace")
            if text != f["text"]:
                changed.append({"path": f["path"], "text": text})
        return {
            "id": c.id,
            "description": c.description,
            "train": _train(run, c),
            "files": changed,
            "artifacts": _artifacts(run, c.id, self.config.artifact_chars),
        }

    def _attempt(self, run: RunView, c: CandidateView) -> dict[str, Any]:
        """One earlier child of the parent: what it changed and how it ended."""
        return {
            "id": c.id,
            "description": c.description,
            "outcome": c.state + (f" (stopped at {c.stopped_at})" if c.stopped_at else ""),
            "train": _train(run, c),
            "artifacts": _artifacts(run, c.id, self.config.artifact_chars)
            if c.state == "admitted"
            else "",
        }
