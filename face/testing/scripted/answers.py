"""What the scripted server answers: a deterministic function of a request's messages and seed
(``default_responder``) — a valid instance of a JSON schema asked for (``schema_instance``), this project's
step-by-step answers to its scoring and decomposition prompts, or echo-ish text; its tokens and their logprobs
(``tokenize``, ``token_logprobs``: numeric tokens get a deterministic distribution over the digits)."""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
from typing import Any


def _h(*parts: Any) -> str:
    """The digest of JSON-able parts (a request body's: the hash the request log and the fault draw use)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# ------------------------------------------------------------ schema instances
_WORDS = ["good", "relevant", "clear", "specific", "polite", "helpful", "vague", "short"]


def schema_instance(schema: dict, rng: random.Random) -> Any:
    """A deterministic (given rng) valid instance of a small JSON-schema subset."""
    if "enum" in schema:
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    t = schema.get("type", "object")
    if isinstance(t, list):  # the first type that is not null
        t = next((x for x in t if x != "null"), "null")
    if t == "object":
        return {k: schema_instance(v, rng) for k, v in schema.get("properties", {}).items()}
    if t == "array":
        lo = int(schema.get("minItems", 1))
        hi = int(schema.get("maxItems", lo + 2))
        items = schema.get("items", {"type": "string"})
        return [schema_instance(items, rng) for _ in range(rng.randint(lo, max(lo, hi)))]
    if t == "integer":
        lo = math.ceil(schema.get("minimum", 0))
        return rng.randint(lo, max(lo, math.floor(schema.get("maximum", lo + 10))))
    if t == "number":
        low = float(schema.get("minimum", 0.0))
        return round(low + rng.random() * (float(schema.get("maximum", low + 1.0)) - low), 3)
    if t in ("boolean", "null"):
        return rng.random() < 0.5 if t == "boolean" else None
    lo = int(schema.get("minLength", 1))
    s = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 5)))
    while len(s) < lo:
        s += " " + rng.choice(_WORDS)
    return s[: int(schema.get("maxLength", max(lo, 40)))]


# ------------------------------------------------------------ answers to prompts
def _schema_in_prompt(messages: list[dict]) -> dict | None:
    """A JSON schema embedded in the last user message (prompt-only structured output)."""
    for line in str(_last_user(messages)).splitlines():
        line = line.strip()
        if line.startswith("{") and '"type"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "type" in obj:
                return obj
    return None


_SCORE_FORMAT = re.compile(r'\{"score": <integer from (-?\d+) to (-?\d+)>\}\s*$')
_TARGET_TURN = re.compile(r"Target assistant turn:\nTurn \d+ - \w+: (.*)")


def _last_user(messages: list[dict]) -> Any:
    return next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")


def _reasoned_answer(messages: list[dict], rng: random.Random) -> str | None:
    """Reasoning, then the JSON answer, for this project's step-by-step prompts (scoring, decomposition)."""
    last = str(_last_user(messages))
    m = _SCORE_FORMAT.search(last)
    if m:
        score = rng.randint(int(m.group(1)), int(m.group(2)))
        return f"Step 1: I read the context and the target.\nStep 2: I apply the grades.\n{{\"score\": {score}}}"
    m = _TARGET_TURN.search(last)
    if m and '{"particles": [' in last:
        parts = [s.strip() for s in re.split(r"(?<=[?.!])\s+", m.group(1)) if s.strip()]
        particles = [{"dialogue_act": "preference elicitation" if s.endswith("?") else "recommendation",
                      "mention": " ".join(s.split()[:12]), "user_feedback": "NO_FEEDBACK_PROVIDED"} for s in parts]
        return "Step 1: the turn.\nStep 2: one particle per sentence.\n" + json.dumps({"particles": particles})
    return None


def _formatted_answer(rf: dict, rng: random.Random) -> str | None:
    """A JSON answer to a request whose response_format asks for one (None: it does not)."""
    if rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema") or {}
        return json.dumps(schema_instance(schema, rng))
    if rf.get("type") == "json_object":  # llama-cpp-python style: optional "schema"
        if isinstance(rf.get("schema"), dict):
            return json.dumps(schema_instance(rf["schema"], rng))
        return json.dumps({"answer": rng.randint(1, 5)})
    return None


def default_responder(body: dict) -> str:
    """Deterministic answer as a function of (messages, seed)."""
    messages = body.get("messages", [])
    seed = body.get("seed")
    rng = random.Random(_h(messages, seed))
    answer = _formatted_answer(body.get("response_format") or {}, rng) or _reasoned_answer(messages, rng)
    if answer is not None:
        return answer
    schema = _schema_in_prompt(messages)
    if schema is not None:
        return "Sure, here is my answer:\n```json\n" + json.dumps(schema_instance(schema, rng), indent=1) + "\n```"
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    tail = " ".join(rng.choice(words) for _ in range(3))
    return f"Echo (seed {seed}): {str(_last_user(messages))[:60]} | {tail}"


# ------------------------------------------------------------ tokens and their logprobs
_TOKEN_RE = re.compile(r"\s*\d|\s*[A-Za-z]+|\s*[^\sA-Za-z\d]|\s+")
_ALTERNATIVES = (" the", ".", " and", ",", " a")


def tokenize(text: str) -> list[str]:
    """Simple tokens: words, single digits, single punctuation marks, each with leading whitespace."""
    return _TOKEN_RE.findall(text)


def _token_logprob(tok: str, rng: random.Random) -> tuple[float, list[tuple[str, float]]]:
    """(the token's logprob, the distribution it was drawn from, likeliest first)."""
    s = tok.strip()
    if s.isdigit() and len(s) == 1:
        prefix = tok[: len(tok) - 1]
        logits = {d: rng.random() * 2.0 for d in "0123456789"}
        logits[s] += 2.0  # the emitted digit is the likely one
        z = math.log(sum(math.exp(v) for v in logits.values()))
        return logits[s] - z, sorted(((prefix + d, v - z) for d, v in logits.items()), key=lambda x: -x[1])
    lp = -0.05 - rng.random() * 0.2
    alts = [(a, -float(3 + i) - rng.random()) for i, a in enumerate(_ALTERNATIVES)]
    return lp, [(tok, lp)] + [a for a in alts if a[0] != tok]


def token_logprobs(tokens: list[str], k: int, rng: random.Random) -> list[dict]:
    out = []
    for tok in tokens:
        lp, dist = _token_logprob(tok, rng)
        top = dist[:k]
        if k and all(t != tok for t, _ in top):
            top[-1] = (tok, lp)
        out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top]})
    return out
