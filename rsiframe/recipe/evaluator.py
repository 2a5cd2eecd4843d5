"""The ``evaluator`` section's configs, one per engine, and the table of engines.

Pure schema: these models import only other schema modules (and the task format, for a
task's own limits). The behaviour that uses them (the engines in
:mod:`rsiframe.evaluators`, the D/T/H build in :mod:`rsiframe.dth`) imports them from here,
never the reverse; :data:`ENGINES` names each engine's code by module path, so reading a
recipe imports no engine (:mod:`rsiframe.evaluators.registry` imports one when asked for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsiframe.tasks.taskset import Task


class ContaminationConfig(BaseModel):
    """``evaluator.config.build.contamination`` in a recipe."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(13, ge=4, le=200, description="characters per n-gram")
    policy: Literal["reject", "flag"] = Field(
        "reject", description="reject the candidate, or flag it in the record and status"
    )
    max_examples: int = Field(5, ge=0, le=50, description="gate items named per report")


class ServeConfig(BaseModel):
    """``evaluator.config.build.serve``: how built models are served to the harness."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "transformers", "vllm"] = Field(
        "auto", description="vllm when the serve extra and a GPU are present, else transformers"
    )
    max_batch: int = Field(64, ge=1, le=4096, description="sequences generated per batch")
    max_tokens: int = Field(512, ge=1, description="cap on a request's max_tokens")
    max_request_tokens: int = Field(
        32768, ge=1, description="cap on a request's prompts * n * max_tokens (else 400)"
    )
    memory_mb: int | None = Field(
        8192, gt=0, description="address-space limit of the server process (CPU backend)"
    )
    start_timeout_s: float = Field(300, gt=0, description="time the server may take to start")


class BuildConfig(BaseModel):
    """``evaluator.config.build``: the D/T/H build step (absent: no build, no model)."""

    model_config = ConfigDict(extra="forbid")

    data: str = Field("python3 generate.py", description="data command (cwd: the data copy)")
    train: str = Field("python3 train.py", description="train command (cwd: the trainer copy)")
    data_inputs: list[str] = Field(["data"], min_length=1, description="subtrees data sees")
    train_inputs: list[str] = Field(["trainer"], min_length=1, description="subtrees train sees")
    data_timeout_s: float = Field(300, gt=0)
    train_timeout_s: float = Field(1200, gt=0)
    memory_mb: int | None = Field(None, gt=0, description="address-space limit per step")
    threads: int = Field(1, ge=1, le=256, description="RSI_THREADS for the steps and the server")
    max_dataset_mb: float = Field(256, gt=0)
    max_model_mb: float = Field(2048, gt=0)
    contamination: ContaminationConfig = Field(default_factory=ContaminationConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)


class TaskLimits(BaseModel):
    """Resource limits of each task's agent and verifier (``evaluator.config.limits``; a
    task's ``[rsiframe]`` table in task.toml overrides them key by key). A task that
    breaks one ends with reward 0 and the limit named as its error."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(
        4096,
        gt=0,
        description="memory of all its processes (MiB; memory cgroup, else RLIMIT_AS per process)",
    )
    pids: int = Field(512, gt=0, description="processes at once (pids cgroup, else RLIMIT_NPROC)")
    tmp_mb: int = Field(512, gt=0, description="size of the private /tmp (bubblewrap)")
    app_mb: int = Field(1024, gt=0, description="what /app and /logs/agent may hold")
    artifacts_mb: int = Field(16, gt=0, description="agent log files stored per task")

    def of(self, task: Task) -> TaskLimits:
        return TaskLimits.model_validate({**self.model_dump(), **task.limits})


