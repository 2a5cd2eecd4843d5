"""``evaluator.executor`` in a recipe: where evaluations run (this host, or a Ray cluster).

A bottom-layer schema (pydantic only) so the recipe schema, preflight, the executors and
the CLI all read one definition. ``rsiframe run/resume --ray-address ADDR`` overrides it
for one session (:func:`with_address`) without changing the recipe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: ``host:port`` (a GCS address) or ``ray://host:port`` (Ray Client)
_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskResources(_Strict):
    """Ray resources one Ray task asks for (logical: Ray schedules by them, not by load)."""

    num_cpus: float = Field(1, ge=0, le=1024)
    num_gpus: float = Field(0, ge=0, le=64)


def _build_default() -> TaskResources:
    return TaskResources(num_cpus=2, num_gpus=0)


class ExecutorResources(_Strict):
    evaluation: TaskResources = Field(
        default_factory=TaskResources,
        description="per evaluation (with a D/T/H build: serve the model, run the harness)",
    )
    build: TaskResources = Field(
        default_factory=_build_default,
        description="per D/T/H build (data and train steps), a Ray task of its own",
    )


class ExecutorSpec(_Strict):
    """Where evaluations (and D/T/H builds) run. ``local``: in this process, as always."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = Field(
        None,
        description='"auto" (the cluster `ray start` left on this host), "host:port", '
        '"ray://host:port", or null (start a private Ray instance in this process)',
    )
    resources: ExecutorResources = Field(default_factory=ExecutorResources)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or _ADDRESS.match(value):
            return value
        raise ValueError('expected "auto", "host:port", "ray://host:port" or null')


def with_address(spec: ExecutorSpec, address: str | None) -> ExecutorSpec:
    """The spec with ``--ray-address`` applied: that address, on Ray (``None``: unchanged)."""
    if address is None:
        return spec
    # validated like the recipe key, so a bad flag is one line naming the flag
    checked = ExecutorSpec.model_validate({"kind": "ray", "address": address})
    return spec.model_copy(update={"kind": "ray", "address": checked.address})


@dataclass(frozen=True)
class ExecutorKind:
    """One executor: where its code lives (imported only when a run or its preflight asks),
    its preflight (``module:function``; None: nothing to check), what to install."""

    module: str
    cls: str
    preflight: str | None = None
    install: str | None = None


#: every executor by ``evaluator.executor.kind``; the one table that names them
EXECUTORS: dict[str, ExecutorKind] = {
    "local": ExecutorKind("rsiframe.executors.local", "LocalExecutor"),
    "ray": ExecutorKind(
        "rsiframe.executors.ray_driver",
        "RayExecutor",
        preflight="rsiframe.executors.ray_driver:probe",
        install="pip install 'rsiframe[cluster]'",
    ),
}
