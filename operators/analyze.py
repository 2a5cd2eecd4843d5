"""analyze: turn the parent's train trajectories into a short failure report."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import Analysis, AnalyzeContext, AnalyzeOperator


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class FailuresConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_examples: int = Field(5, ge=0, description="failed tasks quoted in the report")
    tail_lines: int = Field(5, ge=1, description="lines of output quoted per example")


class Failures(AnalyzeOperator):
    """Which train tasks failed and why, quoting the agent's and the verifier's output."""

    name = "failures"
    deterministic = True
    Config = FailuresConfig
    config: FailuresConfig

    def analyze(self, ctx: AnalyzeContext) -> Analysis:
        rows = ctx.rollout.trajectories
        failed = [r for r in rows if (r.get("reward") or 0.0) < 1.0]
        reasons = Counter(
            r.get("error") or _last_line(r.get("stdout_tail", "")) or "no output" for r in failed
        )
        examples = []
        keep = self.config.tail_lines
        for r in failed[: self.config.max_examples]:
            out = (r.get("stdout_tail", "") + "\n" + r.get("stderr_tail", "")).strip()
            verdict = (r.get("verifier_tail") or "").strip()
            examples.append(
                {
                    "task": r["task"],
                    "reward": r.get("reward"),
                    "error": r.get("error"),
                    "tail": "\n".join(out.splitlines()[-keep:]),
                    # the verifier's own words: what it wanted and what it got
                    "verifier": "\n".join(verdict.splitlines()[-keep:]),
                }
            )
        n = len(rows)
        summary = f"{len(failed)}/{n} train tasks not solved"
        if reasons:
            top = "; ".join(f"{msg} (x{k})" for msg, k in reasons.most_common(3))
            summary += f"; most common: {top}"
        return Analysis(
            summary=summary,
            details={
                "pass_rate": (n - len(failed)) / n if n else 0.0,
                "failed": [r["task"] for r in failed],
                "reasons": dict(reasons.most_common(10)),
                "examples": examples,
            },
        )