class LocalEngineConfig(BaseModel):
    """Config of the ``local`` engine (``evaluator.config`` in a recipe)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(description="shell command that runs the candidate's agent (cwd /app)")
    sandbox: Literal["auto", "bwrap", "process", "docker"] = Field(
        "auto",
        description="bwrap, the plain process fallback, auto (bwrap when it works), or docker",
    )
    concurrency: int = Field(2, ge=1, le=256, description="tasks run at the same time")
    agent_timeout_s: float | None = Field(
        None, gt=0, description="cap on each task's [agent] timeout_sec"
    )
    verifier_timeout_s: float | None = Field(
        None, gt=0, description="cap on each task's [verifier] timeout_sec"
    )
    output_limit_bytes: int = Field(1 << 20, ge=1024, description="stdout/stderr kept per phase")
    limits: TaskLimits = Field(
        default_factory=lambda: TaskLimits(),
        description="per-task limits of agent and verifier (a task's [rsiframe] table wins)",
    )
    build: BuildConfig | None = Field(
        None, description="build a model from data/ and trainer/ first, and serve it (D/T/H)"
    )
    model: str | None = Field(
        None,
        description="a declared model (recipe models:) the candidate's agent reaches through "
        "the run's gateway at $OPENAI_BASE_URL (its name in $RSI_MODEL)",
    )

    @model_validator(mode="after")
    def _one_model_source(self) -> LocalEngineConfig:
        if self.build is not None and self.model is not None:
            raise ValueError("model: a D/T/H build serves the candidate's own model; give one")
        return self


class HarborEngineConfig(BaseModel):
    """Config of the ``harbor`` engine (``evaluator.config`` in a recipe)."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = Field(
        None, description="shell command that runs the candidate's agent (cwd: the workdir)"
    )
    harbor_agent: str | None = Field(
        None, description="a Harbor built-in agent instead (oracle, nop, terminus-2, ...)"
    )
    agent_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="kwargs of the built-in agent"
    )
    agent_config: str | None = Field(
        None,
        description="a YAML/JSON file of the candidate merged into agent_kwargs (its prompt, "
        "kwargs, tools); a string value 'candidate:PATH' becomes that file's path",
    )
    model: str | None = Field(None, description="model name for a built-in agent")
    environment: Literal["bwrap", "docker", "daytona", "modal", "e2b", "runloop", "gke"] = Field(
        "bwrap", description="where trials run"
    )
    environment_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="kwargs passed to the environment (cloud accounts)"
    )
    run_dockerfile: bool = Field(
        False, description="bwrap: run the Dockerfile's RUN lines at set-up (namespace root)"
    )
    concurrency: int = Field(2, ge=1, le=256, description="n_concurrent_trials")
    agent_timeout_s: float | None = Field(None, gt=0, description="cap on each agent run")
    verifier_timeout_s: float | None = Field(None, gt=0, description="cap on each verifier")
    output_limit_bytes: int = Field(1 << 20, ge=1024, description="bytes kept per file")

    @model_validator(mode="after")
    def _one_agent(self) -> HarborEngineConfig:
        if (self.agent is None) == (self.harbor_agent is None):
            raise ValueError("give exactly one of agent (a command) or harbor_agent (a name)")
        return self


@dataclass(frozen=True)
class EngineSpec:
    """One evaluator engine: its config model, where its code lives (imported only when a
    run or a preflight asks for it), and what to install when it is missing."""

    config: type[BaseModel]
    module: str  # the engine class's module
    cls: str
    preflight: str  # ``module:function`` run before a run folder exists
    install: str | None = None  # what makes it importable, when it is not by default
    #: keywords its constructor takes beyond (config, work_root): ``parallel`` (the
    #: evaluations in flight share one task pool), ``cache_root`` (its own build cache)
    options: frozenset[str] = frozenset()


#: every evaluator engine by name; the one table that names them
ENGINES: dict[str, EngineSpec] = {
    "local": EngineSpec(
        LocalEngineConfig,
        "rsiframe.evaluators.local",
        "LocalEngine",
        "rsiframe.evaluators.preflight:local",
        options=frozenset({"parallel", "cache_root"}),
    ),
    "harbor": EngineSpec(
        HarborEngineConfig,
        "rsiframe.evaluators.harbor.engine",
        "HarborEngine",
        "rsiframe.evaluators.harbor.preflight:preflight",
        install="make harbor (Harbor's own Python 3.12 environment)",
    ),
}
