"""mutate ``gepa_reflect``: GEPA's reflective mutation, one component at a time.

GEPA (Agrawal et al. 2025, gepa-ai/gepa, ``ReflectiveMutationProposer`` with
``module_selector="round_robin"`` and ``skip_perfect_score``): a model reads one
component's whole current text and every example of the reflection minibatch (the task
instruction, the agent's output, the verifier's output as feedback, the reward; passing
and failing alike) and writes the component's whole new text. Here:

- the minibatch is the rollout (``rollout: {operator: local, config: {max_tasks: 3,
  reuse_certified: false}}`` runs the parent fresh on 3 sampled train tasks, GEPA's
  default size); the ``minibatch`` validate operator with ``tasks: rollout`` then accepts
  the child on exactly those tasks against those rewards;
- the component is a file, taken in turn per lineage (:mod:`.roundrobin`'s pointer):
  ``components`` or every file of the parent the surface allows; a proposal skipped for a
  perfect parent still takes its turn (GEPA's pointer does not advance then);
- a parent perfect on its minibatch is skipped before any model call
  (:class:`~rsiframe.api.ProposalSkipped`: the child is rejected as skipped);
- the answer is the whole new text between its first and last fence lines (an answer
  without one is asked again, ``retries`` times).

``context`` toggles what each example shows (instruction, output, feedback); the counts
``failing``/``passing`` do not apply: GEPA shows every example. No run-wide lessons.
"""

from __future__ import annotations

from pydantic import Field

from rsiframe.api import MutateContext, MutateOperator, Mutation, ProposalSkipped
from rsiframe.operators.edits import FENCE, EditError
from rsiframe.operators.llmprompt import (
    ContextLimits,
    ModelOperatorConfig,
    Unparsed,
    ask_until_parsed,
    example,
)
from rsiframe.operators.roundrobin import component_index, surface_file_list


class GepaReflectConfig(ModelOperatorConfig, ContextLimits):
    components: list[str] = Field(
        default_factory=list,
        description="files taken in turn (default: every file of the parent the surface allows)",
    )
    skip_perfect: bool = Field(True, description="skip a parent perfect on its minibatch")
    perfect_score: float = Field(1.0, description="the reward that counts as perfect")
    retries: int = Field(1, ge=0, description="times an answer without a fenced text is re-asked")


class NoNewText(RuntimeError):
    """The model gave no fenced text after every retry; the child is rejected."""


def whole_text(answer: str) -> str:
    """The text between the answer's first and last fence lines (fences inside the text,
    such as a regex in code, are not at a line's start and do not count)."""
    lines = answer.splitlines(keepends=True)
    fences = [i for i, line in enumerate(lines) if FENCE.match(line)]
    if len(fences) < 2:
        raise EditError("no fenced block: give the whole new text between ``` lines")
    return "".join(lines[fences[0] + 1 : fences[-1]])


class GepaReflect(MutateOperator):
    """GEPA's reflective mutation: one component rewritten whole from the minibatch."""

    name = "gepa_reflect"
    Config = GepaReflectConfig
    config: GepaReflectConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        cfg = self.config
        rows = ctx.rollout.trajectories
        perfect = all((r.get("reward") or 0.0) >= cfg.perfect_score for r in rows)
        if cfg.skip_perfect and rows and perfect:
            raise ProposalSkipped(
                f"{ctx.parent.id} is perfect on its minibatch {[r.get('task') for r in rows]}"
            )
        components = list(cfg.components) or surface_file_list(ctx)
        if not components:
            raise ValueError("gepa_reflect: the surface allows no file of the parent")
        k = component_index(
            ctx.run, ctx.parent.id, ctx.candidate_id, ctx.generation, len(components)
        )
        path = components[k]
        target = ctx.workdir / path
        if target.is_symlink() or not target.is_file() or not ctx.may_change(path):
            raise ValueError(f"gepa_reflect: {path} is not a file of the parent the surface allows")
        current = target.read_bytes()[: cfg.max_file_bytes].decode(errors="replace")
        examples = [example(r, cfg) for r in rows]
        prompt = cfg.render("gepa_reflect.md.j2", component=path, text=current, examples=examples)
        new = self._ask(prompt)
        target.write_text(new)
        return Mutation(
            description=f"[{path}] reflective rewrite from {len(rows)} examples",
            details={
                "model": cfg.model,
                "component": path,
                "component_index": k,
                "minibatch": [r.get("task") for r in rows],
            },
        )

    def _ask(self, prompt: str) -> str:
        cfg = self.config
        try:
            return ask_until_parsed(
                cfg, prompt, whole_text, retries=cfg.retries, again="Answer again.",
                errors=(EditError,),
            )  # fmt: skip
        except Unparsed as exc:
            raise NoNewText(f"model {cfg.model!r} gave no new text: {exc}") from exc
