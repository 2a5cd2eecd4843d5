"""ShinkaEvolve's mechanisms (SakanaAI/ShinkaEvolve @ 9912af1) beside the framework's own.

- novelty ``embed_reject`` (``core/novelty_judge.py``, ``code_embed_sim_threshold`` 0.99,
  ``max_novelty_attempts`` 3): the child's changed files are embedded through the run's
  gateway (``/v1/embeddings``, metered) and compared by cosine similarity with the same
  files of every admitted candidate of its island (of the archive when select places no
  islands); at or above the threshold the child goes back to mutate (``Check.retry``), up
  to ``max_attempts`` times, then it is rejected.
- mutate ``ucb_edit`` (``llm/prioritization.py``, ``llm_dynamic_selection: ucb``):
  ``llm_edit`` whose model is chosen per mutation among ``models`` by a UCB1 bandit. Its
  counts and rewards are read from the run (the mutation report of each child, committed
  or rejected after its mutation, names its model), so a resumed run rebuilds them from
  the event log. A child's reward is its gate score minus its parent's, clipped at 0
  (Shinka's asymmetric shift by the parent); a child rejected, or judged without a gate
  score, earns 0 (Shinka's imputed worst reward); means are divided by the largest reward seen
  (Shinka's adaptive scale). Unpulled models go first; then the UCB1 maximiser, or with
  probability ``epsilon`` another model (Shinka's epsilon, default 0.2).
- reflect ``meta_scratchpad`` (``meta_rec_interval`` 10): every ``interval`` generations a
  model summarises the programs of those generations (verdict, gate score, change over
  the parent, description) with the previous scratchpad into a new one; in between the
  scratchpad is kept unchanged (no model call). A mutator shows it with
  ``context: {lessons: true}``.

Adaptations: one embedding per child of its changed files (Shinka embeds the program);
a mutation whose operator failed (no edit applied) is not counted by the bandit; no cost
term and no decay (Shinka's ``cost_aware_coef`` 0 default; ``auto_decay`` is left out).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe import llm
from rsiframe.api import (
    CandidateView,
    Check,
    MutateContext,
    Mutation,
    NoveltyContext,
    NoveltyOperator,
    ReflectContext,
    Reflection,
    ReflectOperator,
    RunView,
)
from rsiframe.operators.llm_edit import LlmEdit, LlmEditConfig
from rsiframe.operators.llmprompt import ModelOperatorConfig, ask_for_lines

# -- novelty: embedding rejection sampling ---------------------------------------------


class EmbedRejectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    embed_model: str = Field(description="a declared embeddings model (/v1/embeddings)")
    threshold: float = Field(
        0.99, gt=0, le=1, description="cosine similarity at which a child is too similar"
    )
    max_attempts: int = Field(
        3, ge=0, description="times a too-similar child is re-proposed before it is rejected"
    )
    against: Literal["island", "archive"] = Field(
        "island", description="compare with the child's island (archive without islands)"
    )
    max_chars: int = Field(20_000, ge=100, description="text embedded per program at most")


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity (0 when either vector is zero)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _island_members(run: RunView, parent: CandidateView, against: str) -> list[CandidateView]:
    """Admitted candidates the child is compared with: its parent's island's, or all."""
    admitted = [c for c in run.admitted() if c.commit is not None]
    island = parent.placement.get("island")
    if against == "archive" or island is None:
        return admitted
    return [c for c in admitted if c.placement.get("island", island) == island]


class EmbedReject(NoveltyOperator):
    """Re-proposes, then rejects, a child whose changed code embeds too close to its island."""

    name = "embed_reject"
    Config = EmbedRejectConfig
    config: EmbedRejectConfig

    def __init__(self, config: EmbedRejectConfig) -> None:
        super().__init__(config)
        self._cache: dict[str, list[float]] = {}  # text digest -> vector, for this process
        self._lock = threading.Lock()

    def _text(self, files: dict[str, bytes]) -> str:
        parts = [f"# {p}\n{b.decode(errors='replace')}" for p, b in sorted(files.items())]
        return "\n".join(parts)[: self.config.max_chars]

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of ``texts``, the ones not seen before in one metered call."""
        keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        unique = dict(zip(keys, texts, strict=True))
        with self._lock:
            missing = [(k, t) for k, t in unique.items() if k not in self._cache]
        if missing:
            got = llm.embed(self.config.embed_model, [t for _, t in missing])
            with self._lock:
                self._cache.update({k: v for (k, _), v in zip(missing, got.vectors, strict=True)})
        with self._lock:
            return [self._cache[k] for k in keys]

    def novelty(self, ctx: NoveltyContext) -> Check:
        cfg = self.config
        if ctx.workdir is None:
            raise ValueError("embed_reject needs the child's work tree")
        paths = sorted({ch["path"] for ch in ctx.changes if ch.get("kind") != "deleted"})
        child = {p: _read(ctx.workdir / p) for p in paths}
        members = _island_members(ctx.run, ctx.parent, cfg.against)
        if not paths or not members:
            return Check(ok=True, reason="nothing to compare")
        texts = [self._text(child)]
        texts += [self._text({p: _member_file(ctx.run, m.id, p) for p in paths}) for m in members]
        vectors = self._vectors(texts)
        sims = [(cosine(vectors[0], v), m.id) for v, m in zip(vectors[1:], members, strict=True)]
        best, twin = max(sims)
        if best < cfg.threshold:
            return Check(ok=True, reason=f"max cosine {best:.4f} (to {twin})")
        retry = ctx.attempt < cfg.max_attempts
        return Check(
            ok=False,
            reason=f"code embedding cosine {best:.4f} >= {cfg.threshold} to {twin}",
            retry=retry,
        )


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() and not path.is_symlink() else b""


