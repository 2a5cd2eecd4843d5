"""record ``notes``: a short, human-readable note per gated candidate."""

from __future__ import annotations

from typing import Any

from rsiframe.api import Notes, RecordContext, RecordOperator


class NotesRecord(RecordOperator):
    """What changed, the score deltas against the parent and the gate's reason."""

    name = "notes"
    deterministic = True

    def record(self, ctx: RecordContext) -> Notes:
        c, p = ctx.candidate, ctx.parent
        notes: dict[str, Any] = {
            "description": c.description,
            "changed_paths": sorted({ch["path"] for ch in ctx.changes}),
            "decision": ctx.decision.reason,
        }
        if p is not None:
            notes["parent"] = p.id
            for split in ("train", "gate"):
                mine, theirs = ctx.run.score(c.id, split), ctx.run.score(p.id, split)
                if mine is not None and theirs is not None:
                    notes[f"{split}_delta"] = round(mine - theirs, 6)
        return Notes(notes=notes)
