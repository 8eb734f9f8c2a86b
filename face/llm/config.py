"""LLMConfig: every knob of the LLM access layer (keys of conf/llm/*.yaml), typed. The defaults are conf/llm/base.yaml's
(face.settings: a client built in code takes them), so a run and a client built in code behave alike."""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from face.secrets import is_env_var_name, register
from face.settings import Number, settings

Url = Annotated[str, Field(min_length=1)]


@settings("llm", conf="llm/base.yaml")
class LLMConfig:
    backend: str = "openai_compatible"  # a label for run descriptions (local | openai | ...); nothing depends on it
    # e.g. https://api.openai.com/v1 (ignored when a server is configured); a list of URLs (replicas of one
    # model) spreads the requests over them
    base_url: str | Annotated[list[Url], Field(min_length=1)] | None
    api_key_env: str | None  # NAME of the env var holding the key, never the key
    model: str = Field(default="smollm2-135m-instruct", min_length=1)
    temperature: Number = Field(ge=0, le=2)
    max_tokens: int = Field(ge=1)
    top_p: Number | None = Field(gt=0, le=1)
    seed: int | None  # sample i of a request uses seed + i
    n_per_request: int = Field(ge=1)  # max samples one HTTP request may return (1 for llama.cpp)
    # probe the endpoint once (per base URL and model; remembered in cache_dir/endpoints.json): n_per_request
    # > 1 is used only if it honours n, else n is split into one request per sample
    probe: bool
    supports_json_schema: bool
    supports_logprobs: bool
    # wire format of a json_schema response_format: "openai" ({"type": "json_schema", "json_schema":
    # {"name", "schema"}}) or "json_object_schema" ({"type": "json_object", "schema": ...}; llama-cpp-python)
    json_schema_format: Literal["openai", "json_object_schema"]
    concurrency: int = Field(ge=1)  # requests in flight at most (the cap of the adaptive limit)
    adaptive_concurrency: bool  # AIMD between 1 and `concurrency` (face/llm/limiter.py)
    concurrency_start: int | None = Field(ge=1)  # the adaptive limit's first value (None: `concurrency`)
    # adaptive: back off when latency exceeds this × its unloaded value
    latency_tolerance: Number = Field(gt=1)
    # the openai SDK's HTTP transport: aiohttp (its DefaultAioHttpClient) | httpx
    http_client: Literal["aiohttp", "httpx"]
    timeout_s: Number = Field(gt=0)
    max_retries: int = Field(ge=0)
    backoff_base_s: Number = Field(ge=0)
    backoff_max_s: Number = Field(ge=0)
    price_input_per_mtok: Number = Field(ge=0)  # USD per million input tokens
    price_output_per_mtok: Number = Field(ge=0)  # USD per million output tokens
    max_calls: int | None = Field(ge=0)  # cap on HTTP requests sent (cache hits are free)
    max_cost_usd: Number | None = Field(ge=0)  # null: no cap
    dry_run: bool
    force: bool  # start even when the cost estimate exceeds max_cost_usd (the budget still stops the run)
    cache_dir: str | None
    cache: bool
    progress: bool
    usage_file: str | None = None  # llm_usage.json written here when the client closes (also after a stop)
    # a server started beside the client, which then uses its base_url and model:
    # {"_target_": "module.Class", **constructor options} (e.g. face.llm.local.LocalServer), or None
    server: dict[str, Any] | None
    # the OpenAI Batch API (face/llm/batch.py): requests go as lines of batch jobs, polled until done
    batch: bool
    batch_window: str  # completion_window of each job
    batch_poll_s: Number = Field(gt=0)  # seconds between two polls of a job
    batch_collect_s: Number = Field(gt=0)  # a job is sent once no new line arrived for this long
    batch_max_requests: int = Field(ge=1)  # lines per job at most (OpenAI's limit)
    # batch price / list price (estimates, dry runs, budgets)
    batch_price_factor: Number = Field(gt=0, le=1)

    @field_validator("base_url", mode="before")
    @classmethod
    def _urls_as_list(cls, v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v  # replicas given in code as a tuple

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _a_cap_that_can_hold(cls, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):  # "no cap" is null, never infinity
            raise ValueError(f"must be a finite number >= 0 (null means no cap), got {v!r}")
        return v

    @field_validator("api_key_env")
    @classmethod
    def _a_name_not_a_key(cls, v: str | None) -> str | None:
        if v is not None and not is_env_var_name(v):  # the value is never repeated: it may be the key itself
            raise ValueError("must be the NAME of an environment variable (letters, digits, _), not the key itself")
        return v

    @model_validator(mode="after")
    def _server_and_batch(self) -> LLMConfig:
        if self.server is not None and "_target_" not in self.server:
            raise ValueError("llm.server needs a _target_ (the server class, e.g. face.llm.local.LocalServer)")
        if self.batch and not (self.cache and self.cache_dir):
            raise ValueError("llm.batch=true needs the cache (llm.cache=true and a cache_dir): batch answers "
                             "land there, and a half-finished batch is resumed from it")
        if self.batch and self.server is not None:
            raise ValueError("llm.batch=true needs an endpoint with the OpenAI Batch API (files + batches) "
                             "at llm.base_url, not a server started by the client")
        return self

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | Any) -> LLMConfig:
        """Build from a plain dict or an OmegaConf DictConfig."""
        from omegaconf import OmegaConf

        data = OmegaConf.to_container(d, resolve=True) if OmegaConf.is_config(d) else d
        return cls(**dict(data))  # type: ignore[arg-type]  # ConfigError naming the key: unknown keys, wrong types, values out of range

    @property
    def base_urls(self) -> list[str]:
        """Every endpoint URL (a list or a comma-separated string in llm.base_url)."""
        urls = self.base_url.split(",") if isinstance(self.base_url, str) else self.base_url or []
        return [u.strip() for u in urls if u.strip()]

    @property
    def prices(self) -> tuple[float, float]:
        """USD per million input / output tokens as charged: list prices, × batch_price_factor with batch."""
        f = self.batch_price_factor if self.batch else 1.0
        return self.price_input_per_mtok * f, self.price_output_per_mtok * f

    def replace(self, **changes: Any) -> LLMConfig:
        return dataclasses.replace(self, **changes)

    def api_key(self) -> str:
        """The key's value from the environment variable ``api_key_env`` names; a ConfigError naming the variable when
        it is unset or empty (a backend with a key variable needs its key). "not-needed" for a keyless server
        (``api_key_env`` null: the local and test servers, an openai_compatible server without auth)."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key.strip():
                from face.errors import ConfigError

                raise ConfigError(f"llm.api_key_env: the environment variable {self.api_key_env} is not set: set it "
                                  f"to your key (llm={self.backend} needs one; nothing was sent), or give "
                                  "llm.api_key_env=null for a server without a key")
            register(key)  # redacted wherever it would appear (logs, stop messages, MLflow, captions)
            return key
        return "not-needed"