def _member_file(run: RunView, cid: str, path: str) -> bytes:
    try:
        return run.read_file(cid, path)
    except (KeyError, FileNotFoundError, OSError, ValueError):
        return b""


# -- mutate: a UCB1 bandit over the declared models ------------------------------------


@dataclass
class Arm:
    pulls: int = 0  # children made with this model (committed or rejected)
    judged: int = 0  # of them, judged (admitted or declined)
    reward: float = 0.0  # sum of their rewards


def child_reward(run: RunView, c: CandidateView) -> float | None:
    """A finished child's reward: its gate score over its parent's, clipped at 0; 0 for a
    rejected child or one without a gate score; None while it is in flight."""
    if c.state not in ("admitted", "declined", "failed", "rejected"):
        return None
    mine = run.score(c.id, "gate")
    base = run.score(c.parent, "gate") if c.parent else None
    if mine is None or base is None:
        return 0.0
    return max(mine - base, 0.0)


def ucb_scores(arms: dict[str, Arm], exploration: float) -> dict[str, float]:
    """UCB1 per pulled model: its mean reward over the largest mean (Shinka's adaptive
    scale, clipped rewards: the minimum is 0) plus ``exploration·sqrt(2 ln t / n)``."""
    means = {m: (a.reward / a.judged if a.judged else 0.0) for m, a in arms.items()}
    top = max(means.values(), default=0.0)
    total = sum(a.pulls for a in arms.values())
    return {
        m: (means[m] / top if top > 0 else means[m])
        + exploration * math.sqrt(2 * math.log(total) / a.pulls)
        for m, a in arms.items()
        if a.pulls
    }


class UcbEditConfig(LlmEditConfig):
    model: str | None = Field(None, description="unused: the bandit chooses among models")
    models: list[str] = Field(min_length=1, description="the declared models the bandit plays")
    exploration: float = Field(1.0, ge=0, description="UCB1's exploration coefficient")
    epsilon: float = Field(0.2, ge=0, le=1, description="probability of a non-maximiser")


