"""Textual gradients: an LLM critiques an instruction from the items it predicted worst.

One request per beam instruction with n = α samples; each sample is one critique
(``{"problem", "change"}``, schema-validated; invalid answers are drawn again by the client).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from face.aspects import Aspect
from face.llm import ChatRequest
from face.llm.adapters import JsonAdapter
from face.optimize.config import WriterConfig
from face.prompts import render


class Critique(BaseModel):
    model_config = ConfigDict(extra="ignore")
    problem: str = Field(min_length=1)
    change: str = Field(min_length=1)

    def text(self) -> str:
        return f"Problem: {self.problem.strip()}\nSuggested change: {self.change.strip()}"


CRITIQUE_SCHEMA = {
    "type": "object",
    "properties": {"problem": {"type": "string", "minLength": 1, "maxLength": 800},
                   "change": {"type": "string", "minLength": 1, "maxLength": 800}},
    "required": ["problem", "change"],
    "additionalProperties": False,
}
critique_adapter = JsonAdapter(Critique, name="critique", schema=CRITIQUE_SCHEMA)


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


def gradient_request(aspect: Aspect, instruction: str, examples: list[dict], alpha: int, cfg: WriterConfig,
                     native: bool, judged: str = "conversational recommender systems") -> ChatRequest:
    messages = render("optimize/gradient.txt", judged=judged, aspect=aspect.name.replace("_", " "),
                      level=aspect.level, definition=aspect.definition, low=aspect.low, high=aspect.high,
                      unit=unit_noun(aspect), instruction=instruction.strip(), n_examples=len(examples),
                      examples=format_examples(examples, aspect))
    req = ChatRequest(messages=messages, n=alpha, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                      tag=f"optimize:gradient:{aspect.name}")
    return critique_adapter.request(req, native=native, validate=True)


def critiques(result) -> list[str]:
    """The valid critiques of one gradient request (invalid samples are left out)."""
    return [s.value.text() for s in result.samples if getattr(s, "value", None) is not None]
