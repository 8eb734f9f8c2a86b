"""The FACE paper's LLM baselines as methods, in our own prompts (``face/prompts/baselines/``).

- ``LLMDirect``: one prompt per unit — an evaluated assistant turn (turn-level aspects, with the
  conversation up to it) or the whole conversation (dialogue-level aspects) — asking for the aspect's
  score; ``{"score": k}``, schema-constrained where the endpoint supports it; the mean of ``n`` samples.
- ``LLMCoTICL``: reasoning before the score, with ``k_examples`` rated examples (human labels) drawn from
  the *training fold* only (the optimizer's conversation-level split, ``face.data.split``, fold 0 held
  out); the last JSON object of the reply is the answer. Units of the training fold are scored too (every
  item gets a prediction), but an example is never the unit it is shown for.
- ``GEval``: evaluation steps generated once per aspect by the LLM (cached like every call, registered in
  the MLflow Prompt Registry), then the score as the probability-weighted expectation over the valid score
  tokens (top log-probabilities); where the endpoint gives none (``llm.supports_logprobs=false``) the mean
  of ``n_fallback`` samples at T = 1 (G-Eval's own fallback: 20 samples).

All three write the same run file as FACE, print a cost estimate before sending anything (face/llm/sizes.py's
arithmetic, the units of llm_usage.json), stop after it with ``llm.dry_run=true``, and register their prompt templates
(``face-<aspect>-<method>``). An invalid answer is redrawn by the LLM layer's one loop within ``method.draws``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Sequence

import numpy as np
import pandas as pd
from pydantic import Field

from face.aspects import Aspect
from face.data.schema import Conversation, Instruction
from face.data.split import split_conversations
from face.files import atomic_write_text
from face.llm import ChatRequest
from face.llm.adapters import score_adapter
from face.llm.base import Draws
from face.llm.config import LLMConfig
from face.llm.logprobs import expected_score
from face.llm.sizes import Samples, Size, planned_request
from face.methods import Inputs, MethodOutput
from face.methods.job import LLMJob
from face.pipeline.estimate import Pricing
from face.pipeline.estimators import reasoned_value
from face.pipeline.score_prompts import numbered
from face.predictions import DIALOGUE_COLUMNS, TURN_COLUMNS, Predictions
from face.prompts import render, template_text
from face.settings import Number, nested, settings


@dataclass(frozen=True)
class Unit:
    aspect: Aspect
    conv: Conversation
    turn_ind: int  # -1: the whole conversation (dialogue-level aspect)


def units_of(aspects: Sequence[Aspect], convs: Sequence[Conversation]) -> list[Unit]:
    """Per aspect and conversation: each evaluated assistant turn (a turn-level aspect), else the conversation."""
    return [Unit(a, c, t) for a in aspects for c in convs
            for t in ([t.turn_ind for t in c.evaluated_turns()] if a.level == "turn" else [-1])]


def unit_fields(u: Unit) -> dict[str, str]:
    """Placeholders describing the unit: the conversation (up to the turn for turn-level aspects)."""
    if u.turn_ind < 0:
        return {"unit": "dialogue", "unit_heading": "Dialogue", "conversation": numbered(u.conv.turns),
                "focus": "Rate the whole dialogue."}
    shown = [t for t in u.conv.turns if t.turn_ind <= u.turn_ind]
    return {"unit": "assistant turn", "unit_heading": "Conversation so far", "conversation": numbered(shown),
            "focus": f"Rate the assistant's turn {u.turn_ind} (the last turn shown)."}


def aspect_fields(a: Aspect, judged: str) -> dict[str, str]:
    return {"judged": judged, "aspect": a.name.replace("_", " "), "definition": a.definition,
            "levels": "\n".join(f"{k}: {v}" for k, v in sorted(a.grades.items())) or ", ".join(map(str, a.scale)),
            "scale": ", ".join(map(str, a.scale))}


def label_of(u: Unit) -> float | None:
    """The human label of the unit: the conversation's (a dialogue-level aspect), else its turn's."""
    return (u.conv if u.turn_ind < 0 else u.conv.turn(u.turn_ind)).labels.get(u.aspect.name)


def predictions(units: Sequence[Unit], values: Sequence[float | None]) -> Predictions:
    turn = [(u.aspect.name, u.conv.conv_id, u.turn_ind, v) for u, v in zip(units, values)
            if u.turn_ind >= 0 and v is not None]
    dial = [(u.aspect.name, u.conv.conv_id, v) for u, v in zip(units, values) if u.turn_ind < 0 and v is not None]
    return Predictions(pd.DataFrame(turn, columns=TURN_COLUMNS), pd.DataFrame(dial, columns=DIALOGUE_COLUMNS))


@settings("method")
class _LLMBaseline:
    """Shared mechanics: plan requests, estimate, (dry run), send, parse, aggregate, report."""

    name: str
    uses_llm = True  # the LLM cache and settings are checked before anything runs
    n: Samples  # samples per unit (the mean of the valid ones)
    temperature: Number = Field(ge=0)
    max_tokens: int | None = Field(ge=1)  # null: the baseline's own (16, or 768 with reasoning)
    output_tokens: int = Field(ge=1)  # assumed reply length for the cost estimate
    # an invalid answer is redrawn (fresh sample indices): at most `rounds` rounds, `max_extra` extra draws
    draws: Annotated[Draws, nested(Draws)]
    title: str = ""
    templates: tuple[str, ...] = ()

    def required_files(self, dataset, aspects: Sequence[Aspect]) -> list[str]:
        return []

    # ---- what a subclass provides
    def requests(self, units: Sequence[Unit], inputs: Inputs, client, native: bool) -> list:
        raise NotImplementedError

    def value(self, unit: Unit, result) -> tuple[float | None, int]:
        """(prediction, number of invalid samples): by default the mean of the valid scores."""
        vals = [getattr(s.value, "score", s.value) for s in result.answers]
        return (float(np.mean(vals)) if vals else None), result.invalid_samples

    def prepare(self, inputs: Inputs, client, native: bool) -> None:
        """Per-run set-up that may call the LLM (G-Eval's steps)."""

    # ---- shared
    def estimate(self, reqs: Sequence, inputs: Inputs) -> pd.DataFrame:
        pricing = Pricing.of(inputs.needs_llm(f"method={self.name}"))
        size = sum((planned_request(r.messages, r.n, pricing.n_per_request, self.output_tokens) for r in reqs), Size())
        return pd.DataFrame([{"stage": f"score:{self.name}", "units": len(reqs), **asdict(size),
                              "cost_usd": pricing.cost(size.input_tokens, size.output_tokens)}])

    def score_request(self, template: str, u: Unit, inputs: Inputs, native: bool, max_tokens: int,
                      more: dict[str, str] | None = None, **sampling: Any) -> Any:
        """A request for ``u``'s score alone, ``{"score": k}`` (schema-constrained where the endpoint takes one);
        ``more``: the template's own placeholders."""
        msgs = render(f"baselines/{template}", **aspect_fields(u.aspect, inputs.dataset.judged), **unit_fields(u),
                      **(more or {}))
        adapter = score_adapter(u.aspect.scale)
        req = ChatRequest(msgs, max_tokens=max_tokens, tag=f"{self.name}:{u.aspect.name}", **sampling)
        return replace(adapter.request(req, native), adapter=adapter, draws=self.draws)  # redrawn within draws

    def how(self, llm: LLMConfig) -> str:
        return f"n={self.n}, T={self.temperature}"

    def describe(self, llm: LLMConfig) -> str:
        out = f"{self.title} — LLM: {llm.model} ({llm.backend}); {self.how(llm)}"
        if llm.backend in ("local", "scripted"):
            out += "; PIPELINE CHECK ONLY, no judging signal"
        return out

    def predict(self, inputs: Inputs) -> MethodOutput:
        lcfg = inputs.needs_llm(f"method={self.name}")
        native = lcfg.supports_json_schema
        units = units_of(inputs.aspects, inputs.convs)
        job = LLMJob(lcfg, inputs.run_dir, self.describe(lcfg), name=self.name, summary=inputs.summary)
        text = "\n\n".join(f"--- {t}\n{template_text('baselines/' + t)}" for t in self.templates)  # its templates
        inputs.register_instructions(self.name, lambda a: [Instruction(f"{self.name}-template", text)])
        if job.dry_run:  # G-Eval's steps are not drawn: its requests are estimated without them
            job.gate(self.estimate(self.requests(units, inputs, None, native), inputs))
            return job.dry_run_output()
        with job.client() as client:
            self.prepare(inputs, client, native)
            reqs = self.requests(units, inputs, client, native)
            job.gate(self.estimate(reqs, inputs))  # over llm.max_cost_usd: refused before the scoring requests
            results = client.run_batch(reqs, desc=self.name)
            job.finish(client)
        values, invalid = zip(*(self.value(u, r) for u, r in zip(units, results))) if units else ((), ())
        detail = pd.DataFrame({"aspect": [u.aspect.name for u in units], "conv_id": [u.conv.conv_id for u in units],
                               "turn_ind": [u.turn_ind for u in units], "score": list(values),
                               "invalid_samples": list(invalid)})
        detail_path = atomic_write_text(inputs.run_dir / f"scores_{self.name}.csv", detail.to_csv(index=False))
        job.metrics[f"{self.name}.units"] = len(units)
        job.metrics[f"{self.name}.units_without_score"] = int(detail["score"].isna().sum())
        job.metrics[f"{self.name}.invalid_samples"] = int(np.sum(invalid)) if units else 0
        return MethodOutput(predictions(units, values), detail, job.label, [*job.artifacts, detail_path], job.metrics)


@settings("method", conf="method/llm_direct.yaml")
class LLMDirect(_LLMBaseline):
    title: str = "LLM-Direct (one prompt per turn / dialogue, score only)"
    templates: tuple[str, ...] = ("direct.txt",)

    def requests(self, units, inputs, client, native):
        return [self.score_request("direct.txt", u, inputs, native, self.max_tokens or 16, n=self.n,
                                   temperature=self.temperature) for u in units]


def training_conversations(convs: Sequence[Conversation], folds: int, seed: int) -> list[Conversation]:
    """The optimizer's training side (fold 0 held out as test, no dev)."""
    split = split_conversations(convs, folds=folds, fold=0, dev_fraction=0.0, seed=seed)
    train = set(split.train)
    return [c for c in convs if c.conv_id in train]


@settings("method", conf="method/llm_cot_icl.yaml")
class LLMCoTICL(_LLMBaseline):
    title: str = "LLM-CoT+ICL (reasoning, then the score; in-context examples from the training fold)"
    templates: tuple[str, ...] = ("cot_icl.txt",)
    k_examples: int = Field(ge=0)  # rated examples in the prompt, from the training fold
    folds: int = Field(ge=2)  # the optimizer's conversation-level split (fold 0 held out)
    split_seed: int
    example_chars: int = Field(ge=1)  # an example's conversation is cut to its last N characters

    def examples(self, aspect: Aspect, pool: Sequence[Unit], exclude: Unit, rng: np.random.Generator) -> str:
        cands = [p for p in pool if p.conv.conv_id != exclude.conv.conv_id]
        if not cands or self.k_examples == 0:
            return "(none)"
        pick = rng.choice(len(cands), size=min(self.k_examples, len(cands)), replace=False)
        parts = []
        for j, p in enumerate((cands[i] for i in sorted(pick)), 1):
            f = unit_fields(p)
            conv = f["conversation"][-self.example_chars:]
            parts.append(f"Example {j} ({f['unit']}):\n{conv}\n{f['focus']}\nHuman score: {label_of(p):g}")
        return "\n\n".join(parts)

    def requests(self, units, inputs, client, native):
        train = training_conversations(inputs.convs, self.folds, self.split_seed)
        out = []
        for a in inputs.aspects:
            pool = [u for u in units_of([a], train) if label_of(u) is not None]
            rng = np.random.default_rng([self.split_seed, len(a.name)])
            schema = json.dumps(score_adapter(a.scale).schema, separators=(",", ":"))
            for u in (u for u in units if u.aspect is a):
                msgs = render("baselines/cot_icl.txt", **aspect_fields(a, inputs.dataset.judged), **unit_fields(u),
                              examples=self.examples(a, pool, u, rng), schema=schema)
                out.append(ChatRequest(msgs, n=self.n, temperature=self.temperature, max_tokens=self.max_tokens or 768,
                                       tag=f"{self.name}:{a.name}", adapter=_ReasonedScore(a.scale), draws=self.draws))
        return out


class _ReasonedScore:
    """Adapter for a reasoned reply: the last JSON object's score, one of the scale (no schema is sent)."""

    def __init__(self, scale: Sequence[int]):
        self.scale = tuple(scale)

    def parse(self, answer):
        if getattr(answer, "finish_reason", "") == "length":
            return "truncated (finish_reason=length)"
        v = reasoned_value(answer.text if hasattr(answer, "text") else answer, self.scale)
        return v if v is not None else f"no final JSON score in {self.scale}"


@settings("method", conf="method/g_eval.yaml")
class GEval(_LLMBaseline):
    title: str = "G-Eval (LLM-written evaluation steps, probability-weighted score)"
    templates: tuple[str, ...] = ("geval_steps.txt", "geval_score.txt")
    top_logprobs: int = Field(ge=0)  # alternatives per token position asked for (the score tokens)
    n_fallback: Samples  # samples where the endpoint gives no log-probabilities
    steps_max_tokens: int = Field(ge=1)

    def __post_init__(self) -> None:
        self._steps: dict[str, str] = {}
        self._logprobs = True

    def prepare(self, inputs, client, native):
        reqs = [ChatRequest(render("baselines/geval_steps.txt", **aspect_fields(a, inputs.dataset.judged),
                                   unit="dialogue" if a.level == "dialogue" else "assistant turn in a conversation"),
                            temperature=0.0, max_tokens=self.steps_max_tokens, tag=f"{self.name}:steps:{a.name}")
                for a in inputs.aspects]
        for a, r in zip(inputs.aspects, client.run_batch(reqs, desc="g_eval steps")):
            self._steps[a.name] = r.text.strip() or "1. Read the conversation.\n2. Rate the quality."
        inputs.register_instructions("g_eval_steps", lambda a: [Instruction("g_eval-steps", self._steps[a.name])])
        atomic_write_text(inputs.run_dir / "g_eval_steps.json", pd.Series(self._steps).to_json(indent=1))

    def requests(self, units, inputs, client, native):
        self._logprobs = bool(inputs.llm.supports_logprobs)
        sampling = (dict(n=1, temperature=0.0, logprobs=True, top_logprobs=self.top_logprobs) if self._logprobs
                    else dict(n=self.n_fallback, temperature=1.0))
        return [self.score_request("geval_score.txt", u, inputs, native, self.max_tokens or 16,
                                   {"steps": self._steps.get(u.aspect.name, "(generated by the LLM at run time)")},
                                   **sampling) for u in units]

    def value(self, unit, result):
        if not self._logprobs:
            return super().value(unit, result)
        s = result.answers[0] if result.answers else None
        if s is None:
            return None, 1
        exp = expected_score(s, unit.aspect.scale, key="score")
        if exp is None or exp.value is None:  # no distribution at the answer: the sampled score itself
            return float(s.value.score), 0
        return float(exp.value), 0

    def how(self, llm):
        return (f"top-{self.top_logprobs} logprobs expectation" if llm.supports_logprobs
                else f"no logprobs: mean of {self.n_fallback} samples at T=1")
