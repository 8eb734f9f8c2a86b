"""The writer: the LLM calls that turn the worst-predicted items into new instructions, batched per round.

- Textual gradients: one request per beam instruction with n = α samples; each sample is one critique
  (``{"problem", "change"}``) of the instruction from the items it predicted worst.
- Rewrites: one request per critique with n = β samples. The answer is structured (a task description and 2-5
  steps, each with a yes/no check about the particle) and rendered to text by ``instruction_text``, so every
  candidate has the same shape whatever the LLM: "Task: …", "Step 1: …", "Check: Does the particle …?".

Both answers are schema-validated; invalid answers are drawn again by the client, and left out if still invalid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pydantic import BaseModel, Field

from face.aspects import Aspect
from face.llm import ChatRequest
from face.llm.adapters import JsonAdapter
from face.optimize.checkpoint import Candidate
from face.optimize.config import OptimizerConfig
from face.prompts import render


class Critique(BaseModel):
    problem: str = Field(min_length=1)
    change: str = Field(min_length=1)


class Step(BaseModel):
    action: str = Field(min_length=1)
    check: str = Field(min_length=1)


class Rewrite(BaseModel):
    task: str = Field(min_length=1)
    steps: list[Step] = Field(min_length=1, max_length=8)


def _text(most: int) -> dict:
    return {"type": "string", "minLength": 1, "maxLength": most}


def _object(**properties: dict) -> dict:
    """A JSON object schema with exactly ``properties``, all required."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


CRITIQUE_SCHEMA = _object(problem=_text(800), change=_text(800))
REWRITE_SCHEMA = _object(task=_text(300), steps={"type": "array", "minItems": 2, "maxItems": 5,
                                                 "items": _object(action=_text(300), check=_text(200))})
ADAPTERS: dict[str, JsonAdapter[Any]] = {  # by the template (optimize/<kind>.txt) whose answer they read
    "gradient": JsonAdapter(Critique, name="critique", schema=CRITIQUE_SCHEMA),
    "rewrite": JsonAdapter(Rewrite, name="instruction", schema=REWRITE_SCHEMA)}


def unit_noun(aspect: Aspect) -> str:
    return "assistant turn" if aspect.level == "turn" else "dialogue"


def format_examples(examples: list[dict], aspect: Aspect) -> str:
    blocks = []
    for k, ex in enumerate(examples, 1):
        lines = [f"Example {k} ({unit_noun(aspect)}):", ex["context"], "Particles and the judge's scores:"]
        for p in ex["particles"] or []:
            score = "no valid score" if p["score"] != p["score"] else f"{p['score']:.2f}"
            where = f"turn {p['turn']}, " if aspect.level == "dialogue" else ""
            lines.append(f"- [{where}{p['dialogue_act']}] {p['mention']} | user feedback: {p['user_feedback']} "
                         f"-> {score}")
        if not ex["particles"]:
            lines.append("- (no particles)")
        pred = "none" if ex["pred"] != ex["pred"] else f"{ex['pred']:.2f}"
        lines.append(f"Judge's average: {pred}; human (gold) score: {ex['gold']:g}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def instruction_text(answer: Rewrite) -> str:
    steps = [f"Step {k}: {' '.join(s.action.split())}\n  Check: {' '.join(s.check.split())}"
             for k, s in enumerate(answer.steps, 1)]
    return "\n".join([f"Task: {' '.join(answer.task.split())}", *steps])


@dataclass
class Writer:
    """Gradient and rewrite calls through one LLM client (batched per round)."""

    client: Any
    aspect: Aspect
    cfg: OptimizerConfig
    native: bool
    judged: str = "conversational recommender systems"

    def _ask(self, kind: str, n: int, prompts: list[dict]) -> list[list[Any]]:
        """One request of template ``optimize/<kind>.txt`` per prompt's values, ``n`` samples each: the valid
        answers of each."""
        a, cfg = self.aspect, self.cfg.writer
        reqs = []
        for values in prompts:
            messages = render(f"optimize/{kind}.txt", judged=self.judged, aspect=a.name.replace("_", " "),
                              level=a.level, definition=a.definition, low=a.low, high=a.high, **values)
            req = ChatRequest(messages=messages, n=n, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                              tag=f"optimize:{kind}:{a.name}")
            reqs.append(ADAPTERS[kind].request(req, native=self.native, validate=True))
        results = self.client.run_batch(reqs, desc=f"{kind}s {a.name}")
        return [[s.value for s in r.samples if getattr(s, "value", None) is not None] for r in results]

    def gradients(self, jobs: Sequence[tuple[Candidate, list[dict]]]) -> list[list[str]]:
        prompts = [{"unit": unit_noun(self.aspect), "instruction": c.text.strip(), "n_examples": len(ex),
                    "examples": format_examples(ex, self.aspect)} for c, ex in jobs]
        return [[f"Problem: {v.problem.strip()}\nSuggested change: {v.change.strip()}" for v in answers]
                for answers in self._ask("gradient", self.cfg.alpha, prompts)]

    def rewrites(self, jobs: Sequence[tuple[Candidate, str]], words: int = 50) -> list[list[str]]:
        prompts = [{"instruction": c.text.strip(), "critique": g.strip(), "words": words} for c, g in jobs]
        return [[instruction_text(v) for v in answers] for answers in self._ask("rewrite", self.cfg.beta, prompts)]
