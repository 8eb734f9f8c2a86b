"""Structured (JSON) outputs: tolerant extraction, a small schema validator, retries.

`chat_json` asks for JSON (native `response_format` json_schema when the backend
supports it, otherwise the schema is put into the prompt) and validates the
answer. An invalid answer is retried with a *different sample index* (so the
cache cannot return the same invalid text); after `max_attempts` the result has
`value=None` and the reason in `fallback` -- never a silent default.
"""
from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from .client import ChatRequest, Completion, LLMClient

Check = Callable[[Any], "str | None"]

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


def extract_json(text: str) -> Any:
    """Parse JSON from model output: bare JSON, a ``` code fence, or JSON after/among prose.

    Raises ValueError if no JSON value can be found."""
    s = text.strip()
    try:
        return json.loads(s)
    except ValueError:
        pass
    for m in _FENCE_RE.finditer(text):
        try:
            return json.loads(m.group(1).strip())
        except ValueError:
            continue
    dec = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                obj, _ = dec.raw_decode(text, i)
                return obj
            except ValueError:
                continue
    raise ValueError(f"no JSON found in model output: {text[:120]!r}")


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(obj: Any, schema: dict, path: str = "$") -> list[str]:
    """Errors of `obj` against a JSON-schema subset (empty list = valid).

    Supported: type (incl. list of types), properties, required, enum, const,
    minimum, maximum, items, minItems, maxItems, additionalProperties (false or
    a schema), minLength, maxLength."""
    errs: list[str] = []
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_TYPES[x](obj) for x in types):
            return [f"{path}: expected {'/'.join(types)}, got {type(obj).__name__}"]
    if "enum" in schema and obj not in schema["enum"]:
        errs.append(f"{path}: {obj!r} not in {schema['enum']}")
    if "const" in schema and obj != schema["const"]:
        errs.append(f"{path}: expected {schema['const']!r}")
    if _TYPES["number"](obj):
        if "minimum" in schema and obj < schema["minimum"]:
            errs.append(f"{path}: {obj} < minimum {schema['minimum']}")
        if "maximum" in schema and obj > schema["maximum"]:
            errs.append(f"{path}: {obj} > maximum {schema['maximum']}")
    if isinstance(obj, str):
        if "minLength" in schema and len(obj) < schema["minLength"]:
            errs.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(obj) > schema["maxLength"]:
            errs.append(f"{path}: longer than {schema['maxLength']}")
    if isinstance(obj, list):
        if "minItems" in schema and len(obj) < schema["minItems"]:
            errs.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(obj) > schema["maxItems"]:
            errs.append(f"{path}: more than {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for i, v in enumerate(obj):
                errs += validate(v, schema["items"], f"{path}[{i}]")
    if isinstance(obj, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in obj:
                errs.append(f"{path}: missing required {k!r}")
        for k, v in obj.items():
            if k in props:
                errs += validate(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected property {k!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += validate(v, schema["additionalProperties"], f"{path}.{k}")
    return errs


@dataclass
class JsonResult:
    value: Any  # None when every attempt failed
    attempts: int
    fallback: str | None  # reason when value is None (or for dry runs), else None
    raw_texts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line per rejected attempt
    sample_index: int = 0  # sample index of the accepted answer

    @property
    def ok(self) -> bool:
        return self.fallback is None


def schema_prompt(schema: dict) -> str:
    return ("Respond with only a JSON value that conforms to this JSON schema (no other text):\n"
            + json.dumps(schema, separators=(",", ":")))


def json_request(request: ChatRequest, schema: dict, native: bool, name: str = "answer") -> ChatRequest:
    """The request with a json_schema response_format (native) or the schema appended to the prompt."""
    if native:
        rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        return replace(request, response_format=rf)
    msgs = list(request.messages)
    idx = max((i for i, (r, _) in enumerate(msgs) if r == "user"), default=len(msgs) - 1)
    role, content = msgs[idx]
    msgs[idx] = (role, content.rstrip() + "\n\n" + schema_prompt(schema))
    return replace(request, messages=tuple(msgs), response_format=None)


def parse_and_check(comp: Completion, schema: dict, check: Check | None) -> tuple[Any, str | None]:
    """(value, None) if valid, else (None, reason)."""
    if comp.finish_reason == "length":
        return None, "truncated (finish_reason=length)"
    try:
        value = extract_json(comp.text)
    except ValueError as e:
        return None, f"invalid JSON: {e}"
    errs = validate(value, schema)
    if errs:
        return None, "schema: " + "; ".join(errs[:5])
    if check is not None:
        msg = check(value)
        if msg:
            return None, f"check: {msg}"
    return value, None


async def chat_json_samples(client: LLMClient, request: ChatRequest, schema: dict, check: Check | None = None,
                            max_attempts: int = 3, name: str = "answer") -> list[JsonResult]:
    """request.n samples, each parsed and validated; invalid sample i of attempt a is
    retried as sample index first_sample + i + a*n (fresh seed, not the cached invalid one)."""
    req = json_request(request, schema, native=client.cfg.supports_json_schema, name=name)
    n, base = req.n, req.first_sample
    first = await client.chat(req)
    results: list[JsonResult] = []
    pending: list[tuple[int, JsonResult]] = []
    for i, comp in enumerate(first.samples):
        jr = JsonResult(value=None, attempts=1, fallback=None, raw_texts=[comp.text], sample_index=comp.sample_index)
        results.append(jr)
        if comp.dry_run:
            jr.fallback = "dry_run"
            continue
        value, err = parse_and_check(comp, schema, check)
        if err is None:
            jr.value = value
        else:
            jr.errors.append(err)
            pending.append((i, jr))

    async def retry(i: int, jr: JsonResult) -> None:
        for a in range(1, max_attempts):
            r = await client.chat(replace(req, n=1, first_sample=base + i + a * n))
            comp = r.samples[0]
            jr.attempts += 1
            jr.raw_texts.append(comp.text)
            value, err = parse_and_check(comp, schema, check)
            if err is None:
                jr.value, jr.sample_index = value, comp.sample_index
                return
            jr.errors.append(err)
        jr.fallback = f"no valid JSON after {jr.attempts} attempts; last error: {jr.errors[-1]}"
        client.usage.note_fallback(req.tag, jr.fallback)

    await asyncio.gather(*(retry(i, jr) for i, jr in pending))
    if max_attempts <= 1:
        for _, jr in pending:
            if jr.fallback is None:
                jr.fallback = f"no valid JSON after 1 attempt; last error: {jr.errors[-1]}"
                client.usage.note_fallback(req.tag, jr.fallback)
    return results


async def chat_json(client: LLMClient, request: ChatRequest, schema: dict, check: Check | None = None,
                    max_attempts: int = 3, name: str = "answer") -> JsonResult:
    """One validated JSON answer (request.n is taken as 1)."""
    res = await chat_json_samples(client, replace(request, n=1), schema, check, max_attempts, name)
    return res[0]


def run_json_batch(client: LLMClient, requests: Sequence[ChatRequest], schema: dict, check: Check | None = None,
                   max_attempts: int = 3, desc: str = "LLM json", name: str = "answer") -> list[list[JsonResult]]:
    """Synchronous batch: for each request, its n validated JsonResults (order preserved)."""
    return client.run_async(_json_batch(client, list(requests), schema, check, max_attempts, desc, name))


async def _json_batch(client, requests, schema, check, max_attempts, desc, name):
    from .client import _Progress

    bar = _Progress(len(requests), desc, enabled=client.cfg.progress, usage=client.usage)

    async def one(r: ChatRequest) -> list[JsonResult]:
        out = await chat_json_samples(client, r, schema, check, max_attempts, name)
        bar.update(0, failed=any(j.value is None for j in out))
        return out

    try:
        out = await asyncio.gather(*(one(r) for r in requests), return_exceptions=True)
    finally:
        bar.close()
    for x in out:
        if isinstance(x, BaseException):
            raise x  # every other request has settled (and is cached)
    return out
