"""LLMConfig: every knob of the LLM access layer (keys of conf/llm/*.yaml). The defaults here are conf/llm/base.yaml's
(tests/llm/test_config_cli.py holds them equal), so a run and a client built in code behave alike."""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from face.secrets import is_env_var_name, looks_like_secret, register

__all__ = ["LLMConfig", "is_env_var_name", "looks_like_secret"]


@dataclass
class LLMConfig:
    backend: str = "openai_compatible"  # a label for run descriptions (local | openai | ...); nothing depends on it
    # e.g. https://api.openai.com/v1 (ignored when a server is configured); a list of URLs (replicas of one
    # model) spreads the requests over them
    base_url: str | list[str] | None = None
    api_key_env: str | None = None  # NAME of the env var holding the key, never the key
    model: str = "smollm2-135m-instruct"
    temperature: float = 0.6
    max_tokens: int = 256
    top_p: float | None = None
    seed: int | None = 0  # sample i of a request uses seed + i
    n_per_request: int = 1  # max samples one HTTP request may return (1 for llama.cpp)
    # probe the endpoint once (per base URL and model; remembered in cache_dir/endpoints.json): n_per_request
    # > 1 is used only if it honours n, else n is split into one request per sample
    probe: bool = True
    supports_json_schema: bool = True
    supports_logprobs: bool = True
    # wire format of a json_schema response_format: "openai" ({"type": "json_schema", "json_schema":
    # {"name", "schema"}}) or "json_object_schema" ({"type": "json_object", "schema": ...}; llama-cpp-python)
    json_schema_format: str = "openai"
    concurrency: int = 8  # requests in flight at most (the cap of the adaptive limit)
    adaptive_concurrency: bool = False  # AIMD between 1 and `concurrency` (face/llm/limiter.py)
    concurrency_start: int | None = None  # the adaptive limit's first value (None: `concurrency`)
    latency_tolerance: float = 2.0  # adaptive: back off when latency exceeds this × its unloaded value
    http_client: str = "aiohttp"  # the openai SDK's HTTP transport: aiohttp (its DefaultAioHttpClient) | httpx
    timeout_s: float = 120.0
    max_retries: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    price_input_per_mtok: float = 0.0  # USD per million input tokens
    price_output_per_mtok: float = 0.0  # USD per million output tokens
    max_calls: int | None = None  # cap on HTTP requests sent (cache hits are free)
    max_cost_usd: float | None = None
    dry_run: bool = False
    force: bool = False  # start even when the cost estimate exceeds max_cost_usd (the budget still stops the run)
    cache_dir: str | None = ".face_cache/llm"
    cache: bool = True
    progress: bool = True
    usage_file: str | None = None  # llm_usage.json written here when the client closes (also after a stop)
    # a server started beside the client, which then uses its base_url and model:
    # {"_target_": "module.Class", **constructor options} (e.g. face.llm.local.LocalServer), or None
    server: dict[str, Any] | None = None
    # the OpenAI Batch API (face/llm/batch.py): requests go as lines of batch jobs, polled until done
    batch: bool = False
    batch_window: str = "24h"  # completion_window of each job
    batch_poll_s: float = 30.0  # seconds between two polls of a job
    batch_collect_s: float = 0.5  # a job is sent once no new line arrived for this long
    batch_max_requests: int = 50_000  # lines per job at most (OpenAI's limit)
    batch_price_factor: float = 0.5  # batch price / list price (estimates, dry runs, budgets)

    def __post_init__(self) -> None:
        self._check_types()
        if self.server is not None and "_target_" not in self.server:
            raise ValueError("llm.server needs a _target_ (the server class, e.g. face.llm.local.LocalServer)")
        if self.json_schema_format not in ("openai", "json_object_schema"):
            raise ValueError("llm.json_schema_format must be 'openai' or 'json_object_schema'")
        if self.http_client not in ("aiohttp", "httpx"):
            raise ValueError(f"llm.http_client must be 'aiohttp' or 'httpx', got {self.http_client!r}")
        if self.n_per_request < 1:
            raise ValueError("llm.n_per_request must be >= 1")
        if self.concurrency < 1:
            raise ValueError("llm.concurrency must be >= 1")
        if self.concurrency_start is not None and self.concurrency_start < 1:
            raise ValueError("llm.concurrency_start must be >= 1 or null")
        if self.latency_tolerance <= 1:
            raise ValueError(f"llm.latency_tolerance must be > 1, got {self.latency_tolerance!r}")
        if isinstance(self.base_url, (list, tuple)):
            if not self.base_url or not all(isinstance(u, str) and u for u in self.base_url):
                raise ValueError("llm.base_url must be a URL or a non-empty list of URLs")
            self.base_url = list(self.base_url)
        if self.api_key_env is not None and not is_env_var_name(self.api_key_env):
            raise ValueError("llm.api_key_env must be the NAME of an environment variable (letters, digits, _), "
                             "not the key itself")
        for name, lo in (("temperature", 0.0), ("max_tokens", 1), ("max_retries", 0),
                         ("backoff_base_s", 0.0), ("backoff_max_s", 0.0), ("price_input_per_mtok", 0.0),
                         ("price_output_per_mtok", 0.0), ("max_calls", 0), ("max_cost_usd", 0.0)):
            v = getattr(self, name)
            if v is not None and not v >= lo:  # NaN too: a cap of NaN would never stop anything
                raise ValueError(f"llm.{name} must be >= {lo}, got {v!r}")
        for name in ("price_input_per_mtok", "price_output_per_mtok", "max_cost_usd"):
            v = getattr(self, name)
            if v is not None and math.isinf(v):  # an infinite price makes every cost inf; null is "no cap"
                raise ValueError(f"llm.{name} must be a finite number, got {v!r}"
                                 + (" (null means no cap)" if name == "max_cost_usd" else ""))
        if self.temperature > 2:
            raise ValueError(f"llm.temperature must be in 0..2, got {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"llm.top_p must be in (0, 1] or null, got {self.top_p!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"llm.timeout_s must be > 0, got {self.timeout_s!r}")
        self.server = None if self.server is None else dict(self.server)
        if self.batch:
            if not (self.cache and self.cache_dir):
                raise ValueError("llm.batch=true needs the cache (llm.cache=true and a cache_dir): batch answers "
                                 "land there, and a half-finished batch is resumed from it")
            if self.server is not None:
                raise ValueError("llm.batch=true needs an endpoint with the OpenAI Batch API (files + batches) "
                                 "at llm.base_url, not a server started by the client")
        for name in ("batch_poll_s", "batch_collect_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"llm.{name} must be > 0, got {getattr(self, name)!r}")
        if self.batch_max_requests < 1:
            raise ValueError(f"llm.batch_max_requests must be >= 1, got {self.batch_max_requests!r}")
        if not 0 < self.batch_price_factor <= 1:
            raise ValueError(f"llm.batch_price_factor must be in (0, 1], got {self.batch_price_factor!r}")

    def _check_types(self) -> None:
        """Every knob has the type of its default (ints for floats are fine; bools are never numbers)."""
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            kind = _KINDS.get(f.name)
            if kind is None or (v is None and f.name in _NULLABLE):
                continue
            ok = isinstance(v, kind) and not (isinstance(v, bool) and bool not in kind)
            if not ok:
                allowed = "a number" if float in kind else {int: "an integer", str: "a string",
                                                             bool: "true or false"}[kind[0]]
                raise ValueError(f"llm.{f.name} must be {allowed}{' or null' if f.name in _NULLABLE else ''}, "
                                 f"got {v!r}")

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

    @property
    def base_urls(self) -> list[str]:
        """Every endpoint URL (a list or a comma-separated string in llm.base_url)."""
        if self.base_url is None:
            return []
        if isinstance(self.base_url, str):
            return [u.strip() for u in self.base_url.split(",") if u.strip()]
        return list(self.base_url)

    @property
    def prices(self) -> tuple[float, float]:
        """USD per million input / output tokens as charged: list prices, × batch_price_factor with batch."""
        f = self.batch_price_factor if self.batch else 1.0
        return self.price_input_per_mtok * f, self.price_output_per_mtok * f

    def replace(self, **changes: Any) -> LLMConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (safe to log: contains the env var name, never the key)."""
        return dataclasses.asdict(self)

    def api_key(self) -> str:
        """The key's value from the environment ("not-needed" for keyless local servers)."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env) or "not-needed"
            register(key)  # redacted wherever it would appear (logs, stop messages, MLflow, captions)
            return key
        return "not-needed"


_NUM = (int, float)
_KINDS: dict[str, tuple[type, ...]] = {
    "backend": (str,), "base_url": (str, list), "api_key_env": (str,), "model": (str,), "temperature": _NUM,
    "max_tokens": (int,), "top_p": _NUM, "seed": (int,), "n_per_request": (int,), "probe": (bool,),
    "adaptive_concurrency": (bool,),    "concurrency_start": (int,), "latency_tolerance": _NUM, "http_client": (str,),
    "supports_json_schema": (bool,),
    "supports_logprobs": (bool,), "json_schema_format": (str,), "concurrency": (int,), "timeout_s": _NUM,
    "max_retries": (int,), "backoff_base_s": _NUM, "backoff_max_s": _NUM,
    "price_input_per_mtok": _NUM, "price_output_per_mtok": _NUM, "max_calls": (int,), "max_cost_usd": _NUM,
    "dry_run": (bool,), "force": (bool,), "cache_dir": (str,), "cache": (bool,), "progress": (bool,),
    "usage_file": (str,), "batch": (bool,), "batch_window": (str,), "batch_poll_s": _NUM, "batch_collect_s": _NUM,
    "batch_max_requests": (int,), "batch_price_factor": _NUM,
}
_NULLABLE = {"concurrency_start", "base_url",
             "api_key_env", "top_p", "seed", "max_calls", "max_cost_usd", "cache_dir", "usage_file"}