class UcbEdit(LlmEdit):
    """``llm_edit`` with its model chosen per mutation by a UCB1 bandit (ShinkaEvolve)."""

    name = "ucb_edit"
    Config = UcbEditConfig
    config: UcbEditConfig

    def __init__(self, config: UcbEditConfig) -> None:
        super().__init__(config)
        self._reports: dict[str, str | None] = {}  # mutation digest -> its model
        self._lock = threading.Lock()

    def _model_of(self, run: RunView, digest: str) -> str | None:
        with self._lock:
            if digest in self._reports:
                return self._reports[digest]
        try:
            details = json.loads(run.artifact(digest)).get("details") or {}
        except (ValueError, KeyError, PermissionError, OSError):
            details = {}
        model = details.get("model") if isinstance(details.get("model"), str) else None
        with self._lock:
            self._reports[digest] = model
        return model

    def arms(self, run: RunView) -> dict[str, Arm]:
        """Each model's pulls and rewards, from the children's mutation reports."""
        arms = {m: Arm() for m in self.config.models}
        for c in run.candidates():
            if c.mutation is None or c.parent is None:
                continue
            arm = arms.get(self._model_of(run, c.mutation) or "")
            if arm is None:
                continue
            arm.pulls += 1
            r = child_reward(run, c)
            if r is not None:
                arm.judged += 1
                arm.reward += r
        return arms

    def choose(self, ctx: MutateContext) -> tuple[str, str, dict[str, dict[str, float]]]:
        """The model, how it was chosen (unpulled, ucb, epsilon) and the bandit's state."""
        cfg = self.config
        arms = self.arms(ctx.run)
        state: dict[str, dict[str, float]] = {
            m: {"pulls": a.pulls, "judged": a.judged, "reward": a.reward} for m, a in arms.items()
        }
        unpulled = [m for m in cfg.models if arms[m].pulls == 0]
        if unpulled:
            return ctx.rng.choice(unpulled), "unpulled", state
        scores = ucb_scores(arms, cfg.exploration)
        for m, s in scores.items():
            state[m]["ucb"] = s
        best = max(scores.values())
        winners = [m for m in cfg.models if scores[m] >= best - 1e-12]
        others = [m for m in cfg.models if m not in winners]
        if others and ctx.rng.random() < cfg.epsilon:
            return ctx.rng.choice(others), "epsilon", state
        return ctx.rng.choice(winners), "ucb", state

    def mutate(self, ctx: MutateContext) -> Mutation:
        model, how, state = self.choose(ctx)
        mutation = self.edit(ctx, model)
        details = {**mutation.details, "bandit": {"chosen": model, "by": how, "arms": state}}
        return mutation.model_copy(update={"details": details})


# -- reflect: the meta-scratchpad --------------------------------------------------------


class MetaScratchpadConfig(ModelOperatorConfig):
    interval: int = Field(10, ge=1, description="generations between rewrites (meta_rec_interval)")
    max_programs: int = Field(30, ge=1, description="recent programs shown at most")
    max_lines: int = Field(40, ge=1, description="the scratchpad keeps at most this many lines")


class MetaScratchpad(ReflectOperator):
    """Every ``interval`` generations, a model rewrites the scratchpad from recent programs."""

    name = "meta_scratchpad"
    Config = MetaScratchpadConfig
    config: MetaScratchpadConfig

    def programs(self, ctx: ReflectContext) -> list[dict[str, Any]]:
        """The children of the last ``interval`` generations, newest last."""
        low = ctx.generation - self.config.interval
        rows = []
        for c in ctx.run.candidates():
            if c.parent is None or not low < c.generation <= ctx.generation:
                continue
            mine = ctx.run.score(c.id, "gate")
            base = ctx.run.score(c.parent, "gate")
            delta = mine - base if mine is not None and base is not None else None
            verdict = {"admitted": "kept", "declined": "not kept"}.get(c.state, c.state)
            rows.append(
                {
                    "id": c.id,
                    "verdict": verdict,
                    "score": mine,
                    "delta": delta,
                    "description": c.description,
                }
            )
        return rows[-self.config.max_programs :]

    def reflect(self, ctx: ReflectContext) -> Reflection:
        cfg = self.config
        if ctx.generation % cfg.interval:
            return Reflection(lessons=ctx.previous)
        prompt = cfg.render(
            "meta_scratchpad.md.j2",
            generation=ctx.generation,
            interval=cfg.interval,
            programs=self.programs(ctx),
            previous=ctx.previous,
            max_lines=cfg.max_lines,
        )
        return Reflection(lessons=ask_for_lines(cfg, prompt, cfg.max_lines, "an empty scratchpad"))
