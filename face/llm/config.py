"""LLMConfig: every knob of the LLM access layer (keys of conf/llm/*.yaml; defaults in conf/llm/base.yaml)."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class LLMConfig:
    backend: str = "openai_compatible"  # a label for run descriptions (local | openai | ...); nothing depends on it
    base_url: str | None = None  # e.g. https://api.openai.com/v1 (ignored when a server is configured)
    api_key_env: str | None = None  # NAME of the env var holding the key, never the key
    model: str = "smollm2-135m-instruct"
    temperature: float = 0.6
    max_tokens: int = 256
    top_p: float | None = None
    seed: int | None = 0  # sample i of a request uses seed + i
    n_per_request: int = 1  # max samples one HTTP request may return (1 for llama.cpp)
    supports_json_schema: bool = True
    supports_logprobs: bool = True
    # wire format of a json_schema response_format: "openai" ({"type": "json_schema", "json_schema":
    # {"name", "schema"}}) or "json_object_schema" ({"type": "json_object", "schema": ...}; llama-cpp-python)
    json_schema_format: str = "openai"
    concurrency: int = 2
    timeout_s: float = 120.0
    max_retries: int = 6
    answer_retries: int = 3  # extra draws per sample whose answer fails its request's adapter (authors: up to 10)
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    price_input_per_mtok: float = 0.0  # USD per million input tokens
    price_output_per_mtok: float = 0.0  # USD per million output tokens
    max_calls: int | None = None  # cap on HTTP requests sent (cache hits are free)
    max_cost_usd: float | None = None
    dry_run: bool = False
    cache_dir: str | None = ".face_cache/llm"
    cache: bool = True
    progress: bool = True
    # a server started beside the client, which then uses its base_url and model:
    # {"_target_": "module.Class", **constructor options} (e.g. face.llm.local.LocalServer), or None
    server: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.server is not None and "_target_" not in self.server:
            raise ValueError("llm.server needs a _target_ (the server class, e.g. face.llm.local.LocalServer)")
        if self.json_schema_format not in ("openai", "json_object_schema"):
            raise ValueError("llm.json_schema_format must be 'openai' or 'json_object_schema'")
        if self.n_per_request < 1:
            raise ValueError("llm.n_per_request must be >= 1")
        if self.concurrency < 1:
            raise ValueError("llm.concurrency must be >= 1")
        if self.api_key_env and self.api_key_env.startswith("sk-"):
            raise ValueError("llm.api_key_env must be the NAME of an environment variable, not the key itself")
        self.server = None if self.server is None else dict(self.server)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | Any) -> LLMConfig:
        """Build from a plain dict or an OmegaConf DictConfig; unknown keys are an error."""
        if not isinstance(d, Mapping) or type(d).__name__ == "DictConfig":
            try:
                from omegaconf import OmegaConf

                d = OmegaConf.to_container(d, resolve=True)
            except Exception:
                d = dict(d)
        d = dict(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown llm config keys: {unknown}; known keys: {sorted(known)}")
        return cls(**d)

    def replace(self, **changes: Any) -> LLMConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (safe to log: contains the env var name, never the key)."""
        return dataclasses.asdict(self)

    def api_key(self) -> str:
        """The key's value from the environment ("not-needed" for keyless local servers)."""
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or "not-needed"
        return "not-needed"
