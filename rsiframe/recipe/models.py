"""Models declared in a recipe (``models:``), and the checks ``recipe check`` makes on them.

Operators name a model (``config: {model: proposer}``), never a URL or a key; the
gateway (:mod:`rsiframe.gateway.app`) alone resolves a name to its endpoint and key.

```yaml
models:
  proposer: {base_url: "https://api.example.com/v1", api_key_env: OPENAI_API_KEY,
             model: gpt-5-mini, price: {input_per_mtok: 0.25, output_per_mtok: 2.0},
             max_concurrency: 8, timeout_s: 120, retries: 3}
  local:    {base_url_env: LOCAL_LLM_URL, model: qwen2.5-coder-7b}
```

Nothing here makes a call: :func:`check_models` only resolves names and reads the
environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsiframe.errors import RecipeError

#: operator config keys that name a declared model (``model``, or any ``*_model``)
MODEL_KEY_SUFFIX = "_model"


class Price(BaseModel):
    """USD per million tokens; what the gateway charges each call against ``max_cost``."""

    model_config = ConfigDict(extra="forbid")
    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        ) / 1e6


class ModelSpec(BaseModel):
    """One declared model: where it is served, how it is paid for and how it is called."""

    model_config = ConfigDict(extra="forbid")
    base_url: str | None = Field(None, description="the provider's OpenAI-style base URL (…/v1)")
    base_url_env: str | None = Field(None, description="environment variable holding base_url")
    api_key_env: str | None = Field(None, description="environment variable holding the key")
    model: str = Field(min_length=1, description="the provider's model name")
    api: Literal["openai", "anthropic"] = Field(
        "openai", description="wire protocol for pass-through (/v1/messages needs anthropic)"
    )
    kind: Literal["chat", "embeddings"] = Field(
        "chat",
        description="what it serves: chat (and completions), or embeddings (the models' "
        "check then asks it for one embedding, not an answer)",
    )
    price: Price = Field(default_factory=Price)
    max_concurrency: int = Field(4, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(2, ge=0)

    @model_validator(mode="after")
    def _one_url(self) -> ModelSpec:
        if (self.base_url is None) == (self.base_url_env is None):
            raise ValueError("give exactly one of base_url and base_url_env")
        return self

    def env_vars(self) -> list[str]:
        return [v for v in (self.base_url_env, self.api_key_env) if v]

    def resolve(self, environ: Mapping[str, str] | None = None) -> ResolvedModel:
        """The endpoint and key from the environment; RecipeError names what is missing."""
        env = os.environ if environ is None else environ
        missing = [v for v in self.env_vars() if not env.get(v)]
        if missing:
            raise RecipeError(f"environment variable(s) not set: {', '.join(missing)}")
        url = self.base_url or env[self.base_url_env or ""]
        key = env[self.api_key_env] if self.api_key_env else ""
        return ResolvedModel(self, url.rstrip("/"), key)


@dataclass(frozen=True)
class ResolvedModel:
    """A declared model with its endpoint and key read from the environment (gateway only)."""

    spec: ModelSpec
    base_url: str
    api_key: str

    def __repr__(self) -> str:  # the key never reaches a log line
        return f"ResolvedModel({self.spec.model!r} at {self.base_url!r})"


ModelName = str
Models = dict[ModelName, ModelSpec]


@dataclass(frozen=True)
class ModelCheck:
    """What ``recipe check`` says about models: who names which, and what env is missing."""

    references: dict[str, str]  # "slots.mutate.config.model" -> model name
    missing_env: dict[str, list[str]]  # model name -> unset variables

    def as_json(self) -> dict[str, Any]:
        return {"references": self.references, "missing_env": self.missing_env}


def references(slot_configs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Every ``model`` / ``*_model`` string in the slots' (validated) configs."""
    out: dict[str, str] = {}
    for slot, config in slot_configs.items():
        for key, value in config.items():
            if (key == "model" or key.endswith(MODEL_KEY_SUFFIX)) and isinstance(value, str):
                out[f"slots.{slot}.config.{key}"] = value
            elif key == "models" and isinstance(value, list):  # a weighted ensemble
                for i, member in enumerate(value):
                    if isinstance(member, Mapping) and isinstance(member.get("model"), str):
                        out[f"slots.{slot}.config.models[{i}].model"] = member["model"]
    return out


def named_models(config: Any) -> set[str]:
    """Every model name an operator config gives its operator, at any depth: strings under
    ``model`` / ``*_model`` and lists of strings under ``models`` / ``*_models`` (a wrapped
    operator's config included). The gateway binds the operator's token to these."""
    out: set[str] = set()
    if isinstance(config, BaseModel):
        config = config.model_dump()
    if isinstance(config, Mapping):
        for key, value in config.items():
            k = str(key)
            if (k == "model" or k.endswith(MODEL_KEY_SUFFIX)) and isinstance(value, str):
                out.add(value)
            elif (k == "models" or k.endswith(MODEL_KEY_SUFFIX + "s")) and isinstance(value, list):
                out.update(v for v in value if isinstance(v, str))
                out |= named_models([v for v in value if not isinstance(v, str)])
            else:
                out |= named_models(value)
    elif isinstance(config, list):
        for value in config:
            out |= named_models(value)
    return out


def check_models(
    models: Mapping[str, ModelSpec],
    slot_configs: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] | None = None,
    *,
    where: str | None = None,
    need_env: bool = True,
) -> ModelCheck:
    """Resolve every model reference; raise one RecipeError for an unknown name or (unless
    ``need_env`` is off: a replay, which calls no endpoint) unset environment variables of
    a referenced model. Makes no call."""
    env = os.environ if environ is None else environ
    refs = references(slot_configs)
    for loc, name in refs.items():
        if name not in models:
            known = ", ".join(sorted(models)) or "none (add a models: section)"
            raise RecipeError(f"{loc}: unknown model {name!r}; declared: {known}", where=where)
    missing = {
        name: [v for v in spec.env_vars() if not env.get(v)]
        for name, spec in models.items()
        if name in refs.values()
    }
    missing = {k: v for k, v in missing.items() if v}
    if missing and need_env:
        parts = "; ".join(f"models.{k} needs {', '.join(v)}" for k, v in sorted(missing.items()))
        raise RecipeError(f"environment variable(s) not set: {parts}", where=where)
    return ModelCheck(refs, missing)
