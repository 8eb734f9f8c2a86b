"""Rewrites: an LLM turns an instruction and one critique into a new short instruction.

One request per critique with n = β samples. The answer is structured (a task description and 2-5
steps, each with a yes/no check about the particle) and rendered to text by ``instruction_text``, so
every candidate has the same shape whatever the LLM: "Task: …", "Step 1: …", "Check: Does the particle …?".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from face.aspects import Aspect
from face.llm import ChatRequest
from face.llm.adapters import JsonAdapter
from face.optimize.config import WriterConfig
from face.prompts import render


class Step(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: str = Field(min_length=1)
    check: str = Field(min_length=1)


class Rewrite(BaseModel):
    model_config = ConfigDict(extra="ignore")
    task: str = Field(min_length=1)
    steps: list[Step] = Field(min_length=1, max_length=8)


REWRITE_SCHEMA = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "maxLength": 300},
        "steps": {"type": "array", "minItems": 2, "maxItems": 5,
                  "items": {"type": "object",
                            "properties": {"action": {"type": "string", "minLength": 1, "maxLength": 300},
                                           "check": {"type": "string", "minLength": 1, "maxLength": 200}},
                            "required": ["action", "check"], "additionalProperties": False}},
    },
    "required": ["task", "steps"],
    "additionalProperties": False,
}
rewrite_adapter = JsonAdapter(Rewrite, name="instruction", schema=REWRITE_SCHEMA)


def instruction_text(answer: Rewrite) -> str:
    lines = [f"Task: {' '.join(answer.task.split())}"]
    for k, s in enumerate(answer.steps, 1):
        check = " ".join(s.check.split())
        lines.append(f"Step {k}: {' '.join(s.action.split())}\n  Check: {check}")
    return "\n".join(lines)


def rewrite_request(aspect: Aspect, instruction: str, critique: str, beta: int, cfg: WriterConfig, native: bool,
                    judged: str = "conversational recommender systems", words: int = 50) -> ChatRequest:
    messages = render("optimize/rewrite.txt", judged=judged, aspect=aspect.name.replace("_", " "), level=aspect.level,
                      definition=aspect.definition, low=aspect.low, high=aspect.high,
                      instruction=instruction.strip(), critique=critique.strip(), words=words)
    req = ChatRequest(messages=messages, n=beta, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                      tag=f"optimize:rewrite:{aspect.name}")
    return rewrite_adapter.request(req, native=native, validate=True)


def rewritten(result) -> list[str]:
    """The instructions of one rewrite request (invalid samples are left out)."""
    return [instruction_text(s.value) for s in result.samples if getattr(s, "value", None) is not None]
