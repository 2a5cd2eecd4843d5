"""What every evaluator engine shares: the outcome types, the reward files, the model
endpoint a harness reaches, and the :class:`Evaluator` protocol the engine depends on.

Imports no engine: the local engine (:mod:`rsiframe.evaluators.local`) and the Harbor engine
(:mod:`rsiframe.evaluators.harbor.engine`) both import this, never each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rsiframe.tasks.taskset import Task
from rsiframe.util.safefile import read_regular


@dataclass
class TaskRun:
    """One task's outcome: the reward, why it is zero if it failed, and its trajectory."""

    task_id: str
    reward: float
    error: str | None
    trajectory: dict[str, Any]
    trajectory_digest: str = ""
    seconds: float = 0.0


@dataclass
class EvaluationOutput:
    runs: dict[str, TaskRun] = field(default_factory=dict)
    task_seconds: float = 0.0
    model: dict[str, Any] | None = None  # the built model's identity, build and token usage
    usage: dict[str, int] | None = None  # model tokens this evaluation used
    executor: dict[str, Any] | None = None  # where it ran (rsiframe.executors)
    #: with ``evaluator.config.model``: what the agent called through the gateway, per
    #: model (calls, tokens charged, cached, refused); the certificate records it
    models_called: dict[str, dict[str, int]] | None = None


Put = Callable[[bytes], str]


def parse_reward(verifier_dir: Path) -> tuple[float, str | None]:
    """Harbor's reward files: a number in reward.txt, or numeric keys in reward.json."""
    txt = verifier_dir / "reward.txt"
    js = verifier_dir / "reward.json"
    try:  # regular files only, never a link or a FIFO, at most 1 MiB
        if txt.exists() or txt.is_symlink():
            return float(read_regular(txt, 1 << 20).decode().strip()), None
        if js.exists() or js.is_symlink():
            data = json.loads(read_regular(js, 1 << 20))
            if isinstance(data, int | float):
                return float(data), None
            if isinstance(data, dict):
                if isinstance(data.get("reward"), int | float):
                    return float(data["reward"]), None
                nums = [float(v) for v in data.values() if isinstance(v, int | float)]
                if nums:
                    return sum(nums) / len(nums), None
            return 0.0, "reward.json holds no numeric reward"
    except (ValueError, OSError) as exc:
        return 0.0, f"unreadable reward: {exc}"
    return 0.0, "verifier wrote no reward"


class HarnessEndpoint(Protocol):
    """A model endpoint a harness reaches from its sandbox (``serving.OpenEndpoint``, or
    the gateway's ``SandboxEndpoint``): the wrapped command, its mounts, its environment."""

    def harness(self, sb: Any, argv: list[str]) -> tuple[list[str], list[Any], dict[str, str]]: ...


#: opens one evaluation's endpoint on the run's gateway (``TaskRunner.model_hooks``)
ModelEndpoints = Callable[[], HarnessEndpoint]


def gateway_endpoint(
    model: str | None, model_endpoint: ModelEndpoints | None
) -> HarnessEndpoint | None:
    """This evaluation's endpoint to ``evaluator.config.model`` (None: the agent has none)."""
    if model is None:
        return None
    if model_endpoint is None:
        raise RuntimeError(
            f"evaluator.config.model {model!r} needs the run's model gateway (a models: section)"
        )
    return model_endpoint()


class Evaluator(Protocol):
    """An evaluator engine as the run sees it (``evaluator.engine`` names one; the
    registry, :mod:`rsiframe.evaluators.registry`, builds it from its config)."""

    name: str
    config: Any  # the engine's config model (recipe/evaluator.py)
    builder: Any  # the D/T/H build of the candidate's model; None on engines that build none

    @property
    def isolation(self) -> str: ...

    def protect(self, tasks: dict[str, list[Task]]) -> None:
        """The gate and sealed tasks a candidate's training data must not contain."""

    def lock_parts(self) -> dict[str, Any]: ...

    def fingerprint(self) -> str: ...

    def record_part(self) -> dict[str, Any] | None: ...

    def close(self) -> None:
        """Stop what the engine started (its task pool, its model server)."""

    def run(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        *,
        on_built: Callable[[dict[str, Any]], None] | None = None,
        on_usage: Callable[[dict[str, int]], None] | None = None,
        token_limit: int | None = None,
        model_endpoint: ModelEndpoints | None = None,
    ) -> EvaluationOutput:
        """Run every task; ``on_built``, ``on_usage`` and ``token_limit`` reach a D/T/H
        build and its model server, ``model_endpoint`` the run's gateway."""
        ...
